//! What a mutator sees of the collector: every interval it is held.
//!
//! A cycle's own pause figures ([`CycleEvent::pause`](crate::CycleEvent))
//! begin once the last mutator has left `mutate`. A mutator that tried to
//! enter while the world was stopping waited longer: for the call it waited
//! behind as well as for the pause (time-to-safepoint, which the JVM's
//! safepoint log counts too). A mutator that outran the collector waited for
//! a cycle (pacing), and one at the heap limit waited for memory. Each such
//! interval is a pause as that mutator sees it, and it records each itself,
//! when the wait ends, with the clock read on the slow paths only (the
//! entry fast path reads none):
//! - [`Hold::Safepoint`]: entering `mutate` (or `safepoint`) while a stop
//!   was up, until it could enter;
//! - [`Hold::Pacing`]: before a call, waiting for a cycle (or for the
//!   mark's work, a slice at a time) because the heap reached twice its
//!   goal;
//! - [`Hold::Memory`]: at the heap limit, waiting for a sweep inside a call,
//!   or for the forced cycle before the next call;
//! - [`Hold::Drops`]: before a call, or at the heap limit inside one,
//!   waiting for the finalizer to run the destructors of dead objects
//!   that hold more of the heap than the pace point or the limit leaves
//!   (`finalize.rs`, "The brake");
//! - [`Hold::Assist`]: marking for the collector, in slices of at most
//!   [`ASSIST_SLICE`](crate::mutator) (a millisecond once the heap has
//!   reached twice its goal; before a call, the slices that pay what the
//!   last call owes are one hold), in payment for what it allocated
//!   during a concurrent mark (Go's mark assists); or, past twice the goal
//!   while the cycle sweeps, sweeping its pages in slices of a
//!   millisecond instead of waiting for it (`sweep::Helper`).
//!
//! The holds a call meets on its way in (a collection at the limit,
//! pacing and assists, a stop) are one interval of waiting to run it, and
//! one hold in the histograms, split by cause in the totals only
//! (`mutator.rs`, `EntryStall`).
//!
//! A `collect` the program asks for is not a hold: the program chose to
//! wait (other mutators held by that cycle's stops are, as always).
//!
//! Each mutator keeps its own histogram (the figures for one thread); the
//! runtime adds up all of them, those of mutators gone included, and the
//! cycle's event gets the holds that ended since the previous event.

use crate::histogram::PauseHistogram;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Why a mutator was held (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    Safepoint = 0,
    Pacing = 1,
    Memory = 2,
    Assist = 3,
    Drops = 4,
}

/// One mutator's holds.
#[derive(Debug, Default)]
pub(crate) struct MutatorHolds {
    hist: Mutex<PauseHistogram>,
}

impl MutatorHolds {
    /// This mutator's holds so far.
    pub(crate) fn histogram(&self) -> PauseHistogram {
        self.hist.lock().clone()
    }
}

/// The holds that ended since the last cycle event.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SinceEvent {
    pub(crate) max: Duration,
    pub(crate) total: Duration,
    pub(crate) count: u64,
}

/// A runtime's record of every mutator's holds.
///
/// Lock order: `departed`, then a mutator's `hist`; `since_event` is
/// taken under the runtime's `stats` (`Cycle::event`) and takes nothing.
#[derive(Debug, Default)]
pub(crate) struct HoldLog {
    /// The holds of mutators that detached.
    departed: Mutex<PauseHistogram>,
    /// Nanoseconds held, by [`Hold`] (relaxed: totals read by `stats`).
    by_kind: [AtomicU64; 5],
    since_event: Mutex<SinceEvent>,
}

impl HoldLog {
    /// `mine` was held once, for `total`, made of `parts` (the time by
    /// cause).
    #[cold]
    pub(crate) fn record_parts(&self, mine: &MutatorHolds, total: Duration, parts: &[(Hold, Duration)]) {
        mine.hist.lock().record(total);
        for &(why, d) in parts {
            let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            self.by_kind[why as usize].fetch_add(ns, Ordering::Relaxed);
        }
        let mut s = self.since_event.lock();
        s.max = s.max.max(total);
        s.total = s.total.saturating_add(total);
        s.count += 1;
    }

