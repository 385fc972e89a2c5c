//! Latches: one-shot "this job is done" signals that a waiter polls, parks on,
//! and is woken by. The setter must never touch a latch after setting it.

use crate::sleep::Sleep;
use crate::sync::{AtomicUsize, Condvar, Mutex, Ordering};

/// Sets a latch. Implemented by every latch a job can signal.
pub(crate) trait Latch {
    /// Sets the latch, waking its waiter if it is parked.
    ///
    /// # Safety
    ///
    /// 1. `this` points to a live latch.
    /// 2. Once the latch is observed set, its waiter may free it: the
    ///    implementation copies what it needs *before* the setting store and
    ///    never dereferences `this` afterwards, so neither may the caller.
    unsafe fn set(this: *const Self);
}

/// `state` values of a [`CoreLatch`].
const UNSET: usize = 0;
const SLEEPING: usize = 1;
const SET: usize = 2;

/// The state machine under every worker-owned latch:
/// `UNSET → SLEEPING → UNSET` (owner parks and wakes) and `any → SET` (setter).
///
/// # Invariants
///
/// Once `SET`, the state never changes again; only the owning worker moves it
/// to or from `SLEEPING`, and only while holding its sleep mutex.
pub(crate) struct CoreLatch {
    /// Writers: the setter (`swap(SET)`, `AcqRel`), the owner (CAS to and from
    /// `SLEEPING`). Readers: the owner's `probe` (`Acquire`, pairs with the
    /// setter's release so the job's result is visible once `SET` is seen).
    state: AtomicUsize,
    /// Under loom, the latch's memory as the models see it: a setter reads
    /// it wherever it reads the latch ([`touch`](Self::touch)), and a model
    /// writes it once its waiter has seen the latch set, as a waiter that
    /// returns and frees the latch would. A setter that read the latch
    /// after its setting swap (rule 2 of [`Latch::set`]) then races that
    /// write, which loom reports. (The models keep latches alive in `Arc`s
    /// or on the waiter's stack until joins, so without it nothing
    /// checked the rule.)
    #[cfg(loom)]
    alive: loom::cell::UnsafeCell<()>,
}

impl CoreLatch {
    /// An unset latch.
    pub(crate) fn new() -> CoreLatch {
        CoreLatch {
            state: AtomicUsize::new(UNSET),
            #[cfg(loom)]
            alive: loom::cell::UnsafeCell::new(()),
        }
    }

    /// A setter reads the latch (a no-op but under loom: `alive`).
    #[inline(always)]
    pub(crate) fn touch(&self) {
        #[cfg(loom)]
        self.alive.with(|_| ());
    }

    /// A model's waiter, having seen the latch set, is done with it: as if
    /// it freed it (`alive`).
    #[cfg(all(test, loom))]
    pub(crate) fn forget(&self) {
        self.alive.with_mut(|_| ());
    }

    /// True once the latch is set; everything the setter wrote before setting
    /// is then visible.
    #[inline]
    pub(crate) fn probe(&self) -> bool {
        self.state.load(Ordering::Acquire) == SET
    }

