//! Blocks that another thread frees come home whichever way they travel:
//! as runs of one page (the freeing thread's blocks of a page, spliced onto
//! the page's free list whole), as chains (pages a thread frees only a few
//! blocks of at a time), and as large blocks. One test in its own process, so that the global counters are
//! this test's alone.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;

/// Blocks of each size: several pages' worth of the small ones.
const N: usize = 4000;
/// 8 – 200 bytes: runs when freed in order, chains when shuffled; 1,000: a
/// small class of few blocks a page; 40,000: large spans, one block each
/// (chains only).
const SIZES: [usize; 6] = [8, 16, 48, 200, 1000, 40_000];

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

fn alloc_all() -> Vec<(usize, usize)> {
    let mut blocks = Vec::with_capacity(N * SIZES.len());
    for i in 0..N {
        for &size in &SIZES {
            if size > 1000 && i % 20 != 0 {
                continue; // 200 large blocks, not 4,000
            }
            // SAFETY: a non-zero size.
            let p = unsafe { LoamAlloc.alloc(layout(size)) };
            assert!(!p.is_null());
            // SAFETY: a fresh block of `size` bytes.
            unsafe { p.write_bytes((i % 251) as u8, size) };
            blocks.push((p as usize, size));
        }
    }
    blocks
}

#[test]
fn blocks_freed_by_another_thread_come_home_exactly_once() {
    let before = loam_heap::stats();
    let blocks = alloc_all();
    let count = blocks.len() as u64;
    let addresses: HashSet<usize> = blocks.iter().map(|b| b.0).collect();
    assert_eq!(addresses.len(), blocks.len());

    // The first half freed in order, a page's blocks together (runs); the
    // rest shuffled, a few blocks of a page at a time (chains).
    let (ordered, mut shuffled) = {
        let mut b = blocks;
        let rest = b.split_off(b.len() / 2);
        (b, rest)
    };
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..shuffled.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        shuffled.swap(i, (x % (i as u64 + 1)) as usize);
    }
    std::thread::spawn(move || {
        for (p, size) in ordered.into_iter().chain(shuffled) {
            // SAFETY: live blocks from LoamAlloc, each freed once, here.
            unsafe { LoamAlloc.dealloc(p as *mut u8, layout(size)) };
        }
        // The thread's outgoing batches go at its exit.
    })
    .join()
    .unwrap();
    // The exit hook that sends them may still be running: wait for it.
    while loam_heap::stats().heaps_abandoned == before.heaps_abandoned {
        std::thread::yield_now();
    }

    // The blocks are free and whole: allocating again (whose slow paths take
    // back what was sent to this thread) hands each out once (a block on two
    // lists would come out twice), and checked builds find the fill of every
    // block reused intact (a run's header restored).
    let again = alloc_all();
    let reused: HashSet<usize> = again.iter().map(|b| b.0).collect();
    assert_eq!(reused.len(), again.len(), "a block handed out twice");
    for (p, size) in again {
        // SAFETY: live blocks from LoamAlloc, freed once.
        unsafe { LoamAlloc.dealloc(p as *mut u8, layout(size)) };
    }

    loam_heap::collect(); // takes back anything still on its way
    loam_heap::assert_valid();
    let after = loam_heap::stats();
    assert_eq!(
        after.remote_frees_sent - before.remote_frees_sent,
        count,
        "every free was remote and sent"
    );
    assert_eq!(
        after.remote_frees_drained - before.remote_frees_drained,
        count,
        "every block sent came home once"
    );
    assert_eq!(
        after.allocated_bytes, before.allocated_bytes,
        "nothing is still counted as in use: {after:#?}"
    );
    let batches = after.remote_batches - before.remote_batches;
    let runs = after.remote_freed_runs - before.remote_freed_runs;
    assert!(
        batches < count / 8,
        "batched: {batches} messages for {count} blocks"
    );
    assert!(
        runs > 0 && runs < batches,
        "both ways home: {runs} runs of {batches} messages"
    );
}
