//! The runtime's settings: builder values, then `LOAM_*` environment
//! overrides. A bad value is reported on stderr and ignored, except a heap
//! limit that cannot be read, which the runtime refuses to start with
//! ([`ConfigError`]). Sizes and flags are read by `loam_heap`'s parsers, the
//! same for every crate.

use std::time::Duration;

/// The smallest minimum heap: four allocation chunks
/// ([`Config::floor_min_heap`]).
pub(crate) const MIN_HEAP_FLOOR: usize = 4 * crate::mutator::CHUNK;

/// Settings a [`RuntimeBuilder`](crate::RuntimeBuilder) collects.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// Threads of the collector's pool, which marks and sweeps in
    /// parallel (`LOAM_GC_THREADS`).
    pub(crate) gc_threads: usize,
    /// GC threads that trace while the mutators run (`None`: a quarter of
    /// `gc_threads`, at least one; see [`Config::concurrent_gc_threads`]).
    pub(crate) concurrent_gc_threads: Option<usize>,
    /// Heap growth over the live size, in percent, that starts the next
    /// cycle (`LOAM_GC_PERCENT`; `u32::MAX` for `off`: no cycle but forced
    /// ones and the heap limit's).
    pub(crate) gc_percent: u32,
    /// Bytes past which an allocation is an `AllocError` (`LOAM_HEAP_LIMIT`).
    pub(crate) heap_limit: Option<usize>,
    /// The heap goal's floor, in bytes (`LOAM_MIN_HEAP`).
    pub(crate) min_heap: usize,
    /// `min_heap` as given, below the floor too (stress tests' tiny
    /// heaps: `RuntimeBuilder::__stress_min_heap`).
    pub(crate) min_heap_exact: bool,
    /// One line on stderr per cycle (`LOAM_GCTRACE`, `CycleEvent`'s
    /// `Display`).
    pub(crate) trace: bool,
    /// After each mark, re-mark single-threaded and abort if the marks
    /// differ; poison freed objects (`LOAM_GCVERIFY`).
    pub(crate) verify: bool,
    /// Minor (sticky-mark) cycles between full ones (`LOAM_GC_GENERATIONAL`).
    pub(crate) generational: bool,
    /// Mark with the mutators running once the first pause's budget is
    /// spent (see `cycle.rs`); off, the whole mark is one pause.
    pub(crate) concurrent: bool,
    /// How long the first pause may mark before the rest of the mark goes
    /// concurrent.
    pub(crate) mark_pause_budget: Duration,
    /// Begin and end concurrent marks without stopping the world: per
    /// mutator handshakes (`cycle.rs`, "Ragged cycles").
    pub(crate) ragged: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            gc_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            concurrent_gc_threads: None,
            gc_percent: 100,
            heap_limit: None,
            // A floor well above small live sizes keeps young garbage from
            // forcing a cycle every few MiB. Measured on binary-trees depth
            // 16 (3 MB live), loam/Box time, 5 interleaved rounds, before
            // minor cycles: 4 MiB (Go's floor) 2.9x, 16 MiB 1.22-1.33x,
            // 32 MiB 1.16x, 64 MiB no better (fresh pages fault in). Again
            // after minor cycles and the inlined allocation path: 64 MiB
            // halves the cycles and helps 2 threads (7 interleaved pairs,
            // median 1.11x -> 0.92x), but 1 thread pinned (0.71x -> 0.82x)
            // and 3 threads on 2 cores (0.89x -> 0.96x, max pause 10.2 ms
            // from the larger snapshot) lose: not a clear win, so 32 MiB.
            min_heap: 32 << 20,
            min_heap_exact: false,
            trace: false,
            verify: false,
            generational: true,
            concurrent: true,
            // A mark that fits in it is one pause; past it the mark goes
            // concurrent, at the price of a second stop (which waits for
            // every mutator to leave `mutate` again). 150 µs keeps the
            // pauses one mutator sees under a quarter of a millisecond at
            // the 99th percentile on binary-trees at depth 16 (the pause
            // runs a little past its budget, and the mutator's wake-up
            // adds to it; 250 µs gave 0.27 - 0.30 ms there), with the same
            // run time (docs/perf-log.md).
            mark_pause_budget: Duration::from_micros(150),
            // On: no mutator waits at a safepoint for another's call, and
            // binary-trees and the speed tester run as fast or faster than
            // with stops; the price is memory where calls are long (the
            // heap grows for two calls' length, not one: README, "Known
            // problems"; docs/perf-log.md has the figures).
            ragged: true,
        }
    }
}

