//! Ragged cycles (`RuntimeBuilder::ragged_handshakes`): marks that begin
//! and end with per-mutator handshakes instead of stops.
//!
//! - No mutator waits for another's `mutate` call: a thread's calls go on
//!   while another thread's long call holds a cycle's start.
//! - The lost-object race of the handshake window: objects moved out of
//!   places that calls which began before the mark overwrite, unshaded,
//!   into objects the markers already traced, by calls that began in the
//!   window, and then cut from where they were. Verify mode aborts the
//!   process if a reachable object is left unmarked; each chain's values
//!   are checked as well, so a block freed and reused shows up too.
//!   `LOAM_RAGGED_ROUNDS` makes it longer by hand.
//! - What a window call makes a young object with survives a later call
//!   that cuts the object out before the mark's end looks (deletion
//!   barriers never pass over what a window call made: `gc::WINDOW_MADE`).

mod support;

use loam_runtime::{
    Gc, GcCell, GcLock, GcStats, GcWeak, GlobalRoot, Mutation, Mutator, Root, Rootable, Runtime,
    Trace,
};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Trace)]
struct Node<'gc> {
    value: u64,
    next: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
}

/// A chain of `len` nodes holding `first, first + 1, ...`.
fn chain<'gc>(mc: &Mutation<'gc>, first: u64, len: u64) -> Gc<'gc, Node<'gc>> {
    let mut next = None;
    for i in (0..len).rev() {
        next = Some(mc.alloc(Node {
            value: first + i,
            next: GcCell::new(next),
        }));
    }
    next.expect("a chain of at least one node")
}

/// Checks a chain made by `chain`: consecutive values, `len` nodes.
fn check<'gc>(head: Gc<'gc, Node<'gc>>, len: u64) {
    let first = head.value;
    let mut n = Some(head);
    let mut i = 0;
    while let Some(node) = n {
        assert_eq!(
            node.value,
            first + i,
            "a chain's node holds another's value"
        );
        n = node.next.get();
        i += 1;
    }
    assert_eq!(i, len, "a chain lost nodes");
}

const LEN: u64 = 6;

/// Yields a window call makes while it holds what it read, for a broken
/// mark's end to overtake it (`the_lost_object_race_of_the_handshake_window`).
const HOLD_STEPS: u32 = 100_000;

// The tests run one at a time (`support::serial`): two of them make a
// call wait for another thread's calls, and cycles are serialized across
// the process (a cycle of one runtime that waits for such a call holds
// every other runtime's cycle back, and with it the call the other test
// waits for).
use support::serial;

/// Aborts the process, naming `what`, unless dropped within five minutes.
/// Some tests here wait for other threads, and a deadlock is their failure:
/// this turns it into one instead of a hung run. (A guard, not a measure:
/// a correct run of each takes about a second.)
struct Watchdog(Arc<AtomicBool>);

