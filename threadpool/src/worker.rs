//! A worker thread: its LIFO deque, the scheduling loop (pop, inbox, steal,
//! injector), waiting on a latch while running other jobs, and parking.

use std::cell::Cell;
use std::ptr;
use std::thread;

use crossbeam_deque::{Steal, Worker};

use crate::job::JobRef;
use crate::latch::CoreLatch;
use crate::registry::{Hook, Registry};
use crate::sync::Arc;
use crate::unwind::AbortIfPanic;

/// Failed look-ups for work (each followed by `yield_now`) before a worker
/// parks, unless the pool says otherwise (`ThreadPoolBuilder::idle_spins`).
/// Parking and waking cost system calls, so a worker that runs dry between
/// two bursts of a join tree should stay awake across the gap.
pub(crate) const DEFAULT_IDLE_SPINS: u32 = 32;

/// A victim deque at least this long is robbed in a batch (up to half of it,
/// at most 32 jobs) rather than one job at a time. Long deques come from
/// loops of `spawn`s, where one job at a time makes the thief fight the owner
/// for the deque's cache lines on every task; a `join` tree keeps its deque
/// as short as its depth, so it keeps single steals, which hand the thief the
/// biggest piece of work.
const BATCH_STEAL_MIN_LEN: usize = 64;

thread_local! {
    /// The `WorkerThread` running on this thread, or null outside any pool.
    /// Written only by `WorkerThread::run` (set at start, cleared on exit).
    static WORKER_THREAD: Cell<*const WorkerThread> = const { Cell::new(ptr::null()) };
}

/// The state a worker thread owns: its deque and its place in the registry.
///
/// # Invariants
///
/// Lives on its thread's stack for the whole of `run`; `WORKER_THREAD` points
/// to it exactly then. `deque` is touched only by this thread (others use its
/// stealer, in the registry at `index`).
pub(crate) struct WorkerThread {
    /// This worker's deque: LIFO for its owner, stolen FIFO by the others.
    deque: Worker<JobRef>,
    index: usize,
    /// xorshift state for picking the first steal victim; owner-only.
    rng: Cell<u64>,
    registry: Arc<Registry>,
    /// Set once the scheduling loop has ended, for the exit hook: work it
    /// queued would never run (every worker has left its loop).
    exiting: Cell<bool>,
    /// Set while a park hook runs (`before_park`, `after_unpark`): in a
    /// pool being dropped the worker may have counted itself out of work
    /// there, and a job it queued then could be left behind when the last
    /// worker exits (`exit.rs`).
    in_park_hook: Cell<bool>,
}

/// Clears `WORKER_THREAD` when the worker's `run` ends, even by unwinding.
struct ClearCurrent;

impl Drop for ClearCurrent {
    fn drop(&mut self) {
        WORKER_THREAD.with(|current| current.set(ptr::null()));
    }
}

impl WorkerThread {
    /// The body of worker thread `index`: start hook, scheduling loop until
    /// the pool terminates and no work is left, exit hook.
    pub(crate) fn run(registry: Arc<Registry>, index: usize, deque: Worker<JobRef>) {
        let worker = WorkerThread {
            deque,
            index,
            rng: Cell::new(0x9E37_79B9_7F4A_7C15 ^ ((index as u64 + 1) << 17)),
            registry,
            exiting: Cell::new(false),
            in_park_hook: Cell::new(false),
        };
        WORKER_THREAD.with(|current| current.set(&worker));
        let _clear = ClearCurrent;
        let hooks = &worker.registry.hooks;
        worker.registry.spread.awake(index);
        run_hook(&hooks.start, index);
        worker.main_loop();
        // No worker of this pool looks at a queue again: a `spawn` in the
        // hook panics (`Registry::queueing_worker`), and so does a wait
        // (a broadcast waited for ever for the workers that had left).
        worker.exiting.set(true);
        let _no_waits = crate::no_wait::forbid_waits(
            "in a pool's exit handler (the pool's workers have stopped taking work)",
        );
        run_hook(&hooks.exit, index);
    }

