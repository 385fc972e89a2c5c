//! The finalizer: one thread per runtime that runs the destructors of dead
//! objects, after the sweep found them, and then hands their blocks back.
//!
//! Why a thread of its own (the JVM's finalizer thread, Go's finalizer
//! goroutine): a destructor is user code and may block, on a lock say. Run
//! by the sweep, a destructor that waits for a lock held by a thread that
//! waits for the collector (in `collect`, in pacing, at the heap limit)
//! would deadlock both. Here the collector never waits for a destructor
//! without a bound: `collect` returns once the cycle has found and swept
//! its garbage (it sweeps again pages that waited for the finalizer if the
//! finalizer is done within a second), and only a runtime's last cycle
//! waits for the finalizer to finish, so that every destructor runs. A program that wants
//! every destructor run waits for it: [`Runtime::wait_for_drops`]
//! (`.NET`'s `GC.WaitForPendingFinalizers`). A destructor may therefore do
//! anything but wait for the finalizer: collect, build a runtime, take
//! locks.
//!
//! A page whose dead objects include one with drop glue is not handed back
//! by the sweep: it carries [`FINALIZING`] and goes here whole, with every
//! dead block it holds.
//! Later cycles leave such a page out; the finalizer clears the flag in
//! the same step that sends the run (`FreeBatch::push_page_run_clearing`),
//! after the run is counted out, so a snapshot that finds the flag clear
//! finds the run's blocks pending (`cycle.rs`, `snapshot_pages`).
//!
//! [`Runtime::wait_for_drops`]: crate::Runtime::wait_for_drops

use crate::gc::TypeDesc;
use loam_heap::FreeBatch;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use crate::panics::PanicLog;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Page flag: the page's dead objects wait for the finalizer (module docs).
/// Set by the sweep, cleared by the finalizer as it sends the page's run.
pub(crate) const FINALIZING: u8 = 4;

/// Pages flagged [`FINALIZING`] by any runtime's sweep and not yet handed
/// back, process-wide. A page can hold several runtimes' objects (a thread
/// that takes over an exited thread's heap allocates into its pages), and
/// no cycle sweeps a page another runtime's finalizer holds: a forced
/// cycle waits for this to fall to zero (a second at most) before it runs
/// again (`collector::coordinator`).
static HELD: std::sync::Mutex<usize> = std::sync::Mutex::new(0);
static HELD_CHANGED: std::sync::Condvar = std::sync::Condvar::new();

fn held_add(n: usize) {
    if n == 0 {
        return;
    }
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) += n;
}

fn held_sub(n: usize) {
    let mut h = HELD.lock().unwrap_or_else(|e| e.into_inner());
    *h -= n;
    if *h == 0 {
        HELD_CHANGED.notify_all();
    }
}

/// Waits until no finalizer of any runtime holds a page, `timeout` at
/// most; whether none does.
pub(crate) fn wait_no_pages_held(timeout: std::time::Duration) -> bool {
    let h = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let (h, _) = HELD_CHANGED
        .wait_timeout_while(h, timeout, |h| *h != 0)
        .unwrap_or_else(|e| e.into_inner());
    *h == 0
}

/// One page's dead objects, for the finalizer: each with its descriptor
/// (when the sweep read it) and its size.
pub(crate) struct PageWork {
    pub(crate) dead: Vec<(usize, Option<&'static TypeDesc>, usize)>,
    /// The objects are a `GlobalAlloc` space's (freed one by one through
    /// it), not one page's (sent back as a run).
    pub(crate) alloc_space: bool,
}

#[derive(Default)]
struct State {
    queue: VecDeque<PageWork>,
    /// Pages taken off the queue and not yet handed back.
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
        // Counted before the cycle lock is released (the sweep that flagged
        // them submits them), so before any other cycle's snapshot.
        held_add(work.iter().filter(|w| !w.alloc_space).count());
        let mut s = self.state.lock();
        s.queue.extend(work);
        self.changed.notify_all();
    }

    /// No more work will come (the runtime's last cycle has swept).
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }

    /// Waits until every page queued so far is handed back.
    pub(crate) fn wait_idle(&self) {
        let mut s = self.state.lock();
        while !s.queue.is_empty() || s.running > 0 {
            self.changed.wait(&mut s);
        }
    }

    /// As [`wait_idle`](Self::wait_idle), for `timeout` at most; whether the
    /// finalizer went idle.
    pub(crate) fn wait_idle_for(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut s = self.state.lock();
        while !s.queue.is_empty() || s.running > 0 {
            if self.changed.wait_until(&mut s, deadline).timed_out() {
                return s.queue.is_empty() && s.running == 0;
            }
        }
        true
    }

    /// The finalizer thread's loop, until closed and drained: runs each
    /// page's destructors, then sends its dead blocks back as one run.
    ///
    /// # Safety
    /// Every queued page's dead objects are this runtime's, found dead by a
    /// completed mark, owned by the finalizer alone, in a page flagged
    /// [`FINALIZING`] (so no sweep touches them).
    pub(crate) unsafe fn run(&self, id: u16, verify: bool, space: &crate::space::Space) {
        // User code is contained (`finalize` runs destructors through
        // `panics::contain`); a panic of ours here would leave `running`
        // up and every `wait_for_drops` and the runtime's drop waiting for
        // ever, so it ends the process with a message instead.
        struct AbortOnUnwind;
        impl Drop for AbortOnUnwind {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    crate::collector::fatal("the finalizer thread panicked");
                }
            }
        }
        let _abort = AbortOnUnwind;
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
                    // Idle: the runs sent so far go to their owners now,
                    // and what panicked is told.
                    batch.flush();
                    self.report();
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
                match space.alloc_space() {
                    // SAFETY: dead, its destructor run, in no registry
                    // (the sweep that found it took it out).
                    Some(objects) if work.alloc_space => unsafe { objects.free(addr, verify) },
                    // SAFETY: live blocks are never at address 0.
                    _ => run.push(unsafe { NonNull::new_unchecked(addr as *mut u8) }),
                }
            }
            if !work.alloc_space {
                // SAFETY: dead blocks of one page from `LoamAlloc`, each
                // once, never touched again; the flag goes as the run is
                // sent.
                unsafe { batch.push_page_run_clearing(&run, FINALIZING) };
                run.clear();
                held_sub(1);
            }
            let mut s = self.state.lock();
            s.running -= 1;
            if s.queue.is_empty() && s.running == 0 {
                batch.flush();
                self.report();
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
