//! `scope`: spawn tasks that borrow from the caller's stack; the scope waits
//! for all of them and re-raises the first panic among them.

use std::marker::PhantomData;
use std::ptr;

use crate::job;
use crate::latch::CountLatch;
use crate::registry::{self, Registry};
use crate::sync::{Arc, AtomicPtr, Ordering};
use crate::unwind::{self, Payload};
use crate::worker::WorkerThread;

/// A scope in which tasks borrowing non-`'static` data can be spawned; see
/// [`scope`].
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// let words = ["alpha", "beta", "gamma"];
/// let mut lengths = [0; 3];
/// loam_threadpool::scope(|s: &loam_threadpool::Scope<'_>| {
///     for (word, length) in words.iter().zip(lengths.iter_mut()) {
///         s.spawn(move |_| *length = word.len());
///     }
/// });
/// assert_eq!(lengths, [5, 4, 5]);
/// # }
/// ```
///
/// # Invariants
///
/// The scope outlives every task spawned in it: `latch` counts the body plus
/// the unfinished tasks, and `scope` returns only once it reaches zero.
pub struct Scope<'scope> {
    registry: Arc<Registry>,
    latch: CountLatch,
    /// The first panic caught in the body or a task (a leaked `Box<Payload>`).
    /// Writers: any task, by `compare_exchange(null → payload)` (`AcqRel`;
    /// losers drop their payload). Reader: the scope's owner after the latch
    /// (`swap`, `Acquire`; the latch already orders it).
    panic: AtomicPtr<Payload>,
    /// Invariant in `'scope`, like the closures it stores.
    marker: PhantomData<fn(&'scope ()) -> &'scope ()>,
}

/// Creates a scope, runs `op` in it, waits for every task spawned in it, and
/// returns `op`'s result.
///
/// Tasks spawned with [`Scope::spawn`] may borrow anything that outlives the
/// scope. Called on a worker, `op` runs right here; called outside any pool,
/// it runs on the global pool and blocks the caller.
///
/// # Panics
///
/// If `op` or any task panics, the first panic is resumed here after every
/// task has finished.
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// let mut halves = [0u64, 0];
/// let numbers: Vec<u64> = (1..=100).collect();
/// let (low, high) = numbers.split_at(50);
/// let (left, right) = halves.split_at_mut(1);
/// loam_threadpool::scope(|s| {
///     s.spawn(|_| left[0] = low.iter().sum());
///     s.spawn(|_| right[0] = high.iter().sum());
/// });
/// assert_eq!(halves[0] + halves[1], 5050);
/// # }
/// ```
pub fn scope<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R + Send,
    R: Send,
{
    registry::in_worker(|worker| scope_in_worker(worker, op))
}

/// `scope` on worker `worker`, which owns the scope and waits for it.
pub(crate) fn scope_in_worker<'scope, OP, R>(worker: &WorkerThread, op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R + Send,
    R: Send,
{
    let scope = Scope {
        registry: Arc::clone(worker.registry()),
        latch: CountLatch::new(1, worker.index()),
        panic: AtomicPtr::new(ptr::null_mut()),
        marker: PhantomData,
    };
    let result = match unwind::halt_unwinding(|| op(&scope)) {
        Ok(value) => Some(value),
        Err(payload) => {
            scope.record_panic(payload);
            None
        }
    };
    // SAFETY: the latch lives on this frame until the wait below returns.
    unsafe { CountLatch::set(&scope.latch, &worker.registry().sleep) };
    worker.wait_until(&scope.latch.core);
    if let Some(payload) = scope.take_panic() {
        // The body's result is dropped before the task's panic is resumed,
        // and quietly: dropped by that unwind, a `Drop` that panics would
        // abort the process (`join` and `broadcast` do the same).
        unwind::drop_quietly(result);
        unwind::resume_unwinding(payload);
    }
    result.expect("pool: scope body neither returned nor panicked")
}