fn watchdog(what: &'static str) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let seen = done.clone();
    std::thread::spawn(move || {
        for _ in 0..6000 {
            if seen.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("ragged: {what}");
        std::process::abort();
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
const SLOTS: usize = 64;

#[derive(Trace)]
struct Board<'gc> {
    slots: Gc<'gc, [GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>]>,
    kept: GcLock<'gc, Vec<Gc<'gc, Node<'gc>>>>,
}

type BoardRoot = Rootable!['gc => Board<'gc>];
type NodeRoot = Rootable!['gc => Node<'gc>];
type WeakRoot = Rootable!['gc => GcWeak<'gc, Node<'gc>>];

fn ragged(verify: bool, min_heap: usize) -> Runtime {
    Runtime::builder()
        .ignore_env()
        .gc_threads(2)
        .verify(verify)
        .ragged_handshakes(true)
        .min_heap(min_heap)
        .build()
}

/// A board of `SLOTS` chains, rooted globally and made old by a cycle.
fn old_board(rt: &Runtime) -> GlobalRoot<BoardRoot> {
    let board = rt.attach().mutate(|mc| {
        let slots = mc.alloc_slice_fill(SLOTS, GcCell::new(None));
        for (i, s) in slots.iter().enumerate() {
            s.set(mc, Some(chain(mc, i as u64 * 1000, LEN)));
        }
        mc.global_root(mc.alloc(Board {
            slots,
            kept: GcLock::new(Vec::new()),
        }))
    });
    rt.collect();
    board
}

fn rounds() -> u64 {
    support::knob("LOAM_RAGGED_ROUNDS", 3000, 1) as u64
}

/// Four threads move chains between a shared board's slots (an old
/// array), a lock's vector, their own roots and weak references, each
/// move inside one call that first makes garbage, so that calls straddle
/// the marks' starts and ends: a chain read from a slot is held while
/// other threads' calls overwrite that slot (with the barrier off if they
/// began before the mark), then stored elsewhere, rooted, or made weak and
/// upgraded later, or made the tail of a fresh head.
#[test]
fn chains_moved_across_the_handshake_window_are_kept() {
    let _serial = serial();
    let rt = ragged(true, 256 << 10);
    let board = old_board(&rt);
    let stamp = AtomicU64::new(1 << 20);
    std::thread::scope(|s| {
        for t in 0..4_u64 {
            let (rt, board, stamp) = (&rt, &board, &stamp);
            s.spawn(move || {
                let mut m = rt.attach();
                let mut mine: Option<Root<NodeRoot>> = None;
                let mut weak: Option<Root<WeakRoot>> = None;
                let mut rng = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                for _ in 0..rounds() {
                    // One call in sixteen is long (a few thousand objects):
                    // marks begin and end while it holds what it read.
                    let (a, b, op, garbage) = (
                        next() as usize % SLOTS,
                        next() as usize % SLOTS,
                        next() % 7,
                        if next() % 16 == 0 { 4096 } else { next() % 64 },
                    );
                    let fresh = stamp.fetch_add(1000, Ordering::Relaxed);
                    let (new_mine, new_weak) = m.mutate(|mc| {
                        let board = board.get(mc);
                        // Read first, hold it across the garbage.
                        let held = board.slots[a].get();
                        for k in 0..garbage {
                            mc.alloc([k; 16]);
                        }
                        let mut new_mine = None;
                        let mut new_weak = None;
                        match op {
                            // Move: store what was read into another slot
                            // and cut it where it was.
                            0 => {
                                board.slots[b].set(mc, held);
                                board.slots[a].set(mc, Some(chain(mc, fresh, LEN)));
                            }
                            // Root what was read, cut it from the board.
                            1 => {
                                if let Some(h) = held {
                                    new_mine = Some(mc.root(h));
                                }
                                board.slots[a].set(mc, None);
                            }
                            // Put the rooted one back, and a fresh one.
                            2 => {
                                if let Some(r) = &mine {
                                    board.slots[b].set(mc, Some(r.get(mc)));
                                }
                                board.slots[a].set(mc, Some(chain(mc, fresh, LEN)));
                            }
                            // Into the lock's vector, cut from the slot.
                            3 => {
                                if let Some(h) = held {
                                    board.kept.write(mc, |v| {
                                        if v.len() >= 32 {
                                            v.remove(0);
                                        }
                                        v.push(h);
                                    });
                                }
                                board.slots[a].set(mc, Some(chain(mc, fresh, LEN)));
                            }
                            // A weak reference to what was read, which is
                            // then cut; or upgrade the last one, store it.
                            4 => {
                                if let Some(h) = held {
                                    new_weak = Some(mc.root(mc.alloc(GcWeak::new(mc, h))));
                                    board.slots[a].set(mc, None);
                                }
                                if let Some(w) = &weak {
                                    if let Some(o) = w.get(mc).upgrade() {
                                        check(o, LEN);
                                        board.slots[b].set(mc, Some(o));
                                    }
                                }
                            }
                            // A fresh head over what was read: a fresh
                            // object made with an old one (shading
                            // nothing as it is made), stored, and the old
                            // head cut.
                            5 => {
                                if let Some(h) = held {
                                    let head = mc.alloc(Node {
                                        value: h.value,
                                        next: GcCell::new(h.next.get()),
                                    });
                                    board.slots[a].set(mc, None);
                                    board.slots[b].set(mc, Some(head));
                                    check(head, LEN);
                                }
                            }
                            // Walk everything.
                            _ => {
                                for s in board.slots.iter() {
                                    if let Some(c) = s.get() {
                                        check(c, LEN);
                                    }
                                }
                                for &c in board.kept.read().iter() {
                                    check(c, LEN);
                                }
                            }
                        }
                        if let Some(h) = held {
                            check(h, LEN);
                        }
                        (new_mine, new_weak)
                    });
                    if new_mine.is_some() {
                        mine = new_mine;
                    }
                    if new_weak.is_some() {
                        weak = new_weak;
                    }
                }
            });
        }
    });
    let s = rt.stats();
    assert!(
        s.ragged_cycles >= 10,
        "{} ragged cycles of {}",
        s.ragged_cycles,
        s.cycles
    );
}

/// Threads whose `Mutator` lives for one call move chains between the
/// board's slots: a barrier's shades go onto its mutator's own queue
/// (`Mutator::shade_queue`), which must be taken after the mutator is
/// gone (a forgotten queue leaves a moved chain marked-to-be but never
/// traced, and verify mode aborts). Ragged cycles, and stopped cycles
/// whose marks all run concurrently.
#[test]
fn moves_by_mutators_that_detach_at_once_are_kept() {
    let _serial = serial();
    let _watchdog = watchdog("moves_by_mutators_that_detach_at_once_are_kept hung");
    for ragged_cycles in [true, false] {
        let rt = Runtime::builder()
            .ignore_env()
            .gc_threads(2)
            .verify(true)
            .ragged_handshakes(ragged_cycles)
            .mark_pause_budget(Duration::ZERO)
            .min_heap(256 << 10)
            .build();
        let board = old_board(&rt);
        let stamp = AtomicU64::new(1 << 20);
        let marking = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..2_u64 {
                let (rt, board, stamp, marking) = (&rt, &board, &stamp, &marking);
                s.spawn(move || {
                    let mut rng = (t + 7).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    // `rounds()`, and more until a move ran during a mark
                    // (marks of this small heap are short), up to twenty
                    // times as many.
                    let mut round = 0;
                    while round < rounds()
                        || (marking.load(Ordering::Relaxed) == 0 && round < 20 * rounds())
                    {
                        round += 1;
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let (a, b) = (rng as usize % SLOTS, (rng >> 20) as usize % SLOTS);
                        let fresh = stamp.fetch_add(1000, Ordering::Relaxed);
                        // A mutator for this call alone, dropped after it.
                        rt.attach().mutate(|mc| {
                            marking.fetch_add(u64::from(mc.is_marking()), Ordering::Relaxed);
                            let board = board.get(mc);
                            let held = board.slots[a].get();
                            for k in 0..(rng >> 40) % 64 {
                                mc.alloc([k; 16]);
                            }
                            board.slots[b].set(mc, held);
                            board.slots[a].set(mc, Some(chain(mc, fresh, LEN)));
                            if let Some(h) = held {
                                check(h, LEN);
                            }
                        });
                    }
                });
            }
        });
        rt.attach().mutate(|mc| {
            for c in board.get(mc).slots.iter().filter_map(|s| s.get()) {
                check(c, LEN);
            }
        });
        assert!(
            marking.load(Ordering::Relaxed) > 0,
            "no move ran during a mark (ragged: {ragged_cycles})"
        );
    }
}

/// A thread inside a long `mutate` call while a cycle begins: another
/// thread's calls go on, and see the cycle's mark under way (with a
/// stopped world they would wait at their entry until the long call
/// returned, which here waits for them: the test would time out).
#[test]
fn a_long_call_does_not_hold_another_threads_calls() {
    let _serial = serial();
    let _guard =
        watchdog("another thread's calls waited for a long call, or no cycle began during it");
    // A 4 MiB goal, and the long call allocates 5 MiB: past the goal (a
    // cycle starts), short of twice it (where pacing would hold the other
    // thread until the cycle ends, which it cannot before the long call
    // does: the heap bound, not a handshake).
    let rt = ragged(false, 4 << 20);
    let marking_seen = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    // Attached before the long call begins: a stopped world's gate would
    // not let it in (`handshake.rs`).
    let mut b = rt.attach();
    std::thread::scope(|s| {
        let long = s.spawn(|| {
            let mut a = rt.attach();
            a.mutate(|mc| {
                started.store(true, Ordering::Release);
                // Past the heap goal: the collector starts a cycle, which
                // waits for this call.
                for k in 0..80_000_u64 {
                    mc.alloc([k; 8]);
                }
                while !done.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
            });
        });
        while !started.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let mut after = 0;
        while after < 100 {
            // Calls that allocate nothing: the long call waits for this
            // thread, which was attached before it began, so pacing must
            // not hold it (README, "Known problems": a call must not wait
            // for such a thread's calls). With one small object a call, on
            // a busy machine where the cycle's start was slow to run,
            // these calls took the heap past twice its goal and pacing
            // held them for the cycle, which waited for the long call: a
            // hang in 3 – 9 runs in 40.
            b.mutate(|mc| {
                if mc.is_marking() {
                    marking_seen.store(true, Ordering::Relaxed);
                }
            });
            if marking_seen.load(Ordering::Relaxed) {
                after += 1;
            }
        }
        done.store(true, Ordering::Release);
        long.join().unwrap();
    });
    assert!(marking_seen.load(Ordering::Relaxed));
    b.collect();
    assert!(rt.stats().ragged_cycles >= 1);
}

/// A ragged mark ends while a call that began after its window runs on:
/// the end waits for the barriers under way (their shading brackets), not
/// for the calls. The long call keeps overwriting a cell through the
/// barrier, swapping two chains in and out and checking the one it cut
/// out. Only the mark under way as it began can end meanwhile (the next
/// cycle's start waits for it, as for every call that began before that
/// cycle); a mark whose end falls back to a stop (`RAGGED_TRIES`) waits
/// for it too, so the call returns when a collection is pending and the
/// round is tried again. Verify mode is off: its check stops the world.
#[test]
fn a_mark_ends_while_a_call_that_began_after_its_window_runs() {
    let _serial = serial();
    let _guard = watchdog("a ragged mark's end waited for a call that began after its window");
    let rt = ragged(false, 32 << 20);
    type Pair = Rootable!['gc => [Gc<'gc, Node<'gc>>; 2]];
    let mut b = rt.attach();
    let (head, spare): (GlobalRoot<NodeRoot>, GlobalRoot<Pair>) = b.mutate(|mc| {
        let head = mc.alloc(Node {
            value: 0,
            next: GcCell::new(Some(chain(mc, 100, LEN))),
        });
        let spare = [chain(mc, 200, LEN), chain(mc, 300, LEN)];
        (mc.global_root(head), mc.global_root(mc.alloc(spare)))
    });
    let mut ended_inside = 0;
    // Up to 200 rounds for 3 that count: on a busy machine many ends fall
    // back to a stop (the watchdog turns a hang into a failure).
    for _round in 0..200 {
        if ended_inside == 3 {
            break;
        }
        let inside = AtomicBool::new(false);
        let stop = AtomicBool::new(false);
        let outcome = std::thread::scope(|s| {
            let long = s.spawn(|| {
                let mut a = rt.attach();
                loop {
                    // Completed cycles before the call and as it began:
                    // if they are the same, the mark the call began in is
                    // not among them.
                    let before = rt.stats().cycles;
                    let held = a.mutate(|mc| {
                        if !mc.is_marking() || mc.began_in_window() || rt.stats().cycles != before {
                            return None;
                        }
                        inside.store(true, Ordering::Release);
                        let node = head.get(mc);
                        let pair = spare.get(mc);
                        let mut ended = false;
                        let mut i = 0;
                        while !mc.collection_pending() && !stop.load(Ordering::Acquire) {
                            if !ended && rt.stats().cycles > before {
                                // The mark ended, and its cycle, while this
                                // call ran: go on a little, then leave.
                                ended = true;
                                stop.store(true, Ordering::Release);
                            }
                            let cut = node.next.replace(mc, Some(pair[i % 2])).expect("a chain");
                            check(cut, LEN);
                            i += 1;
                            std::thread::yield_now();
                        }
                        Some(ended)
                    });
                    if let Some(ended) = held {
                        stop.store(true, Ordering::Release);
                        break ended;
                    }
                    std::thread::yield_now();
                }
            });
            // Garbage in short calls until the long call is inside a
            // mark; then nothing (the mark ends on the GC threads).
            while !inside.load(Ordering::Acquire) && !stop.load(Ordering::Acquire) {
                b.mutate(|mc| {
                    for k in 0..256_u64 {
                        mc.alloc([k; 8]);
                    }
                });
            }
            long.join().unwrap()
        });
        if outcome {
            ended_inside += 1;
        }
    }
    b.collect();
    b.mutate(|mc| check(head.get(mc).next.get().expect("a chain"), LEN));
    assert_eq!(
        ended_inside, 3,
        "rounds whose mark ended while a later call ran"
    );
    assert!(rt.stats().ragged_cycles >= 3);
}

/// A mutator past twice the heap goal goes on once a mark has traced
/// through, while its end waits for another mutator's window call: the
/// wait would not bring the call's end nearer. (It waited for the whole
/// call, or for the 250 ms the collector gives a running call before paced
/// mutators give up on it: at binary-trees depth 21 with two threads, holds
/// of 30 - 177 ms in a run in four.) Past the room it is given (a quarter
/// of the pace goal past the pace point), it waits again.
#[test]
fn a_paced_mutator_does_not_wait_for_a_window_call() {
    let _serial = serial();
    let _guard =
        watchdog("a paced mutator waited for a window call, or a call never began in the window");
    // A 16 MiB goal: pacing begins at 32 MiB, and a paced mutator goes on
    // up to 36 MiB while the mark ends.
    const MIB: usize = 1 << 20;
    let rt = ragged(false, 16 * MIB);
    // Enough calls to outlast the mark's trace (tiny here): the first ones
    // may go on as paced calls always could while a mark offers work.
    const CALLS: u32 = 20_000;
    // Under the collector's patience with a running call (250 ms).
    const LONG_HOLD: Duration = Duration::from_millis(150);
    let old_inside = AtomicBool::new(false);
    let window_inside = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let fill = |mc: &Mutation<'_>, to: usize| {
        while rt.stats().heap_size < to {
            for k in 0..256_u64 {
                mc.alloc([k; 8]);
            }
        }
    };
    let (went_on, held) = std::thread::scope(|s| {
        // The old call: past the goal (a cycle begins and waits for this
        // call to end), then, once the window call is inside, past twice
        // the goal; its calls after that are paced.
        let old = s.spawn(|| {
            let mut m = rt.attach();
            m.mutate(|mc| {
                fill(mc, 20 * MIB);
                old_inside.store(true, Ordering::Release);
                while !window_inside.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                fill(mc, 33 * MIB);
            });
            // Counted per hold, not summed: on a busy machine 20,000
            // short holds (slices of marking, waits for the mark to be
            // offered) can add up to anything, while a wait for the
            // window call is one hold of most of the patience.
            let before = m.pauses().count_above(LONG_HOLD);
            for _ in 0..CALLS {
                m.mutate(|mc| {
                    mc.alloc([0_u64; 8]);
                });
            }
            let went_on = m.pauses().count_above(LONG_HOLD) - before;
            // Past the room: the next call waits, here until the
            // collector gives up on the window call (its patience), since
            // the mark waits for the window call, which waits for this one.
            m.mutate(|mc| fill(mc, 37 * MIB));
            let before = rt.stats().held_by_pacing;
            m.mutate(|mc| {
                mc.alloc([0_u64; 8]);
            });
            let held = rt.stats().held_by_pacing - before;
            done.store(true, Ordering::Release);
            (went_on, held)
        });
        while !old_inside.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // The window call: the first call that sees the mark (the old
        // call is still inside, waiting for it). It stays inside, running,
        // until the paced calls are done.
        let mut m = rt.attach();
        loop {
            let entered = m.mutate(|mc| {
                if !mc.is_marking() {
                    return false;
                }
                assert!(
                    mc.began_in_window(),
                    "the first call in the mark began after its window"
                );
                window_inside.store(true, Ordering::Release);
                while !done.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                true
            });
            if entered {
                break;
            }
            std::thread::yield_now();
        }
        old.join().unwrap()
    });
    // Waiting for the window call, the first paced call would wait out
    // the patience, which begins as the old call ends (the mark is
    // offered then, and traced at once): one hold of most of 250 ms. One
    // that goes on waits at most for the mark to be offered (the old
    // call's end, the roots read) and for the slices of marking it owes.
    assert_eq!(
        went_on, 0,
        "{went_on} paced calls were held over {LONG_HOLD:?}: waiting for a window call"
    );
    // Past the room it waits (up to the collector's patience with the
    // window call, which runs from before the 20,000 calls; 150 - 250 ms
    // here). A call that goes on is not held at all.
    assert!(held > Duration::ZERO, "a call past the room went on");
    rt.wait_for_cycle();
    assert!(rt.stats().ragged_cycles >= 1);
}

/// The lost-object race of the handshake window, made to happen: a call
/// that began before a mark (barrier off) cuts the only path to a chain
/// after a call that began in the mark's window read it; the window call
/// holds the chain past the time the mark could end and then stores it
/// into an object the markers traced before (or makes it the tail of a
/// fresh node, which it stores there, directly or through a node it made
/// before the start's raise at T; fresh nodes shade nothing as they are
/// made). The chain and the array are
/// young and were never stored through a barrier, so nothing but this
/// cycle's mark keeps them. The chain must be kept: the mark's start waits
/// for the old call, its end for the window call, and the window call's
/// store shades what it stores (verify mode aborts otherwise, and the
/// chain's values are checked).
#[test]
fn the_lost_object_race_of_the_handshake_window() {
    let _serial = serial();
    let _guard = watchdog("the lost-object race waited for ever (no cycle, or a call held)");
    type Slots = Rootable!['gc => [GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>]];
    type LockRoot = Rootable!['gc => GcLock<'gc, Vec<Gc<'gc, Node<'gc>>>>];
    // Five ways of handing the chain out (`round % 5`), until each raced
    // in the window twice; a round whose mark was not held up by the old
    // call tests nothing, and on a busy machine some are: up to 150
    // rounds (the watchdog bounds the time).
    const ROUNDS: u64 = 150;
    let rt = ragged(true, 1 << 20);
    let mut raced = [0_u32; 5];
    for round in 0..ROUNDS {
        if raced.iter().all(|&r| r >= 2) {
            break;
        }
        let stamp = (round + 1) * 1000;
        // Built whole, no store through a barrier: young and unremembered.
        let (slots, lock): (GlobalRoot<Slots>, GlobalRoot<LockRoot>) = rt.attach().mutate(|mc| {
            let x = chain(mc, stamp, LEN);
            (
                mc.global_root(mc.alloc_from_iter([GcCell::new(Some(x)), GcCell::new(None)])),
                mc.global_root(mc.alloc(GcLock::new(Vec::new()))),
            )
        });
        let old_inside = AtomicBool::new(false);
        let window_read = AtomicBool::new(false);
        // The call that read the chain began in the window (not in a
        // mark the old call did not hold up): the round raced.
        let began_in_window = AtomicBool::new(false);
        let old_left = AtomicBool::new(false);
        let in_window = std::thread::scope(|s| {
            // The old call: inside before the mark begins; cuts the chain's
            // only path once the window call has read it.
            s.spawn(|| {
                let mut m = rt.attach();
                m.mutate(|mc| {
                    old_inside.store(true, Ordering::Release);
                    while !window_read.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    slots.get(mc)[0].set(mc, None);
                });
                old_left.store(true, Ordering::Release);
            });
            while !old_inside.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            // This thread allocates until a cycle begins; its first call
            // that sees the mark is in the window (the old call is still
            // inside, waiting for it).
            let mut m = rt.attach();
            loop {
                let cycles = rt.stats().cycles;
                let (done, root) = m.mutate(|mc| {
                    if !mc.is_marking() {
                        for k in 0..2048_u64 {
                            mc.alloc([k; 8]);
                        }
                        return (false, None);
                    }
                    let held = slots.get(mc)[0].get().expect("the chain");
                    // Made before the raise at T (the old call is still
                    // inside): in the sweep's copy; the markers reach it
                    // through the fresh node made with it below, which
                    // the store shades.
                    let before = (round % 5 == 4).then(|| {
                        mc.alloc(Node {
                            value: stamp - 1,
                            next: GcCell::new(Some(held)),
                        })
                    });
                    began_in_window.store(mc.began_in_window(), Ordering::Relaxed);
                    window_read.store(true, Ordering::Release);
                    while !old_left.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    // Room for a mark that did not wait for this call to
                    // end, and its sweep, to finish first (a correct
                    // collector's cannot, so this always runs out). A
                    // bound in steps, not a clock: nothing here depends
                    // on how fast the machine is, only how likely a
                    // broken collector is to be caught.
                    for _ in 0..HOLD_STEPS {
                        if rt.stats().cycles != cycles {
                            break;
                        }
                        std::thread::yield_now();
                    }
                    // Into an array the markers traced, into a root made
                    // after the root tables were read, into a lock the
                    // markers traced, or as the tail of a fresh node
                    // (young, made after the raise at T: the store shades
                    // the node, which the end's first look traces, and
                    // the chain with it) stored into the array.
                    let root = match round % 5 {
                        0 => {
                            slots.get(mc)[1].set(mc, Some(held));
                            None
                        }
                        1 => Some(mc.root(held)),
                        2 => {
                            lock.get(mc).write(mc, |v| v.push(held));
                            None
                        }
                        3 => {
                            let head = mc.alloc(Node {
                                value: stamp - 1,
                                next: GcCell::new(Some(held)),
                            });
                            slots.get(mc)[1].set(mc, Some(head));
                            check(head, LEN + 1);
                            None
                        }
                        // A fresh node made after the raise with one made
                        // before it, which holds the chain.
                        _ => {
                            let head = mc.alloc(Node {
                                value: stamp - 2,
                                next: GcCell::new(before),
                            });
                            slots.get(mc)[1].set(mc, Some(head));
                            check(head, LEN + 2);
                            None
                        }
                    };
                    check(held, LEN);
                    assert_eq!(held.value, stamp);
                    (true, root)
                });
                if done {
                    break (began_in_window.load(Ordering::Relaxed), root);
                }
            }
        });
        let (in_window, rooted): (bool, Option<Root<NodeRoot>>) = in_window;
        if in_window {
            raced[(round % 5) as usize] += 1;
        }
        // The chain the window call stored is whole after the cycle.
        rt.collect();
        rt.attach().mutate(|mc| {
            if in_window {
                let kept = match (&rooted, round % 5) {
                    (Some(r), _) => r.get(mc),
                    (None, 2) => *lock.get(mc).read().first().expect("the chain was pushed"),
                    (None, 3) => {
                        let head = slots.get(mc)[1].get().expect("the fresh head was stored");
                        check(head, LEN + 1);
                        head.next.get().expect("the chain under the fresh head")
                    }
                    (None, 4) => {
                        let head = slots.get(mc)[1].get().expect("the fresh head was stored");
                        check(head, LEN + 2);
                        let before = head.next.get().expect("the node made before the raise");
                        before.next.get().expect("the chain under it")
                    }
                    (None, _) => slots.get(mc)[1].get().expect("the chain was stored"),
                };
                check(kept, LEN);
                assert_eq!(kept.value, stamp);
            }
        });
    }
    assert!(
        raced.iter().all(|&r| r >= 2),
        "rounds that raced in the window, by way, of {ROUNDS} at most: {raced:?}"
    );
}

/// What a window call makes a young node with, when a later call cuts the
/// node out of the only object that holds it before the markers reach it
/// (the reason a window call's fresh objects once
/// shaded their edges as they were made). An old call cuts a chain's only path after a window call read
/// it; the window call, once a later call is inside (so after the raise
/// at T), makes a young node with the chain and an outer node with that,
/// and stores the outer node in an array (its barrier shades the outer
/// node only). The later call then takes the inner node out, with a store
/// whose deletion barrier must not pass over the inner node, though it was
/// allocated since the raise, since a window call made it
/// (`gc::WINDOW_MADE`), and holds it
/// until the cycle has swept, makes nodes over whatever the sweep freed,
/// and checks that the chain under it is whole (with the barrier passing
/// over them it is not, every run). Verify mode is
/// off: its check stops the world, and the later call waits inside for
/// the cycle to end.
#[test]
fn a_young_nodes_contents_survive_a_later_calls_cut() {
    let _serial = serial();
    let _guard = watchdog("a young node's race waited for ever (no cycle, or a call held)");
    type Slots = Rootable!['gc => [GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>]];
    let rt = ragged(false, 4 << 20);
    // Rounds whose cycle ended while the later call held the inner node;
    // a round whose mark's end fell back to a stop (which waits for that
    // call, so it leaves first) tested nothing, and is tried again.
    let mut ended_while_held = 0;
    // Up to 120 rounds for 4 that count.
    for round in 0..120_u64 {
        if ended_while_held == 4 {
            break;
        }
        let stamp = (round + 1) * 1000;
        // Made by the old call, so that no mark has met the chain: a
        // minor cycle frees it only if it is unmarked.
        let slots: std::sync::OnceLock<GlobalRoot<Slots>> = std::sync::OnceLock::new();
        let slots = &slots;
        let old_inside = AtomicBool::new(false);
        let window_read = AtomicBool::new(false);
        let old_left = AtomicBool::new(false);
        let later_inside = AtomicBool::new(false);
        let stored = AtomicBool::new(false);
        let cut = AtomicBool::new(false);
        let held_through = std::thread::scope(|s| {
            // The old call: begins with no mark under way (so the next
            // cycle's start waits for it), makes the chain (built whole: no
            // barrier marks it), and cuts it once the window call read it.
            s.spawn(|| {
                let mut m = rt.attach();
                while !m.mutate(|mc| {
                    if mc.is_marking() {
                        return false;
                    }
                    let x = chain(mc, stamp, LEN);
                    let made = mc
                        .global_root(mc.alloc_from_iter([GcCell::new(Some(x)), GcCell::new(None)]));
                    assert!(slots.set(made).is_ok());
                    old_inside.store(true, Ordering::Release);
                    while !window_read.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    slots.get().expect("made").get(mc)[0].set(mc, None);
                    true
                }) {
                    std::thread::yield_now();
                }
                old_left.store(true, Ordering::Release);
            });
            while !old_inside.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            let slots = slots.get().expect("made by the old call");
            // The later call: begins once the window is closed, takes the
            // inner node out of the outer one, and holds it past the sweep.
            let later = s.spawn(|| {
                let mut m = rt.attach();
                while !window_read.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                loop {
                    let cycles = rt.stats().cycles;
                    let done = m.mutate(|mc| {
                        if !mc.is_marking() || mc.began_in_window() {
                            return None;
                        }
                        later_inside.store(true, Ordering::Release);
                        while !stored.load(Ordering::Acquire) {
                            std::thread::yield_now();
                        }
                        let outer = slots.get(mc)[1].get().expect("the outer node");
                        let inner = outer.next.replace(mc, None).expect("the inner node");
                        cut.store(true, Ordering::Release);
                        // Until the cycle has swept (nothing waits for this
                        // call; a stop would, and is let through), then
                        // nodes made over whatever it freed.
                        let ended = loop {
                            if rt.stats().cycles != cycles {
                                break true;
                            }
                            if mc.collection_pending() {
                                break false;
                            }
                            std::thread::yield_now();
                        };
                        for _ in 0..4096 {
                            mc.alloc(Node {
                                value: u64::MAX,
                                next: GcCell::new(None),
                            });
                        }
                        check(inner, LEN + 1);
                        assert_eq!(inner.value, stamp - 1);
                        Some(ended)
                    });
                    if let Some(ended) = done {
                        break ended;
                    }
                    std::thread::yield_now();
                }
            });
            // The window call, as in the lost-object race.
            let mut m = rt.attach();
            loop {
                let done = m.mutate(|mc| {
                    if !mc.is_marking() {
                        for k in 0..2048_u64 {
                            mc.alloc([k; 8]);
                        }
                        return false;
                    }
                    let held = slots.get(mc)[0].get().expect("the chain");
                    window_read.store(true, Ordering::Release);
                    while !old_left.load(Ordering::Acquire) || !later_inside.load(Ordering::Acquire)
                    {
                        std::thread::yield_now();
                    }
                    let inner = mc.alloc(Node {
                        value: stamp - 1,
                        next: GcCell::new(Some(held)),
                    });
                    let outer = mc.alloc(Node {
                        value: stamp - 2,
                        next: GcCell::new(Some(inner)),
                    });
                    slots.get(mc)[1].set(mc, Some(outer));
                    stored.store(true, Ordering::Release);
                    while !cut.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    true
                });
                if done {
                    break;
                }
            }
            later.join().unwrap()
        });
        if held_through {
            ended_while_held += 1;
        }
    }
    assert_eq!(
        ended_while_held, 4,
        "rounds whose cycle ended while the node was held, of 120 tried"
    );
}

/// A call that joins a scoped thread, which outruns the collector and is
/// held by pacing while a ragged cycle waits for the joining call: the
/// wait tells the scoped thread to stop waiting, as a stop's gate does
/// (`Handshake::wait_for_calls`), so all of it ends.
#[test]
fn a_paced_scoped_thread_does_not_deadlock_a_ragged_start() {
    let _serial = serial();
    let rt = ragged(false, 256 << 10);
    let _guard = watchdog("a paced scoped thread deadlocked a ragged start");
    let mut m = rt.attach();
    m.mutate(|_| {
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut scoped = rt.attach();
                // 50 MiB of garbage against a 256 KiB goal: paced.
                for _ in 0..400 {
                    scoped.mutate(|mc| {
                        for k in 0..2048_u64 {
                            mc.alloc([k; 8]);
                        }
                    });
                }
            });
        });
    });
    m.collect();
    assert!(rt.stats().ragged_cycles >= 1);
}

