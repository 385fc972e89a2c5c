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
//! # The brake
//! The sweep used to count what it hands the finalizer as freed, but
//! those blocks come back only after their destructors: a program that
//! makes garbage with drop glue faster than one thread runs the
//! destructors grew a backlog that the heap's count did not see (with two
//! threads making small objects that each own a `Vec`, 482 – 657 MiB
//! resident under a 64 MiB heap limit). So the backlog is counted
//! ([`Finalizer::pending`], queued before the sweep takes it off the
//! heap's count), and a mutator waits for the finalizer
//! ([`Finalizer::brake`]):
//! - at a call's entry, while the backlog is more than the room the heap
//!   leaves below where pacing begins (and than `BRAKE_MIN`, 1 MiB) by
//!   more than what is left of one sweep's batch
//!   ([`Finalizer::allowance`]: a program that drops a large structure
//!   goes on while the finalizer works through it, within the memory the
//!   structure held; one that keeps making garbage faster than the
//!   destructors run waits for them);
//! - inside a call, at the heap limit, which counts the backlog: one
//!   patience at most for each refused allocation, and not while a stop
//!   waits for the call (a ragged start or end waiting for it holds no
//!   mutator, and waits).
//!
//! That wait is the one place a mutator waits for user code it does not
//! run, and a destructor may wait for anything but the finalizer: for a
//! lock the braked thread holds, or for a cycle that waits for the braked
//! call (whose ragged start then waits a patience). So the wait is bounded by the finalizer's progress, not by the
//! backlog: it ends once the finalizer has finished no object for
//! [`BRAKE_PATIENCE`], and no brake waits again until it has finished one
//! since ([`Finalizer::stuck`]). A stuck destructor then costs the program
//! one patience, and its memory, never a deadlock.
//!
//! [`Runtime::wait_for_drops`]: crate::Runtime::wait_for_drops

use crate::gc::TypeDesc;
use loam_heap::{FreeBatch, HeldRun};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use crate::panics::PanicLog;
use crossbeam_utils::CachePadded;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a brake waits for the finalizer to finish an object before it
/// gives up ([`Finalizer::brake`]): the patience a wait gives a call that
/// runs on ([`RUNNING_PATIENCE`](crate::thread_state::RUNNING_PATIENCE)),
/// for the same reasons. Far longer than ordinary destructors take, and
/// than a busy machine keeps a runnable thread off the CPUs (a brake that
/// gave up on a running finalizer at the heap limit would refuse live data
/// that fits); short enough that a destructor blocked on the braked thread
/// costs the program one short wait.
pub(crate) const BRAKE_PATIENCE: Duration = crate::thread_state::RUNNING_PATIENCE;

/// Dead objects of a `GlobalAlloc` space per [`PageWork`] (whose sweep
/// finds them one by one, not by page): the finalizer sends back, and the
/// brake sees progress, a piece of that size at a time.
pub(crate) const OBJECTS_PER_WORK: usize = 1024;

/// Why [`Finalizer::brake`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BrakeEnd {
    /// The caller's condition no longer holds.
    Enough,
    /// The queue ran dry (the backlog is gone).
    Drained,
    /// The caller gave up (`give_up`).
    GaveUp,
    /// The finalizer has finished no object for a patience, now or since
    /// an earlier brake gave up on it.
    Stuck,
}

/// One page's dead objects, for the finalizer: each with its descriptor
/// (when the sweep read it) and its size.
pub(crate) struct PageWork {
    pub(crate) dead: Vec<(usize, Option<&'static TypeDesc>, usize)>,
    /// The page run that holds the blocks, sent once the destructors ran;
    /// `None` for a `GlobalAlloc` space's objects (freed one by one through
    /// it).
    pub(crate) run: Option<HeldRun>,
    /// What the objects count for in the heap's size (their blocks; in a
    /// `GlobalAlloc` space, with their prefixes): what the sweep takes off
    /// the heap's count, and the backlog holds until they are freed.
    pub(crate) bytes: usize,
}

#[derive(Default)]
struct State {
    queue: VecDeque<PageWork>,
    /// Pages taken off the queue whose runs are not sent yet.
    running: usize,
    /// No more work comes: finish the queue and exit.
    closed: bool,
    /// Mutators waiting in [`Finalizer::brake`]: the thread tells them of
    /// every page it finishes.
    braked: usize,
    /// Bytes left of each batch (one `submit`) still queued or running,
    /// oldest first: the thread finishes pages in queue order, so a page
    /// it finishes is of the first batch.
    batches: VecDeque<usize>,
}

impl State {
    /// The most bytes left of any batch (`Finalizer::allowance`).
    fn largest_batch(&self) -> usize {
        self.batches.iter().copied().max().unwrap_or(0)
    }
}

/// The finalizer's queue, shared by the sweep (which fills it), the
/// finalizer thread (which drains it), `wait_for_drops` and the brake.
pub(crate) struct Finalizer {
    /// Bytes of the dead objects queued and not yet sent back
    /// (`PageWork::bytes`): added as they are queued, taken off once
    /// their run is sent. Every `mutate` call reads it: on a line of its
    /// own, away from the counters the thread writes per object.
    pending: CachePadded<AtomicUsize>,
    state: Mutex<State>,
    /// Signals new work or `closed` to the thread, and an empty queue to
    /// those waiting for the drops.
    changed: Condvar,
    /// Destructors that panicked, not yet reported.
    panics: PanicLog,
    /// Destructors that panicked, in all (for `GcStats::user_panics`).
    pub(crate) panicked: AtomicU64,
    /// `State::largest_batch`, for the brake to read without the lock.
    allowance: AtomicUsize,
    /// Objects finalized, in all: the thread's progress (written by the
    /// thread alone, a store per object).
    done: AtomicU64,
    /// `done` as a brake last gave up (`u64::MAX`: none has): until the
    /// finalizer finishes another object, no brake waits.
    stuck_at: AtomicU64,
    /// Tells braked mutators of progress.
    progress: Condvar,
}

impl Default for Finalizer {
    fn default() -> Self {
        Self {
            pending: CachePadded::new(AtomicUsize::new(0)),
            state: Mutex::default(),
            changed: Condvar::new(),
            panics: PanicLog::default(),
            panicked: AtomicU64::new(0),
            allowance: AtomicUsize::new(0),
            done: AtomicU64::new(0),
            stuck_at: AtomicU64::new(u64::MAX),
            progress: Condvar::new(),
        }
    }
}

impl Finalizer {
    /// Queues pages of dead objects, counting them in the backlog; their
    /// destructors run soon after. Before the sweep takes them off the
    /// heap's count (`Cycle::sweep`).
    pub(crate) fn submit(&self, work: Vec<PageWork>) {
        if work.is_empty() {
            return;
        }
        let bytes: usize = work.iter().map(|w| w.bytes).sum();
        let mut s = self.state.lock();
        // With the pages, under the lock: a brake never sees the backlog
        // without the pages that make it up.
        self.pending.fetch_add(bytes, Ordering::Relaxed);
        s.batches.push_back(bytes);
        self.allowance.store(s.largest_batch(), Ordering::Relaxed);
        s.queue.extend(work);
        self.changed.notify_all();
    }

