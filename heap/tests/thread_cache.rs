//! The thread cache: a thread's next allocation of a small class is the
//! block of that class it freed last, its own or another thread's (once
//! past its first `YOUNG_SENDS` frees of others' blocks, which go home);
//! kept blocks still count as used on their pages, and go home when the
//! freeing thread flushes or exits.

use loam_heap::{LoamAlloc, PageRef, YOUNG_SENDS};
use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeSet;
use support::blocks_of_a_live_thread;

mod support;

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// This thread's next `expected.len()` allocations of `l`, asserted to be
/// the blocks `expected` (in any order): `what` says why.
fn next_allocations_are(expected: &[usize], l: Layout, what: &str) -> Vec<*mut u8> {
    let got: Vec<*mut u8> = (0..expected.len())
        // SAFETY: a non-zero size; the caller frees each block once.
        .map(|_| unsafe { LoamAlloc.alloc(l) })
        .collect();
    assert_eq!(
        got.iter().map(|&p| p as usize).collect::<BTreeSet<usize>>(),
        expected.iter().copied().collect(),
        "{what}"
    );
    got
}

/// Makes the calling thread one that keeps other heaps' blocks: one that
/// allocates (past a slow path) and has sent its first `YOUNG_SENDS` frees
/// of other heaps' blocks home (48-byte blocks of a thread that exited).
fn grow_up() {
    // Allocated first: a thread whose first allocation comes after the
    // other thread's exit would take its heap, blocks and all.
    let own: Vec<*mut u8> = (0..2000)
        // SAFETY: a non-zero size; each block is freed once, below.
        .map(|_| unsafe { LoamAlloc.alloc(layout(48)) })
        .collect();
    let theirs: Vec<usize> = std::thread::spawn(|| {
        (0..YOUNG_SENDS)
            // SAFETY: as above.
            .map(|_| unsafe { LoamAlloc.alloc(layout(48)) } as usize)
            .collect()
    })
    .join()
    .unwrap();
    // SAFETY: live 48-byte blocks, each freed once.
    unsafe {
        for p in theirs {
            LoamAlloc.dealloc(p as *mut u8, layout(48));
        }
        for p in own {
            LoamAlloc.dealloc(p, layout(48));
        }
    }
}

#[test]
fn the_block_freed_last_is_the_next_one_of_its_class() {
    std::thread::spawn(|| {
        // SAFETY: each block is used within its layout and freed once.
        unsafe {
            let a = LoamAlloc.alloc(layout(48));
            let b = LoamAlloc.alloc(layout(48));
            LoamAlloc.dealloc(a, layout(48));
            LoamAlloc.dealloc(b, layout(48));
            // Last in, first out; a smaller request of the same class too.
            assert_eq!(LoamAlloc.alloc(layout(41)), b);
            assert_eq!(LoamAlloc.alloc(layout(48)), a);
            LoamAlloc.dealloc(a, layout(48));
            LoamAlloc.dealloc(b, layout(41));
        }
    })
    .join()
    .unwrap();
}

/// Thread A allocates and stays alive; thread B, which allocates too,
/// frees A's blocks: B's next allocations of their class are those blocks,
/// not fresh ones (jemalloc's tcache behaviour). A thread that only frees
/// sends them home instead.
#[test]
fn blocks_another_thread_allocated_serve_the_freeing_threads_allocations() {
    const N: usize = 16;
    let (theirs, owner) = blocks_of_a_live_thread(N, layout(64));
    std::thread::spawn(move || {
        grow_up();
        // SAFETY: live blocks of 64 bytes, each freed once, here.
        unsafe {
            // This thread allocates too (so it keeps what it frees): enough
            // to reach its slow path, which is where that is noted (a
            // thread may take an exited one's heap, with pages to spare).
            let own: Vec<*mut u8> = (0..2000).map(|_| LoamAlloc.alloc(layout(64))).collect();
            for &p in &theirs {
                LoamAlloc.dealloc(p as *mut u8, layout(64));
            }
            let mine =
                next_allocations_are(&theirs, layout(64), "the freed blocks were reused here");
            for p in mine {
                LoamAlloc.dealloc(p, layout(64));
            }
            for p in own {
                LoamAlloc.dealloc(p, layout(64));
            }
        }
    })
    .join()
    .unwrap();
    drop(owner);
}

/// A new thread sends its first `YOUNG_SENDS` frees of another heap's
/// blocks home (mostly what it took over as it started, which it would
/// otherwise fill with blocks it does not own), and keeps those after.
#[test]
fn a_young_thread_sends_other_heaps_blocks_home_then_keeps_them() {
    const N: usize = 16;
    let young = YOUNG_SENDS as usize;
    let (mut theirs, owner) = blocks_of_a_live_thread(young + N, layout(80));
    let last: Vec<usize> = theirs.split_off(young);
    std::thread::spawn(move || {
        // SAFETY: live blocks of 80 bytes, each freed once, here.
        unsafe {
            // Past a slow path: this thread allocates.
            let own: Vec<*mut u8> = (0..2000).map(|_| LoamAlloc.alloc(layout(80))).collect();
            let theirs_set: BTreeSet<usize> = theirs.iter().copied().collect();
            for p in theirs {
                LoamAlloc.dealloc(p as *mut u8, layout(80));
            }
            // Kept, the last of them would be the next blocks of the class.
            let next: Vec<*mut u8> = (0..N).map(|_| LoamAlloc.alloc(layout(80))).collect();
            assert!(
                next.iter().all(|&p| !theirs_set.contains(&(p as usize))),
                "a young thread's frees of another heap's blocks went home"
            );
            for &p in &last {
                LoamAlloc.dealloc(p as *mut u8, layout(80));
            }
            let mine = next_allocations_are(
                &last,
                layout(80),
                "past its young frees, the thread keeps them",
            );
            for p in mine.into_iter().chain(next).chain(own) {
                LoamAlloc.dealloc(p, layout(80));
            }
        }
    })
    .join()
    .unwrap();
    drop(owner);
}

