//! The Computer Language Benchmarks Game's binary-trees: loam `Gc` against
//! `Box` and `Arc` on mimalloc (the process's global allocator), same run.
//!
//! The program: a stretch tree of depth `max + 1` is built, checked and
//! dropped; a long-lived tree of depth `max` is built and kept; then for each
//! depth `d` from 4 to `max` in steps of 2, `2^(max - d + 4)` trees of depth
//! `d` are built, checked (node count) and dropped; finally the long-lived
//! tree is checked. Each node is two child pointers. With `threads > 1` the
//! trees of each depth are split between scoped threads (each loam thread a
//! mutator of its own).
//!
//! The loam version builds and checks each tree in one `mutate` call (its
//! collections run between calls) and keeps the long-lived tree in a root;
//! with more than one thread, the main thread waits for the workers in
//! `Mutator::blocking`, which hands what its heap holds freed over to the
//! workers.
//! Its runtime is built once with default settings, so pacing decides when
//! cycles run; the pause histogram is printed at the end.
//!
//! Run: `cargo bench --bench gc` (criterion, depth 16, 1 and 2 threads,
//! then the mark alone: `mark_benches`), or
//! `LOAM_BENCH_PAIRED=<rounds> cargo bench --bench gc` for interleaved
//! rounds (box, arc, loam in rotating order) with the median of per-round
//! ratios, the figure the README quotes, then each version's peak RSS
//! measured alone in a child process (`LOAM_BT_ONLY=box,loam` runs only
//! those versions; one alone, for profiling). `LOAM_BT_DEPTH=21` for the full
//! size, `LOAM_BENCH_THREADS=1,2,4` for the thread counts.
//!
//! loam runs on each object space: its own pages (`loam`), and the same
//! collector over the system allocator, mimalloc and jemalloc
//! (`loam-system`, `loam-mimalloc`, `loam-jemalloc`: every object allocated
//! by the mutator through that allocator and freed through it by the GC
//! threads, the seeds' experiment). `loam-set` is loam on its pages with
//! each node made empty and its children stored with `GcCell::set`, as a
//! program that changes its trees writes them (stores into young objects).

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

#[path = "support/mod.rs"]
mod support;

use support::median;

use criterion::{criterion_group, BenchmarkId, Criterion};
use loam::runtime::{Gc, GcCell, Mutation, Mutator, Root, Rootable, Runtime, Trace};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MIN_DEPTH: u32 = 4;

/// `LOAM_BT_DEPTH`, 6 to 24 (a tree of depth 24 takes 1 GiB as `Box`es;
/// past it the machine runs out of memory before the bench says why).
fn max_depth() -> u32 {
    support::env("LOAM_BT_DEPTH", "a tree depth from 6 to 24", |v| {
        v.parse().ok().filter(|d| (MIN_DEPTH + 2..=24).contains(d))
    })
    .unwrap_or(16)
}

/// `LOAM_BENCH_THREADS`: a comma list of thread counts, each 1 to 256.
fn thread_counts() -> Vec<usize> {
    support::env(
        "LOAM_BENCH_THREADS",
        "thread counts from 1 to 256, as 1,2",
        |v| {
            v.split(',')
                .map(|t| t.trim().parse().ok().filter(|n| (1..=256).contains(n)))
                .collect()
        },
    )
    .unwrap_or_else(|| vec![1, 2])
}

/// Node count of a perfect binary tree of depth `d`.
fn nodes(d: u32) -> u64 {
    (1u64 << (d + 1)) - 1
}

/// Everything one binary-trees run checks, to compare the three versions.
fn expected(max: u32) -> u64 {
    let mut sum = nodes(max + 1) + nodes(max);
    for d in (MIN_DEPTH..=max).step_by(2) {
        sum += (1u64 << (max - d + MIN_DEPTH)) * nodes(d);
    }
    sum
}

