//! loom models of the concurrent mark's snapshot barrier (`--cfg loom`):
//! a barrier cell store, and nested `GcLock` writes against a tracer.
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

/// Traces what `gray` holds until it is empty (scanning may add to it).
fn drain(gray: &Mutex<Vec<usize>>, scan: impl Fn(usize)) {
    loop {
        let next = gray.lock().unwrap().pop();
        match next {
            Some(o) => scan(o),
            None => return,
        }
    }
}

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
        drain(&self.gray, |o| self.scan(o));
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

/// A reader-writer lock as `parking_lot`'s behaves for `GcLock`: `try_read`
/// fails while a writer holds it; `write` blocks until no one holds it.
/// (Built on loom's mutex and condvar: loom's own `RwLock` reports false
/// deadlocks when a `try_read` meets a writer.)
struct ModelLock<T> {
    /// Readers, and whether a writer holds the lock.
    state: Mutex<(usize, bool)>,
    released: loom::sync::Condvar,
    data: loom::cell::UnsafeCell<T>,
}

impl<T> ModelLock<T> {
    fn new(data: T) -> Self {
        ModelLock {
            state: Mutex::new((0, false)),
            released: loom::sync::Condvar::new(),
            data: loom::cell::UnsafeCell::new(data),
        }
    }

    /// Runs `f` on the contents under a read lock, if one can be had now.
    fn try_read(&self, f: impl FnOnce(&T)) -> bool {
        {
            let mut s = self.state.lock().unwrap();
            if s.1 {
                return false;
            }
            s.0 += 1;
        }
        // SAFETY: read-locked: no writer until the count falls.
        self.data.with(|p| f(unsafe { &*p }));
        self.state.lock().unwrap().0 -= 1;
        self.released.notify_all();
        true
    }

    /// Runs `f` on the contents under the write lock, waiting for it.
    fn write<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        {
            let mut s = self.state.lock().unwrap();
            while s.1 || s.0 > 0 {
                s = self.released.wait(s).unwrap();
            }
            s.1 = true;
        }
        // SAFETY: write-locked: no reader or other writer until released.
        let r = self.data.with_mut(|p| f(unsafe { &mut *p }));
        self.state.lock().unwrap().1 = false;
        self.released.notify_all();
        r
    }
}

/// Two `GcLock`s, the inner reached through the outer's contents (an `Arc`
/// in the real heap), as `cell.rs` ("A marker never waits for a `GcLock`")
/// runs them during a concurrent mark. Object 2 is in the inner lock as
/// the mark begins; the mutator writes the inner lock (taking 2 out and
/// putting 3, white, in) and, nested inside that write, the outer one,
/// whose first write of the mark shades the outer contents and so meets the
/// inner lock it holds itself. The marker traces the root, which holds the
/// outer lock. Nothing may wait for ever (loom reports a deadlock if a
/// tracer waits for a read lock instead of trying it), and object 2,
/// which the snapshot holds, ends marked in every interleaving (dropping
/// the writer's shade of the old contents makes the model fail: the marker
/// may have skipped the inner lock, write-held, or read it after the
/// write).
struct Locks {
    outer: ModelLock<()>,
    inner: ModelLock<Vec<usize>>,
    /// Each lock's `shaded == epoch` of `GcLock` (written under its lock).
    outer_shaded: AtomicBool,
    inner_shaded: AtomicBool,
    marks: [AtomicBool; 4],
    gray: Mutex<Vec<usize>>,
}

impl Locks {
    fn shade(&self, o: usize) {
        if !self.marks[o].swap(true, Ordering::AcqRel) {
            self.gray.lock().unwrap().push(o);
        }
    }

    /// `GcLock::trace` of the inner lock: try the read lock, skip if a
    /// writer has it.
    fn trace_inner(&self) {
        self.inner.try_read(|v| {
            for &o in v.iter() {
                self.shade(o);
            }
        });
    }

    /// Traces object `o`: the root (1) holds the outer lock, whose contents
    /// hold the inner one.
    fn scan(&self, o: usize) {
        if o == 1 {
            self.outer.try_read(|_| self.trace_inner());
        }
    }

    fn drain(&self) {
        drain(&self.gray, |o| self.scan(o));
    }
}

#[test]
fn nested_locks_never_deadlock() {
    loom::model(|| {
        let heap = Arc::new(Locks {
            outer: ModelLock::new(()),
            inner: ModelLock::new(vec![2]),
            outer_shaded: AtomicBool::new(false),
            inner_shaded: AtomicBool::new(false),
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
                // `inner.write(mc, |v| { ...; outer.write(mc, ...) })`.
                heap.inner.write(|inner| {
                    if !heap.inner_shaded.swap(true, Ordering::Relaxed) {
                        for &o in inner.iter() {
                            heap.shade(o);
                        }
                    }
                    inner.clear();
                    inner.push(3);
                    heap.outer.write(|_| {
                        if !heap.outer_shaded.swap(true, Ordering::Relaxed) {
                            // The outer contents hold the inner lock, which
                            // this thread write-holds: tried, and skipped.
                            heap.trace_inner();
                        }
                    });
                });
            })
        };
        marker.join().unwrap();
        mutator.join().unwrap();
        // Second pause: both stopped; trace what the barriers shaded.
        heap.drain();
        assert!(heap.marks[2].load(Ordering::Relaxed), "object 2 unmarked");
    });
}
