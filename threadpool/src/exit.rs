//! When the workers of a terminating pool may leave: only once every one
//! of them is out of work at the same time.
//!
//! A worker that left at its first empty look-up after `terminate` missed
//! work that a job still running on another worker handed it later (a
//! `broadcast` into its inbox, which waits for it): the broadcast waited
//! for ever, and so did the pool's drop, joining the broadcaster's worker.
//!
//! # The protocol
//! A worker counts itself in ([`ExitCount::count_in`]) after a look-up
//! that found nothing, and counts itself out ([`ExitCount::count_out`])
//! before it looks again. A job is pushed only by a worker not counted (one
//! running a job, or looking): into its own deque or the injector, where
//! its own next look-up finds it before it counts itself in, or into
//! another's inbox by a broadcast, which stays uncounted until that job
//! has run. So when the count reaches the thread count no job is queued
//! and none can be: the worker that saw it sets `all_idle` and wakes the
//! rest, and every worker leaves. A worker woken before that counts itself
//! out and looks again; if the count reached the thread count meanwhile,
//! its look-up finds nothing, and it counts itself back in to the same
//! total, and leaves.
//!
//! Waiting counted in, a worker sleeps (`Sleep::sleep`) with the re-check
//! "`all_idle`, or a queue it reads holds a job": a push wakes it as any
//! sleeper, and the last worker in wakes them all. The loom model below
//! checks the protocol with the real `Sleep`: a job still running hands a
//! counted-in worker its work, which runs before anyone leaves, and both
//! workers leave.

use crate::sync::{AtomicBool, AtomicUsize, Ordering};

/// The termination count of one pool (module docs).
#[derive(Debug, Default)]
pub(crate) struct ExitCount {
    /// Workers counted in: out of work, and not looking since. `SeqCst`,
    /// as `all_idle`: the decision reads one total order of counts.
    idle: AtomicUsize,
    /// Set once, by the worker whose count-in made `idle` the thread
    /// count: every worker leaves.
    all_idle: AtomicBool,
}

impl ExitCount {
    /// A worker of `workers` found no work: counts it in. True if it was
    /// the last (every worker is out of work): `all_idle` is set, and the
    /// caller wakes the others and leaves.
    pub(crate) fn count_in(&self, workers: usize) -> bool {
        self.count_in_many(1, workers)
    }

    /// `n` workers that never started (a build that failed partway): in
    /// for good, so that the started ones can leave (they waited for ever
    /// for a count of the whole pool). True as
    /// `count_in`.
    pub(crate) fn absent(&self, n: usize, workers: usize) -> bool {
        self.count_in_many(n, workers)
    }

    fn count_in_many(&self, n: usize, workers: usize) -> bool {
        let idle = self.idle.fetch_add(n, Ordering::SeqCst) + n;
        debug_assert!(
            idle <= workers,
            "pool: {idle} workers counted idle of {workers}"
        );
        if idle == workers {
            self.all_idle.store(true, Ordering::SeqCst);
            return true;
        }
        false
    }

    /// Whether every worker was out of work at once: all leave.
    pub(crate) fn all_idle(&self) -> bool {
        self.all_idle.load(Ordering::SeqCst)
    }

    /// A counted-in worker woken before `all_idle` is about to look for
    /// work again.
    pub(crate) fn count_out(&self) {
        let before = self.idle.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(before > 0, "pool: idle count underflow");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::ExitCount;
    use crate::latch::CoreLatch;
    use crate::sleep::Sleep;
    use crate::sync::{Arc, AtomicBool, Ordering};

    /// Two workers of a terminating pool. Worker 0 is still running a job,
    /// which hands worker 1 a job (its inbox: a flag) and waits for it to
    /// run, as a broadcast does; worker 1 has found no work and follows
    /// the exit protocol. The job runs before either leaves, and both
    /// leave (a worker asleep for ever is a deadlock loom reports).
    #[test]
    fn a_job_handed_over_during_termination_runs_before_anyone_leaves() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let exit = Arc::new(ExitCount::default());
            let inbox = Arc::new(AtomicBool::new(false));
            // Set by the handed-over job as it runs; worker 0 waits on it
            // as a broadcast waits on its count latch.
            let ran = Arc::new(CoreLatch::new());
            // The exit protocol of worker `index`, whose look-up reads the
            // inbox when it is worker 1's.
            let leave = |index: usize,
                         sleep: &Sleep,
                         exit: &ExitCount,
                         inbox: &AtomicBool,
                         ran: &CoreLatch| loop {
                // Worker 1 alone takes from its inbox: a load and a store.
                // (With a `swap` here loom 0.7 reported a deadlock in
                // which the woken worker's swap read the inbox as empty
                // after the pusher's store and wake-up through the sleep
                // mutex, which coherence forbids.)
                if index == 1 && inbox.load(Ordering::SeqCst) {
                    inbox.store(false, Ordering::SeqCst);
                    // SAFETY: `ran` is kept alive by this thread's `Arc`.
                    if unsafe { CoreLatch::set(ran) } {
                        sleep.wake_specific(0);
                    }
                    continue;
                }
                if exit.count_in(2) {
                    sleep.wake_all();
                    return;
                }
                sleep.sleep(index, None, || {
                    exit.all_idle() || (index == 1 && inbox.load(Ordering::SeqCst))
                });
                if exit.all_idle() {
                    return;
                }
                exit.count_out();
            };
            let worker1 = {
                let (sleep, exit, inbox, ran) =
                    (sleep.clone(), exit.clone(), inbox.clone(), ran.clone());
                loom::thread::spawn(move || leave(1, &sleep, &exit, &inbox, &ran))
            };
            // Worker 0's job: hand over, and wait, uncounted, for it to run.
            inbox.store(true, Ordering::SeqCst);
            sleep.wake_specific(1);
            while !ran.probe() {
                sleep.sleep(0, Some(&ran), || false);
            }
            leave(0, &sleep, &exit, &inbox, &ran);
            worker1.join().unwrap();
            assert!(!inbox.load(Ordering::SeqCst), "a job was left queued");
        });
    }

    /// The exit protocol of a worker with nothing to run: count in, and
    /// sleep until every worker is in.
    fn leave_idle(index: usize, workers: usize, sleep: &Sleep, exit: &ExitCount) {
        loop {
            if exit.count_in(workers) {
                sleep.wake_all();
                return;
            }
            sleep.sleep(index, None, || exit.all_idle());
            if exit.all_idle() {
                return;
            }
            exit.count_out();
        }
    }

    /// Two idle workers meet in every order (the last one in wakes the
    /// first, which may be about to sleep or to count itself out), and
    /// both leave; with a third that never started counted `absent`, as a
    /// build that failed partway does, the two started ones leave too.
    #[test]
    fn idle_workers_all_leave_with_or_without_an_absent_one() {
        for (started, workers) in [(2, 2), (2, 3)] {
            loom::model(move || {
                let sleep = Arc::new(Sleep::new(workers));
                let exit = Arc::new(ExitCount::default());
                if workers > started && exit.absent(workers - started, workers) {
                    sleep.wake_all();
                }
                let other = {
                    let (sleep, exit) = (sleep.clone(), exit.clone());
                    loom::thread::spawn(move || leave_idle(1, workers, &sleep, &exit))
                };
                leave_idle(0, workers, &sleep, &exit);
                other.join().unwrap();
                assert!(exit.all_idle());
            });
        }
    }
}
