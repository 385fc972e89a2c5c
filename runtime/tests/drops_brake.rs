//! The brake on destructors (`finalize.rs`, "The brake"): dead objects
//! whose destructors have not run hold their blocks, so a program that
//! makes such garbage faster than the finalizer runs it must wait for it,
//! at a call's entry and at the heap limit, and must never hang on a
//! destructor that cannot finish.

mod support;

use loam_runtime::{Runtime, RuntimeBuilder, Trace};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// About 96 bytes with its header, and a destructor that does `work`
/// rounds of arithmetic (the finalizer's time, far more than the
/// allocation's), counting its runs.
#[derive(Trace)]
struct Slow {
    _pad: [u64; 8],
    #[trace(skip)]
    _drop: SlowDrop,
}

struct SlowDrop {
    work: u32,
    drops: Arc<AtomicUsize>,
}

impl Drop for SlowDrop {
    fn drop(&mut self) {
        let mut x = 1_u64;
        for i in 0..self.work {
            x = std::hint::black_box(
                x.wrapping_mul(6364136223846793005)
                    .wrapping_add(u64::from(i)),
            );
        }
        std::hint::black_box(x);
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

/// Rounds of `SlowDrop` work: about 3 µs of the 2-core VM's time (the
/// test needs only that it is far more than an allocation's).
const DROP_WORK: u32 = 2_000;

fn slow(work: u32, drops: &Arc<AtomicUsize>) -> Slow {
    Slow {
        _pad: [7; 8],
        _drop: SlowDrop {
            work,
            drops: drops.clone(),
        },
    }
}

/// Runs 300 calls of 1,000 `Slow` objects (58 MB in all) on each of two mutators, every object garbage at its call's
/// end; checks that no allocation was refused, that the brake held the
/// mutators, and that every destructor ran after. Returns the largest heap
/// plus backlog seen at a call's start (inside it, every eighth call).
fn churn(rt: &Runtime) -> usize {
    const THREADS: usize = 2;
    const CALLS: usize = 300;
    const PER_CALL: usize = 1_000;
    let drops = Arc::new(AtomicUsize::new(0));
    let peak = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut m = rt.attach();
                for call in 0..CALLS {
                    m.mutate(|mc| {
                        if call % 8 == 0 {
                            let st = rt.stats();
                            peak.fetch_max(st.heap_size + st.drops_pending, Ordering::Relaxed);
                        }
                        for _ in 0..PER_CALL {
                            if mc.try_alloc(slow(DROP_WORK, &drops)).is_err() && refused.fetch_add(1, Ordering::Relaxed) == 0 {
                                let st = rt.stats();
                                eprintln!(
                                    "first refusal: heap {} bytes, {} waiting for their destructors",
                                    st.heap_size, st.drops_pending
                                );
                            }
                        }
                    });
                }
            });
        }
    });
    let (peak, refused) = (peak.into_inner(), refused.into_inner());
    let held = rt.stats().held_for_drops;
    println!(
        "peak heap + backlog {:.1} MiB, held {held:?} for drops",
        peak as f64 / (1 << 20) as f64
    );
    assert_eq!(refused, 0, "live data that fits was refused");
    assert!(
        held > Duration::ZERO,
        "the brake never held a mutator: case not met"
    );
    rt.collect();
    rt.wait_for_drops();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        THREADS * CALLS * PER_CALL,
        "a destructor did not run"
    );
    assert_eq!(rt.stats().drops_pending, 0);
    peak
}

/// One GC thread (one finalizer behind it, as every runtime has), the
/// environment ignored: each test adds its heap bound.
fn runtime() -> RuntimeBuilder {
    Runtime::builder().ignore_env().gc_threads(1)
}

#[test]
fn the_heap_limit_counts_objects_waiting_for_their_destructors() {
    let _serial = support::serial();
    const LIMIT: usize = 16 << 20;
    let rt = runtime().heap_limit(LIMIT).build();
    // The destructors take the finalizer about 2 s in all: far slower
    // than the mutators make them, so without the brake the backlog alone
    // passes the limit (heap and backlog 53 - 56 MB).
    let peak = churn(&rt);
    // A page of the finalizer's (its decrement and a mutator's next charge
    // may both fall between the two reads of a sample) and a chunk per
    // mutator of slack.
    assert!(
        peak <= LIMIT + (1 << 20),
        "heap and backlog reached {peak} bytes under a {LIMIT}-byte limit"
    );
}

#[test]
fn pacing_counts_objects_waiting_for_their_destructors() {
    let _serial = support::serial();
    // No limit: the brake holds heap and backlog to where pacing begins,
    // twice the goal (with the 4 MiB minimum heap, 8 MiB while nothing is
    // live), plus what is left of a sweep's batch for the finalizer (at
    // most the heap that cycle swept) and a call's allocation per mutator.
    let rt = runtime().min_heap(4 << 20).build();
    let peak = churn(&rt);
    // 8 MiB, a batch of about as much, the brake's 1 MiB and slack:
    // without the brake, 52 - 55 MB.
    assert!(
        peak <= 24 << 20,
        "heap and backlog reached {peak} bytes with an 8 MiB pace point"
    );
}

