//! loam-heap against System (glibc), mimalloc and jemalloc, same run, each
//! called through `GlobalAlloc` on a static instance.
//!
//! Groups:
//! - `pairs`: allocate and free one block at once, 1,000 times (the fast
//!   paths, with the block reused at once);
//! - `churn`: allocate 10,000 blocks of seed-profile sizes (half under 16
//!   bytes, a quarter under 32, the rest under 128), then free them in a
//!   scrambled order (free lists, page turnover);
//! - `remote`: one thread allocates 10,000 small blocks, another frees them
//!   (the collector pattern: every free is remote), repeated;
//! - `larson`: Larson and Krishnan's server benchmark at two threads: each
//!   replaces random slots of a 2,000-slot array (16 – 256 bytes) and every
//!   4,000 replacements the two swap arrays, so that about 37% of the frees
//!   are of the other thread's blocks (the ring of `alloc_bench`'s larson,
//!   not mimalloc-bench's shape) (`examples/alloc_bench.rs` runs the full size,
//!   at 1 and 2 threads). snmalloc and TCMalloc (`libtcmalloc_minimal`, where
//!   it is installed) run beside the others here.
//!
//! Run: `cargo bench --bench heap` (append `-- --sample-size 10` or a group
//! name as needed). Macro workloads are in `examples/alloc_bench.rs`.

#![allow(missing_docs)] // criterion_group! generates an undocumented fn

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::{Duration, Instant};

static LOAM: loam::heap::LoamAlloc = loam::heap::LoamAlloc;
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
static SNMALLOC: snmalloc_rs::SnMalloc = snmalloc_rs::SnMalloc;
static TCMALLOC: tcmalloc::Tcmalloc = tcmalloc::Tcmalloc;

// Not every bench uses every entry point.
#[allow(dead_code)]
#[path = "support/tcmalloc.rs"]
mod tcmalloc;

fn sizes(n: usize) -> Vec<usize> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 100 {
                0..=49 => 1 + (x >> 8) as usize % 16,
                50..=74 => 17 + (x >> 8) as usize % 16,
                _ => 33 + (x >> 8) as usize % 96,
            }
        })
        .collect()
}

fn pairs<A: GlobalAlloc>(a: &A, size: usize) {
    let l = Layout::from_size_align(size, 8).unwrap();
    for _ in 0..1000 {
        // SAFETY: non-zero size; freed with its layout.
        unsafe {
            let p = a.alloc(l);
            black_box(p).write(1);
            a.dealloc(p, l);
        }
    }
}

fn churn<A: GlobalAlloc>(a: &A, sizes: &[usize], ptrs: &mut Vec<(*mut u8, Layout)>) {
    for &s in sizes {
        let l = Layout::from_size_align(s, 8).unwrap();
        // SAFETY: non-zero size.
        let p = unsafe { a.alloc(l) };
        // SAFETY: at least one byte.
        unsafe { p.write(s as u8) };
        ptrs.push((p, l));
    }
    // Free in a scrambled but fixed order: stride through the array.
    let n = ptrs.len();
    let mut i = 0;
    for _ in 0..n {
        let (p, l) = ptrs[i];
        // SAFETY: each block freed once with its layout (7919 is prime, so
        // the stride visits every index once when n is not a multiple).
        unsafe { a.dealloc(p, l) };
        i = (i + 7919) % n;
    }
    ptrs.clear();
}

/// `iters` rounds of: this thread allocates 10,000 blocks and hands them to
/// a freeing thread, which frees them all. The clock stops when the last
/// block is freed.
fn remote<A: GlobalAlloc + Sync>(a: &'static A, iters: u64) -> Duration {
    let sizes = sizes(10_000);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<(usize, usize)>>(4);
    let freer = std::thread::spawn(move || {
        for batch in rx {
            for (p, s) in batch {
                // SAFETY: allocated below with this size and alignment 8,
                // handed over and never used again by the allocating thread.
                unsafe { a.dealloc(p as *mut u8, Layout::from_size_align(s, 8).unwrap()) };
            }
        }
    });
    let start = Instant::now();
    for _ in 0..iters {
        let batch = sizes
            .iter()
            .map(|&s| {
                // SAFETY: non-zero size; written before it is handed over.
                let p = unsafe { a.alloc(Layout::from_size_align(s, 8).unwrap()) };
                // SAFETY: at least one byte.
                unsafe { p.write(1) };
                (p as usize, s)
            })
            .collect();
        tx.send(batch).unwrap();
    }
    drop(tx);
    freer.join().unwrap();
    start.elapsed()
}

const LARSON_SLOTS: usize = 2_000;
const LARSON_EPOCH: usize = 4_000;

