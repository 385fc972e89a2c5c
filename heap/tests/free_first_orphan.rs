//! Threads whose first call is a free and that then allocate, and exit
//! with a block still live. Alone in its binary: it counts the heaps the
//! process makes, which other tests' threads would add to.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

/// Each such thread takes a spare heap or makes one; it leaves it owning a
/// segment (its live block), which only allocating threads took, so every
/// thread of the pattern made a heap, never unmapped, and every orphan
/// visit walked them all. Once a visit has seen such an orphan lose its
/// last segment, it is a spare again, for the next such thread.
#[test]
fn threads_that_free_first_reuse_the_heaps_their_kind_left() {
    let layout = Layout::from_size_align(64, 8).unwrap();
    let created = loam_heap::stats().heaps_created;
    for _ in 0..50 {
        // SAFETY: non-zero size.
        let p = unsafe { LoamAlloc.alloc(layout) } as usize;
        let q = std::thread::spawn(move || {
            // SAFETY: a live block from LoamAlloc with this layout, freed
            // once: this thread's first call into the heap.
            unsafe { LoamAlloc.dealloc(p as *mut u8, layout) };
            // SAFETY: non-zero size.
            unsafe { LoamAlloc.alloc(layout) as usize }
        })
        .join()
        .unwrap();
        // SAFETY: a live block from LoamAlloc with this layout, freed once
        // (its thread has exited).
        unsafe { LoamAlloc.dealloc(q as *mut u8, layout) };
        // A visit to the exited thread's heap: it drains the free just
        // made, gives the emptied segment back, and finds it with none.
        loam_heap::collect();
    }
    let more = loam_heap::stats().heaps_created - created;
    assert!(
        more <= 3,
        "{more} heaps made for 50 threads that freed first"
    );
}
