//! `mark_blocks` against `mark_block` one block at a time: the same bits
//! set, and `newly` called for exactly the blocks whose bit the call set,
//! in order, once each, with blocks of several sizes (bits in one word,
//! in neighbouring words, on other pages) listed in a shuffled order with
//! repeats, some marked before.

use loam_heap::{mark_block, mark_blocks, LoamAlloc, PageRef};
use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;

/// A small deterministic generator (xorshift), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn is_marked(p: usize) -> bool {
    // SAFETY: `p` is a live block of this allocator (the caller's).
    let page = unsafe { PageRef::of(p as *const u8) };
    page.is_marked(page.block_index(p as *const u8))
}

#[test]
fn marking_in_groups_sets_and_reports_what_marking_one_by_one_would() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..20 {
        let layouts: Vec<Layout> = (0..700)
            .map(|i| Layout::from_size_align([16, 24, 48, 200, 1000][(i + round) % 5], 8).unwrap())
            .collect();
        // SAFETY: non-zero-sized layouts; each block is freed once below.
        let blocks: Vec<usize> = layouts
            .iter()
            .map(|&l| unsafe { LoamAlloc.alloc(l) } as usize)
            .collect();
        for &p in &blocks {
            assert_ne!(p, 0, "out of memory");
            // SAFETY: live until freed below.
            let page = unsafe { PageRef::of(p as *const u8) };
            page.clear_mark(page.block_index(p as *const u8));
        }
        let mut marked = HashSet::new();
        for &p in &blocks {
            if rng.below(4) == 0 {
                // SAFETY: live until freed below.
                assert!(unsafe { mark_block(p as *const u8) });
                marked.insert(p);
            }
        }
        // Runs of neighbours (the common case: one word), with repeats and
        // jumps back and forth.
        let mut list = Vec::new();
        while list.len() < 2000 {
            let start = rng.below(blocks.len());
            let run = 1 + rng.below(80);
            list.extend(blocks[start..].iter().take(run));
            if rng.below(3) == 0 {
                list.push(blocks[rng.below(blocks.len())]);
            }
        }
        let expected: Vec<usize> = list.iter().copied().filter(|&p| marked.insert(p)).collect();
        let mut newly = Vec::new();
        // SAFETY: live until freed below.
        unsafe { mark_blocks(&list, |p| newly.push(p)) };
        assert_eq!(newly, expected, "round {round}");
        for &p in &blocks {
            assert_eq!(
                is_marked(p),
                marked.contains(&p),
                "round {round}: block {p:#x}"
            );
        }
        for (p, l) in blocks.into_iter().zip(layouts) {
            // SAFETY: allocated above with `l`, freed once.
            unsafe { LoamAlloc.dealloc(p as *mut u8, l) };
        }
    }
}