/// The runtime of the worker tests below: a 256 KiB goal, ragged or
/// stopped cycles, and a heap limit if given.
fn worker_runtime(ragged: bool, limit: Option<usize>) -> Runtime {
    let builder = Runtime::builder()
        .ignore_env()
        .gc_threads(2)
        .ragged_handshakes(ragged)
        .min_heap(256 << 10);
    match limit {
        Some(limit) => builder.heap_limit(limit),
        None => builder,
    }
    .build()
}

/// A call that waits for another thread's calls, the other thread
/// attached before the call began (as a pool worker that keeps its
/// `Mutator`), while the heap runs past twice its goal: each call asks the
/// worker twice, and each answer is 2 MiB of garbage against a 256 KiB
/// goal, so the first answer's call starts a cycle, which waits for the
/// asking call, and the worker's second call meets that cycle at its
/// entry. Twenty rounds; returns the runtime's stats and how many answers
/// met the heap limit (the worker allocates with `try_alloc`, and stops
/// an answer at its first `Err`).
fn ask_a_worker_attached_first(rt: &Runtime) -> (GcStats, u64) {
    const WHOLE: u64 = 32_768 * 32_767 / 2;
    let (ask, asked) = std::sync::mpsc::channel::<u64>();
    let (answer, answered) = std::sync::mpsc::channel::<Option<u64>>();
    let (ready, attached) = std::sync::mpsc::channel::<()>();
    let mut at_limit = 0;
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut worker = rt.attach();
            ready.send(()).unwrap();
            for n in asked {
                let sum = worker.mutate(|mc| {
                    (0..32_768_u64)
                        .map(|k| mc.try_alloc([k + n; 8]).ok().map(|a| a[0] - n))
                        .sum::<Option<u64>>()
                });
                answer.send(sum).unwrap();
            }
        });
        attached.recv().unwrap();
        let mut m = rt.attach();
        for round in 0..20 {
            let got = m.mutate(|_| {
                ask.send(round).unwrap();
                let first = answered.recv().unwrap();
                ask.send(round).unwrap();
                [first, answered.recv().unwrap()]
            });
            for sum in got {
                match sum {
                    Some(sum) => assert_eq!(sum, WHOLE),
                    None => at_limit += 1,
                }
            }
        }
        drop(ask);
    });
    // The cycle the answers asked for may still be sweeping (its stop
    // caught no gap between the calls until late, README "Known
    // problems"): its end, not its start, is what the stats count.
    rt.wait_for_cycle();
    (rt.stats(), at_limit)
}