#[test]
fn an_allocation_at_the_limit_waits_inside_its_call_for_the_destructors() {
    let _serial = support::serial();
    // A backlog of about 9 MiB (100,000 objects whose destructors take
    // about 6 µs each), then one call that keeps 12 MiB live under a 16
    // MiB limit: it fits, but not beside the backlog. At the call's entry the
    // backlog is within the room below the pace point (14 MiB), so the
    // call begins; its allocations meet the limit with the backlog in it,
    // and wait inside the call for the finalizer to cut it.
    const LIMIT: usize = 16 << 20;
    let rt = runtime().heap_limit(LIMIT).build();
    let drops = Arc::new(AtomicUsize::new(0));
    let mut m = rt.attach();
    for _ in 0..10 {
        m.mutate(|mc| {
            for _ in 0..10_000 {
                mc.alloc(slow(2 * DROP_WORK, &drops));
            }
        });
    }
    // Sweeps them all into the backlog (and waits for no destructor).
    m.collect();
    let backlog = rt.stats().drops_pending;
    let before = rt.stats().held_for_drops;
    let refused = m.mutate(|mc| {
        // Kept (live) to the call's end: 12,288 arrays of 1 KiB.
        let mut kept = Vec::with_capacity(12 << 10);
        let mut refused = 0;
        for _ in 0..12 << 10 {
            match mc.try_alloc([0_u64; 128]) {
                Ok(a) => kept.push(a),
                Err(_) => refused += 1,
            }
        }
        refused
    });
    let s = rt.stats();
    println!(
        "backlog {:.1} MiB; 12 MiB kept in one call: {refused} refused, held {:?} for drops",
        backlog as f64 / (1 << 20) as f64,
        s.held_for_drops - before
    );
    assert!(
        backlog > 6 << 20,
        "the backlog was {backlog} bytes: case not met"
    );
    assert_eq!(refused, 0, "live data that fits was refused");
    assert!(
        s.held_for_drops > before,
        "the call never waited for the finalizer: case not met"
    );
    rt.collect();
    rt.wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 10 * 10_000);
}

#[test]
fn a_destructor_blocked_on_the_braked_thread_does_not_hang_it() {
    let _serial = support::serial();
    // The mutator holds a lock across its calls that every destructor
    // takes: a brake that waited for the backlog to drain would wait for
    // ever (the watchdog, `support::within`, would fail the test). It
    // gives up once the finalizer has finished no object for its
    // patience, and waits no more until the finalizer moves.
    let rt = runtime().min_heap(4 << 20).build();
    let drops = Arc::new(AtomicUsize::new(0));
    struct GateDrop(Arc<Mutex<()>>, Arc<AtomicUsize>);
    impl Drop for GateDrop {
        fn drop(&mut self) {
            drop(self.0.lock().unwrap());
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }
    #[derive(Trace)]
    struct Gated {
        _pad: [u64; 8],
        #[trace(skip)]
        _gate: GateDrop,
    }
    let (rt2, drops2) = (rt.clone(), drops.clone());
    let (first, then) = support::within("calls beside a blocked finalizer", move || {
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let mut m = rt2.attach();
        let mut calls = |n: usize| {
            for _ in 0..n {
                m.mutate(|mc| {
                    for _ in 0..1_000 {
                        mc.alloc(Gated {
                            _pad: [1; 8],
                            _gate: GateDrop(gate.clone(), drops2.clone()),
                        });
                    }
                });
            }
        };
        // 38 MB of garbage with drop glue, a cycle every few MB: the
        // first destructor blocks, and the backlog passes the pace point.
        calls(400);
        let first = rt2.stats();
        calls(100);
        let then = rt2.stats();
        drop(held);
        (first, then)
    });
    println!(
        "{} bytes waiting after 400 calls beside a blocked finalizer; held {:?} for drops",
        first.drops_pending, first.held_for_drops
    );
    assert!(
        first.drops_pending > 8 << 20,
        "the backlog never passed the pace point: case not met"
    );
    // It waited a patience (250 ms) before it gave up...
    assert!(
        first.held_for_drops >= Duration::from_millis(250),
        "held {:?} for drops",
        first.held_for_drops
    );
    // ...and, the finalizer still blocked, no call waited again.
    assert_eq!(then.held_for_drops, first.held_for_drops);
    rt.collect();
    rt.wait_for_drops();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        500 * 1_000,
        "a destructor did not run"
    );
    assert_eq!(rt.stats().drops_pending, 0);
}
