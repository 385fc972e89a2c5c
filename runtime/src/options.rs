//! The runtime's settings: builder values, then `LOAM_*` environment
//! overrides, each bad value reported on stderr and ignored.

use std::time::Duration;

/// Settings a [`RuntimeBuilder`](crate::RuntimeBuilder) collects.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) gc_threads: usize,
    pub(crate) gc_percent: u32,
    pub(crate) heap_limit: Option<usize>,
    pub(crate) min_heap: usize,
    pub(crate) trace: bool,
    pub(crate) verify: bool,
    pub(crate) generational: bool,
    /// Mark with the mutators running once the first pause's budget is
    /// spent (see `collector.rs`); off, the whole mark is one pause.
    pub(crate) concurrent: bool,
    /// How long the first pause may mark before the rest of the mark goes
    /// concurrent.
    pub(crate) mark_pause_budget: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            gc_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
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
            trace: false,
            verify: false,
            generational: true,
            concurrent: true,
            // Marks that fit in it keep the one pause they always had: a
            // concurrent mark costs a second stop (waiting for every
            // mutator to leave `mutate` again). Measured in the README's
            // binary-trees table.
            mark_pause_budget: Duration::from_millis(2),
        }
    }
}

/// Parses a byte size: a number with an optional `K`, `M`, `G` or `T`
/// suffix (powers of 1024, an optional trailing `B`, any case).
///
/// ```
/// # use loam_runtime::parse_size;
/// assert_eq!(parse_size("512"), Some(512));
/// assert_eq!(parse_size("64M"), Some(64 << 20));
/// assert_eq!(parse_size("2gb"), Some(2 << 30));
/// assert_eq!(parse_size("lots"), None);
/// ```
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim().to_ascii_uppercase();
    let s = s.strip_suffix('B').unwrap_or(&s);
    let (num, shift) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 10),
        b'M' => (&s[..s.len() - 1], 20),
        b'G' => (&s[..s.len() - 1], 30),
        b'T' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: usize = num.trim().parse().ok()?;
    n.checked_mul(1usize << shift)
}

fn flag(name: &str, value: &str) -> Option<bool> {
    match value.trim() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" | "" => Some(false),
        _ => {
            warn(name, value, "expected 1 or 0");
            None
        }
    }
}

fn warn(name: &str, value: &str, expected: &str) {
    eprintln!("loam: ignoring {name}={value:?}: {expected}");
}

impl Config {
    /// Applies the `LOAM_*` environment overrides.
    pub(crate) fn apply_env(&mut self) {
        self.apply(|k| std::env::var(k).ok());
    }

    /// Applies overrides read through `get` (the environment, or a test's map).
    pub(crate) fn apply(&mut self, get: impl Fn(&str) -> Option<String>) {
        if let Some(v) = get("LOAM_GC_PERCENT") {
            match v.trim() {
                "off" => self.gc_percent = u32::MAX,
                t => match t.parse::<u32>() {
                    Ok(p) => self.gc_percent = p,
                    Err(_) => warn(
                        "LOAM_GC_PERCENT",
                        &v,
                        "expected a percentage (e.g. 100) or off",
                    ),
                },
            }
        }
        if let Some(v) = get("LOAM_HEAP_LIMIT") {
            match parse_size(&v) {
                Some(0) => self.heap_limit = None,
                Some(n) => self.heap_limit = Some(n),
                None => warn(
                    "LOAM_HEAP_LIMIT",
                    &v,
                    "expected a size like 512M or 2G (0 for none)",
                ),
            }
        }
        if let Some(v) = get("LOAM_GC_THREADS") {
            match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => self.gc_threads = n,
                _ => warn("LOAM_GC_THREADS", &v, "expected a thread count of 1 or more"),
            }
        }
        if let Some(v) = get("LOAM_MIN_HEAP") {
            match parse_size(&v) {
                Some(n) => self.min_heap = n,
                None => warn("LOAM_MIN_HEAP", &v, "expected a size like 4M or 64M"),
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Config {
        let mut c = Config::default();
        c.apply(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        });
        c
    }

    #[test]
    fn env_overrides_apply() {
        let c = with(&[
            ("LOAM_GC_PERCENT", "50"),
            ("LOAM_HEAP_LIMIT", "64M"),
            ("LOAM_GCTRACE", "1"),
            ("LOAM_GCVERIFY", "1"),
            ("LOAM_GC_THREADS", "3"),
            ("LOAM_MIN_HEAP", "8M"),
            ("LOAM_GC_GENERATIONAL", "0"),
            ("LOAM_GC_CONCURRENT", "0"),
            ("LOAM_GC_PAUSE_BUDGET_US", "500"),
        ]);
        assert!(!c.concurrent);
        assert_eq!(c.mark_pause_budget, Duration::from_micros(500));
        assert!(!c.generational);
        assert_eq!(c.gc_threads, 3);
        assert_eq!(c.min_heap, 8 << 20);
        assert_eq!(c.gc_percent, 50);
        assert_eq!(c.heap_limit, Some(64 << 20));
        assert!(c.trace && c.verify);
        assert_eq!(with(&[("LOAM_GC_PERCENT", "off")]).gc_percent, u32::MAX);
    }

    #[test]
    fn bad_values_are_ignored() {
        let c = with(&[
            ("LOAM_GC_PERCENT", "-3"),
            ("LOAM_HEAP_LIMIT", "big"),
            ("LOAM_GCTRACE", "maybe"),
            ("LOAM_GC_THREADS", "0"),
            ("LOAM_GC_PAUSE_BUDGET_US", "2ms"),
        ]);
        let d = Config::default();
        assert_eq!(c.gc_percent, d.gc_percent);
        assert_eq!(c.heap_limit, d.heap_limit);
        assert!(!c.trace);
        assert_eq!(c.gc_threads, d.gc_threads);
        assert_eq!(c.mark_pause_budget, d.mark_pause_budget);
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1k"), Some(1024));
        assert_eq!(parse_size(" 3 MiB"), None);
        assert_eq!(parse_size("3MB"), Some(3 << 20));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999T"), None);
    }
}
