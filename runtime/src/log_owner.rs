//! The owner word of a [`GcLog`](crate::GcLog) ([`LogOwner`]): which
//! object the markers found the log in, and the Dekker pair that orders a
//! writer's unreported stores against a marker's reads of the cells.
//! Compiled under loom too, where `log_owner_model.rs` runs it.

use crate::sync::{fence, AtomicUsize, Ordering};

/// The owner of a log that markers found inside two objects: a record
/// cannot name one object to trace again, so it makes the next cycle full.
pub(crate) const SHARED_OWNER: usize = 1;

/// The object the markers last found a log in: 0 until a marker traces
/// the object holding the log, then that object, or [`SHARED_OWNER`] for
/// good. Set by markers ([`adopt`](Self::adopt)), read by writers.
#[derive(Debug)]
pub(crate) struct LogOwner(AtomicUsize);

impl LogOwner {
    /// No marker has met the log yet.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        LogOwner(AtomicUsize::new(0))
    }

    /// No marker has met the log yet (loom's atomics have no `const fn`
    /// constructor).
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        LogOwner(AtomicUsize::new(0))
    }

    /// The owner as last set (relaxed: a writer that must see a marker's
    /// store reads it through [`after_stores`](Self::after_stores)).
    #[inline]
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// The writer's half of the Dekker pair, after stores the object's
    /// `Trace` did not report before them: a sequentially consistent
    /// fence, then the owner. If it reads 0, every marker that traces the
    /// object reads the cells after the stores (its fence in `adopt`); if
    /// not, the writer shades what it stored.
    #[inline]
    pub(crate) fn after_stores(&self) -> usize {
        fence(Ordering::SeqCst);
        self.get()
    }

    /// A marker tracing object `obj` met the log: `obj` is its owner,
    /// unless another object was before. Every way out but one is followed
    /// by a sequentially consistent fence before the marker reads the
    /// object's cells: the Dekker pair with [`after_stores`](Self::after_stores).
    ///
    /// The way out without it finds `obj` already the owner: the marker
    /// that made it so fenced, and reads (or has read) `obj`'s cells after
    /// its fence, so a writer that read the owner as 0 before that store
    /// is covered by that marker's trace; and a store made in an earlier
    /// cycle is read by every later call. Each other way may meet an owner
    /// another marker set this cycle for *another* object (a log shared
    /// through an `Arc`): that marker traces its own object only, so this
    /// one must order its own reads after what it saw. Without the fence a
    /// marker that finds the other owner reads its object's cells
    /// unordered (a failed compare-and-swap orders nothing on AArch64, and
    /// a relaxed load nothing anywhere), and can miss a store whose writer
    /// read the owner as 0 and shaded nothing (`log_owner_model.rs`).
    #[inline]
    pub(crate) fn adopt(&self, obj: usize) {
        if self.claim(obj) != Claim::Already {
            fence(Ordering::SeqCst);
        }
    }

    /// `adopt`'s update of the owner, without its fence.
    #[inline]
    pub(crate) fn claim(&self, obj: usize) -> Claim {
        let o = self.0.load(Ordering::Relaxed);
        if o == obj {
            return Claim::Already;
        }
        if o == 0 {
            match self
                .0
                .compare_exchange(0, obj, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Claim::Won,
                Err(SHARED_OWNER) => {}
                Err(x) if x == obj => return Claim::Already,
                Err(_) => self.0.store(SHARED_OWNER, Ordering::Relaxed),
            }
        } else if o != SHARED_OWNER {
            self.0.store(SHARED_OWNER, Ordering::Relaxed);
        }
        Claim::Shared
    }
}

/// How [`LogOwner::claim`] found the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The object was the owner already.
    Already,
    /// The object is the owner now, and was not before.
    Won,
    /// Another object was, or is, the owner too: the log is shared.
    Shared,
}