use loam_heap::{parse_flag, parse_size};

/// GC threads per CPU at most: more only adds scheduling (2,000 threads on
/// two CPUs made a run 500 times slower).
pub(crate) const MAX_GC_THREADS_PER_CPU: usize = 4;

/// The most GC threads a runtime starts: a few per CPU.
pub(crate) fn max_gc_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()) * MAX_GC_THREADS_PER_CPU
}

/// A setting a runtime cannot start with: a `LOAM_*` variable that must be
/// understood (the heap limit is a safety limit, so an unreadable one is not
/// taken for "no limit").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    variable: &'static str,
    value: String,
    expected: &'static str,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={:?} cannot be read: expected {}",
            self.variable, self.value, self.expected
        )
    }
}

impl std::error::Error for ConfigError {}

fn flag(name: &str, value: &str) -> Option<bool> {
    let b = parse_flag(value);
    if b.is_none() {
        warn(name, value, "expected 1/0, true/false, on/off or yes/no");
    }
    b
}

fn warn(name: &str, value: &str, expected: &str) {
    crate::collector::say(format_args!("loam: ignoring {name}={value:?}: {expected}"));
}

impl Config {
    /// How many GC threads trace in a concurrent mark: the setting, or a
    /// quarter of the GC threads (at least one), and never more than they.
    ///
    /// The GC threads took every CPU while the mutators ran before: a
    /// mutator's own code and its assists then lost the CPU for whole
    /// scheduler slices. Binary-trees at depth 21, one mutator on two CPUs
    /// (two runs each, interleaved): the mutators' hold p99 went from 0.24
    /// and 4.06 ms to 0.11 and 0.11 ms with one thread tracing instead of
    /// two, and at depth 16 with two mutators from 3.3 – 3.9 ms to 2.2 ms,
    /// the run time within the noise. Go's collector takes a quarter of
    /// the CPUs for its background mark for the same reason, and leaves
    /// the rest to assists: a mark the threads cannot finish in time is
    /// finished by the mutators that outran it (`Mutator::assist`). The
    /// pauses (world stopped) and the sweep use every GC thread.
    pub(crate) fn concurrent_gc_threads(&self) -> usize {
        self.concurrent_gc_threads
            .unwrap_or(self.gc_threads.div_ceil(4))
            .clamp(1, self.gc_threads.max(1))
    }

    /// Where pacing begins at the latest under a heap limit: seven eighths
    /// of it (`usize::MAX` without a limit, or with `gc_percent` off, which
    /// turns pacing off). See `Shared::pace_at` and
    /// `cycle::goal_under_limit`, which keeps the goal under it too.
    pub(crate) fn pace_cap(&self) -> usize {
        match self.heap_limit {
            Some(limit) if self.gc_percent != u32::MAX => limit - limit / 8,
            _ => usize::MAX,
        }
    }

