//! A managed pool's worker lends its heap while it parks
//! (`loam_heap::lend_idle` in the pool's park hooks): what a sweep frees
//! into it while it sleeps serves the threads that run, instead of waiting
//! for a task to wake it while they map memory of their own. Its own
//! process, and one test: the heap's figures are the whole process's.

use loam_runtime::{ManagedPool, Runtime};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

#[test]
fn what_a_sweep_frees_into_a_parked_worker_serves_the_other_threads() {
    let rt = Runtime::builder().ignore_env().gc_threads(1).build();
    // Nothing goes back to the OS while the test runs.
    loam_heap::set_purge_delay(Duration::from_secs(3600));
    let pool = ManagedPool::builder(&rt).num_threads(1).build().unwrap();
    // About 40 MiB of objects in the worker's pages, garbage once the
    // task's call ends, not yet collected as the worker parks.
    pool.install(|m| {
        m.mutate(|mc| {
            for i in 0..(1_u64 << 20) {
                mc.alloc([i; 4]);
            }
        })
    });
    // With no task left, the worker parks and lends its heap. (A guard
    // against a hang, not a measure: the park comes within milliseconds.)
    let since = Instant::now();
    while loam_heap::stats().heaps_lent == 0 {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the idle worker lent no heap"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let before = loam_heap::stats();
    // The sweep frees them now, into the parked worker's heap, lent.
    rt.collect();
    let rt2 = rt.clone();
    let mapped = std::thread::spawn(move || {
        // About 24 MiB, live until the call ends.
        let mut w = rt2.attach();
        w.mutate(|mc| {
            let mut sum = 0;
            for i in 0..600_000_u64 {
                sum += mc.alloc([i; 4])[3];
            }
            assert_eq!(sum, 600_000 * 599_999 / 2);
        });
        loam_heap::stats().segments_mapped_total
    })
    .join()
    .unwrap();
    assert!(
        mapped <= before.segments_mapped_total + 1,
        "the other thread mapped {} segments ({} MiB) while 40 MiB freed into the parked worker waited",
        mapped - before.segments_mapped_total,
        (mapped - before.segments_mapped_total) * loam_heap::SEGMENT_SIZE as u64 / MIB
    );
    assert!(loam_heap::stats().lent_borrows > before.lent_borrows);
    // The worker runs its next task with its heap, whatever was taken.
    let sum = pool.install(|m| {
        m.mutate(|mc| {
            let v: Vec<_> = (0..100_000_u64).map(|i| mc.alloc(i)).collect();
            v.iter().map(|g| **g).sum::<u64>()
        })
    });
    assert_eq!(sum, 100_000 * 99_999 / 2);
    drop(pool);
    rt.collect();
    loam_heap::assert_valid();
}
