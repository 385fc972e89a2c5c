//! Many weak references, old: a rooted vector of `GcWeak`s to rooted
//! targets, then a mutator whose calls each allocate about 1 MB of garbage
//! and upgrade one of the references, for a few seconds. Prints the calls
//! made, the cycles, their mark and sweep time, and the mutator's holds
//! (an upgrade during a mark waits for the weak gate while a ragged end
//! processes the weak cells under it).
//!
//! `cargo run --release --example many_weak -- [REFERENCES] [SECONDS]`
//! (defaults 1,000,000 and 4).

use loam::runtime::{Gc, GcLock, GcWeak, GlobalRoot, Rootable, Runtime, Trace};
use std::time::{Duration, Instant};

#[derive(Trace)]
struct Weaks<'gc> {
    cells: GcLock<'gc, Vec<GcWeak<'gc, u64>>>,
    targets: GcLock<'gc, Vec<Gc<'gc, u64>>>,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: many_weak [REFERENCES (at least 1)] [SECONDS]";
    let n: usize = args.next().map_or(1_000_000, |s| s.parse().expect(usage));
    let seconds: f64 = args.next().map_or(4.0, |s| s.parse().expect(usage));
    assert!(n > 0 && seconds > 0.0, "{usage}");
    let rt = Runtime::builder().ignore_env().gc_threads(2).build();
    let mut m = rt.attach();
    let weaks: GlobalRoot<Rootable!['gc => Weaks<'gc>]> = m.mutate(|mc| {
        let targets: Vec<_> = (0..n as u64).map(|i| mc.alloc(i)).collect();
        let cells = targets.iter().map(|&t| GcWeak::new(mc, t)).collect();
        mc.global_root(mc.alloc(Weaks {
            cells: GcLock::new(cells),
            targets: GcLock::new(targets),
        }))
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
            let weak = weaks.get(mc).cells.read()[calls as usize % n];
            assert!(
                weak.upgrade().is_some(),
                "a weak reference to a rooted target was cleared"
            );
        });
        calls += 1;
    }
    let s = rt.stats();
    let held = m.pauses();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{n} weak references, {seconds} s: {calls} calls; {} cycles ({} minor), mark {:.1} ms, sweep {:.1} ms in all",
        s.cycles - before.cycles,
        s.minor_cycles - before.minor_cycles,
        ms(s.mark_time - before.mark_time),
        ms(s.sweep_time - before.sweep_time),
    );
    println!(
        "the mutator held {} times, max {:.3} ms, p99 {:.3} ms, {:.1} ms in all",
        held.count(),
        ms(held.max()),
        ms(held.quantile(0.99)),
        ms(held.total()),
    );
}
