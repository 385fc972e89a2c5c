//! Intel TBB's `tree_sum` (seed 001): a balanced binary tree of 10,000,000
//! nodes is created, half serially and half in parallel, then summed three
//! ways: SerialSumTree (one thread), SimpleParallelSumTree (a task for
//! every subtree of at least 1,000 nodes) and OptimizedParallelSumTree
//! (a few large tasks, about eight per worker). The seed ran it over TBB's
//! scalable allocator, tcmalloc and `malloc`; here the nodes are
//! - loam managed `Gc` nodes, created and summed on a `ManagedPool`;
//! - plain nodes from the system allocator, loam's heap
//!   (`loam::heap::LoamAlloc`), mimalloc, jemalloc and snmalloc, on a
//!   `loam-threadpool` pool of the same size.
//!
//! Every version computes the same sum and node count and checks them.
//! Rounds are interleaved (each round runs every version, in rotating
//! order); the table gives the medians, and each version's ratio to loam's
//! heap, per phase.
//!
//! A managed tree is read inside `mutate` calls, and a `mutate` call may
//! not fork (a pause would wait for it while the workers it waits for
//! wait for the pause), so the managed parallel sums fork over rooted
//! subtrees: the subtrees where the plain versions stop forking, rooted
//! once before the timing; each task sums one in its own `mutate` call.
//! Managed creation builds subtrees of up to 65,536 nodes per `mutate`
//! call and roots each, so collections can run between calls.
//!
//! ```text
//! cargo run --release --example tree_sum
//! cargo run --release --example tree_sum -- --nodes 1000000 --rounds 5 --threads 2
//! ```

// Not every helper is used here.
#[allow(dead_code)]
#[path = "support/mod.rs"]
mod support;

use clap::Parser;
use loam::runtime::{Gc, GlobalRoot, ManagedPool, Mutation, Mutator, Rootable, Runtime, Trace};
use loam::threadpool::{ThreadPool, ThreadPoolBuilder};
use std::alloc::Layout;
use std::time::Instant;
use support::{median, Heap, HEAPS};

#[derive(Parser, Debug)]
#[command(
    name = "tree_sum",
    about = "TBB's tree_sum over loam's managed heap and four memory managers."
)]
struct Cli {
    /// Nodes in the tree, 3 to 1,000,000,000 (the sums it checks stay in
    /// 64 bits).
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(3..=1_000_000_000))]
    nodes: u64,
    /// Interleaved rounds, 1 to 1000; the table gives medians.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=1000))]
    rounds: u16,
    /// Worker threads, 1 to 4096 (default: one per CPU).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4096))]
    threads: Option<u16>,
}

/// Subtrees below this many nodes are summed serially
/// (SimpleParallelSumTree's cutoff, as TBB's).
const SIMPLE_CUTOFF: u64 = 1_000;

/// Managed creation: nodes built per `mutate` call at most.
const GC_CHUNK: u64 = 1 << 16;

/// The five timed phases, in the seed's order.
const PHASES: [&str; 5] = [
    "creation: half serially",
    "creation: half in parallel",
    "SerialSumTree",
    "SimpleParallelSumTree",
    "OptimizedParallelSumTree",
];

/// The tree of nodes `first..first + n`: the root holds `first`, its left
/// subtree the next `(n - 1) / 2`, its right subtree the rest. Each node
/// records its subtree's node count, as TBB's `TreeNode` does.
fn split(first: u64, n: u64) -> ((u64, u64), (u64, u64)) {
    let left = (n - 1) / 2;
    ((first + 1, left), (first + 1 + left, n - 1 - left))
}

/// What a sum finds: the values' sum and the node count.
type Sum = (u64, u64);

fn add(a: Sum, b: Sum) -> Sum {
    (a.0 + b.0, a.1 + b.1)
}

/// The expected sum of a tree of `n` nodes valued `0..n`.
fn expected(n: u64) -> Sum {
    (n * (n - 1) / 2, n)
}

/// The depth down to which OptimizedParallelSumTree forks: about eight
/// tasks per worker.
fn optimized_depth(threads: usize) -> u32 {
    (threads.max(1) * 8).next_power_of_two().trailing_zeros()
}

// ---- plain nodes from a memory manager

struct Node {
    value: u64,
    count: u64,
    left: *mut Node,
    right: *mut Node,
}

/// A subtree handed to another worker.
#[derive(Clone, Copy)]
struct Tree(*mut Node);

