//! Loom models of the abandon/adopt handoff: a remote free races with the
//! adoption of the abandoned heap it is addressed to. The models run the real
//! `Inbox` (lanes and freed-run queue), `RemoteCache`, `FreedRun`,
//! `route_chains` and `route_runs`, but apply what arrives with their own
//! closures (recording blocks, not splicing them), and a segment is reduced
//! to its atomic owner field. The blocks' words are plain memory, not loom
//! cells: the models check the routing and the queues' atomics, not the
//! ordering of the link and header words, which the queues' Release CAS
//! and Acquire swap publish (`remote.rs`).

use crate::block::{self, Block};
use crate::freed_run::{FreedRun, RUN_SPAN};
use crate::remote::{route_chains, route_runs, Inbox};
use crate::remote_cache::RemoteCache;
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

impl World {
    /// Two heaps, the segment owned by the one about to be abandoned.
    fn new() -> Arc<World> {
        let w = Arc::new(World {
            abandoned: Inbox::new(),
            adopter: Inbox::new(),
            owner: AtomicPtr::new(ptr::null_mut()),
        });
        w.owner
            .store(ptr::addr_of!(w.abandoned).cast_mut(), Ordering::Relaxed);
        w
    }

    /// What an adopter does: drains the abandoned heap (returning what it
    /// freed there), then re-owns the segment.
    fn adopt(&self) -> Vec<usize> {
        let mut freed = Vec::new();
        drain(self, &self.abandoned, &mut freed);
        self.owner
            .store(ptr::addr_of!(self.adopter).cast_mut(), Ordering::Release);
        freed
    }
}

fn new_block() -> *mut Block {
    Box::into_raw(Box::new(Block {
        next: ptr::null_mut(),
    }))
}

/// A page of 8-byte blocks for freed runs, whose blocks must start in one
/// span aligned to its size (a slice, in the heap).
#[repr(C, align(65536))]
struct Span([usize; 4]);
const _: () = assert!(std::mem::align_of::<Span>() == RUN_SPAN);

/// Drains inbox `q` with the real routing rules, as `LocalHeap::drain_remote`
/// does (freed runs, then chains), recording local frees: a run is unsealed
/// and walked from its first block to the tail its header names, which must
/// end it, and must be as many blocks as its length. Returns how many runs
/// and how many chain blocks it forwarded.
fn drain(w: &World, q: &Inbox, freed: &mut Vec<usize>) -> (u64, u64) {
    let owner_of = |_| w.owner.load(Ordering::Relaxed).cast_const();
    let mut forwarded = 0;
    // SAFETY: the runs came from `q`; the queues live as long as `w`.
    let runs = unsafe {
        route_runs(
            q.freed.take_all(),
            q,
            |run| FreedRun::read(run),
            owner_of,
            |_, run: FreedRun| {
                run.unseal();
                let mut b = run.first;
                let mut walked = 1;
                while b != run.tail {
                    freed.push(b as usize);
                    b = block::next(b);
                    walked += 1;
                    assert!(walked <= run.len, "the run is longer than its length");
                }
                freed.push(b as usize);
                assert!(block::next(run.tail).is_null(), "the tail ends the run");
                assert_eq!(walked, run.len, "a freed run's length is its blocks'");
            },
            |owner, _, run| (*owner).freed.push(&run),
        )
    };
    let chains = q.take_all();
    // SAFETY: the chain came from `q`; the queues live as long as `w`.
    unsafe {
        route_chains(
            chains,
            q,
            owner_of,
            |b| freed.push(b as usize),
            |owner, b| {
                forwarded += 1;
                (*owner).push(0, b, b)
            },
        );
    }
    (runs, forwarded)
}

