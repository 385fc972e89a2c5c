//! The GC speed tester (seed 000): the workers of a managed pool run unit
//! tests, pool tasks drawn at random from three kinds, all on the managed collections, all garbage
//! left to the collector, whose own threads free it.
//!
//! - list: 1,000 small managed records {u64 key, i32 index, i32 tag} pushed
//!   into a `GcList`, sorted by key, iterated with an order-dependent
//!   checksum, every odd index removed in place, iterated again;
//! - dictionary: 1,000 `GcString` keys `k<i>_<hex>` mapped to records in a
//!   `GcDictionary`; every key looked up; every even key removed; all looked
//!   up again;
//! - string: 200 pieces `item<i>=<n>;` appended to a `GcStringBuilder`,
//!   finished into a `GcString`, split on `;`, each part cut into two
//!   substrings at `=`, each name compared with the previous one.
//!
//! Each test checks its own result; a wrong one stops the run with an
//! error, never a number. One test is one `mutate` call.
//!
//! `--heap` chooses the memory manager behind the same collector: loam's
//! own pages, or the system allocator, mimalloc, jemalloc or snmalloc as
//! the runtime's object space (`RuntimeBuilder::global_alloc`: each object
//! allocated by its worker through that manager, freed through it by the
//! GC threads), the seed's experiment. With no flags it prints the compare
//! table: every heap on one CPU and on all, each configuration a child
//! process, interleaved and repeated; the table gives ops/s, the scaling
//! from one CPU to all, loam's ratio to each heap, peak RSS and pauses
//! (`--svg FILE` draws it).
//!
//! The runtime's cycles over loam's pages begin and end their marks with
//! per-mutator handshakes (ragged cycles, the default); over a
//! `GlobalAlloc` space they always stop the world. So that the table
//! compares memory managers behind one collector, it also runs loam's
//! pages with stopped cycles (`--stopped-cycles`, the row "loam, stopped
//! cycles"): that row against the others is the memory manager's share,
//! `loam` against it the cycles'.
//!
//! ```text
//! cargo run --release --example gc_speed_tester                     # the compare table
//! cargo run --release --example gc_speed_tester -- --heap system    # one run, live line
//! cargo run --release --example gc_speed_tester -- --verify 1000     # a checksum to compare
//! cargo run --release --example gc_speed_tester -- --cpus 0 --json   # one CPU, one JSON object
//! ```

// Not every helper is used here.
#[allow(dead_code)]
#[path = "support/mod.rs"]
mod support;

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use loam::collections::{gc_format, GcDictionary, GcList, GcString, GcStringBuilder};
use loam::runtime::{Gc, ManagedPool, ManagedScope, Mutation, Mutator, Runtime, Trace};
use serde::{Deserialize, Serialize};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::median;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Heap {
    /// loam's own pages (the default object space).
    Loam,
    /// The collector over the system allocator.
    System,
    /// The collector over mimalloc.
    Mimalloc,
    /// The collector over jemalloc.
    Jemalloc,
    /// The collector over snmalloc.
    Snmalloc,
    /// The collector over loam's heap called as a plain `GlobalAlloc`
    /// (`LoamAlloc`), as the others are: the same heap as `loam`'s pages,
    /// without the collector's page runs and allocated bits.
    LoamMalloc,
}

impl Heap {
    const ALL: [Heap; 6] = [
        Heap::Loam,
        Heap::System,
        Heap::Mimalloc,
        Heap::Jemalloc,
        Heap::Snmalloc,
        Heap::LoamMalloc,
    ];