/// Runs `iterations` trees of depth `d` split over `threads` threads;
/// `work(d, n)` does `n` of them and returns its checks' sum.
fn split(threads: usize, iterations: u64, d: u32, work: &(dyn Fn(u32, u64) -> u64 + Sync)) -> u64 {
    if threads == 1 {
        return work(d, iterations);
    }
    std::thread::scope(|s| {
        let per = iterations.div_ceil(threads as u64);
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let n = per.min(iterations.saturating_sub(t * per));
                s.spawn(move || work(d, n))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

// ------------------------------------------------------------------ Box

struct BoxTree {
    l: Option<Box<BoxTree>>,
    r: Option<Box<BoxTree>>,
}

fn box_tree(d: u32) -> Box<BoxTree> {
    if d == 0 {
        Box::new(BoxTree { l: None, r: None })
    } else {
        Box::new(BoxTree {
            l: Some(box_tree(d - 1)),
            r: Some(box_tree(d - 1)),
        })
    }
}

fn box_check(t: &BoxTree) -> u64 {
    1 + t.l.as_deref().map_or(0, box_check) + t.r.as_deref().map_or(0, box_check)
}

fn run_box(max: u32, threads: usize) -> u64 {
    let mut sum = box_check(&box_tree(max + 1));
    let long = box_tree(max);
    for d in (MIN_DEPTH..=max).step_by(2) {
        let n = 1u64 << (max - d + MIN_DEPTH);
        sum += split(threads, n, d, &|d, n| {
            (0..n).map(|_| box_check(&box_tree(d))).sum()
        });
    }
    sum + box_check(&long)
}

// ------------------------------------------------------------------ Arc

struct ArcTree {
    l: Option<Arc<ArcTree>>,
    r: Option<Arc<ArcTree>>,
}

fn arc_tree(d: u32) -> Arc<ArcTree> {
    if d == 0 {
        Arc::new(ArcTree { l: None, r: None })
    } else {
        Arc::new(ArcTree {
            l: Some(arc_tree(d - 1)),
            r: Some(arc_tree(d - 1)),
        })
    }
}

fn arc_check(t: &ArcTree) -> u64 {
    1 + t.l.as_deref().map_or(0, arc_check) + t.r.as_deref().map_or(0, arc_check)
}

fn run_arc(max: u32, threads: usize) -> u64 {
    let mut sum = arc_check(&arc_tree(max + 1));
    let long = arc_tree(max);
    for d in (MIN_DEPTH..=max).step_by(2) {
        let n = 1u64 << (max - d + MIN_DEPTH);
        sum += split(threads, n, d, &|d, n| {
            (0..n).map(|_| arc_check(&arc_tree(d))).sum()
        });
    }
    sum + arc_check(&long)
}

// ------------------------------------------------------------------ loam

#[derive(Trace)]
struct GcTree<'gc> {
    l: Option<Gc<'gc, GcTree<'gc>>>,
    r: Option<Gc<'gc, GcTree<'gc>>>,
}

fn gc_tree<'gc>(mc: &Mutation<'gc>, d: u32) -> Gc<'gc, GcTree<'gc>> {
    if d == 0 {
        mc.alloc(GcTree { l: None, r: None })
    } else {
        mc.alloc(GcTree {
            l: Some(gc_tree(mc, d - 1)),
            r: Some(gc_tree(mc, d - 1)),
        })
    }
}

fn gc_check(t: &GcTree<'_>) -> u64 {
    1 + t.l.map_or(0, |c| gc_check(&c)) + t.r.map_or(0, |c| gc_check(&c))
}

fn run_loam(rt: &Runtime, max: u32, threads: usize) -> u64 {
    let mut m = rt.attach();
    let mut sum = m.mutate(|mc| gc_check(&gc_tree(mc, max + 1)));
    let long: Root<Rootable!['gc => GcTree<'gc>]> = m.mutate(|mc| mc.root(gc_tree(mc, max)));
    sum += loam_iterations(rt, &mut m, max, threads, &|m, d| {
        m.mutate(|mc| gc_check(&gc_tree(mc, d)))
    });
    sum + m.mutate(|mc| gc_check(&long.get(mc)))
}

/// The mutators' time a run spent beyond its own wall-clock time, in
/// nanoseconds: each split's workers' time less the split's (the calling
/// mutator waits meanwhile). The run's time plus this is its mutators'
/// time, the denominator of the held share: the stretch and long-lived
/// trees are one mutator's work, the iterations `threads` mutators'.
static EXTRA_MUTATOR_NS: AtomicU64 = AtomicU64::new(0);

/// The trees of every depth, `tree(m, d)` building and checking one of
/// depth `d` in a call of mutator `m`; split between `threads` mutators of
/// `rt` (each a thread of its own) when there are more than one.
fn loam_iterations(
    rt: &Runtime,
    m: &mut Mutator,
    max: u32,
    threads: usize,
    tree: &(dyn Fn(&mut Mutator, u32) -> u64 + Sync),
) -> u64 {
    let mut sum = 0;
    for d in (MIN_DEPTH..=max).step_by(2) {
        let n = 1u64 << (max - d + MIN_DEPTH);
        sum += if threads == 1 {
            (0..n).map(|_| tree(m, d)).sum()
        } else {
            // This thread waits for the workers: `blocking` first hands what
            // its heap holds freed (the stretch tree's memory) over to them.
            let workers = AtomicU64::new(0);
            let start = Instant::now();
            let sum = m.blocking(|| {
                split(threads, n, d, &|d, n| {
                    let start = Instant::now();
                    let mut m = rt.attach();
                    let sum = (0..n).map(|_| tree(&mut m, d)).sum();
                    drop(m);
                    workers.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    sum
                })
            });
            let took = start.elapsed().as_nanos() as u64;
            let extra = workers.load(Ordering::Relaxed).saturating_sub(took);
            EXTRA_MUTATOR_NS.fetch_add(extra, Ordering::Relaxed);
            sum
        };
    }
    sum
}

fn runtime() -> Runtime {
    Runtime::new()
}

// ------------------------------------------------------- loam, with `set`

/// The tree as a program that changes its nodes writes it: children in
/// barrier cells, each node made empty and its children stored into it
/// with `GcCell::set` (stores into young objects: `loam-set`).
#[derive(Trace)]
struct SetTree<'gc> {
    l: GcCell<'gc, Option<Gc<'gc, SetTree<'gc>>>>,
    r: GcCell<'gc, Option<Gc<'gc, SetTree<'gc>>>>,
}

