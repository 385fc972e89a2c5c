//! Sealing pages (`SealEpoch`, `PageRef::sealed_words`): a collector's copy
//! of the allocated bits as of its stop, taken while the owners allocate,
//! holds exactly the objects allocated before the stop; and its walk over
//! the pages holds no lock that an allocating thread would wait for.
//!
//! The seal epoch is process-wide and one walk runs per epoch, so the
//! tests that raise it take turns (`ONE_COLLECTOR`).

mod support;

use loam_heap::{alloc_object, for_each_page, PageRef, SealEpoch};
use std::alloc::GlobalAlloc;
use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};

static ONE_COLLECTOR: Mutex<()> = Mutex::new(());

/// Rounds of stop, walk and check: short in CI, `LOAM_SEAL_ROUNDS` by hand
/// (each round leaks about 0.7 MB of objects).
fn rounds() -> usize {
    support::knob("LOAM_SEAL_ROUNDS", 40, 1)
}

/// An object block of `size` bytes with its allocated bit set (leaked: a
/// block with its bit set goes back through a page run only).
fn object(size: usize) -> usize {
    let (p, bit) = alloc_object(size, 8, 0, 0);
    bit.expect("an object block").set();
    p as usize
}

/// The walk's copy of every page, by page start, taken as the runtime's
/// walk takes it: a page whose owner is writing its image is passed by
/// (`try_sealed_words`) and read in a second walk, which waits for it.
fn walk(seal: SealEpoch) -> HashMap<usize, Vec<u64>> {
    let mut copies = HashMap::new();
    let mut busy = Vec::new();
    // The closures keep no PageRef (only a busy page's start, met again
    // as a page of the second walk) and read through `try_sealed_words`
    // and `sealed_words`; they allocate, which the walk allows.
    // SAFETY: as just said.
    unsafe {
        for_each_page(|p| {
            let mut words = Vec::new();
            if p.used() == 0 {
                return;
            }
            match p.try_sealed_words(seal, &mut words) {
                Some(true) => {
                    copies.insert(p.start() as usize, words);
                }
                Some(false) => {}
                None => {
                    assert!(words.is_empty(), "a busy page's copy appended words");
                    busy.push(p.start() as usize);
                }
            }
        });
        for_each_page(|p| {
            let mut words = Vec::new();
            if busy.contains(&(p.start() as usize))
                && p.used() > 0
                && p.sealed_words(seal, &mut words)
            {
                copies.insert(p.start() as usize, words);
            }
        })
    };
    copies
}

/// Whether object `p` is in `copies`.
fn in_copy(copies: &HashMap<usize, Vec<u64>>, p: usize) -> bool {
    // SAFETY: `p` is a live (leaked) block.
    let page = unsafe { PageRef::of(p as *const u8) };
    let i = page.block_index(p as *const u8);
    copies
        .get(&(page.start() as usize))
        .is_some_and(|w| w[i / 64] & (1 << (i % 64)) != 0)
}

/// Owners allocate; the collector raises the epoch while both are parked
/// (as a stop does), then walks the pages while the owners allocate on,
/// sealing pages before their first allocation after the stop. Every object of a call before
/// the stop is in the copy, and none of a call after it, whoever (owner or
/// walk) took the page's copy.
#[test]
fn the_copy_holds_exactly_what_was_allocated_before_the_stop() {
    let _one = ONE_COLLECTOR.lock().unwrap_or_else(|e| e.into_inner());
    const OWNERS: usize = 2;
    let stop = Arc::new(Barrier::new(OWNERS + 1));
    let resume = Arc::new(Barrier::new(OWNERS + 1));
    let walked = Arc::new(Barrier::new(OWNERS + 1));
    let (tx, rx) = std::sync::mpsc::channel::<(Vec<usize>, Vec<usize>)>();
    let owners: Vec<_> = (0..OWNERS)
        .map(|t| {
            let (stop, resume, walked, tx) =
                (stop.clone(), resume.clone(), walked.clone(), tx.clone());
            std::thread::spawn(move || {
                // Several classes, and now and then a page's worth of
                // objects of one, so that owners move to fresh pages too.
                // (Objects are leaked: about 0.7 MB a round for both.)
                let sizes = [16, 48, 64 + 16 * t, 256, 1024];
                for round in 0..rounds() {
                    let before: Vec<usize> = (0..200 + (round % 16) * 7)
                        .map(|i| object(sizes[i % sizes.len()]))
                        .collect();
                    stop.wait();
                    // The collector raises the epoch here.
                    resume.wait();
                    // Allocations after the stop, during the walk.
                    let after: Vec<usize> = (0..1000)
                        .map(|i| object(sizes[(i + round) % sizes.len()]))
                        .collect();
                    walked.wait();
                    tx.send((before, after)).unwrap();
                }
            })
        })
        .collect();
    for round in 0..rounds() {
        stop.wait();
        // SAFETY: the only collector here (`ONE_COLLECTOR`), whose walk
        // ends before its next raise.
        let seal = unsafe { SealEpoch::raise() };
        resume.wait();
        let copies = walk(seal);
        walked.wait();
        for _ in 0..OWNERS {
            let (before, after) = rx.recv().unwrap();
            for &p in &before {
                assert!(
                    in_copy(&copies, p),
                    "round {round}: an object allocated before the stop is missing from the copy"
                );
            }
            for &p in &after {
                assert!(
                    !in_copy(&copies, p),
                    "round {round}: an object allocated after the stop is in the copy"
                );
            }
        }
    }
    for o in owners {
        o.join().unwrap();
    }
}

/// The walk holds no lock while its closure runs: a thread that needs a
/// new segment (a huge block maps one) gets it during the walk, and a huge
/// block freed during it (its segment unregistered) leaves the walk going.
#[test]
fn a_walk_does_not_hold_up_threads_that_map_segments() {
    let _one = ONE_COLLECTOR.lock().unwrap_or_else(|e| e.into_inner());
    let layout = std::alloc::Layout::from_size_align(8 << 20, 8).unwrap();
    // A page for the walk to meet, whatever ran before.
    let _keep = object(32);
    let mut first = true;
    let mut pages = 0usize;
    // SAFETY: the closure keeps no PageRef; it allocates and frees, which
    // the walk allows.
    unsafe {
        for_each_page(|_| {
            pages += 1;
            if std::mem::take(&mut first) {
                let addr = std::thread::spawn(move || {
                    // SAFETY: a non-zero-sized layout; freed below.
                    let p = loam_heap::LoamAlloc.alloc(layout);
                    assert!(!p.is_null());
                    p as usize
                })
                .join()
                .expect("a thread mapping a segment during a walk");
                // Its segment dies under the walk: kept mapped until the end.
                loam_heap::LoamAlloc.dealloc(addr as *mut u8, layout);
            }
        })
    };
    assert!(pages >= 1 && !first, "the walk met no page");
}
