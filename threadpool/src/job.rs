//! Jobs: type-erased work items (`JobRef`) that sit in the deques, and the two
//! shapes behind them: `StackJob` (caller waits on a latch) and spawned jobs
//! (the closure itself, inline in the `JobRef` when it fits, else boxed).

use std::cell::UnsafeCell;
use std::mem::{align_of, size_of, MaybeUninit};

use crate::latch::Latch;
use crate::unwind::{self, AbortIfPanic, Payload};

/// The payload of a `JobRef`: a pointer to the job, or a small closure itself.
/// May hold uninitialised (padding) bytes; read only as the type written.
type Inline = MaybeUninit<[usize; 2]>;

/// `JobRef::tag` of a `StackJob` (its payload is the job's address).
const TAG_STACK_JOB: usize = 1;
/// `JobRef::tag` of a spawned job (its payload is a closure or a box).
const TAG_SPAWNED: usize = 0;

/// A type-erased job and the function that runs it; what the deques and the
/// injector carry, by value (32 bytes). Deliberately neither `Clone` nor
/// `Copy`: a spawned job's `JobRef` owns its closure, so a duplicate could run
/// it twice.
///
/// # Invariants
///
/// `execute_fn` reads `data` as exactly the type its constructor wrote there;
/// if `tag == TAG_STACK_JOB`, `data[0]` is an initialised pointer.
pub(crate) struct JobRef {
    data: Inline,
    tag: usize,
    execute_fn: unsafe fn(Inline),
}

// SAFETY: a `JobRef` is only made from jobs whose closures and results are
// `Send` (the public bounds require it), so running it on another thread is
// sound; a stack job's pointer is just an address.
unsafe impl Send for JobRef {}
// SAFETY: as for `Send`: sharing a `JobRef` shares nothing else.
unsafe impl Sync for JobRef {}

impl JobRef {
    /// True if this is the `StackJob` at `job` (how `join` recognises its
    /// second half popped back). A spawned job is never a stack job.
    #[inline]
    pub(crate) fn is_stack_job(&self, job: *const ()) -> bool {
        // SAFETY: a stack job's payload is an initialised pointer (the
        // invariant); the tag is checked first, so no other payload is read.
        self.tag == TAG_STACK_JOB && unsafe { read_pointer::<()>(&self.data) } == job
    }

    /// Runs the job.
    ///
    /// # Safety
    ///
    /// Called at most once per job, while the job is live (a `StackJob`'s owner
    /// waits on its latch; a spawned job owns its closure).
    #[inline]
    pub(crate) unsafe fn execute(self) {
        // SAFETY: forwarded from the caller.
        unsafe { (self.execute_fn)(self.data) }
    }
}

impl std::fmt::Debug for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRef")
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

/// A payload holding one pointer.
fn pointer_payload<T>(pointer: *const T) -> Inline {
    let mut data = Inline::uninit();
    // SAFETY: a pointer fits in (and is no more aligned than) two words.
    unsafe { (data.as_mut_ptr() as *mut *const T).write(pointer) };
    data
}

/// Reads the pointer `pointer_payload` wrote.
///
/// # Safety
///
/// `data` was made by `pointer_payload::<T>` (or another pointer write).
unsafe fn read_pointer<T>(data: &Inline) -> *const T {
    // SAFETY: forwarded from the caller.
    unsafe { (data.as_ptr() as *const *const T).read() }
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
            data: pointer_payload(self),
            tag: TAG_STACK_JOB,
            execute_fn: Self::execute,
        }
    }

    /// Runs the job from its `JobRef`'s payload.
    ///
    /// # Safety
    ///
    /// `data` came from `as_job_ref` of a live job not yet run.
    unsafe fn execute(data: Inline) {
        // SAFETY: `as_job_ref` wrote the job's address.
        let this = unsafe { read_pointer::<Self>(&data) };
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

    /// The result after the latch was seen set, or its panic's payload
    /// (for a caller that is unwinding with another panic, and drops this
    /// one with `unwind::drop_payload`).
    pub(crate) fn into_outcome(self) -> Result<R, Payload> {
        match self.result.into_inner() {
            JobResult::Ok(value) => Ok(value),
            JobResult::Panic(payload) => Err(payload),
            JobResult::None => unreachable!("pool: job result taken before the job ran"),
        }
    }
}

