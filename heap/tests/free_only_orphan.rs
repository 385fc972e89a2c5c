//! A thread whose first call is a free (a collector's) and exited threads'
//! heaps. Alone in its binary: the test needs the exited thread's heap at
//! the head of the orphan list, and another test's thread ending meanwhile
//! would put its own there.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc::channel;

/// A thread whose first call is a free takes a new heap, not an exited
/// thread's: one that only frees never drains the queue of the heap it
/// holds, so an orphan it took kept every block freed to the exited
/// thread's pages (by anyone) out of reach for as long as it lived.
#[test]
fn a_free_only_thread_takes_no_exited_threads_heap() {
    let layout = Layout::from_size_align(64, 8).unwrap();
    // This thread's heap, made before the other thread's exits (its first
    // allocation would take the exited thread's).
    // SAFETY: non-zero size.
    let mine = unsafe { LoamAlloc.alloc(layout) } as usize;
    // An exited thread's blocks, still live here.
    let theirs: Vec<usize> = std::thread::spawn(move || {
        (0..10_000)
            // SAFETY: non-zero size.
            .map(|_| unsafe { LoamAlloc.alloc(layout) } as usize)
            .collect()
    })
    .join()
    .unwrap();
    // A thread whose first call is a free, alive until told.
    let (freed_tx, freed_rx) = channel();
    let (end_tx, end_rx) = channel::<()>();
    let free_only = std::thread::spawn(move || {
        // SAFETY: a live block from LoamAlloc with this layout, freed once.
        unsafe { LoamAlloc.dealloc(mine as *mut u8, layout) };
        loam_heap::flush();
        freed_tx.send(()).unwrap();
        let _ = end_rx.recv();
    });
    freed_rx.recv().unwrap();
    for p in theirs {
        // SAFETY: live blocks from LoamAlloc with this layout, freed once.
        unsafe { LoamAlloc.dealloc(p as *mut u8, layout) };
    }
    // Every block is back (the exited thread's heap is drained as an
    // orphan) while the free-only thread lives.
    loam_heap::collect();
    let allocated = loam_heap::stats().allocated_bytes;
    end_tx.send(()).unwrap();
    free_only.join().unwrap();
    assert_eq!(
        allocated, 0,
        "blocks freed to an exited thread's pages stayed out while a free-only thread lived"
    );
    // Threads that only free, one after another, while orphans with
    // segments wait on the list: each takes the heap the last one left
    // (it has no segment), not a new one each (they piled up on the list).
    let created = loam_heap::stats().heaps_created;
    for _ in 0..50 {
        // SAFETY: non-zero size.
        let p = unsafe { LoamAlloc.alloc(layout) } as usize;
        std::thread::spawn(move || {
            // SAFETY: a live block from LoamAlloc with this layout, freed once.
            unsafe { LoamAlloc.dealloc(p as *mut u8, layout) };
        })
        .join()
        .unwrap();
    }
    let more = loam_heap::stats().heaps_created - created;
    assert!(
        more <= 2,
        "{more} heaps made for 50 threads that only freed"
    );
}
