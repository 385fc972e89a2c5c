//! loom model of a log's owner, shared by two objects (`--cfg loom`): the
//! real [`LogOwner::adopt`] against [`LogOwner::after_stores`]
//! (`log_owner.rs`).
//!
//! A log reached from two objects (an `Arc` shared between them): a
//! mutator stores into object 2's cell without the barrier, fences and
//! reads the log's owner (`after_stores`), and shades the cell's value
//! unless the owner is 0 (no marker has met either object). Meanwhile
//! marker A traces object 1 (adopting the log for it: a compare-and-swap
//! from 0) and marker B traces object 2 (finding A's owner: the log is
//! shared) and reads object 2's cell. In every interleaving the stored
//! value is read by B or shaded by the mutator. The same `claim` fenced
//! only when it wins the compare-and-swap fails: B can read the old value
//! while the mutator read the owner as 0.

use crate::log_owner::{Claim, LogOwner, SHARED_OWNER};
use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;

const OLD: u64 = 1;
const NEW: u64 = 2;
/// Objects 1 and 2: addresses that are neither 0 nor [`SHARED_OWNER`].
const OBJ1: usize = 16;
const OBJ2: usize = 32;

/// What a marker runs as it meets the log in `obj`.
trait Adopt: Send + Sync + 'static {
    fn adopt(&self, obj: usize);
    fn owner(&self) -> usize;
    fn after_stores(&self) -> usize;
}

impl Adopt for LogOwner {
    fn adopt(&self, obj: usize) {
        LogOwner::adopt(self, obj)
    }
    fn owner(&self) -> usize {
        self.get()
    }
    fn after_stores(&self) -> usize {
        LogOwner::after_stores(self)
    }
}

/// `adopt` fenced only when its `claim` wins the compare-and-swap.
struct Unfenced(LogOwner);

impl Adopt for Unfenced {
    fn adopt(&self, obj: usize) {
        if self.0.claim(obj) == Claim::Won {
            fence(Ordering::SeqCst);
        }
    }
    fn owner(&self) -> usize {
        self.0.get()
    }
    fn after_stores(&self) -> usize {
        self.0.after_stores()
    }
}

/// Returns whether the stored value was read by marker B or shaded.
fn run<L: Adopt>(log: L) -> bool {
    let log = Arc::new(log);
    let cell2 = Arc::new(AtomicU64::new(OLD));
    let shaded = Arc::new(AtomicBool::new(false));
    let a = {
        let log = log.clone();
        loom::thread::spawn(move || log.adopt(OBJ1))
    };
    let b = {
        let (log, cell2) = (log.clone(), cell2.clone());
        loom::thread::spawn(move || {
            log.adopt(OBJ2);
            cell2.load(Ordering::Relaxed)
        })
    };
    // The mutator: the store, then `GcLog::after_unreported_stores`.
    cell2.store(NEW, Ordering::Release);
    if log.after_stores() != 0 {
        shaded.store(true, Ordering::Relaxed);
    }
    a.join().unwrap();
    let seen = b.join().unwrap();
    // Two objects met the log: it is shared for good.
    assert_eq!(log.owner(), SHARED_OWNER);
    seen == NEW || shaded.load(Ordering::Relaxed)
}

#[test]
fn a_store_into_an_object_of_a_shared_log_is_traced_or_shaded() {
    loom::model(|| assert!(run(LogOwner::new()), "the stored value lost"));
}

#[test]
#[should_panic(expected = "the stored value lost")]
fn without_the_fence_on_every_way_out_a_store_is_lost() {
    loom::model(|| assert!(run(Unfenced(LogOwner::new())), "the stored value lost"));
}
