//! Loom models of the abandon/adopt handoff: a remote free races with the
//! adoption of the abandoned heap it is addressed to. The models run the real
//! `Inbox` (lanes and run queue), `RemoteCache`, `route_chains` and
//! `route_runs`; a segment is reduced to its atomic owner field.

use crate::block::{self, Block};
use crate::remote::{route_chains, route_runs, Inbox, RunKind};
use crate::remote_cache::{freed_tail, RemoteCache};
use crate::sync::{AtomicPtr, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::ptr;

/// The two heaps (their queues) and one segment's owner field.
struct World {
    abandoned: Inbox,
    adopter: Inbox,
    owner: AtomicPtr<Inbox>,
}

fn new_block() -> *mut Block {
    Box::into_raw(Box::new(Block {
        next: ptr::null_mut(),
    }))
}

/// Two-word blocks, which page runs need.
fn new_run_block() -> *mut Block {
    Box::into_raw(Box::new([0usize; 2])).cast()
}

/// Drains inbox `q` with the real routing rules, as `LocalHeap::drain_remote`
/// does (runs, then chains), recording local frees: a run's blocks are
/// walked from its head to the tail its header names, and must be as many
/// as its length.
fn drain(w: &World, q: &Inbox, freed: &mut Vec<usize>) {
    let owner_of = |_| w.owner.load(Ordering::Relaxed).cast_const();
    // SAFETY: the runs came from `q`; the queues live as long as `w`.
    unsafe {
        route_runs(q.runs.take_all(), q, owner_of, |run, kind, len| {
            assert_eq!(kind, RunKind::Freed, "only freed runs are sent here");
            let tail = freed_tail(run);
            let mut b = run;
            let mut walked = 0;
            loop {
                freed.push(b as usize);
                walked += 1;
                if b == tail {
                    break;
                }
                b = block::next(b);
            }
            assert!(block::next(tail).is_null(), "the tail ends the run");
            assert_eq!(walked, len, "a freed run's length is its blocks'");
        });
    }
    let chains = q.take_all();
    // SAFETY: the chain came from `q`; the queues live as long as `w`.
    unsafe {
        route_chains(
            chains,
            q,
            owner_of,
            |b| freed.push(b as usize),
            |owner, b| (*owner).push(0, b, b),
        );
    }
}

/// Thread F frees two blocks of the segment (reading its owner, one batch
/// each, so they take two lanes) while thread B adopts the abandoned heap: drains its
/// queue, then re-owns the segment. Afterwards whoever holds each heap drains
/// it (as new threads and orphan visits do). Every block must be freed exactly
/// once, and only by the segment's final owner or by the abandoned heap's
/// holder while it still owned the segment.
#[test]
fn remote_free_racing_adoption_is_applied_exactly_once() {
    // (blocks freed into the abandoned heap's pages, blocks forwarded late)
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let seen = outcomes.clone();
    loom::model(move || {
        let w = Arc::new(World {
            abandoned: Inbox::new(),
            adopter: Inbox::new(),
            owner: AtomicPtr::new(ptr::null_mut()),
        });
        w.owner
            .store(ptr::addr_of!(w.abandoned).cast_mut(), Ordering::Relaxed);
        let blocks = [new_block() as usize, new_block() as usize];

        let wf = w.clone();
        let freer = thread::spawn(move || {
            let mut cache = RemoteCache::for_thread();
            for b in blocks {
                let owner = wf.owner.load(Ordering::Relaxed);
                // SAFETY: the freer owns the dead block; queues outlive `wf`.
                // (Eight bytes: too small for a run, so it goes as a chain.)
                unsafe { cache.push(owner, 0, b as *mut u8, 8) };
                // One batch per block: the two batches take two inbox lanes.
                cache.flush();
            }
        });

        let wb = w.clone();
        let adopter = thread::spawn(move || {
            let mut freed_by_abandoned = Vec::new();
            drain(&wb, &wb.abandoned, &mut freed_by_abandoned);
            wb.owner
                .store(ptr::addr_of!(wb.adopter).cast_mut(), Ordering::Release);
            freed_by_abandoned
        });

        freer.join().unwrap();
        let mut freed = adopter.join().unwrap();
        let before_adoption = freed.len();
        // Later holders of each heap drain again: first the husk (forwarding),
        // then the adopter.
        let mut late = Vec::new();
        drain(&w, &w.abandoned, &mut late);
        assert!(
            late.is_empty(),
            "the husk no longer owns the segment, so it only forwards"
        );
        let forwarded = w.abandoned.take_all().iter().any(|c| !c.is_null());
        assert!(!forwarded, "forwarding empties the husk's queue");
        drain(&w, &w.adopter, &mut freed);
        seen.lock().unwrap().insert(before_adoption);
        freed.sort_unstable();
        let mut want = blocks.to_vec();
        want.sort_unstable();
        assert_eq!(freed, want, "each block freed exactly once");
        for b in blocks {
            // SAFETY: allocated by `new_block` and freed exactly once above.
            drop(unsafe { Box::from_raw(b as *mut Block) });
        }
    });
    // The interesting interleavings were explored: blocks drained by the
    // adopter before it re-owned the segment (0, 1 or 2 of them), and so
    // blocks that arrived at the husk after adoption and were forwarded.
    let outcomes = outcomes.lock().unwrap();
    assert!(
        outcomes.contains(&0) && outcomes.contains(&2),
        "explored only {outcomes:?}"
    );
}

/// Thread F frees three blocks of the segment: two of one page, sent as a
/// freed run, then one of another page, alone, so sent as a chain; each
/// reads the owner as it is freed. Thread B adopts the abandoned heap
/// meanwhile (drains it, then re-owns the segment), and later holders drain
/// both heaps. Every block must be freed exactly once, and the run must
/// arrive whole (its header's tail and length those of its chain), whether
/// the husk applied it or forwarded it.
#[test]
fn freed_run_racing_adoption_is_applied_exactly_once() {
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let seen = outcomes.clone();
    loom::model(move || {
        let w = Arc::new(World {
            abandoned: Inbox::new(),
            adopter: Inbox::new(),
            owner: AtomicPtr::new(ptr::null_mut()),
        });
        w.owner
            .store(ptr::addr_of!(w.abandoned).cast_mut(), Ordering::Relaxed);
        let blocks = [
            new_run_block() as usize,
            new_run_block() as usize,
            new_run_block() as usize,
        ];

        let wf = w.clone();
        let freer = thread::spawn(move || {
            let mut cache = RemoteCache::for_thread();
            // (page key, block): the first two share a page.
            for (key, b) in [(1, blocks[0]), (1, blocks[1]), (2, blocks[2])] {
                let owner = wf.owner.load(Ordering::Relaxed);
                // SAFETY: the freer owns the dead two-word block; queues
                // outlive `wf`.
                unsafe { cache.push(owner, key, b as *mut u8, 16) };
                if key == 2 {
                    cache.flush();
                }
            }
        });

        let wb = w.clone();
        let adopter = thread::spawn(move || {
            let mut freed_by_abandoned = Vec::new();
            drain(&wb, &wb.abandoned, &mut freed_by_abandoned);
            wb.owner
                .store(ptr::addr_of!(wb.adopter).cast_mut(), Ordering::Release);
            freed_by_abandoned
        });

        freer.join().unwrap();
        let mut freed = adopter.join().unwrap();
        let before_adoption = freed.len();
        let mut late = Vec::new();
        drain(&w, &w.abandoned, &mut late);
        assert!(
            late.is_empty(),
            "the husk no longer owns the segment, so it only forwards"
        );
        assert!(
            w.abandoned.runs.take_all().is_null()
                && w.abandoned.take_all().iter().all(|c| c.is_null()),
            "forwarding empties the husk's queues"
        );
        drain(&w, &w.adopter, &mut freed);
        seen.lock().unwrap().insert(before_adoption);
        freed.sort_unstable();
        let mut want = blocks.to_vec();
        want.sort_unstable();
        assert_eq!(freed, want, "each block freed exactly once");
        for b in blocks {
            // SAFETY: allocated by `new_run_block` and freed exactly once above.
            drop(unsafe { Box::from_raw(b as *mut [usize; 2]) });
        }
    });
    // Explored: nothing drained before adoption (all forwarded or sent to
    // the adopter), and the run and the chain both drained by the husk.
    let outcomes = outcomes.lock().unwrap();
    assert!(
        outcomes.contains(&0) && outcomes.contains(&3),
        "explored only {outcomes:?}"
    );
}
