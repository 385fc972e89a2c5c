//! The registry: what a pool's workers share (stealers, injector, inboxes,
//! sleep state, hooks), how work enters it, and the process-wide global pool.

use std::ptr;
use std::sync::OnceLock;

use crossbeam_deque::{Injector, Stealer};
use crossbeam_utils::CachePadded;

use crate::exit::ExitCount;
use crate::job::{JobRef, StackJob};
use crate::latch::{CrossLatch, LockLatch, WakeOwner};
use crate::sleep::Sleep;
use crate::sync::{Arc, AtomicBool, Ordering};
use crate::unwind::{self, AbortIfPanic, Payload};
use crate::worker::WorkerThread;
use crate::ThreadPool;

/// A per-worker callback taking the worker's index.
pub(crate) type Hook = Box<dyn Fn(usize) + Send + Sync + 'static>;
/// Receives the payload of a panic in a `spawn`ed task.
pub(crate) type PanicHandler = Box<dyn Fn(Payload) + Send + Sync + 'static>;

/// The callbacks a pool's workers run; all optional.
#[derive(Default)]
pub(crate) struct Hooks {
    pub(crate) start: Option<Hook>,
    pub(crate) exit: Option<Hook>,
    pub(crate) between_tasks: Option<Hook>,
    pub(crate) before_park: Option<Hook>,
    pub(crate) after_unpark: Option<Hook>,
    pub(crate) panic_handler: Option<PanicHandler>,
}

/// What one worker exposes to the others.
struct ThreadInfo {
    /// The stealing end of the worker's deque.
    stealer: Stealer<JobRef>,
    /// Jobs only this worker may run (broadcasts); anyone pushes, it steals.
    inbox: Injector<JobRef>,
}

/// The shared heart of a pool. Kept alive by the `ThreadPool` handle and by
/// every worker thread (each holds an `Arc`).
///
/// # Invariants
///
/// `thread_infos.len() == sleep.num_workers() == num_threads >= 1`, fixed
/// for the pool's life (`assert_valid`, at creation). Every queued `JobRef` is
/// live until a worker of this pool runs it; once `terminating` is set, the
/// workers exit only once every one of them is out of work at the same
/// time (`exit.rs`), so queued work still runs, and
/// so does work a job still running hands a worker that had none.
pub(crate) struct Registry {
    thread_infos: Box<[CachePadded<ThreadInfo>]>,
    /// Jobs from outside the pool (and `spawn` from non-workers); any worker
    /// steals them.
    pub(crate) injector: Injector<JobRef>,
    pub(crate) sleep: Sleep,
    /// The CPU of each awake worker, to move one woken onto another's
    /// (`spread.rs`).
    pub(crate) spread: crate::spread::Spread,
    /// Set once, by `ThreadPool::drop` (`SeqCst`, then `sleep.wake_all()`);
    /// read by workers after a failed look-up and in the sleep re-check
    /// (`SeqCst`; the sleep mutex orders it with parking).
    terminating: AtomicBool,
    /// Once terminating: when the workers may leave (`exit.rs`).
    pub(crate) exit: ExitCount,
    pub(crate) hooks: Hooks,
    /// The process's fork count as the pool was built: a child forked
    /// since has none of its workers (`forked.rs`).
    pub(crate) born: u64,
    /// Failed looks for work (each followed by a yield) before a worker
    /// parks (`ThreadPoolBuilder::idle_spins`).
    pub(crate) idle_spins: u32,
}

impl Registry {
    /// A registry for workers with the given deque stealers.
    pub(crate) fn new(
        stealers: Vec<Stealer<JobRef>>,
        hooks: Hooks,
        spread_on_wake: bool,
        idle_spins: u32,
    ) -> Registry {
        let num_threads = stealers.len();
        let registry = Registry {
            thread_infos: stealers
                .into_iter()
                .map(|stealer| {
                    CachePadded::new(ThreadInfo {
                        stealer,
                        inbox: Injector::new(),
                    })
                })
                .collect(),
            injector: Injector::new(),
            sleep: Sleep::new(num_threads),
            spread: crate::spread::Spread::new(num_threads, spread_on_wake),
            terminating: AtomicBool::new(false),
            exit: ExitCount::default(),
            hooks,
            born: crate::forked::generation(),
            idle_spins,
        };
        registry.assert_valid();
        registry
    }

    /// Checks the registry's shape invariant; aborts with a `pool:` message
    /// if it is broken.
    pub(crate) fn assert_valid(&self) {
        if self.thread_infos.len() != self.sleep.num_workers() || self.thread_infos.is_empty() {
            crate::say(format_args!(
                "pool: registry has {} workers but {} parking spots",
                self.thread_infos.len(),
                self.sleep.num_workers()
            ));
            std::process::abort();
        }
        self.sleep.assert_valid();
    }

    /// Number of worker threads.
    #[inline]
    pub(crate) fn num_threads(&self) -> usize {
        self.thread_infos.len()
    }

