//! How many runtimes have objects in loam's pages ([`RuntimeCount`]):
//! a sweep that finds its runtime alone reads no object header to tell
//! whose a dead block is. Compiled under loom too, where
//! `runtime_count_model.rs` runs this code against a cycle's seal.
//!
//! # Why a runtime may start while a cycle runs
//! A sweep frees the unmarked blocks of its snapshot: the blocks allocated
//! before its cycle raised the heap's seal epoch, and those allocated by
//! allocations that did not read the raised epoch (`loam_heap::seal`).
//! Another runtime's objects may be among the latter, and with
//! `alone` the sweep would free them as its own. A runtime that starts
//! while a cycle runs is counted without the cycle lock: a start that
//! waits for it hangs when the cycle holds the lock while it waits for a
//! `mutate` call, and the call waits for the thread building the runtime
//! (a scoped thread of the call). Counting late is safe:
//! 1. a runtime's start adds to the count ([`RuntimeCount::start`]);
//! 2. each of its mutators fences (SeqCst, `F2`) as it attaches, before
//!    any of its allocations, which read the seal epoch
//!    ([`before_first_allocation`]); the attach comes after the start
//!    returned, so the count's change happens before `F2`;
//! 3. the cycle raises the seal epoch, then fences (SeqCst, `F1`), then
//!    reads the count ([`RuntimeCount::alone_since_seal`]), on its
//!    coordinator.
//!
//! If the cycle's read misses the new count, then `F1` precedes `F2` in
//! the fences' total order (C++20's rule for a read that is coherence-
//! ordered before a write: a SeqCst fence that happens before the read
//! precedes one that the write happens before). Then the rule the other
//! way round makes every allocation after `F2` read the raised epoch (or
//! a later one): the mutator seals its page before it allocates, and none
//! of its objects is in the snapshot. So either the sweep reads headers,
//! or the new runtime has no object among the blocks it sweeps. A count
//! taken back as a runtime ends only makes a sweep read more headers than
//! it needs. The model's failing variant leaves out the attach's fence.

use crate::sync::{fence, AtomicUsize, Ordering};

/// The runtimes alive whose objects live in loam's pages (module docs). A
/// runtime over a `GlobalAlloc` has none there: counting it would make
/// every page sweep beside it read every header.
#[derive(Debug)]
pub(crate) struct RuntimeCount(AtomicUsize);

impl RuntimeCount {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        RuntimeCount(AtomicUsize::new(0))
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        RuntimeCount(AtomicUsize::new(0))
    }

    /// A runtime over loam's pages starts (module docs, 1).
    pub(crate) fn start(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// A runtime started by [`start`](Self::start) ends, or its start
    /// failed.
    pub(crate) fn end(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether no other runtime's object is among the blocks of a
    /// snapshot whose seal the caller raised (module docs, 3).
    pub(crate) fn alone_since_seal(&self) -> bool {
        fence(Ordering::SeqCst);
        self.0.load(Ordering::Relaxed) == 1
    }
}

/// A mutator attaches: before any of its allocations (module docs, 2).
pub(crate) fn before_first_allocation() {
    fence(Ordering::SeqCst);
}