    /// Bytes of dead objects whose destructors have not run yet, or whose
    /// blocks are not yet sent back (`GcStats::drops_pending`).
    #[inline]
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// The most bytes left of any one batch the sweeps queued: memory the
    /// heap held anyway as those objects died, which may stay held while
    /// the finalizer works through it (`Mutator::brake_for_drops`).
    pub(crate) fn allowance(&self) -> usize {
        self.allowance.load(Ordering::Relaxed)
    }

    /// Whether a brake has given up on the finalizer and it has finished
    /// no object since: a destructor is blocked, or runs for a long time.
    pub(crate) fn stuck(&self) -> bool {
        self.stuck_at.load(Ordering::Relaxed) == self.done.load(Ordering::Relaxed)
    }

    /// Waits for the finalizer, a `slice` at a time, while `over()` holds
    /// (the caller's reading of the heap and the backlog), until the queue
    /// runs dry, `give_up(waited)` holds, or the finalizer has finished no
    /// object for [`BRAKE_PATIENCE`] (then it is [`stuck`](Self::stuck)
    /// until it finishes one). `over` and `give_up` are asked under the
    /// queue's lock, a leaf: they may read atomics only. Returns why it
    /// ended, and how long it waited, if it did. Not on the finalizer
    /// thread, which would wait for itself.
    pub(crate) fn brake(
        &self,
        over: impl Fn() -> bool,
        slice: Duration,
        give_up: impl Fn(Duration) -> bool,
    ) -> (BrakeEnd, Option<Duration>) {
        if self.stuck() {
            return (BrakeEnd::Stuck, None);
        }
        if !over() {
            return (BrakeEnd::Enough, None);
        }
        let start = Instant::now();
        let mut waited = false;
        let mut s = self.state.lock();
        s.braked += 1;
        let mut seen = self.done.load(Ordering::Relaxed);
        let mut since = start;
        let end = loop {
            if !over() {
                break BrakeEnd::Enough;
            }
            if s.queue.is_empty() && s.running == 0 {
                break BrakeEnd::Drained;
            }
            let now = Instant::now();
            if give_up(now - start) {
                break BrakeEnd::GaveUp;
            }
            if now >= since + BRAKE_PATIENCE {
                self.stuck_at.store(seen, Ordering::Relaxed);
                break BrakeEnd::Stuck;
            }
            self.progress.wait_until(&mut s, (now + slice).min(since + BRAKE_PATIENCE));
            waited = true;
            let done = self.done.load(Ordering::Relaxed);
            if done != seen {
                seen = done;
                since = Instant::now();
            }
        };
        s.braked -= 1;
        (end, waited.then(|| start.elapsed()))
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
        let mut finalized = 0_u64;
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
            let bytes = work.bytes;
            for &(addr, desc, size) in &work.dead {
                // SAFETY: dead, ours alone (caller); each once.
                unsafe { crate::sweep::finalize(addr, desc, size, id, verify, &self.panics) };
                finalized += 1;
                self.done.store(finalized, Ordering::Relaxed);
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
            // Sent (a run goes to its owner at once; a `GlobalAlloc`
            // space's objects were freed one by one above). Under the
            // lock, with the batch it was of.
            let mut s = self.state.lock();
            self.pending.fetch_sub(bytes, Ordering::Relaxed);
            if let Some(left) = s.batches.front_mut() {
                // One thread, in queue order, and `submit` queues no
                // empty batch: a page is of the first batch left.
                debug_assert!(bytes <= *left, "finalizer: a page past its batch");
                *left -= bytes.min(*left);
                if *left == 0 {
                    s.batches.pop_front();
                }
            }
            self.allowance.store(s.largest_batch(), Ordering::Relaxed);
            if s.braked > 0 {
                self.progress.notify_all();
            }
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
                self.progress.notify_all();
            }
        }
    }

    /// Reports the destructors that panicked since the last report.
    fn report(&self) {
        let n = self.panics.report("finalizer");
        self.panicked.fetch_add(n, Ordering::Relaxed);
    }
}
