//! Page walks that overlap (two threads calling `for_each_page` in turn,
//! each starting before the other ends) let the segments that die
//! meanwhile go. A segment freed during a walk stays mapped until the
//! walks that may stand on it end; with one count for all walks, none was
//! unmapped (nor cached for reuse) for as long as the walks overlapped,
//! and a program freeing huge blocks meanwhile mapped a new one each time.
#![cfg(target_os = "linux")]

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// This process's virtual size, KiB.
fn vm_size_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn segments_freed_during_overlapping_walks_are_let_go() {
    const WALKS: usize = 50;
    const FREES_PER_WALK: usize = 4;
    const HUGE: usize = 64 << 20;
    // A page for the walks to meet.
    let small = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: a valid layout; freed below with it.
    let keep = unsafe { LoamAlloc.alloc(small) };
    assert!(!keep.is_null());
    let started = Arc::new(AtomicUsize::new(0));
    let frees = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Walk `k` runs on thread `k % 2`, begins once walk `k - 1` has begun,
    // and ends once walk `k + 1` has begun and `FREES_PER_WALK` more huge
    // blocks were freed: from the first walk on, one is always under way.
    let walkers: Vec<_> = (0..2)
        .map(|t| {
            let (started, frees, stop) = (started.clone(), frees.clone(), stop.clone());
            std::thread::spawn(move || {
                for k in (t..WALKS).step_by(2) {
                    while started.load(Ordering::SeqCst) < k {
                        std::thread::yield_now();
                    }
                    let mut first = true;
                    // The closure reads nothing of the page and keeps no
                    // `PageRef`.
                    // SAFETY: as just said.
                    unsafe {
                        loam_heap::for_each_page(|_| {
                            if !std::mem::take(&mut first) {
                                return;
                            }
                            started.store(k + 1, Ordering::SeqCst);
                            while !stop.load(Ordering::SeqCst)
                                && (started.load(Ordering::SeqCst) < k + 2
                                    || frees.load(Ordering::SeqCst) < (k + 1) * FREES_PER_WALK)
                            {
                                std::thread::yield_now();
                            }
                        })
                    };
                }
            })
        })
        .collect();
    let big = Layout::from_size_align(HUGE, 8).unwrap();
    let before = vm_size_kib();
    let mut grown = 0;
    for j in 0..WALKS * FREES_PER_WALK {
        // Within walk `j / FREES_PER_WALK`.
        while started.load(Ordering::SeqCst) < j / FREES_PER_WALK + 1 {
            std::thread::yield_now();
        }
        // A valid layout; the block is written within it and freed once
        // with it.
        // SAFETY: as just said.
        unsafe {
            let p = LoamAlloc.alloc(big);
            assert!(!p.is_null());
            p.write(1);
            LoamAlloc.dealloc(p, big);
        }
        frees.store(j + 1, Ordering::SeqCst);
        grown = grown.max(vm_size_kib().saturating_sub(before));
    }
    stop.store(true, Ordering::SeqCst);
    for w in walkers {
        w.join().unwrap();
    }
    // SAFETY: allocated above with this layout.
    unsafe { LoamAlloc.dealloc(keep, small) };
    // 200 blocks of 64 MiB, 12.5 GiB in all: what is released is cached
    // (1 GiB at most) and reused; a few walks' worth wait at a time.
    assert!(
        grown < 2 << 20,
        "the process grew by {} MiB freeing {} blocks of 64 MiB during overlapping walks",
        grown >> 10,
        WALKS * FREES_PER_WALK
    );
}
