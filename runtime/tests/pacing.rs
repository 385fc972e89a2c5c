//! Pacing: the heap stays within twice its goal plus a documented slack
//! however little CPU the GC threads get, and mutators that allocate during
//! a concurrent mark help it (assists) rather than wait for the cycle.

mod support;
use loam_runtime::{Gc, Root, Rootable, Runtime, Trace, Tracer};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
#[cfg(target_os = "linux")]
use support::{first_allowed_cpu, pin_to_cpu};

/// What the heap may hold beyond twice the goal and the quarter of it more
/// that a mark's end lets paced mutators pass by (README, "Pacing"), for
/// one mutator whose
/// calls allocate at most `call_bytes` (README, "Knobs"): its unspent
/// 64 KiB chunk of credit; what two of its calls allocate (the call under
/// way as the heap passed twice the goal, and the next, which begins once
/// it has paid its marking debt and may then find the GC threads holding
/// the rest of the mark), with 64 KiB more for the first as before pacing
/// paid as it went; and a sixteenth of the live size,
/// which is what the paced assists buy (past twice the goal, each byte
/// allocated owes sixteen bytes of marking, paid before the next call at
/// the latest; the mark here traces the live data once).
fn slack(call_bytes: usize, live: usize) -> usize {
    (128 << 10) + 2 * call_bytes + live / 16
}

/// An upper bound on a size class's block for an object of `bytes`
/// (header included): never more than twice it.
fn block(bytes: usize) -> usize {
    2 * (bytes + 16)
}

/// A node of a wide tree whose `trace` is slow on the GC threads only
/// (thread names `loam-gc-*`): a collector that gets little done, while
/// the mutators' assists trace at full speed.
struct Slow<'gc> {
    kids: Vec<Gc<'gc, Slow<'gc>>>,
}

// SAFETY: reports every pointer it owns (1), the same ones each time, and
// touches nothing managed (2: the spin is local work); needs tracing
// (3); no `Drop` (4).
unsafe impl<'gc> Trace for Slow<'gc> {
    fn trace(&self, tracer: &mut Tracer) {
        let on_gc_thread = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("loam-gc-"));
        if on_gc_thread {
            // A fixed amount of work, not a time: the GC threads are slow
            // by construction, whatever the machine is doing.
            for i in 0..20_000_u32 {
                std::hint::black_box(i);
            }
        }
        self.kids.trace(tracer)
    }
}

fn tree<'gc>(mc: &loam_runtime::Mutation<'gc>, depth: u32) -> Gc<'gc, Slow<'gc>> {
    let kids = if depth == 0 {
        Vec::new()
    } else {
        (0..4).map(|_| tree(mc, depth - 1)).collect()
    };
    mc.alloc(Slow { kids })
}

#[test]
fn mutators_finish_a_mark_the_gc_threads_are_too_slow_for() {
    let _serial = support::serial();
    // Every cycle full, so that every cycle marks the slow tree again.
    let rt = Runtime::builder()
        .ignore_env()
        .gc_threads(1)
        .generational(false)
        .min_heap(4 << 20)
        .build();
    let mut m = rt.attach();
    // 5,461 live nodes, each a fixed 20,000 steps of work to trace on a GC
    // thread and none on the mutator.
    let _live: Root<Rootable!['gc => Slow<'gc>]> = m.mutate(|mc| mc.root(tree(mc, 6)));
    // Until the mutator has helped, over as many marks as it takes (one
    // mark is usually enough: the mutator allocates throughout it), and
    // at least three, for the heap bound.
    let start = rt.stats().concurrent_cycles;
    let mut worst = 0;
    let mut calls = 0;
    loop {
        let s = rt.stats();
        let marks = s.concurrent_cycles - start;
        if marks >= 50 || (marks >= 3 && s.held_assisting > Duration::ZERO) {
            break;
        }
        m.mutate(|mc| {
            for i in 0..64_u64 {
                mc.alloc([i; 128]);
            }
        });
        worst = worst.max(rt.stats().heap_size);
        calls += 1;
        assert!(calls < 1_000_000, "no concurrent cycle: {:?}", rt.stats());
    }
    let s = rt.stats();
    assert!(
        s.held_assisting > Duration::ZERO,
        "the mutator never helped a slow mark: {s:?}"
    );
    // Every hold is filed under one cause, and the causes add up to the
    // holds (assists included).
    assert_eq!(
        s.held_at_safepoint
            + s.held_by_pacing
            + s.held_for_memory
            + s.held_assisting
            + s.held_for_drops,
        s.mutator_pauses.total(),
        "{s:?}"
    );
    let goal = s.goal.max(4 << 20);
    let bound = 2 * goal + goal / 4 + slack(64 * block(1024), s.live_size);
    assert!(
        worst <= bound,
        "heap reached {worst} bytes with a {goal}-byte goal (bound {bound}): {s:?}"
    );
}

