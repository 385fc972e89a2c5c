//! The one door to atomics and locks: loom's model-checked types under
//! `--cfg loom`, `std` atomics and `parking_lot` locks otherwise. No other file
//! imports `std::sync::atomic` or `parking_lot` directly.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// Guard of a [`Mutex`]; unlocks on drop.
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
/// Guard of a [`Mutex`]; unlocks on drop.
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

/// A mutual-exclusion lock with `parking_lot`'s shape: `lock` cannot fail
/// (no poisoning; a panic while holding it is a bug in this crate, and this
/// crate never runs user code under a lock).
pub(crate) struct Mutex<T> {
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`.
    pub(crate) fn new(value: T) -> Self {
        Mutex {
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
        }
    }

    /// Blocks until the lock is held.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(loom)]
        {
            self.inner.lock().expect("pool: loom mutex poisoned")
        }
        #[cfg(not(loom))]
        {
            self.inner.lock()
        }
    }
}

/// A condition variable paired with [`Mutex`]; `wait` takes the guard by value
/// and gives it back (loom's shape), so both back ends share one call site.
pub(crate) struct Condvar {
    #[cfg(loom)]
    inner: loom::sync::Condvar,
    #[cfg(not(loom))]
    inner: parking_lot::Condvar,
}

impl Condvar {
    /// A new condition variable.
    pub(crate) fn new() -> Self {
        Condvar {
            #[cfg(loom)]
            inner: loom::sync::Condvar::new(),
            #[cfg(not(loom))]
            inner: parking_lot::Condvar::new(),
        }
    }

    /// Atomically unlocks `guard`'s mutex and blocks until notified (or a
    /// spurious wake-up); relocks before returning. Callers loop on their
    /// condition.
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        #[cfg(loom)]
        {
            self.inner.wait(guard).expect("pool: loom mutex poisoned")
        }
        #[cfg(not(loom))]
        {
            let mut guard = guard;
            self.inner.wait(&mut guard);
            guard
        }
    }

    /// Wakes one waiter, if any.
    pub(crate) fn notify_one(&self) {
        self.inner.notify_one();
    }

    /// Wakes every waiter.
    pub(crate) fn notify_all(&self) {
        self.inner.notify_all();
    }
}

impl<T> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mutex").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Condvar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}
