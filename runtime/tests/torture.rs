//! Torture: four mutator threads build and mutate random object graphs
//! (seeded), drop and re-root subgraphs and share some through global roots,
//! through hundreds of collections with verify mode on. Every few steps a
//! walk from the roots checks every reachable object's contents; at the end
//! every object allocated has been dropped exactly once.
//!
//! Last, two runtimes at once, with scoped threads inside calls, panicking
//! destructors and hooks (`two_runtimes`).
//!
//! `LOAM_TORTURE_SCALE` multiplies the work (default 1, a few seconds; try
//! 20 by hand) and `LOAM_TORTURE_SEED` picks the seed (printed on failure).

mod support;
use loam_runtime::{
    Gc, GcCell, GcLock, GcWeak, GlobalRoot, Mutation, Root, Rootable, Runtime, Trace,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
#[cfg(target_os = "linux")]
use support::{first_allowed_cpu, pin_to_cpu};

static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);

const LIVE: u64 = 0x11FE_11FE_11FE_11FE;
const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// Counts drops, and catches a second drop of the same object.
struct Counted(u64);

impl Counted {
    fn new() -> Self {
        ALLOCATED.fetch_add(1, Ordering::Relaxed);
        Counted(LIVE)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        assert_eq!(self.0, LIVE, "an object was dropped twice (or corrupted)");
        self.0 = DEAD;
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Trace)]
struct Obj<'gc> {
    id: u64,
    check: u64,
    edges: GcLock<'gc, Vec<Gc<'gc, Obj<'gc>>>>,
    link: GcCell<'gc, Option<Gc<'gc, Obj<'gc>>>>,
    /// A chain of objects without drop glue: the sweep frees their pages
    /// from the bitmaps alone (whole pages where it can).
    plain: GcCell<'gc, Option<Gc<'gc, Plain<'gc>>>>,
    #[trace(skip)]
    counted: Counted,
}

#[derive(Trace)]
struct Plain<'gc> {
    check: u64,
    next: Option<Gc<'gc, Plain<'gc>>>,
}

fn plain_chain<'gc>(mc: &Mutation<'gc>, n: usize, seed: u64) -> Option<Gc<'gc, Plain<'gc>>> {
    let mut head = None;
    for i in 0..n as u64 {
        head = Some(mc.alloc(Plain {
            check: check_of(seed ^ i),
            next: head,
        }));
    }
    head
}

type ObjRoot = Rootable!['gc => Obj<'gc>];
type WeakRoot = Rootable!['gc => GcWeak<'gc, Obj<'gc>>];

fn check_of(id: u64) -> u64 {
    id.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ 0x5555
}

/// xorshift64*: small, seeded, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn new_obj<'gc>(mc: &Mutation<'gc>, next_id: &AtomicU64) -> Gc<'gc, Obj<'gc>> {
    new_obj_with(mc, next_id, Vec::new())
}

fn new_obj_with<'gc>(
    mc: &Mutation<'gc>,
    next_id: &AtomicU64,
    edges: Vec<Gc<'gc, Obj<'gc>>>,
) -> Gc<'gc, Obj<'gc>> {
    let id = next_id.fetch_add(1, Ordering::Relaxed);
    mc.alloc(Obj {
        id,
        check: check_of(id),
        edges: GcLock::new(edges),
        link: GcCell::new(None),
        plain: GcCell::new(None),
        counted: Counted::new(),
    })
}

