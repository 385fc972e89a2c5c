//! Held page runs (`FreeBatch::hold_page_run`): a run held and never sent,
//! or sent with other blocks, is a collector's bug the heap names at once.

use loam_heap::FreeBatch;
use std::ptr::NonNull;

/// `n` live object blocks of one page (the test leaks them).
fn objects(n: usize) -> Vec<NonNull<u8>> {
    let mut blocks: Vec<NonNull<u8>> = Vec::new();
    while blocks.len() < n {
        let (p, bit) = loam_heap::alloc_object(32, 8, 0, 0);
        bit.expect("an object block").set();
        let p = NonNull::new(p).unwrap();
        // SAFETY: live blocks (never freed here).
        let same = |q: NonNull<u8>| unsafe {
            loam_heap::PageRef::of(q.as_ptr()) == loam_heap::PageRef::of(p.as_ptr())
        };
        if !blocks.first().is_some_and(|&f| !same(f)) {
            blocks.push(p);
        }
    }
    blocks
}

#[test]
#[should_panic(expected = "held page run of 2 block(s) was dropped without being sent")]
fn a_held_run_dropped_unsent_panics() {
    let blocks = objects(2);
    // SAFETY: live object blocks of one page, never used again.
    let held = unsafe { FreeBatch::hold_page_run(&blocks) };
    drop(held);
}

#[test]
#[should_panic(expected = "a held run sent with other blocks")]
fn a_held_run_sent_with_other_blocks_panics() {
    let blocks = objects(3);
    // SAFETY: as above.
    let held = unsafe { FreeBatch::hold_page_run(&blocks[..2]) };
    let mut batch = FreeBatch::new();
    // SAFETY: refused before anything is sent (the point of the test).
    unsafe { batch.push_held_page_run(held, &blocks) };
}

/// The owner takes back another run of the page while one is held: the
/// held blocks still count as used, so the page is not reset under them
/// (a reset clears every pending bit), and they stay pending and
/// allocated until their own run comes back.
#[test]
fn a_run_taken_back_beside_a_held_one_leaves_the_held_blocks_pending() {
    std::thread::spawn(|| {
        let (keep, keep_bit) = loam_heap::alloc_object(48, 8, 0, 0);
        keep_bit.unwrap().set();
        // SAFETY: `keep` stays live for the test: the page with it.
        let page = unsafe { loam_heap::PageRef::of(keep) };
        let mut mine = Vec::new();
        while mine.len() < 6 {
            let (p, bit) = loam_heap::alloc_object(48, 8, 0, 0);
            bit.unwrap().set();
            // SAFETY: live.
            if unsafe { loam_heap::PageRef::of(p) } == page {
                mine.push(NonNull::new(p).unwrap());
            }
        }
        let (held_blocks, others) = mine.split_at(2);
        // SAFETY: live object blocks of one page, each in one run, never
        // used again.
        let held = unsafe { FreeBatch::hold_page_run(held_blocks) };
        let mut batch = FreeBatch::new();
        // SAFETY: as above.
        unsafe { batch.push_page_run(others) };
        batch.flush();
        loam_heap::collect(); // this thread, the owner, takes the run back
        let bit = |p: NonNull<u8>, words: &mut dyn Iterator<Item = u64>| {
            let i = page.block_index(p.as_ptr());
            words.nth(i / 64).unwrap() >> (i % 64) & 1 == 1
        };
        assert_eq!(page.runs_out(), 1);
        for &b in held_blocks {
            assert!(page.is_allocated(page.block_index(b.as_ptr())));
            assert!(
                bit(b, &mut page.pending_words()),
                "a held block lost its pending bit"
            );
        }
        for &b in others {
            assert!(!page.is_allocated(page.block_index(b.as_ptr())));
            assert!(!bit(b, &mut page.pending_words()));
        }
        // SAFETY: the blocks `held` was made of.
        unsafe { batch.push_held_page_run(held, held_blocks) };
        batch.flush();
        loam_heap::collect();
        assert_eq!(page.runs_out(), 0);
        for &b in held_blocks {
            assert!(!page.is_allocated(page.block_index(b.as_ptr())));
        }
        // SAFETY: live, never used again.
        unsafe { batch.push_page_run(&[NonNull::new(keep).unwrap()]) };
    })
    .join()
    .unwrap();
}
