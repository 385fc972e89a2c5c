//! A test-and-test-and-set lock for the heap's cold paths (the orphan and
//! lent lists, the segment registry and caches), which must never allocate
//! or park.
//!
//! parking_lot and std's Mutex are off limits inside an allocator: parking can
//! allocate (parking_lot's hash table grows through the global allocator), and
//! an allocation that re-enters the heap while a lock is held would deadlock.
//! Most critical sections behind these locks are a handful of pointer
//! writes, so spinning (with a yield after a short burst) is the right tool.
//! The orphan and lent locks are also held through a heap's tidy (its queues
//! drained, its empty pages released, a purge's system calls): a thread that
//! waits for one of them then yields its CPU every burst, which is what a
//! cold path can afford.

use crate::sync::{yield_now, AtomicBool, Ordering};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// A spin lock around a `T`.
///
/// # Invariants
/// `locked` is true exactly while one [`SpinGuard`] exists; `value` is only
/// touched through a guard.
pub(crate) struct SpinLock<T> {
    /// Writers: `lock` (Acquire CAS false→true) and `SpinGuard::drop`
    /// (Release store false). The Release/Acquire pair orders each critical
    /// section before the next.
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out `&mut T` to one thread at a time, so sharing the
// lock is sound whenever the value itself may move between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: as above; the lock owns its value.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    #[cfg(not(loom))]
    pub(crate) const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        loop {
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return SpinGuard {
                    lock: self,
                    _not_shared: PhantomData,
                };
            }
            spins += 1;
            if spins < 64 && !cfg!(loom) {
                std::hint::spin_loop();
            } else {
                yield_now();
            }
        }
    }
}

impl<T> SpinLock<T> {
    /// Takes the lock with no guard: `fork.rs` holds it across a `fork`.
    #[cfg(not(loom))]
    pub(crate) fn lock_for_fork(&self) {
        std::mem::forget(self.lock());
    }

    /// Releases a lock taken by [`lock_for_fork`](Self::lock_for_fork).
    ///
    /// # Safety
    /// This thread (or, in a fork's child, the thread that forked) took the
    /// lock with `lock_for_fork` and has not released it.
    #[cfg(not(loom))]
    pub(crate) unsafe fn unlock_after_fork(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

/// Proof that the [`SpinLock`] is held; unlocks on drop.
///
/// `Sync` only for a `T: Sync` (it hands out `&T`): its `&SpinLock<T>` alone
/// would make it `Sync` for any `T: Send`, std's `MutexGuard` bug of old
/// (rust-lang/rust#41622). Not `Send`: unlocked by the thread that locked.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    _not_shared: PhantomData<*const T>,
}

// A shared guard hands out `&T` only, which `T: Sync` allows on any
// thread; the lock it holds is released only by its owner's drop.
// SAFETY: as just said.
unsafe impl<T: Sync> Sync for SpinGuard<'_, T> {}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists, so this thread holds the lock and no other
        // reference to the value is live.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only borrow.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::SpinLock;
    use crate::sync::{AtomicBool, Ordering};
    use loom::sync::Arc;

    /// Two threads take the lock; inside, each raises an atomic "occupied"
    /// flag that must have been clear, and lowers it before unlocking. Loom
    /// interleaves at every atomic operation, so two holders at once would be
    /// found (a mutated lock that loads and stores instead of CAS fails here).
    #[test]
    fn spin_lock_admits_one_holder_at_a_time() {
        crate::sync::model(|| {
            let lock = Arc::new((SpinLock::new(0usize), AtomicBool::new(false)));
            let enter = |l: &(SpinLock<usize>, AtomicBool)| {
                let mut g = l.0.lock();
                assert!(!l.1.swap(true, Ordering::Relaxed), "two holders at once");
                *g += 1;
                l.1.store(false, Ordering::Relaxed);
            };
            let other = lock.clone();
            let t = loom::thread::spawn(move || enter(&other));
            enter(&lock);
            t.join().unwrap();
            assert_eq!(*lock.0.lock(), 2);
        });
    }
}
