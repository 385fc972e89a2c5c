//! Blocks aligned to 4 MiB and more (glibc, mimalloc and jemalloc serve
//! them; a segment cannot, `aligned.rs`): served from mappings of their
//! own, freed from any thread or through a `FreeBatch`, resized, counted
//! in the stats, and a free of
//! a 4 MiB-aligned address that is no live block stops the process with a
//! `heap:` message in every build.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

mod support;

const MIB: usize = 1 << 20;

/// One test at a time: the stats and the address checks see only their
/// own spans.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the page at `p` is mapped.
fn mapped(p: usize) -> bool {
    let mut v = [0_u8; 1];
    // SAFETY: `mincore` only reads the page tables; `v` holds one entry.
    unsafe { libc::mincore(p as *mut libc::c_void, 4096, v.as_mut_ptr()) == 0 }
}

/// Fills `p..p+n` with a pattern of `seed` and checks it is there.
///
/// # Safety
/// `p` is valid for `n` bytes of writes.
unsafe fn fill_and_check(p: *mut u8, n: usize, seed: u8) {
    // SAFETY: the caller's promise; nothing else refers to the block.
    let s = unsafe { std::slice::from_raw_parts_mut(p, n) };
    for (i, b) in s.iter_mut().enumerate().step_by(4093) {
        *b = seed.wrapping_add(i as u8);
    }
    for (i, b) in s.iter().enumerate().step_by(4093) {
        assert_eq!(*b, seed.wrapping_add(i as u8));
    }
}

#[test]
fn blocks_aligned_past_a_segment_are_served_and_zeroed() {
    let _serial = serial();
    for align in [4 * MIB, 8 * MIB, 64 * MIB, 256 * MIB] {
        for size in [1, 24, 4096, 3 * MIB, 9 * MIB + 17] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero sizes; each block is used within its size
            // and freed once with its layout.
            unsafe {
                let p = LoamAlloc.alloc_zeroed(layout);
                assert!(!p.is_null(), "{layout:?}");
                assert_eq!(p as usize % align, 0, "{layout:?} gave {p:p}");
                assert!(loam_heap::usable_size(p) >= size);
                assert_eq!(loam_heap::usable_size(p), loam_heap::good_size(size, align));
                assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
                fill_and_check(p, size, 3);
                LoamAlloc.dealloc(p, layout);
            }
        }
    }
}

/// Only the block is charged to the machine's memory, not the room the
/// alignment needed: a page aligned to 64 GiB is served on a machine with
/// less (the room is reserved inaccessible, then given back).
#[test]
fn an_alignment_larger_than_the_machine_is_served() {
    let _serial = serial();
    let layout = Layout::from_size_align(4096, 64 << 30).unwrap();
    // SAFETY: a non-zero size; used within it and freed once.
    unsafe {
        let p = LoamAlloc.alloc_zeroed(layout);
        assert!(!p.is_null());
        assert_eq!(p as usize % layout.align(), 0);
        fill_and_check(p, layout.size(), 7);
        LoamAlloc.dealloc(p, layout);
    }
}

#[test]
fn an_aligned_block_freed_by_another_thread_is_unmapped() {
    let _serial = serial();
    let layout = Layout::from_size_align(5 * MIB, 16 * MIB).unwrap();
    // SAFETY: a non-zero size.
    let p = unsafe { LoamAlloc.alloc(layout) } as usize;
    assert_ne!(p, 0);
    let during = loam_heap::stats();
    assert!(during.large_count >= 1 && during.mapped_bytes >= 5 * MIB as u64);
    assert!(mapped(p) && mapped(p + 5 * MIB - 4096));
    std::thread::spawn(move || {
        // SAFETY: live, from this allocator, freed once with its layout
        // (no other thread touches it).
        unsafe {
            fill_and_check(p as *mut u8, layout.size(), 9);
            LoamAlloc.dealloc(p as *mut u8, layout);
        }
    })
    .join()
    .unwrap();
    // The mapping went back (whether the address is mapped now says
    // nothing: the harness may map a new thread's stack there).
    let after = loam_heap::stats();
    assert_eq!(after.large_count + 1, during.large_count);
    assert!(after.mapped_bytes + 5 * MIB as u64 <= during.mapped_bytes);
}

