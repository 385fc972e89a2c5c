//! What the paired benches (and, through `examples/support`, the examples)
//! share: the `LOAM_BENCH_PAIRED` switch, the median of a round's figures,
//! and the process's peak memory.

/// Runs `paired(rounds)` when `LOAM_BENCH_PAIRED=<rounds>` is set
/// (interleaved rounds, the figures the README quotes), otherwise the
/// criterion benches `criterion` registers, and criterion's summary.
pub fn main(paired: impl FnOnce(usize), criterion: impl FnOnce()) {
    match env("LOAM_BENCH_PAIRED", "a round count from 1 to 10000", |v| {
        v.parse().ok().filter(|r| (1..=10_000).contains(r))
    }) {
        Some(rounds) => paired(rounds),
        None => {
            criterion();
            criterion::Criterion::default()
                .configure_from_args()
                .final_summary();
        }
    }
}

/// Environment variable `name` read by `parse`, `None` when unset. A value
/// `parse` refuses stops the bench with a message naming the variable and
/// `what` it takes: a bench that ran something other than what was asked
/// (a depth of 16 for `abc`, no thread count for `0`) misled.
#[allow(dead_code)]
pub fn env<T>(name: &str, what: &str, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
    // Lossily: a value that is not UTF-8 is refused like any bad one.
    let v = std::env::var_os(name)?.to_string_lossy().into_owned();
    match parse(v.trim()) {
        Some(t) => Some(t),
        None => {
            eprintln!("error: {name}={v:?}: expected {what}");
            std::process::exit(2)
        }
    }
}

/// Checks that environment variable `name`, a comma list, names only
/// entries of `known`; otherwise stops the bench with a message listing
/// them. (A misspelt case ran nothing and printed an empty table.)
#[allow(dead_code)]
pub fn check_names(name: &str, known: &[&str]) {
    // Lossily: a value that is not UTF-8 names nothing known, and stops.
    let Some(v) = std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()) else {
        return;
    };
    // Empty entries (a trailing comma) name nothing, as in the filters.
    let mut names = v.split(',').map(str::trim).filter(|n| !n.is_empty());
    if let Some(bad) = names.find(|n| !known.contains(n)) {
        eprintln!(
            "error: {name}={v:?}: {bad:?} is not one of {}",
            known.join(", ")
        );
        std::process::exit(2)
    }
}

/// The median of `v` (the mean of the middle two of an even count).
///
/// # Panics
/// If `v` is empty, with a message.
pub fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "the median of no figures");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 0 {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    } else {
        v[n / 2]
    }
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

/// The order of `n` contenders in round `round`: backwards in odd rounds,
/// and rotated by one every two rounds. A rotation alone gives each
/// contender the same predecessor in every round, so whatever one run
/// leaves behind (memory given back late, a cycle still sweeping, a
/// warmed cache) lands on the same contender every time; a rotation by
/// the round with odd rounds reversed never moves an even count (two
/// contenders ran in the same order in every round). Over `2 n` rounds
/// every contender takes every place equally often.
#[allow(dead_code)]
pub fn round_order(round: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| {
        let k = if round % 2 == 1 { n - 1 - k } else { k };
        (round / 2 + k) % n
    })
}
