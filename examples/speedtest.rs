//! The Delphi PPL speed test (seed 002): tasks that create a list of small,
//! simple objects and destroy it, run on one core and then on every core
//! (a `loam-threadpool` pool), per memory manager; the time and the peak
//! memory of each, as the seed's table. The seed found the memory manager
//! deciding whether the multi-core run was any faster than the single-core
//! one (FastMM4 and the native manager against NexusDB's and ScaleMM2).
//!
//! Versions: the system allocator, loam's heap, mimalloc, jemalloc and
//! snmalloc (objects allocated and freed through each as a `GlobalAlloc`),
//! and loam managed objects in a `GcList` on a `ManagedPool`, whose lists
//! the collector frees (the pattern loam is for: workers allocate, GC
//! threads free). Every run is a child process of this example (a
//! process's peak memory cannot be split between managers), interleaved
//! with the others and repeated; the table gives medians.
//!
//! ```text
//! cargo run --release --example speedtest
//! cargo run --release --example speedtest -- --tasks 4000 --rounds 5
//! ```

#[path = "support/mod.rs"]
mod support;

use clap::Parser;
use loam::collections::GcList;
use loam::runtime::{Gc, ManagedPool, Runtime, Trace};
use std::alloc::Layout;
use std::time::Instant;
use support::{heap, median, peak_rss_kb, Heap, HEAPS};

#[derive(Parser, Debug)]
#[command(
    name = "speedtest",
    about = "Lists of small objects created and destroyed, one core and all cores, per memory manager."
)]
struct Cli {
    /// Tasks per run; each creates and destroys one list. At most
    /// 4,000,000,000 objects in all (the ids' sum, which every run checks,
    /// then fits in 64 bits).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=4_000_000_000))]
    tasks: u64,
    /// Objects per list, 1 to 1,000,000.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    objects: u64,
    /// Interleaved rounds, 1 to 1000; the table gives medians.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=1000))]
    rounds: u16,
    /// Internal: run one version in this process and print its figures.
    #[arg(long, hide = true)]
    child: Option<String>,
    /// Internal: with --child, `single` or `multi`.
    #[arg(long, hide = true, default_value = "single")]
    mode: String,
}

/// A small, simple object, as the seed's test objects.
#[derive(Trace)]
struct Item {
    id: u64,
    value: f64,
    tag: u32,
    flags: u32,
}

/// One task on `heap`: a list of `n` objects made, read back, destroyed.
/// Returns the sum of their ids.
fn task_plain(heap: Heap, first: u64, n: u64) -> u64 {
    let layout = Layout::new::<Item>();
    let mut list: Vec<*mut Item> = Vec::with_capacity(n as usize);
    for id in first..first + n {
        // SAFETY: `Item` is not zero-sized.
        let p = unsafe { heap.alloc.alloc(layout) }.cast::<Item>();
        assert!(!p.is_null(), "{}: out of memory", heap.name);
        // SAFETY: a fresh allocation of `Item`'s layout.
        unsafe {
            p.write(Item {
                id,
                value: id as f64 * 0.5,
                tag: id as u32,
                flags: 1,
            })
        };
        list.push(p);
    }
    let mut sum = 0;
    for &p in &list {
        // SAFETY: written above, freed once, here.
        unsafe {
            sum += (*p).id;
            heap.alloc.dealloc(p.cast(), layout);
        }
    }
    sum
}

/// One task with managed objects: a `GcList` of `n` items, read back, left
/// to the collector.
fn task_gc(m: &mut loam::runtime::Mutator, first: u64, n: u64) -> u64 {
    m.mutate(|mc| {
        let list: GcList<Gc<Item>> = GcList::with_capacity(mc, n as usize);
        for id in first..first + n {
            list.push(
                mc,
                mc.alloc(Item {
                    id,
                    value: id as f64 * 0.5,
                    tag: id as u32,
                    flags: 1,
                }),
            );
        }
        list.iter().map(|item| item.id).sum()
    })
}

/// The sum every run must find.
fn expected(tasks: u64, objects: u64) -> u64 {
    let n = tasks * objects;
    n * (n - 1) / 2
}

