//! Where the code that the loom models run takes its atomics from: std
//! normally, loom's model-checked twins under `--cfg loom`, so that a
//! model runs the real code rather than a copy of it (`calls.rs`,
//! `log_owner.rs`, `handshake.rs`, `registry.rs`, `root_slots.rs`,
//! `cards.rs`, `runtime_count.rs`). `handshake.rs` switches its mutex and condition variable
//! itself (parking_lot's outside loom), and `registry.rs` its cell.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};

pub(crate) use std::sync::atomic::Ordering;
