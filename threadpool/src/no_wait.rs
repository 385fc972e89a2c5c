//! Stretches of a thread where waiting on a pool is a deadlock: the runtime
//! marks each `mutate` call as one (a stop-the-world pause waits for the call
//! to return, and the workers it would wait for may be waiting for the pause).
//!
//! The check is at the entry of every call that can wait (`join`, `scope`,
//! `broadcast`, `install`), before anything is queued, so the panic unwinds
//! through nothing another thread points into. `spawn` never waits and is
//! allowed.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    /// Why this thread may not wait on a pool now (`None`: it may).
    static FORBIDDEN: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// While alive, every pool call on this thread that could wait (`join`,
/// `scope`, `broadcast`, `install`) panics with `reason` instead.
/// Guards nest; dropping one restores the state before it. `!Send`: it
/// belongs to the thread that made it.
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// let guard = loam_threadpool::forbid_waits("inside a critical section");
/// let refused = std::panic::catch_unwind(|| loam_threadpool::join(|| 1, || 2));
/// assert!(refused.is_err());
/// drop(guard);
/// assert_eq!(loam_threadpool::join(|| 1, || 2), (1, 2));
/// # }
/// ```
#[must_use = "waits are forbidden only while the guard lives"]
#[derive(Debug)]
pub struct WaitsForbidden {
    prev: Option<&'static str>,
    _not_send: PhantomData<*mut ()>,
}

/// Forbids pool waits on this thread until the guard drops (see
/// [`WaitsForbidden`]).
#[inline]
pub fn forbid_waits(reason: &'static str) -> WaitsForbidden {
    WaitsForbidden {
        prev: FORBIDDEN.with(|f| f.replace(Some(reason))),
        _not_send: PhantomData,
    }
}

impl Drop for WaitsForbidden {
    #[inline]
    fn drop(&mut self) {
        FORBIDDEN.with(|f| f.set(self.prev));
    }
}

/// Panics if this thread may not wait on a pool now.
#[inline]
pub(crate) fn check_may_wait() {
    if let Some(reason) = FORBIDDEN.with(Cell::get) {
        refuse(reason)
    }
}

#[cold]
#[inline(never)]
fn refuse(reason: &'static str) -> ! {
    panic!("loam-threadpool: this call would wait on a pool, which is not allowed here: {reason}")
}