    /// Applies the `LOAM_*` environment overrides. A value that is not
    /// UTF-8 is read lossily, so that it is refused like any bad value (a
    /// heap limit with an error) instead of being taken for unset.
    pub(crate) fn apply_env(&mut self) -> Result<(), ConfigError> {
        self.apply(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Raises a minimum heap below [`MIN_HEAP_FLOOR`] to it, with a
    /// warning: the heap counts each mutator's unspent allocation credit
    /// (a chunk, `mutator.rs`), so under a few chunks the heap was over
    /// its goal at every call's entry, and every call waited for a whole
    /// cycle, however little was live.
    pub(crate) fn floor_min_heap(&mut self) {
        if self.min_heap < MIN_HEAP_FLOOR && !self.min_heap_exact {
            crate::collector::say(format_args!(
                "loam: a minimum heap of {} bytes asked for; using {MIN_HEAP_FLOOR} \
                 (below it every mutate call would wait for a cycle)",
                self.min_heap
            ));
            self.min_heap = MIN_HEAP_FLOOR;
        }
    }

    /// Caps the GC thread count at a few per CPU, with a warning.
    pub(crate) fn cap_gc_threads(&mut self) {
        let max = max_gc_threads();
        if self.gc_threads > max {
            crate::collector::say(format_args!(
                "loam: {} GC threads asked for; using {max} ({MAX_GC_THREADS_PER_CPU} per CPU at most)",
                self.gc_threads
            ));
            self.gc_threads = max;
        }
    }

    /// Applies overrides read through `get` (the environment, or a test's
    /// map). A bad value of most variables is reported and ignored; a heap
    /// limit that cannot be read is an error.
    pub(crate) fn apply(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(v) = get("LOAM_GC_PERCENT") {
            match v.trim() {
                t if t.eq_ignore_ascii_case("off") => self.gc_percent = u32::MAX,
                // `u32::MAX` is the builder's "off": a number that large
                // is refused here, where "off" says it.
                t => match t.parse::<u32>() {
                    Ok(p) if p != u32::MAX => self.gc_percent = p,
                    _ => warn(
                        "LOAM_GC_PERCENT",
                        &v,
                        "expected a percentage below 4294967295 (e.g. 100) or off",
                    ),
                },
            }
        }
        if let Some(v) = get("LOAM_HEAP_LIMIT") {
            match parse_size(&v) {
                Some(0) => {
                    if let Some(limit) = self.heap_limit {
                        crate::collector::say(format_args!(
                            "loam: LOAM_HEAP_LIMIT=0 removes the heap limit of {limit} bytes \
                             the program set"
                        ));
                    }
                    self.heap_limit = None
                }
                Some(n) => self.heap_limit = Some(n),
                None => {
                    return Err(ConfigError {
                        variable: "LOAM_HEAP_LIMIT",
                        value: v,
                        expected: "a size like 512M, 2GiB or 16MB (0 for none)",
                    })
                }
            }
        }
        if let Some(v) = get("LOAM_GC_THREADS") {
            match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => self.gc_threads = n,
                _ => warn("LOAM_GC_THREADS", &v, "expected a thread count of 1 or more"),
            }
        }
        if let Some(v) = get("LOAM_GC_CONCURRENT_THREADS") {
            match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => self.concurrent_gc_threads = Some(n),
                _ => warn(
                    "LOAM_GC_CONCURRENT_THREADS",
                    &v,
                    "expected a thread count of 1 or more",
                ),
            }
        }
        if let Some(v) = get("LOAM_MIN_HEAP") {
            match parse_size(&v) {
                Some(n) => {
                    // The environment's value gets the floor, whatever the
                    // program asked for.
                    self.min_heap = n;
                    self.min_heap_exact = false;
                }
                None => warn("LOAM_MIN_HEAP", &v, "expected a size like 4M or 64MiB"),
            }
        }
        if let Some(v) = get("LOAM_GCTRACE") {
            if let Some(b) = flag("LOAM_GCTRACE", &v) {
                self.trace = b;
            }
        }
        if let Some(v) = get("LOAM_GCVERIFY") {
            if let Some(b) = flag("LOAM_GCVERIFY", &v) {
                self.verify = b;
            }
        }
        if let Some(v) = get("LOAM_GC_CONCURRENT") {
            if let Some(b) = flag("LOAM_GC_CONCURRENT", &v) {
                self.concurrent = b;
            }
        }
        if let Some(v) = get("LOAM_GC_RAGGED") {
            if let Some(b) = flag("LOAM_GC_RAGGED", &v) {
                self.ragged = b;
            }
        }
        if let Some(v) = get("LOAM_GC_PAUSE_BUDGET_US") {
            match v.trim().parse::<u64>() {
                Ok(us) => self.mark_pause_budget = Duration::from_micros(us),
                Err(_) => warn(
                    "LOAM_GC_PAUSE_BUDGET_US",
                    &v,
                    "expected microseconds (e.g. 2000)",
                ),
            }
        }
        if let Some(v) = get("LOAM_GC_GENERATIONAL") {
            if let Some(b) = flag("LOAM_GC_GENERATIONAL", &v) {
                self.generational = b;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        c.apply(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })?;
        Ok(c)
    }

    #[test]
    fn env_overrides_apply() {
        let c = with(&[
            ("LOAM_GC_PERCENT", "50"),
            ("LOAM_HEAP_LIMIT", "64M"),
            ("LOAM_GCTRACE", "1"),
            ("LOAM_GCVERIFY", "yes"),
            ("LOAM_GC_THREADS", "3"),
            ("LOAM_GC_CONCURRENT_THREADS", "2"),
            ("LOAM_MIN_HEAP", "8MiB"),
            ("LOAM_GC_GENERATIONAL", "0"),
            ("LOAM_GC_CONCURRENT", "off"),
            ("LOAM_GC_PAUSE_BUDGET_US", "500"),
        ])
        .unwrap();
        assert!(!c.concurrent);
        assert_eq!(c.mark_pause_budget, Duration::from_micros(500));
        assert!(!c.generational);
        assert_eq!(c.gc_threads, 3);
        assert_eq!(c.concurrent_gc_threads(), 2);
        assert_eq!(c.min_heap, 8 << 20);
        assert_eq!(c.gc_percent, 50);
        assert_eq!(c.heap_limit, Some(64 << 20));
        assert!(c.trace && c.verify);
        assert_eq!(with(&[("LOAM_GC_PERCENT", "off")]).unwrap().gc_percent, u32::MAX);
        // The number that means "off" to the builder is refused (the
        // default kept), not read as off.
        assert_eq!(with(&[("LOAM_GC_PERCENT", "4294967295")]).unwrap().gc_percent, 100);
        assert_eq!(with(&[("LOAM_GC_PERCENT", "4294967294")]).unwrap().gc_percent, u32::MAX - 1);
        assert_eq!(with(&[("LOAM_GC_PERCENT", " OFF")]).unwrap().gc_percent, u32::MAX);
    }

    #[test]
    fn every_usual_spelling_of_a_heap_limit_is_read() {
        for (v, n) in [
            ("16MiB", 16 << 20),
            ("16MB", 16 << 20),
            ("16m", 16 << 20),
            ("16 M", 16 << 20),
            ("2GiB", 2 << 30),
            ("2gb", 2 << 30),
            ("512K", 512 << 10),
            ("512kib", 512 << 10),
            ("4096", 4096),
            ("4096B", 4096),
        ] {
            assert_eq!(with(&[("LOAM_HEAP_LIMIT", v)]).unwrap().heap_limit, Some(n), "{v}");
        }
        assert_eq!(with(&[("LOAM_HEAP_LIMIT", "0")]).unwrap().heap_limit, None);
    }

    #[test]
    fn an_unreadable_heap_limit_is_an_error_not_unlimited() {
        for v in ["abc", "-5", "", "16 parsecs", "1.5G", "99999999999999999999T"] {
            let e = with(&[("LOAM_HEAP_LIMIT", v)]).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("LOAM_HEAP_LIMIT") && msg.contains("512M"), "{msg}");
        }
    }

