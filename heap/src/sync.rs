//! The one place this crate takes its atomics from: std normally, loom's
//! model-checked twins under `--cfg loom`, so the loom models run the real code.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};
#[cfg(loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

pub(crate) use std::sync::atomic::Ordering;

/// `loom::model` for the crate's models: each execution begins with no
/// loom cells beside free blocks' words (`block::shadow`), whose cells
/// belong to one execution.
#[cfg(all(test, loom))]
pub(crate) fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    loom::model(move || {
        crate::block::shadow::reset();
        f()
    });
}
