//! Parking idle workers without busy spinning, and waking them without ever
//! losing a wake-up: a global sleeper count (Dekker-style handshake with
//! pushers) plus one mutex/condvar pair per worker.

use crossbeam_utils::CachePadded;

use crate::latch::CoreLatch;
use crate::sync::{fence, AtomicUsize, Condvar, Mutex, Ordering};

/// Sleep and wake-up for a pool's workers.
///
/// # Protocol
///
/// A worker that found no work parks in [`Sleep::sleep`]:
///
/// 1. lock its own `is_sleeping` mutex (held until the condvar wait releases it);
/// 2. if it waits on a latch, move the latch `UNSET → SLEEPING` (fails if set);
/// 3. `sleepers += 1` (`SeqCst`), then `fence(SeqCst)`;
/// 4. re-check for work (`has_work`); if there is some, undo 3 and 2 and return;
/// 5. set `is_sleeping = true` and wait on the condvar until a waker clears it.
///
/// A pusher that made a job stealable (onto its own deque or the injector)
/// calls [`Sleep::notify_new_work`]: `fence(SeqCst)`, load `sleepers`, and if
/// it is non-zero wake one worker. The two `SeqCst` fences order "push; fence;
/// read sleepers" against "sleepers += 1; fence; read queues": at least one
/// side sees the other's write, so either the sleeper sees the job in step 4
/// or the pusher sees the sleeper and wakes someone. A woken worker re-scans all queues before
/// parking again, so the job always finds an awake worker. The per-worker mutex
/// closes the window between step 4 and step 5: a waker locks it, so it either
/// runs before step 1 (and the sleeper sees the job) or after the sleeper is
/// waiting (and sees `is_sleeping`).
///
/// Local pushes take the same fence (rayon-core skips it there and accepts
/// that a local job may not wake anyone): a `join` whose first half blocks on
/// its second must find the idle worker awake. Measured cost on the benches:
/// within noise.
///
/// Jobs for one particular worker (broadcast inboxes) use
/// [`Sleep::wake_specific`] directly; its mutex orders the push with that
/// worker's re-check.
///
/// # Invariants
///
/// `sleepers` = number of workers whose `is_sleeping` is true, plus those
/// between steps 3 and 4 or between 3 and the undo; so
/// `0 <= sleepers <= workers.len()`. Checked by `debug_assert!` on each
/// decrement (no underflow) and by `assert_valid` after each park in debug
/// builds.
pub(crate) struct Sleep {
    /// Count of workers announced as sleeping.
    /// Writers: a parking worker (`+1` in step 3, `-1` on undo) and wakers
    /// (`-1` when they clear `is_sleeping`, under the sleeper's mutex).
    /// Readers: `notify_new_work`. Ordering: `SeqCst` RMWs, paired with the `SeqCst`
    /// fences in `sleep` and `notify_new_work`.
    sleepers: CachePadded<AtomicUsize>,
    /// One slot per worker, indexed by worker index.
    workers: Box<[CachePadded<WorkerSleepState>]>,
    /// The process's fork count when the pool was built (`forked.rs`): in
    /// a later child the workers are gone, and a waker that locked one's
    /// mutex could wait for ever for a lock held at the fork. (Not under
    /// loom, whose models do not fork.)
    #[cfg(not(loom))]
    born: u64,
}

/// One worker's parking spot.
struct WorkerSleepState {
    /// True while the worker is parked and not yet woken. Protected by its own
    /// mutex; written by the worker (to true) and by wakers (to false).
    is_sleeping: Mutex<bool>,
    /// Signalled by wakers after clearing `is_sleeping`.
    condvar: Condvar,
}

impl Sleep {
    /// Parking spots for `num_workers` workers, none asleep.
    pub(crate) fn new(num_workers: usize) -> Sleep {
        Sleep {
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            workers: (0..num_workers)
                .map(|_| {
                    CachePadded::new(WorkerSleepState {
                        is_sleeping: Mutex::new(false),
                        condvar: Condvar::new(),
                    })
                })
                .collect(),
            #[cfg(not(loom))]
            born: crate::forked::current(),
        }
    }

