//! A class whose blocks are freed and allocated again reuses them before it
//! touches memory no block has used: what it keeps resident follows its
//! live blocks, not the size of its page. (Linux: `mincore`, `prctl`.)
#![cfg(target_os = "linux")]

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

const SEGMENT: usize = 4 << 20;
const OS_PAGE: usize = 4096;

/// Resident bytes of the 4 MiB segment holding `p`.
fn resident_in_segment(p: usize) -> usize {
    let seg = p & !(SEGMENT - 1);
    let mut pages = vec![0_u8; SEGMENT / OS_PAGE];
    // SAFETY: `seg` is the start of a mapping of `SEGMENT` bytes (the
    // heap's segment, aligned to its size); `pages` has a byte per page.
    let r = unsafe { libc::mincore(seg as *mut libc::c_void, SEGMENT, pages.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    pages.iter().filter(|&&b| b & 1 == 1).count() * OS_PAGE
}

/// Eleven classes (16 - 128 bytes), 300 blocks each, freed and allocated
/// again 200 times: the thread cache keeps 128 of each class's frees, the
/// rest go back to their page. With the page's own frees handed out only
/// once its whole bump region was used, each class touched its whole
/// 64 KiB page (712 KiB resident); reused first, about what is live (204
/// KiB) and a step of bump region per class (268 KiB).
#[test]
fn freed_blocks_are_reused_before_fresh_memory_is_touched() {
    // Transparent huge pages (`always`, or `LOAM_HUGE_PAGES=1`) would back
    // the segment's first write with 2 MiB: off for this process, which
    // runs this test alone.
    let (on, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
    // SAFETY: a plain prctl; the kernel reads its arguments as unsigned
    // longs.
    let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on, unused, unused, unused) };
    assert_eq!(r, 0, "prctl: {}", std::io::Error::last_os_error());
    let sizes: Vec<usize> = (16..=64).step_by(8).chain((80..=128).step_by(16)).collect();
    let live: usize = sizes.iter().map(|s| s * 300).sum();
    let layouts: Vec<Layout> = sizes
        .iter()
        .map(|&s| Layout::from_size_align(s, 8).unwrap())
        .collect();
    let round = || -> Vec<(usize, Layout)> {
        let mut blocks = Vec::new();
        for &l in &layouts {
            for _ in 0..300 {
                // SAFETY: a non-zero size; written in full.
                let p = unsafe { LoamAlloc.alloc(l) };
                assert!(!p.is_null());
                // SAFETY: as just said.
                unsafe { p.write_bytes(7, l.size()) };
                blocks.push((p as usize, l));
            }
        }
        blocks
    };
    let free = |blocks: Vec<(usize, Layout)>| {
        for (p, l) in blocks {
            // SAFETY: allocated above with this layout, freed once.
            unsafe { LoamAlloc.dealloc(p as *mut u8, l) };
        }
    };
    let first = round();
    let probe = first[0].0;
    free(first);
    for _ in 0..200 {
        free(round());
    }
    let blocks = round();
    assert!(
        blocks
            .iter()
            .all(|&(p, _)| p & !(SEGMENT - 1) == probe & !(SEGMENT - 1)),
        "every block in the first segment"
    );
    let resident = resident_in_segment(probe);
    free(blocks);
    // The segment's header pages are resident too (a few KiB); each class
    // may have touched one step (4 KiB) and its thread cache's frees past
    // what is live.
    let bound = live + sizes.len() * 2 * OS_PAGE + (64 << 10);
    assert!(
        resident <= bound,
        "{} KiB resident for {} KiB live in {} classes (bound {} KiB)",
        resident >> 10,
        live >> 10,
        sizes.len(),
        bound >> 10
    );
}
