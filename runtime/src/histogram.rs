//! [`PauseHistogram`]: a distribution of pauses that can be merged.
//!
//! A thin shell around an HdrHistogram (the `hdrhistogram` crate, the same
//! structure the JVM's tools and wrk use): values in nanoseconds, two
//! significant digits, so every quantile is within 1% of a value that was
//! recorded; it resizes itself to the range it sees (about 17 KiB for
//! pauses from 1 µs to 10 ms). Histograms of different mutators and runs
//! add up exactly ([`PauseHistogram::merge`]), which a set of per-thread
//! maxima or averages would not. The exact total and maximum are kept
//! beside it.

use hdrhistogram::Histogram;
use std::fmt;
use std::time::Duration;

/// Significant digits: quantiles within 1%.
const SIGFIG: u8 = 2;

/// A distribution of pauses: every interval recorded, its quantiles to
/// within 1%, the exact maximum and total, mergeable across threads and
/// runs.
///
/// # Examples
/// ```
/// use loam_runtime::PauseHistogram;
/// use std::time::Duration;
///
/// let mut a = PauseHistogram::default();
/// let mut b = PauseHistogram::default();
/// for us in 1..=50 {
///     a.record(Duration::from_micros(us));
///     b.record(Duration::from_micros(50 + us));
/// }
/// a.merge(&b);
/// assert_eq!(a.count(), 100);
/// assert_eq!(a.max(), Duration::from_micros(100));
/// let p50 = a.p50().as_secs_f64() * 1e6;
/// assert!((49.5..=50.5).contains(&p50), "{p50}");
/// let p99 = a.p99().as_secs_f64() * 1e6;
/// assert!((98.0..=100.0).contains(&p99), "{p99}");
/// ```
#[derive(Clone)]
pub struct PauseHistogram {
    hist: Histogram<u64>,
    total: Duration,
    max: Duration,
}

impl Default for PauseHistogram {
    fn default() -> Self {
        PauseHistogram {
            // `new` resizes itself as larger values come: recording never
            // fails, and an empty histogram is small.
            hist: Histogram::new(SIGFIG).expect("loam: 2 significant digits is a valid histogram"),
            total: Duration::ZERO,
            max: Duration::ZERO,
        }
    }
}

impl PauseHistogram {
    /// Adds one pause.
    pub fn record(&mut self, pause: Duration) {
        let ns = u64::try_from(pause.as_nanos()).unwrap_or(u64::MAX);
        // `record` resizes the histogram to fit; `saturating_record` would
        // clamp to its current top. Only a value past `u64::MAX / 2` fails.
        if self.hist.record(ns).is_err() {
            self.hist.saturating_record(ns);
        }
        self.total = self.total.saturating_add(pause);
        self.max = self.max.max(pause);
    }

    /// Adds every pause of `other`.
    pub fn merge(&mut self, other: &PauseHistogram) {
        // Cannot fail: `self` resizes to `other`'s range.
        self.hist
            .add(&other.hist)
            .expect("loam: an auto-resizing histogram takes any other");
        self.total = self.total.saturating_add(other.total);
        self.max = self.max.max(other.max);
    }

    /// Pauses recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Sum of all pauses (exact).
    pub fn total(&self) -> Duration {
        self.total
    }

    /// The longest pause (exact).
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The mean pause; zero when nothing was recorded.
    pub fn mean(&self) -> Duration {
        match u32::try_from(self.count()) {
            Ok(0) => Duration::ZERO,
            Ok(n) => self.total / n,
            Err(_) => Duration::from_nanos(self.hist.mean() as u64),
        }
    }

    /// The pause below which a fraction `q` (0 to 1) of pauses fall, to
    /// within 1%; zero when nothing was recorded. `quantile(1.0)` is
    /// [`max`](Self::max).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count() == 0 {
            return Duration::ZERO;
        }
        if q >= 1.0 {
            return self.max;
        }
        Duration::from_nanos(self.hist.value_at_quantile(q.max(0.0))).min(self.max)
    }

    /// The median pause.
    pub fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    /// The 99th-percentile pause.
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }

    /// Pauses longer than `d`, to within the histogram's precision (a
    /// pause less than 1% over `d` may be left out).
    pub fn count_above(&self, d: Duration) -> u64 {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.count() - self.hist.count_between(0, ns).min(self.count())
    }
}

impl fmt::Debug for PauseHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PauseHistogram")
            .field("count", &self.count())
            .field("p50", &self.p50())
            .field("p99", &self.p99())
            .field("max", &self.max)
            .field("total", &self.total)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_one_percent_over_a_wide_range() {
        let mut h = PauseHistogram::default();
        // 1 µs to 100 ms, log-spaced: every value once.
        let values: Vec<u64> = (0..1000)
            .map(|i| (1_000.0 * 10f64.powf(i as f64 / 200.0)) as u64)
            .collect();
        for &ns in &values {
            h.record(Duration::from_nanos(ns));
        }
        for q in [0.1, 0.5, 0.9, 0.99, 0.999] {
            let exact = values[((q * values.len() as f64).ceil() as usize).max(1) - 1] as f64;
            let got = h.quantile(q).as_nanos() as f64;
            assert!((got - exact).abs() <= exact * 0.01, "q {q}: {got} vs {exact}");
        }
        assert_eq!(h.max(), Duration::from_nanos(*values.last().unwrap()));
    }

    #[test]
    fn merged_histograms_equal_one_that_saw_everything() {
        let mut a = PauseHistogram::default();
        let mut b = PauseHistogram::default();
        let mut all = PauseHistogram::default();
        for i in 1..=2000u64 {
            let d = Duration::from_nanos(i * i * 7);
            if i % 3 == 0 {
                a.record(d);
            } else {
                b.record(d);
            }
            all.record(d);
        }
        a.merge(&b);
        for q in [0.0, 0.25, 0.5, 0.75, 0.99, 1.0] {
            assert_eq!(a.quantile(q), all.quantile(q), "q {q}");
        }
        assert_eq!((a.count(), a.total(), a.max()), (all.count(), all.total(), all.max()));
        assert_eq!(a.count_above(Duration::from_millis(1)), all.count_above(Duration::from_millis(1)));
    }

    #[test]
    fn empty_and_extreme_values() {
        let mut h = PauseHistogram::default();
        assert_eq!((h.count(), h.p99(), h.mean()), (0, Duration::ZERO, Duration::ZERO));
        h.record(Duration::ZERO);
        h.record(Duration::from_secs(3600 * 24 * 365));
        assert_eq!(h.count(), 2);
        assert_eq!(h.max(), Duration::from_secs(3600 * 24 * 365));
        assert_eq!(h.quantile(0.0), Duration::ZERO);
        assert_eq!(h.count_above(Duration::from_secs(1)), 1);
    }
}
