//! What the paired benches (and, through `examples/support`, the examples)
//! share: the `LOAM_BENCH_PAIRED` switch, the median of a round's figures,
//! and the process's peak memory.

/// Runs `paired(rounds)` when `LOAM_BENCH_PAIRED=<rounds>` is set
/// (interleaved rounds, the figures the README quotes), otherwise the
/// criterion benches `criterion` registers, and criterion's summary.
pub fn main(paired: impl FnOnce(usize), criterion: impl FnOnce()) {
    match std::env::var("LOAM_BENCH_PAIRED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(rounds) => paired(rounds),
        None => {
            criterion();
            criterion::Criterion::default()
                .configure_from_args()
                .final_summary();
        }
    }
}

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// This process's peak resident set in KiB: `VmHWM`, its own high-water
/// mark (`getrusage`'s `ru_maxrss` carries a forking parent's peak across
/// `exec`, so a child run would report its parent's). `None` where
/// `/proc` does not say. (Not every bench reads it.)
#[allow(dead_code)]
pub fn peak_rss_kb() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
}