#[test]
fn realloc_keeps_contents_and_alignment() {
    let _serial = serial();
    let align = 8 * MIB;
    let mut layout = Layout::from_size_align(100_000, align).unwrap();
    // SAFETY: each resize gets the block's current layout; the contents
    // checked are within the smaller of the two sizes.
    unsafe {
        let mut p = LoamAlloc.alloc(layout);
        assert!(!p.is_null());
        fill_and_check(p, layout.size(), 5);
        for new_size in [90_000, 12 * MIB, 3 * MIB, 40_000, 70 * MIB] {
            let kept = layout.size().min(new_size);
            let q = LoamAlloc.realloc(p, layout, new_size);
            assert!(!q.is_null());
            assert_eq!(q as usize % align, 0, "{new_size}: {q:p}");
            let s = std::slice::from_raw_parts(q, kept);
            for (i, b) in s.iter().enumerate().step_by(4093) {
                assert_eq!(*b, 5_u8.wrapping_add(i as u8), "{new_size}: byte {i}");
            }
            layout = Layout::from_size_align(new_size, align).unwrap();
            fill_and_check(q, new_size, 5);
            p = q;
        }
        LoamAlloc.dealloc(p, layout);
    }
}

/// Writes a pattern of `seed` over the first `n` bytes of `p`: every byte
/// of the first 4 KiB, one in 4,093 past them.
///
/// # Safety
/// `p` holds `n` writable bytes nobody else uses.
unsafe fn stamp(p: *mut u8, n: usize, seed: u8) {
    for i in (0..n.min(4096)).chain((4096..n).step_by(4093)) {
        // SAFETY: `i < n` (caller).
        unsafe { *p.add(i) = seed.wrapping_add((i % 251) as u8) };
    }
}

/// Checks the first `n` bytes of `p` against [`stamp`]'s pattern.
///
/// # Safety
/// `p` holds `n` readable bytes.
unsafe fn check_stamp(p: *const u8, n: usize, seed: u8, what: &str) {
    for i in (0..n.min(4096)).chain((4096..n).step_by(4093)) {
        // SAFETY: `i < n` (caller).
        let b = unsafe { *p.add(i) };
        assert_eq!(b, seed.wrapping_add((i % 251) as u8), "{what}: byte {i}");
    }
}

/// `realloc` at every alignment from 8 bytes to 2 MiB (the segment's
/// blocks), through sizes that cross the small classes, the large spans
/// and the huge segments, growing and shrinking: each result is aligned,
/// keeps the contents up to the smaller size, and is usable to its new
/// size.
#[test]
fn realloc_at_every_alignment_keeps_contents_and_alignment() {
    let _serial = serial();
    let sizes = [
        1,
        24,
        1000,
        70_000,
        200_000,
        5 * MIB,
        3000,
        100,
        9 * MIB + 7,
        8,
    ];
    let mut align = 8;
    while align <= 2 * MIB {
        let mut layout = Layout::from_size_align(sizes[0], align).unwrap();
        // Each resize gets the block's current layout; the bytes checked
        // are within the smaller of the two sizes, those stamped within
        // the new one; the block is freed once, with its last layout.
        // SAFETY: as just said.
        unsafe {
            let mut p = LoamAlloc.alloc(layout);
            assert!(!p.is_null(), "align {align}");
            assert_eq!(p as usize % align, 0, "align {align}: {p:p}");
            stamp(p, layout.size(), align.trailing_zeros() as u8);
            for (step, &new_size) in sizes.iter().enumerate().skip(1) {
                let what = format!("align {align}, {} -> {new_size}", layout.size());
                let seed = (align.trailing_zeros() as usize + step) as u8;
                let q = LoamAlloc.realloc(p, layout, new_size);
                assert!(!q.is_null(), "{what}");
                assert_eq!(q as usize % align, 0, "{what}: {q:p}");
                check_stamp(q, layout.size().min(new_size), seed - 1, &what);
                layout = Layout::from_size_align(new_size, align).unwrap();
                stamp(q, new_size, seed);
                p = q;
            }
            LoamAlloc.dealloc(p, layout);
        }
        align *= 2;
    }
}

