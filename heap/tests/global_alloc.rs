//! The whole suite of this test crate runs with `LoamAlloc` as the process's
//! global allocator: the test harness, std's collections, threads and all.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::collections::{BTreeMap, HashMap};

#[global_allocator]
static GLOBAL: LoamAlloc = LoamAlloc;

#[test]
fn std_collections_work() {
    let mut m: HashMap<String, Vec<u32>> = HashMap::new();
    for i in 0..20_000u32 {
        m.entry(format!("key{}", i % 997)).or_default().push(i);
    }
    assert_eq!(m.len(), 997);
    let total: u64 = m.values().flatten().map(|&x| u64::from(x)).sum();
    assert_eq!(total, (0..20_000u64).sum());
    let mut b = BTreeMap::new();
    for i in (0..50_000).rev() {
        b.insert(i, i.to_string());
    }
    assert_eq!(b.iter().next(), Some((&0, &"0".to_string())));
    assert_eq!(b.len(), 50_000);
}

#[test]
fn every_alignment_up_to_the_slice_and_beyond() {
    // Past 2 MiB (a block of its own mapping, `aligned.rs`) up to 64 MiB.
    for shift in 0..=26 {
        let align = 1usize << shift;
        for size in [1usize, 7, 8, 24, 100, 1000, 5000, 70_000, 300_000, 5 << 20] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero size.
            let p = unsafe { LoamAlloc.alloc(layout) };
            assert!(!p.is_null(), "{layout:?}");
            assert_eq!(p as usize % align, 0, "{layout:?} gave {p:p}");
            // SAFETY: the block is at least `size` bytes.
            unsafe {
                p.write(1);
                p.add(size - 1).write(2);
                assert!(loam_heap::usable_size(p) >= size);
                LoamAlloc.dealloc(p, layout);
            }
        }
    }
}

#[test]
fn unservable_requests_return_null() {
    // SAFETY: valid layouts; the allocator must refuse them with null.
    unsafe {
        let too_big = Layout::from_size_align(isize::MAX as usize - (8 << 20), 8).unwrap();
        assert!(LoamAlloc.alloc(too_big).is_null());
        // An alignment whose mapping the address space cannot hold.
        let too_aligned = Layout::from_size_align(64, 1 << 62).unwrap();
        assert!(LoamAlloc.alloc(too_aligned).is_null());
    }
}

#[test]
fn zeroed_allocations_are_zero_even_on_reused_memory() {
    for size in [8usize, 64, 1000, 100_000, 1 << 20, 6 << 20] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        for _ in 0..3 {
            // SAFETY: non-zero sizes; each block is dirtied, freed, and the
            // next zeroed allocation (likely the same block) checked.
            unsafe {
                let p = LoamAlloc.alloc(layout);
                p.write_bytes(0xAB, size);
                LoamAlloc.dealloc(p, layout);
                let q = LoamAlloc.alloc_zeroed(layout);
                let s = std::slice::from_raw_parts(q, size);
                assert!(s.iter().all(|&b| b == 0), "size {size}");
                LoamAlloc.dealloc(q, layout);
            }
        }
    }
}

#[test]
fn realloc_keeps_contents_and_stays_in_place_when_the_block_allows() {
    // SAFETY: each pointer is live with the layout it is used with.
    unsafe {
        let l = Layout::from_size_align(20, 8).unwrap();
        let p = LoamAlloc.alloc(l);
        p.copy_from_nonoverlapping(b"0123456789abcdefghij".as_ptr(), 20);
        let q = LoamAlloc.realloc(p, l, 24);
        assert_eq!(q, p, "20 -> 24 bytes fits the 24-byte class");
        let l = Layout::from_size_align(24, 8).unwrap();
        let mut cur = q;
        let mut cur_layout = l;
        for new_size in [100usize, 5000, 200_000, 5 << 20, 300, 24] {
            cur = LoamAlloc.realloc(cur, cur_layout, new_size);
            assert!(!cur.is_null());
            assert_eq!(std::slice::from_raw_parts(cur, 20), b"0123456789abcdefghij");
            cur_layout = Layout::from_size_align(new_size, 8).unwrap();
        }
        LoamAlloc.dealloc(cur, cur_layout);
    }
    let mut v: Vec<u64> = Vec::new();
    for i in 0..1_000_000 {
        v.push(i);
    }
    assert_eq!(v.iter().sum::<u64>(), 999_999 * 1_000_000 / 2);
}