/// The GC thread, the mutator and a busy thread all on one CPU: the GC
/// thread gets a third of it at best, and the heap bound holds all the
/// same (the mutator waits, or assists, at twice the goal). Every sample
/// of the heap is checked, not just the cycles' starts.
#[cfg(target_os = "linux")]
#[test]
fn the_heap_bound_holds_with_the_gc_thread_sharing_a_busy_cpu() {
    let _serial = support::serial();
    let done = Arc::new(AtomicBool::new(false));
    let t = {
        let done = done.clone();
        std::thread::spawn(move || {
            pin_to_cpu(first_allowed_cpu());
            let busy = {
                let done = done.clone();
                std::thread::spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            };
            let rt = Runtime::builder()
                .ignore_env()
                .gc_threads(1)
                .min_heap(1 << 20)
                .build();
            let mut m = rt.attach();
            let _live: Root<Rootable!['gc => Slow<'gc>]> = m.mutate(|mc| mc.root(tree(mc, 4)));
            let mut worst = 0;
            for i in 0..4000_u64 {
                m.mutate(|mc| {
                    for j in 0..16 {
                        mc.alloc([i + j; 64]);
                    }
                });
                worst = worst.max(rt.stats().heap_size);
            }
            done.store(true, Ordering::Relaxed);
            busy.join().unwrap();
            (worst, rt.stats())
        })
    };
    let (worst, s) = t.join().unwrap();
    assert!(
        s.cycles >= 5,
        "{} cycles for 32 MiB over a 1 MiB goal",
        s.cycles
    );
    let goal = s.goal.max(1 << 20);
    let bound = 2 * goal + goal / 4 + slack(16 * block(512), s.live_size);
    assert!(
        worst <= bound,
        "heap reached {worst} bytes with a {goal}-byte goal (bound {bound}): {s:?}"
    );
}

/// The GC threads that traced a `Traced` object.
static TRACERS: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// A node that notes which GC thread traced it, and takes a while to.
struct Traced<'gc> {
    kids: Vec<Gc<'gc, Traced<'gc>>>,
}

// SAFETY: reports every pointer it owns (1), the same ones each time, and
// touches nothing managed (2: the set of names is its own); needs tracing
// (3); no `Drop` (4).
unsafe impl<'gc> Trace for Traced<'gc> {
    fn trace(&self, tracer: &mut Tracer) {
        let me = std::thread::current();
        let Some(name) = me.name().filter(|n| n.starts_with("loam-gc-")) else {
            return self.kids.trace(tracer);
        };
        // Slow on the coordinator too, which traces a concurrent round
        // alone for up to 64 Ki objects or 1 ms (`mark.rs`,
        // `CONCURRENT_SERIAL_BUDGET`, `CONCURRENT_SERIAL_TIME`): the rest
        // goes to the pool.
        for i in 0..2_000_u32 {
            std::hint::black_box(i);
        }
        // The pool's threads (`loam-gc-{runtime}-{i}`), not the
        // coordinator (`loam-gc-{runtime}`).
        if name.matches('-').count() == 3 {
            TRACERS
                .lock()
                .unwrap()
                .get_or_insert_with(HashSet::new)
                .insert(name.to_owned());
        }
        self.kids.trace(tracer)
    }
}