/// A shrink keeps the block where it is and gives the pages past the new
/// size back.
#[test]
fn a_shrunk_aligned_block_stays_and_gives_its_tail_back() {
    let _serial = serial();
    let layout = Layout::from_size_align(8 * MIB, 4 * MIB).unwrap();
    // SAFETY: the block is used within its current size and freed once
    // with its last layout.
    unsafe {
        let p = LoamAlloc.alloc(layout);
        assert!(!p.is_null());
        fill_and_check(p, layout.size(), 11);
        let before = loam_heap::stats().mapped_bytes;
        let q = LoamAlloc.realloc(p, layout, 100_000);
        assert_eq!(q, p, "shrunk in place");
        assert_eq!(
            loam_heap::usable_size(p),
            loam_heap::good_size(100_000, layout.align())
        );
        let s = std::slice::from_raw_parts(p, 100_000);
        for (i, b) in s.iter().enumerate().step_by(4093) {
            assert_eq!(*b, 11_u8.wrapping_add(i as u8));
        }
        assert!(mapped(p as usize + 96 * 1024));
        assert!(loam_heap::stats().mapped_bytes + 7 * MIB as u64 <= before);
        LoamAlloc.dealloc(p, Layout::from_size_align(100_000, layout.align()).unwrap());
    }
}

#[test]
fn many_aligned_blocks_live_at_once_do_not_overlap() {
    let _serial = serial();
    let layout = Layout::from_size_align(MIB, 4 * MIB).unwrap();
    // SAFETY: non-zero sizes; each block is written within its size and
    // freed once, in an order other than the allocation order.
    unsafe {
        let blocks: Vec<*mut u8> = (0..64).map(|_| LoamAlloc.alloc(layout)).collect();
        for (i, &p) in blocks.iter().enumerate() {
            assert!(!p.is_null());
            p.cast::<usize>().write(i);
        }
        let mut sorted: Vec<usize> = blocks.iter().map(|&p| p as usize).collect();
        sorted.sort_unstable();
        assert!(sorted.windows(2).all(|w| w[1] - w[0] >= layout.size()));
        for (i, &p) in blocks.iter().enumerate() {
            assert_eq!(p.cast::<usize>().read(), i);
        }
        // Every other one first (spans with both neighbours on the list),
        // then the rest (the head, the tail, the last one).
        let (odd, even): (Vec<_>, Vec<_>) =
            blocks.iter().enumerate().partition(|(i, _)| i % 2 == 1);
        for (_, &p) in odd.into_iter().chain(even) {
            LoamAlloc.dealloc(p, layout);
        }
    }
}

#[test]
fn a_free_batch_takes_an_aligned_block() {
    let _serial = serial();
    let layout = Layout::from_size_align(2 * MIB, 8 * MIB).unwrap();
    // SAFETY: a non-zero size.
    let p = unsafe { LoamAlloc.alloc(layout) };
    assert!(!p.is_null());
    let before = loam_heap::stats().large_count;
    let mut batch = loam_heap::FreeBatch::new();
    // SAFETY: live, from this allocator, never used again.
    unsafe { batch.push(std::ptr::NonNull::new(p).unwrap()) };
    drop(batch);
    assert_eq!(loam_heap::stats().large_count + 1, before);
}

