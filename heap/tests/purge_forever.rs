//! A purge delay of "for ever" (`Duration::MAX`, stored as `u64::MAX`
//! milliseconds, as `LOAM_PURGE_DELAY_MS=18446744073709551615` does too) is
//! a setting the heap takes, not an overflow on its slow path. The thread
//! cache's next flush was `now + delay`: a panic inside the allocator in a
//! debug build (an unwind out of `GlobalAlloc`), a deadline in the past in a
//! release one. Its own test binary: the delay is process-wide.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::time::Duration;

#[test]
fn a_purge_delay_of_for_ever_runs_the_slow_paths() {
    loam_heap::set_purge_delay(Duration::MAX);
    loam_heap::hold_freed_memory(Duration::MAX);
    assert_eq!(loam_heap::purge_delay(), Duration::from_millis(u64::MAX));
    std::thread::spawn(|| {
        let small = Layout::from_size_align(32, 8).unwrap();
        let kept = Layout::from_size_align(48, 8).unwrap();
        // A few blocks of another class in the thread cache, which the
        // rounds below never take out: the cache is not empty at their
        // slow paths, so housekeeping looks at its flush deadline.
        for _ in 0..8 {
            // SAFETY: a valid, non-zero layout; the block is freed at once.
            unsafe { LoamAlloc.dealloc(LoamAlloc.alloc(kept), kept) };
        }
        let mut blocks = Vec::with_capacity(20_000);
        // Rounds of fresh pages: slow paths, whose housekeeping runs every
        // so often.
        for _ in 0..50 {
            for _ in 0..20_000 {
                // SAFETY: a valid, non-zero layout.
                let p = unsafe { LoamAlloc.alloc(small) };
                assert!(!p.is_null());
                blocks.push(p);
            }
            for p in blocks.drain(..) {
                // SAFETY: allocated above with `small`, freed once.
                unsafe { LoamAlloc.dealloc(p, small) };
            }
        }
    })
    .join()
    .unwrap();
}