/// Checks every object reachable from `from`; returns how many.
fn walk<'gc>(from: impl IntoIterator<Item = Gc<'gc, Obj<'gc>>>) -> usize {
    let mut seen = HashSet::new();
    let mut stack: Vec<Gc<'gc, Obj<'gc>>> = from.into_iter().collect();
    while let Some(o) = stack.pop() {
        if !seen.insert(o.id) {
            continue;
        }
        assert_eq!(
            o.check,
            check_of(o.id),
            "object {} corrupted (freed while reachable?)",
            o.id
        );
        assert_eq!(
            o.counted.0, LIVE,
            "object {} was dropped while reachable",
            o.id
        );
        stack.extend(o.edges.read().iter().copied());
        stack.extend(o.link.get());
        // Read the chain's head once: another thread may replace the chain
        // meanwhile (objects are shared through global roots), and counting
        // one chain while checking another reported a "corrupted" chain.
        let head = o.plain.get();
        let mut p = head;
        let mut len = 0u64;
        while let Some(x) = p {
            len += 1;
            p = x.next;
        }
        // The chain was built from seed `id` counting down from its length.
        let mut p = head;
        let mut i = len;
        while let Some(x) = p {
            i -= 1;
            assert_eq!(
                x.check,
                check_of(o.id ^ i),
                "plain object of {} corrupted",
                o.id
            );
            p = x.next;
        }
    }
    seen.len()
}

/// A random object reachable from `start` within a few hops.
fn wander<'gc>(rng: &mut Rng, start: Gc<'gc, Obj<'gc>>) -> Gc<'gc, Obj<'gc>> {
    let mut cur = start;
    for _ in 0..rng.below(4) {
        let next = {
            let e = cur.edges.read();
            if !e.is_empty() && rng.below(3) > 0 {
                Some(e[rng.below(e.len())])
            } else {
                cur.link.get()
            }
        };
        match next {
            Some(n) => cur = n,
            None => break,
        }
    }
    cur
}

/// `LOAM_TORTURE_GENERATIONAL=0` runs every cycle full (to tell a minor
/// cycles' fault from another).
fn generational() -> bool {
    support::flag_knob("LOAM_TORTURE_GENERATIONAL", true)
}

/// Steps between forced cycles (per forcing thread); fewer steps, more full
/// cycles and fewer minor ones.
fn force_every() -> usize {
    support::knob("LOAM_TORTURE_FORCE_EVERY", 40, 4)
}

/// The seed, `LOAM_TORTURE_SEED` or a fixed default.
fn seed() -> u64 {
    std::env::var_os("LOAM_TORTURE_SEED").map_or(0x1008_2026, |v| {
        let v = v.to_string_lossy();
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("LOAM_TORTURE_SEED={v:?}: expected a whole number"))
    })
}

/// A runtime for the torture: small heaps, so that cycles come often; every
/// mark past its roots concurrent, or the default budget; fewer cycles with
/// locks (most are full) than with cells.
fn builder(
    space: Space,
    verify: bool,
    concurrent: bool,
    locks: bool,
) -> loam_runtime::RuntimeBuilder {
    builder_ragged(space, verify, concurrent, locks, false)
}

/// `builder`, with ragged handshakes on or off.
fn builder_ragged(
    space: Space,
    verify: bool,
    concurrent: bool,
    locks: bool,
    ragged: bool,
) -> loam_runtime::RuntimeBuilder {
    let builder = match space {
        Space::Pages => Runtime::builder(),
        Space::System => Runtime::builder().global_alloc(std::alloc::System),
    };
    builder
        .ignore_env()
        .gc_threads(2)
        .verify(verify)
        .generational(generational())
        .ragged_handshakes(ragged)
        // Below the floor on purpose: a cycle at nearly every chunk.
        .__stress_min_heap(16 << 10)
        .gc_percent(if locks { 20 } else { 5 })
        .mark_pause_budget(if concurrent {
            Duration::ZERO
        } else {
            Duration::from_millis(2)
        })
}

fn scale() -> usize {
    support::knob("LOAM_TORTURE_SCALE", 1, 1)
}

