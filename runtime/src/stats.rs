//! Collector telemetry: [`GcStats`], the pause [`PauseHistogram`] and the
//! per-cycle [`CycleEvent`].

use std::fmt;
use std::time::Duration;

/// Sub-buckets per power of two: values land within 1/16 (6%) of their
/// bucket's lower bound.
const SUB: usize = 16;
/// Powers of two covered: 1 ns to 2^40 ns (18 minutes).
const OCTAVES: usize = 40;

/// Every pause of a runtime, in log-linear buckets (16 per power of two, so
/// a quantile is within 6% of the true value), plus the exact maximum.
///
/// # Examples
/// ```
/// use loam_runtime::PauseHistogram;
/// use std::time::Duration;
///
/// let mut h = PauseHistogram::default();
/// for us in 1..=100 {
///     h.record(Duration::from_micros(us));
/// }
/// assert_eq!(h.count(), 100);
/// assert_eq!(h.max(), Duration::from_micros(100));
/// let p50 = h.quantile(0.5).as_secs_f64() * 1e6;
/// assert!((47.0..=53.0).contains(&p50), "{p50}");
/// ```
#[derive(Clone)]
pub struct PauseHistogram {
    buckets: Vec<u64>,
    count: u64,
    total: Duration,
    max: Duration,
}

impl Default for PauseHistogram {
    fn default() -> Self {
        PauseHistogram {
            buckets: vec![0; SUB * OCTAVES],
            count: 0,
            total: Duration::ZERO,
            max: Duration::ZERO,
        }
    }
}

fn bucket_of(ns: u64) -> usize {
    let ns = ns.max(1);
    let octave = 63 - ns.leading_zeros() as usize;
    let sub = if octave >= 4 {
        ((ns >> (octave - 4)) & (SUB as u64 - 1)) as usize
    } else {
        ((ns << (4 - octave)) & (SUB as u64 - 1)) as usize
    };
    (octave * SUB + sub).min(SUB * OCTAVES - 1)
}

fn bucket_floor(b: usize) -> u64 {
    let (octave, sub) = (b / SUB, (b % SUB) as u64);
    if octave >= 4 {
        (SUB as u64 + sub) << (octave - 4)
    } else {
        (SUB as u64 + sub) >> (4 - octave)
    }
}

impl PauseHistogram {
    /// Adds one pause.
    pub fn record(&mut self, pause: Duration) {
        let ns = u64::try_from(pause.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)] += 1;
        self.count += 1;
        self.total += pause;
        self.max = self.max.max(pause);
    }

    /// Pauses recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of all pauses.
    pub fn total(&self) -> Duration {
        self.total
    }

    /// The longest pause (exact).
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The pause below which a fraction `q` (0 to 1) of pauses fall, to
    /// within 6%; zero when nothing was recorded. `quantile(1.0)` is
    /// [`max`](Self::max).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        if q >= 1.0 {
            return self.max;
        }
        let rank = ((q.max(0.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                // The bucket's midpoint, capped by the true maximum.
                let lo = bucket_floor(b);
                let hi = bucket_floor(b + 1);
                return Duration::from_nanos((lo + hi) / 2).min(self.max);
            }
        }
        self.max
    }

    /// The median pause.
    pub fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    /// The 99th-percentile pause.
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }
}

impl fmt::Debug for PauseHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PauseHistogram")
            .field("count", &self.count)
            .field("p50", &self.p50())
            .field("p99", &self.p99())
            .field("max", &self.max)
            .finish()
    }
}

/// What one collection cycle did, passed to the
/// [`on_cycle`](crate::RuntimeBuilder::on_cycle) hook after its sweep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleEvent {
    /// 1 for the runtime's first cycle.
    pub cycle: u64,
    /// Started by [`collect`](crate::Runtime::collect) or a heap-limit
    /// retry, not by pacing.
    pub forced: bool,
    /// A minor cycle: it kept the marks of objects earlier cycles found live
    /// and traced only younger ones (see
    /// [`RuntimeBuilder::generational`](crate::RuntimeBuilder::generational)).
    pub minor: bool,
    /// The cycle's stop-the-world time: the sum of its pauses, each from the
    /// moment every mutator had left `mutate` until they may enter again.
    /// No mutator runs `mutate` during one.
    pub pause: Duration,
    /// The first pause: snapshot, and the mark up to the pause budget (the
    /// whole mark if it fit, then weak references too).
    pub mark_start_pause: Duration,
    /// The second pause of a concurrent mark (the last shaded objects, weak
    /// references); zero if the mark fit in the first.
    pub mark_end_pause: Duration,
    /// Time to stop the world before the pauses: until every mutator
    /// running `mutate` had returned (they run meanwhile; one that tries to
    /// enter waits).
    pub stop: Duration,
    /// Time marking, in the pauses and between them.
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
    /// The heap size that triggers the next cycle.
    pub next_goal: usize,
    /// GC threads that marked and swept.
    pub gc_threads: usize,
}

/// A runtime's collector statistics, from
/// [`Runtime::stats`](crate::Runtime::stats).
#[derive(Clone, Debug, Default)]
pub struct GcStats {
    /// Cycles completed.
    pub cycles: u64,
    /// How many of them were minor.
    pub minor_cycles: u64,
    /// Every pause (a cycle with a concurrent mark has two).
    pub pauses: PauseHistogram,
    /// Cycles whose mark went on concurrently, past the first pause.
    pub concurrent_cycles: u64,
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
    /// Managed bytes allocated and not yet freed, now (allocation is counted
    /// in chunks per mutator, so this is at most 64 KiB per mutator high).
    pub heap_size: usize,
    /// Live bytes the last full cycle found.
    pub live_size: usize,
    /// Panics the collector contained in user code it ran on its threads:
    /// destructors, `Trace` impls and the `on_cycle` hook (each is also
    /// reported on stderr, once per type and cycle).
    pub user_panics: u64,
    /// The heap size that triggers the next cycle.
    pub next_goal: usize,
    /// The last cycle's event.
    pub last: Option<CycleEvent>,
}
