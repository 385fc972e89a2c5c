//! `mark_blocks` against `mark_block` one block at a time: the same bits
//! set, and `newly` called for exactly the blocks whose bit the call set,
//! in order, once each. The blocks come in runs of one size (neighbours
//! whose bits share a word, and runs crossing into the next word or page),
//! listed in a shuffled order with repeats, some marked before; and one
//! list of more than 64 entries that all share a word.

use loam_heap::{mark_block, mark_blocks, LoamAlloc, PageRef};
use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;

mod support;

use support::Rng;

/// A fresh block of `layout` with its mark bit clear.
fn block(layout: Layout) -> usize {
    // SAFETY: a non-zero-sized layout (every caller's); freed by `free`.
    let p = unsafe { LoamAlloc.alloc(layout) };
    assert!(!p.is_null(), "out of memory");
    // SAFETY: live until `free`.
    let page = unsafe { PageRef::of(p) };
    page.clear_mark(page.block_index(p));
    p as usize
}

fn free(p: usize, layout: Layout) {
    // SAFETY: allocated by `block` with `layout`, freed once.
    unsafe { LoamAlloc.dealloc(p as *mut u8, layout) };
}

fn is_marked(p: usize) -> bool {
    // SAFETY: a live block (the callers free theirs after).
    let page = unsafe { PageRef::of(p as *const u8) };
    page.is_marked(page.block_index(p as *const u8))
}

/// Marks `list` with `mark_blocks`, with `marked` the blocks marked
/// before, and checks what it reports and sets against marking one by one.
fn check(list: &[usize], marked: &mut HashSet<usize>, blocks: &[usize], what: &str) {
    let expected: Vec<usize> = list.iter().copied().filter(|&p| marked.insert(p)).collect();
    let mut newly = Vec::new();
    // SAFETY: live blocks (the callers free theirs after).
    unsafe { mark_blocks(list, |p| newly.push(p)) };
    assert_eq!(newly, expected, "{what}");
    for &p in blocks {
        assert_eq!(is_marked(p), marked.contains(&p), "{what}: block {p:#x}");
    }
}

#[test]
fn marking_in_groups_sets_and_reports_what_marking_one_by_one_would() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..20 {
        // Runs of 140 blocks of one size each.
        let layouts: Vec<Layout> = (0..700)
            .map(|i| {
                Layout::from_size_align([16, 24, 48, 200, 1000][(i / 140 + round) % 5], 8).unwrap()
            })
            .collect();
        let blocks: Vec<usize> = layouts.iter().map(|&l| block(l)).collect();
        let mut marked = HashSet::new();
        for &p in &blocks {
            if rng.below(4) == 0 {
                // SAFETY: live until freed below.
                assert!(unsafe { mark_block(p as *const u8) });
                marked.insert(p);
            }
        }
        // Runs of neighbours, with repeats and jumps back and forth.
        let mut list = Vec::new();
        while list.len() < 2000 {
            let start = rng.below(blocks.len() as u64) as usize;
            let run = 1 + rng.below(80) as usize;
            list.extend(blocks[start..].iter().take(run));
            if rng.below(3) == 0 {
                list.push(blocks[rng.below(blocks.len() as u64) as usize]);
            }
        }
        check(&list, &mut marked, &blocks, &format!("round {round}"));
        for (p, l) in blocks.into_iter().zip(layouts) {
            free(p, l);
        }
    }
}

#[test]
fn a_run_of_more_than_a_words_blocks_with_repeats_is_reported_once_each() {
    // The smallest blocks: 64 of them share a word, if they are neighbours.
    let layout = Layout::from_size_align(8, 8).unwrap();
    let blocks: Vec<usize> = (0..256).map(|_| block(layout)).collect();
    let mut marked = HashSet::new();
    // Each block twice in a row, then all of them again: runs of up to 128
    // entries whose bits share a word, split by the group's cap.
    let list: Vec<usize> = blocks
        .iter()
        .flat_map(|&p| [p, p])
        .chain(blocks.iter().copied())
        .collect();
    check(&list, &mut marked, &blocks, "doubled run");
    assert_eq!(marked.len(), blocks.len());
    for p in blocks {
        free(p, layout);
    }
}
