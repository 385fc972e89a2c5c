//! loom models of the concurrent mark's snapshot barrier (`--cfg loom`):
//! a barrier cell store, two writers of one cell, nested `GcLock` writes
//! against a tracer, and a `GcLock` write racing the first trace of its
//! object (the owner it records for the next minor cycle).
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
//! object, which the minor cycles' invariant forbids): both variants are
//! `should_panic` tests here.

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};

/// Object marks (objects are numbered; 0 is no object) and the gray queue
/// the barriers and markers push to: what every model here shares.
struct Marks {
    marks: [AtomicBool; 5],
    gray: Mutex<Vec<usize>>,
}

impl Marks {
    fn new() -> Self {
        Marks {
            marks: Default::default(),
            gray: Mutex::new(Vec::new()),
        }
    }

    /// Marks `o` and queues it if this call marked it (`mark::shade`).
    fn shade(&self, o: usize) {
        if o != 0 && !self.marks[o].swap(true, Ordering::AcqRel) {
            self.gray.lock().unwrap().push(o);
        }
    }

    fn is_marked(&self, o: usize) -> bool {
        self.marks[o].load(Ordering::Relaxed)
    }

    /// Traces what the queue holds until it is empty (scanning may add to it).
    fn drain(&self, scan: impl Fn(usize)) {
        loop {
            let next = self.gray.lock().unwrap().pop();
            match next {
                Some(o) => scan(o),
                None => return,
            }
        }
    }
}

struct Heap {
    /// The root object's barrier cell: 0 is `None`.
    cell: AtomicUsize,
    m: Marks,
    /// Which of its two shades `store` makes: both, but in the variants
    /// that check the model fails without one.
    shades: Shades,
}

/// The shades a barrier store makes.
#[derive(Clone, Copy)]
struct Shades {
    old: bool,
    new: bool,
}

const BOTH: Shades = Shades {
    old: true,
    new: true,
};

impl Heap {
    fn shade(&self, o: usize) {
        self.m.shade(o)
    }

    /// Traces object `o`: only the root (1) has a field.
    fn scan(&self, o: usize) {
        if o == 1 {
            self.shade(self.cell.load(Ordering::Acquire));
        }
    }

    /// `GcCell::set` during a concurrent mark: load, store, then shade
    /// both (no read-modify-write: see `GcCell::set`).
    fn store(&self, new: usize) -> usize {
        let old = self.cell.load(Ordering::Acquire);
        self.cell.store(new, Ordering::Release);
        if self.shades.old {
            self.shade(old);
        }
        if self.shades.new {
            self.shade(new);
        }
        old
    }

    fn drain(&self) {
        self.m.drain(|o| self.scan(o));
    }
}