/// Makes a job of `body`, for work nobody waits on directly (`spawn`, scope
/// spawns); `body` handles its own panics. A closure of at most two words is
/// carried inline in the `JobRef` (no allocation: a spawn loop then costs no
/// `malloc` here and no cross-thread `free` in the thief); a bigger one is
/// boxed and freed when it runs.
///
/// # Safety
///
/// Everything `body` borrows must outlive the job's execution (for `'static`
/// bodies that is free; scopes wait for their jobs).
pub(crate) unsafe fn spawned_job_ref<BODY: FnOnce() + Send>(body: BODY) -> JobRef {
    if size_of::<BODY>() <= size_of::<Inline>() && align_of::<BODY>() <= align_of::<Inline>() {
        let mut data = Inline::uninit();
        // SAFETY: `BODY` fits in `data` in size and alignment (just checked).
        unsafe { (data.as_mut_ptr() as *mut BODY).write(body) };
        JobRef {
            data,
            tag: TAG_SPAWNED,
            execute_fn: execute_inline::<BODY>,
        }
    } else {
        JobRef {
            data: pointer_payload(Box::into_raw(Box::new(body))),
            tag: TAG_SPAWNED,
            execute_fn: execute_boxed::<BODY>,
        }
    }
}

/// Runs a closure carried inline.
///
/// # Safety
///
/// `data` holds a `BODY` written by `spawned_job_ref`, run once.
unsafe fn execute_inline<BODY: FnOnce()>(data: Inline) {
    // SAFETY: forwarded; this read moves the closure out of its only copy
    // that will ever run.
    let body = unsafe { (data.as_ptr() as *const BODY).read() };
    body();
}

/// Runs a boxed closure and frees its box.
///
/// # Safety
///
/// `data` holds a `Box<BODY>` leaked by `spawned_job_ref`, run once.
unsafe fn execute_boxed<BODY: FnOnce()>(data: Inline) {
    // SAFETY: forwarded; the box was leaked by `Box::into_raw`.
    let body = unsafe { Box::from_raw(read_pointer::<BODY>(&data) as *mut BODY) };
    body();
}

#[cfg(test)]
mod tests {
    use super::{spawned_job_ref, JobRef, StackJob};
    use crate::latch::LockLatch;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_stack_job_is_recognised_by_its_address_and_nothing_else() {
        let latch = LockLatch::new();
        let job = StackJob::new(|| 5, &latch);
        let other = StackJob::new(|| 6, &latch);
        // SAFETY: both jobs outlive their `JobRef`s, which are never run.
        let (job_ref, other_ref) = unsafe { (job.as_job_ref(), other.as_job_ref()) };
        let address = &job as *const _ as *const ();
        assert!(job_ref.is_stack_job(address));
        assert!(!other_ref.is_stack_job(address));
        // SAFETY: a `'static` closure; run once below.
        let spawned: JobRef = unsafe { spawned_job_ref(|| {}) };
        assert!(!spawned.is_stack_job(address));
        // SAFETY: run once, on a thread where no worker is needed.
        unsafe { spawned.execute() };
        assert_eq!(job.run_inline(), 5);
    }

    #[test]
    fn spawned_jobs_run_inline_and_boxed_closures_once() {
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let small = [1u8; 16];
        let big = [1u8; 17];
        // SAFETY: the closures borrow nothing; each runs once.
        unsafe {
            spawned_job_ref(move || {
                RUNS.fetch_add(small.len(), Ordering::Relaxed);
            })
            .execute();
            spawned_job_ref(move || {
                RUNS.fetch_add(big.len(), Ordering::Relaxed);
            })
            .execute();
        }
        assert_eq!(RUNS.load(Ordering::Relaxed), 33);
    }
}
