//! loam-collections: managed strings, lists and dictionaries built on loam-runtime's public API.
//!
//! Not yet built: a later issue fills this crate. It uses only `loam-runtime`'s
//! public API, which is the proof that users can write their own managed
//! collections.
