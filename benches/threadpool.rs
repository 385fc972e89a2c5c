//! loam-threadpool against rayon, same machine, same run, same thread count.
//!
//! Each group pairs `loam` with `rayon` on one workload:
//! - `spawn_scope`: 1,000,000 empty tasks spawned in a scope (spawn throughput
//!   inside the pool: local push, steal, completion count);
//! - `spawn_static`: 1,000,000 near-empty `'static` tasks spawned from outside
//!   the pool (the injector path), waited on with a countdown;
//! - `join_fib`: fib(32) by recursive `join` with a sequential cutoff at 20
//!   (and at 10, where the cost of `join` itself dominates);
//! - `tree_sum`: parallel sum over a balanced 10,000,000-node boxed tree,
//!   built once outside the timed loop, `join` down to depth 12;
//! - `burst`: what a managed pool's tests do all the time: a fresh pool,
//!   an idle gap long enough for its workers to park (`BURST_IDLE`), then
//!   one short burst, fib(32) with the cutoff at 20 from `install` (about
//!   2.3 ms on two cores here); only the burst is timed. Paired mode
//!   prints every round's ratio, as a slow start shows in single rounds.
//!
//! Run: `cargo bench --bench threadpool` (append `-- --sample-size 10`, or a
//! group name, as needed). Set `LOAM_BENCH_THREADS` to change the thread
//! count (default 2), and `LOAM_BENCH_PAIRED=<rounds>` for the paired mode
//! (see `paired`), which suits a noisy shared machine better;
//! `LOAM_BENCH_CASES=join,tree` keeps the paired workloads whose names start
//! so (`burst` for the burst).

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

#[path = "support/mod.rs"]
mod support;

use support::median;

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use criterion::{criterion_group, BenchmarkId, Criterion};

const SPAWN_TASKS: usize = 1_000_000;
const FIB_N: u64 = 32;
/// Sequential cutoffs: 20 is the headline (coarse tasks); 10 makes `join`'s
/// own overhead dominate (about 150,000 joins per run).
const FIB_CUTOFFS: [u64; 2] = [20, 10];
const TREE_NODES: usize = 10_000_000;
const TREE_PAR_DEPTH: u32 = 12;
/// 0 + 1 + ... + (TREE_NODES - 1): the tree's values.
const TREE_SUM: u64 = (TREE_NODES as u64) * (TREE_NODES as u64 - 1) / 2;

/// `LOAM_BENCH_THREADS`: the pools' thread count, 1 to 256 (one count:
/// the gc bench's list form is refused here, not read as 2).
fn threads() -> usize {
    support::env(
        "LOAM_BENCH_THREADS",
        "one thread count from 1 to 256",
        |v| v.parse().ok().filter(|n| (1..=256).contains(n)),
    )
    .unwrap_or(2)
}

fn loam_pool() -> loam_threadpool::ThreadPool {
    loam_threadpool::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .expect("loam pool")
}

fn rayon_pool() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .expect("rayon pool")
}

/// A one-shot countdown the spawning thread blocks on.
struct Countdown {
    remaining: AtomicUsize,
    done: Mutex<bool>,
    condvar: Condvar,
}

impl Countdown {
    fn new(count: usize) -> Arc<Self> {
        Arc::new(Countdown {
            remaining: AtomicUsize::new(count),
            done: Mutex::new(false),
            condvar: Condvar::new(),
        })
    }

    fn count_down(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.done.lock().unwrap() = true;
            self.condvar.notify_all();
        }
    }

    fn wait(&self) {
        let mut done = self.done.lock().unwrap();
        while !*done {
            done = self.condvar.wait(done).unwrap();
        }
    }
}

fn spawn_scope(c: &mut Criterion) {
    let mut group = c.benchmark_group("spawn_scope");
    let n = SPAWN_TASKS;
    {
        let pool = loam_pool();
        group.bench_function(BenchmarkId::new("loam", n), |b| {
            b.iter(|| {
                pool.scope(|s| {
                    for _ in 0..n {
                        s.spawn(|_| {});
                    }
                })
            })
        });
    }
    {
        let pool = rayon_pool();
        group.bench_function(BenchmarkId::new("rayon", n), |b| {
            b.iter(|| {
                pool.scope(|s| {
                    for _ in 0..n {
                        s.spawn(|_| {});
                    }
                })
            })
        });
    }
    group.finish();
}

