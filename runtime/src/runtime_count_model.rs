//! loom model of a runtime started during another's cycle
//! (`runtime_count.rs`): the real [`RuntimeCount`] and
//! [`before_first_allocation`], with one atomic for the heap's seal epoch
//! (whose own protocol `loam_heap`'s `seal_model.rs` checks).
//!
//! One runtime exists. A thread starts a second and hands it to another
//! thread, which attaches a mutator and allocates: it reads the seal
//! epoch, and an allocation that reads the old epoch sets its bit without
//! sealing, so the cycle's snapshot may hold the object. Meanwhile the
//! first runtime's cycle raises the epoch and asks whether it is alone. In
//! every interleaving, a snapshot that may hold the new runtime's object
//! is swept reading headers. Without the attach's fence the allocation
//! can read the old epoch while the cycle reads the old count; with the
//! count read before the epoch is raised, the runtime can start and
//! allocate unsealed in between.

use crate::runtime_count::{before_first_allocation, RuntimeCount};
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;

/// Returns `(alone, the new runtime's object may be in the snapshot)`.
/// `read_first`: the cycle reads the count before it raises the epoch.
fn run(attach_fences: bool, read_first: bool) -> (bool, bool) {
    let count = Arc::new(RuntimeCount::new());
    let seal = Arc::new(AtomicU64::new(0));
    count.start();
    let builder = {
        let (count, seal) = (count.clone(), seal.clone());
        loom::thread::spawn(move || {
            count.start();
            // The runtime handed to the thread that attaches to it.
            loom::thread::spawn(move || {
                if attach_fences {
                    before_first_allocation();
                }
                // The allocation's relaxed read of the epoch: the old one
                // sets the bit unsealed.
                seal.load(Ordering::Relaxed) == 0
            })
            .join()
            .unwrap()
        })
    };
    // The cycle's stop raises the epoch; its sweep asks.
    let alone = if read_first {
        let alone = count.alone_since_seal();
        seal.store(1, Ordering::Relaxed);
        alone
    } else {
        seal.store(1, Ordering::Relaxed);
        count.alone_since_seal()
    };
    let unsealed = builder.join().unwrap();
    (alone, unsealed)
}

/// Every interleaving of [`run`]: none sweeps alone with the new
/// runtime's object in the snapshot.
fn never_swept_alone(attach_fences: bool, read_first: bool) {
    loom::model(move || {
        let (alone, unsealed) = run(attach_fences, read_first);
        assert!(
            !(alone && unsealed),
            "swept alone with another runtime's object"
        );
    });
}

#[test]
fn a_snapshot_holding_a_new_runtimes_object_is_never_swept_alone() {
    never_swept_alone(true, false);
}

#[test]
#[should_panic(expected = "swept alone with another runtime's object")]
fn without_the_attach_fence_a_new_runtimes_object_is_swept_alone() {
    never_swept_alone(false, false);
}

#[test]
#[should_panic(expected = "swept alone with another runtime's object")]
fn a_count_read_before_the_seal_sweeps_a_new_runtimes_object_alone() {
    never_swept_alone(true, true);
}
