//! `alloc_bench`: loam's heap against System (glibc malloc), mimalloc,
//! jemalloc and snmalloc on the seed workloads, in one process, interleaved.
//! "Best peer" in the ratios is the best of mimalloc, jemalloc, snmalloc
//! and TCMalloc (gperftools' `libtcmalloc_minimal`, loaded at run time
//! where it is installed: `apt install libtcmalloc-minimal4`; without it
//! the run says so and leaves it out).
//!
//! Every allocator is a `static` instance called through `GlobalAlloc`
//! (`alloc`/`dealloc`/`realloc` with explicit `Layout`s); none of them is the
//! process's `#[global_allocator]`, which stays `System` and serves only the
//! harness (argument parsing, the result tables, the replay's bookkeeping
//! ring). The workloads are generic over `A: GlobalAlloc + Sync + 'static`,
//! so each allocator gets its own monomorphized copy with no dynamic dispatch
//! on the hot path.
//!
//! # Command lines
//!
//! ```text
//! # everything: treesum, xmalloc, larson, larson-ring (1 and 2 threads) and
//! # replay, 5 rounds;
//! # about 5 minutes on a busy 2-core machine, most of it in replay
//! cargo run --release --example alloc_bench
//! # quick check, about a twentieth of the default sizes
//! cargo run --release --example alloc_bench -- --scale 0.05 --rounds 2
//! # one workload, one thread count, a subset of the allocators
//! cargo run --release --example alloc_bench -- --workload xmalloc --threads 2 --alloc loam,mimalloc
//! # machine-readable medians
//! cargo run --release --example alloc_bench -- --json > alloc_bench.json
//! ```
//!
//! Flags: `--workload treesum|xmalloc|larson|larson-ring|replay|all` (default `all`; a
//! comma-separated list also works),
//! `--threads N` (default: run 1 and 2), `--alloc
//! loam,system,mimalloc,jemalloc,snmalloc,tcmalloc` (default: all of them,
//! TCMalloc where the machine has it), `--scale F` (default 1.0, at most
//! 10), `--rounds R` (default 5), `--json`, `--verbose` (every run and its
//! phases on stderr).
//!
//! # Workloads
//!
//! - `treesum`: Intel TBB's `tree_sum` example (seed 001). A binary tree of
//!   10,000,000 × scale `#[repr(C)]` nodes `{ f32 value, left, right }`
//!   (24 bytes each) is built as TBB builds it: the root, then its left half
//!   serially, then its right half in parallel (split in halves for four
//!   levels, each reseeded, so the tree is the same at any thread count; while
//!   more than one of the N threads is left for a subtree, its left half is
//!   built on a `std::thread::scope` thread). Then `SerialSumTree`, a
//!   parallel sum split the same way over N threads (the two sums must agree
//!   bit for bit: the additions happen in the same order), then every node is
//!   freed serially. Each phase is timed (`--verbose`, JSON `phases`); the
//!   headline is the total in ms. ops = nodes. TBB's node also has a
//!   `node_count` (32 bytes); the spec's three fields make it 24.
//! - `xmalloc`: the seed-000 pattern of a garbage-collected framework: N
//!   producer threads allocate small objects with sizes drawn from the seed-003
//!   `getmem` table (<16 B: 28.3M, <32: 10.9M, <64: 8.4M, <128: 248k, <512:
//!   904, …; uniform within a bucket), stamp a byte at each end, and send them
//!   in batches of 256 over a bounded channel to ONE collector thread that
//!   checks the stamps and frees every object. The total (10,000,000 × scale
//!   allocations) is fixed and split over the producers, so Mops/s compares
//!   across thread counts. At `--threads 1` there are still two OS threads
//!   (one producer and the collector): that is the seed pattern, in which the
//!   collector frees what another thread allocated. ops = allocations.
//! - `larson`: Larson and Krishnan's server benchmark as mimalloc-bench runs
//!   it: each of N threads replaces random slots of a 5,000-slot array
//!   (8 – 999 bytes) and after 500,000 replacements starts a new thread,
//!   hands it the array and exits, so about 1% of the frees are of blocks
//!   an exited thread allocated (the `larson` module says where it departs
//!   from mimalloc-bench). 10,000,000 × scale replacements in all, split
//!   over the threads. ops = replacements.
//! - `larson-ring`: the same replacements between live threads: N threads
//!   with 10,000-slot arrays (16 – 256 bytes) hand them on around a ring
//!   every 20,000 replacements, so about 37% of the frees are remote at two
//!   threads. ops = replacements.
//! - `replay`: the seed-003 single-threaded "data compiler" profile: 47.9M ×
//!   scale allocations with sizes from its `getmem` table, one realloc per
//!   eight allocations (new sizes from its `reallocmem` table; seven in eight
//!   to one of the 64 most recent blocks, the rest to any live block), and
//!   frees that keep the requested live bytes on a target following four
//!   waves (crests 0.55, 0.8, 1.0 and 0.7 of 150 MB × scale, troughs 0.25):
//!   30 in 32 free one of the 64 most recent blocks (temporaries; newest
//!   first when the live set shrinks), one in 32 the oldest (a structure built
//!   long ago being discarded), one in 32 a random live block
//!   (fragmentation). Then everything left is freed. The trace comes from a
//!   seeded PRNG, so every allocator replays exactly the same operations.
//!   ops = allocations + reallocations + frees; the headline is ms and peak
//!   RSS.
//!
//! `--scale` sizes them all (treesum nodes, xmalloc allocations, larson
//! replacements, replay operations and live set), so `--scale 0.05` is a
//! quick run.
//!
//! # Method
//!
//! - Interleaving: for each (workload, thread count), round r runs every
//!   selected allocator once, in an order rotated every two rounds and
//!   reversed in odd ones (`support::round_order`), so the drift of a noisy
//!   machine hits all alike. Each run's workload executes on a fresh thread
//!   (plus the threads it spawns), so no allocator's thread cache outlives a
//!   run.
//! - Reported numbers are the MEDIAN over the rounds per (workload, alloc,
//!   threads); the spread column gives the fastest and slowest round relative
//!   to the median time. Ratios are time ratios from the medians of the same
//!   process (below 1.00x means faster): against System and against the best
//!   of the scalable peers (mimalloc, jemalloc, snmalloc and TCMalloc, those
//!   that ran). `vs 1t` is the throughput at N threads divided
//!   by the throughput at 1 thread (above 1.00x means it scales).
//! - Peak RSS per run, in one process: before a run the harness writes `5` to
//!   `/proc/self/clear_refs` (which resets the kernel's high-water mark VmHWM
//!   to the current RSS) and records VmRSS as the baseline; after the run it
//!   reads VmHWM from `/proc/self/status`. growth = VmHWM − baseline: the
//!   run's own peak growth; memory the other allocators keep is part of the
//!   baseline and does not count. The harness checks at start-up that the
//!   reset works; if it does not, a thread samples `/proc/self/statm` every
//!   millisecond instead (the table says which method was used).
//! - Release and kept memory: after each run the harness asks the allocator
//!   that ran to hand back what it holds (`loam::heap::collect()`,
//!   `malloc_trim(0)` for glibc, `mi_collect(true)` for mimalloc, an
//!   `arena.<all>.purge` mallctl for jemalloc) so its next run starts nearly
//!   cold. Whatever is still resident after that (RSS after the release minus
//!   the run's baseline, accumulated per allocator: glibc, for one, never
//!   trims the top of a thread arena) is that allocator's *kept* memory. Its
//!   next run reuses it, so the run's growth alone would flatter it; the
//!   reported peak RSS is therefore growth + kept (the allocator's footprint
//!   at the run's peak), and the JSON also gives `rss_growth_kb` and
//!   `rss_kept_kb` separately. Kept memory is measured right after the
//!   release call: memory an allocator hands back later, on a timer, still
//!   counts against it. glibc is trimmed before every run's baseline and
//!   after every release, whichever allocator ran: the harness's own
//!   buffers come from it, and count as every run's growth alike.

use std::alloc::{handle_alloc_error, GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, VecDeque};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use serde::Serialize;

// ---------------------------------------------------------------------------
// The allocators under test
// ---------------------------------------------------------------------------

/// loam's heap, called through `GlobalAlloc` like the others.
static LOAM: loam::heap::LoamAlloc = loam::heap::LoamAlloc;
static SYSTEM: System = System;
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
/// snmalloc, the message-passing allocator whose remote-free design loam's
/// batches follow.
static SNMALLOC: snmalloc_rs::SnMalloc = snmalloc_rs::SnMalloc;
static TCMALLOC: tcmalloc::Tcmalloc = tcmalloc::Tcmalloc;

#[path = "../benches/support/tcmalloc.rs"]
mod tcmalloc;

// The examples' command-line helpers (the rest of it is for the
// managed-heap examples).
#[allow(dead_code)]
#[path = "support/mod.rs"]
mod support;