    fn name(self) -> &'static str {
        match self {
            Heap::Loam => "loam",
            Heap::System => "system",
            Heap::Mimalloc => "mimalloc",
            Heap::Jemalloc => "jemalloc",
            Heap::Snmalloc => "snmalloc",
            Heap::LoamMalloc => "loam-malloc",
        }
    }

    /// A runtime whose objects live in this heap: loam's pages, or the
    /// same collector over another memory manager as its object space
    /// (every object allocated by its worker through it, freed through it
    /// by the GC threads). `stopped`: every mark begins and ends with the
    /// world stopped (a `GlobalAlloc` space's always do).
    /// A setting the environment gives that cannot be read
    /// (`LOAM_HEAP_LIMIT=abc`) is an error, not a panic.
    fn runtime(self, stopped: bool) -> Result<Runtime, String> {
        let mut builder = Runtime::builder();
        if stopped {
            builder = builder.ragged_handshakes(false);
        }
        match self {
            Heap::Loam => builder,
            Heap::System => builder.global_alloc(std::alloc::System),
            Heap::Mimalloc => builder.global_alloc(mimalloc::MiMalloc),
            Heap::Jemalloc => builder.global_alloc(tikv_jemallocator::Jemalloc),
            Heap::Snmalloc => builder.global_alloc(snmalloc_rs::SnMalloc),
            Heap::LoamMalloc => builder.global_alloc(loam::heap::LoamAlloc),
        }
        .try_build()
        .map_err(|e| format!("the runtime's settings: {e}"))
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "gc_speed_tester",
    about = "Worker threads run managed-collection unit tests while the collector frees their garbage."
)]
struct Cli {
    /// Seconds to run, 0.1 to 1,000,000 (default: 10 for one run, 1.5 per
    /// child run of --compare).
    #[arg(long, value_parser = parse_seconds, conflicts_with = "verify")]
    seconds: Option<f64>,
    /// Worker threads, 1 to 4096 (default: one per CPU the process may run
    /// on).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4096), conflicts_with = "verify")]
    workers: Option<u16>,
    /// CPUs to run on, as an affinity list: `0`, `0-1`, `0,2` (among those
    /// the process may run on).
    #[arg(long, conflicts_with = "verify")]
    cpus: Option<String>,
    /// The memory manager behind the collector.
    #[arg(long, value_enum, default_value_t = Heap::Loam)]
    heap: Heap,
    /// Stop the world to begin and end every mark
    /// (`RuntimeBuilder::ragged_handshakes(false)`), as the `GlobalAlloc`
    /// heaps always do; by default loam's pages use ragged cycles.
    #[arg(long)]
    stopped_cycles: bool,
    /// Run exactly N tests on one worker with a fixed seed and print a
    /// checksum, to check a build against a reference.
    #[arg(long, value_name = "N", conflicts_with = "json")]
    verify: Option<u64>,
    /// Run every heap on one CPU and on all CPUs as child processes,
    /// interleaved, and print the table (the default when no other flag
    /// is given; --svg and --rounds imply it). It runs every heap and
    /// picks the workers and CPUs itself.
    #[arg(long, conflicts_with_all = COMPARE_CONFLICTS)]
    compare: bool,
    /// Also draw the --compare table as an SVG bar chart in FILE.
    #[arg(long, value_name = "FILE", conflicts_with_all = COMPARE_CONFLICTS)]
    svg: Option<std::path::PathBuf>,
    /// Rounds of --compare, 1 to 1000 (default 3; each runs every
    /// configuration once).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000), conflicts_with_all = COMPARE_CONFLICTS)]
    rounds: Option<u16>,
    /// One JSON object per run (an array with --compare) instead of text.
    #[arg(long)]
    json: bool,
}

/// What --compare chooses itself: given with it, they were dropped
/// without a word.
const COMPARE_CONFLICTS: [&str; 5] = ["heap", "cpus", "workers", "stopped_cycles", "verify"];

/// `--seconds`: a run long enough to finish a test and short enough that
/// the deadline stays a time this process can compute.
fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if (0.1..=1e6).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} is not between 0.1 and 1000000"))
    }
}

// ---- the unit tests

#[derive(Trace)]
struct Record {
    key: u64,
    index: i32,
    tag: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    List,
    Dictionary,
    String,
}

const KINDS: [Kind; 3] = [Kind::List, Kind::Dictionary, Kind::String];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A test's result: its checksum, or what was wrong.
type Outcome = Result<u64, String>;

