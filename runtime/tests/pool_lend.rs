//! A managed pool's worker lends its heap while it parks
//! (`loam_heap::lend_idle` in the pool's park hooks): what a sweep frees
//! into it, while it sleeps or just before, serves the threads that run,
//! instead of waiting for a task to wake it while they map memory of their
//! own. The tests share the process's heap figures: they take turns.

mod support;

use loam_runtime::{ManagedPool, Mutator, Runtime};
use std::time::Duration;
use support::another_thread_allocates;

const MIB: u64 = 1 << 20;

/// About 40 MiB of objects in `m`'s pages, garbage once the call ends.
fn garbage(m: &mut Mutator) {
    m.mutate(|mc| {
        for i in 0..(1_u64 << 20) {
            mc.alloc([i; 4]);
        }
    });
}

/// Waits for the pool's one worker to park and lend its heap, a
/// condition and no clock: the suite's deadlock guard
/// (`support::within`) fails the test if the worker never lends.
fn wait_for_the_park() {
    support::within("the idle worker's lend", || {
        while loam_heap::stats().heaps_lent == 0 {
            std::thread::yield_now();
        }
    });
}

/// A pool of one worker over `rt`; nothing goes back to the OS while the
/// test runs.
fn one_worker(rt: &Runtime) -> ManagedPool {
    loam_heap::set_purge_delay(Duration::from_secs(3600));
    ManagedPool::builder(rt).num_threads(1).build().unwrap()
}

/// A runtime with one GC thread, the environment ignored.
fn runtime() -> Runtime {
    Runtime::builder().ignore_env().gc_threads(1).build()
}

/// The worker runs its next task with its heap taken back, whatever was
/// taken from it; then the pool goes, and the heap is checked.
fn the_worker_runs_on(rt: &Runtime, pool: ManagedPool) {
    let sum = pool.install(|m| {
        // Before anything allocates (which would take the heap back
        // anyway): `after_unpark` took it back.
        assert_eq!(
            loam_heap::stats().heaps_lent,
            0,
            "a woken worker's heap still lent"
        );
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

fn assert_served(before: &loam_heap::HeapStats, mapped: u64, when: &str) {
    assert!(
        mapped <= before.segments_mapped_total + 1,
        "the other thread mapped {} segments ({} MiB) while 40 MiB freed into the parked worker {when} waited",
        mapped - before.segments_mapped_total,
        (mapped - before.segments_mapped_total) * loam_heap::SEGMENT_SIZE as u64 / MIB
    );
    assert!(loam_heap::stats().lent_borrows > before.lent_borrows);
}

#[test]
fn what_a_sweep_frees_into_a_parked_worker_serves_the_other_threads() {
    let _t = support::serial();
    let rt = runtime();
    let pool = one_worker(&rt);
    // (A cycle the 40 MiB asks for may free part of it before the park:
    // the next test's case.)
    pool.install(garbage);
    wait_for_the_park();
    let before = loam_heap::stats();
    // The sweep frees them now, into the parked worker's heap, lent.
    rt.collect();
    let mapped = another_thread_allocates(&rt);
    assert_served(&before, mapped, "while it slept");
    the_worker_runs_on(&rt, pool);
}

#[test]
fn what_a_sweep_frees_into_a_worker_before_it_parks_serves_the_other_threads() {
    let _t = support::serial();
    let rt = runtime();
    let pool = one_worker(&rt);
    // The sweep frees them before the worker parks: it takes the page
    // runs back as it parks (`reclaim_runs`), which empties its pages
    // without releasing them, and lends its heap so, untidied. The first
    // borrower releases them.
    pool.install(|m| {
        garbage(m);
        m.collect();
    });
    wait_for_the_park();
    let before = loam_heap::stats();
    let mapped = another_thread_allocates(&rt);
    assert_served(&before, mapped, "before it slept");
    // It took the segments the release left wholly free, not the worker's
    // whole heap (an adoption, which makes the worker's later frees of
    // what it left there remote for good: without the release on the
    // first borrow, the heap's empty pages hid its free segments, and the
    // other thread adopted it).
    assert_eq!(
        loam_heap::stats().lent_adoptions,
        before.lent_adoptions,
        "the other thread adopted the parked worker's heap"
    );
    the_worker_runs_on(&rt, pool);
}
