//! loom model of a log's owner, shared by two objects (`--cfg loom`):
//! `GcLog::adopt` against `GcLog::after_unreported_stores`.
//!
//! A log reached from two objects (an `Arc` shared between them): a
//! mutator stores into object 2's cell without the barrier, fences and
//! reads the log's owner, and shades the cell's value unless the owner is
//! 0 (no marker has met either object). Meanwhile marker A traces object 1
//! (adopting the log for it: a compare-and-swap from 0) and marker B
//! traces object 2 (finding A's owner: the log is shared) and reads
//! object 2's cell. In every interleaving the stored value is read by B
//! or shaded by the mutator. With B's way out unfenced (the code before
//! the fix: only a won compare-and-swap fenced) B can read the old value
//! while the mutator read the owner as 0. The adoption is a copy of
//! `GcLog::adopt` (the log's atomics are the standard library's).

use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use loom::sync::Arc;

const SHARED_OWNER: usize = usize::MAX;
const OLD: u64 = 1;
const NEW: u64 = 2;

struct Log {
    owner: AtomicUsize,
}

impl Log {
    /// `GcLog::adopt`; `fence_all` false is the code before the fix.
    fn adopt(&self, obj: usize, fence_all: bool) {
        let o = self.owner.load(Ordering::Relaxed);
        if o == obj {
            return;
        }
        if o == 0 {
            match self
                .owner
                .compare_exchange(0, obj, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    fence(Ordering::SeqCst);
                    return;
                }
                Err(SHARED_OWNER) => {}
                Err(x) if x == obj => return,
                Err(_) => self.owner.store(SHARED_OWNER, Ordering::Relaxed),
            }
        } else if o != SHARED_OWNER {
            self.owner.store(SHARED_OWNER, Ordering::Relaxed);
        }
        if fence_all {
            fence(Ordering::SeqCst);
        }
    }
}

/// Returns whether the stored value was read by marker B or shaded.
fn run(fence_all: bool) -> bool {
    let log = Arc::new(Log {
        owner: AtomicUsize::new(0),
    });
    let cell2 = Arc::new(AtomicU64::new(OLD));
    let shaded = Arc::new(AtomicBool::new(false));
    let a = {
        let log = log.clone();
        loom::thread::spawn(move || log.adopt(1, fence_all))
    };
    let b = {
        let (log, cell2) = (log.clone(), cell2.clone());
        loom::thread::spawn(move || {
            log.adopt(2, fence_all);
            cell2.load(Ordering::Relaxed)
        })
    };
    // The mutator: the store, then `after_unreported_stores`.
    cell2.store(NEW, Ordering::Release);
    fence(Ordering::SeqCst);
    if log.owner.load(Ordering::Relaxed) != 0 {
        shaded.store(true, Ordering::Relaxed);
    }
    a.join().unwrap();
    let seen = b.join().unwrap();
    seen == NEW || shaded.load(Ordering::Relaxed)
}

#[test]
fn a_store_into_an_object_of_a_shared_log_is_traced_or_shaded() {
    loom::model(|| assert!(run(true), "the stored value lost"));
}

#[test]
#[should_panic(expected = "the stored value lost")]
fn without_the_fence_on_every_way_out_a_store_is_lost() {
    loom::model(|| assert!(run(false), "the stored value lost"));
}