/// With ragged cycles, the worker's second call is held by pacing while
/// the start waits for the asking call: once the start has waited past
/// its patience for a call on a blocked thread, every paced mutator stops
/// waiting, whenever it attached, and all of it ends.
#[test]
fn a_paced_thread_attached_before_a_call_that_waits_for_it_does_not_deadlock_a_ragged_start() {
    let _serial = serial();
    let rt = worker_runtime(true, None);
    let _guard = watchdog(
        "a paced thread attached before a call that waited for it deadlocked a ragged start",
    );
    let (stats, at_limit) = ask_a_worker_attached_first(&rt);
    assert_eq!(at_limit, 0, "an answer met a heap limit that was never set");
    assert!(stats.ragged_cycles >= 1, "{stats:?}");
}

/// With stopped cycles, the stop holds the worker at its entry while it
/// waits for the asking call: once it has waited past its patience for
/// that call, seen waiting on another thread (a channel), the gate lets
/// every waiter in, whenever it attached, and all of it ends.
#[test]
fn a_thread_attached_before_a_call_that_waits_for_it_does_not_deadlock_a_stop() {
    let _serial = serial();
    let rt = worker_runtime(false, None);
    let _guard = watchdog("a thread attached before a call that waited for it deadlocked a stop");
    let (stats, at_limit) = ask_a_worker_attached_first(&rt);
    assert_eq!(at_limit, 0, "an answer met a heap limit that was never set");
    assert!(stats.cycles >= 1, "{stats:?}");
    assert_eq!(stats.ragged_cycles, 0, "{stats:?}");
}

