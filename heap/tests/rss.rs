//! Memory goes back to the OS: after a program frees what it allocated, its
//! resident size falls back, by the purge delay on a running thread, at thread
//! exit, and at once with `collect`, or with `release` for what the calling
//! thread's heap holds; `hand_over` gives it to the other threads first.
//!
//! One test per concern, run in sequence in one process (RSS is per process).

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::time::Duration;

fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: f64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096.0 / (1 << 20) as f64
}

const MIB: usize = 1 << 20;

/// Under AddressSanitizer its shadow memory (an eighth of what was touched)
/// stays resident after the heap gives the memory back.
fn shadow_mib(touched: usize) -> f64 {
    if cfg!(feature = "asan") {
        (touched / MIB) as f64 / 8.0
    } else {
        0.0
    }
}

fn fill(total: usize, size: usize) -> Vec<usize> {
    let layout = Layout::from_size_align(size, 8).unwrap();
    (0..total / size)
        .map(|_| {
            // SAFETY: non-zero size; the block is written in full.
            unsafe {
                let p = LoamAlloc.alloc(layout);
                p.write_bytes(1, size);
                p as usize
            }
        })
        .collect()
}

fn free_all(blocks: Vec<usize>, size: usize) {
    let layout = Layout::from_size_align(size, 8).unwrap();
    for p in blocks {
        // SAFETY: allocated by `fill` with this layout.
        unsafe { LoamAlloc.dealloc(p as *mut u8, layout) };
    }
}

#[test]
fn resident_size_falls_back() {
    // 1. collect() gives freed memory back at once.
    let base = rss_mib();
    let blocks = fill(256 * MIB, 64);
    let peak = rss_mib();
    assert!(
        peak - base > 200.0,
        "the blocks were resident: {base} -> {peak}"
    );
    free_all(blocks, 64);
    loam_heap::collect();
    let after = rss_mib();
    assert!(
        after - base < 32.0 + shadow_mib(256 * MIB),
        "collect returned the memory: base {base:.0} peak {peak:.0} after {after:.0} MiB"
    );

    // 2. A running thread returns idle memory by itself after the purge
    //    delay, on its next slow path.
    loam_heap::set_purge_delay(Duration::from_millis(20));
    let base = rss_mib();
    let blocks = fill(128 * MIB, 1000);
    free_all(blocks, 1000);
    std::thread::sleep(Duration::from_millis(60));
    // Slow paths: a fresh page of a few classes.
    let kept: Vec<usize> = (0..4).flat_map(|k| fill(64 * 1024, 24 + 8 * k)).collect();
    let after = rss_mib();
    assert!(
        after - base < 40.0 + shadow_mib(128 * MIB),
        "purged after the delay: base {base:.0} after {after:.0} MiB"
    );
    drop(kept);

    // 3. A thread that exits leaves nothing resident behind once its
    //    memory has waited long enough: a running thread's next slow path
    //    gives the cached segments back and visits the orphan. (Until then
    //    it stays resident, for the next thread to reuse without faulting
    //    it in.)
    let base = rss_mib();
    std::thread::spawn(|| {
        let blocks = fill(128 * MIB, 200);
        free_all(blocks, 200);
    })
    .join()
    .unwrap();
    // Its wholly free segments wait in the process-wide cache for ten
    // purge delays: 200 ms.
    std::thread::sleep(Duration::from_millis(250));
    let kept: Vec<usize> = (0..4).flat_map(|k| fill(64 * 1024, 56 + 8 * k)).collect();
    drop(kept);
    let after = rss_mib();
    assert!(
        after - base < 32.0 + shadow_mib(128 * MIB),
        "thread exit returned the memory: base {base:.0} after {after:.0} MiB"
    );

    // 4. Blocks another thread freed stay with their owner, resident, until
    //    the owner comes back for them; `release` takes them back and gives
    //    the memory to the OS at once, whatever the purge delay.
    let delay = loam_heap::purge_delay();
    loam_heap::set_purge_delay(Duration::from_secs(3600));
    let base = rss_mib();
    let blocks = fill(128 * MIB, 64);
    std::thread::spawn(move || {
        free_all(blocks, 64);
        loam_heap::flush();
    })
    .join()
    .unwrap();
    let freed = rss_mib();
    assert!(
        freed - base > 100.0,
        "the blocks another thread freed wait for their owner: base {base:.0} after {freed:.0} MiB"
    );
    loam_heap::release();
    let after = rss_mib();
    assert!(
        after - base < 32.0 + shadow_mib(128 * MIB),
        "release gave them back: base {base:.0} freed {freed:.0} after {after:.0} MiB"
    );

    // 5. `hand_over` gives them to the other threads instead: a thread that
    //    allocates next takes them, resident, before it maps memory, and
    //    `trim` gives back what nobody took once it has waited long enough.
    let blocks = fill(128 * MIB, 64);
    free_all(blocks, 64);
    let before = loam_heap::stats();
    loam_heap::hand_over();
    let cached = loam_heap::stats().segment_cached_bytes as usize;
    assert!(
        cached >= 100 * MIB,
        "hand_over cached {} MiB of 128 freed",
        cached / MIB
    );
    let mapped = std::thread::spawn(|| {
        let blocks = fill(64 * MIB, 64);
        let mapped = loam_heap::stats().segments_mapped_total;
        free_all(blocks, 64);
        mapped
    })
    .join()
    .unwrap();
    assert!(
        mapped <= before.segments_mapped_total + 1,
        "the other thread mapped {} segments with {} MiB cached",
        mapped - before.segments_mapped_total,
        cached / MIB
    );
    // An hour's purge delay: still cached, due in about an hour.
    let due = loam_heap::trim().expect("an hour's purge delay: still cached");
    assert!(due > Duration::from_secs(3000), "due in {due:?}");
    let held = rss_mib();
    loam_heap::set_purge_delay(Duration::ZERO);
    assert_eq!(loam_heap::trim(), None, "no delay: nothing left cached");
    let after = rss_mib();
    assert!(
        held - after > 50.0,
        "trim gave the cached segments back: {held:.0} -> {after:.0} MiB"
    );
    loam_heap::set_purge_delay(delay);
}