fn set_tree<'gc>(mc: &Mutation<'gc>, d: u32) -> Gc<'gc, SetTree<'gc>> {
    let node = mc.alloc(SetTree {
        l: GcCell::new(None),
        r: GcCell::new(None),
    });
    if d > 0 {
        node.l.set(mc, Some(set_tree(mc, d - 1)));
        node.r.set(mc, Some(set_tree(mc, d - 1)));
    }
    node
}

fn set_check(t: &SetTree<'_>) -> u64 {
    1 + t.l.get().map_or(0, |c| set_check(&c)) + t.r.get().map_or(0, |c| set_check(&c))
}

fn run_loam_set(rt: &Runtime, max: u32, threads: usize) -> u64 {
    let mut m = rt.attach();
    let mut sum = m.mutate(|mc| set_check(&set_tree(mc, max + 1)));
    let long: Root<Rootable!['gc => SetTree<'gc>]> = m.mutate(|mc| mc.root(set_tree(mc, max)));
    sum += loam_iterations(rt, &mut m, max, threads, &|m, d| {
        m.mutate(|mc| set_check(&set_tree(mc, d)))
    });
    sum + m.mutate(|mc| set_check(&long.get(mc)))
}

fn print_pauses(rt: &Runtime) {
    let s = rt.stats();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let h = &s.mutator_pauses;
    println!(
        "loam: {} cycles; mutators held {} times: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms, {:.1} ms in all \
         ({:.1} at safepoints, {:.1} pacing, {:.1} for memory, {:.1} assisting, {:.1} for destructors); \
         the collector's stops p99 {:.3}, max {:.3} ms; \
         mark {:.1} ms, sweep {:.1} ms in all",
        s.cycles,
        h.count(),
        ms(h.p50()),
        ms(h.p99()),
        ms(h.max()),
        ms(h.total()),
        ms(s.held_at_safepoint),
        ms(s.held_by_pacing),
        ms(s.held_for_memory),
        ms(s.held_assisting),
        ms(s.held_for_drops),
        ms(s.pauses.p99()),
        ms(s.pauses.max()),
        ms(s.mark_time),
        ms(s.sweep_time),
    );
}

fn benches(c: &mut Criterion) {
    let max = max_depth();
    let want = expected(max);
    let rt = runtime();
    let mut g = c.benchmark_group(format!("binary_trees_{max}"));
    g.sample_size(10);
    for threads in thread_counts() {
        g.bench_with_input(BenchmarkId::new("box", threads), &threads, |b, &t| {
            b.iter(|| assert_eq!(black_box(run_box(max, t)), want))
        });
        g.bench_with_input(BenchmarkId::new("arc", threads), &threads, |b, &t| {
            b.iter(|| assert_eq!(black_box(run_arc(max, t)), want))
        });
        g.bench_with_input(BenchmarkId::new("loam", threads), &threads, |b, &t| {
            b.iter(|| assert_eq!(black_box(run_loam(&rt, max, t)), want))
        });
    }
    g.finish();
    print_pauses(&rt);
}