// SAFETY: a tree is built before it is shared and only read after; each
// node is freed once, by `free`, after every reader is done.
unsafe impl Send for Tree {}
// SAFETY: as above: shared trees are read-only.
unsafe impl Sync for Tree {}

impl Heap {
    fn node(self, value: u64, count: u64, left: Tree, right: Tree) -> Tree {
        let layout = Layout::new::<Node>();
        // SAFETY: `Node` is not zero-sized.
        let p = unsafe { self.alloc.alloc(layout) }.cast::<Node>();
        assert!(!p.is_null(), "{}: out of memory", self.name);
        // SAFETY: a fresh allocation of `Node`'s layout.
        unsafe {
            p.write(Node {
                value,
                count,
                left: left.0,
                right: right.0,
            })
        };
        Tree(p)
    }

    fn build(self, first: u64, n: u64) -> Tree {
        if n == 0 {
            return Tree(std::ptr::null_mut());
        }
        let ((lf, ln), (rf, rn)) = split(first, n);
        let (left, right) = (self.build(lf, ln), self.build(rf, rn));
        self.node(first, n, left, right)
    }

    fn build_parallel(self, first: u64, n: u64) -> Tree {
        if n < GC_CHUNK {
            return self.build(first, n);
        }
        let ((lf, ln), (rf, rn)) = split(first, n);
        let (left, right) = loam::threadpool::join(
            || self.build_parallel(lf, ln),
            || self.build_parallel(rf, rn),
        );
        self.node(first, n, left, right)
    }

    /// Frees every node of `t`.
    fn free(self, t: Tree) {
        if t.0.is_null() {
            return;
        }
        // SAFETY: a node of ours, read before it is freed, freed once.
        let (left, right) = unsafe { ((*t.0).left, (*t.0).right) };
        self.free(Tree(left));
        self.free(Tree(right));
        // SAFETY: allocated by `node` with this layout, freed once.
        unsafe { self.alloc.dealloc(t.0.cast(), Layout::new::<Node>()) };
    }
}

/// The node at `t`, or `None`.
fn node(t: Tree) -> Option<&'static Node> {
    // SAFETY: a live node of a tree being read (`Tree`'s contract); the
    // reference does not outlive the sum that asked for it.
    unsafe { t.0.as_ref() }
}

fn serial_sum(t: Tree) -> Sum {
    match node(t) {
        None => (0, 0),
        Some(n) => add(
            (n.value, 1),
            add(serial_sum(Tree(n.left)), serial_sum(Tree(n.right))),
        ),
    }
}

fn simple_sum(t: Tree) -> Sum {
    match node(t) {
        None => (0, 0),
        Some(n) if n.count < SIMPLE_CUTOFF => serial_sum(t),
        Some(n) => {
            let (left, right) = (Tree(n.left), Tree(n.right));
            let (l, r) =
                loam::threadpool::join(move || simple_sum(left), move || simple_sum(right));
            add((n.value, 1), add(l, r))
        }
    }
}

fn optimized_sum(t: Tree, depth: u32) -> Sum {
    match node(t) {
        None => (0, 0),
        Some(_) if depth == 0 => serial_sum(t),
        Some(n) => {
            let (left, right) = (Tree(n.left), Tree(n.right));
            let (l, r) = loam::threadpool::join(
                move || optimized_sum(left, depth - 1),
                move || optimized_sum(right, depth - 1),
            );
            add((n.value, 1), add(l, r))
        }
    }
}

/// One round of the plain version on `heap`: the five phases' times (ms).
fn run_plain(heap: Heap, pool: &ThreadPool, n: u64) -> [f64; 5] {
    let mut t = [0.0; 5];
    let ((lf, ln), (rf, rn)) = split(0, n);
    let start = Instant::now();
    let left = heap.build(lf, ln);
    t[0] = ms(start);
    let start = Instant::now();
    let right = pool.install(|| heap.build_parallel(rf, rn));
    t[1] = ms(start);
    let root = heap.node(0, n, left, right);
    let want = expected(n);
    // An untimed serial sum first, as TBB's main does before its timed
    // ones: every version's sums then start from a tree walked once.
    assert_eq!(serial_sum(root), want, "{}: the warm-up sum", heap.name);
    let start = Instant::now();
    assert_eq!(serial_sum(root), want, "{}: SerialSumTree", heap.name);
    t[2] = ms(start);
    let start = Instant::now();
    assert_eq!(
        pool.install(|| simple_sum(root)),
        want,
        "{}: SimpleParallelSumTree",
        heap.name
    );
    t[3] = ms(start);
    let depth = optimized_depth(pool.current_num_threads());
    let start = Instant::now();
    assert_eq!(
        pool.install(|| optimized_sum(root, depth)),
        want,
        "{}: OptimizedParallelSumTree",
        heap.name
    );
    t[4] = ms(start);
    heap.free(root);
    t
}