    /// Owner only, under its sleep mutex: announce that it is about to park.
    /// Fails (returns false) if the latch is already set.
    pub(crate) fn try_mark_sleeping(&self) -> bool {
        self.state
            .compare_exchange(UNSET, SLEEPING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Owner only: back from parking (or gave up parking). Leaves `SET` alone.
    pub(crate) fn unmark_sleeping(&self) {
        let _ = self
            .state
            .compare_exchange(SLEEPING, UNSET, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Sets the latch; returns true if the owner had announced it was parking,
    /// in which case the caller must wake it (with state copied beforehand).
    ///
    /// # Safety
    ///
    /// `this` points to a live latch; it may be freed as soon as the swap
    /// lands, so it is not touched afterwards.
    #[inline]
    pub(crate) unsafe fn set(this: *const CoreLatch) -> bool {
        // SAFETY: the caller guarantees `this` is live until this store.
        let old = unsafe {
            (*this).touch();
            (*this).state.swap(SET, Ordering::AcqRel)
        };
        old == SLEEPING
    }
}

impl std::fmt::Debug for CoreLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreLatch")
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish()
    }
}

/// The latch of a `join` whose waiter is worker `owner` of the pool whose
/// parking spots are `sleep`.
#[derive(Debug)]
pub(crate) struct SpinLatch<'r> {
    pub(crate) core: CoreLatch,
    /// The owner's pool's sleep state; outlives the latch because the setter is
    /// a worker of the same pool, which holds the pool alive.
    sleep: &'r Sleep,
    owner: usize,
}

impl<'r> SpinLatch<'r> {
    /// An unset latch waited on by worker `owner`.
    pub(crate) fn new(sleep: &'r Sleep, owner: usize) -> SpinLatch<'r> {
        SpinLatch {
            core: CoreLatch::new(),
            sleep,
            owner,
        }
    }

    /// True once set.
    #[inline]
    pub(crate) fn probe(&self) -> bool {
        self.core.probe()
    }
}

impl Latch for SpinLatch<'_> {
    #[inline]
    unsafe fn set(this: *const Self) {
        // SAFETY: (1) of `Latch::set`; both are read before the setting swap.
        let (sleep, owner) = unsafe {
            (*this).core.touch();
            ((*this).sleep, (*this).owner)
        };
        // SAFETY: `this` is live until this swap; not touched after it.
        if unsafe { CoreLatch::set(std::ptr::addr_of!((*this).core)) } {
            sleep.wake_specific(owner);
        }
    }
}

/// A latch set when a counter of outstanding jobs reaches zero (scopes and
/// broadcasts); waited on by worker `owner`.
///
/// # Invariants
///
/// `counter` = jobs started and not yet finished (the scope body counts as
/// one); the core latch is set exactly once, by whoever takes it to zero.
#[derive(Debug)]
pub(crate) struct CountLatch {
    /// Writers: `increment` (`Relaxed`: the incrementer already holds a count,
    /// so the counter cannot reach zero meanwhile) and `set` (`AcqRel`: each
    /// decrement releases its job's writes, the last one acquires them all
    /// before setting `core`). Readers: only those RMWs.
    counter: AtomicUsize,
    pub(crate) core: CoreLatch,
    owner: usize,
}

impl CountLatch {
    /// A latch with `count` outstanding jobs, waited on by worker `owner`.
    pub(crate) fn new(count: usize, owner: usize) -> CountLatch {
        CountLatch {
            counter: AtomicUsize::new(count),
            core: CoreLatch::new(),
            owner,
        }
    }

    /// One more outstanding job. The caller must hold a count already.
    pub(crate) fn increment(&self) {
        let before = self.counter.fetch_add(1, Ordering::Relaxed);
        debug_assert!(before > 0, "pool: count latch revived after reaching zero");
    }

    /// One job finished; the last one sets the core latch and wakes the owner.
    ///
    /// # Safety
    ///
    /// `this` is live; after the decrement it may be freed, so only the copied
    /// `owner` and the caller's `sleep` (the owner's pool, kept alive by the
    /// calling worker) are used.
    pub(crate) unsafe fn set(this: *const CountLatch, sleep: &Sleep) {
        // SAFETY: `this` is live until our decrement (caller's contract).
        let (owner, core) = unsafe {
            (*this).core.touch();
            ((*this).owner, std::ptr::addr_of!((*this).core))
        };
        // SAFETY: as above; we hold one count, so it is live during the RMW.
        let before = unsafe { (*this).counter.fetch_sub(1, Ordering::AcqRel) };
        debug_assert!(before > 0, "pool: count latch underflow");
        if before == 1 {
            // SAFETY: the owner frees the latch only after seeing `core` set,
            // which is this very store.
            if unsafe { CoreLatch::set(core) } {
                sleep.wake_specific(owner);
            }
        }
    }
}

/// A [`CountLatch`] with its pool's sleep state, usable as a job's [`Latch`].
#[derive(Debug)]
pub(crate) struct CountLatchRef<'a> {
    pub(crate) latch: &'a CountLatch,
    pub(crate) sleep: &'a Sleep,
}