fn list_test<'gc>(mc: &Mutation<'gc>, rng: &mut Rng) -> Outcome {
    const N: usize = 1000;
    let list: GcList<Gc<Record>> = GcList::with_capacity(mc, 0);
    let mut key_sum = 0_u64;
    for i in 0..N {
        let key = rng.next() % 1_000_000;
        key_sum = key_sum.wrapping_add(key);
        list.push(
            mc,
            mc.alloc(Record {
                key,
                index: i as i32,
                tag: (key % 7) as i32,
            }),
        );
    }
    list.sort_by_key(mc, |r| r.key);
    // Order-dependent checksum; sortedness and the keys' sum checked; the
    // keys at even positions summed for after the removal.
    let (mut check, mut sum, mut even_sum, mut prev) = (0_u64, 0_u64, 0_u64, 0_u64);
    for (i, r) in list.iter().enumerate() {
        if r.key < prev {
            return Err(format!("list: not sorted at {i}"));
        }
        if r.tag != (r.key % 7) as i32 {
            return Err(format!("list: record {} damaged", r.index));
        }
        prev = r.key;
        check = check.wrapping_mul(31).wrapping_add(r.key ^ r.index as u64);
        sum = sum.wrapping_add(r.key);
        if i % 2 == 0 {
            even_sum = even_sum.wrapping_add(r.key);
        }
    }
    if sum != key_sum || list.len() != N {
        return Err("list: records lost in the sort".into());
    }
    // Every odd index removed in place.
    let mut position = 0;
    list.retain(mc, |_| {
        position += 1;
        position % 2 == 1
    });
    let after: u64 = list.iter().fold(0, |s, r| s.wrapping_add(r.key));
    if list.len() != N / 2 || after != even_sum {
        return Err("list: the wrong records removed".into());
    }
    Ok(check)
}

/// A reused buffer for the strings a test compares against.
#[derive(Default)]
struct Scratch(String);

impl Scratch {
    /// The dictionary test's key `k<i>_<hex>`.
    fn key(&mut self, i: u64, salt: u64) -> &str {
        self.write(format_args!("k{i}_{:x}", i.wrapping_mul(salt) >> 40))
    }

    fn write(&mut self, args: std::fmt::Arguments<'_>) -> &str {
        use std::fmt::Write;
        self.0.clear();
        self.0.write_fmt(args).expect("writing to a String");
        &self.0
    }
}

fn dictionary_test<'gc>(mc: &Mutation<'gc>, rng: &mut Rng) -> Outcome {
    const N: u64 = 1000;
    let salt = rng.next();
    let dict: GcDictionary<GcString, Gc<Record>> = GcDictionary::new(mc);
    // Lookup keys are written into one reused buffer: the test measures
    // the managed heap, not the system allocator behind `format!`.
    let mut key = Scratch::default();
    for i in 0..N {
        dict.insert(
            mc,
            gc_format!(mc, "k{i}_{:x}", i.wrapping_mul(salt) >> 40),
            mc.alloc(Record {
                key: i,
                index: i as i32,
                tag: 0,
            }),
        );
    }
    let mut check = 0_u64;
    for i in 0..N {
        match dict.get(key.key(i, salt)) {
            Some(r) if r.key == i => check = check.wrapping_mul(31).wrapping_add(r.key),
            _ => return Err(format!("dictionary: key {i} lost")),
        }
    }
    for i in (0..N).step_by(2) {
        if dict.remove(mc, key.key(i, salt)).is_none() {
            return Err(format!("dictionary: key {i} not removed"));
        }
    }
    for i in 0..N {
        let found = dict.get(key.key(i, salt)).map(|r| r.key);
        if found != (i % 2 == 1).then_some(i) {
            return Err(format!("dictionary: key {i} after the removals: {found:?}"));
        }
    }
    if dict.len() != (N / 2) as usize {
        return Err("dictionary: wrong length".into());
    }
    Ok(check ^ salt)
}

fn string_test<'gc>(mc: &Mutation<'gc>, rng: &mut Rng) -> Outcome {
    const N: u64 = 200;
    let base = rng.next() % 10_000;
    let b = GcStringBuilder::new(mc);
    for i in 0..N {
        b.push_fmt(mc, format_args!("item{i}={};", base + i));
    }
    let text = b.finish(mc);
    let parts = text.split(mc, ';');
    if parts.len() != N as usize + 1 || !parts.last().is_some_and(|p| p.is_empty()) {
        return Err(format!("string: {} parts", parts.len()));
    }
    let mut prev: Option<GcString> = None;
    let mut check = 0_u64;
    let mut expected = Scratch::default();
    for (i, part) in parts.iter().take(N as usize).enumerate() {
        let Some(eq) = part.find('=') else {
            return Err(format!("string: part {i} has no '='"));
        };
        let (name, value) = (part.substring(mc, ..eq), part.substring(mc, eq + 1..));
        if name != expected.write(format_args!("item{i}")) || prev == Some(name) {
            return Err(format!("string: name {name} at {i}"));
        }
        match value.parse::<u64>() {
            Ok(n) if n == base + i as u64 => check = check.wrapping_mul(31).wrapping_add(n),
            _ => return Err(format!("string: value {value} at {i}")),
        }
        prev = Some(name);
    }
    Ok(check)
}