// ---- loam managed nodes

#[derive(Trace)]
struct GcNode<'gc> {
    value: u64,
    count: u64,
    left: Option<Gc<'gc, GcNode<'gc>>>,
    right: Option<Gc<'gc, GcNode<'gc>>>,
}

type NodeRoot = Rootable!['gc => GcNode<'gc>];

fn gc_build<'gc>(mc: &Mutation<'gc>, first: u64, n: u64) -> Option<Gc<'gc, GcNode<'gc>>> {
    if n == 0 {
        return None;
    }
    let ((lf, ln), (rf, rn)) = split(first, n);
    let (left, right) = (gc_build(mc, lf, ln), gc_build(mc, rf, rn));
    Some(mc.alloc(GcNode {
        value: first,
        count: n,
        left,
        right,
    }))
}

/// The tree of `first..first + n` built in `mutate` calls of at most
/// `GC_CHUNK` nodes, its subtrees held in roots between calls; in
/// parallel (by `join` on the managed pool) or not.
fn gc_build_rooted(
    m: &mut Mutator,
    first: u64,
    n: u64,
    parallel: bool,
) -> Option<GlobalRoot<NodeRoot>> {
    if n == 0 {
        return None;
    }
    if n <= GC_CHUNK {
        return m.mutate(|mc| gc_build(mc, first, n).map(|t| mc.global_root(t)));
    }
    let ((lf, ln), (rf, rn)) = split(first, n);
    let (left, right) = if parallel {
        loam::runtime::join(
            m,
            |m| gc_build_rooted(m, lf, ln, true),
            |m| gc_build_rooted(m, rf, rn, true),
        )
    } else {
        (
            gc_build_rooted(m, lf, ln, false),
            gc_build_rooted(m, rf, rn, false),
        )
    };
    m.mutate(|mc| {
        Some(mc.global_root(mc.alloc(GcNode {
            value: first,
            count: n,
            left: left.map(|r| r.get(mc)),
            right: right.map(|r| r.get(mc)),
        })))
    })
}

fn gc_sum(t: Option<Gc<'_, GcNode<'_>>>) -> Sum {
    match t {
        None => (0, 0),
        Some(n) => add((n.value, 1), add(gc_sum(n.left), gc_sum(n.right))),
    }
}

/// The subtrees where a parallel sum stops forking, rooted, and the sum
/// of the nodes above them: those of at least `cutoff` nodes forked
/// (Simple), or those at depth `depth` (Optimized).
fn frontier<'gc>(
    mc: &Mutation<'gc>,
    t: Option<Gc<'gc, GcNode<'gc>>>,
    cutoff: u64,
    depth: u32,
    out: &mut Vec<GlobalRoot<NodeRoot>>,
) -> Sum {
    let Some(n) = t else { return (0, 0) };
    if n.count < cutoff || depth == 0 {
        out.push(mc.global_root(n));
        return (0, 0);
    }
    add(
        (n.value, 1),
        add(
            frontier(mc, n.left, cutoff, depth - 1, out),
            frontier(mc, n.right, cutoff, depth - 1, out),
        ),
    )
}

/// Sums the rooted subtrees on the managed pool, a task each.
fn gc_parallel_sum(m: &mut Mutator, parts: &[GlobalRoot<NodeRoot>]) -> Sum {
    // None: a tree too small to reach the frontier's depth (all of it is
    // summed above the frontier). Split, it recursed for ever.
    if parts.is_empty() {
        return (0, 0);
    }
    if parts.len() == 1 {
        return m.mutate(|mc| gc_sum(Some(parts[0].get(mc))));
    }
    let (a, b) = parts.split_at(parts.len() / 2);
    let (x, y) = loam::runtime::join(m, |m| gc_parallel_sum(m, a), |m| gc_parallel_sum(m, b));
    add(x, y)
}