/// Runs one version in this process; prints `ms` and `peak_kb`.
fn run_child(cli: &Cli, version: &str) -> Result<(), String> {
    let multi = match cli.mode.as_str() {
        "single" => false,
        "multi" => true,
        other => return Err(format!("--mode {other}: expected single or multi")),
    };
    let threads = if multi {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        // One core: the whole process, so that loam's collector threads
        // (one per CPU by default) free on the same core as the worker,
        // as a plain heap frees inline.
        let first = support::allowed_cpus()[..1].to_vec();
        support::set_affinity(&first)?;
        1
    };
    let (tasks, n) = (cli.tasks, cli.objects);
    let start;
    let sum: u64 = if version == "loam Gc" {
        let rt = Runtime::builder()
            .try_build()
            .map_err(|e| format!("the runtime's settings: {e}"))?;
        let pool = ManagedPool::builder(&rt)
            .num_threads(threads)
            .build()
            .map_err(|e| e.to_string())?;
        start = Instant::now();
        let per = tasks.div_ceil(threads as u64);
        let sum = pool
            .broadcast(|m, ctx| {
                let from = ctx.index() as u64 * per;
                (from..(from + per).min(tasks))
                    .map(|t| task_gc(m, t * n, n))
                    .sum::<u64>()
            })
            .iter()
            .sum();
        // Every list freed, timed, as the plain heaps' frees are: a full
        // collection (waiting for the cycles the run asked for left the
        // garbage under the next trigger unswept, up to the minimum heap).
        rt.collect();
        sum
    } else {
        let heap = heap(version).ok_or_else(|| format!("no heap {version}"))?;
        let pool = loam::threadpool::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| e.to_string())?;
        start = Instant::now();
        let per = tasks.div_ceil(threads as u64);
        pool.broadcast(|ctx| {
            let from = ctx.index() as u64 * per;
            (from..(from + per).min(tasks))
                .map(|t| task_plain(heap, t * n, n))
                .sum::<u64>()
        })
        .iter()
        .sum()
    };
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if sum != expected(tasks, n) {
        return Err(format!("{version}: wrong sum {sum}"));
    }
    println!("ms {ms}");
    println!("peak_kb {}", peak_rss_kb());
    Ok(())
}

fn main() {
    support::quiet_sigpipe();
    let cli: Cli = support::parse_args();
    if cli.tasks.saturating_mul(cli.objects) > 4_000_000_000 {
        eprintln!(
            "error: --tasks × --objects must be at most 4,000,000,000 (the ids' sum \
             then fits in 64 bits)\n\n{}",
            <Cli as clap::CommandFactory>::command().render_usage()
        );
        std::process::exit(2);
    }
    if let Some(version) = &cli.child {
        if let Err(e) = run_child(&cli, version) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    let versions: Vec<&str> = HEAPS.iter().map(|h| h.name).chain(["loam Gc"]).collect();
    let modes = ["single", "multi"];
    // figures[version][mode]: (ms, peak MiB) per round.
    let mut figures = vec![vec![Vec::new(); 2]; versions.len()];
    let runs: Vec<(usize, usize)> = (0..versions.len())
        .flat_map(|v| (0..2).map(move |m| (v, m)))
        .collect();
    let rounds = usize::from(cli.rounds);
    for round in 0..rounds {
        for i in support::round_order(round, runs.len()) {
            let (v, m) = runs[i];
            eprint!(
                "\rround {}/{rounds}: {} {} ...          ",
                round + 1,
                versions[v],
                modes[m]
            );
            let args: Vec<String> = [
                "--child",
                versions[v],
                "--mode",
                modes[m],
                "--tasks",
                &cli.tasks.to_string(),
                "--objects",
                &cli.objects.to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            match support::child(&args) {
                Ok(lines) => {
                    let get = |key: &str| {
                        lines
                            .iter()
                            .find(|(k, _)| k == key)
                            .map_or(f64::NAN, |l| l.1)
                    };
                    figures[v][m].push((get("ms"), get("peak_kb") / 1024.0));
                }
                Err(e) => {
                    eprintln!("\nerror: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
    eprintln!("\r{:70}", "");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "speedtest: {} tasks of {} objects, medians of {rounds} interleaved rounds ({cores} cores)",
        cli.tasks, cli.objects
    );
    println!(
        "| version | single-core ms | multi-core ms | single / multi | peak MiB (single / multi) |"
    );
    println!("|---|---|---|---|---|");
    for (v, name) in versions.iter().enumerate() {
        let ms = |m: usize| median(figures[v][m].iter().map(|f| f.0).collect());
        let mib = |m: usize| median(figures[v][m].iter().map(|f| f.1).collect());
        let speedup = median(
            figures[v][0]
                .iter()
                .zip(&figures[v][1])
                .map(|(s, m)| s.0 / m.0)
                .collect(),
        );
        println!(
            "| {name} | {:.0} | {:.0} | {speedup:.2}x | {:.1} / {:.1} |",
            ms(0),
            ms(1),
            mib(0),
            mib(1)
        );
    }
}