/// The page-run calls take such a block too (a collector sweeping a
/// `LoamAlloc` span would): a run of it is the block alone, freed, and a
/// whole page of it is no page. They read its first bytes as a segment
/// header before, and wrote through what they found there.
#[test]
fn the_page_run_calls_take_an_aligned_block() {
    let _serial = serial();
    let layout = Layout::from_size_align(2 * MIB, 4 * MIB).unwrap();
    let aligned = || {
        // SAFETY: a non-zero size.
        let p = unsafe { LoamAlloc.alloc(layout) };
        assert!(!p.is_null());
        // What a segment header's fields would be read from.
        // SAFETY: the block's 64 bytes are ours.
        unsafe { p.write_bytes(0xFF, 64) };
        std::ptr::NonNull::new(p).unwrap()
    };
    let before = loam_heap::stats().large_count;
    let mut batch = loam_heap::FreeBatch::new();
    let (a, b) = (aligned(), aligned());
    assert_eq!(loam_heap::stats().large_count, before + 2);
    // SAFETY: live, from this allocator, never used again.
    assert!(!unsafe { batch.push_whole_page(a) });
    // SAFETY: as above.
    unsafe { batch.push_page_run(&[a]) };
    // SAFETY: as above.
    let held = std::panic::catch_unwind(|| unsafe { loam_heap::FreeBatch::hold_page_run(&[b]) });
    let msg = held.map(drop).unwrap_err();
    let msg = msg.downcast_ref::<&str>().copied().unwrap_or_default();
    assert!(msg.contains("no page"), "{msg}");
    // SAFETY: as above (the refused hold took nothing).
    unsafe { batch.push(b) };
    drop(batch);
    assert_eq!(loam_heap::stats().large_count, before, "both blocks freed");
}

/// A managed object cannot take such a block: it has no page for its
/// allocated bit, and the runtime sees an allocation failure.
#[test]
fn an_object_allocation_aligned_past_a_segment_is_refused() {
    let _serial = serial();
    let (p, bit) = loam_heap::alloc_object(64, 4 * MIB, 0, 0);
    assert!(p.is_null() && bit.is_none());
}

/// An alignment that is not a power of two is refused with a message:
/// 0 divided by zero on the span path, and 24 or 393,216 came back
/// aligned to something else.
#[test]
fn an_object_allocation_with_an_alignment_not_a_power_of_two_panics() {
    for align in [0, 24, 3 << 17] {
        for size in [48, 8 * MIB] {
            let r = std::panic::catch_unwind(|| loam_heap::alloc_object(size, align, 0, 0));
            let msg = r.expect_err("refused");
            let msg = msg
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or("");
            assert!(msg.contains("not a power of two"), "{size}, {align}: {msg}");
        }
    }
}

const BAD: [&str; 2] = ["never_allocated", "freed_twice"];

/// What the child does: one bad free of a 4 MiB-aligned address (which
/// must not return).
fn bad_free(case: &str) {
    let layout = Layout::from_size_align(64, 4 * MIB).unwrap();
    // SAFETY: none: each is the misuse under test, which the heap must
    // catch before it touches anything.
    unsafe {
        match case {
            "never_allocated" => {
                // A 4 MiB-aligned address inside a mapping of our own that
                // the heap never handed out.
                let raw = libc::mmap(
                    std::ptr::null_mut(),
                    16 * MIB,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                ) as usize;
                assert_ne!(raw as *mut libc::c_void, libc::MAP_FAILED);
                let p = (raw + 4 * MIB) & !(4 * MIB - 1);
                LoamAlloc.dealloc(p as *mut u8, layout);
            }
            "freed_twice" => {
                let p = LoamAlloc.alloc(layout);
                LoamAlloc.dealloc(p, layout);
                LoamAlloc.dealloc(p, layout);
            }
            other => panic!("unknown case {other}"),
        }
    }
    eprintln!("the bad free returned");
    std::process::exit(0);
}

/// Checked in every build, not only debug and `secure` ones: freeing such
/// a block is a slow path that finds the span on a list before it reads
/// its header.
#[test]
fn a_bad_free_of_an_aligned_address_stops_the_process_with_a_message() {
    let _serial = serial();
    if let Ok(case) = std::env::var("LOAM_BAD_ALIGNED_FREE") {
        bad_free(&case);
        return;
    }
    for case in BAD {
        support::assert_child_dies(
            "a_bad_free_of_an_aligned_address_stops_the_process_with_a_message",
            "LOAM_BAD_ALIGNED_FREE",
            case,
            &["heap: free of 0x", "never allocated by it, or freed twice"],
        );
    }
}