fn spawn_static(c: &mut Criterion) {
    let mut group = c.benchmark_group("spawn_static");
    let n = SPAWN_TASKS;
    {
        let pool = loam_pool();
        group.bench_function(BenchmarkId::new("loam", n), |b| {
            b.iter(|| {
                let countdown = Countdown::new(n);
                for _ in 0..n {
                    let countdown = countdown.clone();
                    pool.spawn(move || countdown.count_down());
                }
                countdown.wait();
            })
        });
    }
    {
        let pool = rayon_pool();
        group.bench_function(BenchmarkId::new("rayon", n), |b| {
            b.iter(|| {
                let countdown = Countdown::new(n);
                for _ in 0..n {
                    let countdown = countdown.clone();
                    pool.spawn(move || countdown.count_down());
                }
                countdown.wait();
            })
        });
    }
    group.finish();
}

fn fib_seq(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

fn fib_loam(n: u64, cutoff: u64) -> u64 {
    if n <= cutoff {
        return fib_seq(n);
    }
    let (a, b) = loam_threadpool::join(|| fib_loam(n - 1, cutoff), || fib_loam(n - 2, cutoff));
    a + b
}

fn fib_rayon(n: u64, cutoff: u64) -> u64 {
    if n <= cutoff {
        return fib_seq(n);
    }
    let (a, b) = rayon::join(|| fib_rayon(n - 1, cutoff), || fib_rayon(n - 2, cutoff));
    a + b
}

/// The idle gap before a burst: well past the workers' spinning rounds.
const BURST_IDLE: Duration = Duration::from_millis(30);

/// A fresh pool, an idle gap, then one fib burst: returns the burst's time.
fn burst_loam() -> Duration {
    let (pool, expected) = (loam_pool(), fib_seq(FIB_N));
    std::thread::sleep(BURST_IDLE);
    let start = std::time::Instant::now();
    let result = pool.install(|| fib_loam(FIB_N, 20));
    let elapsed = start.elapsed();
    assert_eq!(result, expected);
    elapsed
}

/// [`burst_loam`] on rayon.
fn burst_rayon() -> Duration {
    let (pool, expected) = (rayon_pool(), fib_seq(FIB_N));
    std::thread::sleep(BURST_IDLE);
    let start = std::time::Instant::now();
    let result = pool.install(|| fib_rayon(FIB_N, 20));
    let elapsed = start.elapsed();
    assert_eq!(result, expected);
    elapsed
}

fn burst(c: &mut Criterion) {
    let mut group = c.benchmark_group("burst");
    let timed = |run: fn() -> Duration| {
        move |b: &mut criterion::Bencher| b.iter_custom(|iters| (0..iters).map(|_| run()).sum())
    };
    group.bench_function(
        BenchmarkId::new("loam", "fib32_cutoff20"),
        timed(burst_loam),
    );
    group.bench_function(
        BenchmarkId::new("rayon", "fib32_cutoff20"),
        timed(burst_rayon),
    );
    group.finish();
}

fn join_fib(c: &mut Criterion) {
    let mut group = c.benchmark_group("join_fib");
    let expected = fib_seq(FIB_N);
    // One thread, no pool: shows how much parallelism the machine gave.
    group.bench_function(BenchmarkId::new("sequential", format!("fib{FIB_N}")), |b| {
        b.iter(|| assert_eq!(fib_seq(black_box(FIB_N)), expected))
    });
    for cutoff in FIB_CUTOFFS {
        let id = format!("fib{FIB_N}_cutoff{cutoff}");
        {
            let pool = loam_pool();
            group.bench_function(BenchmarkId::new("loam", &id), |b| {
                b.iter(|| {
                    let n = black_box(FIB_N);
                    assert_eq!(pool.install(|| fib_loam(n, cutoff)), expected)
                })
            });
        }
        {
            let pool = rayon_pool();
            group.bench_function(BenchmarkId::new("rayon", &id), |b| {
                b.iter(|| {
                    let n = black_box(FIB_N);
                    assert_eq!(pool.install(|| fib_rayon(n, cutoff)), expected)
                })
            });
        }
    }
    group.finish();
}

/// A node of the summed tree (TBB's `tree_sum` shape: a value, two children).
struct Node {
    value: u64,
    left: Option<Box<Node>>,
    right: Option<Box<Node>>,
}

/// A balanced tree of `count` nodes with values `first..first + count`.
fn build_tree(first: u64, count: usize) -> Option<Box<Node>> {
    if count == 0 {
        return None;
    }
    let left_count = (count - 1) / 2;
    Some(Box::new(Node {
        value: first,
        left: build_tree(first + 1, left_count),
        right: build_tree(first + 1 + left_count as u64, count - 1 - left_count),
    }))
}

fn sum_seq(node: &Option<Box<Node>>) -> u64 {
    match node {
        None => 0,
        Some(node) => node.value + sum_seq(&node.left) + sum_seq(&node.right),
    }
}

fn sum_loam(node: &Option<Box<Node>>, depth: u32) -> u64 {
    match node {
        Some(node) if depth < TREE_PAR_DEPTH => {
            let (l, r) = loam_threadpool::join(
                || sum_loam(&node.left, depth + 1),
                || sum_loam(&node.right, depth + 1),
            );
            node.value + l + r
        }
        _ => sum_seq(node),
    }
}

fn sum_rayon(node: &Option<Box<Node>>, depth: u32) -> u64 {
    match node {
        Some(node) if depth < TREE_PAR_DEPTH => {
            let (l, r) = rayon::join(
                || sum_rayon(&node.left, depth + 1),
                || sum_rayon(&node.right, depth + 1),
            );
            node.value + l + r
        }
        _ => sum_seq(node),
    }
}

fn tree_sum(c: &mut Criterion) {
    // Built on first use (not at all when a filter skips this group), once,
    // outside every timed loop.
    let tree = OnceLock::new();
    let tree = || {
        tree.get_or_init(|| {
            let tree = build_tree(0, TREE_NODES);
            assert_eq!(sum_seq(&tree), TREE_SUM);
            tree
        })
    };
    let mut group = c.benchmark_group("tree_sum");
    group.bench_function(BenchmarkId::new("sequential", TREE_NODES), |b| {
        let tree = tree();
        b.iter(|| assert_eq!(sum_seq(black_box(tree)), TREE_SUM))
    });
    {
        let pool = loam_pool();
        group.bench_function(BenchmarkId::new("loam", TREE_NODES), |b| {
            let tree = tree();
            b.iter(|| assert_eq!(pool.install(|| sum_loam(black_box(tree), 0)), TREE_SUM))
        });
    }
    {
        let pool = rayon_pool();
        group.bench_function(BenchmarkId::new("rayon", TREE_NODES), |b| {
            let tree = tree();
            b.iter(|| assert_eq!(pool.install(|| sum_rayon(black_box(tree), 0)), TREE_SUM))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = spawn_scope, spawn_static, join_fib, tree_sum, burst
}
/// A workload's name, its loam run and its rayon run.
type Paired<'a> = (&'static str, &'a dyn Fn(), &'a dyn Fn());

/// The paired workloads, in the order they run.
const PAIRED: [&str; 6] = [
    "burst_fresh_pool",
    "spawn_scope",
    "spawn_static",
    "join_fib32_cutoff20",
    "join_fib32_cutoff10",
    "tree_sum",
];

/// The names `LOAM_BENCH_CASES` lists (a comma list; unset for all).
fn cases() -> Vec<String> {
    // Lossily: a value that is not UTF-8 names no workload, and stops.
    std::env::var_os("LOAM_BENCH_CASES")
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_default()
        .split(',')
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .collect()
}

/// Whether `LOAM_BENCH_CASES` selects workload `name`: a listed name
/// selects the workloads it begins (`join` both fibs).
fn selected(name: &str) -> bool {
    let cases = cases();
    cases.is_empty() || cases.iter().any(|c| name.starts_with(c.as_str()))
}

/// `LOAM_BENCH_PAIRED=<rounds>`: instead of criterion, time loam and rayon
/// back to back, alternating which goes first, for that many rounds per
/// workload, and print the median of the per-round ratios. On a shared,
/// noisy machine a load burst then hits both sides of a round alike.
fn paired(rounds: usize) {
    // A name that begins no workload stops the bench (a misspelt one ran
    // nothing).
    if let Some(bad) = cases()
        .iter()
        .find(|c| !PAIRED.iter().any(|w| w.starts_with(c.as_str())))
    {
        eprintln!(
            "error: LOAM_BENCH_CASES: {bad:?} begins none of {}",
            PAIRED.join(", ")
        );
        std::process::exit(2);
    }
    println!("paired, {} threads, {rounds} rounds: median ms loam, rayon; median of per-round loam/rayon", threads());
    if selected(PAIRED[0]) {
        paired_bursts(rounds);
    }
    let (loam, rayon) = (loam_pool(), rayon_pool());
    let tree = build_tree(0, TREE_NODES);
    let scope_loam = || {
        loam.scope(|s| (0..SPAWN_TASKS).for_each(|_| s.spawn(|_| {})));
    };
    let scope_rayon = || {
        rayon.scope(|s| (0..SPAWN_TASKS).for_each(|_| s.spawn(|_| {})));
    };
    let static_loam = || {
        let countdown = Countdown::new(SPAWN_TASKS);
        for _ in 0..SPAWN_TASKS {
            let countdown = countdown.clone();
            loam.spawn(move || countdown.count_down());
        }
        countdown.wait();
    };
    let static_rayon = || {
        let countdown = Countdown::new(SPAWN_TASKS);
        for _ in 0..SPAWN_TASKS {
            let countdown = countdown.clone();
            rayon.spawn(move || countdown.count_down());
        }
        countdown.wait();
    };
    let (loam_ref, rayon_ref, expected) = (&loam, &rayon, fib_seq(FIB_N));
    let fib = |cutoff| {
        (
            move || assert_eq!(loam_ref.install(|| fib_loam(FIB_N, cutoff)), expected),
            move || assert_eq!(rayon_ref.install(|| fib_rayon(FIB_N, cutoff)), expected),
        )
    };
    let (fib20_loam, fib20_rayon) = fib(20);
    let (fib10_loam, fib10_rayon) = fib(10);
    let tree_loam = || assert_eq!(loam.install(|| sum_loam(&tree, 0)), TREE_SUM);
    let tree_rayon = || assert_eq!(rayon.install(|| sum_rayon(&tree, 0)), TREE_SUM);
    let workloads: [Paired<'_>; 5] = [
        ("spawn_scope", &scope_loam, &scope_rayon),
        ("spawn_static", &static_loam, &static_rayon),
        ("join_fib32_cutoff20", &fib20_loam, &fib20_rayon),
        ("join_fib32_cutoff10", &fib10_loam, &fib10_rayon),
        ("tree_sum", &tree_loam, &tree_rayon),
    ];
    let time = |f: &dyn Fn()| {
        let start = std::time::Instant::now();
        f();
        start.elapsed().as_secs_f64() * 1e3
    };
    assert!(workloads
        .iter()
        .map(|w| w.0)
        .eq(PAIRED[1..].iter().copied()));
    for (name, loam_run, rayon_run) in workloads {
        if !selected(name) {
            continue;
        }
        loam_run();
        rayon_run();
        let (mut l, mut r, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (a, b) = if round % 2 == 0 {
                let a = time(loam_run);
                (a, time(rayon_run))
            } else {
                let b = time(rayon_run);
                (time(loam_run), b)
            };
            l.push(a);
            r.push(b);
            ratios.push(a / b);
        }
        println!(
            "{name:22} loam {:8.2}  rayon {:8.2}  loam/rayon {:.2}",
            median(l),
            median(r),
            median(ratios)
        );
    }
}

/// The `burst` case in paired mode, first, in a process with no other
/// pool or data yet.
fn paired_bursts(rounds: usize) {
    // Fresh pools: rayon's time over loam's in each round (the target is
    // at least 1.0 in every one).
    let (mut speed, mut l, mut r) = (Vec::new(), Vec::new(), Vec::new());
    // Warm-up: the first threads of a process start slower.
    burst_loam();
    burst_rayon();
    for round in 0..rounds {
        let (a, b) = if round % 2 == 0 {
            let a = burst_loam();
            (a, burst_rayon())
        } else {
            let b = burst_rayon();
            (burst_loam(), b)
        };
        l.push(a.as_secs_f64() * 1e3);
        r.push(b.as_secs_f64() * 1e3);
        speed.push(b.as_secs_f64() / a.as_secs_f64());
    }
    let rounds_text: Vec<String> = speed.iter().map(|s| format!("{s:.2}")).collect();
    let loam_text: Vec<String> = l.iter().map(|t| format!("{t:.1}")).collect();
    println!(
        "{:22} loam {:8.2}  rayon {:8.2}  loam/rayon {:.2}  speed vs rayon by round: {}  (loam ms: {})",
        "burst_fresh_pool",
        median(l),
        median(r),
        // The median of each round's ratio, not the reciprocal of the
        // speeds' median (with an even count of rounds they differ).
        median(speed.iter().map(|s| 1.0 / s).collect()),
        rounds_text.join(" "),
        loam_text.join(" ")
    );
}

fn main() {
    support::main(paired, benches);
}
