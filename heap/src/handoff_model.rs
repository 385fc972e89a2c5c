//! Loom model of the abandon/adopt handoff: a remote free races with the
//! adoption of the abandoned heap it is addressed to. The model runs the real
//! `Inbox` lanes, `RemoteCache` and `route_chains`; a segment is reduced to its
//! atomic owner field.

use crate::block::Block;
use crate::remote::{route_chains, Inbox, RemoteCache};
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

/// Drains queue `q` with the real routing rule, recording local frees.
fn drain(w: &World, q: &Inbox, freed: &mut Vec<usize>) {
    let mut cache = RemoteCache::for_thread();
    let chains = q.take_all();
    // SAFETY: the chain came from `q`; the queues live as long as `w`.
    unsafe {
        route_chains(
            chains,
            q,
            |_| w.owner.load(Ordering::Relaxed).cast_const(),
            |_| 8,
            |b| freed.push(b as usize),
            &mut cache,
        );
    }
    cache.flush();
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
                unsafe { cache.push(owner, b as *mut u8, 8) };
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