#[test]
fn blocks_outlive_the_threads_that_allocated_them() {
    let mut kept = Vec::new();
    for round in 0..20 {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    (0..2000)
                        .map(|i| vec![(round * 4 + t + i) as u8; 1 + i % 200])
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            kept.push(h.join().unwrap());
        }
        if kept.len() > 16 {
            kept.drain(..8);
        }
    }
    for (k, vs) in kept.iter().enumerate() {
        for (i, v) in vs.iter().enumerate() {
            assert_eq!(v.len(), 1 + i % 200, "vector {k}/{i}");
            assert!(v.iter().all(|&b| b == v[0]));
        }
    }
    drop(kept);
    loam_heap::collect();
    loam_heap::assert_valid();
}

#[test]
fn free_batch_returns_blocks_to_their_owner() {
    let layout = Layout::from_size_align(48, 8).unwrap();
    let blocks: Vec<usize> =
        // SAFETY: non-zero size.
        (0..10_000).map(|_| unsafe { LoamAlloc.alloc(layout) } as usize).collect();
    // Blocks of one slice go as one run (a slice holds fewer than a
    // sweeper's 4,096-block batch of 48-byte blocks); a slice with fewer
    // than four of them (at either end of the range) joins the owner's
    // chain instead.
    let pages = blocks
        .iter()
        .map(|p| p / loam_heap::SLICE_SIZE)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let before = loam_heap::stats();
    std::thread::spawn(move || {
        let mut batch = loam_heap::FreeBatch::new();
        for &p in &blocks {
            // SAFETY: live blocks from LoamAlloc, never used again.
            unsafe { batch.push(std::ptr::NonNull::new(p as *mut u8).unwrap()) };
        }
        assert_eq!(batch.len(), 10_000);
        batch.flush();
        // About one atomic operation a slice, not 10,000.
        let sent = batch.batches_sent() as usize;
        assert!(
            pages.saturating_sub(2) <= sent && sent <= pages + 1,
            "{sent} messages for blocks on {pages} slices"
        );
        assert!(pages <= 16, "10,000 blocks of 48 bytes on {pages} pages");
    })
    .join()
    .unwrap();
    let after = loam_heap::stats();
    assert!(after.remote_frees_sent >= before.remote_frees_sent + 10_000);
    loam_heap::collect(); // drains this thread's queue
    let drained = loam_heap::stats();
    assert!(drained.remote_frees_drained >= before.remote_frees_drained + 10_000);
}

#[test]
fn stats_see_class_and_large_allocations() {
    let small: Vec<Box<[u8; 40]>> = (0..1000).map(|_| Box::new([0; 40])).collect();
    let large = vec![1u8; 3 << 20];
    let s = loam_heap::stats();
    let c40 = s.classes.iter().find(|c| c.block_size == 40).unwrap();
    assert!(c40.blocks_used >= 1000);
    assert!(s.large_count >= 1 && s.large_bytes >= 3 << 20);
    assert!(s.committed_bytes >= s.allocated_bytes / 2);
    drop((small, large));
}

#[test]
fn local_pages_are_listed_with_their_geometry() {
    let b: Vec<Box<u128>> = (0..100).map(Box::new).collect();
    let mut found = false;
    loam_heap::for_each_local_page(|p| {
        if p.block_size == 16 && p.used >= 100 {
            found = true;
        }
    });
    assert!(found);
    // SAFETY: `b[0]` is a live block.
    let page = unsafe { loam_heap::PageRef::of((&*b[0] as *const u128).cast()) };
    let i = page.block_index((&*b[0] as *const u128).cast());
    assert_eq!(page.block(i), (&*b[0] as *const u128).cast_mut().cast());
}

