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
    /// Guards alive on this thread, and the reason of the latest: waits are
    /// forbidden while the count is above zero. A count, not a saved state
    /// per guard, so that guards dropped out of order (one moved into a
    /// `mutate` call and dropped there) leave waits forbidden while any is
    /// alive, and allowed once none is.
    static FORBIDDEN: Cell<(usize, &'static str)> = const { Cell::new((0, "")) };
}

/// While alive, every pool call on this thread that could wait (`join`,
/// `scope`, `broadcast`, `install`) panics with `reason` instead, and
/// dropping a pool does not wait for its workers. Guards nest: waits are
/// allowed again once every guard of the thread is dropped (a forgotten
/// guard forbids them for good). `!Send`: it belongs to the thread that
/// made it.
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
    /// This guard's reason, and the one it replaced, which its drop puts
    /// back if its own is still the thread's: a refusal names the guard
    /// that is still alive (a managed task's ban read as a `mutate` call's,
    /// one that had ended, before).
    reason: &'static str,
    before: &'static str,
    _not_send: PhantomData<*mut ()>,
}

/// Forbids pool waits on this thread until the guard drops (see
/// [`WaitsForbidden`]).
#[inline]
pub fn forbid_waits(reason: &'static str) -> WaitsForbidden {
    let before = FORBIDDEN.with(|f| {
        let (count, before) = f.get();
        f.set((count + 1, reason));
        before
    });
    WaitsForbidden {
        reason,
        before,
        _not_send: PhantomData,
    }
}

impl Drop for WaitsForbidden {
    #[inline]
    fn drop(&mut self) {
        FORBIDDEN.with(|f| {
            let (count, reason) = f.get();
            // Dropped out of order, another guard's reason is the thread's
            // now: it stays.
            let reason = if std::ptr::eq(reason, self.reason) {
                self.before
            } else {
                reason
            };
            f.set((count - 1, reason));
        });
    }
}

/// Whether this thread may not wait on a pool now.
#[inline]
pub(crate) fn waits_forbidden() -> bool {
    FORBIDDEN.with(|f| f.get().0 > 0)
}

/// Panics if this thread may not wait on a pool now.
#[inline]
pub(crate) fn check_may_wait() {
    let (count, reason) = FORBIDDEN.with(Cell::get);
    if count > 0 {
        refuse(reason)
    }
}

#[cold]
#[inline(never)]
fn refuse(reason: &'static str) -> ! {
    panic!("loam-threadpool: this call would wait on a pool, which is not allowed here: {reason}")
}

#[cfg(test)]
mod tests {
    use super::{forbid_waits, waits_forbidden};

    #[test]
    fn guards_dropped_out_of_order_keep_waits_forbidden_until_the_last() {
        assert!(!waits_forbidden());
        let outer = forbid_waits("outer");
        let inner = forbid_waits("inner");
        drop(outer);
        assert!(waits_forbidden(), "one guard is still alive");
        drop(inner);
        assert!(!waits_forbidden());
    }

    #[test]
    fn a_refusal_names_the_guard_still_alive() {
        let outer = forbid_waits("outer");
        drop(forbid_waits("inner"));
        let refused = std::panic::catch_unwind(super::check_may_wait).unwrap_err();
        let msg = refused.downcast_ref::<String>().unwrap();
        assert!(msg.ends_with("outer"), "{msg}");
        drop(outer);
    }
}