extern "C" {
    /// mimalloc: free what can be freed and return empty segments to the OS.
    fn mi_collect(force: bool);
    /// jemalloc's `mallctl`, under the `_rjem_` prefix tikv-jemalloc-sys uses
    /// on Linux so that it can live beside glibc malloc.
    #[link_name = "_rjem_mallctl"]
    fn jemalloc_mallctl(
        name: *const libc::c_char,
        oldp: *mut libc::c_void,
        oldlenp: *mut usize,
        newp: *mut libc::c_void,
        newlen: usize,
    ) -> libc::c_int;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
enum AllocKind {
    Loam,
    System,
    Mimalloc,
    Jemalloc,
    Snmalloc,
    Tcmalloc,
}

impl AllocKind {
    fn name(self) -> &'static str {
        match self {
            AllocKind::Loam => "loam",
            AllocKind::System => "system",
            AllocKind::Mimalloc => "mimalloc",
            AllocKind::Jemalloc => "jemalloc",
            AllocKind::Snmalloc => "snmalloc",
            AllocKind::Tcmalloc => "tcmalloc",
        }
    }

    /// The peers loam is compared against ("best peer"): every allocator
    /// but loam and the system's.
    fn is_peer(self) -> bool {
        !matches!(self, AllocKind::Loam | AllocKind::System)
    }

    /// Asks the allocator to return the memory it keeps, so its next run
    /// starts cold. Only the allocator that ran is asked: a release by
    /// another would show up as this one's kept memory shrinking.
    fn release_retained(self) {
        match self {
            AllocKind::Mimalloc => {
                // SAFETY: `mi_collect` takes no pointers and may be called
                // from any thread at any time.
                unsafe { mi_collect(true) };
            }
            AllocKind::Jemalloc => {
                // 4096 is MALLCTL_ARENAS_ALL: purge the unused dirty pages of
                // every arena.
                let name = c"arena.4096.purge";
                // SAFETY: `name` is a NUL-terminated string that outlives the
                // call; "arena.<i>.purge" reads and writes no value, so null
                // old/new pointers with zero lengths are what it expects.
                let rc = unsafe {
                    jemalloc_mallctl(
                        name.as_ptr(),
                        ptr::null_mut(),
                        ptr::null_mut(),
                        ptr::null_mut(),
                        0,
                    )
                };
                debug_assert_eq!(rc, 0, "jemalloc purge failed");
            }
            AllocKind::Loam => loam::heap::collect(),
            // snmalloc has no release call in its Rust bindings; what it keeps
            // shows as its "kept" memory.
            AllocKind::Snmalloc => {}
            AllocKind::Tcmalloc => tcmalloc::Tcmalloc::release(),
            // The measure trims glibc after every run.
            AllocKind::System => {}
        }
    }
}

// ---------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
enum WorkloadArg {
    Treesum,
    Xmalloc,
    Larson,
    LarsonRing,
    Replay,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Workload {
    Treesum,
    Xmalloc,
    Larson,
    LarsonRing,
    Replay,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Treesum => "treesum",
            Workload::Xmalloc => "xmalloc",
            Workload::Larson => "larson",
            Workload::LarsonRing => "larson-ring",
            Workload::Replay => "replay",
        }
    }

    /// Whether the headline is a rate (Mops/s) rather than a time (ms).
    fn reports_rate(self) -> bool {
        matches!(
            self,
            Workload::Xmalloc | Workload::Larson | Workload::LarsonRing
        )
    }
}

/// Benchmarks loam's heap against System, mimalloc, jemalloc, snmalloc and
/// TCMalloc (where the machine has it) on the seed workloads (treesum,
/// xmalloc, larson, larson-ring, replay), interleaved in one process.
#[derive(Parser, Debug)]
#[command(name = "alloc_bench")]
struct Cli {
    /// Workload(s) to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    workload: Vec<WorkloadArg>,
    /// Thread count (treesum's parallel phases, xmalloc's producers); default:
    /// run both 1 and 2. replay is single-threaded and always runs at 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: Option<u32>,
    /// Allocators to compare, comma-separated [default: all of them;
    /// tcmalloc where its library is installed].
    #[arg(long, value_enum, value_delimiter = ',')]
    alloc: Option<Vec<AllocKind>>,
    /// Size factor, at most 10: treesum nodes 10M × F, xmalloc allocations
    /// 10M × F, larson and larson-ring replacements 10M × F, replay 47.9M × F
    /// allocations with a live set peaking near
    /// 150 MB × F.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Rounds; each runs every allocator once, in rotating order.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// Print only a JSON array of the medians.
    #[arg(long)]
    json: bool,
    /// Print every run (and treesum's phases) on stderr.
    #[arg(long, short)]
    verbose: bool,
}

// ---------------------------------------------------------------------------
// PRNG and the seed-003 size tables
// ---------------------------------------------------------------------------

/// xorshift64*: fast, deterministic, good enough to pick sizes and victims.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so nearby seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    #[inline]
    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A uniform value in `0..n` from 32 random bits (`n` < 2^32).
    #[inline]
    fn below(bits32: u64, n: usize) -> usize {
        (((bits32 & 0xFFFF_FFFF) * n as u64) >> 32) as usize
    }
}

/// One row of a seed-003 histogram: `count` calls with sizes in `lo..=hi`.
/// The profile's "<32" reads as 17..31, so "<16" is 1..16.
struct Bucket {
    lo: u32,
    hi: u32,
    count: u64,
}

/// Seed 003, `Getmem` calls by block size (47,915,159 in all).
const GETMEM: [Bucket; 10] = [
    Bucket {
        lo: 1,
        hi: 16,
        count: 28_317_517,
    },
    Bucket {
        lo: 17,
        hi: 31,
        count: 10_947_741,
    },
    Bucket {
        lo: 32,
        hi: 63,
        count: 8_400_639,
    },
    Bucket {
        lo: 64,
        hi: 127,
        count: 248_320,
    },
    Bucket {
        lo: 128,
        hi: 511,
        count: 904,
    },
    Bucket {
        lo: 512,
        hi: 1023,
        count: 2,
    },
    Bucket {
        lo: 1024,
        hi: 10_239,
        count: 30,
    },
    Bucket {
        lo: 10_240,
        hi: 102_399,
        count: 5,
    },
    Bucket {
        lo: 102_400,
        hi: 511_999,
        count: 0,
    },
    Bucket {
        lo: 512_000,
        hi: 1_048_576,
        count: 1,
    },
];

/// Seed 003, `Reallocmem` calls by new block size (6,348,579 in all).
const REALLOCMEM: [Bucket; 8] = [
    Bucket {
        lo: 1,
        hi: 16,
        count: 2_606_869,
    },
    Bucket {
        lo: 17,
        hi: 31,
        count: 2_677_423,
    },
    Bucket {
        lo: 32,
        hi: 63,
        count: 490_131,
    },
    Bucket {
        lo: 64,
        hi: 127,
        count: 473_327,
    },
    Bucket {
        lo: 128,
        hi: 511,
        count: 89_195,
    },
    Bucket {
        lo: 512,
        hi: 1023,
        count: 6_224,
    },
    Bucket {
        lo: 1024,
        hi: 10_239,
        count: 5_388,
    },
    Bucket {
        lo: 10_240,
        hi: 102_399,
        count: 22,
    },
];

/// Total `Getmem` calls in the seed-003 profile.
const GETMEM_CALLS: u64 = 47_915_159;

/// A size distribution sampled with one PRNG draw: the high 32 bits pick the
/// bucket by weight, the low 32 bits the size within it.
struct SizeDist {
    /// Cumulative counts; the last equals `total`.
    cum: Vec<u64>,
    lo: Vec<u64>,
    span: Vec<u64>,
    total: u64,
}

impl SizeDist {
    fn new(buckets: &[Bucket]) -> SizeDist {
        let mut cum = Vec::with_capacity(buckets.len());
        let mut total = 0;
        for b in buckets {
            total += b.count;
            cum.push(total);
        }
        assert!(total > 0 && total < 1 << 32);
        SizeDist {
            cum,
            lo: buckets.iter().map(|b| u64::from(b.lo)).collect(),
            span: buckets.iter().map(|b| u64::from(b.hi - b.lo + 1)).collect(),
            total,
        }
    }

    #[inline]
    fn sample(&self, rng: &mut Rng) -> usize {
        let r = rng.next_u64();
        let pick = ((r >> 32) * self.total) >> 32;
        // `pick < total == cum[last]`, so this stops inside the table; most
        // draws stop at the first bucket.
        let mut i = 0;
        while pick >= self.cum[i] {
            i += 1;
        }
        (self.lo[i] + (((r & 0xFFFF_FFFF) * self.span[i]) >> 32)) as usize
    }
}

// ---------------------------------------------------------------------------
// Blocks: raw allocations with a stamp at each end
// ---------------------------------------------------------------------------

/// The layout of a `size`-byte object, aligned as a Rust value of that size
/// would be (1, 2, 4 or 8; never more than its size, which keeps every
/// allocator on its plain-malloc path).
#[inline]
fn layout_for(size: usize) -> Layout {
    let align = if size >= 8 {
        8
    } else if size >= 4 {
        4
    } else if size >= 2 {
        2
    } else {
        1
    };
    debug_assert!((1..=1 << 30).contains(&size));
    // SAFETY: `align` is a power of two, and `size` (at most 1 MiB here)
    // rounded up to it cannot overflow `isize`.
    unsafe { Layout::from_size_align_unchecked(size, align) }
}

/// The byte stamped at both ends of a `size`-byte block.
#[inline]
fn tag(size: usize) -> u8 {
    (size as u8) ^ ((size >> 8) as u8) ^ 0xA5
}

