//! Where the protocols that the loom models check take their atomics
//! from: std normally, loom's model-checked twins under `--cfg loom`, so
//! that a model runs the real code rather than a copy of it (`calls.rs`,
//! `log_owner.rs` and their models). `handshake.rs`, `registry.rs`,
//! `root_slots.rs` and `cards.rs` switch between the two themselves.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicUsize};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicUsize};

pub(crate) use std::sync::atomic::Ordering;