/// The mark alone, no mutator running, by forced full cycles with 1 and 2
/// GC threads (`gc_threads` and `concurrent_gc_threads` alike): a rooted
/// tree of depth `max` (2^(max+1) - 1 nodes), and a rooted array of as many
/// leaves (trees of depth 0) made one after another. Each sample is the
/// cycles' mark time from `GcStats::mark_time`, not their wall time, so
/// the sweep (which finds nothing to free) and the cycle's waits are left
/// out.
/// `cargo bench --bench gc -- mark`.
fn mark_benches(c: &mut Criterion) {
    type Tree = Rootable!['gc => GcTree<'gc>];
    type Leaves = Rootable!['gc => [Gc<'gc, GcTree<'gc>>]];
    let max = max_depth();
    let mut g = c.benchmark_group(format!("mark_{max}"));
    g.sample_size(10);
    for threads in [1, 2] {
        let rt = Runtime::builder()
            .gc_threads(threads)
            .concurrent_gc_threads(threads)
            .build();
        let mut m = rt.attach();
        let tree: Root<Tree> = m.mutate(|mc| mc.root(gc_tree(mc, max)));
        let leaves: Root<Leaves> = m.mutate(|mc| {
            let n = nodes(max) as usize;
            mc.root(mc.alloc_from_iter((0..n).map(|_| gc_tree(mc, 0))))
        });
        drop(m);
        // The first full mark promotes them; later ones mark them again.
        rt.collect();
        g.bench_with_input(
            BenchmarkId::new("tree_and_array", threads),
            &threads,
            |b, _| {
                b.iter_custom(|iters| {
                    let before = rt.stats().mark_time;
                    for _ in 0..iters {
                        rt.collect();
                    }
                    rt.stats().mark_time - before
                })
            },
        );
        drop((tree, leaves));
    }
    g.finish();
}

criterion_group!(gc, benches, mark_benches);

/// A version's name and one binary-trees run of it.
type Contender<'a> = (&'static str, Box<dyn Fn() -> u64 + 'a>);

/// The object spaces loam's versions run on: its own pages, and the
/// collector over other memory managers (`RuntimeBuilder::global_alloc`);
/// and `loam-set`, loam's pages with the tree built through `GcCell::set`.
/// Only those `only` lists are built (each has GC threads of its own).
fn spaces(only: Option<&str>) -> Vec<(&'static str, Runtime, Runner)> {
    type Make = fn() -> Runtime;
    let all: [(&'static str, Make); 5] = [
        ("loam", runtime),
        ("loam-set", runtime),
        ("loam-system", || {
            Runtime::builder().global_alloc(std::alloc::System).build()
        }),
        ("loam-mimalloc", || {
            Runtime::builder().global_alloc(mimalloc::MiMalloc).build()
        }),
        ("loam-jemalloc", || {
            Runtime::builder()
                .global_alloc(tikv_jemallocator::Jemalloc)
                .build()
        }),
    ];
    all.into_iter()
        .filter(|(name, _)| listed(only, name))
        .map(|(name, make)| {
            let run: Runner = if name == "loam-set" {
                run_loam_set
            } else {
                run_loam
            };
            (name, make(), run)
        })
        .collect()
}

/// One binary-trees run of a loam version on a runtime: `run_loam`, or
/// `run_loam_set` for `loam-set`.
type Runner = fn(&Runtime, u32, usize) -> u64;

/// `LOAM_BENCH_PAIRED=<rounds>`: box, arc and loam on each object space
/// back to back, rotating which goes first, `rounds` times per thread
/// count; prints median times and the median of the per-round ratios
/// against box. Then each version's peak RSS, each alone in a child
/// process of this bench (one process's peak cannot be split between
/// versions): `LOAM_BT_ONLY=<name>` runs one version, which is also the
/// way to profile one.
fn paired(rounds: usize) {
    let max = max_depth();
    let want = expected(max);
    support::check_names(
        "LOAM_BT_ONLY",
        &[
            "box",
            "arc",
            "loam",
            "loam-set",
            "loam-system",
            "loam-mimalloc",
            "loam-jemalloc",
        ],
    );
    // An empty list is no list (all versions), as `LOAM_BENCH_CASES` reads.
    let only = std::env::var("LOAM_BT_ONLY")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let child = only.is_some() && std::env::var_os("LOAM_BENCH_CHILD").is_some();
    if !child {
        println!(
            "binary-trees depth {max}, {rounds} rounds; median ms, median per-round ratio to box"
        );
    }
    for threads in thread_counts() {
        // Fresh runtimes per thread count: each row's pauses are its own.
        let spaces = spaces(only.as_deref());
        let mut runs: Vec<Contender<'_>> = vec![
            ("box", Box::new(move || run_box(max, threads))),
            ("arc", Box::new(move || run_arc(max, threads))),
        ];
        for (name, rt, run) in &spaces {
            runs.push((name, Box::new(move || run(rt, max, threads))));
        }
        let n = runs.len();
        let mut times = vec![Vec::new(); n];
        // Every round's mutators' time (`EXTRA_MUTATOR_NS`), the warm-up's
        // included (the pauses count it).
        let mut wall = vec![0.0; n];
        // A child measuring one version's peak RSS runs it once: a second
        // run began on the first one's garbage and grown heap goal, which
        // counted against loam's peak.
        let last_round = if child { 0 } else { rounds };
        for round in 0..=last_round {
            let mut t = vec![1.0; n];
            for i in support::round_order(round, n) {
                if !listed(only.as_deref(), runs[i].0) {
                    continue;
                }
                EXTRA_MUTATOR_NS.store(0, Ordering::Relaxed);
                let start = Instant::now();
                assert_eq!(
                    runs[i].1(),
                    want,
                    "{} computed a wrong check sum",
                    runs[i].0
                );
                let ran = start.elapsed().as_secs_f64() * 1e3;
                // A loam run ends when the cycles it asked for have swept:
                // they run on as its last call returns, into the next
                // version's timed run otherwise. The
                // mutators' time (`wall`, for the held share) is the run's.
                if i >= 2 {
                    spaces[i - 2].1.wait_for_cycle();
                }
                t[i] = start.elapsed().as_secs_f64() * 1e3;
                wall[i] += ran + EXTRA_MUTATOR_NS.load(Ordering::Relaxed) as f64 / 1e6;
            }
            if round > 0 {
                // Round 0 warms up.
                for i in 0..n {
                    times[i].push(t[i]);
                }
            }
        }
        if child {
            println!("peak_rss_kb {}", support::peak_rss_kb().unwrap_or(0));
            return;
        }
        // Against box's run of the same round; none when box did not run.
        let ratio = |i: usize| {
            if listed(only.as_deref(), "box") {
                let r = median(times[i].iter().zip(&times[0]).map(|(a, b)| a / b).collect());
                format!(" ({r:.2}x)")
            } else {
                String::new()
            }
        };
        let cells: Vec<String> = (0..n)
            .map(|i| format!("{} {:.1}{}", runs[i].0, median(times[i].clone()), ratio(i)))
            .collect();
        let listed = |name: &str| listed(only.as_deref(), name);
        let cells: Vec<String> = (0..n)
            .filter(|&i| listed(runs[i].0))
            .map(|i| cells[i].clone())
            .collect();
        println!("{threads} thread(s): {}", cells.join("  "));
        {
            let rss: Vec<String> = runs
                .iter()
                .filter(|(name, _)| listed(name))
                .map(|(name, _)| {
                    format!(
                        "{name} {}",
                        child_peak_rss(name, threads)
                            .map_or("?".into(), |kb| format!("{:.1}", kb as f64 / 1024.0))
                    )
                })
                .collect();
            println!(
                "{threads} thread(s) peak RSS MiB, each alone: {}",
                rss.join("  ")
            );
        }
        for (k, (name, rt, _)) in spaces.iter().enumerate() {
            if listed(name) {
                let held = rt.stats().mutator_pauses.total().as_secs_f64() * 1e3;
                print!(
                    "{threads} thread(s) {name}: held {:.2}% of the mutators' time; ",
                    100.0 * held / wall[2 + k]
                );
                print_pauses(rt);
            }
        }
    }
}

/// Whether `LOAM_BT_ONLY` (a comma list, or unset for all) lists `name`.
fn listed(only: Option<&str>, name: &str) -> bool {
    only.map_or(true, |o| o.split(',').any(|n| n.trim() == name))
}

/// The peak RSS (KiB) of one version run alone in a child process.
fn child_peak_rss(name: &str, threads: usize) -> Option<i64> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe)
        .arg("--bench")
        .env("LOAM_BENCH_PAIRED", "1")
        .env("LOAM_BT_ONLY", name)
        .env("LOAM_BENCH_CHILD", "1")
        .env("LOAM_BENCH_THREADS", threads.to_string())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("peak_rss_kb "))
        .and_then(|v| v.trim().parse().ok())
}

fn main() {
    support::main(paired, gc);
}
