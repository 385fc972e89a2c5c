//! `join`: run two closures, potentially in parallel. Work-first: the caller
//! runs `a` itself and offers `b` for stealing, taking it back if nobody did.

use crate::job::StackJob;
use crate::latch::SpinLatch;
use crate::registry;
use crate::unwind;
use crate::worker::WorkerThread;

/// Runs `a` and `b`, potentially in parallel, and returns both results.
///
/// On a worker thread, `a` runs right here and `b` is pushed onto this
/// worker's deque, where an idle worker may steal it; if nobody has, the
/// caller pops it back and runs it too, so `join` costs little more than two
/// calls. While waiting for a stolen `b` the caller runs other jobs, so
/// nested joins never deadlock. Called outside any pool, `join` runs on the
/// global pool and blocks the caller until both are done.
///
/// # Panics
///
/// If `a` or `b` panics, the panic is resumed here once both have finished
/// (if both panic, `a`'s panic wins). The pool keeps working.
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// fn fib(n: u64) -> u64 {
///     if n < 10 {
///         return if n < 2 { n } else { fib(n - 1) + fib(n - 2) };
///     }
///     let (a, b) = loam_threadpool::join(|| fib(n - 1), || fib(n - 2));
///     a + b
/// }
/// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// assert_eq!(pool.install(|| fib(20)), 6765);
/// # }
/// ```
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    registry::in_worker(|worker| join_in_worker(worker, a, b))
}

/// `join` on worker `worker`: the work-first fast path.
///
/// 1. push `b` (a `StackJob` on this stack) onto our deque;
/// 2. run `a`, catching a panic;
/// 3. pop our deque until `b` comes back (run it inline) or is found stolen;
///    jobs pushed above `b` by `a` and still queued are run on the way;
/// 4. if stolen, run other work until `b`'s latch is set.
pub(crate) fn join_in_worker<A, B, RA, RB>(worker: &WorkerThread, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let job_b = StackJob::new(b, SpinLatch::new(&worker.registry().sleep, worker.index()));
    // SAFETY: `job_b` lives on this frame until its latch is set or we popped
    // it back; every exit below (including `a` panicking) passes through one
    // of the two.
    worker.push(unsafe { job_b.as_job_ref() });
    let job_b_id = &job_b as *const _ as *const ();

    let result_a = match unwind::halt_unwinding(a) {
        Ok(value) => value,
        Err(payload) => {
            // `b` may be running elsewhere and borrows our stack: wait for it.
            worker.wait_until(&job_b.latch.core);
            // `b`'s result, or its own panic, is dropped here, not by the
            // unwind of `a`'s: a `Drop` that panics would abort the process
            // there.
            match job_b.into_outcome() {
                Ok(result_b) => unwind::drop_quietly(result_b),
                Err(payload_b) => unwind::drop_payload(payload_b),
            }
            unwind::resume_unwinding(payload)
        }
    };

    while !job_b.latch.probe() {
        match worker.take_local_job() {
            Some(job) if job.is_stack_job(job_b_id) => {
                // `b`'s panic resumed with `a`'s result dropped quietly
                // first, as below.
                return match unwind::halt_unwinding(|| job_b.run_inline()) {
                    Ok(result_b) => (result_a, result_b),
                    Err(payload) => {
                        unwind::drop_quietly(result_a);
                        unwind::resume_unwinding(payload)
                    }
                };
            }
            Some(job) => worker.execute(job),
            None => {
                worker.wait_until(&job_b.latch.core);
                break;
            }
        }
    }
    // `b`'s panic is resumed with `a`'s result dropped first, quietly: a
    // `Drop` of it that panics in that unwind would abort the process.
    match job_b.into_outcome() {
        Ok(result_b) => (result_a, result_b),
        Err(payload) => {
            unwind::drop_quietly(result_a);
            unwind::resume_unwinding(payload)
        }
    }
}