fn traced<'gc>(mc: &loam_runtime::Mutation<'gc>, depth: u32) -> Gc<'gc, Traced<'gc>> {
    let kids = if depth == 0 {
        Vec::new()
    } else {
        (0..4).map(|_| traced(mc, depth - 1)).collect()
    };
    mc.alloc(Traced { kids })
}

/// A concurrent mark traces on no more GC threads than
/// `concurrent_gc_threads` (a quarter of them by default): the other CPUs
/// are the mutators'. A pause budget of zero hands the whole mark to the
/// concurrent phase, and 5,461 slow objects give a second tracing thread
/// every chance to steal, were it let in.
#[test]
fn a_concurrent_mark_traces_on_the_threads_it_is_given() {
    let builders = [
        Runtime::builder().gc_threads(2).concurrent_gc_threads(1),
        // The default with four GC threads: a quarter of them.
        Runtime::builder().gc_threads(4),
    ];
    for b in builders {
        let rt = b
            .ignore_env()
            .generational(false)
            .mark_pause_budget(Duration::ZERO)
            .build();
        let mut m = rt.attach();
        let _live: Root<Rootable!['gc => Traced<'gc>]> = m.mutate(|mc| mc.root(traced(mc, 6)));
        *TRACERS.lock().unwrap() = None;
        let before = rt.stats().concurrent_cycles;
        rt.collect();
        assert!(
            rt.stats().concurrent_cycles > before,
            "the mark was not concurrent: {:?}",
            rt.stats()
        );
        let tracers = TRACERS.lock().unwrap().take().unwrap_or_default();
        assert_eq!(
            tracers.len(),
            1,
            "GC threads that traced during a concurrent mark: {tracers:?}"
        );
    }
}

/// A binary tree node with no cells: building one stores nothing a barrier
/// records.
#[derive(Trace)]
struct Node<'gc> {
    left: Option<Gc<'gc, Node<'gc>>>,
    right: Option<Gc<'gc, Node<'gc>>>,
}

fn node_tree<'gc>(mc: &loam_runtime::Mutation<'gc>, depth: u32) -> Gc<'gc, Node<'gc>> {
    if depth == 0 {
        return mc.alloc(Node {
            left: None,
            right: None,
        });
    }
    mc.alloc(Node {
        left: Some(node_tree(mc, depth - 1)),
        right: Some(node_tree(mc, depth - 1)),
    })
}

/// `builder` with an `on_cycle` hook that keeps every cycle's event in the
/// list it returns.
fn logging_cycles(
    builder: loam_runtime::RuntimeBuilder,
) -> (
    loam_runtime::RuntimeBuilder,
    Arc<Mutex<Vec<loam_runtime::CycleEvent>>>,
) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let log = events.clone();
    (
        builder.on_cycle(move |e| log.lock().unwrap().push(e.clone())),
        events,
    )
}

type TreeRoot = Rootable!['gc => Node<'gc>];
type Cell = Rootable!['gc => loam_runtime::GcLock<'gc, Option<Gc<'gc, Node<'gc>>>>];