/// A live block: its address and requested size. Owned by whoever holds it.
#[derive(Clone, Copy)]
struct Block {
    ptr: *mut u8,
    size: usize,
}

// SAFETY: a `Block` is the only handle to its allocation (it is moved, never
// shared), and every allocator under test may free a block on a thread other
// than the one that allocated it.
unsafe impl Send for Block {}

impl Block {
    const EMPTY: Block = Block {
        ptr: ptr::null_mut(),
        size: 0,
    };

    /// Allocates `size` bytes and stamps both ends.
    #[inline]
    fn alloc<A: GlobalAlloc>(alloc: &A, size: usize) -> Block {
        let layout = layout_for(size);
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc.alloc(layout) };
        if ptr.is_null() {
            handle_alloc_error(layout);
        }
        let t = tag(size);
        // SAFETY: `ptr` is a fresh allocation of `size` >= 1 bytes, so its
        // first and last bytes are writable.
        unsafe {
            ptr.write(t);
            ptr.add(size - 1).write(t);
        }
        Block { ptr, size }
    }

    /// Allocates `size` bytes and stamps the first byte only, as larson
    /// writes its blocks (the last byte's line, another cache miss for
    /// most sizes, stays untouched).
    #[inline]
    fn alloc_head<A: GlobalAlloc>(alloc: &A, size: usize) -> Block {
        let layout = layout_for(size);
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc.alloc(layout) };
        if ptr.is_null() {
            handle_alloc_error(layout);
        }
        // SAFETY: a fresh allocation of `size` >= 1 bytes.
        unsafe { ptr.write(tag(size)) };
        Block { ptr, size }
    }

    /// Checks the first byte's stamp (`alloc_head`) and frees the block;
    /// returns whether it held.
    #[inline]
    fn free_head<A: GlobalAlloc>(self, alloc: &A) -> bool {
        let ok = self.first_is(self.size);
        self.free_unchecked(alloc);
        ok
    }

    /// Whether the first byte still holds the stamp of `size`.
    #[inline]
    fn first_is(&self, size: usize) -> bool {
        // SAFETY: `self` is a live block of `self.size` >= 1 bytes whose first
        // byte was written when it was stamped.
        unsafe { self.ptr.read() == tag(size) }
    }

    /// Whether both stamps are intact.
    #[inline]
    fn stamps_ok(&self) -> bool {
        // SAFETY: `self` is a live block of `self.size` >= 1 bytes whose last
        // byte was written when it was stamped.
        let last = unsafe { self.ptr.add(self.size - 1).read() };
        self.first_is(self.size) && last == tag(self.size)
    }

    /// Reallocates to `new_size` (at least the block's alignment) and
    /// restamps; returns whether the old first byte survived the move.
    #[inline]
    fn realloc<A: GlobalAlloc>(&mut self, alloc: &A, new_size: usize) -> bool {
        let old = layout_for(self.size);
        debug_assert!(new_size >= old.align());
        // SAFETY: `self.ptr` was allocated by `alloc` with layout `old`;
        // `new_size` is non-zero and, rounded to `old.align()`, far below
        // `isize::MAX`.
        let ptr = unsafe { alloc.realloc(self.ptr, old, new_size) };
        if ptr.is_null() {
            handle_alloc_error(layout_for(new_size));
        }
        let moved = Block {
            ptr,
            size: new_size,
        };
        let kept = moved.first_is(self.size);
        let t = tag(new_size);
        // SAFETY: `ptr` is a live allocation of `new_size` >= 1 bytes.
        unsafe {
            ptr.write(t);
            ptr.add(new_size - 1).write(t);
        }
        *self = moved;
        kept
    }

    /// Checks the stamps and frees the block; returns whether they held.
    #[inline]
    fn free<A: GlobalAlloc>(self, alloc: &A) -> bool {
        let ok = self.stamps_ok();
        self.free_unchecked(alloc);
        ok
    }

    /// Frees the block without reading it.
    #[inline]
    fn free_unchecked<A: GlobalAlloc>(self, alloc: &A) {
        // SAFETY: `self.ptr` was allocated (or last reallocated) by `alloc`
        // with the layout of `self.size`, and this consumes its only handle.
        unsafe { alloc.dealloc(self.ptr, layout_for(self.size)) };
    }
}

// ---------------------------------------------------------------------------
// What a run produces
// ---------------------------------------------------------------------------

/// The result of one workload run (before RSS is attached).
struct Outcome {
    seconds: f64,
    ops: u64,
    /// Named phase times in seconds (treesum, replay).
    phases: Vec<(&'static str, f64)>,
    /// A line for `--verbose`.
    note: String,
}

/// One measured run.
struct Sample {
    seconds: f64,
    ops: u64,
    /// `rss_growth_kb + kept_kb`: the allocator's footprint at the run's peak.
    peak_rss_kb: u64,
    /// VmHWM − VmRSS before the run.
    rss_growth_kb: u64,
    /// What this allocator still held from its earlier runs when this one
    /// started (resident, so inside the baseline; reused, so not growth).
    kept_kb: u64,
    phases: Vec<(&'static str, f64)>,
}

// ---------------------------------------------------------------------------
// treesum (seed 001)
// ---------------------------------------------------------------------------

/// TBB's `TreeNode` without its `node_count` (the spec's `{f32, left, right}`).
#[repr(C)]
struct Node {
    value: f32,
    left: *mut Node,
    right: *mut Node,
}

/// A subtree handed between threads.
struct Subtree(*mut Node);

// SAFETY: a subtree is owned by exactly one thread at a time: it is built by
// one thread and handed to its parent through `join`, or read by one thread
// while no thread writes it.
unsafe impl Send for Subtree {}

/// A `*const Node` that parallel sum threads read.
#[derive(Clone, Copy)]
struct SharedTree(*const Node);

// SAFETY: during the sums the tree is immutable; every thread only reads it.
unsafe impl Send for SharedTree {}

mod treesum {
    use super::*;

    /// Allocates one node with a random value and no children.
    #[inline]
    fn new_node<A: GlobalAlloc>(alloc: &A, rng: &mut Rng) -> *mut Node {
        let layout = Layout::new::<Node>();
        // SAFETY: `Node` has a non-zero size.
        let node = unsafe { alloc.alloc(layout) }.cast::<Node>();
        if node.is_null() {
            handle_alloc_error(layout);
        }
        // TBB uses `Value(rand())`; any deterministic value serves.
        let value = (rng.next_u64() >> 40) as f32 * (1.0 / 16_777_216.0);
        // SAFETY: `node` is a fresh allocation with `Node`'s layout, so it is
        // aligned and writable; `write` initializes it without reading.
        unsafe {
            node.write(Node {
                value,
                left: ptr::null_mut(),
                right: ptr::null_mut(),
            })
        };
        node
    }

    /// TBB's `do_in_one_thread`: `n` nodes, preorder, halves left and right.
    fn make_serial<A: GlobalAlloc>(alloc: &A, n: usize, rng: &mut Rng) -> *mut Node {
        if n == 0 {
            return ptr::null_mut();
        }
        let node = new_node(alloc, rng);
        let rest = n - 1;
        let left = make_serial(alloc, rest / 2, rng);
        let right = make_serial(alloc, rest - rest / 2, rng);
        // SAFETY: `node` is a live node that only this thread can reach.
        unsafe {
            (*node).left = left;
            (*node).right = right;
        }
        node
    }

    /// Levels of `make_parallel` that split the subtree (and reseed), whatever
    /// the thread count, so the tree's values and shape do not depend on it.
    const SPLIT_LEVELS: u32 = 4;

    /// TBB's `tree_maker_task`: split `n` nodes in halves for `levels`
    /// levels, building each left half on a scoped thread while more than one
    /// thread is left for this subtree, then build serially.
    fn make_parallel<A: GlobalAlloc + Sync>(
        alloc: &A,
        n: usize,
        threads: usize,
        seed: u64,
        levels: u32,
    ) -> *mut Node {
        let mut rng = Rng::new(seed);
        if levels == 0 || n < 1000 {
            return make_serial(alloc, n, &mut rng);
        }
        let node = new_node(alloc, &mut rng);
        let rest = n - 1;
        let (ln, rn) = (rest / 2, rest - rest / 2);
        let (ls, rs) = (seed * 2 + 1, seed * 2 + 2);
        let (left, right) = if threads > 1 {
            let left_threads = threads / 2;
            thread::scope(|s| {
                let left = s
                    .spawn(move || Subtree(make_parallel(alloc, ln, left_threads, ls, levels - 1)));
                let right = make_parallel(alloc, rn, threads - left_threads, rs, levels - 1);
                (left.join().expect("treesum: builder panicked").0, right)
            })
        } else {
            let left = make_parallel(alloc, ln, 1, ls, levels - 1);
            (left, make_parallel(alloc, rn, 1, rs, levels - 1))
        };
        // SAFETY: `node` is a live node that only this thread can reach.
        unsafe {
            (*node).left = left;
            (*node).right = right;
        }
        node
    }

    /// TBB's `SerialSumTree`: value, plus left sum, plus right sum.
    fn sum_serial(node: *const Node) -> f32 {
        // SAFETY: `node` is a live, initialized node of a tree no thread
        // mutates during the sums.
        let n = unsafe { &*node };
        let mut result = n.value;
        if !n.left.is_null() {
            result += sum_serial(n.left);
        }
        if !n.right.is_null() {
            result += sum_serial(n.right);
        }
        result
    }

