//! A rooted `GcList` of many `Gc`s, old, and a mutator whose calls each
//! allocate about 1 MB of garbage and set one element of the list, for a
//! few seconds: what the collector's pauses and the mutator's holds are
//! when the mark has a long collection to trace (every minor cycle traces
//! it again: the change recorded the list). Prints the cycles, the
//! collector's longest pause and the mutator's holds by cause.
//!
//! `cargo run --release --example long_list -- [ELEMENTS] [SECONDS]`
//! (defaults 1,000,000 and 4).

use loam::collections::GcList;
use loam::runtime::{Gc, GlobalRoot, Rootable, Runtime};
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: long_list [ELEMENTS (at least 1)] [SECONDS]";
    let n: usize = args.next().map_or(1_000_000, |s| s.parse().expect(usage));
    let seconds: f64 = args.next().map_or(4.0, |s| s.parse().expect(usage));
    assert!(n > 0 && seconds > 0.0, "{usage}");
    let rt = Runtime::builder().ignore_env().gc_threads(2).build();
    let mut m = rt.attach();
    let list: GlobalRoot<Rootable!['gc => GcList<'gc, Gc<'gc, u64>>]> = m.mutate(|mc| {
        let l = GcList::new(mc);
        for i in 0..n as u64 {
            l.push(mc, mc.alloc(i));
        }
        mc.global_root(mc.alloc(l))
    });
    m.collect();
    drop(m);
    // A mutator of its own for the loop: its holds are the loop's.
    let mut m = rt.attach();
    let before = rt.stats();
    let start = Instant::now();
    let mut calls = 0_u64;
    while start.elapsed() < Duration::from_secs_f64(seconds) {
        m.mutate(|mc| {
            for k in 0..20_000_u64 {
                mc.alloc([k; 4]);
            }
            let l = *list.get(mc);
            l.set(mc, calls as usize % n, mc.alloc(calls));
        });
        calls += 1;
    }
    let s = rt.stats();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{n} elements, {seconds} s: {calls} calls; {} cycles ({} minor); the collector's longest pause {:.3} ms",
        s.cycles - before.cycles,
        s.minor_cycles - before.minor_cycles,
        ms(s.pauses.max()),
    );
    let held = m.pauses();
    println!(
        "the mutator held {} times, max {:.3} ms, p99 {:.3} ms, {:.1} ms in all: {:.1} at safepoints, {:.1} pacing, {:.1} for memory, {:.1} assisting",
        held.count(),
        ms(held.max()),
        ms(held.quantile(0.99)),
        ms(held.total()),
        ms(s.held_at_safepoint - before.held_at_safepoint),
        ms(s.held_by_pacing - before.held_by_pacing),
        ms(s.held_for_memory - before.held_for_memory),
        ms(s.held_assisting - before.held_assisting),
    );
}