impl Latch for CountLatchRef<'_> {
    unsafe fn set(this: *const Self) {
        // SAFETY: (1) of `Latch::set`; copied before the decrement.
        let (latch, sleep) = unsafe { ((*this).latch as *const CountLatch, (*this).sleep) };
        // SAFETY: the count latch outlives every job counted on it.
        unsafe { CountLatch::set(latch, sleep) }
    }
}

/// The latch of a job injected into another pool by a worker of this one: the
/// worker keeps running its own pool's jobs while it waits, so pools can call
/// into each other (A → B → A) without deadlock.
///
/// Holds its own `Arc` of the waiter's registry: the setter is a worker of the
/// *other* pool, so nothing else keeps the waiter's pool alive between the
/// setting swap and the wake-up. Generic over what it wakes (the waiter's
/// [`Registry`](crate::registry::Registry)) so that its loom model can
/// stand a sleep state in for a whole pool.
#[derive(Debug)]
pub(crate) struct CrossLatch<R: WakeOwner> {
    pub(crate) core: CoreLatch,
    registry: crate::sync::Arc<R>,
    owner: usize,
}

/// What a [`CrossLatch`]'s setter wakes the waiting worker through.
pub(crate) trait WakeOwner {
    /// Wakes worker `owner` if it sleeps.
    fn wake_owner(&self, owner: usize);
}

impl<R: WakeOwner> CrossLatch<R> {
    /// An unset latch waited on by worker `owner` of `registry`.
    pub(crate) fn new(registry: crate::sync::Arc<R>, owner: usize) -> Self {
        CrossLatch {
            core: CoreLatch::new(),
            registry,
            owner,
        }
    }
}

impl<R: WakeOwner> Latch for CrossLatch<R> {
    unsafe fn set(this: *const Self) {
        // SAFETY: (1) of `Latch::set`; cloned and copied before the swap.
        let (registry, owner) = unsafe {
            (*this).core.touch();
            (crate::sync::Arc::clone(&(*this).registry), (*this).owner)
        };
        // SAFETY: `this` is live until this swap; not touched after it.
        if unsafe { CoreLatch::set(std::ptr::addr_of!((*this).core)) } {
            registry.wake_owner(owner);
        }
    }
}

/// A latch a non-worker thread blocks on (a mutex and a condvar).
#[derive(Debug)]
pub(crate) struct LockLatch {
    /// Protected by its own mutex: set by the job's executor, reset by the waiter.
    is_set: Mutex<bool>,
    condvar: Condvar,
}

impl LockLatch {
    /// An unset latch.
    pub(crate) fn new() -> LockLatch {
        LockLatch {
            is_set: Mutex::new(false),
            condvar: Condvar::new(),
        }
    }

    /// Blocks until set, then resets it for the next use.
    pub(crate) fn wait_and_reset(&self) {
        let mut is_set = self.is_set.lock();
        while !*is_set {
            is_set = self.condvar.wait(is_set);
        }
        *is_set = false;
    }
}

impl Latch for LockLatch {
    unsafe fn set(this: *const Self) {
        // SAFETY: `this` is live; the waiter cannot return (and free it) before
        // we release the mutex, and the mutex tolerates that release race.
        let this = unsafe { &*this };
        let mut is_set = this.is_set.lock();
        *is_set = true;
        this.condvar.notify_all();
    }
}

