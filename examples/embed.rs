//! The smallest complete program that embeds loam: a managed type of its
//! own, the managed collections, a managed pool whose workers allocate,
//! and the collector's statistics.
//!
//! ```text
//! cargo run --release --example embed
//! ```

use loam::collections::{gc_format, GcDictionary, GcList, GcString};
use loam::runtime::{Gc, GcCell, ManagedPool, Mutator, Rootable, Runtime, Trace};

/// A managed type: `#[derive(Trace)]` reports its managed pointers to the
/// collector; a pointer that changes after allocation lives in a barrier
/// cell (`GcCell`).
#[derive(Trace)]
struct Customer<'gc> {
    name: GcString<'gc>,
    orders: GcList<'gc, u32>,
    /// The customer who referred this one, if any: set after allocation.
    referred_by: GcCell<'gc, Option<Gc<'gc, Customer<'gc>>>>,
}

/// The type with its brand abstracted, for roots that outlive a `mutate`
/// call.
type Directory = Rootable!['gc => GcDictionary<'gc, GcString<'gc>, Gc<'gc, Customer<'gc>>>];

/// One worker's share: customers with orders, in one short `mutate` call
/// (collections run between calls), added to the shared directory.
fn register(m: &mut Mutator, directory: &loam::runtime::GlobalRoot<Directory>, worker: usize) {
    m.mutate(|mc| {
        let directory = directory.get(mc);
        let mut previous = None;
        for i in 0..1_000_u32 {
            let name = gc_format!(mc, "customer-{worker}-{i}");
            let orders = GcList::new(mc);
            orders.extend(mc, (0..i % 7).map(|k| k * 10 + i));
            let customer = mc.alloc(Customer {
                name,
                orders,
                referred_by: GcCell::new(None),
            });
            customer.referred_by.set(mc, previous);
            previous = Some(customer);
            directory.insert(mc, name, customer);
        }
    });
}

fn main() {
    // A runtime: the managed heap and its GC threads.
    let rt = Runtime::new();
    // A pool of two workers, each attached to the runtime as a mutator.
    let pool = ManagedPool::builder(&rt)
        .num_threads(2)
        .build()
        .expect("two worker threads");

    // A global root: reachable from every thread, across `mutate` calls.
    let directory = pool
        .install(|m| m.mutate(|mc| mc.global_root::<Directory>(mc.alloc(GcDictionary::new(mc)))));
    // Every worker registers its customers, in parallel.
    pool.broadcast(|m, ctx| register(m, &directory, ctx.index()));

    // Garbage for the collector: short-lived strings on every worker.
    pool.broadcast(|m, _| {
        for round in 0..200 {
            m.mutate(|mc| {
                let _garbage = gc_format!(mc, "scratch {round}");
            });
        }
    });
    rt.collect();

    // Read back through the root, on this thread (a mutator of its own).
    let mut m = rt.attach();
    let (customers, orders, chain) = m.mutate(|mc| {
        let directory = directory.get(mc);
        let last = directory.get("customer-1-999").expect("registered");
        let mut chain = 0;
        let mut at = Some(last);
        while let Some(c) = at {
            chain += 1;
            at = c.referred_by.get();
        }
        let orders: usize = directory.values().map(|c| c.orders.len()).sum();
        (directory.len(), orders, chain)
    });
    assert_eq!(customers, 2_000);
    assert_eq!(chain, 1_000);
    let stats = rt.stats();
    println!("{customers} customers, {orders} orders; a referral chain of {chain}");
    println!(
        // What the mutators saw (`mutator_pauses`: every hold, the waits
        // for a stop included); `pauses` has only the stops, which ragged
        // cycles, the default, do not make.
        "{} GC cycles ({} minor), mutators held p50 {:?} / max {:?}, {} objects freed, {} bytes live",
        stats.cycles,
        stats.minor_cycles,
        stats.mutator_pauses.p50(),
        stats.mutator_pauses.max(),
        stats.objects_freed,
        stats.live_size
    );
}
