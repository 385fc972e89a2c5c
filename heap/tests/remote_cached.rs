//! `HeapStats::remote_frees_cached` counts exactly the other heaps' blocks
//! a thread kept in its cache, not those it sent home (its first
//! `YOUNG_SENDS`), nor its own. Alone in its binary: the count is
//! process-wide.

use loam_heap::{LoamAlloc, YOUNG_SENDS};
use std::alloc::{GlobalAlloc, Layout};

mod support;

#[test]
fn kept_blocks_of_other_heaps_are_counted_and_sent_ones_are_not() {
    const N: u64 = 16;
    /// Other heaps' blocks freed into a full class.
    const M: usize = 32;
    let layout = Layout::from_size_align(64, 8).unwrap();
    let young = YOUNG_SENDS as usize;
    let (theirs, owner) = support::blocks_of_a_live_thread(young + N as usize + M, layout);
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
    drop(owner);
}