    /// The mutator of `mine` detaches: its holds move to the runtime's.
    pub(crate) fn detach(&self, mine: &MutatorHolds) {
        let mut departed = self.departed.lock();
        let h = std::mem::take(&mut *mine.hist.lock());
        departed.merge(&h);
    }

    /// Every hold so far: the departed mutators' and those of `live`.
    pub(crate) fn all<'a>(&self, live: impl IntoIterator<Item = &'a MutatorHolds>) -> PauseHistogram {
        let departed = self.departed.lock();
        let mut all = departed.clone();
        for m in live {
            all.merge(&m.hist.lock());
        }
        all
    }

    /// Time held, by kind: safepoint, pacing, memory, assists, drops.
    pub(crate) fn by_kind(&self) -> [Duration; 5] {
        self.by_kind
            .each_ref()
            .map(|a| Duration::from_nanos(a.load(Ordering::Relaxed)))
    }

    /// The holds that ended since the last call.
    pub(crate) fn take_since_event(&self) -> SinceEvent {
        std::mem::take(&mut *self.since_event.lock())
    }
}

#[cfg(test)]
mod tests {
    use crate::Runtime;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    /// A mutator that enters while a stop waits for another mutator's long
    /// call is held until that call returns: its record covers the whole
    /// wait, the runtime's histogram and a cycle event count it.
    #[test]
    fn a_wait_at_a_safepoint_is_recorded_whole() {
        let seen_by_events = Arc::new(AtomicU64::new(0));
        let rt = {
            let seen = seen_by_events.clone();
            Runtime::builder()
                .ignore_env()
                .gc_threads(1)
                .on_cycle(move |e| {
                    seen.fetch_add(e.mutator_pauses, Ordering::Relaxed);
                })
                .build()
        };
        let shared = rt.handle.shared.clone();
        let (b_attached, b_ready) = mpsc::channel();
        let (go_b, b_go) = mpsc::channel::<()>();
        let (a_in, a_inside) = mpsc::channel();
        // A's call spins until told to go: a call that waits on another
        // thread (a channel) would open the stop's gate to B.
        let a_go = std::sync::atomic::AtomicBool::new(false);
        let (rt, a_go) = (&rt, &a_go);
        std::thread::scope(|s| {
            // B attaches before A's call begins, and A's call runs: the
            // stop's gate does not admit B (`handshake.rs`), so it waits
            // for A's call.
            let b = s.spawn(move || {
                let mut m = rt.attach();
                b_attached.send(()).unwrap();
                b_go.recv().unwrap();
                m.mutate(|_| ());
                m.pauses()
            });
            b_ready.recv().unwrap();
            s.spawn(move || {
                let mut m = rt.attach();
                m.mutate(|_| {
                    a_in.send(()).unwrap();
                    while !a_go.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                });
            });
            a_inside.recv().unwrap();
            let collect = s.spawn(move || rt.collect());
            while !shared.handshake.stop_requested() {
                std::thread::yield_now();
            }
            go_b.send(()).unwrap();
            while shared.handshake.waiting() == 0 {
                std::thread::yield_now();
            }
            let waiting_since = Instant::now();
            std::thread::sleep(Duration::from_millis(20));
            let a_leaves = Instant::now();
            a_go.store(true, Ordering::Release);
            let held = b.join().unwrap();
            collect.join().unwrap();
            assert_eq!(held.count(), 1, "{held:?}");
            assert!(held.max() >= a_leaves - waiting_since, "{held:?}");
            let stats = rt.stats();
            assert_eq!(stats.mutator_pauses.count(), 1);
            assert_eq!(stats.mutator_pauses.max(), held.max());
            assert_eq!(stats.held_at_safepoint, held.total());
            assert_eq!(stats.held_by_pacing + stats.held_for_memory, Duration::ZERO);
        });
        // The hold ended after the stop: this cycle's event or the next
        // one's counts it.
        rt.collect();
        assert_eq!(seen_by_events.load(Ordering::Relaxed), 1);
    }
}