#[test]
fn kept_blocks_count_as_used_until_the_freeing_thread_exits() {
    const N: usize = 16;
    let (to_owner, from_freer) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        // SAFETY: every block is used within its layout and freed once; the
        // anchor stays live while its page is inspected.
        unsafe {
            let anchor = LoamAlloc.alloc(layout(96));
            let blocks: Vec<usize> = (0..N)
                .map(|_| LoamAlloc.alloc(layout(96)) as usize)
                .collect();
            let page = PageRef::of(anchor);
            assert!(
                blocks
                    .iter()
                    .all(|&b| PageRef::of(b as *const u8).start() == page.start()),
                "a fresh page holds them all"
            );
            let used = page.used();
            let (to_freer, from_owner) = std::sync::mpsc::channel::<()>();
            let freer = std::thread::spawn(move || {
                // A grown-up thread that allocates keeps other heaps' blocks
                // (one that only frees, or a young one, sends them home at
                // once, and the test then passed without keeping anything):
                // its own blocks first, past a slow path, held meanwhile.
                grow_up();
                let own: Vec<usize> = (0..2000)
                    .map(|_| LoamAlloc.alloc(layout(96)) as usize)
                    .collect();
                for b in blocks {
                    LoamAlloc.dealloc(b as *mut u8, layout(96));
                }
                to_owner.send(()).unwrap();
                from_owner.recv().unwrap();
                for b in own {
                    LoamAlloc.dealloc(b as *mut u8, layout(96));
                }
            });
            from_freer.recv().unwrap();
            // Kept by the freeing thread, alive: the page still counts them.
            loam_heap::collect();
            assert_eq!(page.used(), used, "the kept blocks still count as used");
            to_freer.send(()).unwrap();
            freer.join().unwrap();
            // The freeing thread has exited: its kept blocks went home.
            loam_heap::collect();
            assert_eq!(page.used(), used - N, "the blocks came back to their page");
            LoamAlloc.dealloc(anchor, layout(96));
        }
    })
    .join()
    .unwrap();
}

/// A thread that keeps another heap's block gives it back on `flush`,
/// while both threads live.
#[test]
fn flush_sends_kept_blocks_home() {
    use std::sync::mpsc::channel;
    let (victim_tx, victim_rx) = channel::<usize>();
    let (kept_tx, kept_rx) = channel::<()>();
    let (flush_tx, flush_rx) = channel::<()>();
    let (flushed_tx, flushed_rx) = channel::<()>();
    let (exit_tx, exit_rx) = channel::<()>();
    let freer = std::thread::spawn(move || {
        grow_up();
        // SAFETY: this thread allocates (so it keeps what it frees); the
        // victim is a live block of 200 bytes, freed once.
        unsafe {
            let own = LoamAlloc.alloc(layout(200));
            LoamAlloc.dealloc(victim_rx.recv().unwrap() as *mut u8, layout(200));
            kept_tx.send(()).unwrap();
            flush_rx.recv().unwrap();
            loam_heap::flush();
            flushed_tx.send(()).unwrap();
            exit_rx.recv().unwrap();
            LoamAlloc.dealloc(own, layout(200));
        }
    });
    // This thread owns the page; the anchor keeps it live throughout.
    // SAFETY: non-zero sizes; the victim is handed over, the anchor freed
    // at the end.
    let (anchor, victim) = unsafe { (LoamAlloc.alloc(layout(200)), LoamAlloc.alloc(layout(200))) };
    // SAFETY: live blocks.
    let page = unsafe { PageRef::of(anchor) };
    // SAFETY: as above.
    assert_eq!(unsafe { PageRef::of(victim) }.start(), page.start());
    let used = page.used();
    victim_tx.send(victim as usize).unwrap();
    kept_rx.recv().unwrap();
    loam_heap::collect();
    assert_eq!(
        page.used(),
        used,
        "kept by the freer, still used on its page"
    );
    flush_tx.send(()).unwrap();
    flushed_rx.recv().unwrap();
    loam_heap::collect();
    assert_eq!(page.used(), used - 1, "flushed home");
    exit_tx.send(()).unwrap();
    freer.join().unwrap();
    // SAFETY: live, freed once.
    unsafe { LoamAlloc.dealloc(anchor, layout(200)) };
}

/// `alloc_object` (a collector's objects, whose allocated bit only the
/// page's owner writes) never takes a block from the thread cache, whatever
/// the alignment: the cached block may be another heap's.
#[test]
fn alloc_object_never_takes_a_cached_block() {
    std::thread::spawn(|| {
        for (size, align) in [(32_usize, 8_usize), (32, 16), (48, 16), (64, 32)] {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a non-zero size; freed once, into the thread cache.
            let cached = unsafe {
                let p = LoamAlloc.alloc(l);
                LoamAlloc.dealloc(p, l);
                p
            };
            // Leaked: an object's block goes back through a page run.
            let (obj, _bit) = loam_heap::alloc_object(size, align, 0, 0);
            assert_ne!(obj, cached, "{size} bytes at {align}: a cached block");
            assert_eq!(obj as usize % align, 0);
            // The cached block is still the next plain allocation's.
            // SAFETY: as above.
            unsafe {
                let again = LoamAlloc.alloc(l);
                assert_eq!(again, cached, "{size} bytes at {align}");
                LoamAlloc.dealloc(again, l);
            }
        }
    })
    .join()
    .unwrap();
}