/// One round of the managed version: the five phases' times (ms).
fn run_gc(pool: &ManagedPool, n: u64) -> [f64; 5] {
    let mut t = [0.0; 5];
    let ((lf, ln), (rf, rn)) = split(0, n);
    let (tree, parts) = pool.install(|m| {
        let start = Instant::now();
        let left = gc_build_rooted(m, lf, ln, false);
        t[0] = ms(start);
        let start = Instant::now();
        let right = gc_build_rooted(m, rf, rn, true);
        t[1] = ms(start);
        let tree = m.mutate(|mc| {
            mc.global_root::<NodeRoot>(mc.alloc(GcNode {
                value: 0,
                count: n,
                left: left.map(|r| r.get(mc)),
                right: right.map(|r| r.get(mc)),
            }))
        });
        // The subtrees the parallel sums fork over (untimed: the plain
        // versions find them as they go, at no cost to speak of).
        let mut simple = Vec::new();
        let mut optimized = Vec::new();
        let depth = optimized_depth(pool.num_threads());
        let above = m.mutate(|mc| {
            let root = Some(tree.get(mc));
            (
                frontier(mc, root, SIMPLE_CUTOFF, u32::MAX, &mut simple),
                frontier(mc, root, 0, depth, &mut optimized),
            )
        });
        (tree, (simple, optimized, above))
    });
    let (simple, optimized, (simple_above, optimized_above)) = parts;
    // The cycles the creation asked for, timed with it: they ran into the
    // sums' times otherwise (marking and sweeping beside them).
    let start = Instant::now();
    pool.runtime().wait_for_cycle();
    t[1] += ms(start);
    let want = expected(n);
    // The untimed warm-up sum, as for the plain versions.
    let sum = pool.install(|m| m.mutate(|mc| gc_sum(Some(tree.get(mc)))));
    assert_eq!(sum, want, "loam Gc: the warm-up sum");
    let start = Instant::now();
    let sum = pool.install(|m| m.mutate(|mc| gc_sum(Some(tree.get(mc)))));
    t[2] = ms(start);
    assert_eq!(sum, want, "loam Gc: SerialSumTree");
    let start = Instant::now();
    let sum = add(simple_above, pool.install(|m| gc_parallel_sum(m, &simple)));
    t[3] = ms(start);
    assert_eq!(sum, want, "loam Gc: SimpleParallelSumTree");
    let start = Instant::now();
    let sum = add(
        optimized_above,
        pool.install(|m| gc_parallel_sum(m, &optimized)),
    );
    t[4] = ms(start);
    assert_eq!(sum, want, "loam Gc: OptimizedParallelSumTree");
    drop((tree, simple, optimized));
    pool.runtime().collect();
    t
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

fn main() {
    support::quiet_sigpipe();
    let cli: Cli = support::parse_args();
    let threads = cli
        .threads
        .map(usize::from)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    // A setting the environment gives that cannot be read is an error.
    let rt = Runtime::builder().try_build().unwrap_or_else(|e| {
        eprintln!("error: the runtime's settings: {e}");
        std::process::exit(1)
    });
    let managed = ManagedPool::builder(&rt)
        .num_threads(threads)
        .build()
        .expect("the managed pool");
    let plain = ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("the pool");
    let names: Vec<&str> = std::iter::once("loam Gc")
        .chain(HEAPS.iter().map(|h| h.name))
        .collect();
    // times[version][phase]: one figure per round.
    let mut times = vec![vec![Vec::new(); PHASES.len()]; names.len()];
    for round in 0..usize::from(cli.rounds) {
        for v in support::round_order(round, names.len()) {
            eprint!(
                "\rround {}/{}: {} ...            ",
                round + 1,
                usize::from(cli.rounds),
                names[v]
            );
            let t = if v == 0 {
                run_gc(&managed, cli.nodes)
            } else {
                run_plain(HEAPS[v - 1], &plain, cli.nodes)
            };
            for (p, &ms) in t.iter().enumerate() {
                times[v][p].push(ms);
            }
        }
    }
    eprintln!("\r{:60}", "");
    println!(
        "tree_sum: {} nodes, {threads} threads, medians of {} interleaved rounds, ms (ratio to loam heap)",
        cli.nodes,
        usize::from(cli.rounds)
    );
    println!("| phase | {} |", names.join(" | "));
    println!("|---|{}", "---|".repeat(names.len()));
    let base_version = names
        .iter()
        .position(|&n| n == "loam heap")
        .expect("loam's heap is a version");
    for (p, phase) in PHASES.iter().enumerate() {
        let base = median(times[base_version][p].clone());
        let cells: Vec<String> = (0..names.len())
            .map(|v| {
                let m = median(times[v][p].clone());
                format!("{m:.1} ({:.2})", m / base)
            })
            .collect();
        println!("| {phase} | {} |", cells.join(" | "));
    }
}
