//! loom model of a mutator's mark assist against the GC threads'
//! termination (`mark::Share`, `mark::assist`, `mark::idle`), under
//! `--cfg loom`.
//!
//! The mark's queue (crossbeam's injector and the threads' deques, whose
//! own correctness is crossbeam's) is a mutex'd vector; object 1 points
//! to 2 and 3. One GC thread marks into a stack of its own and shares its
//! bottom half with the queue when the queue is empty, through
//! `mark_stack::share_half` as `MarkStack` does (the real thread looks at
//! its own deque only; here the queue stands for every deque and the
//! injector, and with one GC thread no other GC thread steals the
//! share), and goes idle exactly as `mark::idle` does; one assist joins
//! by CAS from a nonzero count, traces at most one object into a stack
//! of its own, and hands the rest back before it leaves the count; then
//! the collector drains the queue as `mark::parallel` does once the GC
//! threads are done. In every interleaving each object is traced exactly
//! once or found by that drain (none lost, none twice), and the assist
//! hands nothing back after the drain. Moving the hand-back after the
//! count's decrement makes the model fail, and so does a GC thread that
//! drops what its own stack holds when a deadline stops it. Object 4 is
//! remembered (a minor cycle's list): the GC thread claims it by a
//! relaxed `fetch_add` on the list's counter when its queue runs dry, and
//! `idle` counts an unclaimed one as work; the drain also takes what is
//! left of the list (`leave_remembered`). A third run has a deadline
//! instead of the assist (a mark offered to assists has none,
//! `mark::parallel`): a thread raising `stop` may end the mark at any
//! point, with the count up and the list unclaimed.
//!
//! A second model checks the wake of a paced mutator waiting for the GC
//! threads' credit (`mark::Share`, "Background credit").

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};

/// The remembered object, which points to nothing.
const REMEMBERED: usize = 4;
const OBJECTS: usize = 4;

struct Mark {
    queue: Mutex<Vec<usize>>,
    active: AtomicUsize,
    traced: [AtomicUsize; OBJECTS + 1],
    drained: AtomicBool,
    /// The remembered list (`[REMEMBERED]`) and its claim counter.
    remembered: [usize; 1],
    pending: AtomicUsize,
    /// The deadline passed (`mark::parallel`'s `stop`).
    stop: AtomicBool,
}