/// As above with a 3 MiB heap limit: the worker's second answer in a
/// round meets the limit while the stop waits for the asking call. It
/// gets the heap-limit `Err` instead of waiting for a collection that
/// cannot begin before the asking call returns (and its retry before the
/// next call gives way at the stop's gate), and all of it ends. After
/// each round the stop collects, so the next round's first answer fits.
#[test]
fn a_thread_attached_before_a_call_that_waits_for_it_meets_the_limit_with_an_err() {
    let _serial = serial();
    for ragged in [false, true] {
        let rt = worker_runtime(ragged, Some(3 << 20));
        let _guard = watchdog(
            "a thread attached before a call that waited for it deadlocked at the heap limit",
        );
        let (stats, at_limit) = ask_a_worker_attached_first(&rt);
        assert!(
            at_limit >= 1,
            "ragged {ragged}: never met the limit: {stats:?}"
        );
        assert!(
            at_limit < 40,
            "ragged {ragged}: every answer met the limit: {stats:?}"
        );
    }
}

/// A call at the heap limit that waits for the ragged cycle under way
/// (it began after the window) while holding a lock, and a window call
/// that waits for that lock, which the mark's end waits for: the call at
/// the limit gives up once the end has waited past its patience, its
/// allocation fails, the lock goes, and all of it ends.
#[test]
fn a_call_waiting_at_the_limit_gives_way_to_a_window_call_it_blocks() {
    let _serial = serial();
    let _guard = watchdog("a call waiting at the heap limit deadlocked a ragged mark's end");
    type Locked = Rootable!['gc => GcLock<'gc, Vec<Gc<'gc, Node<'gc>>>>];
    let rt = Runtime::builder()
        .ignore_env()
        .gc_threads(2)
        .ragged_handshakes(true)
        .min_heap(4 << 20)
        .heap_limit(24 << 20)
        .build();
    let lock: GlobalRoot<Locked> = rt
        .attach()
        .mutate(|mc| mc.global_root(mc.alloc(GcLock::new(Vec::new()))));
    let window_in = AtomicBool::new(false);
    let old_out = AtomicBool::new(false);
    let locked = AtomicBool::new(false);
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The old call: inside as the cycle starts (it allocates past the
        // goal), and out once the window call is in.
        s.spawn(|| {
            let mut c = rt.attach();
            c.mutate(|mc| {
                for k in 0..80_000_u64 {
                    mc.alloc([k; 8]);
                }
                while !window_in.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
            });
            old_out.store(true, Ordering::Release);
        });
        // The window call: waits for the lock once the call at the limit
        // holds it.
        s.spawn(|| {
            let mut b = rt.attach();
            loop {
                let done = b.mutate(|mc| {
                    if !mc.began_in_window() {
                        return false;
                    }
                    window_in.store(true, Ordering::Release);
                    while !locked.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    lock.get(mc).write(mc, |v| v.clear());
                    true
                });
                if done {
                    break;
                }
                std::thread::yield_now();
            }
        });
        // The call at the limit: begins after the window, takes the lock,
        // allocates until the limit.
        let mut a = rt.attach();
        while !old_out.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        loop {
            let done = a.mutate(|mc| {
                if !mc.is_marking() || mc.began_in_window() {
                    return false;
                }
                lock.get(mc).write(mc, |v| {
                    locked.store(true, Ordering::Release);
                    for k in 0..(64 << 20) / 4096_u64 {
                        match mc.try_alloc([k; 512]) {
                            Ok(_) => {}
                            Err(_) => {
                                failed.store(true, Ordering::Relaxed);
                                break;
                            }
                        }
                    }
                    v.clear();
                });
                true
            });
            if done {
                break;
            }
            std::thread::yield_now();
        }
    });
    assert!(
        failed.load(Ordering::Relaxed),
        "64 MiB fitted under a 24 MiB limit"
    );
    rt.attach()
        .mutate(|mc| assert!(lock.get(mc).read().is_empty()));
}