    /// Whether this worker's scheduling loop has ended (its exit hook runs).
    #[inline]
    pub(crate) fn exiting(&self) -> bool {
        self.exiting.get()
    }

    /// Whether one of the pool's park hooks is running on this worker.
    #[inline]
    pub(crate) fn in_park_hook(&self) -> bool {
        self.in_park_hook.get()
    }

    /// Runs a park hook (`before_park`, `after_unpark`), refusing the
    /// work it would queue on this pool (`Registry::queueing_worker`).
    fn run_park_hook(&self, hook: &Option<Hook>) {
        // Kept across a hook that parks again inside (a `join` on its own
        // pool): the inner hook's end must not clear the outer's flag.
        let outer = self.in_park_hook.replace(true);
        run_hook(hook, self.index);
        self.in_park_hook.set(outer);
    }

    /// The worker running on this thread, or null.
    #[inline]
    pub(crate) fn current() -> *const WorkerThread {
        WORKER_THREAD.with(Cell::get)
    }

    /// This worker's index in its pool, `0..num_threads`.
    #[inline]
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// The pool this worker belongs to.
    #[inline]
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Pushes a job onto this worker's own deque, offering it for stealing.
    #[inline]
    pub(crate) fn push(&self, job: JobRef) {
        self.deque.push(job);
        // Alone in its pool, the pusher has nobody to wake.
        if self.registry.num_threads() > 1 {
            self.registry.sleep.notify_new_work();
        }
    }

    /// Pops the newest job of this worker's own deque.
    #[inline]
    pub(crate) fn take_local_job(&self) -> Option<JobRef> {
        self.deque.pop()
    }

    /// True if this worker's deque is empty (for the sleep re-check).
    pub(crate) fn deque_is_empty(&self) -> bool {
        self.deque.is_empty()
    }

    /// Runs a job. (The between-tasks hook is the top-level loop's business.)
    #[inline]
    pub(crate) fn execute(&self, job: JobRef) {
        // SAFETY: every `JobRef` in our queues is live and is handed out once
        // by the deque/injector, so this is its only execution.
        unsafe { job.execute() };
    }

    /// The next job for this worker: its own deque, then its broadcast inbox,
    /// then a random peer's deque, then the injector.
    #[inline]
    fn find_work(&self) -> Option<JobRef> {
        self.deque.pop().or_else(|| self.steal_work())
    }

    /// The slow half of `find_work`: everything but the own deque.
    fn steal_work(&self) -> Option<JobRef> {
        let registry = &*self.registry;
        if let Some(job) = retry_steal(|| registry.inbox(self.index).steal()) {
            return Some(job);
        }
        let n = registry.num_threads();
        if n > 1 {
            let start = self.next_random() % n;
            let victims = (start..n).chain(0..start).filter(|&i| i != self.index);
            let stolen = retry_steal(|| {
                let mut retry = false;
                for victim in victims.clone() {
                    let stealer = registry.stealer(victim);
                    let attempt = if stealer.len() >= BATCH_STEAL_MIN_LEN {
                        stealer.steal_batch_and_pop(&self.deque)
                    } else {
                        stealer.steal()
                    };
                    match attempt {
                        Steal::Success(job) => return Steal::Success(job),
                        Steal::Retry => retry = true,
                        Steal::Empty => {}
                    }
                }
                if retry {
                    Steal::Retry
                } else {
                    Steal::Empty
                }
            });
            if stolen.is_some() {
                if !self.deque.is_empty() {
                    // A batch landed in our deque; let a parked peer share it.
                    registry.sleep.notify_new_work();
                }
                return stolen;
            }
        }
        let job = retry_steal(|| registry.injector.steal_batch_and_pop(&self.deque))?;
        if !self.deque.is_empty() {
            // The batch landed in our deque; let a parked peer share it.
            registry.sleep.notify_new_work();
        }
        Some(job)
    }