/// Verify mode first; then without it, so the sweep takes its fast paths
/// (no header reads, whole pages handed back untouched), which verify mode's
/// poisoning turns off. Each with every mark past its roots concurrent (a
/// zero pause budget: mutators run between the two pauses of every cycle,
/// behind the snapshot barrier) and with the default budget (these small
/// heaps then mostly mark within the first pause). Each in two modes: `locks`, with `GcLock` writes
/// (most cycles full, see the runtime's `cell.rs`), and `cells`, with
/// objects' edge lists filled only at allocation and every later store
/// through a `GcCell`, so that the paced cycles are minor ones and the
/// barrier is what keeps them right. `LOAM_TORTURE_MODE=locks` (or `cells`)
/// runs one mode only, for sweeping seeds by hand. All of it in loam's
/// pages, then in the system allocator as the object space (whose sweep
/// frees object by object, from registries, with marks in the objects'
/// prefixes); `LOAM_TORTURE_SPACE=pages` (or `system`) runs one. One
/// test, so the drop counters are its alone.
#[test]
fn four_mutators_through_hundreds_of_cycles() {
    let mode = std::env::var("LOAM_TORTURE_MODE").unwrap_or_default();
    let modes: &[bool] = match mode.as_str() {
        "locks" => &[true],
        "cells" => &[false],
        "" => &[true, false],
        other => panic!("LOAM_TORTURE_MODE={other}: expected `locks` or `cells`"),
    };
    let spaces: &[Space] = match std::env::var("LOAM_TORTURE_SPACE")
        .unwrap_or_default()
        .as_str()
    {
        "pages" => &[Space::Pages],
        "system" => &[Space::System],
        "" => &[Space::Pages, Space::System],
        other => panic!("LOAM_TORTURE_SPACE={other}: expected `pages` or `system`"),
    };
    for &space in spaces {
        for verify in [true, false] {
            for concurrent in [true, false] {
                for &locks in modes {
                    torture(space, verify, concurrent, locks, false);
                }
            }
        }
        // One runtime with locks and one with cells: both modes.
        if modes.len() == 2 {
            two_runtimes(space);
        }
    }
    // Ragged cycles (per-mutator handshakes, no stop at the mark's start
    // or end), verify mode on and off, in loam's pages (the only space
    // they run in).
    if spaces.iter().any(|s| matches!(s, Space::Pages)) {
        for verify in [true, false] {
            for &locks in modes {
                torture(Space::Pages, verify, true, locks, true);
            }
        }
    }
    // Four mutators, the coordinator and the GC threads all on one CPU
    // (more mutators than cores, and GC threads starved): the assists and
    // the bounded termination under the worst scheduling, verify on.
    // Locks with stopped cycles, cells with ragged ones (as the modes and
    // spaces asked for allow).
    #[cfg(target_os = "linux")]
    if spaces.iter().any(|s| matches!(s, Space::Pages)) {
        let modes = modes.to_vec();
        std::thread::spawn(move || {
            pin_to_cpu(first_allowed_cpu());
            for locks in modes {
                torture(Space::Pages, true, true, locks, !locks);
            }
        })
        .join()
        .unwrap();
    }
}

/// The object space a torture run uses.
#[derive(Clone, Copy, Debug)]
enum Space {
    Pages,
    System,
}

/// Two runtimes at once, verify mode on, one with locks and every mark
/// concurrent, one with cells and the default budget, each with two
/// mutators whose extra steps run scoped threads inside calls and make
/// garbage whose destructors panic, and an `on_cycle` hook that panics every
/// seventh cycle. The plain chains stored over old objects' cells (step
/// 80..84) are the shape that once grew the heap without bound.
fn two_runtimes(space: Space) {
    let seed = seed();
    eprintln!(
        "torture: two runtimes in {space:?}, seed {seed}, scale {}",
        scale()
    );
    let steps = 1500 * scale();
    let make = |locks: bool, concurrent: bool| {
        builder(space, true, concurrent, locks)
            .on_cycle(|e| {
                if e.cycle % 7 == 0 {
                    panic!("torture: a hook that panics");
                }
            })
            .build()
    };
    let (a, b) = (make(true, true), make(false, false));
    std::thread::scope(|s| {
        s.spawn(|| run(&a, seed, 2, steps, true, true));
        s.spawn(|| run(&b, seed ^ 0x55, 2, steps, false, true));
    });
    let (sa, sb) = (a.stats(), b.stats());
    eprintln!(
        "torture: two runtimes: {} and {} cycles, {} and {} contained panics",
        sa.cycles, sb.cycles, sa.user_panics, sb.user_panics
    );
    assert!(
        sa.cycles >= 20 * scale() as u64,
        "only {} cycles",
        sa.cycles
    );
    assert!(sb.cycles >= 5 * scale() as u64, "only {} cycles", sb.cycles);
    drop((a, b));
    assert_eq!(
        DROPPED.load(Ordering::Relaxed),
        ALLOCATED.load(Ordering::Relaxed),
        "every object allocated is dropped exactly once"
    );
    assert_eq!(
        LOUD_DROPPED.load(Ordering::Relaxed),
        LOUD_ALLOCATED.load(Ordering::Relaxed),
        "every destructor ran, panicking or not"
    );
}

