//! The finalizer: one thread per runtime that runs the destructors of dead
//! objects, after the sweep found them, and then hands their blocks back.
//!
//! Why a thread of its own (the JVM's finalizer thread, Go's finalizer
//! goroutine): a destructor is user code and may block, on a lock say. Run
//! by the sweep, a destructor that waits for a lock held by a thread that
//! waits for the collector (in `collect`, in pacing, at the heap limit)
//! would deadlock both. Here the collector never waits for a destructor
//! without a bound: `collect` returns once the cycle has found and swept
//! its garbage, and only a runtime's last cycle waits for the finalizer to
//! finish, so that every destructor runs. A program that wants
//! every destructor run waits for it: [`Runtime::wait_for_drops`]
//! (`.NET`'s `GC.WaitForPendingFinalizers`). A destructor may therefore do
//! anything but wait for the finalizer: collect, build a runtime, take
//! locks.
//!
//! A page whose dead objects include one with drop glue does not send them
//! back from the sweep: the sweep *holds* them as a page run
//! (`FreeBatch::hold_page_run`: their pending bits set, the run counted out
//! on the page) and queues them here; the finalizer runs their destructors
//! and then sends the run (`FreeBatch::push_held_page_run`). Held, they are
//! left out of every later snapshot's copy as the blocks of any run out are
//! (`cycle.rs`, `snapshot_pages`), so later cycles sweep the page's other
//! blocks meanwhile, whoever's they are: no cycle waits for a finalizer to
//! reach garbage. A slow destructor holds back the blocks of its page's
//! run (every dead object that sweep found in the page) and of the runs
//! queued behind it, not their pages.
//!
//! [`Runtime::wait_for_drops`]: crate::Runtime::wait_for_drops

use crate::gc::TypeDesc;
use loam_heap::{FreeBatch, HeldRun};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use crate::panics::PanicLog;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// One page's dead objects, for the finalizer: each with its descriptor
/// (when the sweep read it) and its size.
pub(crate) struct PageWork {
    pub(crate) dead: Vec<(usize, Option<&'static TypeDesc>, usize)>,
    /// The page run that holds the blocks, sent once the destructors ran;
    /// `None` for a `GlobalAlloc` space's objects (freed one by one through
    /// it).
    pub(crate) run: Option<HeldRun>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<PageWork>,
    /// Pages taken off the queue whose runs are not sent yet.
    running: usize,
    /// No more work comes: finish the queue and exit.
    closed: bool,
}

/// The finalizer's queue, shared by the sweep (which fills it), the
/// finalizer thread (which drains it) and `wait_for_drops`.
#[derive(Default)]
pub(crate) struct Finalizer {
    state: Mutex<State>,
    /// Signals new work or `closed` to the thread, and an empty queue to
    /// those waiting for the drops.
    changed: Condvar,
    /// Destructors that panicked, not yet reported.
    panics: PanicLog,
    /// Destructors that panicked, in all (for `GcStats::user_panics`).
    pub(crate) panicked: AtomicU64,
}

impl Finalizer {
    /// Queues pages of dead objects; their destructors run soon after.
    pub(crate) fn submit(&self, work: Vec<PageWork>) {
        if work.is_empty() {
            return;
        }
        let mut s = self.state.lock();
        s.queue.extend(work);
        self.changed.notify_all();
    }

    /// No more work will come (the runtime's last cycle has swept).
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }

    /// Waits until every page queued so far has had its destructors run
    /// and its run sent.
    pub(crate) fn wait_idle(&self) {
        let mut s = self.state.lock();
        while !s.queue.is_empty() || s.running > 0 {
            self.changed.wait(&mut s);
        }
    }

    /// The finalizer thread's loop, until closed and drained: runs each
    /// page's destructors, then sends its dead blocks back as one run.
    ///
    /// # Safety
    /// Every queued page's dead objects are this runtime's, found dead by a
    /// completed mark, owned by the finalizer alone: held as a page run (so
    /// no sweep touches them), or a `GlobalAlloc` space's and out of its
    /// registry.
    pub(crate) unsafe fn run(&self, id: u16, verify: bool, space: &crate::space::Space) {
        // User code is contained (`finalize` runs destructors through
        // `panics::contain`); a panic of ours here would leave `running`
        // up and every `wait_for_drops` and the runtime's drop waiting for
        // ever: the thread's body, this call, is wrapped in
        // `collector::or_stop`, which ends the process with the panic's
        // message instead.
        let mut batch = FreeBatch::new();
        let mut run: Vec<NonNull<u8>> = Vec::new();
        loop {
            let work = {
                let mut s = self.state.lock();
                loop {
                    if let Some(w) = s.queue.pop_front() {
                        s.running += 1;
                        break Some(w);
                    }
                    if s.closed {
                        break None;
                    }
                    // Idle: the end of the last page flushed the batch
                    // and told what panicked (below).
                    self.changed.notify_all();
                    self.changed.wait(&mut s);
                }
            };
            let Some(work) = work else {
                batch.flush();
                self.report();
                return;
            };
            for &(addr, desc, size) in &work.dead {
                // SAFETY: dead, ours alone (caller); each once.
                unsafe { crate::sweep::finalize(addr, desc, size, id, verify, &self.panics) };
                match (&work.run, space.alloc_space()) {
                    // SAFETY: live blocks are never at address 0.
                    (Some(_), _) => run.push(unsafe { NonNull::new_unchecked(addr as *mut u8) }),
                    // SAFETY: dead, its destructor run, in no registry
                    // (the sweep that found it took it out).
                    (None, Some(objects)) => unsafe { objects.free(addr, verify) },
                    (None, None) => crate::collector::fatal("finalizer: unheld objects outside a GlobalAlloc space"),
                }
            }
            if let Some(held) = work.run {
                // SAFETY: the blocks the sweep held the run of (all of the
                // page's dead objects it listed), each once, never touched
                // again.
                unsafe { batch.push_held_page_run(held, &run) };
                run.clear();
            }
            let mut s = self.state.lock();
            if s.queue.is_empty() {
                // Idle next, most likely: the runs sent so far go to their
                // owners now, and what panicked is told. Outside the lock,
                // which the coordinator takes to submit while it holds the
                // process-wide cycle lock: stderr may block (a pipe nobody
                // reads). Before `running` falls, so that a wait for the
                // drops finds both done. Work queued meanwhile is taken
                // next, and this is done again at its end.
                MutexGuard::unlocked(&mut s, || {
                    batch.flush();
                    self.report();
                });
            }
            s.running -= 1;
            if s.queue.is_empty() && s.running == 0 {
                self.changed.notify_all();
            }
        }
    }

    /// Reports the destructors that panicked since the last report.
    fn report(&self) {
        let n = self.panics.report("finalizer");
        self.panicked.fetch_add(n, Ordering::Relaxed);
    }
}