/// Thread F frees two blocks of the segment (reading its owner, one batch
/// each, so they take two lanes) while thread B adopts the abandoned heap: drains its
/// queue, then re-owns the segment. Afterwards whoever holds each heap drains
/// it (as new threads and orphan visits do). Every block must be freed exactly
/// once, and only by the segment's final owner or by the abandoned heap's
/// holder while it still owned the segment.
#[test]
fn remote_free_racing_adoption_is_applied_exactly_once() {
    // Blocks freed into the abandoned heap's pages before adoption.
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let seen = outcomes.clone();
    crate::sync::model(move || {
        let w = World::new();
        let blocks = [new_block() as usize, new_block() as usize];

        let wf = w.clone();
        let freer = thread::spawn(move || {
            let mut cache = RemoteCache::for_thread();
            for b in blocks {
                let owner = wf.owner.load(Ordering::Relaxed);
                // The freer owns the dead block; queues outlive `wf`.
                // (Flushed alone: too few for a run, so it goes as a chain.)
                // SAFETY: as just said.
                unsafe { cache.push(owner, 0, b as *mut u8, 8) };
                // One batch per block: the two batches take two inbox lanes.
                cache.flush();
            }
        });

        let wb = w.clone();
        let adopter = thread::spawn(move || {
            let freed_by_abandoned = wb.adopt();
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
        let left = w.abandoned.take_all().iter().any(|c| !c.is_null());
        assert!(!left, "forwarding empties the husk's queue");
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

/// Thread F frees three 8-byte blocks of the segment: two of one page, then
/// one of another page whose slot is the first's, which evicts the first
/// two as a freed run, and is sent alone, as a chain, by the flush; each
/// reads the owner as it is freed. Thread B adopts the abandoned heap
/// meanwhile (drains it, re-owns the segment, and drains it again, so that
/// its forwarding races the freer's sends), and later holders drain
/// both heaps. Every block must be freed exactly once, and the run must
/// arrive whole (its header's tail and length those of its chain), whether
/// the husk applied it or forwarded it.
#[test]
fn freed_run_racing_adoption_is_applied_exactly_once() {
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let seen = outcomes.clone();
    crate::sync::model(move || {
        let w = World::new();
        // The run's two blocks lie in one span (a page), the third apart.
        let span = Box::into_raw(Box::new(Span([0; 4])));
        // SAFETY: a fresh allocation, freed at the end of the model.
        let words = unsafe { ptr::addr_of_mut!((*span).0) }.cast::<usize>();
        let blocks = [
            words as usize,
            words.wrapping_add(2) as usize,
            new_block() as usize,
        ];

        let wf = w.clone();
        let freer = thread::spawn(move || {
            let mut cache = RemoteCache::for_thread();
            // (page key, block): the first two share a page; pages 1 and
            // 64 share a slot.
            for (key, b) in [(1, blocks[0]), (1, blocks[1]), (64, blocks[2])] {
                let owner = wf.owner.load(Ordering::Relaxed);
                // SAFETY: the freer owns the dead block; queues outlive `wf`.
                unsafe { cache.push(owner, key, b as *mut u8, 8) };
            }
            cache.flush();
        });

        let wb = w.clone();
        let adopter = thread::spawn(move || {
            let freed_by_abandoned = wb.adopt();
            let mut after = Vec::new();
            let (runs, _) = drain(&wb, &wb.abandoned, &mut after);
            assert!(after.is_empty(), "once re-owned, the husk only forwards");
            (freed_by_abandoned, runs)
        });

        freer.join().unwrap();
        let (mut freed, forwarded_early) = adopter.join().unwrap();
        let before_adoption = freed.len();
        let mut late = Vec::new();
        let (forwarded_late, _) = drain(&w, &w.abandoned, &mut late);
        assert!(
            late.is_empty(),
            "the husk no longer owns the segment, so it only forwards"
        );
        assert!(
            w.abandoned.freed.take_all().is_null()
                && w.abandoned.take_all().iter().all(|c| c.is_null()),
            "forwarding empties the husk's queues"
        );
        drain(&w, &w.adopter, &mut freed);
        seen.lock()
            .unwrap()
            .insert((before_adoption, forwarded_early > 0, forwarded_late > 0));
        freed.sort_unstable();
        let mut want = blocks.to_vec();
        want.sort_unstable();
        assert_eq!(freed, want, "each block freed exactly once");
        // SAFETY: allocated above, each once, and no longer in any queue.
        unsafe {
            drop(Box::from_raw(span));
            drop(Box::from_raw(blocks[2] as *mut Block));
        }
    });
    // Explored: the run and the chain both applied by the husk before
    // adoption; nothing applied there; and the run, reaching the husk
    // after adoption, forwarded both while the freer ran and after.
    let outcomes = outcomes.lock().unwrap();
    let found = |f: &dyn Fn(&(usize, bool, bool)) -> bool| outcomes.iter().any(f);
    assert!(
        found(&|o| o.0 == 3) && found(&|o| o.0 == 0) && found(&|o| o.1) && found(&|o| o.2),
        "explored only {outcomes:?}"
    );
}
