//! A free of a pointer the heap never handed out, a second free, or a
//! write after free over a free block's first word (a page list's link,
//! or the tag of a block the thread cache keeps) stops the process with a
//! `heap:` message (as glibc's "free(): invalid pointer" does) instead of
//! a fault inside the allocator or a block handed out twice: in debug
//! builds, and in release builds with the `secure` feature. Each case runs
//! in a child process (this test binary again, with `LOAM_BAD_FREE` naming
//! the case), whose death and stderr the parent reads.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

mod support;

const CASES: [(&str, &str); 15] = [
    ("malloc", "not in any segment of this allocator"),
    ("static", "not in any segment of this allocator"),
    ("stack", "not in any segment of this allocator"),
    ("interior", "not the start of a block"),
    ("interior_remote", "not the start of a block"),
    ("past_last_remote", "not the start of a block"),
    ("past_last", "not the start of a block"),
    ("given_back", "not the start of a block"),
    ("double", "freed twice"),
    ("double_remote", "freed twice"),
    ("double_large", "freed twice"),
    ("write_over_link", "link was overwritten"),
    ("write_over_kept", "while the thread cache kept it"),
    ("zero_over_link", "link was overwritten"),
    ("zero_over_kept", "while the thread cache kept it"),
];

static STATIC_BYTES: [u8; 64] = [0; 64];

/// A block allocated by another thread that stays alive (for as long as
/// this child process), so that freeing it here is a remote free (checked
/// by the segment's side tables, not the owner's descriptor).
fn of_a_live_thread(l: Layout) -> *mut u8 {
    let (blocks, owner) = support::blocks_of_a_live_thread(1, l);
    std::mem::forget(owner);
    blocks[0] as *mut u8
}

/// What a write after free puts over a free block's first word (a page
/// list's link, or a kept block's tag).
fn over_first_word(case: &str) -> usize {
    if case.starts_with("zero") {
        0
    } else {
        0x1234_5678
    }
}

/// What the child does: one bad free (which must not return).
fn bad_free(case: &str) {
    let l = Layout::from_size_align(48, 8).unwrap();
    // SAFETY: none: each of these is the misuse under test, which the heap
    // must catch before it touches anything.
    unsafe {
        match case {
            "malloc" => LoamAlloc.dealloc(libc::malloc(48).cast(), l),
            "static" => LoamAlloc.dealloc(STATIC_BYTES.as_ptr().cast_mut(), l),
            "stack" => {
                let mut on_stack = [0_u8; 48];
                LoamAlloc.dealloc(on_stack.as_mut_ptr(), l)
            }
            "interior" => {
                let p = LoamAlloc.alloc(l);
                LoamAlloc.dealloc(p.add(16), l)
            }
            "interior_remote" => LoamAlloc.dealloc(of_a_live_thread(l).add(8), l),
            "past_last_remote" => {
                // A multiple of the block size past a page's last block,
                // in the page's tail (24-byte blocks leave 16 bytes of a
                // 64 KiB page, or the guard page): the side tables' check
                // took it for a block start, and the free wrote into the
                // next slice (or faulted on the guard page).
                let l24 = Layout::from_size_align(24, 8).unwrap();
                let page = loam_heap::PageRef::of(of_a_live_thread(l24));
                let past = page.start().add(page.capacity() * page.block_size());
                LoamAlloc.dealloc(past, l24)
            }
            "past_last" => {
                // The same past this thread's own page: its small blocks
                // are checked by the side tables too (the thread cache's
                // path, which reads no page descriptor).
                let l24 = Layout::from_size_align(24, 8).unwrap();
                let page = loam_heap::PageRef::of(LoamAlloc.alloc(l24));
                let past = page.start().add(page.capacity() * page.block_size());
                LoamAlloc.dealloc(past, l24)
            }
            "given_back" => {
                // A block of this thread's whose page was given back (and
                // its memory decommitted, so no freed tag is left to
                // find): the side tables still describe the page, its
                // descriptor says it is gone.
                // A live block of another class keeps the segment.
                let odd = Layout::from_size_align(600, 8).unwrap();
                let _stays = LoamAlloc.alloc(l);
                let p = LoamAlloc.alloc(odd);
                LoamAlloc.dealloc(p, odd);
                loam_heap::release();
                LoamAlloc.dealloc(p, odd);
            }
            "double" => {
                let p = LoamAlloc.alloc(l);
                LoamAlloc.dealloc(p, l);
                LoamAlloc.dealloc(p, l);
            }
            "double_remote" => {
                let p = of_a_live_thread(l);
                LoamAlloc.dealloc(p, l);
                LoamAlloc.dealloc(p, l);
            }
            "double_large" => {
                // Two blocks of a page of 3 KiB blocks, so that the page
                // stays when one goes; the second free finds its tag.
                let big = Layout::from_size_align(3000, 8).unwrap();
                let (p, keep) = (LoamAlloc.alloc(big), LoamAlloc.alloc(big));
                LoamAlloc.dealloc(p, big);
                LoamAlloc.dealloc(p, big);
                LoamAlloc.dealloc(keep, big);
            }
            "write_over_link" | "zero_over_link" => {
                // Blocks of 3 KiB (past the thread cache), enough to fill
                // a few pages; four freed in the middle go on their page's
                // list, and a write after free hits one's link. Allocating
                // on uses the list once the bump regions run out.
                let big = Layout::from_size_align(3000, 8).unwrap();
                let blocks: Vec<*mut u8> = (0..64).map(|_| LoamAlloc.alloc(big)).collect();
                for &b in &blocks[10..14] {
                    LoamAlloc.dealloc(b, big);
                }
                // A zero was the end of the list before links were
                // encoded: the list was cut off, silently.
                blocks[12].cast::<usize>().write(over_first_word(case));
                for _ in 0..128 {
                    LoamAlloc.alloc(big);
                }
            }
            "write_over_kept" | "zero_over_kept" => {
                // Blocks of 48 bytes in the thread cache; a write over a
                // kept block's first word (its kept tag).
                let blocks: Vec<*mut u8> = (0..3).map(|_| LoamAlloc.alloc(l)).collect();
                for &b in &blocks {
                    LoamAlloc.dealloc(b, l);
                }
                blocks[2].cast::<usize>().write(over_first_word(case));
                for _ in 0..3 {
                    LoamAlloc.alloc(l);
                }
            }
            other => panic!("unknown case {other}"),
        }
    }
    eprintln!("the bad free returned");
    std::process::exit(0);
}

