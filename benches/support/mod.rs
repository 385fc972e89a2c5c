//! What the paired benches share: the `LOAM_BENCH_PAIRED` switch and the
//! median of a round's figures.

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
