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
//! - `larson`: Larson and Krishnan's server benchmark as mimalloc-bench
//!   runs it, at two threads: each replaces random slots of a 5,000-slot
//!   array (8 – 999 bytes) and after 500,000 replacements starts a new
//!   thread, hands it the array and exits; an iteration is one such
//!   generation of each of the two lineages;
//! - `larson_ring`: two live threads replace random slots of 2,000-slot
//!   arrays (16 – 256 bytes) and swap them every 4,000 replacements, so
//!   that about 37% of the frees are of the other thread's blocks.
//!
//! `examples/alloc_bench.rs` runs both at full size, at 1 and 2 threads.
//! snmalloc and TCMalloc (`libtcmalloc_minimal`, where it is installed)
//! run beside the others in the larson groups.
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

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A block of `size` bytes, its first byte written (as larson writes
/// each new block), as (address, size).
fn alloc_written<A: GlobalAlloc>(a: &A, size: usize) -> (usize, usize) {
    // SAFETY: a non-zero size; written before it is used.
    let p = unsafe { a.alloc(Layout::from_size_align(size, 8).unwrap()) };
    // SAFETY: at least one byte.
    unsafe { p.write(size as u8) };
    (p as usize, size)
}

fn free_sized<A: GlobalAlloc>(a: &A, (p, size): (usize, usize)) {
    // Allocated by `alloc_written` with this size and alignment 8 (here or
    // on another thread), freed once.
    // SAFETY: as just said.
    unsafe { a.dealloc(p as *mut u8, Layout::from_size_align(size, 8).unwrap()) };
}

const LARSON_SLOTS: usize = 5_000;
/// Replacements a larson thread makes before it hands its array to a
/// thread it starts, and exits (mimalloc-bench's 100 rounds of 5,000).
const LARSON_GENERATION: usize = 500_000;

/// One larson lineage: its array, its generator and the generations left.
struct Lineage {
    slots: Vec<(usize, usize)>,
    x: u64,
    left: u64,
}

/// One thread of a lineage: a generation of replacements (8 - 999 bytes),
/// then the next thread, started before this one exits.
fn larson_generation<'s, A: GlobalAlloc + Sync>(
    s: &'s std::thread::Scope<'s, '_>,
    a: &'s A,
    mut l: Lineage,
    done: &'s std::sync::Mutex<Vec<(usize, usize)>>,
) {
    for _ in 0..LARSON_GENERATION {
        let r = xorshift(&mut l.x);
        let i = (r % LARSON_SLOTS as u64) as usize;
        let new = alloc_written(a, 8 + (r >> 32) as usize % 992);
        free_sized(a, std::mem::replace(&mut l.slots[i], new));
    }
    l.left -= 1;
    if l.left == 0 {
        done.lock().unwrap().append(&mut l.slots);
    } else {
        s.spawn(move || larson_generation(s, a, l, done));
    }
}

/// Larson as mimalloc-bench runs it, at two threads: arrays filled on this
/// thread (untimed), then two lineages of `iters` generations each; the
/// time until the last thread has exited.
fn larson<A: GlobalAlloc + Sync>(a: &'static A, iters: u64) -> Duration {
    let mut x = 0x9E37_79B9_u64;
    let mut all: Vec<(usize, usize)> = (0..2 * LARSON_SLOTS)
        .map(|_| alloc_written(a, 8 + xorshift(&mut x) as usize % 992))
        .collect();
    let done = std::sync::Mutex::new(Vec::new());
    let lineages: Vec<Lineage> = (0..2)
        .map(|t| Lineage {
            slots: all.drain(..LARSON_SLOTS).collect(),
            x: 0x2545_F491 + t,
            left: iters,
        })
        .collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for l in lineages {
            let done = &done;
            s.spawn(move || larson_generation(s, a, l, done));
        }
    });
    let elapsed = start.elapsed();
    for b in done.into_inner().unwrap() {
        free_sized(a, b);
    }
    elapsed
}

const RING_SLOTS: usize = 2_000;
const RING_EPOCH: usize = 4_000;

/// One larson-ring thread's part of `epochs` rounds: replace random slots
/// (16 - 256 bytes), then swap arrays with the other thread at the barrier.
fn ring_thread<A: GlobalAlloc>(
    a: &A,
    seed: u64,
    epochs: u64,
    swap: &std::sync::Mutex<Vec<(usize, usize)>>,
    barrier: &std::sync::Barrier,
) {
    let mut x = seed | 1;
    let mut slots: Vec<(usize, usize)> = (0..RING_SLOTS)
        .map(|_| alloc_written(a, 16 + xorshift(&mut x) as usize % 241))
        .collect();
    for _ in 0..epochs {
        for _ in 0..RING_EPOCH {
            let r = xorshift(&mut x);
            let i = (r % RING_SLOTS as u64) as usize;
            let new = alloc_written(a, 16 + (r >> 32) as usize % 241);
            free_sized(a, std::mem::replace(&mut slots[i], new));
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
        free_sized(a, b);
    }
}

/// `iters` epochs of larson-ring on two threads; the time of the whole run.
fn larson_ring<A: GlobalAlloc + Sync>(a: &'static A, iters: u64) -> Duration {
    let swap = std::sync::Mutex::new(Vec::new());
    let barrier = std::sync::Barrier::new(2);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..2 {
            let (swap, barrier) = (&swap, &barrier);
            s.spawn(move || ring_thread(a, 0x9E37_79B9 + t, iters, swap, barrier));
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

    type Run = fn(u64) -> Duration;
    let groups: [(&str, [Run; 6]); 2] = [
        (
            "larson",
            [
                |n| larson(&LOAM, n),
                |n| larson(&System, n),
                |n| larson(&MIMALLOC, n),
                |n| larson(&JEMALLOC, n),
                |n| larson(&SNMALLOC, n),
                |n| larson(&TCMALLOC, n),
            ],
        ),
        (
            "larson_ring",
            [
                |n| larson_ring(&LOAM, n),
                |n| larson_ring(&System, n),
                |n| larson_ring(&MIMALLOC, n),
                |n| larson_ring(&JEMALLOC, n),
                |n| larson_ring(&SNMALLOC, n),
                |n| larson_ring(&TCMALLOC, n),
            ],
        ),
    ];
    let names = [
        "loam", "system", "mimalloc", "jemalloc", "snmalloc", "tcmalloc",
    ];
    for (group, runs) in groups {
        let mut g = c.benchmark_group(group);
        for (name, run) in names.iter().zip(runs) {
            if *name == "tcmalloc" && !tcmalloc::Tcmalloc::available() {
                eprintln!("{group}: tcmalloc left out (apt install libtcmalloc-minimal4)");
                continue;
            }
            g.bench_function(*name, |b| b.iter_custom(run));
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = bench
}
criterion_main!(benches);
