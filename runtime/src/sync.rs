//! Where the protocols that the loom models check take their atomics
//! from: std normally, loom's model-checked twins under `--cfg loom`, so
//! that a model runs the real code rather than a copy of it (`calls.rs`
//! and `call_entry_model.rs`). `handshake.rs`, `registry.rs`,
//! `root_slots.rs` and `cards.rs` switch between the two themselves.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;

pub(crate) use std::sync::atomic::Ordering;
