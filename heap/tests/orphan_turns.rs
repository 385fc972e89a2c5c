//! Threads that allocate and threads whose first call is a free, taking
//! turns: exited threads' heaps are reused, not made anew each turn. Alone
//! in its binary: another test's threads would take and leave orphans
//! meanwhile.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

/// An allocating thread took whatever orphan headed the list, the spare a
/// free-only thread had just left included, so the next free-only thread
/// found no spare and made a heap (never unmapped): one more heap, and
/// one more orphan for every visit to walk, a turn.
#[test]
fn allocating_and_free_only_threads_taking_turns_reuse_heaps() {
    let layout = Layout::from_size_align(64, 8).unwrap();
    let made = loam_heap::stats().heaps_created;
    for _ in 0..200 {
        let p = std::thread::spawn(move || {
            // SAFETY: non-zero size.
            unsafe { LoamAlloc.alloc(layout) as usize }
        })
        .join()
        .unwrap();
        std::thread::spawn(move || {
            // A live block from LoamAlloc with this layout, freed once.
            // SAFETY: as just said.
            unsafe { LoamAlloc.dealloc(p as *mut u8, layout) };
        })
        .join()
        .unwrap();
    }
    let more = loam_heap::stats().heaps_created - made;
    assert!(more <= 4, "{more} heaps made for 200 turns of two threads");
}