/// A `Trace` impl that panics while armed.
struct Grenade(AtomicBool);

// SAFETY: reports nothing (it holds no pointer) (1), panicking when armed,
// which the collector must contain (5 is the rule this breaks on purpose);
// otherwise pure (2); no `Drop` (4).
unsafe impl Trace for Grenade {
    fn trace(&self, _: &mut loam_runtime::Tracer) {
        if self.0.load(Ordering::Relaxed) {
            panic!("a Trace impl that panics as a lock's contents are shaded");
        }
    }
}

/// Makes a call of `b` on `m` that began in a ragged mark, after its
/// window, run on past the mark's end and then shade a `GcLock` whose
/// `Trace` panics (`check` runs in the call after it); returns `b`'s
/// count of user panics read in the call before the panic. `b`'s marks
/// need something to trace, so that they last a while.
fn late_shading_panic(b: &Runtime, m: &mut Mutator, check: impl Fn(&Mutation<'_>)) -> u64 {
    let inside = AtomicBool::new(false);
    // Read in the call, before the panic: a cycle of b's between the call
    // and a read after it would count it already.
    let mut before = 0;
    let thrown = std::thread::scope(|s| {
        // Garbage until the call below is in a mark: cycles come while it
        // runs, none after it (the heap stays under the next goal).
        s.spawn(|| {
            let mut t = b.attach();
            while !inside.load(Ordering::Acquire) {
                t.mutate(|mc| {
                    for k in 0..256_u64 {
                        mc.alloc([k; 8]);
                    }
                });
            }
        });
        loop {
            let thrown = m.mutate(|mc| {
                if !mc.is_marking() || mc.began_in_window() {
                    return None;
                }
                inside.store(true, Ordering::Release);
                // Past the mark's end: its cycle completes while this
                // call runs on.
                let cycles = b.stats().cycles;
                while b.stats().cycles == cycles {
                    std::thread::yield_now();
                }
                before = b.stats().user_panics;
                let lock = mc.alloc(GcLock::new(Grenade(AtomicBool::new(true))));
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    lock.write(mc, |_| ());
                }));
                lock.read().0.store(false, Ordering::Relaxed);
                check(mc);
                // This panic, not another one.
                Some(r.is_err_and(|e| {
                    support::panic_message(e.as_ref())
                        .contains("a Trace impl that panics as a lock's contents are shaded")
                }))
            });
            if let Some(thrown) = thrown {
                break thrown;
            }
            std::thread::yield_now();
        }
    });
    assert!(thrown, "the armed lock's shading did not panic");
    before
}