#[test]
#[cfg_attr(
    not(any(debug_assertions, feature = "secure")),
    ignore = "free checks are on in debug builds and with the `secure` feature"
)]
fn bad_frees_stop_the_process_with_a_message() {
    if let Ok(case) = std::env::var("LOAM_BAD_FREE") {
        bad_free(&case);
        return;
    }
    for (case, want) in CASES {
        support::assert_child_dies(
            "bad_frees_stop_the_process_with_a_message",
            "LOAM_BAD_FREE",
            case,
            &["heap: ", want],
        );
    }
}

/// Good frees of every kind still work beside the checks: small, large,
/// huge, aligned, local and remote.
#[test]
fn every_kind_of_good_free_passes_the_checks() {
    let layouts = [
        Layout::from_size_align(8, 8).unwrap(),
        Layout::from_size_align(1000, 8).unwrap(),
        Layout::from_size_align(100_000, 8).unwrap(),
        Layout::from_size_align(300_000, 8).unwrap(),
        Layout::from_size_align(5 << 20, 8).unwrap(),
        Layout::from_size_align(64, 4096).unwrap(),
        Layout::from_size_align(70_000, 1 << 20).unwrap(),
    ];
    let blocks: Vec<(usize, Layout)> = layouts
        .iter()
        // SAFETY: non-zero sizes.
        .map(|&l| (unsafe { LoamAlloc.alloc(l) } as usize, l))
        .collect();
    let (local, remote) = blocks.split_at(3);
    let remote = remote.to_vec();
    std::thread::spawn(move || {
        for (p, l) in remote {
            // SAFETY: live blocks with their layouts, freed once.
            unsafe { LoamAlloc.dealloc(p as *mut u8, l) };
        }
    })
    .join()
    .unwrap();
    for &(p, l) in local {
        // SAFETY: as above.
        unsafe { LoamAlloc.dealloc(p as *mut u8, l) };
    }
}

/// A block the program filled with the free fill's byte is not taken for
/// a freed one (the tag is what marks a freed block).
#[test]
fn blocks_filled_with_any_byte_free_cleanly() {
    for byte in [0x00_u8, 0xDD, 0xA5, 0xFF] {
        for size in [16_usize, 48, 64, 200, 3000] {
            let l = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: a non-zero size; filled within it and freed once.
            unsafe {
                let p = LoamAlloc.alloc(l);
                p.write_bytes(byte, size);
                LoamAlloc.dealloc(p, l);
            }
        }
    }
}
