//! `Mutator::blocking` lends the thread's heap while it waits
//! (`loam_heap::lend`): what a sweep frees into it *during* the wait
//! serves the threads that run meanwhile, instead of waiting for this
//! thread to run again while they map memory of their own. Its own
//! process, and one test: the heap's figures are the whole process's.

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
        let rt = rt.clone();
        std::thread::spawn(move || {
            // About 24 MiB, live until the call ends.
            let mut w = rt.attach();
            w.mutate(|mc| {
                let mut sum = 0;
                for i in 0..600_000_u64 {
                    sum += mc.alloc([i; 4])[3];
                }
                assert_eq!(sum, 600_000 * 599_999 / 2);
            });
        })
        .join()
        .unwrap();
        (lent, loam_heap::stats().segments_mapped_total)
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
    // back to the OS: after each cycle the collector drains a heap lent
    // ten purge delays (at most a second) and caches its wholly free
    // segments, and gives back what has waited that long again. No
    // deadline: the sleeps are lower bounds, and a collection cannot
    // begin before the coordinator has trimmed after the last one.
    loam_heap::set_purge_delay(Duration::from_millis(10));
    m.mutate(|mc| {
        for i in 0..(1_u64 << 20) {
            mc.alloc([i; 4]);
        }
    });
    let before = loam_heap::stats().committed_bytes;
    let during = m.blocking(|| {
        rt.collect(); // sweeps the 40 MiB into the lent heap
        std::thread::sleep(Duration::from_millis(1200));
        rt.collect(); // drains it, caches its free segments
        std::thread::sleep(Duration::from_millis(1200));
        rt.collect(); // the cache's time is up
        rt.collect();
        loam_heap::stats().committed_bytes
    });
    assert!(
        before >= during + 24 * MIB,
        "committed {} MiB before, {} MiB after 2.4 s of a lent heap's garbage",
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