/// The same late shading panic, and then the runtime's end before any
/// other cycle: its last cycle read the panic as its own mark's failure
/// and swept nothing, so every object was left behind (no destructor
/// run, the memory never freed, and the runtime's id handed out again
/// while its objects carried it).
#[test]
fn a_late_shading_panic_leaves_nothing_behind_at_the_runtimes_end() {
    use support::Counted;
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    let _serial = serial();
    let _guard = watchdog("a call never began in a ragged mark after its window");
    let b = ragged(false, 4 << 20);
    let kept: GlobalRoot<Rootable!['gc => [Gc<'gc, Node<'gc>>]]> = b.attach().mutate(|mc| {
        let nodes: Vec<_> = (0..200_000).map(|i| chain(mc, i, 1)).collect();
        mc.global_root(mc.alloc_slice(&nodes))
    });
    let counted: GlobalRoot<Rootable!['gc => [Gc<'gc, Counted>]]> = b.attach().mutate(|mc| {
        let items: Vec<_> = (0..1000).map(|_| mc.alloc(Counted(&DROPPED))).collect();
        mc.global_root(mc.alloc_slice(&items))
    });
    let mut m = b.attach();
    late_shading_panic(&b, &mut m, |_| ());
    let stats = b.stats_handle();
    drop((kept, counted, m, b));
    let last = stats.wait_final();
    assert_eq!(
        DROPPED.load(Ordering::Relaxed),
        1000,
        "objects left behind by the runtime's last cycle: {last:?}"
    );
}