/// Builds a 12 MiB tree in one call on a runtime with a 4 MiB minimum
/// heap, after a full cycle (so the cycle that marks the tree is a minor
/// one, which does not re-base the goal); with `store`, that call also
/// stores a fresh node into a lock made before the full cycle (an old
/// object), so the cycle begins with something remembered: the lock's
/// object, recorded whatever its mark. (A `GcCell` store into an object
/// whose mark another test's full cycle cleared remembers nothing: the
/// object is young again, `barrier.rs`, "A young object's cells".) Returns the
/// event of the cycle that marked the tree, and that of a full cycle after
/// the tree was let go. With `ragged`, the cycles begin and end their
/// marks without stopping the world.
fn burst(store: bool, ragged: bool) -> (loam_runtime::CycleEvent, loam_runtime::CycleEvent) {
    let _serial = support::serial();
    let (builder, events) = logging_cycles(Runtime::builder());
    let rt = builder
        .gc_threads(2)
        .ignore_env()
        .min_heap(4 << 20)
        .ragged_handshakes(ragged)
        .build();
    let mut m = rt.attach();
    let cell: Root<Cell> = m.mutate(|mc| mc.root(mc.alloc(loam_runtime::GcLock::new(None))));
    m.collect();
    let before = events.lock().unwrap().len();
    let tree: Root<TreeRoot> = m.mutate(|mc| {
        let t = node_tree(mc, 18);
        if store {
            let node = mc.alloc(Node {
                left: None,
                right: None,
            });
            cell.get(mc).write(mc, |v| *v = Some(node));
        }
        mc.root(t)
    });
    // The cycle the tree's allocation started, and any after it, until one
    // has marked most of the tree (12 MiB of nodes).
    let marked = |e: &loam_runtime::CycleEvent| e.bytes_marked >= 8 << 20;
    for _ in 0..100 {
        rt.wait_for_cycle();
        if events.lock().unwrap()[before..].iter().any(marked) {
            break;
        }
        m.mutate(|mc| {
            mc.alloc([0_u64; 64]);
        });
    }
    let event = events.lock().unwrap()[before..]
        .iter()
        .find(|e| marked(e))
        .cloned()
        .expect("no cycle marked the tree");
    drop((tree, cell));
    m.collect();
    let after = events.lock().unwrap().last().cloned().unwrap();
    (event, after)
}

/// A structure built in one call takes the heap past twice a goal set
/// before it existed; the cycle that marks it raises the goal pacing
/// counts from as it finds the structure live (`Shared::saw_live`), rather
/// than leave every allocation paying sixteen bytes of marking a byte
/// until a full cycle has measured it. Without that, the pace goal stayed
/// the 4 MiB minimum heap here. The next full cycle sets it from what it
/// measures. Each byte found counts once: a ragged mark that counted its
/// GC threads' reports and then its rounds' results again put the pace
/// goal at four times the live size (384 MB after marking binary-trees'
/// 96 MB tree at depth 21, against 192 MB for the same mark stopped).
fn a_burst_of_live_data_paces_from_it(ragged: bool) {
    let (e, after) = burst(false, ragged);
    assert!(e.minor, "the tree's cycle was full: {e}");
    // The kind of mark asked for (the double count was a ragged mark's).
    assert_eq!(e.ragged, ragged, "{e}");
    // The goal of the live size at gc percent 100 (`ignore_env`) is twice
    // it, above the 4 MiB minimum heap here.
    assert!(
        e.pace_goal >= 2 * e.bytes_marked && e.pace_goal <= 2 * e.bytes_marked + (1 << 20),
        "pace goal {} after marking {} live bytes: {e}",
        e.pace_goal,
        e.bytes_marked
    );
    assert!(e.goal < e.pace_goal, "{e}");
    assert!(!after.minor, "{after}");
    assert_eq!(after.pace_goal, after.goal, "{after}");
}

#[test]
fn the_cycle_that_marks_a_burst_of_live_data_paces_from_it() {
    a_burst_of_live_data_paces_from_it(false);
}

#[test]
fn a_ragged_cycle_that_marks_a_burst_of_live_data_paces_from_it_once() {
    a_burst_of_live_data_paces_from_it(true);
}

/// A minor cycle that began with something remembered may mark garbage
/// (a value stored into a cell and cut off again), so what it marks does
/// not count as live for pacing: the pace goal stays the goal.
#[test]
fn a_minor_cycle_with_remembered_objects_leaves_the_pace_goal_alone() {
    let (e, _) = burst(true, false);
    assert!(e.minor, "the tree's cycle was full: {e}");
    assert_eq!(e.pace_goal, e.goal, "{e}");
}