static LOUD_ALLOCATED: AtomicU64 = AtomicU64::new(0);
static LOUD_DROPPED: AtomicU64 = AtomicU64::new(0);

/// A destructor that counts itself and panics (the finalizer contains it).
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        LOUD_DROPPED.fetch_add(1, Ordering::Relaxed);
        panic!("torture: a destructor that panics");
    }
}

#[derive(Trace)]
struct Loud {
    #[trace(skip)]
    _p: PanicsOnDrop,
}

/// One of the extra steps: scoped threads inside a call (one walks what the
/// call picked, one attaches and runs calls of its own, which a pending stop
/// must let in), or garbage whose destructors panic.
fn extra(
    rt: &Runtime,
    m: &mut loam_runtime::Mutator,
    rng: &mut Rng,
    roots: &[Root<ObjRoot>],
    next_id: &AtomicU64,
) {
    let pick = rng.below(roots.len().max(1));
    let loud = rng.below(2) == 0;
    m.mutate(|mc| {
        if loud || roots.is_empty() {
            for _ in 0..8 {
                LOUD_ALLOCATED.fetch_add(1, Ordering::Relaxed);
                mc.alloc(Loud { _p: PanicsOnDrop });
            }
            return;
        }
        let o = roots[pick].get(mc);
        std::thread::scope(|s| {
            s.spawn(|| walk([o]));
            s.spawn(|| {
                let mut m2 = rt.attach();
                for _ in 0..3 {
                    m2.mutate(|mc2| {
                        new_obj(mc2, next_id);
                    });
                }
            });
        });
    });
}

/// Runs `threads` mutators of `rt` through `steps` random steps each,
/// sharing objects through global roots; with `extras`, steps also run
/// scoped threads inside a call (one reads what the call shares, another
/// attaches and runs calls of its own) and allocate objects whose
/// destructors panic. Checks what the globals hold, drops them, and
/// returns the walks made.
fn run(rt: &Runtime, seed: u64, threads: u64, steps: usize, locks: bool, extras: bool) -> usize {
    run_forcing(rt, seed, threads, steps, locks, extras, 1)
}