    #[test]
    fn other_bad_values_are_ignored() {
        let c = with(&[
            ("LOAM_GC_PERCENT", "-3"),
            ("LOAM_GCTRACE", "maybe"),
            ("LOAM_GC_THREADS", "0"),
            ("LOAM_GC_CONCURRENT_THREADS", "none"),
            ("LOAM_GC_PAUSE_BUDGET_US", "2ms"),
        ])
        .unwrap();
        let d = Config::default();
        assert_eq!(c.gc_percent, d.gc_percent);
        assert!(!c.trace);
        assert_eq!(c.gc_threads, d.gc_threads);
        assert_eq!(c.concurrent_gc_threads, None);
        assert_eq!(c.mark_pause_budget, d.mark_pause_budget);
    }

    #[test]
    fn a_quarter_of_the_gc_threads_trace_concurrently() {
        let threads = |gc, conc| Config {
            gc_threads: gc,
            concurrent_gc_threads: conc,
            ..Config::default()
        }
        .concurrent_gc_threads();
        assert_eq!(threads(1, None), 1);
        assert_eq!(threads(2, None), 1);
        assert_eq!(threads(4, None), 1);
        assert_eq!(threads(8, None), 2);
        assert_eq!(threads(16, None), 4);
        // A setting is taken, but never past the GC threads there are.
        assert_eq!(threads(8, Some(8)), 8);
        assert_eq!(threads(2, Some(5)), 2);
    }

    #[test]
    fn pacing_begins_at_seven_eighths_of_a_limit_unless_pacing_is_off() {
        let cap = |limit, gc_percent| {
            Config {
                heap_limit: limit,
                gc_percent,
                ..Config::default()
            }
            .pace_cap()
        };
        assert_eq!(cap(Some(16 << 20), 100), 14 << 20);
        assert_eq!(cap(Some(8), 100), 7);
        assert_eq!(cap(None, 100), usize::MAX);
        assert_eq!(cap(Some(16 << 20), u32::MAX), usize::MAX);
    }

    #[test]
    fn gc_threads_are_capped_at_a_few_per_cpu() {
        let mut c = with(&[("LOAM_GC_THREADS", "2000")]).unwrap();
        c.cap_gc_threads();
        assert_eq!(c.gc_threads, max_gc_threads());
        assert!(c.gc_threads < 2000);
    }

    #[test]
    fn heap_and_runtime_read_flags_alike() {
        for v in ["1", "true", "ON", " yes "] {
            assert_eq!(parse_flag(v), Some(true), "{v}");
        }
        for v in ["0", "false", "Off", "no"] {
            assert_eq!(parse_flag(v), Some(false), "{v}");
        }
        assert_eq!(parse_flag("2"), None);
    }
}
