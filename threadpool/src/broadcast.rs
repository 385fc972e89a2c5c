//! `broadcast`: run a closure once on every worker of a pool, through each
//! worker's private inbox, and collect the results in worker order.

use crate::job::StackJob;
use crate::latch::{CountLatch, CountLatchRef};
use crate::registry;
use crate::unwind::{self, AbortIfPanic};
use crate::worker::WorkerThread;

/// Where a [`broadcast`] closure is running.
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// let seen = pool.broadcast(|ctx| (ctx.index(), ctx.num_threads()));
/// assert_eq!(seen, vec![(0, 2), (1, 2)]);
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct BroadcastContext {
    index: usize,
    num_threads: usize,
}

impl BroadcastContext {
    /// The index of the worker running this call, `0..num_threads()`; the
    /// same as [`current_thread_index`](crate::current_thread_index) there.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// let same = pool.broadcast(|ctx| Some(ctx.index()) == loam_threadpool::current_thread_index());
    /// assert_eq!(same, vec![true, true]);
    /// # }
    /// ```
    pub fn index(&self) -> usize {
        self.index
    }

    /// The number of workers, hence of calls, in this broadcast.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    /// assert_eq!(pool.broadcast(|ctx| ctx.num_threads()), vec![3, 3, 3]);
    /// # }
    /// ```
    pub fn num_threads(&self) -> usize {
        self.num_threads
    }
}

/// Runs `op` once on every worker of the current pool (or the global pool)
/// and returns the results, indexed by worker.
///
/// Each call runs on its own worker as soon as that worker finishes its
/// current job (a worker waiting inside a `join` also takes it). Blocks until
/// all calls are done.
///
/// # Panics
///
/// If any call panics, a panic is resumed here after all calls are done.
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
/// let indices = pool.broadcast(|ctx| ctx.index());
/// assert_eq!(indices, vec![0, 1, 2]);
/// # }
/// ```
pub fn broadcast<OP, R>(op: OP) -> Vec<R>
where
    OP: Fn(BroadcastContext) -> R + Sync,
    R: Send,
{
    registry::in_worker(|worker| broadcast_in_worker(worker, &op))
}

/// `broadcast` from worker `worker`, which waits (running its own share).
pub(crate) fn broadcast_in_worker<OP, R>(worker: &WorkerThread, op: &OP) -> Vec<R>
where
    OP: Fn(BroadcastContext) -> R + Sync,
    R: Send,
{
    let registry = worker.registry();
    let num_threads = registry.num_threads();
    let latch = CountLatch::new(num_threads, worker.index());
    let jobs: Vec<_> = (0..num_threads)
        .map(|index| {
            let context = BroadcastContext { index, num_threads };
            StackJob::new(
                move || op(context),
                CountLatchRef {
                    latch: &latch,
                    sleep: &registry.sleep,
                },
            )
        })
        .collect();
    // A pool in a forked child refuses with a panic, as documented, before
    // the guard below would turn it into an abort.
    crate::forked::refuse_since(registry.born);
    // Between the first push and the wait, other workers point into `jobs`.
    let abort = AbortIfPanic("panic while a broadcast was in flight");
    for (index, job) in jobs.iter().enumerate() {
        // SAFETY: `jobs` is neither moved nor dropped until the latch (which
        // counts every job) is set.
        registry.push_to_inbox(index, unsafe { job.as_job_ref() });
    }
    worker.wait_until(&latch.core);
    std::mem::forget(abort);
    // The first panic is resumed; the others' payloads are dropped first,
    // one by one (dropped by that unwind, a payload whose `Drop` panics
    // would abort the process).
    let mut results = Vec::with_capacity(num_threads);
    let mut first_panic = None;
    for job in jobs {
        match job.into_outcome() {
            Ok(value) => results.push(value),
            Err(payload) if first_panic.is_none() => first_panic = Some(payload),
            Err(payload) => unwind::drop_payload(payload),
        }
    }
    if let Some(payload) = first_panic {
        unwind::drop_quietly(results);
        unwind::resume_unwinding(payload);
    }
    results
}
