//! What `long_list` and `many_weak` share: their arguments, and a mutator
//! of its own whose calls each allocate about 1 MB of garbage and then do
//! the example's one change, for a few seconds, reported as the cycles and
//! the mutator's holds.

use loam::runtime::{Mutation, Runtime};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Whether the loop runs, and the longest stop of a cycle that ended in
/// it (ns): its first pause, or its end's pauses summed (`CycleEvent`
/// gives the end's sum; the runtime's own histogram has each pause, but
/// counts the setup's too: the structure's building and its first
/// collection).
static LOOPING: AtomicBool = AtomicBool::new(false);
static LONGEST_NS: AtomicU64 = AtomicU64::new(0);

/// The examples' runtime: two GC threads, the environment ignored, and a
/// hook that keeps the longest stop of the cycles that end in the loop
/// (a cycle's first pause, or its end's pauses summed).
pub fn runtime() -> Runtime {
    Runtime::builder()
        .ignore_env()
        .gc_threads(2)
        .on_cycle(|e| {
            if LOOPING.load(Ordering::Relaxed) {
                let longest = e.mark_start_pause.max(e.mark_end_pause);
                LONGEST_NS.fetch_max(longest.as_nanos() as u64, Ordering::Relaxed);
            }
        })
        .build()
}

/// The count (at least 1) and the seconds (0.1 to a million) given, or
/// their defaults; a bad argument prints what is wrong and the usage, and
/// exits with status 2.
pub fn args(what: &str, default: usize) -> (usize, f64) {
    let program = std::env::args().next().unwrap_or_default();
    let program = std::path::Path::new(&program)
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let usage = format!(
        "usage: {program} [{what} (at least 1, default {default})] [SECONDS (0.1 to 1000000, default 4)]"
    );
    if std::env::args().skip(1).any(|a| a == "-h" || a == "--help") {
        println!("{usage}");
        std::process::exit(0)
    }
    let fail = |msg: String| -> (usize, f64) {
        eprintln!("{msg}\n{usage}");
        std::process::exit(2)
    };
    let mut args = std::env::args().skip(1);
    let n = match args.next() {
        None => default,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => return fail(format!("`{s}` is not a count of at least 1")),
        },
    };
    let seconds = match args.next() {
        None => 4.0,
        Some(s) => match s.parse::<f64>() {
            Ok(v) if (0.1..=1e6).contains(&v) => v,
            _ => {
                return fail(format!(
                    "`{s}` is not a number of seconds from 0.1 to 1000000"
                ))
            }
        },
    };
    if let Some(extra) = args.next() {
        return fail(format!("unexpected argument `{extra}`"));
    }
    (n, seconds)
}

/// Calls of a mutator of its own (its holds are the loop's) on `rt`
/// (made by [`runtime`]), each 20,000
/// small objects of garbage and then `change(mc, call)`, for `seconds`;
/// prints what the collector and the mutator did meanwhile.
pub fn churn(
    rt: &Runtime,
    what: &str,
    seconds: f64,
    mut change: impl for<'gc> FnMut(&Mutation<'gc>, u64),
) {
    let mut m = rt.attach();
    let before = rt.stats();
    LOOPING.store(true, Ordering::Relaxed);
    let start = Instant::now();
    let mut calls = 0_u64;
    while start.elapsed() < Duration::from_secs_f64(seconds) {
        m.mutate(|mc| {
            for k in 0..20_000_u64 {
                mc.alloc([k; 4]);
            }
            change(mc, calls);
        });
        calls += 1;
    }
    LOOPING.store(false, Ordering::Relaxed);
    let s = rt.stats();
    let held = m.pauses();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{what}, {seconds} s: {calls} calls; {} cycles ({} minor), mark {:.1} ms, sweep {:.1} ms in all; \
         the collector's longest stop {:.3} ms (a first pause, or an end's pauses summed)",
        s.cycles - before.cycles,
        s.minor_cycles - before.minor_cycles,
        ms(s.mark_time - before.mark_time),
        ms(s.sweep_time - before.sweep_time),
        ms(Duration::from_nanos(LONGEST_NS.load(Ordering::Relaxed))),
    );
    println!(
        "the mutator held {} times, max {:.3} ms, p99 {:.3} ms, {:.1} ms in all: {:.1} at safepoints, \
         {:.1} pacing, {:.1} for memory, {:.1} assisting, {:.1} for destructors",
        held.count(),
        ms(held.max()),
        ms(held.quantile(0.99)),
        ms(held.total()),
        ms(s.held_at_safepoint - before.held_at_safepoint),
        ms(s.held_by_pacing - before.held_by_pacing),
        ms(s.held_for_memory - before.held_for_memory),
        ms(s.held_assisting - before.held_assisting),
        ms(s.held_for_drops - before.held_for_drops),
    );
}