#[test]
fn allocations_beyond_four_gib_keep_their_size() {
    let size = 5usize << 30;
    let layout = Layout::from_size_align(size, 8).unwrap();
    // SAFETY: the block is `size` bytes; only its ends are touched (the rest
    // is never committed).
    unsafe {
        let p = LoamAlloc.alloc(layout);
        assert!(!p.is_null());
        p.write(1);
        p.add(size - 1).write(2);
        assert!(loam_heap::usable_size(p) >= size);
        let q = LoamAlloc.realloc(p, layout, size - 4096);
        assert_eq!(q, p, "shrinking a little stays in place");
        assert_eq!(q.read(), 1);
        LoamAlloc.dealloc(q, layout);
    }
}

/// A thread-local whose destructor allocates and frees as its thread exits.
#[allow(clippy::vec_box)] // many small heap blocks is the point
struct AllocatesOnDrop(Vec<Box<[u8; 100]>>);

impl Drop for AllocatesOnDrop {
    fn drop(&mut self) {
        let more: Vec<Box<[u8; 100]>> = (0..1000).map(|i| Box::new([i as u8; 100])).collect();
        assert!(more.iter().enumerate().all(|(i, b)| b[99] == i as u8));
        self.0.clear();
    }
}

thread_local! {
    static LATE: std::cell::RefCell<Option<AllocatesOnDrop>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn thread_local_destructors_may_allocate_as_the_thread_exits() {
    let handles: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(|| {
                // Touch the heap first, then register the destructor: it
                // runs before the heap's exit hook (destructors run last
                // registered first), with the heap still the thread's.
                // After the hook is `late_tls.rs`'s case: it needs the
                // destructor registered before the heap exists, which a
                // program whose global allocator is loam's cannot order
                // (the thread allocates before its closure runs).
                let warm = vec![1u8; 64];
                LATE.with(|l| {
                    *l.borrow_mut() = Some(AllocatesOnDrop(
                        (0..100).map(|_| Box::new([7; 100])).collect(),
                    ))
                });
                drop(warm);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    loam_heap::collect();
    loam_heap::assert_valid();
}

#[test]
fn large_blocks_grow_in_place_when_the_following_slices_are_free() {
    std::thread::spawn(|| {
        // SAFETY: each pointer is live with the layout it is used with.
        unsafe {
            let big = Layout::from_size_align(3 << 20, 8).unwrap();
            let l = Layout::from_size_align(200 << 10, 8).unwrap();
            let grown = Layout::from_size_align(2 << 20, 8).unwrap();
            // This thread may have taken an exited thread's heap, whose
            // segments have holes: a 200 KiB span may land in one with used
            // slices after it, and move when it grows. Each such try keeps
            // its block, filling the hole, until one lands where a freed
            // 48-slice span left free slices behind it.
            let mut moved = Vec::new();
            let grew_in_place = (0..16).any(|_| {
                let b = LoamAlloc.alloc(big);
                LoamAlloc.dealloc(b, big);
                let p = LoamAlloc.alloc(l);
                p.write_bytes(0x5A, 200 << 10);
                let q = LoamAlloc.realloc(p, l, 2 << 20);
                assert!(loam_heap::usable_size(q) >= 2 << 20);
                assert!(std::slice::from_raw_parts(q, 200 << 10)
                    .iter()
                    .all(|&x| x == 0x5A));
                q.add((2 << 20) - 1).write(1);
                if q == p {
                    LoamAlloc.dealloc(q, grown);
                    true
                } else {
                    moved.push(q);
                    false
                }
            });
            for q in moved {
                LoamAlloc.dealloc(q, grown);
            }
            assert!(grew_in_place, "no span grew into the free slices after it");
        }
        loam_heap::assert_valid();
    })
    .join()
    .unwrap();
}
