//! Jobs: type-erased work items (`JobRef`) that sit in the deques, and the two
//! shapes behind them: `StackJob` (caller waits on a latch) and `HeapJob` (boxed).

use std::cell::UnsafeCell;

use crate::latch::Latch;
use crate::unwind::{self, AbortIfPanic, Payload};

/// A type-erased pointer to a job plus the function that runs it; what the
/// deques and the injector carry. Copyable; running it twice is a bug.
#[derive(Clone, Copy, Debug)]
pub(crate) struct JobRef {
    pointer: *const (),
    execute_fn: unsafe fn(*const ()),
}

// SAFETY: a `JobRef` is only made from jobs whose closures and results are
// `Send` (the public bounds require it), so running it on another thread is
// sound; the pointer itself is just an address.
unsafe impl Send for JobRef {}
// SAFETY: as for `Send`: sharing the address shares nothing else.
unsafe impl Sync for JobRef {}

impl JobRef {
    /// The job's identity (its address), to recognise a job popped back.
    #[inline]
    pub(crate) fn id(&self) -> *const () {
        self.pointer
    }

    /// Runs the job.
    ///
    /// # Safety
    ///
    /// Called at most once per job, while the job is live (a `StackJob`'s owner
    /// waits on its latch; a `HeapJob` frees itself).
    #[inline]
    pub(crate) unsafe fn execute(self) {
        // SAFETY: forwarded from the caller.
        unsafe { (self.execute_fn)(self.pointer) }
    }
}

/// A job's outcome as its waiter will see it.
#[derive(Debug)]
pub(crate) enum JobResult<T> {
    /// Not run yet.
    None,
    /// Returned normally.
    Ok(T),
    /// Panicked; re-raised by `into_return_value`.
    Panic(Payload),
}

impl<T> JobResult<T> {
    /// Runs `f`, catching a panic.
    #[inline]
    fn call(f: impl FnOnce() -> T) -> Self {
        match unwind::halt_unwinding(f) {
            Ok(value) => JobResult::Ok(value),
            Err(payload) => JobResult::Panic(payload),
        }
    }

    /// The value, or the job's panic resumed on this thread.
    fn into_return_value(self) -> T {
        match self {
            JobResult::Ok(value) => value,
            JobResult::Panic(payload) => unwind::resume_unwinding(payload),
            JobResult::None => unreachable!("pool: job result taken before the job ran"),
        }
    }
}

/// A job on its waiter's stack: the waiter pushes a `JobRef` to it, then waits
/// on `latch` (or pops it back and runs it inline).
///
/// # Invariants
///
/// `func` is `Some` until the job runs; `result` is `None` until then. The
/// waiter reads `result` only after `latch` is set, and frees the job only
/// after that; the executor touches nothing after setting `latch`.
#[derive(Debug)]
pub(crate) struct StackJob<L, F, R> {
    /// Protected by protocol: taken by exactly one executor (or the waiter,
    /// inline, after popping the job back).
    func: UnsafeCell<Option<F>>,
    /// Protected by protocol: written by the executor before `latch` is set.
    result: UnsafeCell<JobResult<R>>,
    pub(crate) latch: L,
}

impl<L: Latch, F: FnOnce() -> R, R> StackJob<L, F, R> {
    /// A job that will run `func` and then set `latch`.
    pub(crate) fn new(func: F, latch: L) -> Self {
        StackJob {
            func: UnsafeCell::new(Some(func)),
            result: UnsafeCell::new(JobResult::None),
            latch,
        }
    }

    /// The type-erased reference to push.
    ///
    /// # Safety
    ///
    /// The job must stay live (not moved, not dropped) until its latch is set
    /// or it has been popped back.
    pub(crate) unsafe fn as_job_ref(&self) -> JobRef {
        JobRef {
            pointer: self as *const Self as *const (),
            execute_fn: Self::execute,
        }
    }

    /// Runs the job from its `JobRef`.
    ///
    /// # Safety
    ///
    /// `this` came from `as_job_ref` of a live job not yet run.
    unsafe fn execute(this: *const ()) {
        let this = this as *const Self;
        let abort = AbortIfPanic("panic while completing a job");
        // SAFETY: the job is live and not yet run, so we are the only one to
        // touch `func` and `result` until we set the latch.
        let func = unsafe { (*(*this).func.get()).take() }.expect("pool: job run twice");
        let result = JobResult::call(func);
        // SAFETY: as above; the waiter reads `result` only after the latch.
        unsafe { *(*this).result.get() = result };
        // SAFETY: the latch is live; we do not touch `this` after setting it.
        unsafe { L::set(std::ptr::addr_of!((*this).latch)) };
        std::mem::forget(abort);
    }

    /// Runs the job on the waiter's own thread, after popping it back.
    pub(crate) fn run_inline(self) -> R {
        let func = self.func.into_inner().expect("pool: job run twice");
        func()
    }

    /// The result after the latch was seen set; resumes the job's panic.
    pub(crate) fn into_result(self) -> R {
        self.result.into_inner().into_return_value()
    }
}

/// A boxed job, for work nobody waits on directly (`spawn`, scope spawns).
/// The closure handles its own panics.
#[derive(Debug)]
pub(crate) struct HeapJob<BODY> {
    body: BODY,
}

impl<BODY: FnOnce() + Send> HeapJob<BODY> {
    /// Boxes `body` as a job.
    pub(crate) fn new(body: BODY) -> Box<Self> {
        Box::new(HeapJob { body })
    }

    /// Leaks the box into a `JobRef`; running it frees the box.
    ///
    /// # Safety
    ///
    /// Everything `body` borrows must outlive the job's execution (for `'static`
    /// bodies that is free; scopes wait for their jobs).
    pub(crate) unsafe fn into_job_ref(self: Box<Self>) -> JobRef {
        JobRef {
            pointer: Box::into_raw(self) as *const (),
            execute_fn: Self::execute,
        }
    }

    /// # Safety
    ///
    /// `this` came from `into_job_ref` and runs once.
    unsafe fn execute(this: *const ()) {
        // SAFETY: made by `Box::into_raw` in `into_job_ref`, run exactly once.
        let this = unsafe { Box::from_raw(this as *mut Self) };
        (this.body)();
    }
}
