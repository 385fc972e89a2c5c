//! #11, finding 7's second half: threads that a `mutate` call joins call
//! `collect`, `wait_for_cycle` and `wait_for_drops`, whose cycle waits for
//! that very call. Those waits cannot end; each must panic saying why
//! rather than hang, and the runtime must go on afterwards.
//!
//! A binary of its own: the stall is told from a wait by the rest of the
//! process being idle (`thread_state.rs`, `Stall`), which other tests
//! running beside it in one process would not be.

#![cfg(target_os = "linux")]

mod support;

use loam_runtime::Runtime;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::Duration;
use support::panic_message;

/// How long the test may take before it counts as hung: the waits panic
/// after 10 s of stall.
const WATCHDOG: Duration = Duration::from_secs(120);

#[test]
fn waits_for_a_cycle_from_threads_a_mutate_call_joins_panic_rather_than_hang() {
    let rt = Runtime::builder()
        .gc_threads(2)
        .ignore_env()
        .verify(true)
        .build();
    let rt2 = rt.clone();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut m = rt2.attach();
        let results = m.mutate(|mc| {
            let _x = mc.alloc(1_u64);
            let (last_tx, last_rx) = channel::<()>();
            let left = AtomicUsize::new(3);
            // Each wait's panic; the last one to finish wakes this call
            // (once: a wake-up starts the others' stretch afresh). That no
            // stall is taken before the patience is `thread_state`'s unit
            // test, on given times.
            let wait = |f: &(dyn Fn() + Sync)| {
                let r = catch_unwind(AssertUnwindSafe(f));
                if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                    last_tx.send(()).unwrap();
                }
                r.err().map(|p| panic_message(p.as_ref()))
            };
            std::thread::scope(|s| {
                let collect = s.spawn(|| wait(&|| rt2.collect()));
                // The others wait for the cycle that `collect` asked for.
                while !mc.collection_pending() {
                    std::thread::yield_now();
                }
                let cycle = s.spawn(|| wait(&|| rt2.wait_for_cycle()));
                let drops = s.spawn(|| wait(&|| rt2.wait_for_drops()));
                last_rx.recv().unwrap();
                [collect, cycle, drops].map(|t| t.join().unwrap())
            })
        });
        let _ = tx.send(results);
    });
    let results = match rx.recv_timeout(WATCHDOG) {
        Ok(r) => r,
        Err(RecvTimeoutError::Timeout) => panic!("the waits hung for {WATCHDOG:?}"),
        Err(RecvTimeoutError::Disconnected) => panic!("the mutator thread panicked"),
    };
    for (name, msg) in ["collect", "wait_for_cycle", "wait_for_drops"]
        .iter()
        .zip(&results)
    {
        let msg = msg.as_deref().unwrap_or_else(|| panic!("{name} returned"));
        assert!(
            msg.contains(&format!("loam: {name} waited")) && msg.contains("must not call"),
            "{name}: {msg}"
        );
    }
    // The runtime goes on: a collection completes (the cycle `collect`
    // asked for runs once the call has returned, this one after it).
    support::assert_collects_within(&rt, WATCHDOG);
}