    /// The stealing end of worker `index`'s deque.
    #[inline]
    pub(crate) fn stealer(&self, index: usize) -> &Stealer<JobRef> {
        &self.thread_infos[index].stealer
    }

    /// Worker `index`'s broadcast inbox.
    #[inline]
    pub(crate) fn inbox(&self, index: usize) -> &Injector<JobRef> {
        &self.thread_infos[index].inbox
    }

    /// Queues a job any worker may take, and wakes up to two parked workers
    /// (`Sleep::notify_injected`: the second is for the job's first fork).
    pub(crate) fn inject(&self, job: JobRef) {
        crate::forked::refuse_since(self.born);
        self.injector.push(job);
        self.sleep.notify_injected();
    }

    /// Queues a job only worker `index` may run, and wakes that worker.
    /// Its one caller, `broadcast`, refuses a forked child first (here, a
    /// refusal would come under the broadcast's abort guard).
    pub(crate) fn push_to_inbox(&self, index: usize, job: JobRef) {
        self.inbox(index).push(job);
        // Locking the worker's sleep mutex orders this push with its re-check.
        self.sleep.wake_specific(index);
    }

    /// Pushes onto the current worker's deque if it belongs to this pool,
    /// else injects.
    /// `worker` from [`queueing_worker`](Self::queueing_worker), in the
    /// same call.
    #[inline]
    pub(crate) fn inject_or_push(&self, worker: Option<&WorkerThread>, job: JobRef) {
        match worker {
            Some(worker) => worker.push(job),
            None => self.inject(job),
        }
    }

    /// The current thread's worker, if it is one of this pool's, for a
    /// spawn's [`inject_or_push`](Self::inject_or_push); panics where work
    /// queued on this pool now could never run: on one of its workers
    /// whose exit hook or park hook is running. Called before a spawn
    /// makes its job or a scope's count rises (after, the job's closure
    /// was leaked, or the scope waited for a task never queued).
    #[inline]
    pub(crate) fn queueing_worker(&self) -> Option<&WorkerThread> {
        let worker = self.current_worker();
        match worker {
            Some(w) if w.exiting() => refuse_exiting(),
            Some(w) if w.in_park_hook() => refuse_park_hook(),
            _ => worker,
        }
    }

    /// The current thread's worker, if it is one of this pool's.
    #[inline]
    pub(crate) fn current_worker(&self) -> Option<&WorkerThread> {
        let worker = WorkerThread::current();
        if worker.is_null() {
            return None;
        }
        // SAFETY: a non-null `WORKER_THREAD` points to the worker on this
        // thread's stack, live for the whole of the current call.
        let worker = unsafe { &*worker };
        ptr::eq(&**worker.registry(), self).then_some(worker)
    }

    /// Runs `op` on a worker of this pool: inline if the current thread is
    /// one; from a worker of another pool, by injecting a job and running that
    /// pool's work until it is done; from any other thread, by injecting a job
    /// and blocking until it is done.
    pub(crate) fn in_worker<OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce(&WorkerThread) -> R + Send,
        R: Send,
    {
        crate::no_wait::check_may_wait();
        let worker = WorkerThread::current();
        if worker.is_null() {
            return self.in_worker_cold(op);
        }
        // SAFETY: a non-null `WORKER_THREAD` is this thread's live worker.
        let worker = unsafe { &*worker };
        if ptr::eq(&**worker.registry(), self) {
            op(worker)
        } else {
            self.in_worker_cross(worker, op)
        }
    }

    /// `in_worker` from `current`, a worker of another pool: it keeps serving
    /// its own pool while this one runs `op`.
    #[cold]
    fn in_worker_cross<OP, R>(&self, current: &WorkerThread, op: OP) -> R
    where
        OP: FnOnce(&WorkerThread) -> R + Send,
        R: Send,
    {
        let job = StackJob::new(
            || {
                let worker = WorkerThread::current();
                assert!(!worker.is_null(), "pool: injected job ran off the pool");
                // SAFETY: non-null `WORKER_THREAD` is this thread's live worker.
                op(unsafe { &*worker })
            },
            CrossLatch::new(Arc::clone(current.registry()), current.index()),
        );
        // SAFETY: `job` stays on this stack until its latch is set below.
        self.inject(unsafe { job.as_job_ref() });
        current.wait_until(&job.latch.core);
        job.into_result()
    }

    /// The blocking half of `in_worker`, for threads that are no pool's
    /// workers.
    #[cold]
    pub(crate) fn in_worker_cold<OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce(&WorkerThread) -> R + Send,
        R: Send,
    {
        thread_local! {
            /// This thread's latch for blocking on injected jobs; thread-local
            /// so it outlives every setter that may still be releasing it.
            static LOCK_LATCH: LockLatch = LockLatch::new();
        }
        LOCK_LATCH.with(|latch| {
            let job = StackJob::new(
                || {
                    let worker = WorkerThread::current();
                    assert!(!worker.is_null(), "pool: injected job ran off the pool");
                    // SAFETY: non-null `WORKER_THREAD` is this thread's live worker.
                    op(unsafe { &*worker })
                },
                latch,
            );
            // SAFETY: `job` stays on this stack until its latch is set below.
            self.inject(unsafe { job.as_job_ref() });
            latch.wait_and_reset();
            job.into_result()
        })
    }