/// The trigger comes down from the goal by what the heap grew during the
/// last cycles: each call here builds a 3 MiB tree and drops it, over 12
/// MiB of live nodes (a 24 MiB goal over a 4 MiB minimum heap), and a
/// cycle asked for in a call begins tracing only once the call has ended,
/// so each mark ends with the heap past the trigger. The trigger never
/// goes lower than halfway from the live size to the goal.
#[test]
fn the_trigger_comes_down_by_the_runway() {
    let _serial = support::serial();
    let (builder, events) = logging_cycles(Runtime::builder());
    let rt = builder.ignore_env().min_heap(4 << 20).build();
    let mut m = rt.attach();
    let _live: Root<TreeRoot> = m.mutate(|mc| mc.root(node_tree(mc, 18)));
    m.collect();
    let live = rt.stats().live_size;
    assert!(live >= 11 << 20, "{:?}", rt.stats());
    let before = events.lock().unwrap().len();
    for _ in 0..200 {
        m.mutate(|mc| {
            node_tree(mc, 16);
        });
        let done = events.lock().unwrap()[before..]
            .iter()
            .filter(|e| !e.forced)
            .count();
        if done >= 8 {
            break;
        }
    }
    rt.wait_for_cycle();
    let s = rt.stats();
    let events = events.lock().unwrap()[before..].to_vec();
    let last = events.last().expect("cycles ran");
    assert_eq!((s.goal, s.next_goal), (last.goal, last.next_goal), "{s:?}");
    assert!(
        events.len() >= 8,
        "{} cycles: {:?}",
        events.len(),
        rt.stats()
    );
    for e in &events {
        assert!(e.next_goal <= e.goal, "{e}");
        assert!(e.next_goal >= live + (e.goal - live) / 2, "{e}");
    }
    assert!(
        events.iter().any(|e| e.next_goal < e.goal),
        "the trigger stayed at the goal: {}",
        events.last().unwrap()
    );
}

/// A minimum heap of 0 is raised to the floor: with the goal at 0, the
/// heap (which counts each mutator's unspent credit) was at its pace point
/// whenever a call took more credit, and each of these calls, which take
/// a chunk's worth (64 KiB) each, waited for a whole cycle.
#[test]
fn a_minimum_heap_of_zero_does_not_cycle_at_every_call() {
    let rt = Runtime::builder()
        .gc_threads(1)
        .ignore_env()
        .min_heap(0)
        .build();
    let mut m = rt.attach();
    for i in 0..200_u64 {
        m.mutate(|mc| {
            for _ in 0..8 {
                mc.alloc([i; 1024]);
            }
        });
    }
    let cycles = rt.stats().cycles;
    assert!(cycles < 100, "{cycles} cycles for 200 calls of 64 KiB each");
}

/// With the goal off (`gc_percent(u32::MAX)`), no cycle runs but those the
/// program asks for: the first used to come at the minimum heap, and
/// mutators were held at twice it until that cycle ended.
#[test]
fn with_the_goal_off_no_cycle_runs_unasked() {
    let rt = Runtime::builder()
        .ignore_env()
        .gc_threads(1)
        .min_heap(1 << 20)
        .gc_percent(u32::MAX)
        .build();
    let mut m = rt.attach();
    // 64 MiB of garbage, 64 times the minimum heap.
    for _ in 0..1024 {
        m.mutate(|mc| {
            for k in 0..64_u64 {
                mc.alloc([k; 127]);
            }
        });
    }
    let s = rt.stats();
    assert_eq!(s.cycles, 0, "cycles ran with the goal off: {s:?}");
    assert_eq!(
        s.mutator_pauses.count(),
        0,
        "mutators were held with the goal off"
    );
    assert_eq!(s.next_goal, usize::MAX);
    assert_eq!(s.goal, usize::MAX);
    m.collect();
    assert_eq!(rt.stats().cycles, 1);
}
