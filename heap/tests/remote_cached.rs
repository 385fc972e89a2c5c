//! `HeapStats::remote_frees_cached` counts exactly the other heaps' blocks
//! a thread kept in its cache, not those it sent home (its first
//! `YOUNG_SENDS`), nor its own. Alone in its binary: the count is
//! process-wide.

use loam_heap::{LoamAlloc, YOUNG_SENDS};
use std::alloc::{GlobalAlloc, Layout};

#[test]
fn kept_blocks_of_other_heaps_are_counted_and_sent_ones_are_not() {
    const N: u64 = 16;
    /// Other heaps' blocks freed into a full class.
    const M: usize = 32;
    let layout = Layout::from_size_align(64, 8).unwrap();
    let young = YOUNG_SENDS as usize;
    let (blocks_tx, blocks_rx) = std::sync::mpsc::channel::<Vec<usize>>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let owner = std::thread::spawn(move || {
        let blocks = (0..young + N as usize + M)
            // SAFETY: a non-zero size; the blocks are handed over, freed there.
            .map(|_| unsafe { LoamAlloc.alloc(layout) } as usize)
            .collect();
        blocks_tx.send(blocks).unwrap();
        done_rx.recv().unwrap(); // alive until the freer is done
    });
    let theirs = blocks_rx.recv().unwrap();
    std::thread::spawn(move || {
        // SAFETY: live blocks of 64 bytes, each freed once, here.
        unsafe {
            // Past a slow path: this thread allocates.
            let own: Vec<*mut u8> = (0..2000).map(|_| LoamAlloc.alloc(layout)).collect();
            let before = loam_heap::stats();
            for &p in &theirs[..young] {
                LoamAlloc.dealloc(p as *mut u8, layout);
            }
            let mid = loam_heap::stats();
            assert_eq!(
                mid.remote_frees_cached, before.remote_frees_cached,
                "a young thread keeps none"
            );
            // Its own blocks, kept too, between them: not counted.
            for (&p, &q) in theirs[young..young + N as usize].iter().zip(&own) {
                LoamAlloc.dealloc(p as *mut u8, layout);
                LoamAlloc.dealloc(q, layout);
            }
            let after = loam_heap::stats();
            assert_eq!(
                after.remote_frees_cached - mid.remote_frees_cached,
                N,
                "only the other heap's blocks are counted"
            );
            // The rest of its own (1,984 more): the class fills (128 of 64
            // bytes), and the other heap's blocks freed then go home.
            for &p in &own[N as usize..] {
                LoamAlloc.dealloc(p, layout);
            }
            let full = loam_heap::stats();
            for &p in &theirs[young + N as usize..] {
                LoamAlloc.dealloc(p as *mut u8, layout);
            }
            assert_eq!(
                loam_heap::stats().remote_frees_cached,
                full.remote_frees_cached,
                "a full class keeps none"
            );
        }
    })
    .join()
    .unwrap();
    done_tx.send(()).unwrap();
    owner.join().unwrap();
}
