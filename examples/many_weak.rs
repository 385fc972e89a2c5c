//! Many weak references, old: a rooted vector of `GcWeak`s to rooted
//! targets, then a mutator whose calls each allocate about 1 MB of garbage
//! and upgrade one of the references, for a few seconds. Prints the
//! cycles, their mark and sweep time, and the mutator's holds (an upgrade
//! during a mark waits for the weak gate while a ragged end processes the
//! weak cells under it).
//!
//! `cargo run --release --example many_weak -- [REFERENCES] [SECONDS]`
//! (defaults 1,000,000 and 4).

#[path = "support/churn.rs"]
mod churn;

use loam::runtime::{Gc, GcLock, GcWeak, GlobalRoot, Rootable, Trace};

#[derive(Trace)]
struct Weaks<'gc> {
    cells: GcLock<'gc, Vec<GcWeak<'gc, u64>>>,
    targets: GcLock<'gc, Vec<Gc<'gc, u64>>>,
}

fn main() {
    let (n, seconds) = churn::args("REFERENCES", 1_000_000);
    let rt = churn::runtime();
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
    churn::churn(&rt, &format!("{n} weak references"), seconds, |mc, call| {
        let weak = weaks.get(mc).cells.read()[call as usize % n];
        assert!(
            weak.upgrade().is_some(),
            "a weak reference to a rooted target was cleared"
        );
    });
}