fn run_test(mc: &Mutation<'_>, kind: Kind, rng: &mut Rng) -> Outcome {
    match kind {
        Kind::List => list_test(mc, rng),
        Kind::Dictionary => dictionary_test(mc, rng),
        Kind::String => string_test(mc, rng),
    }
}

// ---- one run

/// What one run measured (`--json` prints it).
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Report {
    heap: String,
    /// Whether `--stopped-cycles` was given.
    #[serde(default)]
    stopped_cycles: bool,
    workers: usize,
    cpus: String,
    seconds: f64,
    ops: u64,
    ops_per_sec: f64,
    tests: Tests,
    gc_cycles: u64,
    /// Of them, cycles that began their marks with handshakes, no stop of
    /// the world (`GcStats::ragged_cycles`; an end may still have fallen
    /// back to a stop).
    #[serde(default)]
    ragged_cycles: u64,
    /// Pauses as the mutators saw them (`GcStats::mutator_pauses`): every
    /// interval a worker was held, time-to-safepoint included.
    max_pause_us: u64,
    p99_pause_us: u64,
    p50_pause_us: u64,
    pauses: u64,
    held_ms: f64,
    /// `held_ms` by cause, as `GcStats` splits it.
    #[serde(default)]
    held_by: HeldBy,
    /// The collector's own longest pause (stopped world only).
    gc_max_pause_us: u64,
    peak_rss_kb: u64,
    user_cpu_s: f64,
    system_cpu_s: f64,
}

/// What held the workers, in milliseconds (`GcStats::held_at_safepoint`
/// and the rest).
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
struct HeldBy {
    safepoint_ms: f64,
    pacing_ms: f64,
    memory_ms: f64,
    assisting_ms: f64,
    /// Waiting for the finalizer (reports written before it counted
    /// read as none).
    #[serde(default)]
    drops_ms: f64,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
struct Tests {
    list: u64,
    dictionary: u64,
    string: u64,
}

/// Set by SIGINT: the workers stop and the summary is printed.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
    // A second Ctrl-C ends the process, should the run's end hang.
    // SAFETY: `signal` is async-signal-safe; the default needs no state.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
}

/// `c`, if an affinity set can name it (checked before a range is
/// expanded: `0-4000000000` was a 32 GB list).
fn in_range(c: usize) -> Result<usize, String> {
    if c < libc::CPU_SETSIZE as usize {
        Ok(c)
    } else {
        Err(format!(
            "--cpus: CPU {c} is out of range (at most {})",
            libc::CPU_SETSIZE - 1
        ))
    }
}

/// The CPUs of an affinity list (`0`, `0-1`, `0,2`).
fn parse_cpus(list: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("--cpus: `{part}` is not a CPU number or range");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                cpus.extend(in_range(a)?..=in_range(b)?);
            }
            None => cpus.push(in_range(part.parse().map_err(|_| bad())?)?),
        }
    }
    if cpus.is_empty() {
        return Err("--cpus: no CPU given".into());
    }
    Ok(cpus)
}

/// Peak RSS (KiB) and user and system CPU seconds of this process. The
/// peak is `VmHWM`, this program's own high-water mark: `ru_maxrss` would
/// carry the forking parent's peak across `exec` into a `--compare` child.
fn usage() -> (u64, f64, f64) {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        });
    (
        hwm.unwrap_or(ru.ru_maxrss as u64),
        secs(ru.ru_utime),
        secs(ru.ru_stime),
    )
}

fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// What the test tasks of a run share.
#[derive(Clone, Copy)]
struct Shared<'a> {
    counts: &'a [AtomicU64; 3],
    failed: &'a std::sync::Mutex<Option<String>>,
    stop: &'a AtomicBool,
    seed: u64,
}