    /// True if worker `worker` has something to do or must look at
    /// termination: the idle sleep's re-check, so it reads every queue a
    /// wake-up can be about.
    pub(crate) fn has_work(&self, worker: &WorkerThread) -> bool {
        self.is_terminating() || self.has_queued_work(worker)
    }

    /// True if a queue worker `worker` reads holds a job: the re-check of
    /// a sleep that termination does not end (a wait on a latch, a wait
    /// for the other workers to run out of work).
    pub(crate) fn has_queued_work(&self, worker: &WorkerThread) -> bool {
        !worker.deque_is_empty()
            || !self.inbox(worker.index()).is_empty()
            || !self.injector.is_empty()
            || self
                .thread_infos
                .iter()
                .any(|info| !info.stealer.is_empty())
    }

    /// Asks the workers to exit once they run out of work, and wakes them.
    pub(crate) fn terminate(&self) {
        self.terminating.store(true, Ordering::SeqCst);
        self.sleep.wake_all();
    }

    /// True once `terminate` was called.
    #[inline]
    pub(crate) fn is_terminating(&self) -> bool {
        self.terminating.load(Ordering::SeqCst)
    }

    /// Deals with a panic that escaped a `spawn`ed task: the configured
    /// handler, or a report on stderr. Either way the pool keeps serving.
    #[cold]
    pub(crate) fn handle_panic(&self, payload: Payload) {
        match &self.hooks.panic_handler {
            Some(handler) => {
                // A handler that panics has nowhere left to report to.
                let abort = AbortIfPanic("the panic handler panicked");
                handler(payload);
                std::mem::forget(abort);
            }
            None => {
                crate::say(format_args!(
                    "loam-threadpool: a spawned task panicked ({}); the pool continues",
                    unwind::payload_message(&payload)
                ));
                unwind::drop_payload(payload);
            }
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("num_threads", &self.num_threads())
            .field("terminating", &self.is_terminating())
            .field("sleep", &self.sleep)
            .finish_non_exhaustive()
    }
}

/// The pool used by the free functions when called outside any pool; started
/// on first use with default settings, or by `ThreadPoolBuilder::build_global`.
pub(crate) static GLOBAL_POOL: OnceLock<ThreadPool> = OnceLock::new();

/// The global pool's registry, starting the pool if needed.
///
/// # Panics
///
/// If the global pool's threads cannot be started.
pub(crate) fn global_registry() -> &'static Arc<Registry> {
    GLOBAL_POOL
        .get_or_init(|| {
            crate::ThreadPoolBuilder::new()
                .build()
                .expect("pool: cannot start the global thread pool")
        })
        .registry()
}

/// Runs `op` on the current worker (any pool), or on the global pool's.
pub(crate) fn in_worker<OP, R>(op: OP) -> R
where
    OP: FnOnce(&WorkerThread) -> R + Send,
    R: Send,
{
    crate::no_wait::check_may_wait();
    let worker = WorkerThread::current();
    if worker.is_null() {
        global_registry().in_worker_cold(op)
    } else {
        // SAFETY: non-null `WORKER_THREAD` is this thread's live worker.
        op(unsafe { &*worker })
    }
}

/// Calls `f` with the current worker's registry, or the global one.
pub(crate) fn with_current_registry<R>(f: impl FnOnce(&Arc<Registry>) -> R) -> R {
    let worker = WorkerThread::current();
    if worker.is_null() {
        f(global_registry())
    } else {
        // SAFETY: non-null `WORKER_THREAD` is this thread's live worker.
        f(unsafe { &*worker }.registry())
    }
}

/// A `spawn` from a pool's exit handler: the job would never run.
#[cold]
#[inline(never)]
fn refuse_exiting() -> ! {
    panic!(
        "loam-threadpool: a task spawned in a pool's exit handler would never run \
         (the pool's workers have stopped taking work); spawn it on another pool"
    )
}

/// A `spawn` from a pool's park hook: in a pool being dropped the worker
/// may have counted itself out of work there, and the job could be left
/// behind when the last worker exits.
#[cold]
#[inline(never)]
fn refuse_park_hook() -> ! {
    panic!(
        "loam-threadpool: a task spawned on a pool from its own before_park or \
         after_unpark hook (a parking worker may never run it); spawn it from \
         a task, or on another pool"
    )
}

impl WakeOwner for Registry {
    fn wake_owner(&self, owner: usize) {
        self.sleep.wake_specific(owner);
    }
}
