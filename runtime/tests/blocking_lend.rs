//! `Mutator::blocking` lends the thread's heap while it waits
//! (`loam_heap::lend`): what a sweep frees into it *during* the wait
//! serves the threads that run meanwhile, instead of waiting for this
//! thread to run again while they map memory of their own. Its own
//! process, and one test: the heap's figures are the whole process's.

mod support;

use loam_runtime::Runtime;
use std::time::Duration;

const MIB: u64 = 1 << 20;

#[test]
fn what_a_sweep_frees_here_during_blocking_serves_the_other_threads() {
    let rt = Runtime::builder().ignore_env().gc_threads(1).build();
    let mut m = rt.attach();
    // Nothing goes back to the OS while the test runs.
    loam_heap::set_purge_delay(Duration::from_secs(3600));
    // About 40 MiB of objects in this thread's pages, garbage once the
    // call ends, not yet collected when the wait begins.
    m.mutate(|mc| {
        for i in 0..(1_u64 << 20) {
            mc.alloc([i; 4]);
        }
    });
    let before = loam_heap::stats();
    let (lent, mapped) = m.blocking(|| {
        let lent = loam_heap::stats().heaps_lent;
        // The sweep frees them now, into this thread's heap, lent.
        rt.collect();
        (lent, support::another_thread_allocates(&rt))
    });
    assert_eq!(lent, 1, "blocking lent no heap");
    assert!(
        mapped <= before.segments_mapped_total + 1,
        "the other thread mapped {} segments ({} MiB) while 40 MiB freed here waited",
        mapped - before.segments_mapped_total,
        (mapped - before.segments_mapped_total) * loam_heap::SEGMENT_SIZE as u64 / MIB
    );
    // The mutator goes on as before, its heap its own again.
    assert_eq!(loam_heap::stats().heaps_lent, 0);

    // With nobody to take it, what a sweep frees into the lent heap goes
    // back to the OS: `trim` (the collector's, after each cycle) drains a
    // heap lent as long as the cache keeps a segment and caches its wholly
    // free segments, then gives back those that waited that long. With no
    // delay and no hold (the collector sets the hold again as its next
    // cycle begins; none begins here) that is at once, with no clock.
    m.mutate(|mc| {
        for i in 0..(1_u64 << 20) {
            mc.alloc([i; 4]);
        }
    });
    let before = loam_heap::stats().committed_bytes;
    let during = m.blocking(|| {
        rt.collect(); // sweeps the 40 MiB into the lent heap
        loam_heap::set_purge_delay(Duration::ZERO);
        loam_heap::hold_freed_memory(Duration::ZERO);
        assert_eq!(loam_heap::stats().heaps_lent, 1);
        let _ = loam_heap::trim();
        loam_heap::stats().committed_bytes
    });
    assert!(
        before >= during + 24 * MIB,
        "committed {} MiB before, {} MiB once a lent heap's garbage was trimmed",
        before / MIB,
        during / MIB
    );
    let sum = m.mutate(|mc| {
        let v: Vec<_> = (0..100_000_u64).map(|i| mc.alloc(i)).collect();
        v.iter().map(|g| **g).sum::<u64>()
    });
    assert_eq!(sum, 100_000 * 99_999 / 2);
    rt.collect();
    loam_heap::assert_valid();
}
