//! loam-derive: `#[derive(Trace)]` for loam's managed types.
//!
//! Not yet built: issue #4 fills this crate.