    /// Parks worker `index` until woken, unless `has_work()` (called after the
    /// worker has announced itself) says there is something to do, or `latch`
    /// (the latch the worker waits on, if any) is already set.
    ///
    /// Returns whether the worker actually blocked. `has_work` must read every
    /// queue a wake-up could be about, and whatever else the wake-ups it
    /// waits for are about: the terminate flag in the idle loop, the
    /// termination count's `all_idle` for a worker counted out of work
    /// (`exit.rs`); a latch waiter's only the queues.
    pub(crate) fn sleep(
        &self,
        index: usize,
        latch: Option<&CoreLatch>,
        has_work: impl FnOnce() -> bool,
    ) -> bool {
        let state = &self.workers[index];
        let mut is_sleeping = state.is_sleeping.lock();
        debug_assert!(!*is_sleeping, "pool: worker {index} parks twice");
        if let Some(latch) = latch {
            if !latch.try_mark_sleeping() {
                return false;
            }
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if has_work() {
            let before = self.sleepers.fetch_sub(1, Ordering::SeqCst);
            debug_assert!(before > 0, "pool: sleeper count underflow");
            if let Some(latch) = latch {
                latch.unmark_sleeping();
            }
            return false;
        }
        *is_sleeping = true;
        while *is_sleeping {
            is_sleeping = state.condvar.wait(is_sleeping);
        }
        drop(is_sleeping);
        if let Some(latch) = latch {
            latch.unmark_sleeping();
        }
        if cfg!(debug_assertions) {
            self.assert_valid();
        }
        true
    }

    /// Called after pushing a job any worker may take (own deque or injector):
    /// wakes a parked worker if there is one. Never loses a wake-up (see the
    /// protocol).
    #[inline]
    pub(crate) fn notify_new_work(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.wake_any_slow();
        }
    }

    /// Called after injecting a job from outside the pool: wakes up to two
    /// parked workers, one for the job and one for its first fork.
    ///
    /// Why two, from here: the injecting thread is about to block (an
    /// `install`) or go on elsewhere, and a worker woken by the first one's
    /// `join` races that. On two cores, while the injector still runs, the
    /// kernel finds no idle CPU for the second worker and queues it behind
    /// the first, where it waits for the load balancer (about 1.8 ms here)
    /// while the burst runs on one core. Woken from the injector, the second
    /// worker is placed while the injector's CPU is the one about to free
    /// up. Measured on a fresh 2-worker pool after a 30 ms idle gap,
    /// fib(32) with a cutoff at 20, 40 bursts: a second worker late by more
    /// than 0.5 ms in 25–27 bursts waking one, 0–1 waking two; median burst
    /// 3.5 ms against 2.3 ms (`benches/threadpool.rs`, `burst`). The cost:
    /// one wasted wake-up when the job does not fork.
    #[inline]
    pub(crate) fn notify_injected(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 && self.wake_any_slow() {
            self.wake_any_slow();
        }
    }

    /// Wakes the first parked worker found; returns whether one was woken.
    #[cold]
    fn wake_any_slow(&self) -> bool {
        (0..self.workers.len()).any(|index| self.wake_specific(index))
    }

    /// Wakes worker `index` if it is parked; returns whether it was.
    /// Used for latches (the latch's owner) and per-worker inboxes.
    pub(crate) fn wake_specific(&self, index: usize) -> bool {
        // In a forked child nobody is parked: the parked workers were the
        // parent's (a `join` on the thread that forked runs both halves
        // itself).
        #[cfg(not(loom))]
        if crate::forked::since(self.born) {
            return false;
        }
        let state = &self.workers[index];
        let mut is_sleeping = state.is_sleeping.lock();
        if *is_sleeping {
            *is_sleeping = false;
            let before = self.sleepers.fetch_sub(1, Ordering::SeqCst);
            debug_assert!(before > 0, "pool: sleeper count underflow");
            state.condvar.notify_one();
            true
        } else {
            false
        }
    }

    /// Number of parking spots (the pool's worker count).
    pub(crate) fn num_workers(&self) -> usize {
        self.workers.len()
    }