/// `run`, forcing cycles `rarely` times less often (ragged runs: forced
/// cycles stop the world, paced ones are what is tested there).
fn run_forcing(
    rt: &Runtime,
    seed: u64,
    threads: u64,
    steps: usize,
    locks: bool,
    extras: bool,
    rarely: usize,
) -> usize {
    let globals: Arc<Mutex<Vec<GlobalRoot<ObjRoot>>>> = Arc::new(Mutex::new(Vec::new()));
    let next_id = Arc::new(AtomicU64::new(1));
    let threads: Vec<_> = (0..threads)
        .map(|t| {
            let (rt, globals, next_id) = (rt.clone(), globals.clone(), next_id.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(seed ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
                let mut m = rt.attach();
                let mut roots: Vec<Root<ObjRoot>> = Vec::new();
                // Weak references to objects whose root was dropped: an
                // upgrade may hand out an object no root reaches, and during
                // a concurrent mark one the snapshot may not hold.
                let mut weaks: Vec<Root<WeakRoot>> = Vec::new();
                let mut walks = 0;
                for step in 0..steps {
                    if extras && rng.below(16) == 0 {
                        extra(&rt, &mut m, &mut rng, &roots, &next_id);
                    }
                    let op = rng.below(100);
                    let shared = if op >= 85 {
                        let g = globals.lock().unwrap();
                        (!g.is_empty()).then(|| g[rng.below(g.len())].clone())
                    } else {
                        None
                    };
                    m.mutate(|mc| {
                        let pick = |rng: &mut Rng| -> Option<Gc<'_, Obj<'_>>> {
                            if roots.is_empty() {
                                None
                            } else {
                                Some(roots[rng.below(roots.len())].get(mc))
                            }
                        };
                        match op {
                            // A new object, linked to reachable ones, rooted.
                            0..=24 => {
                                let mut edges = Vec::new();
                                for _ in 0..rng.below(4) {
                                    if let Some(p) = pick(&mut rng) {
                                        edges.push(wander(&mut rng, p));
                                    }
                                }
                                let o = if locks {
                                    let o = new_obj(mc, &next_id);
                                    o.edges.write(mc, |e| *e = edges);
                                    o
                                } else {
                                    new_obj_with(mc, &next_id, edges)
                                };
                                if roots.len() < 48 {
                                    roots.push(mc.root(o));
                                } else if let Some(p) = pick(&mut rng) {
                                    p.link.set(mc, Some(o));
                                }
                            }
                            // A subgraph hung off a reachable object.
                            25..=44 => {
                                if let Some(p) = pick(&mut rng) {
                                    let host = wander(&mut rng, p);
                                    let mut sub = new_obj(mc, &next_id);
                                    for _ in 0..rng.below(12) {
                                        let n = new_obj(mc, &next_id);
                                        n.link.set(mc, Some(sub));
                                        sub = n;
                                    }
                                    if locks {
                                        host.edges.write(mc, |e| {
                                            if e.len() > 8 {
                                                e.remove(0);
                                            }
                                            e.push(sub)
                                        });
                                    } else {
                                        host.link.set(mc, Some(sub));
                                    }
                                }
                            }
                            // Rewire: point a link somewhere else, or cut it.
                            45..=59 => {
                                if let (Some(a), Some(b)) = (pick(&mut rng), pick(&mut rng)) {
                                    let a = wander(&mut rng, a);
                                    let b = (rng.below(4) > 0).then(|| wander(&mut rng, b));
                                    a.link.set(mc, b);
                                }
                            }
                            // Re-root a node deep in a subgraph, drop its old root.
                            60..=69 => {
                                if let Some(p) = pick(&mut rng) {
                                    let deep = wander(&mut rng, p);
                                    let i = rng.below(roots.len());
                                    roots[i] = mc.root(deep);
                                }
                            }
                            // Drop roots (their subgraphs become garbage),
                            // keeping a weak reference to some.
                            70..=76 => {
                                for _ in 0..rng.below(3) {
                                    if !roots.is_empty() {
                                        let r = roots.swap_remove(rng.below(roots.len()));
                                        if rng.below(2) == 0 {
                                            let w = mc.alloc(GcWeak::new(mc, r.get(mc)));
                                            if weaks.len() < 16 {
                                                weaks.push(mc.root(w));
                                            } else {
                                                let i = rng.below(weaks.len());
                                                weaks[i] = mc.root(w);
                                            }
                                        }
                                    }
                                }
                            }
                            // Upgrade a weak reference: check what it gives,
                            // and sometimes root it again (resurrection
                            // while a mark may be under way).
                            77..=79 => {
                                if !weaks.is_empty() {
                                    let w = *weaks[rng.below(weaks.len())].get(mc);
                                    if let Some(o) = w.upgrade() {
                                        walk([o]);
                                        if roots.len() < 48 && rng.below(2) == 0 {
                                            roots.push(mc.root(o));
                                        } else if let Some(p) = pick(&mut rng) {
                                            p.link.set(mc, Some(o));
                                        }
                                    }
                                }
                            }
                            // Plain garbage, and chains without drop glue
                            // (replacing an object's chain drops the old).
                            80..=84 => {
                                for _ in 0..rng.below(100) {
                                    new_obj(mc, &next_id);
                                }
                                if let Some(p) = pick(&mut rng) {
                                    let o = wander(&mut rng, p);
                                    o.plain.set(mc, plain_chain(mc, rng.below(300), o.id));
                                }
                                plain_chain(mc, rng.below(500), 0);
                            }
                            // Share: read a global, link into it, or publish.
                            _ => {
                                if let Some(g) = &shared {
                                    let o = g.get(mc);
                                    walk([o]);
                                    if let Some(p) = pick(&mut rng) {
                                        o.link.set(mc, Some(p));
                                    }
                                } else if let Some(p) = pick(&mut rng) {
                                    let mut g = globals.lock().unwrap();
                                    if g.len() < 16 {
                                        g.push(mc.global_root(p));
                                    } else {
                                        let i = rng.below(g.len());
                                        g[i] = mc.global_root(p);
                                    }
                                }
                            }
                        }
                    });
                    if step % 64 == 0 {
                        walks += 1;
                        m.mutate(|mc| walk(roots.iter().map(|r| r.get(mc))));
                    }
                    // Every thread also forces (full) cycles, each at its own
                    // offset, so that even a short run goes through a hundred
                    // or more however fast it allocates (requests that meet
                    // share a cycle); fewer without locks, where paced
                    // cycles are minor ones.
                    let every = rarely
                        * if locks {
                            force_every()
                        } else {
                            4 * force_every()
                        };
                    if step % every == t as usize * every / 4 {
                        m.collect();
                    }
                }
                walks
            })
        })
        .collect();
    let walks: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // Globals still hold objects: check them, then let everything go.
    {
        let mut m = rt.attach();
        let g = globals.lock().unwrap();
        m.mutate(|mc| walk(g.iter().map(|r| r.get(mc))));
    }
    drop(globals);
    walks
}