/// One unit test as a pool task, on whichever worker took it: runs it (one
/// `mutate` call), counts it, and unless the run is over spawns the next.
fn test_task<'s>(scope: &ManagedScope<'s>, m: &mut Mutator, shared: &'s Shared<'s>, n: u64) {
    if shared.stop.load(Ordering::Relaxed) {
        return;
    }
    let mut rng = Rng(shared.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let k = (rng.next() % 3) as usize;
    // A panic (an allocation past a heap limit, say) ends the run at once
    // with its message, as a failed check does: caught, the scope ran the
    // other chains on to the end of `--seconds` before it said so.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.mutate(|mc| run_test(mc, KINDS[k], &mut rng))
    }))
    .unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a payload that is not a string)".into());
        Err(format!("a {:?} test panicked: {msg}", KINDS[k]))
    });
    match outcome {
        Ok(_) => {
            shared.counts[k].fetch_add(1, Ordering::Relaxed);
            scope.spawn(move |scope, m| test_task(scope, m, shared, n + 1));
        }
        Err(e) => {
            shared.failed.lock().unwrap().get_or_insert(e);
            shared.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs the workers for `seconds` (or until Ctrl-C) and reports.
fn run(cli: &Cli, seconds: f64) -> Result<Report, String> {
    if let Some(list) = &cli.cpus {
        support::set_affinity(&parse_cpus(list)?).map_err(|e| format!("--cpus: {e}"))?;
    }
    let cpus = support::allowed_cpus();
    let workers = cli.workers.map_or(cpus.len(), usize::from).max(1);
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let rt = cli.heap.runtime(cli.stopped_cycles)?;
    let counts: [AtomicU64; 3] = Default::default();
    let failed: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let stop = AtomicBool::new(false);
    let live = (!cli.json).then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("a valid template"),
        );
        bar
    });
    let pool = ManagedPool::builder(&rt)
        .num_threads(workers)
        .build()
        .map_err(|e| format!("starting {workers} workers: {e}"))?;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let shared = Shared {
        counts: &counts,
        failed: &failed,
        stop: &stop,
        seed: start.elapsed().as_nanos() as u64 ^ std::process::id() as u64,
    };
    std::thread::scope(|s| {
        // One chain of test tasks per worker: each task runs one test and
        // spawns the next into the pool, as the seed's framework queues its
        // unit tests; the scope ends when every chain has seen `stop`.
        let (shared, pool) = (&shared, &pool);
        s.spawn(move || {
            pool.scope(|scope, _m| {
                for chain in 0..workers as u64 {
                    scope.spawn(move |scope, m| test_task(scope, m, shared, chain << 40));
                }
            })
        });
        // The live line, once a second; the end of the run.
        let total = || {
            counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<u64>()
        };
        let (mut last, mut last_at) = (0, Instant::now());
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(
                Duration::from_millis(100).min(end.saturating_duration_since(Instant::now())),
            );
            if Instant::now() >= end || INTERRUPTED.load(Ordering::Relaxed) {
                stop.store(true, Ordering::Relaxed);
            }
            if let Some(bar) = &live {
                if last_at.elapsed() >= Duration::from_secs(1) {
                    let now = total();
                    let rate = (now - last) as f64 / last_at.elapsed().as_secs_f64();
                    bar.set_message(format!(
                        "{rate:>10.0} ops/s  ({now} tests, {} GC cycles)",
                        rt.stats().cycles
                    ));
                    (last, last_at) = (now, Instant::now());
                }
                bar.tick();
            }
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(bar) = &live {
        bar.finish_and_clear();
    }
    if let Some(e) = failed.into_inner().unwrap() {
        return Err(format!("a test failed: {e}"));
    }
    let n = |k: usize| counts[k].load(Ordering::Relaxed);
    let ops = n(0) + n(1) + n(2);
    let stats = rt.stats();
    let (peak_rss_kb, user_cpu_s, system_cpu_s) = usage();
    let us = |d: Duration| d.as_micros() as u64;
    Ok(Report {
        heap: cli.heap.name().into(),
        stopped_cycles: cli.stopped_cycles,
        workers,
        cpus: cpu_list(&cpus),
        seconds: elapsed,
        ops,
        ops_per_sec: ops as f64 / elapsed,
        tests: Tests {
            list: n(0),
            dictionary: n(1),
            string: n(2),
        },
        gc_cycles: stats.cycles,
        ragged_cycles: stats.ragged_cycles,
        max_pause_us: us(stats.mutator_pauses.max()),
        p99_pause_us: us(stats.mutator_pauses.p99()),
        p50_pause_us: us(stats.mutator_pauses.p50()),
        pauses: stats.mutator_pauses.count(),
        held_ms: stats.mutator_pauses.total().as_secs_f64() * 1e3,
        held_by: HeldBy {
            safepoint_ms: stats.held_at_safepoint.as_secs_f64() * 1e3,
            pacing_ms: stats.held_by_pacing.as_secs_f64() * 1e3,
            memory_ms: stats.held_for_memory.as_secs_f64() * 1e3,
            assisting_ms: stats.held_assisting.as_secs_f64() * 1e3,
            drops_ms: stats.held_for_drops.as_secs_f64() * 1e3,
        },
        gc_max_pause_us: us(stats.pauses.max()),
        peak_rss_kb,
        user_cpu_s,
        system_cpu_s,
    })
}

fn print_report(r: &Report) {
    println!(
        "heap {}{}, {} workers on CPUs {}, {:.1} s",
        r.heap,
        if r.stopped_cycles {
            ", stopped cycles"
        } else {
            ""
        },
        r.workers,
        r.cpus,
        r.seconds
    );
    println!(
        "  {:.0} ops/s ({} tests: {} list, {} dictionary, {} string)",
        r.ops_per_sec, r.ops, r.tests.list, r.tests.dictionary, r.tests.string
    );
    println!(
        "  {} GC cycles ({} ragged); workers held {} times, {:.1} ms in all ({:.1} at safepoints, {:.1} pacing, \
         {:.1} for memory, {:.1} assisting, {:.1} for destructors), max {:.3} / p99 {:.3} / p50 {:.3} ms \
         (the collector's longest stop {:.3} ms)",
        r.gc_cycles,
        r.ragged_cycles,
        r.pauses,
        r.held_ms,
        r.held_by.safepoint_ms,
        r.held_by.pacing_ms,
        r.held_by.memory_ms,
        r.held_by.assisting_ms,
        r.held_by.drops_ms,
        r.max_pause_us as f64 / 1e3,
        r.p99_pause_us as f64 / 1e3,
        r.p50_pause_us as f64 / 1e3,
        r.gc_max_pause_us as f64 / 1e3,
    );
    println!(
        "  peak RSS {:.1} MiB, CPU {:.2} s user, {:.2} s system",
        r.peak_rss_kb as f64 / 1024.0,
        r.user_cpu_s,
        r.system_cpu_s
    );
}

// ---- --verify

/// Exactly `n` tests on one worker of a managed pool, from a fixed seed:
/// the checksum of their results.
fn verify(n: u64, heap: Heap, stopped: bool) -> Result<u64, String> {
    let rt = heap.runtime(stopped)?;
    let pool = ManagedPool::builder(&rt)
        .num_threads(1)
        .build()
        .map_err(|e| format!("starting the worker: {e}"))?;
    pool.install(|m| {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut check = 0_u64;
        for t in 0..n {
            let k = (rng.next() % 3) as usize;
            let c = m
                .mutate(|mc| run_test(mc, KINDS[k], &mut rng))
                .map_err(|e| format!("test {t}: {e}"))?;
            check = check.rotate_left(7) ^ c ^ k as u64;
        }
        Ok(check)
    })
}

// ---- --compare

/// A row of the compare table: a heap, and whether its cycles stop the
/// world (`--stopped-cycles`).
#[derive(Clone, Copy)]
struct Setup {
    heap: Heap,
    stopped: bool,
}

impl Setup {
    /// The table's rows: loam as it comes (ragged cycles), then every heap
    /// with stopped cycles, loam's pages first (a `GlobalAlloc` space's
    /// cycles stop the world either way; the flag says so).
    fn all() -> Vec<Setup> {
        let mut rows = vec![Setup {
            heap: Heap::Loam,
            stopped: false,
        }];
        rows.extend(Heap::ALL.iter().map(|&heap| Setup {
            heap,
            stopped: true,
        }));
        rows
    }

    fn name(self) -> String {
        match (self.heap, self.stopped) {
            (Heap::Loam, true) => "loam, stopped cycles".into(),
            (heap, _) => heap.name().into(),
        }
    }
}

/// One child run of this program, its JSON report.
fn child(setup: Setup, cpus: &[usize], seconds: f64) -> Result<Report, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args([
            "--heap",
            setup.heap.name(),
            "--json",
            "--seconds",
            &seconds.to_string(),
        ])
        .args(setup.stopped.then_some("--stopped-cycles"))
        .args([
            "--cpus",
            &cpu_list(cpus),
            "--workers",
            &cpus.len().to_string(),
        ])
        .output()
        .map_err(|e| format!("cannot start a child run: {e}"))?;
    if !out.status.success() {
        // The status too: a child the OS killed (out of memory) printed
        // nothing.
        return Err(format!(
            "a child run ({}, CPUs {cpus:?}) failed ({}): {}",
            setup.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("a child run's report: {e}"))
}

fn compare(cli: &Cli, seconds: f64) -> Result<(), String> {
    let all = support::allowed_cpus();
    let cpu_sets = [all[..1].to_vec(), all.clone()];
    // One configuration per row and CPU set; `reports[h][c]` its runs.
    let setups = Setup::all();
    let configs: Vec<(usize, usize)> = (0..setups.len())
        .flat_map(|h| (0..cpu_sets.len()).map(move |c| (h, c)))
        .collect();
    let mut reports: Vec<Vec<Vec<Report>>> = vec![vec![Vec::new(); cpu_sets.len()]; setups.len()];
    let rounds = cli.rounds.map_or(3, usize::from);
    let stderr_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    for round in 0..rounds {
        // Every other round backwards, and rotated every two rounds
        // (`support::round_order`): a drift of the machine over the run
        // (warming, another load) then falls on each configuration alike,
        // where a rotation alone kept each near the same place in every
        // round (and a rotation by the round with odd rounds reversed kept
        // an even count of configurations in one order).
        for i in support::round_order(round, configs.len()) {
            let (h, c) = configs[i];
            if !cli.json {
                let what = format!(
                    "round {}/{rounds}: {} on {} ...",
                    round + 1,
                    setups[h].name(),
                    if c == 0 { "1 CPU" } else { "all CPUs" }
                );
                // One line rewritten in place on a terminal; a line each
                // where stderr goes to a file or a pipe, which would keep
                // every carriage return.
                if stderr_is_terminal {
                    eprint!("\r{what:70}");
                } else {
                    eprintln!("{what}");
                }
            }
            reports[h][c].push(child(setups[h], &cpu_sets[c], seconds)?);
        }
    }
    let med = |h: usize, c: usize, f: &dyn Fn(&Report) -> f64| {
        median(reports[h][c].iter().map(f).collect())
    };
    let chart = |rows: &[(String, [f64; 2])]| -> Result<(), String> {
        match &cli.svg {
            Some(path) => std::fs::write(path, svg_chart(rows, all.len()))
                .map_err(|e| format!("writing {}: {e}", path.display())),
            None => Ok(()),
        }
    };
    if cli.json {
        let flat: Vec<&Report> = reports.iter().flatten().flatten().collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&flat).map_err(|e| e.to_string())?
        );
        // The chart too (`--svg` with `--json` wrote none before).
        let rows: Vec<_> = setups
            .iter()
            .enumerate()
            .map(|(h, setup)| {
                let ops = [med(h, 0, &|r| r.ops_per_sec), med(h, 1, &|r| r.ops_per_sec)];
                (setup.name(), ops)
            })
            .collect();
        return chart(&rows);
    }
    if stderr_is_terminal {
        eprint!("\r{:70}\r", "");
    }
    // Ratios are medians of per-round ratios (runs of one round are
    // neighbours in time).
    let per_round = |a: &[Report], b: &[Report]| {
        median(
            a.iter()
                .zip(b)
                .map(|(x, y)| x.ops_per_sec / y.ops_per_sec)
                .collect(),
        )
    };
    println!(
        "GC speed tester: {rounds} rounds of {seconds} s per configuration, interleaved; medians ({} CPUs here)",
        all.len()
    );
    println!("| heap | ops/s, 1 CPU | ops/s, all CPUs | all / 1 CPU | loam / heap, all CPUs | peak RSS MiB (1 / all) | longest a worker was held, ms (1 / all) |");
    println!("|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for (h, setup) in setups.iter().enumerate() {
        let ops = [med(h, 0, &|r| r.ops_per_sec), med(h, 1, &|r| r.ops_per_sec)];
        let scaling = per_round(&reports[h][1], &reports[h][0]);
        let vs = per_round(&reports[0][1], &reports[h][1]);
        let rss = |c| med(h, c, &|r| r.peak_rss_kb as f64) / 1024.0;
        let pause = |c| med(h, c, &|r| r.max_pause_us as f64) / 1e3;
        println!(
            "| {} | {:.0} | {:.0} | {scaling:.2}x | {vs:.2}x | {:.1} / {:.1} | {:.2} / {:.2} |",
            setup.name(),
            ops[0],
            ops[1],
            rss(0),
            rss(1),
            pause(0),
            pause(1)
        );
        rows.push((setup.name(), ops));
    }
    println!(
        "loam: the runtime's default, ragged cycles; every other row stops the world to begin and \
         end its marks (a GlobalAlloc heap's cycles always do), so \"loam, stopped cycles\" \
         against them compares the memory managers alone"
    );
    chart(&rows)?;
    if let Some(path) = &cli.svg {
        println!("chart: {}", path.display());
    }
    Ok(())
}

