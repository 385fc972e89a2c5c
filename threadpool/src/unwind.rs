//! Panics crossing the pool: catching a task's panic so it can be re-raised
//! where the caller waits, and aborting if the pool's own bookkeeping unwinds.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};

/// A caught panic payload.
pub(crate) type Payload = Box<dyn Any + Send + 'static>;

/// Runs `f`, catching a panic instead of unwinding through the pool.
///
/// Unwind safety is the caller's concern: the payload is re-raised where the
/// caller waits, so any broken state is observed exactly as if the closure had
/// run on the caller's own thread.
#[inline]
pub(crate) fn halt_unwinding<F, R>(f: F) -> Result<R, Payload>
where
    F: FnOnce() -> R,
{
    panic::catch_unwind(AssertUnwindSafe(f))
}

/// Drops a caught panic's payload without unwinding: if its destructor
/// panics in turn (a `panic_any` payload with a `Drop` that panics), that
/// second payload is leaked, not dropped, since it could panic again. The
/// pool drops the payloads it does not pass on where an unwind would
/// strand a latch (a scope's owner waiting for ever), kill a worker, or
/// free a frame that other workers still point into.
pub(crate) fn drop_payload(payload: Payload) {
    if let Err(again) = panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// Drops `value` where a panic is already on its way out (a `join` whose
/// other half panicked): a `Drop` that panics too is caught, and its
/// payload dropped as `drop_payload` does, instead of aborting the process
/// as a panic during an unwind would.
pub(crate) fn drop_quietly<T>(value: T) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(move || drop(value))) {
        drop_payload(payload);
    }
}

/// Re-raises a caught panic on the current thread.
pub(crate) fn resume_unwinding(payload: Payload) -> ! {
    panic::resume_unwind(payload)
}

/// The panic message, if the payload is a string (as `panic!` makes it).
pub(crate) fn payload_message(payload: &Payload) -> &str {
    if let Some(message) = payload.downcast_ref::<&'static str>() {
        message
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message
    } else {
        "<non-string panic payload>"
    }
}

/// Aborts the process if dropped during unwinding: guards the few stretches
/// where a panic would leave another thread holding a pointer to our stack.
/// Forget it (`std::mem::forget`) on the success path.
#[derive(Debug)]
pub(crate) struct AbortIfPanic(pub(crate) &'static str);

impl Drop for AbortIfPanic {
    fn drop(&mut self) {
        crate::say(format_args!("pool: {}; aborting", self.0));
        std::process::abort();
    }
}