    /// The scheduling loop of an idle worker; returns when the pool
    /// terminates and every worker is out of work (`exit.rs`).
    fn main_loop(&self) {
        let mut idle_rounds = 0;
        loop {
            if let Some(job) = self.find_work() {
                self.execute(job);
                // Nothing of any task is on this stack now: a safepoint.
                run_hook(&self.registry.hooks.between_tasks, self.index);
                idle_rounds = 0;
            } else if self.registry.is_terminating() {
                if self.ready_to_exit() {
                    return;
                }
                idle_rounds = 0;
            } else if idle_rounds < self.registry.idle_spins {
                idle_rounds += 1;
                thread::yield_now();
            } else {
                self.park(None);
                idle_rounds = 0;
            }
        }
    }

    /// Termination, after a look-up found no work: true once every worker
    /// is out of work at the same time, false when this one is to look
    /// again (the protocol and its loom model: `exit.rs`).
    #[cold]
    fn ready_to_exit(&self) -> bool {
        let registry = &*self.registry;
        if registry.exit.count_in(registry.num_threads()) {
            registry.sleep.wake_all();
            return true;
        }
        self.run_park_hook(&registry.hooks.before_park);
        registry.spread.parked(self.index);
        registry.sleep.sleep(self.index, None, || {
            registry.exit.all_idle() || registry.has_queued_work(self)
        });
        registry.spread.awake_again(self.index);
        self.run_park_hook(&registry.hooks.after_unpark);
        if registry.exit.all_idle() {
            return true;
        }
        registry.exit.count_out();
        false
    }

    /// Returns once `latch` is set, running other jobs meanwhile (so a worker
    /// waiting on a stolen job keeps the pool busy and nested joins never
    /// deadlock), and parking when there is nothing to run.
    #[inline]
    pub(crate) fn wait_until(&self, latch: &CoreLatch) {
        if !latch.probe() {
            self.wait_until_cold(latch);
        }
    }

    #[cold]
    fn wait_until_cold(&self, latch: &CoreLatch) {
        let mut idle_rounds = 0;
        while !latch.probe() {
            if let Some(job) = self.find_work() {
                self.execute(job);
                idle_rounds = 0;
            } else if idle_rounds < self.registry.idle_spins {
                idle_rounds += 1;
                thread::yield_now();
            } else {
                self.park(Some(latch));
                idle_rounds = 0;
            }
        }
    }

    /// Parks until woken (new work, termination, or `latch` set), with the
    /// pool's park hooks around it. The hooks always come in pairs, even when
    /// the worker finds work at the last moment and does not block.
    #[cold]
    fn park(&self, latch: Option<&CoreLatch>) {
        let registry = &*self.registry;
        self.run_park_hook(&registry.hooks.before_park);
        registry.spread.parked(self.index);
        // A latch waiter sleeps through termination (its job is not done);
        // with the idle loop's re-check it spun instead, termination being
        // "work" to that check, for as long as the job it waits for ran.
        let blocked = registry.sleep.sleep(self.index, latch, || match latch {
            Some(_) => registry.has_queued_work(self),
            None => registry.has_work(self),
        });
        if blocked {
            registry.spread.awake(self.index);
        } else {
            registry.spread.awake_again(self.index);
        }
        self.run_park_hook(&registry.hooks.after_unpark);
    }

    /// xorshift64*: a cheap, owner-only random number for victim choice.
    fn next_random(&self) -> usize {
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as usize
    }
}

impl std::fmt::Debug for WorkerThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerThread")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// Runs a hook, if set. A hook that panics aborts the process: it may be
/// running while other workers hold pointers into this worker's stack (a
/// `join` waiting for its stolen half), so unwinding past it is not an option.
#[inline]
fn run_hook(hook: &Option<Hook>, index: usize) {
    if let Some(hook) = hook {
        let abort = AbortIfPanic("a pool hook panicked");
        hook(index);
        std::mem::forget(abort);
    }
}

/// Repeats a steal while it asks to be retried.
#[inline]
fn retry_steal(mut steal: impl FnMut() -> Steal<JobRef>) -> Option<JobRef> {
    loop {
        match steal() {
            Steal::Success(job) => return Some(job),
            Steal::Empty => return None,
            Steal::Retry => {}
        }
    }
}