/// The compare table as a bar chart: ops/s per heap, one CPU and all.
fn svg_chart(rows: &[(String, [f64; 2])], cpus: usize) -> String {
    let (w, h, left, top, bar) = (640.0, 60.0 + rows.len() as f64 * 56.0, 150.0, 40.0, 20.0);
    let max = rows.iter().flat_map(|r| r.1).fold(1.0_f64, f64::max);
    let scale = (w - left - 80.0) / max;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <text x=\"{left}\" y=\"20\" font-size=\"14\">GC speed tester: ops/s, 1 CPU (light) and {cpus} CPUs (dark)</text>\n"
    );
    for (i, (name, ops)) in rows.iter().enumerate() {
        let y = top + i as f64 * 56.0;
        out += &format!("<text x=\"8\" y=\"{}\">{name}</text>\n", y + bar + 4.0);
        for (k, (value, colour)) in ops.iter().zip(["#9ecae1", "#3182bd"]).enumerate() {
            let yk = y + k as f64 * (bar + 2.0);
            out += &format!(
                "<rect x=\"{left}\" y=\"{yk}\" width=\"{:.1}\" height=\"{bar}\" fill=\"{colour}\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\">{value:.0}</text>\n",
                value * scale,
                left + value * scale + 4.0,
                yk + bar - 6.0
            );
        }
    }
    out + "</svg>\n"
}