    /// The parallel sum: the same additions in the same order as
    /// `sum_serial`, with the left subtree summed on a scoped thread until
    /// every thread has a subtree.
    fn sum_parallel(node: SharedTree, threads: usize) -> f32 {
        if threads <= 1 {
            return sum_serial(node.0);
        }
        // SAFETY: as in `sum_serial`.
        let n = unsafe { &*node.0 };
        let (left, right) = (SharedTree(n.left), SharedTree(n.right));
        let left_threads = threads / 2;
        let (l, r) = thread::scope(|s| {
            let l = s.spawn(move || {
                if left.0.is_null() {
                    None
                } else {
                    Some(sum_parallel(left, left_threads))
                }
            });
            let r = if right.0.is_null() {
                None
            } else {
                Some(sum_parallel(right, threads - left_threads))
            };
            (l.join().expect("treesum: summer panicked"), r)
        });
        let mut result = n.value;
        if let Some(l) = l {
            result += l;
        }
        if let Some(r) = r {
            result += r;
        }
        result
    }

    /// Frees a tree, children first; returns the number of nodes freed.
    fn free_tree<A: GlobalAlloc>(alloc: &A, node: *mut Node) -> usize {
        if node.is_null() {
            return 0;
        }
        // SAFETY: `node` is a live node owned by this thread; the tree is not
        // read again after it is freed.
        let (left, right) = unsafe { ((*node).left, (*node).right) };
        let n = 1 + free_tree(alloc, left) + free_tree(alloc, right);
        // SAFETY: `node` was allocated by `alloc` with `Node`'s layout, and
        // its children (the only other pointers into it) are already freed.
        unsafe { alloc.dealloc(node.cast(), Layout::new::<Node>()) };
        n
    }

    pub(super) fn run<A: GlobalAlloc + Sync>(alloc: &A, nodes: usize, threads: usize) -> Outcome {
        assert!(nodes >= 1);
        let t0 = Instant::now();
        let mut rng = Rng::new(1);
        let root = new_node(alloc, &mut rng);
        let rest = nodes - 1;
        let left = make_serial(alloc, rest / 2, &mut rng);
        let t1 = Instant::now();
        let right = make_parallel(alloc, rest - rest / 2, threads, 2, SPLIT_LEVELS);
        // SAFETY: `root` is a live node that only this thread can reach.
        unsafe {
            (*root).left = left;
            (*root).right = right;
        }
        let t2 = Instant::now();
        let serial = sum_serial(root);
        let t3 = Instant::now();
        let parallel = sum_parallel(SharedTree(root), threads);
        let t4 = Instant::now();
        let freed = free_tree(alloc, root);
        let t5 = Instant::now();

        assert_eq!(
            serial.to_bits(),
            parallel.to_bits(),
            "treesum: serial sum {serial} != parallel sum {parallel}"
        );
        assert_eq!(freed, nodes, "treesum: freed {freed} of {nodes} nodes");
        let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
        Outcome {
            seconds: secs(t0, t5),
            ops: nodes as u64,
            phases: vec![
                ("create_serial", secs(t0, t1)),
                ("create_parallel", secs(t1, t2)),
                ("sum_serial", secs(t2, t3)),
                ("sum_parallel", secs(t3, t4)),
                ("free", secs(t4, t5)),
            ],
            note: format!("sum={serial:.6e}"),
        }
    }
}

// ---------------------------------------------------------------------------
// xmalloc (seed 000)
// ---------------------------------------------------------------------------

mod xmalloc {
    use super::*;

    /// Objects per message from a producer to the collector.
    const BATCH: usize = 256;
    /// Batches the pipe holds before producers wait.
    const PIPE_BATCHES: usize = 64;

    /// A full (or final) batch, moved by value through the pipe so the
    /// harness allocates nothing per batch.
    struct Batch {
        len: usize,
        blocks: [Block; BATCH],
    }

    /// The producers' bounded queue to the collector: a mutex and two
    /// condition variables, as xmalloc-test's bins are, so that a thread
    /// that must wait sleeps. Not `std::sync::mpsc`: its sender spins
    /// (`pause`) on a full channel before it sleeps, and with more threads
    /// than cores producers that outran the collector spun away the CPU
    /// the collector needed: an allocator whose producers were faster
    /// measured slower (loam at two producers: `Channel::send` 15% of the
    /// profile, nearly all of it `pause`, and 31 – 34 Mops/s against 55 –
    /// 62 for a build whose producers were slower).
    struct Pipe {
        state: Mutex<PipeState>,
        not_empty: Condvar,
        not_full: Condvar,
    }

    struct PipeState {
        batches: VecDeque<Batch>,
        producers: usize,
        /// The collector is gone (it panicked): a producer must not wait
        /// for room that will never come.
        closed: bool,
    }

    impl Pipe {
        fn new(producers: usize) -> Pipe {
            Pipe {
                state: Mutex::new(PipeState {
                    batches: VecDeque::with_capacity(PIPE_BATCHES),
                    producers,
                    closed: false,
                }),
                not_empty: Condvar::new(),
                not_full: Condvar::new(),
            }
        }

        fn send(&self, batch: Batch) {
            let mut st = self.lock();
            while st.batches.len() == PIPE_BATCHES && !st.closed {
                st = self
                    .not_full
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            assert!(!st.closed, "xmalloc: collector gone");
            st.batches.push_back(batch);
            drop(st);
            self.not_empty.notify_one();
        }

        /// The next batch; `None` once every producer is done and the pipe
        /// is empty.
        fn recv(&self) -> Option<Batch> {
            let mut st = self.lock();
            loop {
                if let Some(b) = st.batches.pop_front() {
                    drop(st);
                    self.not_full.notify_one();
                    return Some(b);
                }
                if st.producers == 0 {
                    return None;
                }
                st = self
                    .not_empty
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }

        fn producer_done(&self) {
            self.lock().producers -= 1;
            self.not_empty.notify_all();
        }

        fn collector_gone(&self) {
            self.lock().closed = true;
            self.not_full.notify_all();
        }

        /// The state, even after a panic elsewhere: the pipe's counts stay
        /// consistent (no panic happens while they are half updated), and
        /// the guards that count threads out run while unwinding.
        fn lock(&self) -> MutexGuard<'_, PipeState> {
            self.state.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    // Never inlined, here or in `collect`: the harness's own code is then
    // laid out alike for every allocator.
    #[inline(never)]
    fn produce<A: GlobalAlloc>(alloc: &A, ops: u64, seed: u64, pipe: &Pipe) {
        /// Counts the producer out however it ends, so that the collector
        /// never waits for a producer that panicked.
        struct Done<'a>(&'a Pipe);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.producer_done();
            }
        }
        let _done = Done(pipe);
        let sizes = SizeDist::new(&GETMEM);
        let mut rng = Rng::new(seed);
        let mut batch = Batch {
            len: 0,
            blocks: [Block::EMPTY; BATCH],
        };
        for _ in 0..ops {
            let size = sizes.sample(&mut rng);
            batch.blocks[batch.len] = Block::alloc(alloc, size);
            batch.len += 1;
            if batch.len == BATCH {
                pipe.send(batch);
                batch = Batch {
                    len: 0,
                    blocks: [Block::EMPTY; BATCH],
                };
            }
        }
        if batch.len > 0 {
            pipe.send(batch);
        }
    }

    /// Frees everything it receives; returns (freed, bad stamps).
    #[inline(never)]
    fn collect<A: GlobalAlloc>(alloc: &A, pipe: &Pipe) -> (u64, u64) {
        /// Closes the pipe however the collector ends, so that a producer
        /// waiting for room panics instead of waiting forever.
        struct Gone<'a>(&'a Pipe);
        impl Drop for Gone<'_> {
            fn drop(&mut self) {
                self.0.collector_gone();
            }
        }
        let _gone = Gone(pipe);
        let (mut freed, mut bad) = (0, 0);
        while let Some(batch) = pipe.recv() {
            for block in &batch.blocks[..batch.len] {
                bad += u64::from(!block.free(alloc));
            }
            freed += batch.len as u64;
        }
        (freed, bad)
    }

