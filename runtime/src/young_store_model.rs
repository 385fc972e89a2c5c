//! loom model of a store into a young object's cell during a concurrent
//! mark (`--cfg loom`): `barrier.rs`, "A young object's cells", 4.
//!
//! Object `Y` holds a cell, which holds the old value `A` (marked already:
//! old, or shaded by the deletion barrier) until a mutator's call stores
//! the young value `V` into it. The call then fences and looks at `Y`'s
//! mark, as `Mutation::shade_stored` does: if `Y` is marked it shades `V`,
//! else it leaves `V` unshaded (`Y` is young). Meanwhile a marker marks
//! `Y` (`loam_heap::mark_block`) and, if it set the bit, traces it: it
//! reads the cell and marks what it finds. In every interleaving, once
//! both are done, `Y` marked means `V` marked: the minor cycles'
//! invariant (an old object points to marked or remembered objects).
//! Without the store's fence the look can miss the marker's mark while
//! the marker's load misses the store, and `Y` ends old pointing to an
//! unmarked `V`.
//!
//! The code's marker sets the bit with a sequentially consistent
//! `fetch_or` and reads the cell with a sequentially consistent load,
//! which C++20's rules for `SeqCst` fences and operations make enough
//! (either the mutator's fence precedes the `fetch_or` in the total
//! order, and the load, later in that order, reads the store; or it
//! follows it, and the look after the fence sees the bit). loom models
//! `SeqCst` loads and stores no stronger than acquire and release
//! (tokio-rs/loom#180: it lets a store-buffering pair of `SeqCst`
//! threads both read zero), so it would report executions the standard
//! forbids; the marker here fences between the two instead, which loom
//! models and which orders this pattern as the code's operations do.
//! A second marker thread marks `Y` and traces it too when it wins the
//! bit, as two markers meeting one object do.

use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;

/// What the cell holds.
const OLD: u64 = 1;
const YOUNG: u64 = 2;

struct Heap {
    /// `Y`'s mark bit.
    y_marked: AtomicBool,
    /// `V`'s mark bit.
    v_marked: AtomicBool,
    /// `Y`'s cell.
    cell: AtomicU64,
}

impl Heap {
    /// `mark_block` on `Y`: a load that returns if the bit is set, else a
    /// read-modify-write; true if this call set it.
    fn mark_y(&self) -> bool {
        if self.y_marked.load(Ordering::Relaxed) {
            return false;
        }
        !self.y_marked.swap(true, Ordering::SeqCst)
    }

    /// A marker's trace of `Y`, after it set the bit: reads the cell and
    /// marks `V` if it finds it (`A` is marked already).
    fn trace_y(&self) {
        fence(Ordering::SeqCst);
        if self.cell.load(Ordering::SeqCst) == YOUNG {
            self.v_marked.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs the store and `markers` markers; returns `(Y marked, V marked)`.
fn run(markers: usize, store_fences: bool) -> (bool, bool) {
    let heap = Arc::new(Heap {
        y_marked: AtomicBool::new(false),
        v_marked: AtomicBool::new(false),
        cell: AtomicU64::new(OLD),
    });
    let threads: Vec<_> = (0..markers)
        .map(|_| {
            let heap = heap.clone();
            loom::thread::spawn(move || {
                if heap.mark_y() {
                    heap.trace_y();
                }
            })
        })
        .collect();
    // The mutator's call: `set_marking`'s load and store (the old value's
    // shade finds `A` marked), then `shade_stored`.
    let old = heap.cell.load(Ordering::Acquire);
    assert_eq!(old, OLD);
    heap.cell.store(YOUNG, Ordering::Release);
    if store_fences {
        fence(Ordering::SeqCst);
    }
    if heap.y_marked.load(Ordering::Acquire) {
        // `Y` is old: shade `V`.
        heap.v_marked.store(true, Ordering::Relaxed);
    }
    for t in threads {
        t.join().unwrap();
    }
    (
        heap.y_marked.load(Ordering::Relaxed),
        heap.v_marked.load(Ordering::Relaxed),
    )
}

#[test]
fn a_marked_holder_never_points_to_an_unmarked_stored_value() {
    for markers in 1..=2 {
        loom::model(move || {
            let (y, v) = run(markers, true);
            assert!(y, "the markers mark Y");
            assert!(
                v,
                "Y marked, the value it holds unmarked ({markers} markers)"
            );
        });
    }
}

#[test]
#[should_panic(expected = "the value it holds unmarked")]
fn without_the_stores_fence_a_marked_holder_points_to_an_unmarked_value() {
    loom::model(|| {
        let (y, v) = run(1, false);
        assert!(!y || v, "Y marked, the value it holds unmarked");
    });
}
