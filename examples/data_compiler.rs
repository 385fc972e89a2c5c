//! The Delphi memory-manager test of 2004 (seed 003): a single-threaded
//! "data compiler" whose allocation profile the seed measured (47,915,159
//! allocations, 6,348,579 reallocations, sizes by the table below), run
//! over each memory manager; execution time and peak memory against the
//! system allocator (= 100%), as the seed's relative table. The seed's
//! finding: on one thread, no replacement beat the stock manager.
//!
//! The program: allocations drawn from the seed's size table go into
//! "cache lists" of 2,000 blocks; 256 lists are kept and the oldest is
//! discarded (every block freed) as each new one fills, as the data
//! compiler builds and drops its lists; one operation in eight reallocates
//! a block of the list being filled to a size drawn from the seed's
//! reallocation table. Each block's first and last bytes are written when
//! it is made and checked when it is freed. `--scale 1` is the seed's
//! 47.9 million allocations; the default 0.1 takes a few seconds per
//! manager. Every run is a child process (its own peak memory),
//! interleaved with the others and repeated; the table gives medians.
//!
//! ```text
//! cargo run --release --example data_compiler
//! cargo run --release --example data_compiler -- --scale 1 --rounds 2
//! ```

#[path = "support/mod.rs"]
mod support;

use clap::Parser;
use std::alloc::Layout;
use std::collections::VecDeque;
use std::time::Instant;
use support::{heap, median, peak_rss_kb, Heap, HEAPS};

#[derive(Parser, Debug)]
#[command(
    name = "data_compiler",
    about = "A single-threaded allocation profile (seed 003) over each memory manager."
)]
struct Cli {
    /// Fraction of the seed's 47.9 million allocations.
    #[arg(long, default_value_t = 0.1)]
    scale: f64,
    /// Interleaved rounds, 1 to 1000; the table gives medians.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=1000))]
    rounds: u16,
    /// Internal: run one heap in this process and print its figures.
    #[arg(long, hide = true)]
    child: Option<String>,
}

/// The seed's allocation sizes: (upper bound, calls); each bucket starts
/// where the last ended ("<32" is 17..31 in the seed's words, so blocks
/// of exactly 16 fall in the first).
const ALLOCATIONS: [(usize, u64); 10] = [
    (16, 28_317_517),
    (32, 10_947_741),
    (64, 8_400_639),
    (128, 248_320),
    (512, 904),
    (1 << 10, 2),
    (10 << 10, 30),
    (100 << 10, 5),
    (500 << 10, 0),
    (2 << 20, 1),
];

/// The seed's reallocations, by new size.
const REALLOCATIONS: [(usize, u64); 8] = [
    (16, 2_606_869),
    (32, 2_677_423),
    (64, 490_131),
    (128, 473_327),
    (512, 89_195),
    (1 << 10, 6_224),
    (10 << 10, 5_388),
    (100 << 10, 22),
];

const LIST_LEN: usize = 2_000;
const LISTS_KEPT: usize = 256;

/// xorshift64*, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A size drawn from `table` (bucket by calls, uniform inside it).
    fn size(&mut self, table: &[(usize, u64)], total: u64) -> usize {
        let mut pick = self.next() % total;
        let mut low = 1;
        for &(high, calls) in table {
            if pick < calls {
                return low + (self.next() % (high - low) as u64) as usize;
            }
            pick -= calls;
            low = high;
        }
        unreachable!("the pick is below the total")
    }
}

/// A block and its size.
struct Block(*mut u8, usize);

/// Marks a block's first and last bytes with `tag`.
fn stamp(b: &Block, tag: u8) {
    // SAFETY: `b` is a live allocation of `b.1 >= 1` bytes.
    unsafe {
        *b.0 = tag;
        *b.0.add(b.1 - 1) = tag;
    }
}

/// Checks the marks and frees the block.
fn release(heap: Heap, b: Block) -> u64 {
    // SAFETY: a live allocation of `b.1` bytes made with align 8, freed
    // once, here.
    unsafe {
        let (first, last) = (*b.0, *b.0.add(b.1 - 1));
        assert_eq!(first, last, "{}: a block was overwritten", heap.name);
        heap.alloc
            .dealloc(b.0, Layout::from_size_align_unchecked(b.1, 8));
        u64::from(first)
    }
}

