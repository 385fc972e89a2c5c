//! A rooted `GcList` of many `Gc`s, old, and a mutator whose calls each
//! allocate about 1 MB of garbage and set one element of the list, for a
//! few seconds: what the collector's pauses and the mutator's holds are
//! when the mark has a long collection to trace (every minor cycle traces
//! again the card the change touched, `GcCards`, and the list's own
//! fields). Prints the cycles, the
//! collector's longest pause and the mutator's holds by cause.
//!
//! `cargo run --release --example long_list -- [ELEMENTS] [SECONDS]`
//! (defaults 1,000,000 and 4).

#[path = "support/churn.rs"]
mod churn;

use loam::collections::GcList;
use loam::runtime::{Gc, GlobalRoot, Rootable};

fn main() {
    let (n, seconds) = churn::args("ELEMENTS", 1_000_000);
    let rt = churn::runtime();
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
    churn::churn(&rt, &format!("{n} elements"), seconds, |mc, call| {
        list.get(mc).set(mc, call as usize % n, mc.alloc(call));
    });
}