    pub(super) fn run<A: GlobalAlloc + Sync>(alloc: &A, total: u64, threads: usize) -> Outcome {
        let pipe = &Pipe::new(threads);
        let start = Instant::now();
        let (freed, bad) = thread::scope(|s| {
            let collector = s.spawn(move || collect(alloc, pipe));
            let producers: Vec<_> = (0..threads)
                .map(|t| {
                    let share =
                        total / threads as u64 + u64::from((t as u64) < total % threads as u64);
                    s.spawn(move || produce(alloc, share, 1000 + t as u64, pipe))
                })
                .collect();
            // Joined, not left to the scope: a scope returns once its
            // threads' closures have, before their thread-local destructors
            // run (where an allocator gives back an exiting thread's
            // memory), and the release call and RSS reading after the run
            // raced them (kept memory of 3 – 4 MB now and then).
            for p in producers {
                p.join().expect("xmalloc: a producer panicked");
            }
            collector.join().expect("xmalloc: collector panicked")
        });
        let seconds = start.elapsed().as_secs_f64();
        assert_eq!(freed, total, "xmalloc: freed {freed} of {total}");
        assert_eq!(bad, 0, "xmalloc: {bad} objects had damaged stamps");
        Outcome {
            seconds,
            ops: total,
            phases: Vec::new(),
            note: String::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// larson (as mimalloc-bench runs it)
// ---------------------------------------------------------------------------

/// Larson and Krishnan's server benchmark as mimalloc-bench runs it
/// (`larson 5 8 1000 5000 100 4141 N`): N lineages of threads, each with
/// an array of `SLOTS` blocks of 8 – 999 bytes. A thread replaces random
/// slots (free the old block, allocate one of a random size, write its
/// first bytes) `GENERATION` times, then starts a new thread, hands it the
/// array and exits. The arrays are filled before the clock starts by the
/// run's own thread, as larson's `warmup` fills them (allocate, shuffle,
/// four replacements a slot), and that thread stays alive and idle, as
/// larson's main thread sleeps: a new thread's first frees are of blocks
/// of a thread that exited (or, in the first generation, of the idle one),
/// about 1% of all frees. (A successor starts before its predecessor has
/// exited, as in larson, so some of those frees are of a live thread's
/// blocks.) So this measures the fast paths and what the
/// allocator does with an exited thread's memory, not the traffic between
/// live threads (`larson-ring` is that).
///
/// Unlike mimalloc-bench, which counts what the threads do in a fixed five
/// seconds, the work is fixed: 10,000,000 × scale replacements split over
/// the lineages (so Mops/s compares across thread counts) and the clock
/// stops when the last thread has exited. The arrays left at the end are
/// freed after the clock. ops = replacements.
mod larson {
    use super::*;
    use std::sync::atomic::AtomicU64;

    const SLOTS: usize = 5_000;
    /// Replacements a thread makes before it hands its array on and exits
    /// (larson's 100 rounds of 5,000); a quarter of a lineage's share at
    /// the small scales where that is less (`--scale 0.05` gave each
    /// lineage one thread, which handed nothing on).
    const GENERATION: u64 = 500_000;
    const MIN: usize = 8;
    /// One past the largest size: larson draws `min + rand % (max - min)`.
    const MAX: usize = 1_000;
    /// Blocks are stamped in their first byte only, as larson writes them;
    /// one old block in `CHECK_EVERY` has its stamp read before it is
    /// freed (larson reads none; the ring's reason), every block at the end.
    const CHECK_EVERY: u64 = 64;

    #[inline]
    fn size(r: u64) -> usize {
        MIN + Rng::below(r, MAX - MIN)
    }

    /// larson's `warmup`: allocate every slot, shuffle, then four
    /// replacements a slot.
    fn warm_up<A: GlobalAlloc>(alloc: &A, slots: usize, rng: &mut Rng) -> Vec<Block> {
        let mut blocks: Vec<Block> = (0..slots)
            .map(|_| Block::alloc_head(alloc, size(rng.next_u64())))
            .collect();
        for i in (1..slots).rev() {
            let j = Rng::below(rng.next_u64(), i + 1);
            blocks.swap(i, j);
        }
        for _ in 0..4 * slots {
            let r = rng.next_u64();
            let victim = Rng::below(r, slots);
            let old =
                std::mem::replace(&mut blocks[victim], Block::alloc_head(alloc, size(r >> 32)));
            old.free_unchecked(alloc);
        }
        blocks
    }

    /// One lineage's state, handed from each thread to the next.
    struct Lineage {
        slots: Vec<Block>,
        rng: Rng,
        /// Replacements still to make in this lineage.
        left: u64,
        /// Replacements each of its threads makes.
        generation: u64,
    }

    /// What the lineages leave for the run's thread.
    struct Finish {
        /// Blocks whose stamps were damaged.
        bad: AtomicU64,
        /// Each lineage's array at its end.
        arrays: Mutex<Vec<Vec<Block>>>,
    }

    // Never inlined into the thread's entry, as xmalloc's `produce`.
    #[inline(never)]
    fn replace<A: GlobalAlloc>(alloc: &A, lineage: &mut Lineage, n: u64) -> u64 {
        let mut bad = 0;
        let slots = &mut lineage.slots;
        for i in 0..n {
            let r = lineage.rng.next_u64();
            let victim = Rng::below(r, slots.len());
            let old =
                std::mem::replace(&mut slots[victim], Block::alloc_head(alloc, size(r >> 32)));
            if i % CHECK_EVERY == 0 {
                bad += u64::from(!old.free_head(alloc));
            } else {
                old.free_unchecked(alloc);
            }
        }
        bad
    }

    /// One thread of a lineage: a generation of replacements, then the
    /// next thread, started before this one exits (as larson's
    /// `exercise_heap` starts its successor and then ends).
    fn generation<'scope, A: GlobalAlloc + Sync>(
        s: &'scope thread::Scope<'scope, '_>,
        alloc: &'scope A,
        mut lineage: Lineage,
        finish: &'scope Finish,
    ) {
        let n = lineage.left.min(lineage.generation);
        let bad = replace(alloc, &mut lineage, n);
        finish.bad.fetch_add(bad, Ordering::Relaxed);
        lineage.left -= n;
        if lineage.left == 0 {
            finish
                .arrays
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(lineage.slots);
        } else {
            s.spawn(move || generation(s, alloc, lineage, finish));
        }
    }

    pub(super) fn run<A: GlobalAlloc + Sync>(alloc: &A, total: u64, threads: usize) -> Outcome {
        let per = (total / threads as u64).max(1);
        let mut rng = Rng::new(4141);
        let mut all = warm_up(alloc, SLOTS * threads, &mut rng);
        let lineages: Vec<Lineage> = (0..threads)
            .map(|t| Lineage {
                slots: all.drain(..SLOTS).collect(),
                rng: Rng::new(4141 + 1 + t as u64),
                left: per,
                generation: GENERATION.min((per / 4).max(1)),
            })
            .collect();
        let finish = Finish {
            bad: AtomicU64::new(0),
            arrays: Mutex::new(Vec::new()),
        };
        let start = Instant::now();
        thread::scope(|s| {
            for lineage in lineages {
                let finish = &finish;
                s.spawn(move || generation(s, alloc, lineage, finish));
            }
        });
        let seconds = start.elapsed().as_secs_f64();
        let arrays = finish
            .arrays
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        assert_eq!(arrays.len(), threads, "larson: a lineage ended early");
        let mut bad = finish.bad.into_inner();
        for b in arrays.into_iter().flatten() {
            bad += u64::from(!b.free_head(alloc));
        }
        assert_eq!(bad, 0, "larson: {bad} blocks had damaged stamps");
        Outcome {
            seconds,
            ops: per * threads as u64,
            phases: Vec::new(),
            note: String::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// larson-ring
// ---------------------------------------------------------------------------

/// Larson and Krishnan's server benchmark, as a ring of live threads: each
/// thread keeps an array of `SLOTS` blocks and replaces a random one again
/// and again (free the old block, allocate one of 16 – 256 bytes); after
/// every `EPOCH` replacements the threads hand their arrays on around the
/// ring. A slot's block is the previous holder's until it is replaced in
/// the new epoch: at two threads about 37% of the frees are remote (half
/// the slots on average are not yet replaced when drawn, over an epoch of
/// twice the slots, and 86% of those were the previous holder's). The
/// total of replacements (10,000,000 × scale) is split over the threads,
/// so Mops/s compares across thread counts. At one thread the array comes
/// back to the same thread: no free is remote. ops = replacements.
///
/// Not mimalloc-bench's larson (`larson` above: about 1% of its frees are
/// remote, to exited threads' heaps): this one stresses the cross-thread
/// frees between live threads about 40 times as hard, and keeps thread
/// start-up out of the time. Its figures do not compare with published
/// larson results.
mod ring {
    use super::*;

    pub(super) const SLOTS: usize = 10_000;
    pub(super) const EPOCH: u64 = 20_000;
    const MIN: usize = 16;
    const MAX: usize = 256;

    struct Slots(Vec<Block>);

    /// Replacements between checks of an old block's stamps before it is
    /// freed. mimalloc-bench's larson writes each new block and never
    /// reads the old one; reading every old block's stamps made each
    /// replacement wait for a line last written on the other CPU (73% of
    /// the loop's samples at two threads with loam, 67% with jemalloc:
    /// docs/perf-log.md),
    /// so that the 2-thread rate measured the machine's cache transfers
    /// more than the allocator. One in `CHECK_EVERY` is checked, and every
    /// block at the end.
    const CHECK_EVERY: u64 = 64;

    fn replace_all<A: GlobalAlloc>(alloc: &A, slots: &mut Slots, rng: &mut Rng) -> u64 {
        let mut bad = 0;
        for n in 0..EPOCH {
            let r = rng.next_u64();
            let i = Rng::below(r, SLOTS);
            let size = MIN + Rng::below(r >> 32, MAX - MIN + 1);
            let old = std::mem::replace(&mut slots.0[i], Block::alloc(alloc, size));
            if n % CHECK_EVERY == 0 {
                bad += u64::from(!old.free(alloc));
            } else {
                old.free_unchecked(alloc);
            }
        }
        bad
    }

    /// Where the threads leave their arrays for the next thread, and a
    /// barrier. The threads wait for each other spinning (yielding after a
    /// while, for more threads than cores), not sleeping: a thread woken
    /// from a channel was queued on its waker's CPU, and runs with both
    /// threads on one CPU halved some runs.
    struct Ring {
        mailboxes: Vec<std::sync::Mutex<Option<Slots>>>,
        waiting: std::sync::atomic::AtomicUsize,
        generation: std::sync::atomic::AtomicUsize,
    }

    impl Ring {
        /// Waits until every thread has called it (a generation barrier).
        fn barrier(&self) {
            let n = self.mailboxes.len();
            let generation = self.generation.load(Ordering::Acquire);
            if self.waiting.fetch_add(1, Ordering::AcqRel) + 1 == n {
                self.waiting.store(0, Ordering::Relaxed);
                self.generation.fetch_add(1, Ordering::Release);
                return;
            }
            let mut spins = 0_u32;
            while self.generation.load(Ordering::Acquire) == generation {
                spins += 1;
                if spins < 1000 {
                    std::hint::spin_loop();
                } else {
                    thread::yield_now();
                }
            }
        }

        /// Leaves `slots` for the next thread and takes the previous one's.
        fn hand_over(&self, t: usize, slots: Slots) -> Slots {
            let n = self.mailboxes.len();
            *self.mailboxes[(t + 1) % n].lock().unwrap() = Some(slots);
            self.barrier(); // every array left...
            let mine = self.mailboxes[t].lock().unwrap().take();
            self.barrier(); // ...and taken, before the next hand-over
            mine.expect("larson-ring: the previous thread left its array")
        }
    }

    // Never inlined into the thread's entry, as xmalloc's `produce`.
    #[inline(never)]
    fn worker<A: GlobalAlloc>(alloc: &A, t: usize, epochs: u64, ring: &Ring) -> u64 {
        let mut rng = Rng::new(7000 + t as u64);
        let mut slots = Slots(
            (0..SLOTS)
                .map(|_| Block::alloc(alloc, MIN + Rng::below(rng.next_u64(), MAX - MIN + 1)))
                .collect(),
        );
        let mut bad = 0;
        for _ in 0..epochs {
            bad += replace_all(alloc, &mut slots, &mut rng);
            if ring.mailboxes.len() > 1 {
                slots = ring.hand_over(t, slots);
            }
        }
        for b in slots.0 {
            bad += u64::from(!b.free(alloc));
        }
        bad
    }

    pub(super) fn run<A: GlobalAlloc + Sync>(alloc: &A, total: u64, threads: usize) -> Outcome {
        let epochs = (total / (threads as u64 * EPOCH)).max(1);
        let ring = Ring {
            mailboxes: (0..threads).map(|_| std::sync::Mutex::new(None)).collect(),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            generation: std::sync::atomic::AtomicUsize::new(0),
        };
        let start = Instant::now();
        let bad: u64 = thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let ring = &ring;
                    s.spawn(move || worker(alloc, t, epochs, ring))
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("larson-ring: a worker panicked"))
                .sum()
        });
        let seconds = start.elapsed().as_secs_f64();
        assert_eq!(bad, 0, "larson-ring: {bad} blocks had damaged stamps");
        Outcome {
            seconds,
            ops: epochs * EPOCH * threads as u64,
            phases: Vec::new(),
            note: String::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// replay (seed 003)
// ---------------------------------------------------------------------------

mod replay {
    use super::*;

    /// Crest of each wave, as a fraction of the peak live set.
    const CRESTS: [f64; 4] = [0.55, 0.8, 1.0, 0.7];
    /// Where each wave falls back to.
    const TROUGH: f64 = 0.25;
    /// Fraction of a wave spent rising.
    const RISE: f64 = 0.6;
    /// "Recently allocated" means among the last this many live blocks.
    const YOUNG: usize = 64;

    /// The live-set target (fraction of the peak) at trace position `x`.
    fn wave(x: f64) -> f64 {
        let pos = x * CRESTS.len() as f64;
        let c = (pos as usize).min(CRESTS.len() - 1);
        let u = pos - c as f64;
        let start = if c == 0 { 0.0 } else { TROUGH };
        if u < RISE {
            start + (CRESTS[c] - start) * u / RISE
        } else {
            CRESTS[c] + (TROUGH - CRESTS[c]) * (u - RISE) / (1.0 - RISE)
        }
    }

    /// The replay's sizes: allocations and the live-set crest in bytes.
    pub(super) struct Params {
        pub(super) allocs: u64,
        pub(super) peak_bytes: f64,
    }

    impl Params {
        pub(super) fn new(scale: f64) -> Params {
            Params {
                allocs: ((GETMEM_CALLS as f64 * scale) as u64).max(1000),
                peak_bytes: 150e6 * scale,
            }
        }

        /// Room for the most blocks the trace keeps live at once (measured:
        /// ~ one per 21 requested bytes at the crest), with a margin.
        pub(super) fn live_capacity(&self) -> usize {
            (self.peak_bytes / 16.0) as usize + 4096
        }
    }

    /// Picks the block to reallocate: seven times in eight one of the `YOUNG`
    /// most recent, else any.
    #[inline]
    fn realloc_victim(rng: &mut Rng, len: usize) -> usize {
        let r = rng.next_u64();
        if r >> 61 != 0 {
            len - 1 - Rng::below(r, len.min(YOUNG))
        } else {
            Rng::below(r, len)
        }
    }

    /// Removes the block to free from the non-empty `live`: 30 times in 32
    /// one of the `YOUNG` most recent (temporaries; when the live set shrinks
    /// this recedes into older blocks, newest first), once the oldest (a
    /// structure built long ago being discarded), once any (fragmentation).
    ///
    /// Old and random victims are cache misses for every allocator alike (the
    /// harness reads the stamp, the allocator its metadata); more of them
    /// would make the replay measure memory latency rather than allocators.
    #[inline]
    fn take_victim(rng: &mut Rng, live: &mut VecDeque<Block>) -> Block {
        let len = live.len();
        let r = rng.next_u64();
        let taken = match r >> 59 {
            0..=29 => live.swap_remove_back(len - 1 - Rng::below(r, len.min(YOUNG))),
            30 => live.pop_front(),
            _ => live.swap_remove_front(Rng::below(r, len)),
        };
        taken.expect("replay: victim index out of range")
    }

    /// Replays the trace. `live` is the harness's pre-touched bookkeeping
    /// ring (empty, with capacity), so its growth is not the run's RSS; it
    /// keeps live blocks oldest first.
    pub(super) fn run<A: GlobalAlloc>(
        alloc: &A,
        p: &Params,
        live: &mut VecDeque<Block>,
    ) -> Outcome {
        assert!(live.is_empty());
        let getmem = SizeDist::new(&GETMEM);
        let reallocmem = SizeDist::new(&REALLOCMEM);
        let mut rng = Rng::new(3);
        let capacity = live.capacity();
        let (mut reallocs, mut frees, mut bad) = (0u64, 0u64, 0u64);
        let (mut live_bytes, mut max_bytes, mut max_blocks) = (0usize, 0usize, 0usize);
        let mut target = 0usize;

        let start = Instant::now();
        for i in 0..p.allocs {
            if i % 256 == 0 {
                target = (p.peak_bytes * wave(i as f64 / p.allocs as f64)) as usize;
            }
            let size = getmem.sample(&mut rng);
            live.push_back(Block::alloc(alloc, size));
            live_bytes += size;
            if i % 8 == 7 {
                let j = realloc_victim(&mut rng, live.len());
                let block = &mut live[j];
                let old = block.size;
                let new = reallocmem.sample(&mut rng).max(layout_for(old).align());
                bad += u64::from(!block.realloc(alloc, new));
                live_bytes = live_bytes - old + new;
                reallocs += 1;
            }
            max_bytes = max_bytes.max(live_bytes);
            max_blocks = max_blocks.max(live.len());
            while live_bytes > target && !live.is_empty() {
                let block = take_victim(&mut rng, live);
                live_bytes -= block.size;
                bad += u64::from(!block.free(alloc));
                frees += 1;
            }
        }
        let drain = Instant::now();
        while let Some(block) = live.pop_back() {
            bad += u64::from(!block.free(alloc));
            frees += 1;
        }
        let end = Instant::now();

        assert_eq!(bad, 0, "replay: {bad} blocks had damaged stamps");
        assert_eq!(
            frees, p.allocs,
            "replay: {frees} frees for {} allocations",
            p.allocs
        );
        let grew = if live.capacity() > capacity {
            " (bookkeeping ring grew: raise live_capacity)"
        } else {
            ""
        };
        Outcome {
            seconds: (end - start).as_secs_f64(),
            ops: p.allocs + reallocs + frees,
            phases: vec![
                ("trace", (drain - start).as_secs_f64()),
                ("free_all", (end - drain).as_secs_f64()),
            ],
            note: format!(
                "live crest {:.1} MiB, at most {} blocks{grew}",
                max_bytes as f64 / (1 << 20) as f64,
                max_blocks
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// Peak RSS
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RssMethod {
    /// Reset VmHWM through /proc/self/clear_refs, read it afterwards.
    ClearRefs,
    /// A thread samples /proc/self/statm every millisecond.
    Sampling,
}

/// A field of /proc/self/status in kB, e.g. `status_kb("VmHWM:")`.
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Current RSS in kB from /proc/self/statm (cheaper than status).
fn statm_rss_kb() -> u64 {
    // SAFETY: `sysconf` takes no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page / 1024)
}

fn reset_hwm() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

impl RssMethod {
    /// Uses clear_refs if a reset demonstrably lowers VmHWM after 64 MiB
    /// were touched and returned.
    fn detect() -> RssMethod {
        let touched = vec![1u8; 64 << 20];
        std::hint::black_box(&touched);
        drop(touched);
        if reset_hwm() {
            if let (Some(hwm), Some(rss)) = (status_kb("VmHWM:"), status_kb("VmRSS:")) {
                if hwm < rss + 16 * 1024 {
                    return RssMethod::ClearRefs;
                }
            }
        }
        RssMethod::Sampling
    }

    fn describe(self) -> &'static str {
        match self {
            RssMethod::ClearRefs => "VmHWM after clear_refs, minus VmRSS before the run",
            RssMethod::Sampling => "max of 1 ms statm samples, minus VmRSS before the run",
        }
    }
}

/// Measures one run's peak RSS growth.
struct RssProbe {
    baseline_kb: u64,
    sampler: Option<(Arc<AtomicBool>, thread::JoinHandle<u64>)>,
}

impl RssProbe {
    fn start(method: RssMethod) -> RssProbe {
        match method {
            RssMethod::ClearRefs => {
                reset_hwm();
                RssProbe {
                    baseline_kb: status_kb("VmRSS:").unwrap_or(0),
                    sampler: None,
                }
            }
            RssMethod::Sampling => {
                let baseline_kb = statm_rss_kb();
                let stop = Arc::new(AtomicBool::new(false));
                let flag = Arc::clone(&stop);
                let handle = thread::spawn(move || {
                    let mut max = 0;
                    loop {
                        max = max.max(statm_rss_kb());
                        if flag.load(Ordering::Acquire) {
                            return max;
                        }
                        thread::sleep(Duration::from_millis(1));
                    }
                });
                RssProbe {
                    baseline_kb,
                    sampler: Some((stop, handle)),
                }
            }
        }
    }

    fn finish(self) -> u64 {
        let peak = match self.sampler {
            Some((stop, handle)) => {
                stop.store(true, Ordering::Release);
                handle.join().expect("rss sampler panicked")
            }
            None => status_kb("VmHWM:").unwrap_or(0),
        };
        peak.saturating_sub(self.baseline_kb)
    }
}

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// Sizes of the three workloads for one `--scale`.
struct Params {
    treesum_nodes: usize,
    xmalloc_ops: u64,
    larson_ops: u64,
    replay: replay::Params,
}

impl Params {
    fn new(scale: f64) -> Params {
        Params {
            treesum_nodes: ((10_000_000.0 * scale) as usize).max(1000),
            xmalloc_ops: ((10_000_000.0 * scale) as u64).max(1000),
            larson_ops: ((10_000_000.0 * scale) as u64).max(ring::EPOCH),
            replay: replay::Params::new(scale),
        }
    }
}

/// Runs one workload on a fresh thread with allocator `alloc`.
fn run_with<A: GlobalAlloc + Sync + 'static>(
    alloc: &'static A,
    workload: Workload,
    threads: usize,
    params: &Params,
    live: &mut VecDeque<Block>,
) -> Outcome {
    thread::scope(|s| {
        let run = s.spawn(move || match workload {
            Workload::Treesum => treesum::run(alloc, params.treesum_nodes, threads),
            Workload::Xmalloc => xmalloc::run(alloc, params.xmalloc_ops, threads),
            Workload::Larson => larson::run(alloc, params.larson_ops, threads),
            Workload::LarsonRing => ring::run(alloc, params.larson_ops, threads),
            Workload::Replay => replay::run(alloc, &params.replay, live),
        });
        run.join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// One measured run: RSS probe around the workload, then the release call.
///
/// `kept` tracks, per allocator, the resident memory its runs left behind
/// after its release call (RSS after minus RSS before, summed over its runs):
/// memory it will likely reuse, which the baseline would otherwise hide.
fn measure(
    kind: AllocKind,
    workload: Workload,
    threads: usize,
    params: &Params,
    live: &mut VecDeque<Block>,
    rss: RssMethod,
    kept: &mut BTreeMap<AllocKind, u64>,
) -> (Sample, String) {
    // The harness's own buffers (xmalloc's pipe, larson's slot arrays)
    // come from glibc in every allocator's run. Trimmed before the
    // baseline and again after the release call, what they need counts as
    // every run's growth alike and as no allocator's kept memory (but for
    // the top of a thread arena, which `malloc_trim` leaves); trimmed only in
    // glibc's own turn, they showed as growth of the run after it and as
    // kept memory of the others (up to a few hundred KB, where xmalloc's
    // peaks are 0.5 – 2 MB).
    trim_system();
    let probe = RssProbe::start(rss);
    let baseline_kb = probe.baseline_kb;
    let heap_before = loam::heap::stats();
    let mut out = match kind {
        AllocKind::Loam => run_with(&LOAM, workload, threads, params, live),
        AllocKind::System => run_with(&SYSTEM, workload, threads, params, live),
        AllocKind::Mimalloc => run_with(&MIMALLOC, workload, threads, params, live),
        AllocKind::Jemalloc => run_with(&JEMALLOC, workload, threads, params, live),
        AllocKind::Snmalloc => run_with(&SNMALLOC, workload, threads, params, live),
        AllocKind::Tcmalloc => run_with(&TCMALLOC, workload, threads, params, live),
    };
    let rss_growth_kb = probe.finish();
    if kind == AllocKind::Loam {
        // For `--verbose`: how much of the run's traffic went home.
        let h = loam::heap::stats();
        out.note += &format!(
            "remote frees sent {} in {} batches, kept in the freeing thread's cache {}, \
             drained {}; heaps new {}, pages adopted {}, segments mapped {}",
            h.remote_frees_sent - heap_before.remote_frees_sent,
            h.remote_batches - heap_before.remote_batches,
            h.remote_frees_cached - heap_before.remote_frees_cached,
            h.remote_frees_drained - heap_before.remote_frees_drained,
            h.heaps_created - heap_before.heaps_created,
            h.pages_adopted - heap_before.pages_adopted,
            h.segments_mapped_total - heap_before.segments_mapped_total,
        );
    }
    kind.release_retained();
    trim_system();
    let left_kb = statm_rss_kb() as i64 - baseline_kb as i64;
    if kind == AllocKind::Loam {
        // For `--verbose`: what the release left (the run's kept memory).
        let h = loam::heap::stats();
        out.note += &format!(
            "; after the release: {} KB allocated, {} KB committed in {} segments, {} heaps \
             abandoned of {} made",
            h.allocated_bytes / 1024,
            h.committed_bytes / 1024,
            h.segments,
            h.heaps_abandoned,
            h.heaps_created,
        );
    }
    let kept_kb = kept.entry(kind).or_insert(0);
    let before = *kept_kb;
    *kept_kb = (before as i64 + left_kb).max(0) as u64;
    let sample = Sample {
        seconds: out.seconds,
        ops: out.ops,
        peak_rss_kb: rss_growth_kb + before,
        rss_growth_kb,
        kept_kb: before,
        phases: out.phases,
    };
    (sample, out.note)
}

/// Gives glibc's free memory back to the OS (`malloc_trim`).
fn trim_system() {
    // SAFETY: `malloc_trim` takes no pointers and is thread-safe.
    unsafe { libc::malloc_trim(0) };
}

/// Medians of one (workload, threads, alloc) over the rounds.
struct Summary {
    workload: Workload,
    threads: usize,
    alloc: AllocKind,
    ops: u64,
    seconds: f64,
    seconds_min: f64,
    seconds_max: f64,
    peak_rss_kb: u64,
    rss_growth_kb: u64,
    kept_kb: u64,
    phases: Vec<(&'static str, f64)>,
}

impl Summary {
    fn new(workload: Workload, threads: usize, alloc: AllocKind, samples: &[Sample]) -> Summary {
        let mut secs: Vec<f64> = samples.iter().map(|s| s.seconds).collect();
        secs.sort_by(f64::total_cmp);
        let seconds = support::median(secs.clone());
        let median_kb = |f: fn(&Sample) -> u64| {
            support::median(samples.iter().map(|s| f(s) as f64).collect()).round() as u64
        };
        let phases = samples[0]
            .phases
            .iter()
            .enumerate()
            .map(|(i, &(name, _))| {
                (
                    name,
                    support::median(samples.iter().map(|s| s.phases[i].1).collect()),
                )
            })
            .collect();
        Summary {
            workload,
            threads,
            alloc,
            ops: samples[0].ops,
            seconds,
            seconds_min: secs[0],
            seconds_max: secs[secs.len() - 1],
            peak_rss_kb: median_kb(|s| s.peak_rss_kb),
            rss_growth_kb: median_kb(|s| s.rss_growth_kb),
            kept_kb: median_kb(|s| s.kept_kb),
            phases,
        }
    }
}

/// One element of the `--json` array.
#[derive(Serialize)]
struct JsonRow {
    workload: &'static str,
    alloc: &'static str,
    threads: usize,
    ops: u64,
    seconds: f64,
    ops_per_sec: f64,
    peak_rss_kb: u64,
    rss_growth_kb: u64,
    rss_kept_kb: u64,
    seconds_min: f64,
    seconds_max: f64,
    rounds: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_vs_system: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_vs_best_peer: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    speedup_vs_1t: Option<f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    phases: BTreeMap<&'static str, f64>,
}

/// Ratios of a summary against its references in the same table.
struct Ratios {
    vs_system: Option<f64>,
    vs_best_peer: Option<f64>,
    vs_1t: Option<f64>,
}

fn ratios(s: &Summary, all: &[Summary]) -> Ratios {
    let same = |o: &&Summary| o.workload == s.workload && o.threads == s.threads;
    let system = all
        .iter()
        .filter(same)
        .find(|o| o.alloc == AllocKind::System)
        .map(|o| s.seconds / o.seconds);
    let best_peer = all
        .iter()
        .filter(same)
        .filter(|o| o.alloc.is_peer())
        .map(|o| o.seconds)
        .min_by(f64::total_cmp)
        .map(|best| s.seconds / best);
    let vs_1t = if s.threads > 1 {
        all.iter()
            .find(|o| o.workload == s.workload && o.alloc == s.alloc && o.threads == 1)
            .map(|one| (s.ops as f64 / s.seconds) / (one.ops as f64 / one.seconds))
    } else {
        None
    };
    Ratios {
        vs_system: system,
        vs_best_peer: best_peer,
        vs_1t,
    }
}

fn print_table(summaries: &[Summary], cli: &Cli, rss: RssMethod) {
    let x = |r: Option<f64>| r.map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"));
    println!(
        "alloc_bench: {} round(s), scale {}, medians; ratios are time ratios (<1.00x = faster)",
        cli.rounds, cli.scale
    );
    println!(
        "peak RSS: growth ({}) + kept (what the allocator still held from its earlier runs)",
        rss.describe()
    );
    println!();
    println!(
        "{:<8} {:>3}  {:<9} {:>16}  {:>9} {:>8} {:>7} {:>12} {:>8}  {:>17}",
        "workload",
        "thr",
        "alloc",
        "median",
        "vs system",
        "vs peer",
        "vs 1t",
        "peak RSS MiB",
        "kept MiB",
        "spread min/max"
    );
    let mut last_group = None;
    for s in summaries {
        let group = (s.workload, s.threads);
        if last_group.is_some() && last_group != Some(group) {
            println!();
        }
        last_group = Some(group);
        let r = ratios(s, summaries);
        let median = if s.workload.reports_rate() {
            format!("{:.2} Mops/s", s.ops as f64 / s.seconds / 1e6)
        } else {
            format!("{:.1} ms", s.seconds * 1e3)
        };
        let spread = format!(
            "{:+.1}% / {:+.1}%",
            (s.seconds_min / s.seconds - 1.0) * 100.0,
            (s.seconds_max / s.seconds - 1.0) * 100.0
        );
        println!(
            "{:<8} {:>3}  {:<9} {:>16}  {:>9} {:>8} {:>7} {:>12.1} {:>8.1}  {:>17}",
            s.workload.name(),
            s.threads,
            s.alloc.name(),
            median,
            x(r.vs_system),
            x(r.vs_best_peer),
            x(r.vs_1t),
            s.peak_rss_kb as f64 / 1024.0,
            s.kept_kb as f64 / 1024.0,
            spread
        );
    }
}

fn print_json(summaries: &[Summary], cli: &Cli) {
    let rows: Vec<JsonRow> = summaries
        .iter()
        .map(|s| {
            let r = ratios(s, summaries);
            JsonRow {
                workload: s.workload.name(),
                alloc: s.alloc.name(),
                threads: s.threads,
                ops: s.ops,
                seconds: s.seconds,
                ops_per_sec: s.ops as f64 / s.seconds,
                peak_rss_kb: s.peak_rss_kb,
                rss_growth_kb: s.rss_growth_kb,
                rss_kept_kb: s.kept_kb,
                seconds_min: s.seconds_min,
                seconds_max: s.seconds_max,
                rounds: cli.rounds,
                ratio_vs_system: r.vs_system,
                ratio_vs_best_peer: r.vs_best_peer,
                speedup_vs_1t: r.vs_1t,
                phases: s.phases.iter().copied().collect(),
            }
        })
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&rows).expect("serializing results")
    );
}

fn main() {
    // A closed stdout (`alloc_bench | head`) ends the process quietly; a
    // bad flag prints the usage, as in the other examples.
    support::quiet_sigpipe();
    let cli: Cli = support::parse_args();
    // At most 10: at 100 a treesum tree of a billion nodes (24 – 32 GB)
    // and a replay ring of 15 GB were an out-of-memory kill, not an error.
    if !(cli.scale.is_finite() && cli.scale > 0.0 && cli.scale <= 10.0) {
        eprintln!(
            "error: --scale must be in (0, 10], got {}\n\n{}",
            cli.scale,
            <Cli as clap::CommandFactory>::command().render_usage()
        );
        std::process::exit(2);
    }
    let mut allocs: Vec<AllocKind> = Vec::new();
    let asked = cli.alloc.clone().unwrap_or_else(|| {
        let mut all = AllocKind::value_variants().to_vec();
        if !tcmalloc::Tcmalloc::available() {
            eprintln!(
                "note: tcmalloc left out: libtcmalloc_minimal.so.4 is not installed \
                 (Debian: apt install libtcmalloc-minimal4)"
            );
            all.retain(|&a| a != AllocKind::Tcmalloc);
        }
        all
    });
    for a in asked {
        if a == AllocKind::Tcmalloc && !tcmalloc::Tcmalloc::available() {
            eprintln!(
                "error: --alloc tcmalloc: libtcmalloc_minimal.so.4 cannot be loaded \
                 (Debian: apt install libtcmalloc-minimal4)"
            );
            std::process::exit(2);
        }
        if !allocs.contains(&a) {
            allocs.push(a);
        }
    }
    let mut workloads: Vec<Workload> = Vec::new();
    for arg in &cli.workload {
        let picked: &[Workload] = match arg {
            WorkloadArg::Treesum => &[Workload::Treesum],
            WorkloadArg::Xmalloc => &[Workload::Xmalloc],
            WorkloadArg::Larson => &[Workload::Larson],
            WorkloadArg::LarsonRing => &[Workload::LarsonRing],
            WorkloadArg::Replay => &[Workload::Replay],
            WorkloadArg::All => &[
                Workload::Treesum,
                Workload::Xmalloc,
                Workload::Larson,
                Workload::LarsonRing,
                Workload::Replay,
            ],
        };
        for &w in picked {
            if !workloads.contains(&w) {
                workloads.push(w);
            }
        }
    }
    let thread_counts: Vec<usize> = match cli.threads {
        Some(n) => vec![n as usize],
        None => vec![1, 2],
    };
    let params = Params::new(cli.scale);
    let rss = RssMethod::detect();
    // The replay's bookkeeping ring, allocated and touched before any run so
    // that it is part of every run's RSS baseline.
    let mut live: VecDeque<Block> = VecDeque::new();
    if workloads.contains(&Workload::Replay) {
        let capacity = params.replay.live_capacity();
        live.resize(
            capacity,
            Block {
                ptr: ptr::null_mut(),
                size: 1,
            },
        );
        live.clear();
    }

    let started = Instant::now();
    let mut summaries = Vec::new();
    let mut kept: BTreeMap<AllocKind, u64> = BTreeMap::new();
    for &workload in &workloads {
        let counts: &[usize] = if workload == Workload::Replay {
            &[1]
        } else {
            &thread_counts
        };
        for &threads in counts {
            let mut samples: BTreeMap<AllocKind, Vec<Sample>> = BTreeMap::new();
            for round in 0..cli.rounds as usize {
                for i in support::round_order(round, allocs.len()) {
                    let kind = allocs[i];
                    let (sample, note) =
                        measure(kind, workload, threads, &params, &mut live, rss, &mut kept);
                    if cli.verbose {
                        let phases: Vec<String> = sample
                            .phases
                            .iter()
                            .map(|(n, s)| format!("{n} {:.1}", s * 1e3))
                            .collect();
                        eprintln!(
                            "[{:>6.1}s] {} {}t round {} {:<8} {:>9.1} ms  peak {:.1} MiB (kept {:.1})  {} {}",
                            started.elapsed().as_secs_f64(),
                            workload.name(),
                            threads,
                            round + 1,
                            kind.name(),
                            sample.seconds * 1e3,
                            sample.peak_rss_kb as f64 / 1024.0,
                            sample.kept_kb as f64 / 1024.0,
                            phases.join(" "),
                            note
                        );
                    }
                    samples.entry(kind).or_default().push(sample);
                }
            }
            if !cli.verbose {
                eprintln!(
                    "[{:>6.1}s] {} {}t done",
                    started.elapsed().as_secs_f64(),
                    workload.name(),
                    threads
                );
            }
            for &kind in &allocs {
                summaries.push(Summary::new(workload, threads, kind, &samples[&kind]));
            }
        }
    }

    if cli.json {
        print_json(&summaries, &cli);
    } else {
        print_table(&summaries, &cli, rss);
    }
}