    /// Checks the O(1) part of the invariant: `sleepers <= num_workers`.
    /// Aborts with a `pool:` message if the count is corrupt.
    pub(crate) fn assert_valid(&self) {
        let sleepers = self.sleepers.load(Ordering::Relaxed);
        if sleepers > self.workers.len() {
            crate::say(format_args!(
                "pool: sleeper count {sleepers} exceeds worker count {}",
                self.workers.len()
            ));
            std::process::abort();
        }
    }

    /// Wakes every parked worker (shutdown, broadcasts).
    pub(crate) fn wake_all(&self) {
        for index in 0..self.workers.len() {
            self.wake_specific(index);
        }
    }
}

impl std::fmt::Debug for Sleep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleep")
            .field("sleepers", &self.sleepers.load(Ordering::Relaxed))
            .field("workers", &self.workers.len())
            .finish()
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::Sleep;
    use crate::latch::CoreLatch;
    use crate::sync::{Arc, AtomicBool, Ordering};

    /// One pusher, one sleeper: the pusher queues a job ("queued") and calls
    /// `wake`; the sleeper parks only while nothing is queued. A missed
    /// wake-up leaves it parked forever, which loom reports as a deadlock.
    fn one_push_one_sleeper(wake: fn(&Sleep)) {
        loom::model(move || {
            let sleep = Arc::new(Sleep::new(1));
            // Stands in for the queue: "a job is queued".
            let queued = Arc::new(AtomicBool::new(false));
            let pusher = {
                let (sleep, queued) = (sleep.clone(), queued.clone());
                loom::thread::spawn(move || {
                    queued.store(true, Ordering::Relaxed);
                    wake(&sleep);
                })
            };
            while !queued.load(Ordering::Relaxed) {
                sleep.sleep(0, None, || queued.load(Ordering::Relaxed));
            }
            pusher.join().unwrap();
        });
    }

    /// A push to a shared queue (the injector or a worker's deque) is never
    /// missed by a parking worker.
    #[test]
    fn no_lost_wakeup_pusher_and_sleeper() {
        one_push_one_sleeper(|sleep| sleep.notify_new_work());
    }

    /// The same for a job injected from outside (which wakes up to two).
    #[test]
    fn no_lost_wakeup_injector_and_sleeper() {
        one_push_one_sleeper(|sleep| sleep.notify_injected());
    }

    /// A worker parked on a latch is woken by whoever sets the latch.
    #[test]
    fn latch_set_wakes_its_owner() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(1));
            let latch = Arc::new(CoreLatch::new());
            let setter = {
                let (sleep, latch) = (sleep.clone(), latch.clone());
                loom::thread::spawn(move || {
                    // SAFETY: `latch` is kept alive by this thread's `Arc`.
                    if unsafe { CoreLatch::set(&*latch) } {
                        sleep.wake_specific(0);
                    }
                })
            };
            while !latch.probe() {
                sleep.sleep(0, Some(&latch), || false);
            }
            setter.join().unwrap();
        });
    }

    /// A job for one particular worker (a broadcast inbox): the pusher wakes
    /// that worker directly, with no fence; the worker's mutex orders it.
    #[test]
    fn private_push_wakes_its_target() {
        one_push_one_sleeper(|sleep| {
            sleep.wake_specific(0);
        });
    }

    /// Shutdown: one thread sets the terminate flag and wakes everyone; two
    /// sleepers must both get out.
    #[test]
    fn terminate_wakes_every_sleeper() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let terminating = Arc::new(AtomicBool::new(false));
            let sleepers: Vec<_> = (0..2)
                .map(|index| {
                    let (sleep, terminating) = (sleep.clone(), terminating.clone());
                    loom::thread::spawn(move || {
                        while !terminating.load(Ordering::SeqCst) {
                            sleep.sleep(index, None, || terminating.load(Ordering::SeqCst));
                        }
                    })
                })
                .collect();
            terminating.store(true, Ordering::SeqCst);
            sleep.wake_all();
            for sleeper in sleepers {
                sleeper.join().unwrap();
            }
        });
    }
}
