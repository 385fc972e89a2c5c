//! The brake on destructors (`finalize.rs`, "The brake"): dead objects
//! whose destructors have not run hold their blocks, so a program that
//! makes such garbage faster than the finalizer runs it must wait for it,
//! at a call's entry and at the heap limit, and must never hang on a
//! destructor that cannot finish.

use loam_runtime::{Runtime, Trace};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// About 96 bytes with its header, and a destructor that takes `spin`
/// (the finalizer's time, far more than the allocation's), counting its
/// runs.
#[derive(Trace)]
struct Slow {
    _pad: [u64; 8],
    #[trace(skip)]
    _drop: SlowDrop,
}

struct SlowDrop {
    spin: Duration,
    drops: Arc<AtomicUsize>,
}

impl Drop for SlowDrop {
    fn drop(&mut self) {
        let start = Instant::now();
        while start.elapsed() < self.spin {
            std::hint::spin_loop();
        }
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

fn slow(spin: Duration, drops: &Arc<AtomicUsize>) -> Slow {
    Slow {
        _pad: [7; 8],
        _drop: SlowDrop {
            spin,
            drops: drops.clone(),
        },
    }
}

/// Runs `calls` calls of `per_call` objects on each of `threads` mutators,
/// every object garbage at its call's end. Returns the largest heap plus
/// backlog seen at a call's start (inside it, every eighth call), and how
/// many allocations the limit refused.
fn churn(
    rt: &Runtime,
    threads: usize,
    calls: usize,
    per_call: usize,
    spin: Duration,
    drops: &Arc<AtomicUsize>,
) -> (usize, usize) {
    let peak = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut m = rt.attach();
                for call in 0..calls {
                    m.mutate(|mc| {
                        if call % 8 == 0 {
                            let st = rt.stats();
                            peak.fetch_max(st.heap_size + st.drops_pending, Ordering::Relaxed);
                        }
                        for _ in 0..per_call {
                            if mc.try_alloc(slow(spin, drops)).is_err() && refused.fetch_add(1, Ordering::Relaxed) == 0 {
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
    (peak.into_inner(), refused.into_inner())
}

#[test]
fn the_heap_limit_counts_objects_waiting_for_their_destructors() {
    const LIMIT: usize = 16 << 20;
    let rt = Runtime::builder()
        .ignore_env()
        .gc_threads(1)
        .heap_limit(LIMIT)
        .build();
    let drops = Arc::new(AtomicUsize::new(0));
    // 2 x 300 calls of 1,000 objects, 58 MB in all, whose destructors
    // take the finalizer 2 µs each, 1.2 s: far slower than the mutators
    // make them, so without the brake the backlog alone passes the limit
    // (heap and backlog 53 - 56 MB).
    let (peak, refused) = churn(&rt, 2, 300, 1_000, Duration::from_micros(2), &drops);
    let s = rt.stats();
    println!(
        "peak heap + backlog {:.1} MiB under a {} MiB limit; held {:?} for drops; {} refused",
        peak as f64 / (1 << 20) as f64,
        LIMIT >> 20,
        s.held_for_drops,
        refused
    );
    assert_eq!(refused, 0, "live data that fits was refused");
    // A page of the finalizer's (its decrement and a mutator's next charge
    // may both fall between the two reads of a sample) and a chunk per
    // mutator of slack.
    assert!(
        peak <= LIMIT + (1 << 20),
        "heap and backlog reached {peak} bytes under a {LIMIT}-byte limit"
    );
    assert!(
        s.held_for_drops > Duration::ZERO,
        "the brake never held a mutator: case not met"
    );
    // Every object is garbage at its call's end.
    rt.collect();
    rt.wait_for_drops();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        2 * 300 * 1_000,
        "a destructor did not run"
    );
    assert_eq!(rt.stats().drops_pending, 0);
}

#[test]
fn pacing_counts_objects_waiting_for_their_destructors() {
    // No limit: the brake holds heap and backlog to where pacing begins,
    // twice the goal (with the 4 MiB minimum heap, 8 MiB while nothing is
    // live), plus what is left of a sweep's batch for the finalizer (at
    // most the heap that cycle swept) and a call's allocation per mutator.
    let rt = Runtime::builder()
        .ignore_env()
        .gc_threads(1)
        .min_heap(4 << 20)
        .build();
    let drops = Arc::new(AtomicUsize::new(0));
    let (peak, refused) = churn(&rt, 2, 300, 1_000, Duration::from_micros(2), &drops);
    let s = rt.stats();
    println!(
        "peak heap + backlog {:.1} MiB; held {:?} for drops",
        peak as f64 / (1 << 20) as f64,
        s.held_for_drops
    );
    assert_eq!(refused, 0);
    assert!(
        s.held_for_drops > Duration::ZERO,
        "the brake never held a mutator: case not met"
    );
    // 8 MiB, a batch of about as much, the brake's 1 MiB and slack:
    // without the brake, 52 - 55 MB.
    assert!(
        peak <= 24 << 20,
        "heap and backlog reached {peak} bytes with an 8 MiB pace point"
    );
    rt.collect();
    rt.wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 2 * 300 * 1_000);
}

#[test]
fn an_allocation_at_the_limit_waits_inside_its_call_for_the_destructors() {
    // A backlog of about 9 MiB (objects whose destructors take 4 µs, 0.4 s
    // in all), then one call that keeps 12 MiB live under a 16 MiB limit:
    // it fits, but not beside the backlog. At the call's entry the
    // backlog is within the room below the pace point (14 MiB), so the
    // call begins; its allocations meet the limit with the backlog in it,
    // and wait inside the call for the finalizer to cut it.
    const LIMIT: usize = 16 << 20;
    let rt = Runtime::builder()
        .ignore_env()
        .gc_threads(1)
        .heap_limit(LIMIT)
        .build();
    let drops = Arc::new(AtomicUsize::new(0));
    let mut m = rt.attach();
    for _ in 0..10 {
        m.mutate(|mc| {
            for _ in 0..10_000 {
                mc.alloc(slow(Duration::from_micros(4), &drops));
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
    // The mutator holds a lock across its calls that every destructor
    // takes: a brake that waited for the backlog to drain would wait for
    // ever. It gives up once the finalizer has finished no object for its
    // patience (250 ms), and waits no more until the finalizer moves.
    let rt = Runtime::builder()
        .ignore_env()
        .gc_threads(1)
        .min_heap(4 << 20)
        .build();
    let gate = Arc::new(Mutex::new(()));
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
    let held = gate.lock().unwrap();
    let start = Instant::now();
    let mut m = rt.attach();
    // 38 MB of garbage with drop glue, a cycle every few MB: the first
    // destructor blocks, and the backlog passes the pace point.
    for _ in 0..400 {
        m.mutate(|mc| {
            for _ in 0..1_000 {
                mc.alloc(Gated {
                    _pad: [1; 8],
                    _gate: GateDrop(gate.clone(), drops.clone()),
                });
            }
        });
    }
    let took = start.elapsed();
    let s = rt.stats();
    println!(
        "400 calls in {took:?} with the finalizer blocked; {} bytes waiting; held {:?} for drops",
        s.drops_pending, s.held_for_drops
    );
    assert!(
        s.drops_pending > 8 << 20,
        "the backlog never passed the pace point: case not met"
    );
    // One patience, then no more waits: a patience a call would be 100 s.
    assert!(
        s.held_for_drops >= Duration::from_millis(240) && s.held_for_drops < Duration::from_secs(5),
        "held {:?} for drops",
        s.held_for_drops
    );
    assert!(took < Duration::from_secs(20), "the calls took {took:?}");
    assert_eq!(drops.load(Ordering::Relaxed), 0);
    drop(held);
    drop(m);
    rt.collect();
    rt.wait_for_drops();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        400 * 1_000,
        "a destructor did not run"
    );
    assert_eq!(rt.stats().drops_pending, 0);
}
