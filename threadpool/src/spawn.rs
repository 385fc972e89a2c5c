//! `spawn`: fire-and-forget `'static` tasks, boxed; their panics go to the
//! pool's panic handler.

use crate::job;
use crate::registry::{self, Registry};
use crate::unwind;
use crate::worker::WorkerThread;

/// Runs `func` on the current pool (or the global one) at some later time and
/// returns at once. Nothing waits for it; use [`scope`](crate::scope()) to wait.
///
/// On a worker, the task goes onto that worker's deque; elsewhere it is
/// injected into the global pool.
///
/// # Panics
///
/// A panic in `func` does not reach the caller (there is none left): it goes
/// to the pool's panic handler (see
/// [`ThreadPoolBuilder::panic_handler`](crate::ThreadPoolBuilder::panic_handler)),
/// by default a line on stderr, and the pool carries on.
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// use std::sync::mpsc;
///
/// let (sender, receiver) = mpsc::channel();
/// loam_threadpool::spawn(move || sender.send(6 * 7).unwrap());
/// assert_eq!(receiver.recv().unwrap(), 42);
/// # }
/// ```
///
/// A spawned task outlives its caller, so it cannot borrow the caller's data,
/// and it runs on another thread, so it must be `Send`:
///
/// ```compile_fail
/// let data = vec![1, 2, 3];
/// loam_threadpool::spawn(|| println!("{data:?}")); // error: may outlive `data`
/// ```
///
/// ```compile_fail
/// let shared = std::rc::Rc::new(5);
/// loam_threadpool::spawn(move || println!("{shared}")); // error: `Rc` is not `Send`
/// ```
pub fn spawn<F>(func: F)
where
    F: FnOnce() + Send + 'static,
{
    registry::with_current_registry(|registry| spawn_in(registry, func));
}

/// Spawns `func` on `registry`'s pool.
pub(crate) fn spawn_in<F>(registry: &Registry, func: F)
where
    F: FnOnce() + Send + 'static,
{
    // Before the job is made: refused later (a worker's push never
    // checked), the job's closure was leaked, its captures never dropped
    // (a `Sender` whose receiver then waited for ever).
    crate::forked::refuse_since(registry.born);
    let worker = registry.queueing_worker();
    let job = move || {
        if let Err(payload) = unwind::halt_unwinding(func) {
            let worker = WorkerThread::current();
            // SAFETY: jobs run on workers, so this is the live current worker.
            unsafe { &*worker }.registry().handle_panic(payload);
        }
    };
    // SAFETY: the body is `'static`, so it borrows nothing that could die.
    registry.inject_or_push(worker, unsafe { job::spawned_job_ref(job) });
}
