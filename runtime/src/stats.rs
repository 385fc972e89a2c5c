//! Collector telemetry: [`GcStats`], the per-cycle [`CycleEvent`] (whose
//! `Display` is the `LOAM_GCTRACE` line) and [`StatsHandle`], which outlives
//! its runtime.

use crate::histogram::PauseHistogram;
use std::fmt;
use std::time::Duration;

/// What one collection cycle did, passed to the
/// [`on_cycle`](crate::RuntimeBuilder::on_cycle) hook after its sweep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleEvent {
    /// 1 for the runtime's first cycle.
    pub cycle: u64,
    /// When the cycle began, from the runtime's start.
    pub at: Duration,
    /// Started by [`collect`](crate::Runtime::collect) or a heap-limit
    /// retry, or the last cycle of a dropped runtime; not by pacing.
    pub forced: bool,
    /// Asked for by the large objects made since the last mark alone (past
    /// 128 KiB, an eighth of the goal of them, while cycles find them
    /// dead), before the heap reached its goal.
    pub large_objects: bool,
    /// A minor cycle: it kept the marks of objects earlier cycles found live
    /// and traced only younger ones (see
    /// [`RuntimeBuilder::generational`](crate::RuntimeBuilder::generational)).
    pub minor: bool,
    /// The mark went on with the mutators running: past the first pause
    /// (the cycle had two pauses or more), or from its start in a ragged
    /// cycle (`ragged`, which has no pause unless its end falls back to a
    /// stop).
    pub concurrent: bool,
    /// The mark began and ended with per-mutator handshakes instead of
    /// stops (`RuntimeBuilder::ragged_handshakes`): it paused nothing,
    /// unless its end fell back to a stop (then `mark_end_pause`). `stop`
    /// is then the time spent waiting for calls under way to end, while
    /// every mutator ran and entered freely.
    pub ragged: bool,
    /// The cycle's stop-the-world time: the sum of its pauses, each from the
    /// moment every mutator had left `mutate` until they may enter again.
    /// No mutator runs `mutate` during one.
    pub pause: Duration,
    /// The first pause: snapshot, and the mark up to the pause budget (the
    /// whole mark if it fit, then weak references too).
    pub mark_start_pause: Duration,
    /// The pauses that end a concurrent mark (the last shaded objects, weak
    /// references), summed: each traces for at most the pause budget, and
    /// a mark whose rest does not fit resumes the mutators and tries again
    /// (`GcStats::pauses` has each); zero if the mark fit in the first.
    pub mark_end_pause: Duration,
    /// Time a full cycle spent clearing the marks before it stopped the
    /// world, with the mutators running (zero in a minor cycle, and in a
    /// full one that cleared them in its first pause: a `GlobalAlloc`
    /// space, or a cycle that became full only at its stop).
    pub mark_clear: Duration,
    /// Time to stop the world before the pauses: until every mutator
    /// running `mutate` had returned (they run meanwhile; one that tries to
    /// enter waits).
    pub stop: Duration,
    /// Time recording the heap for the sweep (each page's allocated bits
    /// as of the stop): taken with the mutators running in loam's pages
    /// (`snapshot_concurrent`), in the first pause where that pause clears
    /// the marks (see `mark_clear`), and in verify mode when the mark
    /// ended in the first pause.
    pub snapshot: Duration,
    /// The snapshot was taken with the mutators running, outside the
    /// pauses.
    pub snapshot_concurrent: bool,
    /// Time marking, in the pauses and between them (not the waits for
    /// calls and stops, `stop`, nor the snapshot, `snapshot`, made while
    /// the mark ran).
    pub mark: Duration,
    /// The part of `mark` with the mutators running (zero if the mark fit
    /// in the first pause).
    pub concurrent_mark: Duration,
    /// The concurrent sweep after the pause.
    pub sweep: Duration,
    /// Managed bytes when the cycle began.
    pub heap_before: usize,
    /// Managed bytes after the sweep.
    pub heap_after: usize,
    /// Bytes of the objects marked: the live size in a full cycle, the
    /// young survivors in a minor one.
    pub bytes_marked: usize,
    /// Objects marked.
    pub objects_marked: u64,
    /// Bytes freed by the sweep.
    pub bytes_freed: usize,
    /// Objects freed by the sweep.
    pub objects_freed: u64,
    /// Of `bytes_freed`, what mutators swept: a mutator that pacing holds
    /// while the sweep runs sweeps pages of it rather than wait for it.
    pub bytes_swept_by_mutators: usize,
    /// The heap size that triggers the next cycle: `goal` less how far the
    /// heap grew past the trigger by the end of a cycle's mark (the
    /// smaller of the last two cycles' measures), so that the next cycle's
    /// heap peaks near `goal`; never
    /// lower than halfway from the live size to `goal`, nor than the
    /// minimum heap (`goal` itself when that is lower).
    pub next_goal: usize,
    /// The heap goal after the cycle: the gc percent over the live size
    /// the last full cycle measured, at least the minimum heap unless a
    /// heap limit holds it lower (and with room for the mutators' unspent
    /// credit), `usize::MAX` with the goal off. The heap is meant to peak
    /// there.
    pub goal: usize,
    /// The goal pacing counts from after the cycle: a mutator helps or
    /// waits once the heap reaches twice it (or seven eighths of the heap
    /// limit). `goal` after a full cycle whose mark completed; after a minor one it can be
    /// higher: the goal for the live data a mark found, when that is more
    /// than the last full cycle measured (a structure built in one call),
    /// until the next full cycle.
    pub pace_goal: usize,
    /// Bytes of old objects after the cycle (the live size after a full
    /// cycle, plus what minor cycles promoted since).
    pub old_bytes: usize,
    /// The runtime's GC threads: those that marked in pauses and swept.
    /// A mark with the mutators running uses
    /// [`RuntimeBuilder::concurrent_gc_threads`](crate::RuntimeBuilder::concurrent_gc_threads)
    /// of them.
    pub gc_threads: usize,
    /// Holds of mutators (each interval the collector held one, as it saw
    /// it: see [`GcStats::mutator_pauses`]) that ended since the previous
    /// cycle's event, which is taken as the cycle's sweep ends: a wait for
    /// this cycle itself (pacing, the heap limit's collection) ends after
    /// that and counts in the next cycle's event (and a wait for a
    /// runtime's last cycle in none; [`GcStats`] has every hold). How many,
    pub mutator_pauses: u64,
    /// the longest,
    pub mutator_pause_max: Duration,
    /// and their sum.
    pub mutator_pause_total: Duration,
}

