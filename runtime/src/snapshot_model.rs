//! loom model of the concurrent mark's snapshot barrier (`--cfg loom`).
//!
//! The heap is abstracted to what the protocol touches: a root object whose
//! one barrier cell holds object 2, atomic mark bits set by swap (the
//! heap's `fetch_or`), and the gray queue the barriers push to (a mutex'd
//! vector standing in for the lock-free injector, whose own correctness is
//! crossbeam's). The marker runs the concurrent phase; the mutator, inside
//! one `mutate` call that began with `marking` set, takes object 2 out of
//! the cell into a root made meanwhile (roots are read only at the first
//! pause, so no marker sees it) and stores something else, through the
//! barrier: object 3, allocated during the mark (white). The second pause
//! then drains the queue with both stopped. In every interleaving objects 2
//! and 3 end marked. Dropping the shade of the old value in `store` makes
//! the model fail (the marker can read the cell after the mutator emptied
//! it), and so does dropping the shade of the new one (the marker can read
//! the cell before the store: the root, marked, would point to a white
//! object, which the minor cycles' invariant forbids).

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};

struct Heap {
    /// The root object's barrier cell: 0 is `None`.
    cell: AtomicUsize,
    marks: [AtomicBool; 4],
    gray: Mutex<Vec<usize>>,
}

impl Heap {
    fn mark(&self, o: usize) -> bool {
        !self.marks[o].swap(true, Ordering::AcqRel)
    }

    fn shade(&self, o: usize) {
        if o != 0 && self.mark(o) {
            self.gray.lock().unwrap().push(o);
        }
    }

    /// Traces object `o`: only the root (1) has a field.
    fn scan(&self, o: usize) {
        if o == 1 {
            self.shade(self.cell.load(Ordering::Acquire));
        }
    }

    /// `GcCell::set` during a concurrent mark: swap, then shade both.
    fn store(&self, new: usize) -> usize {
        let old = self.cell.swap(new, Ordering::AcqRel);
        self.shade(old);
        self.shade(new);
        old
    }

    fn drain(&self) {
        loop {
            let next = self.gray.lock().unwrap().pop();
            match next {
                Some(o) => self.scan(o),
                None => return,
            }
        }
    }
}

#[test]
fn what_a_mutator_moves_during_a_concurrent_mark_stays_marked() {
    loom::model(|| {
        let heap = Arc::new(Heap {
            cell: AtomicUsize::new(2),
            marks: Default::default(),
            gray: Mutex::new(Vec::new()),
        });
        // First pause: the root marked and gray.
        heap.shade(1);
        let marker = {
            let heap = heap.clone();
            loom::thread::spawn(move || heap.drain())
        };
        let mutator = {
            let heap = heap.clone();
            loom::thread::spawn(move || {
                // Object 3 was allocated during the mark: white, and stored
                // into the root the marker may have traced already.
                let taken = heap.cell.load(Ordering::Acquire);
                heap.store(3);
                taken
            })
        };
        marker.join().unwrap();
        let kept = mutator.join().unwrap();
        // Second pause: both stopped; trace what the barrier shaded.
        heap.drain();
        assert_eq!(kept, 2);
        for o in 1..=3 {
            assert!(heap.marks[o].load(Ordering::Relaxed), "object {o} unmarked");
        }
    });
}
