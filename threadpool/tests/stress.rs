//! Seeded random mixes of nested join, scope, spawn, broadcast and
//! cross-pool install, checked by conservation: every unit of work is counted
//! exactly once, whatever the interleaving.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use loam_threadpool::{ThreadPool, ThreadPoolBuilder};

/// xorshift64: deterministic per-branch randomness.
fn next(seed: u64) -> u64 {
    let mut x = seed;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// Does `budget` units of work through a random tree of pool operations and
/// adds them to `total`.
fn work(seed: u64, budget: u64, total: &Arc<AtomicU64>, other: &ThreadPool) {
    if budget <= 4 {
        total.fetch_add(budget, Ordering::Relaxed);
        return;
    }
    let seed = next(seed);
    let left = budget / 2;
    let right = budget - left;
    match seed % 5 {
        0 | 1 => {
            loam_threadpool::join(
                || work(seed ^ 1, left, total, other),
                || work(seed ^ 2, right, total, other),
            );
        }
        2 => loam_threadpool::scope(|s| {
            s.spawn(|_| work(seed ^ 3, left, total, other));
            s.spawn(|s| {
                s.spawn(|_| work(seed ^ 4, right, total, other));
            });
        }),
        3 => {
            // Every worker of the current pool does 1 unit; the rest recurses.
            let n = loam_threadpool::current_num_threads() as u64;
            if budget > n {
                loam_threadpool::broadcast(|_| total.fetch_add(1, Ordering::Relaxed));
                work(seed ^ 5, budget - n, total, other);
            } else {
                total.fetch_add(budget, Ordering::Relaxed);
            }
        }
        _ => {
            // Hop to the other pool and back for one half.
            loam_threadpool::join(
                || other.install(|| work(seed ^ 6, left, total, other)),
                || work(seed ^ 7, right, total, other),
            );
        }
    }
}

#[test]
fn random_nested_operations_conserve_work() {
    nested_operations_conserve_work(None);
}

/// The same with workers that park as soon as they find no work
/// (`idle_spins(0)`, as loam's GC threads do): every gap in the work is a
/// park and a wake, so a lost wake-up hangs the test.
#[test]
fn random_nested_operations_conserve_work_with_workers_that_park_at_once() {
    nested_operations_conserve_work(Some(0));
}

fn nested_operations_conserve_work(idle_spins: Option<u32>) {
    let build = |n| {
        let b = ThreadPoolBuilder::new().num_threads(n);
        match idle_spins {
            Some(rounds) => b.idle_spins(rounds),
            None => b,
        }
        .build()
        .unwrap()
    };
    let main = build(3);
    let side = build(2);
    for seed in 1..=40u64 {
        let total = Arc::new(AtomicU64::new(0));
        let budget = 2_000 + seed * 37;
        main.install(|| work(seed, budget, &total, &side));
        assert_eq!(total.load(Ordering::Relaxed), budget, "seed {seed}");
    }
}

#[test]
fn many_outside_threads_inject_at_once() {
    let pool = Arc::new(ThreadPoolBuilder::new().num_threads(2).build().unwrap());
    let total = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (pool, total) = (pool.clone(), total.clone());
            std::thread::spawn(move || {
                for i in 0..200u64 {
                    let (a, b) = pool.join(|| i, || t);
                    total.fetch_add(a + b, Ordering::Relaxed);
                    let spawned = total.clone();
                    pool.spawn(move || {
                        spawned.fetch_add(1, Ordering::Relaxed);
                    });
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    // Dropping the last handle finishes the spawned tasks.
    drop(Arc::into_inner(pool).expect("the other handles are gone"));
    let expected: u64 = (0..4u64)
        .map(|t| (0..200u64).map(|i| i + t + 1).sum::<u64>())
        .sum();
    assert_eq!(total.load(Ordering::Relaxed), expected);
}

#[test]
fn long_spawn_loops_run_every_task_once() {
    // Deques this long are robbed in batches; each task must still run once.
    let pool = ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    let hits: Vec<AtomicU64> = (0..20_000).map(|_| AtomicU64::new(0)).collect();
    pool.scope(|s| {
        for hit in &hits {
            s.spawn(move |_| {
                let (a, b) = loam_threadpool::join(|| 1, || 0);
                hit.fetch_add(a + b, Ordering::Relaxed);
            });
        }
    });
    assert!(hits.iter().all(|hit| hit.load(Ordering::Relaxed) == 1));
}