impl Mark {
    /// Traces `o`: counts it, and returns what it points to.
    fn trace(&self, o: usize) -> &'static [usize] {
        self.traced[o].fetch_add(1, Ordering::Relaxed);
        if o == 1 {
            &[2, 3]
        } else {
            &[]
        }
    }

    /// `take_remembered`: claims the next remembered object.
    fn take_remembered(&self) -> Option<usize> {
        let i = self.pending.fetch_add(1, Ordering::Relaxed);
        self.remembered.get(i).copied()
    }

    /// `leave_remembered`: what no thread claimed.
    fn leave_remembered(&self) -> Vec<usize> {
        let i = self.pending.swap(self.remembered.len(), Ordering::Relaxed);
        self.remembered.get(i..).unwrap_or(&[]).to_vec()
    }

    fn pop(&self) -> Option<usize> {
        self.queue.lock().unwrap().pop()
    }

    fn push(&self, o: usize) {
        assert!(
            !self.drained.load(Ordering::SeqCst),
            "work handed back after the mark ended: never traced by it"
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
            let remembered_left = self.pending.load(Ordering::Relaxed) < self.remembered.len();
            if !self.is_empty() || remembered_left {
                self.active.fetch_add(1, Ordering::SeqCst);
                return false;
            }
            if self.active.load(Ordering::SeqCst) == 0 || self.stop.load(Ordering::Relaxed) {
                return true;
            }
            loom::thread::yield_now();
        }
    }

    /// A GC thread's loop in `mark::parallel`, with its `MarkStack`.
    /// Returns what its stack still holds when a deadline stopped it
    /// (`parallel` leaves it over); `drop_when_stopped`: the bug the model
    /// must catch, returning nothing then.
    fn gc_thread(&self, drop_when_stopped: bool) -> Vec<usize> {
        let mut stack: Vec<usize> = Vec::new();
        loop {
            if self.stop.load(Ordering::Relaxed) {
                if drop_when_stopped {
                    stack.clear();
                }
                return stack;
            }
            crate::mark_stack::share_half(&mut stack, || self.is_empty(), |o| self.push(o));
            match stack
                .pop()
                .or_else(|| self.pop())
                .or_else(|| self.take_remembered())
            {
                Some(o) => stack.extend_from_slice(self.trace(o)),
                None => {
                    if self.idle() {
                        return stack;
                    }
                }
            }
        }
    }

    /// `mark::assist`, with a budget of one object; `late_hand_back`: the
    /// bug the model must catch, handing its stack back after leaving the
    /// count.
    fn assist(&self, late_hand_back: bool) {
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
            local.extend_from_slice(self.trace(o));
        }
        if late_hand_back {
            self.active.fetch_sub(1, Ordering::SeqCst);
        }
        for o in local {
            self.push(o);
        }
        if !late_hand_back {
            self.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[test]
fn an_assist_never_ends_a_mark_with_work_in_hand() {
    assist_model(false, false, false);
}

/// The model can fail: an assist that hands its work back after leaving
/// the count lets the GC thread find the count at zero and the queue empty
/// while the work is in hand, and the drain misses it.
#[test]
#[should_panic(expected = "never traced")]
fn an_assist_that_hands_back_after_leaving_the_count_fails_the_model() {
    assist_model(true, false, false);
}

/// A mark with a deadline (and so no assists) leaves what it did not
/// trace, the remembered objects no thread claimed included, to the drain.
#[test]
fn a_deadline_leaves_what_no_thread_claimed_to_the_drain() {
    assist_model(false, true, false);
}

/// The model can fail: a GC thread that drops its own stack when the
/// deadline stops it loses what the stack held.
#[test]
#[should_panic(expected = "never traced")]
fn a_gc_thread_that_drops_its_stack_at_the_deadline_fails_the_model() {
    assist_model(false, true, true);
}

fn assist_model(late_hand_back: bool, deadline: bool, drop_when_stopped: bool) {
    loom::model(move || {
        let mark = Arc::new(Mark {
            queue: Mutex::new(vec![1]),
            active: AtomicUsize::new(1),
            traced: Default::default(),
            drained: AtomicBool::new(false),
            remembered: [REMEMBERED],
            pending: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let deadline_thread = deadline.then(|| {
            let mark = mark.clone();
            loom::thread::spawn(move || mark.stop.store(true, Ordering::Relaxed))
        });
        let gc = {
            let mark = mark.clone();
            loom::thread::spawn(move || mark.gc_thread(drop_when_stopped))
        };
        let assist = (!deadline).then(|| {
            let mark = mark.clone();
            loom::thread::spawn(move || mark.assist(late_hand_back))
        });
        // What a deadline left on the GC thread's stack, then `parallel`'s
        // drain once the GC threads are done: what they find goes to the
        // next round.
        let mut left = gc.join().unwrap();
        left.append(&mut mark.queue.lock().unwrap());
        left.extend(mark.leave_remembered());
        mark.drained.store(true, Ordering::SeqCst);
        if let Some(t) = assist {
            t.join().unwrap();
        }
        if let Some(t) = deadline_thread {
            t.join().unwrap();
        }
        // The next round traces what was left, and what it leads to.
        let mut next = left;
        while let Some(o) = next.pop() {
            next.extend_from_slice(mark.trace(o));
        }
        for o in 1..=OBJECTS {
            let times = mark.traced[o].load(Ordering::Relaxed);
            assert!(times != 0, "object {o} never traced (lost by the mark)");
            assert_eq!(times, 1, "object {o} traced {times} times");
        }
    });
}

/// The credit's wake (`mark::Share`, "Why a wake is never lost for long"):
/// a paced mutator counts itself among the waiters, then reads the credit
/// under the control mutex and waits on the control condition variable
/// from that same hold; a GC thread at a report reads the count and, if it
/// sees the waiter, adds credit and notifies under the mutex. A GC thread
/// that saw no waiter stands here for the end of the waiter's slice (it
/// sets `slice_over` and notifies): the waiter is paid at a later report
/// or goes on at its slice's end, so only a GC thread that saw it must pay
/// it. In every interleaving the waiter is paid exactly when the GC thread
/// saw it, and never sleeps through the credit (loom reports a waiter left
/// waiting as a deadlock). Notifying without the mutex fails the model: the
/// notify can fall between the waiter's read and its wait.
#[test]
fn a_waiter_the_gc_thread_sees_is_paid_and_woken() {
    use loom::sync::Condvar;
    struct Credit {
        credit: AtomicUsize,
        waiters: AtomicUsize,
        /// The control mutex, guarding the stand-in for the slice's end.
        slice_over: Mutex<bool>,
        cv: Condvar,
    }
    loom::model(|| {
        let c = Arc::new(Credit {
            credit: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            slice_over: Mutex::new(false),
            cv: Condvar::new(),
        });
        let gc = {
            let c = c.clone();
            loom::thread::spawn(move || {
                // `Share::add_credit`.
                if c.waiters.load(Ordering::SeqCst) > 0 {
                    c.credit.fetch_add(1, Ordering::SeqCst);
                    let _g = c.slice_over.lock().unwrap();
                    c.cv.notify_all();
                    true
                } else {
                    *c.slice_over.lock().unwrap() = true;
                    c.cv.notify_all();
                    false
                }
            })
        };
        // `Shared::pace_briefly`.
        c.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = c.slice_over.lock().unwrap();
        let paid = loop {
            if c.credit.load(Ordering::SeqCst) > 0 {
                break true;
            }
            if *g {
                break false;
            }
            g = c.cv.wait(g).unwrap();
        };
        drop(g);
        c.waiters.fetch_sub(1, Ordering::SeqCst);
        let saw = gc.join().unwrap();
        assert_eq!(
            paid, saw,
            "paid {paid}, the GC thread saw the waiter: {saw}"
        );
    });
}
