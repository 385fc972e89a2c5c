//! loom model of a mutator's mark assist against the GC threads'
//! termination (`mark::Share`, `mark::assist`, `mark::idle`), under
//! `--cfg loom`.
//!
//! The mark's queue (crossbeam's injector and the threads' deques, whose
//! own correctness is crossbeam's) is a mutex'd vector; objects form a
//! chain 1 → 2 → 3 (tracing `o` queues `o + 1`). One GC thread marks and
//! goes idle exactly as `mark::idle` does; one assist joins by CAS from a
//! nonzero count, traces at most one object into a deque of its own, and
//! hands the rest back before it leaves the count; then the collector
//! drains the queue as `mark::parallel` does once the GC threads are done.
//! In every interleaving each object is traced exactly once or found by
//! that drain (none lost, none twice), and the assist hands nothing back
//! after the drain. Moving the hand-back after the count's decrement makes
//! the model fail.

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};

const OBJECTS: usize = 3;

struct Mark {
    queue: Mutex<Vec<usize>>,
    active: AtomicUsize,
    traced: [AtomicUsize; OBJECTS + 1],
    drained: AtomicBool,
}

impl Mark {
    /// Traces `o`: counts it, and returns what it points to.
    fn trace(&self, o: usize) -> Option<usize> {
        self.traced[o].fetch_add(1, Ordering::Relaxed);
        (o < OBJECTS).then_some(o + 1)
    }

    fn pop(&self) -> Option<usize> {
        self.queue.lock().unwrap().pop()
    }

    fn push(&self, o: usize) {
        assert!(
            !self.drained.load(Ordering::SeqCst),
            "work handed back after the mark ended"
        );
        self.queue.lock().unwrap().push(o);
    }

    fn is_empty(&self) -> bool {
        self.queue.lock().unwrap().is_empty()
    }

    /// `mark::idle`: false when there is work again.
    fn idle(&self) -> bool {
        self.active.fetch_sub(1, Ordering::SeqCst);
        loop {
            if !self.is_empty() {
                self.active.fetch_add(1, Ordering::SeqCst);
                return false;
            }
            if self.active.load(Ordering::SeqCst) == 0 {
                return true;
            }
            loom::thread::yield_now();
        }
    }

    /// A GC thread's loop in `mark::parallel`.
    fn gc_thread(&self) {
        loop {
            match self.pop() {
                Some(o) => {
                    if let Some(next) = self.trace(o) {
                        self.push(next);
                    }
                }
                None => {
                    if self.idle() {
                        return;
                    }
                }
            }
        }
    }

    /// `mark::assist`, with a budget of one object.
    fn assist(&self) {
        let mut a = self.active.load(Ordering::SeqCst);
        loop {
            if a == 0 {
                return;
            }
            match self
                .active
                .compare_exchange(a, a + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(now) => a = now,
            }
        }
        let mut local = Vec::new();
        if let Some(o) = self.pop() {
            if let Some(next) = self.trace(o) {
                local.push(next);
            }
        }
        for o in local {
            self.push(o);
        }
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn an_assist_never_ends_a_mark_with_work_in_hand() {
    loom::model(|| {
        let mark = Arc::new(Mark {
            queue: Mutex::new(vec![1]),
            active: AtomicUsize::new(1),
            traced: Default::default(),
            drained: AtomicBool::new(false),
        });
        let gc = {
            let mark = mark.clone();
            loom::thread::spawn(move || mark.gc_thread())
        };
        let assist = {
            let mark = mark.clone();
            loom::thread::spawn(move || mark.assist())
        };
        gc.join().unwrap();
        // `parallel`'s drain once the GC threads are done: what it finds
        // goes to the next round.
        let left: Vec<usize> = std::mem::take(&mut *mark.queue.lock().unwrap());
        mark.drained.store(true, Ordering::SeqCst);
        assist.join().unwrap();
        // The next round traces what was left, and what it leads to.
        let mut next = left;
        while let Some(o) = next.pop() {
            if let Some(n) = mark.trace(o) {
                next.push(n);
            }
        }
        for o in 1..=OBJECTS {
            assert_eq!(mark.traced[o].load(Ordering::Relaxed), 1, "object {o}");
        }
    });
}