/// The module docs' model, with the barrier making `shades`.
fn mutator_moves_an_object(shades: Shades) {
    loom::model(move || {
        let heap = Arc::new(Heap {
            cell: AtomicUsize::new(2),
            m: Marks::new(),
            shades,
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
            assert!(heap.m.is_marked(o), "object {o} unmarked");
        }
    });
}

#[test]
fn what_a_mutator_moves_during_a_concurrent_mark_stays_marked() {
    mutator_moves_an_object(BOTH);
}

/// Without the old value's shade the marker can read the cell after the
/// mutator emptied it: object 2, held by a root no marker reads, unmarked.
#[test]
#[should_panic(expected = "object 2 unmarked")]
fn without_the_old_values_shade_the_moved_object_is_lost() {
    mutator_moves_an_object(Shades {
        old: false,
        new: true,
    });
}

/// Without the new value's shade the marker can read the cell before the
/// store: object 3, white, in a marked root.
#[test]
#[should_panic(expected = "object 3 unmarked")]
fn without_the_new_values_shade_the_stored_object_is_lost() {
    mutator_moves_an_object(Shades {
        old: true,
        new: false,
    });
}

/// Two mutators store into the same cell during a mark, with a load and a
/// store each (not a swap): whichever store first overwrites object 2, the
/// snapshot's value, was made by a writer whose load read 2, so 2 is
/// shaded; 3 and 4, white, are shaded as the new values of their stores.
/// The marker may read the cell at any point.
#[test]
fn two_writers_of_one_cell_keep_the_snapshot() {
    loom::model(|| {
        let heap = Arc::new(Heap {
            cell: AtomicUsize::new(2),
            m: Marks::new(),
            shades: BOTH,
        });
        heap.shade(1);
        let marker = {
            let heap = heap.clone();
            loom::thread::spawn(move || heap.drain())
        };
        let writers: Vec<_> = [3, 4]
            .into_iter()
            .map(|new| {
                let heap = heap.clone();
                loom::thread::spawn(move || {
                    heap.store(new);
                })
            })
            .collect();
        marker.join().unwrap();
        for w in writers {
            w.join().unwrap();
        }
        heap.drain();
        for o in 1..=4 {
            assert!(heap.m.is_marked(o), "object {o} unmarked");
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
    m: Marks,
}

impl Locks {
    fn shade(&self, o: usize) {
        self.m.shade(o)
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
        self.m.drain(|o| self.scan(o));
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
            m: Marks::new(),
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
        assert!(heap.m.is_marked(2), "object 2 unmarked");
    });
}

/// `cell.rs`, "Recording the object written": object 1, old, holds a
/// `GcLock` that no marker has met yet (`owner == 0`), whose contents are
/// empty. During a concurrent mark, a marker traces object 1 for the first
/// time (sets the owner, then tries the read lock) while a mutator writes
/// the lock, storing object 3, young and white (the mark does not trace
/// it, and the next minor cycle frees it unless something traces it: the
/// writer shades nothing new, the contents are not walked). The mark ends
/// at the second pause (the markers' deferred objects traced again), then
/// the next minor cycle traces the objects the writes recorded. Object 3
/// must be marked by then in every interleaving. Dropping the marker's
/// retrace of a write-held lock (`Tracer::defer_current`) fails the model
/// (the writer read the owner before the marker set it, and the marker
/// found the lock held); so does dropping the writer's record of a known
/// owner (the marker traced the lock before the write).
struct Owned {
    lock: ModelLock<usize>,
    /// `GcLock::owner`.
    owner: AtomicUsize,
    m: Marks,
    /// The markers' objects to trace again (`Tracer::defer_current`).
    deferred: Mutex<Vec<usize>>,
    /// The mutator's remembered list, for the next minor cycle.
    remembered: Mutex<Vec<usize>>,
}

impl Owned {
    fn shade(&self, o: usize) {
        self.m.shade(o)
    }

    /// Traces object `o` (only 1 has a field, the lock), as a marker does.
    fn scan(&self, o: usize) {
        if o == 1 {
            // `LogOwner::adopt` (through the lock's `GcLog`), before the read
            // lock is tried.
            let _ = self
                .owner
                .compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed);
            if !self.lock.try_read(|&v| self.shade(v)) {
                self.deferred.lock().unwrap().push(1);
            }
        }
    }

    fn drain(&self) {
        self.m.drain(|o| self.scan(o));
    }
}

#[test]
fn a_lock_write_racing_the_first_trace_of_its_object_is_recorded() {
    loom::model(|| {
        let heap = Arc::new(Owned {
            lock: ModelLock::new(0),
            owner: AtomicUsize::new(0),
            m: Marks::new(),
            deferred: Mutex::new(Vec::new()),
            remembered: Mutex::new(Vec::new()),
        });
        // First pause: object 1 gray (reached from a root).
        heap.shade(1);
        let marker = {
            let heap = heap.clone();
            loom::thread::spawn(move || heap.drain())
        };
        let mutator = {
            let heap = heap.clone();
            loom::thread::spawn(move || {
                // `GcLock::write` during the mark: the old contents (none)
                // shaded, the owner read under the write lock, then `f`.
                heap.lock.write(|v| {
                    heap.shade(*v);
                    let owner = heap.owner.load(Ordering::Relaxed);
                    if owner != 0 {
                        heap.shade(owner);
                        heap.remembered.lock().unwrap().push(owner);
                    }
                    *v = 3;
                });
            })
        };
        marker.join().unwrap();
        mutator.join().unwrap();
        // Second pause: what the barriers shaded and what the markers
        // deferred, traced with everyone stopped.
        let again: Vec<usize> = std::mem::take(&mut *heap.deferred.lock().unwrap());
        for o in again {
            heap.scan(o);
        }
        heap.drain();
        // The next minor cycle: the recorded objects traced again.
        let recorded: Vec<usize> = std::mem::take(&mut *heap.remembered.lock().unwrap());
        for o in recorded {
            heap.scan(o);
        }
        heap.drain();
        assert!(heap.m.is_marked(3), "the stored object unmarked");
    });
}