fn main() -> ExitCode {
    let no_flags = std::env::args().len() == 1;
    support::quiet_sigpipe();
    let cli: Cli = support::parse_args();
    let bad_input = |msg: String| {
        eprintln!(
            "error: {msg}\n\n{}",
            <Cli as clap::CommandFactory>::command().render_usage()
        );
        ExitCode::from(2)
    };
    if let Some(list) = cli.cpus.as_deref() {
        // CPUs this process may run on only: the kernel refused an
        // affinity set with none of them, and quietly cut one with some.
        let allowed = support::allowed_cpus();
        match parse_cpus(list) {
            Err(e) => return bad_input(e),
            Ok(cpus) => {
                if let Some(c) = cpus.iter().find(|c| !allowed.contains(c)) {
                    return bad_input(format!(
                        "--cpus: CPU {c} is not one this process may run on ({})",
                        cpu_list(&allowed)
                    ));
                }
            }
        }
    }
    // The chart's file is opened for writing before the rounds (not
    // truncated: a chart already there stays until the new one is
    // written): a path that cannot be written is said now, not after them.
    if let Some(path) = &cli.svg {
        if let Err(e) = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
        {
            return bad_input(format!("--svg: cannot write {}: {e}", path.display()));
        }
    }
    let result = if let Some(n) = cli.verify {
        verify(n, cli.heap, cli.stopped_cycles).map(|c| println!("{n} tests, checksum {c:016x}"))
    } else if cli.compare || cli.svg.is_some() || cli.rounds.is_some() || no_flags {
        compare(&cli, cli.seconds.unwrap_or(1.5))
    } else {
        run(&cli, cli.seconds.unwrap_or(10.0)).map(|r| {
            if cli.json {
                println!(
                    "{}",
                    serde_json::to_string(&r).expect("a report serialises")
                );
            } else {
                print_report(&r);
            }
        })
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