/// The `LOAM_GCTRACE` line: one per cycle, on stderr.
///
/// `gc 12 minor conc @1.234s: pause 0.210+0.050 ms (stop 0.120, snapshot 0.030
/// concurrent, mark 3.100, 2.900 concurrent), sweep 1.200 ms, 40.0->12.5 MB, 2.1 MB marked,
/// 10.2 MB old, 24.0 MB goal, 51234 objects freed, 2 T; held 3x, max 0.400 ms,
/// 0.700 ms in all`, then ` (forced)` for a forced cycle, or ` (large
/// objects)` for one the large objects made since the last mark asked for. A sweep that
/// mutators helped has ` (1.5 MB by mutators)` after its time. A full cycle that
/// cleared its marks before the stop has `clear 0.300 concurrent, ` before
/// `stop`; a trigger below the goal follows it, `24.0 MB goal (trigger 18.0)`,
/// then a pace goal above the goal: `24.0 MB goal (pace 64.0)`.
impl fmt::Display for CycleEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gc {} {}{} @{:.3}s: pause {:.3}",
            self.cycle,
            if self.minor { "minor" } else { "full" },
            if self.ragged {
                " ragged"
            } else if self.concurrent {
                " conc"
            } else {
                ""
            },
            self.at.as_secs_f64(),
            ms(self.mark_start_pause),
        )?;
        if self.concurrent {
            write!(f, "+{:.3}", ms(self.mark_end_pause))?;
        }
        write!(f, " ms (")?;
        if !self.mark_clear.is_zero() {
            write!(f, "clear {:.3} concurrent, ", ms(self.mark_clear))?;
        }
        write!(
            f,
            "{} {:.3}, snapshot {:.3}{}, mark {:.3}",
            if self.ragged { "handshakes" } else { "stop" },
            ms(self.stop),
            ms(self.snapshot),
            if self.snapshot_concurrent { " concurrent" } else { "" },
            ms(self.mark)
        )?;
        if self.concurrent {
            write!(f, ", {:.3} concurrent", ms(self.concurrent_mark))?;
        }
        write!(
            f,
            "), sweep {:.3} ms{}, {:.1}->{:.1} MB, {:.1} MB marked, {:.1} MB old, ",
            ms(self.sweep),
            if self.bytes_swept_by_mutators > 0 {
                format!(" ({:.1} MB by mutators)", mb(self.bytes_swept_by_mutators))
            } else {
                String::new()
            },
            mb(self.heap_before),
            mb(self.heap_after),
            mb(self.bytes_marked),
            mb(self.old_bytes),
        )?;
        if self.goal == usize::MAX {
            write!(f, "off goal")?;
        } else {
            write!(f, "{:.1} MB goal", mb(self.goal))?;
            if self.next_goal < self.goal {
                write!(f, " (trigger {:.1})", mb(self.next_goal))?;
            }
            if self.pace_goal > self.goal {
                write!(f, " (pace {:.1})", mb(self.pace_goal))?;
            }
        }
        write!(
            f,
            ", {} objects freed, {} T; held {}x, max {:.3} ms, {:.3} ms in all{}",
            self.objects_freed,
            self.gc_threads,
            self.mutator_pauses,
            ms(self.mutator_pause_max),
            ms(self.mutator_pause_total),
            if self.forced {
                " (forced)"
            } else if self.large_objects {
                " (large objects)"
            } else {
                ""
            },
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mb(b: usize) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// A runtime's collector statistics, from
/// [`Runtime::stats`](crate::Runtime::stats).
///
/// Read while mutators run or a cycle is under way, its parts are read one
/// after another, not at one instant: the `held_*` parts may differ from
/// `mutator_pauses`' total by the holds recorded in between, and `cycles`
/// and `last` may be a cycle behind the holds. Read with the runtime
/// idle (after [`Runtime::wait_for_cycle`](crate::Runtime::wait_for_cycle)
/// with no call under way), or from
/// [`StatsHandle::wait_final`], they agree.
#[derive(Clone, Debug, Default)]
pub struct GcStats {
    /// Cycles completed.
    pub cycles: u64,
    /// How many of them were minor.
    pub minor_cycles: u64,
    /// Every pause of the collector (a cycle with a concurrent mark has
    /// two or more: its ending stops are bounded, see
    /// [`CycleEvent::mark_end_pause`]), each from the moment the last mutator left `mutate` to the
    /// resume: the collector's view. What mutators saw is
    /// [`mutator_pauses`](Self::mutator_pauses).
    pub pauses: PauseHistogram,
    /// Every interval in which the collector held a mutator, as that mutator
    /// saw it, over all mutators (those detached included): waiting at a
    /// safepoint while a stop was up (the wait for other mutators' calls to
    /// return included, as the JVM's safepoint log counts time-to-safepoint),
    /// waiting for a cycle when it outran the collector or doing a share
    /// of its mark for it (assists), waiting for memory at the heap
    /// limit, and waiting for the finalizer to run destructors. A
    /// `collect` call is not counted (the
    /// program asked to wait); one mutator's are
    /// [`Mutator::pauses`](crate::Mutator::pauses).
    pub mutator_pauses: PauseHistogram,
    /// Of `mutator_pauses`' total: the time held at safepoints (and the
    /// other waits for the collector's hand on shared state: for a root
    /// table, the weak list or the weak gate while the collector reads
    /// them, and at a call's entry in a ragged cycle's window),
    pub held_at_safepoint: Duration,
    /// pacing: waiting for a cycle (or for the mark's work) because the heap
    /// reached twice its goal (or seven eighths of its limit),
    pub held_by_pacing: Duration,
    /// at the heap limit, waiting for memory,
    pub held_for_memory: Duration,
    /// marking or sweeping for the collector: a mutator that
    /// allocates while a concurrent mark runs pays for it in marking work,
    /// in slices of at most 100 µs (1 ms past twice the heap goal; Go's
    /// mark assists), and one past twice the goal while the sweep runs
    /// sweeps pages of it, in slices of 1 ms, instead of waiting for the
    /// cycle,
    pub held_assisting: Duration,
    /// and waiting for the finalizer, before a call or at the heap limit:
    /// dead objects waiting for their destructors
    /// ([`drops_pending`](Self::drops_pending)) held more of the heap than
    /// the pace point or the limit left (README, "Pacing").
    pub held_for_drops: Duration,
    /// Cycles whose mark went on concurrently ([`CycleEvent::concurrent`]:
    /// ragged cycles included).
    pub concurrent_cycles: u64,
    /// Cycles whose mark began with per-mutator handshakes instead of a
    /// stop ([`CycleEvent::ragged`]).
    pub ragged_cycles: u64,
    /// Total time marking.
    pub mark_time: Duration,
    /// Total time sweeping.
    pub sweep_time: Duration,
    /// Total bytes marked, over all cycles.
    pub bytes_marked: u64,
    /// Total bytes freed, over all cycles.
    pub bytes_freed: u64,
    /// Total objects freed, over all cycles.
    pub objects_freed: u64,
    /// Of `bytes_freed`, what mutators swept while pacing held them
    /// ([`CycleEvent::bytes_swept_by_mutators`]).
    pub bytes_swept_by_mutators: u64,
    /// Managed bytes allocated and not yet freed, now (allocation is counted
    /// in chunks per mutator, so this is at most 64 KiB per mutator high).
    pub heap_size: usize,
    /// Bytes of dead objects the sweeps found whose destructors have not
    /// run yet, or whose blocks are not yet back in the heap: the
    /// finalizer's backlog, now. Counted in neither `heap_size` nor the
    /// goal, but a mutator that would take the two together past where
    /// pacing begins, or past the heap limit, waits for the finalizer
    /// (README, "Pacing").
    pub drops_pending: usize,
    /// Live bytes the last full cycle found.
    pub live_size: usize,
    /// Panics the collector contained in user code it ran on its threads:
    /// destructors, `Trace` impls and the `on_cycle` hook (each is also
    /// reported on stderr, once per type and cycle).
    pub user_panics: u64,
    /// The heap size that triggers the next cycle ([`CycleEvent::next_goal`]).
    pub next_goal: usize,
    /// The heap goal after the last cycle ([`CycleEvent::goal`]): where the
    /// heap is meant to peak, `next_goal` and the runway above it.
    pub goal: usize,
    /// The last cycle's event.
    pub last: Option<CycleEvent>,
}

/// A runtime's statistics that outlive it: from
/// [`Runtime::stats_handle`](crate::Runtime::stats_handle).
///
/// While the runtime lives, [`get`](Self::get) is
/// [`Runtime::stats`](crate::Runtime::stats); once its last handle is
/// dropped and its last cycle (which frees every object left) has run, the
/// final statistics stay readable here.
///
/// # Examples
/// ```
/// use loam_runtime::Runtime;
///
/// let rt = Runtime::new();
/// let stats = rt.stats_handle();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     for i in 0..1000_u64 {
///         mc.alloc(i);
///     }
/// });
/// drop(m);
/// drop(rt); // the last cycle frees the 1000 objects
/// let last = stats.wait_final();
/// assert!(stats.is_final());
/// assert!(last.objects_freed >= 1000);
/// ```
#[derive(Clone)]
pub struct StatsHandle {
    pub(crate) cell: std::sync::Arc<FinalStats>,
    pub(crate) live: std::sync::Weak<crate::runtime::Shared>,
    /// The runtime's id, to refuse a wait from a thread that keeps it
    /// alive (ids are not reused before the final statistics are set).
    pub(crate) id: u16,
    /// The runtime's fork count at its build (`forked.rs`): a child forked
    /// after it has no collector to set the final statistics.
    pub(crate) born: u64,
}

/// The final statistics of a runtime, set once, after its last cycle.
#[derive(Debug, Default)]
pub(crate) struct FinalStats {
    stats: parking_lot::Mutex<Option<GcStats>>,
    set: parking_lot::Condvar,
}

impl FinalStats {
    /// Sets the final statistics (once).
    pub(crate) fn set(&self, stats: GcStats) {
        *self.stats.lock() = Some(stats);
        self.set.notify_all();
    }
}

impl StatsHandle {
    /// The statistics now: the final ones once the runtime is gone.
    pub fn get(&self) -> GcStats {
        if let Some(s) = self.cell.stats.lock().clone() {
            return s;
        }
        match self.live.upgrade() {
            Some(shared) => shared.current_stats(),
            // Gone: its coordinator set the final statistics first.
            None => self.cell.stats.lock().clone().unwrap_or_default(),
        }
    }

    /// Whether the runtime is gone and these are its final statistics.
    pub fn is_final(&self) -> bool {
        self.cell.stats.lock().is_some()
    }

    /// Waits until the runtime is gone and its last cycle has run, and
    /// returns the final statistics. Waits for ever while a handle of the
    /// runtime (a `Runtime`, `Mutator`, root or pool) is alive.
    ///
    /// # Panics
    /// Where the wait could never end: in a child process forked after the
    /// runtime was built (before its final statistics were set); on a
    /// thread with a live `Mutator` or `Root` of this runtime (a `Root`
    /// cannot leave its thread, and keeps the runtime alive); inside a
    /// `mutate` call of any runtime (a cycle of that runtime may wait for
    /// the call, and the last cycle waits for that one: cycles take turns
    /// process-wide); on one of the
    /// collector's threads (its GC threads), or in an `on_cycle` hook or a
    /// destructor the collector runs, of any runtime (hooks and
    /// destructors may wait for each other's runtimes): the last cycle
    /// waits for those.
    pub fn wait_final(&self) -> GcStats {
        if crate::forked::since(self.born) {
            // The fork may have caught the coordinator setting them, with
            // the lock held for good in this child: a look, no wait.
            if let Some(stats) = self.cell.stats.try_lock().and_then(|s| s.clone()) {
                return stats;
            }
            crate::forked::refuse_since(self.born, "StatsHandle::wait_final");
        }
        if let Some(stats) = self.cell.stats.lock().clone() {
            return stats;
        }
        assert!(
            !crate::mutator::attached_to(self.id),
            "loam: StatsHandle::wait_final on a thread with a live Mutator of \
             the runtime: its final statistics wait for that Mutator to be dropped"
        );
        assert!(
            !crate::mutator::holds_roots_of(self.id),
            "loam: StatsHandle::wait_final on a thread that holds a Root of the \
             runtime: its final statistics wait for that Root to be dropped, \
             which only this thread can do"
        );
        assert!(
            !crate::mutator::inside_mutate(),
            "loam: StatsHandle::wait_final inside a mutate closure: a cycle \
             may wait for the call while the last cycle waits for that one; \
             call it after mutate returns"
        );
        assert!(
            !crate::collector::in_cycle_thread()
                && !crate::collector::on_coordinator()
                && !crate::collector::is_finalizer(),
            "loam: StatsHandle::wait_final on one of a collector's threads \
             (in a Trace impl, a destructor or an on_cycle hook): the \
             runtime's last cycle may wait for this thread"
        );
        let mut s = self.cell.stats.lock();
        loop {
            if let Some(stats) = &*s {
                return stats.clone();
            }
            self.cell.set.wait(&mut s);
        }
    }
}

impl fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatsHandle").field("final", &self.is_final()).finish()
    }
}