/// The whole profile on `heap`; returns a checksum of what it freed.
fn compile(heap: Heap, allocations: u64) -> u64 {
    let total = |t: &[(usize, u64)]| t.iter().map(|b| b.1).sum::<u64>();
    let (alloc_total, realloc_total) = (total(&ALLOCATIONS), total(&REALLOCATIONS));
    let mut rng = Rng(0x0da7_ac0e_1e55_2004);
    let mut lists: VecDeque<Vec<Block>> = VecDeque::new();
    let mut current: Vec<Block> = Vec::with_capacity(LIST_LEN);
    let mut check = 0_u64;
    for op in 0..allocations {
        let size = rng.size(&ALLOCATIONS, alloc_total);
        let layout = Layout::from_size_align(size, 8).expect("a small layout");
        // SAFETY: a non-zero size.
        let p = unsafe { heap.alloc.alloc(layout) };
        assert!(!p.is_null(), "{}: out of memory", heap.name);
        let block = Block(p, size);
        stamp(&block, op as u8);
        current.push(block);
        if op % 8 == 7 {
            // One reallocation per eight operations, of a block of the
            // list being filled.
            let i = (rng.next() % current.len() as u64) as usize;
            let new = rng.size(&REALLOCATIONS, realloc_total);
            let Block(p, old) = current[i];
            // SAFETY: a live block of `old` bytes, align 8; `new` > 0.
            let q = unsafe {
                heap.alloc
                    .realloc(p, Layout::from_size_align_unchecked(old, 8), new)
            };
            assert!(!q.is_null(), "{}: out of memory", heap.name);
            // SAFETY: the first `min(old, new)` bytes moved with it.
            let tag = unsafe { *q };
            current[i] = Block(q, new);
            stamp(&current[i], tag);
        }
        if current.len() == LIST_LEN {
            lists.push_back(std::mem::replace(
                &mut current,
                Vec::with_capacity(LIST_LEN),
            ));
            if lists.len() > LISTS_KEPT {
                for b in lists.pop_front().expect("more than kept") {
                    check = check.wrapping_add(release(heap, b));
                }
            }
        }
    }
    for b in lists.into_iter().flatten().chain(current) {
        check = check.wrapping_add(release(heap, b));
    }
    check
}

fn main() {
    support::quiet_sigpipe();
    let cli: Cli = support::parse_args();
    // At least 0.0001 (4,791 allocations): below it a run allocated
    // nothing and its timings meant nothing.
    if !(cli.scale >= 1e-4 && cli.scale <= 10.0) {
        eprintln!(
            "error: --scale must be in [0.0001, 10]\n\n{}",
            <Cli as clap::CommandFactory>::command().render_usage()
        );
        std::process::exit(2);
    }
    let allocations = (47_915_159.0 * cli.scale) as u64;
    if let Some(name) = &cli.child {
        let Some(heap) = heap(name) else {
            eprintln!("error: no heap {name}");
            std::process::exit(1);
        };
        let start = Instant::now();
        let check = compile(heap, allocations);
        println!("ms {}", start.elapsed().as_secs_f64() * 1e3);
        println!("peak_kb {}", peak_rss_kb());
        println!("check {check}");
        return;
    }
    let rounds = usize::from(cli.rounds);
    // figures[heap]: (ms, peak KiB, checksum) per round.
    let mut figures = vec![Vec::new(); HEAPS.len()];
    for round in 0..rounds {
        for h in support::round_order(round, HEAPS.len()) {
            eprint!(
                "\rround {}/{rounds}: {} ...          ",
                round + 1,
                HEAPS[h].name
            );
            let args =
                ["--child", HEAPS[h].name, "--scale", &cli.scale.to_string()].map(String::from);
            let lines = support::child(&args).unwrap_or_else(|e| {
                eprintln!("\nerror: {e}");
                std::process::exit(1);
            });
            let get = |key: &str| match lines.iter().find(|(k, _)| k == key) {
                Some(l) => l.1,
                None => {
                    eprintln!("\nerror: a child run ({}) printed no {key}", HEAPS[h].name);
                    std::process::exit(1)
                }
            };
            figures[h].push((get("ms"), get("peak_kb"), get("check")));
        }
    }
    eprintln!("\r{:70}", "");
    // Every heap freed the same blocks with the same marks.
    let check = figures[0][0].2;
    if !figures.iter().flatten().all(|f| f.2 == check) {
        eprintln!("error: the heaps' checksums differ");
        std::process::exit(1);
    }
    let ms = |h: usize| median(figures[h].iter().map(|f| f.0).collect());
    let kb = |h: usize| median(figures[h].iter().map(|f| f.1).collect());
    println!(
        "data_compiler: {allocations} allocations (scale {}), one thread, medians of {rounds} interleaved rounds; relative to the system allocator",
        cli.scale
    );
    println!("| heap | time ms | time | peak MiB | peak memory |");
    println!("|---|---|---|---|---|");
    for (h, heap) in HEAPS.iter().enumerate() {
        println!(
            "| {} | {:.0} | {:.1}% | {:.1} | {:.1}% |",
            heap.name,
            ms(h),
            100.0 * ms(h) / ms(0),
            kb(h) / 1024.0,
            100.0 * kb(h) / kb(0)
        );
    }
}