impl<L: Latch> Latch for &L {
    unsafe fn set(this: *const Self) {
        // SAFETY: `this` is live (caller); the referent is read before setting.
        unsafe { L::set(*this) }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::{CountLatch, CountLatchRef, CrossLatch, Latch, SpinLatch, WakeOwner};

    /// A pool as a cross latch's setter sees it: the sleep state it wakes
    /// the waiter through.
    struct Pool {
        sleep: Sleep,
    }

    impl WakeOwner for Pool {
        fn wake_owner(&self, owner: usize) {
            self.sleep.wake_specific(owner);
        }
    }

    /// A cross latch on its waiter's stack (`Registry::in_worker_cross`),
    /// set by a worker of the other pool while the waiter parks: the waiter
    /// wakes, sees the job's write, and is done with the latch and with its
    /// own handle of its pool, both dropped before the setter's wake-up
    /// may run. The setter touches neither the latch after its swap nor a
    /// pool it holds no handle of (its clone keeps it alive).
    #[test]
    fn a_cross_latch_is_not_touched_after_its_setting() {
        loom::model(|| {
            let pool = Arc::new(Pool {
                sleep: Sleep::new(1),
            });
            let latch = CrossLatch::new(Arc::clone(&pool), 0);
            let done = Arc::new(AtomicUsize::new(0));
            let (p, d) = (&latch as *const CrossLatch<Pool> as usize, done.clone());
            let setter = loom::thread::spawn(move || {
                d.store(1, Ordering::Relaxed);
                // The waiter keeps the latch on its stack until it has
                // seen it set; the setter's clone keeps the pool alive.
                // SAFETY: as just said.
                unsafe { Latch::set(p as *const CrossLatch<Pool>) };
            });
            while !latch.core.probe() {
                pool.sleep.sleep(0, Some(&latch.core), || false);
            }
            latch.core.forget();
            assert_eq!(done.load(Ordering::Relaxed), 1);
            drop(latch);
            drop(pool);
            setter.join().unwrap();
        });
    }

    /// A join's latch on its waiter's stack, set by the thread that ran the
    /// stolen half while the waiter parks: the waiter wakes, sees the
    /// half's write, and is done with the latch, which the setter never
    /// touches again (its wake-up uses what it copied).
    #[test]
    fn a_spin_latch_is_not_touched_after_its_setting() {
        loom::model(|| {
            let sleep = Sleep::new(1);
            let latch = SpinLatch::new(&sleep, 0);
            let done = Arc::new(AtomicUsize::new(0));
            let (p, d) = (&latch as *const SpinLatch<'_> as usize, done.clone());
            let setter = loom::thread::spawn(move || {
                d.store(1, Ordering::Relaxed);
                // The waiter keeps the latch (and the sleep state) on its
                // stack until it has joined this thread.
                // SAFETY: as just said.
                unsafe { Latch::set(p as *const SpinLatch<'_>) };
            });
            while !latch.probe() {
                sleep.sleep(0, Some(&latch.core), || false);
            }
            latch.core.forget();
            assert_eq!(done.load(Ordering::Relaxed), 1);
            setter.join().unwrap();
        });
    }
    use crate::sleep::Sleep;
    use crate::sync::{Arc, AtomicUsize, Ordering};

    /// Two jobs finish on two threads while the owner parks: the owner wakes
    /// exactly once the last job is done, and sees both jobs' writes.
    #[test]
    fn count_latch_two_setters_one_owner() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(1));
            // The owner holds one count itself, like a scope body.
            let latch = Arc::new(CountLatch::new(1, 0));
            let done = Arc::new(AtomicUsize::new(0));
            let setters: Vec<_> = (0..2)
                .map(|_| {
                    latch.increment();
                    let (sleep, latch, done) = (sleep.clone(), latch.clone(), done.clone());
                    loom::thread::spawn(move || {
                        done.fetch_add(1, Ordering::Relaxed);
                        let latch_ref = CountLatchRef {
                            latch: &latch,
                            sleep: &sleep,
                        };
                        // SAFETY: the `Arc`s keep latch and sleep alive.
                        unsafe { Latch::set(&latch_ref) };
                    })
                })
                .collect();
            // SAFETY: the `Arc` keeps the latch alive.
            unsafe { CountLatch::set(&*latch, &sleep) };
            while !latch.core.probe() {
                sleep.sleep(0, Some(&latch.core), || false);
            }
            // Done with it, as a scope that returns: no setter touches it
            // after this.
            latch.core.forget();
            assert_eq!(done.load(Ordering::Relaxed), 2);
            for setter in setters {
                setter.join().unwrap();
            }
        });
    }
}