/// One larson thread's part of `epochs` rounds: replace random slots, then
/// swap arrays with the other thread at the barrier.
fn larson_thread<A: GlobalAlloc>(
    a: &A,
    seed: u64,
    epochs: u64,
    swap: &std::sync::Mutex<Vec<(usize, usize)>>,
    barrier: &std::sync::Barrier,
) {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let alloc = |a: &A, size: usize| {
        // SAFETY: a non-zero size; written before it is used.
        let p = unsafe { a.alloc(Layout::from_size_align(size, 8).unwrap()) };
        // SAFETY: at least one byte.
        unsafe { p.write(size as u8) };
        (p as usize, size)
    };
    let mut slots: Vec<(usize, usize)> = (0..LARSON_SLOTS)
        .map(|_| alloc(a, 16 + next() as usize % 241))
        .collect();
    let free = |a: &A, (p, size): (usize, usize)| {
        // SAFETY: allocated by `alloc` with this size and alignment 8 (here
        // or on the other thread), freed once.
        unsafe { a.dealloc(p as *mut u8, Layout::from_size_align(size, 8).unwrap()) };
    };
    for _ in 0..epochs {
        for _ in 0..LARSON_EPOCH {
            let r = next();
            let i = (r % LARSON_SLOTS as u64) as usize;
            let new = alloc(a, 16 + (r >> 32) as usize % 241);
            free(a, std::mem::replace(&mut slots[i], new));
        }
        // Swap: the first to arrive leaves its array, the second takes it
        // and leaves its own, which the first takes after the barrier.
        {
            let mut s = swap.lock().unwrap();
            std::mem::swap(&mut *s, &mut slots);
        }
        barrier.wait();
        if slots.is_empty() {
            std::mem::swap(&mut *swap.lock().unwrap(), &mut slots);
        }
        barrier.wait();
    }
    for b in slots {
        free(a, b);
    }
}

/// `iters` epochs of larson on two threads; the time of the whole run.
fn larson<A: GlobalAlloc + Sync>(a: &'static A, iters: u64) -> Duration {
    let swap = std::sync::Mutex::new(Vec::new());
    let barrier = std::sync::Barrier::new(2);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..2 {
            let (swap, barrier) = (&swap, &barrier);
            s.spawn(move || larson_thread(a, 0x9E37_79B9 + t, iters, swap, barrier));
        }
    });
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pairs");
    for size in [16usize, 64] {
        g.bench_with_input(BenchmarkId::new("loam", size), &size, |b, &s| {
            b.iter(|| pairs(&LOAM, s))
        });
        g.bench_with_input(BenchmarkId::new("system", size), &size, |b, &s| {
            b.iter(|| pairs(&System, s))
        });
        g.bench_with_input(BenchmarkId::new("mimalloc", size), &size, |b, &s| {
            b.iter(|| pairs(&MIMALLOC, s))
        });
        g.bench_with_input(BenchmarkId::new("jemalloc", size), &size, |b, &s| {
            b.iter(|| pairs(&JEMALLOC, s))
        });
    }
    g.finish();

    let sz = sizes(10_000);
    let mut ptrs = Vec::with_capacity(sz.len());
    let mut g = c.benchmark_group("churn");
    g.bench_function("loam", |b| b.iter(|| churn(&LOAM, &sz, &mut ptrs)));
    g.bench_function("system", |b| b.iter(|| churn(&System, &sz, &mut ptrs)));
    g.bench_function("mimalloc", |b| b.iter(|| churn(&MIMALLOC, &sz, &mut ptrs)));
    g.bench_function("jemalloc", |b| b.iter(|| churn(&JEMALLOC, &sz, &mut ptrs)));
    g.finish();

    let mut g = c.benchmark_group("remote");
    g.bench_function("loam", |b| b.iter_custom(|n| remote(&LOAM, n)));
    g.bench_function("system", |b| b.iter_custom(|n| remote(&System, n)));
    g.bench_function("mimalloc", |b| b.iter_custom(|n| remote(&MIMALLOC, n)));
    g.bench_function("jemalloc", |b| b.iter_custom(|n| remote(&JEMALLOC, n)));
    g.finish();

    let mut g = c.benchmark_group("larson");
    g.bench_function("loam", |b| b.iter_custom(|n| larson(&LOAM, n)));
    g.bench_function("system", |b| b.iter_custom(|n| larson(&System, n)));
    g.bench_function("mimalloc", |b| b.iter_custom(|n| larson(&MIMALLOC, n)));
    g.bench_function("jemalloc", |b| b.iter_custom(|n| larson(&JEMALLOC, n)));
    g.bench_function("snmalloc", |b| b.iter_custom(|n| larson(&SNMALLOC, n)));
    if tcmalloc::Tcmalloc::available() {
        g.bench_function("tcmalloc", |b| b.iter_custom(|n| larson(&TCMALLOC, n)));
    } else {
        eprintln!("larson: tcmalloc left out (apt install libtcmalloc-minimal4)");
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = bench
}
criterion_main!(benches);
