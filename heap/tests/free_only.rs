//! The seed pattern: a thread that only frees (a collector's) what another
//! thread allocated. Its frees must travel in batches, not one atomic
//! operation each. (Regression: such a thread had no heap, hence no batch
//! cache, and pushed every block with its own CAS.)

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

#[test]
fn a_free_only_thread_batches_its_remote_frees() {
    let layout = Layout::from_size_align(32, 8).unwrap();
    // SAFETY: non-zero size.
    let blocks: Vec<usize> = (0..10_000)
        .map(|_| unsafe { LoamAlloc.alloc(layout) } as usize)
        .collect();
    let before = loam_heap::stats();
    std::thread::spawn(move || {
        for p in blocks {
            // SAFETY: live blocks from LoamAlloc with this layout, freed once.
            unsafe { LoamAlloc.dealloc(p as *mut u8, layout) };
        }
    })
    .join()
    .unwrap();
    let after = loam_heap::stats();
    assert_eq!(after.remote_frees_sent - before.remote_frees_sent, 10_000);
    // A thread that never allocated keeps none of them in its cache.
    assert_eq!(after.remote_frees_cached, before.remote_frees_cached);
    let batches = after.remote_batches - before.remote_batches;
    // 128 blocks per batch: about 79 batches, not 10,000.
    assert!(batches <= 100, "{batches} batches for 10,000 remote frees");
    loam_heap::collect();
    assert_eq!(loam_heap::stats().allocated_bytes, 0);
}