/// The same late shading panic, with garbage made in the panicking call:
/// the panic was for a mark whose cycle had ended, and the next cycle read
/// it as its own mark's failure and freed nothing. That cycle cannot end
/// while the call runs (a ragged cycle waits for the calls that began
/// before it), so the count read in the call names it: the first cycle
/// after the call, which must free the call's garbage.
#[test]
fn a_late_shading_panic_fails_no_later_cycle_of_its_runtime() {
    use support::Counted;
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    let _serial = serial();
    let _guard = watchdog("a call never began in a ragged mark after its window");
    let b = ragged(false, 4 << 20);
    let _kept: GlobalRoot<Rootable!['gc => [Gc<'gc, Node<'gc>>]]> = b.attach().mutate(|mc| {
        let nodes: Vec<_> = (0..200_000).map(|i| chain(mc, i, 1)).collect();
        mc.global_root(mc.alloc_slice(&nodes))
    });
    let mut m = b.attach();
    // Until the first cycle after the call is the last to run before the
    // check (a later one, triggered by the last call, frees the garbage
    // either way and tests nothing): ten tries at most.
    for _ in 0..10 {
        let dropped_before = DROPPED.load(Ordering::Relaxed);
        let cycles_in_call = std::sync::atomic::AtomicU64::new(0);
        let before = late_shading_panic(&b, &mut m, |mc| {
            for _ in 0..1000 {
                mc.alloc(Counted(&DROPPED));
            }
            cycles_in_call.store(b.stats().cycles, Ordering::Relaxed);
        });
        // Garbage elsewhere, until the next cycle has ended.
        let next = cycles_in_call.load(Ordering::Relaxed) + 1;
        while b.stats().cycles < next {
            m.mutate(|mc| {
                for k in 0..256_u64 {
                    mc.alloc([k; 8]);
                }
            });
        }
        b.wait_for_drops();
        let (dropped, s) = (DROPPED.load(Ordering::Relaxed) - dropped_before, b.stats());
        assert_eq!(s.user_panics, before + 1, "the panic was not reported");
        if s.cycles == next {
            assert_eq!(
                dropped, 1000,
                "the first cycle after a late shading panic freed nothing: {s:?}"
            );
            return;
        }
        // The later cycles freed this try's garbage (`wait_for_drops`
        // above), so the next try counts its own.
        assert_eq!(dropped, 1000, "a later cycle left garbage: {s:?}");
    }
    panic!("in ten tries a later cycle always ran before the check: case not met");
}

/// A call that began in a ragged mark, after its window, runs on past the
/// mark's end (nothing waits for it) and shades a `GcLock`'s contents for
/// that mark when it writes the lock; a `Trace` impl that panics there is
/// its own runtime's to answer for. It used to go into the log the cycle
/// under way reads, whichever runtime's: another runtime's next cycle
/// then freed nothing and reported the panic as its own.
#[test]
fn a_late_shading_panic_fails_no_other_runtimes_cycle() {
    let _serial = serial();
    let _guard = watchdog("a call never began in a ragged mark after its window");
    // Ragged marks come with pacing's cycles (a forced one stops the world).
    let b = ragged(false, 4 << 20);
    let a = Runtime::builder().ignore_env().gc_threads(1).build();
    // Something for b's marks to trace, so that they last a while.
    let kept: GlobalRoot<Rootable!['gc => [Gc<'gc, Node<'gc>>]]> = b.attach().mutate(|mc| {
        let nodes: Vec<_> = (0..200_000).map(|i| chain(mc, i, 1)).collect();
        mc.global_root(mc.alloc_slice(&nodes))
    });
    let mut m = b.attach();
    let before = late_shading_panic(&b, &mut m, |mc| assert_eq!(kept.get(mc).len(), 200_000));
    let mut ma = a.attach();
    ma.mutate(|mc| {
        for i in 0..1000_u64 {
            mc.alloc(i);
        }
    });
    ma.collect();
    let sa = a.stats();
    assert_eq!(
        sa.user_panics, 0,
        "another runtime's cycle took the panic as its own"
    );
    assert!(
        sa.objects_freed >= 1000,
        "another runtime's cycle freed nothing: {sa:?}"
    );
    m.collect();
    assert_eq!(
        b.stats().user_panics,
        before + 1,
        "the panic was not reported"
    );
}