impl<'scope> Scope<'scope> {
    /// Spawns `body` to run in the pool, borrowing from outside the scope;
    /// the enclosing [`scope`] call waits for it. `body` gets the scope, so it
    /// can spawn more tasks.
    ///
    /// # Panics
    ///
    /// A panic in `body` is resumed by the enclosing [`scope`] call.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// let count = AtomicUsize::new(0);
    /// loam_threadpool::scope(|s| {
    ///     for _ in 0..10 {
    ///         s.spawn(|s| {
    ///             count.fetch_add(1, Ordering::Relaxed);
    ///             s.spawn(|_| {
    ///                 count.fetch_add(1, Ordering::Relaxed);
    ///             });
    ///         });
    ///     }
    /// });
    /// assert_eq!(count.into_inner(), 20);
    /// # }
    /// ```
    ///
    /// A task cannot borrow what the scope body itself owns, since that dies
    /// before the scope has waited for the task:
    ///
    /// ```compile_fail
    /// loam_threadpool::scope(|s| {
    ///     let local = vec![1, 2, 3];
    ///     s.spawn(|_| println!("{local:?}")); // error: `local` does not live long enough
    /// });
    /// ```
    pub fn spawn<BODY>(&self, body: BODY)
    where
        BODY: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        // Before the count rises: a refusal after it (a pool in a forked
        // child) would leave the scope waiting for a task never queued.
        crate::forked::refuse_since(self.registry.born);
        let worker = self.registry.queueing_worker();
        self.latch.increment();
        let scope = ScopePtr(self);
        let job = move || {
            // SAFETY: the scope waits for this job (we hold a count), so the
            // pointer is live until our `CountLatch::set` below.
            let scope = unsafe { scope.get() };
            if let Err(payload) = unwind::halt_unwinding(|| body(scope)) {
                scope.record_panic(payload);
            }
            // Taken before the decrement: the registry outlives it, as the
            // worker running this job holds it alive.
            let sleep: *const crate::sleep::Sleep = &scope.registry.sleep;
            // SAFETY: (1) the latch is live until our decrement lands; (2)
            // `sleep` points into the registry, which this thread keeps alive.
            unsafe { CountLatch::set(&scope.latch, &*sleep) };
        };
        // SAFETY: `body` borrows only `'scope` data, and the scope outlives
        // the job (see the invariant).
        let job_ref = unsafe { job::spawned_job_ref(job) };
        self.registry.inject_or_push(worker, job_ref);
    }

    /// Keeps the first panic; drops later ones.
    fn record_panic(&self, payload: Payload) {
        let boxed = Box::into_raw(Box::new(payload));
        if self
            .panic
            .compare_exchange(ptr::null_mut(), boxed, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // `boxed` came from `Box::into_raw` just above and was not
            // published.
            // SAFETY: as just said.
            unwind::drop_payload(*unsafe { Box::from_raw(boxed) });
        }
    }

    /// The first panic recorded, if any, taken out of the scope. Owner
    /// only, after the latch.
    fn take_panic(&self) -> Option<Payload> {
        let panic = self.panic.swap(ptr::null_mut(), Ordering::Acquire);
        // Non-null values come from `record_panic`'s `into_raw`; the swap
        // made us its only owner.
        // SAFETY: as just said.
        (!panic.is_null()).then(|| unsafe { *Box::from_raw(panic) })
    }
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

/// A scope pointer that may cross threads: the scope is `Sync` and waits for
/// every job holding one.
struct ScopePtr<'scope>(*const Scope<'scope>);

// SAFETY: `Scope` is `Sync` (checked just below, so that a field that
// made it `!Sync` could not leave this impl standing); the pointer is
// dereferenced only while the scope is provably alive (it waits for the job
// carrying it).
unsafe impl Send for ScopePtr<'_> {}

const _: () = {
    const fn sync<T: Sync>() {}
    sync::<Scope<'static>>();
};

impl<'scope> ScopePtr<'scope> {
    /// The scope.
    ///
    /// # Safety
    ///
    /// The scope has not finished waiting (the caller holds a count).
    unsafe fn get<'b>(&self) -> &'b Scope<'scope> {
        // SAFETY: forwarded from the caller.
        unsafe { &*self.0 }
    }
}