fn torture(space: Space, verify: bool, concurrent: bool, locks: bool, ragged: bool) {
    let seed = seed();
    eprintln!(
        "torture: {space:?}, seed {seed}, scale {}, verify {verify}, concurrent {concurrent}, \
         locks {locks}, ragged {ragged}",
        scale()
    );
    // Ragged runs go on twice as long: their cycles take longer (each
    // waits for every call under way, twice) and few are forced.
    let steps = if ragged { 5000 } else { 2500 } * scale();
    let rt = builder_ragged(space, verify, concurrent, locks, ragged).build();
    let walks = run_forcing(
        &rt,
        seed,
        4,
        steps,
        locks,
        false,
        if ragged { 8 } else { 1 },
    );
    let s = rt.stats();
    eprintln!(
        "torture: {} cycles ({} minor, {} concurrent), {walks} walks, {} objects allocated, \
         pauses p50 {:?} max {:?}, mutators held max {:?} ({:?} assisting)",
        s.cycles,
        s.minor_cycles,
        s.concurrent_cycles,
        ALLOCATED.load(Ordering::Relaxed),
        s.pauses.p50(),
        s.pauses.max(),
        s.mutator_pauses.max(),
        s.held_assisting,
    );
    if ragged {
        eprintln!("torture: {} ragged cycles", s.ragged_cycles);
        // Forced cycles (`collect`) stop the world; the paced ones do not.
        assert!(
            s.ragged_cycles > 0,
            "no ragged cycle in {} cycles",
            s.cycles
        );
    }
    if concurrent {
        // Every cycle with anything to trace past its roots.
        assert!(
            s.concurrent_cycles * 2 >= s.cycles,
            "only {} of {} cycles marked concurrently",
            s.concurrent_cycles,
            s.cycles
        );
    }
    // Ragged runs force an eighth as many cycles.
    let want = match (locks, ragged) {
        (_, true) => 15,
        (true, false) => 100,
        (false, false) => 30,
    };
    assert!(
        s.cycles >= want * scale() as u64,
        "only {} cycles",
        s.cycles
    );
    if !locks && generational() {
        assert!(
            s.minor_cycles >= 8 * scale() as u64,
            "only {} minor cycles",
            s.minor_cycles
        );
    }
    drop(rt);
    assert_eq!(
        DROPPED.load(Ordering::Relaxed),
        ALLOCATED.load(Ordering::Relaxed),
        "every object allocated is dropped exactly once"
    );
}
