//! A thread that a `mutate` call of runtime A joins calls `collect` on
//! runtime B while A's cycle waits for that call: B's cycle waits behind
//! A's for the process's cycle lock, so the wait cannot end. It must panic
//! saying why rather than hang, and both runtimes must go on afterwards.
//!
//! A binary of its own, as `stall.rs`: the stall is told by the rest of
//! the process being idle (`thread_state.rs`, `Stall`).

#![cfg(target_os = "linux")]

mod support;

use loam_runtime::Runtime;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::Duration;
use support::panic_message;

/// How long the test may take before it counts as hung: the wait panics
/// after 10 s of stall.
const WATCHDOG: Duration = Duration::from_secs(120);

#[test]
fn collecting_another_runtime_from_a_thread_a_call_joins_panics_rather_than_hangs() {
    // Stopped cycles, and a small heap, so that the call below starts one
    // of A's, which then waits for that call.
    let a = Runtime::builder()
        .gc_threads(1)
        .ignore_env()
        .ragged_handshakes(false)
        .min_heap(256 << 10)
        .build();
    let b = Runtime::builder().gc_threads(1).ignore_env().build();
    let (a2, b2) = (a.clone(), b.clone());
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut m = a2.attach();
        let msg = m.mutate(|mc| {
            let mut kept = Vec::new();
            while !mc.collection_pending() {
                kept.push(mc.alloc([0_u64; 16]));
            }
            std::thread::scope(|s| {
                s.spawn(|| {
                    catch_unwind(AssertUnwindSafe(|| b2.collect()))
                        .err()
                        .map(|p| panic_message(p.as_ref()))
                })
                .join()
                .unwrap()
            })
        });
        let _ = tx.send(msg);
    });
    let msg = match rx.recv_timeout(WATCHDOG) {
        Ok(msg) => msg.expect("collect returned"),
        Err(RecvTimeoutError::Timeout) => panic!("the wait hung for {WATCHDOG:?}"),
        Err(RecvTimeoutError::Disconnected) => panic!("the mutator thread panicked"),
    };
    assert!(
        msg.contains("loam: collect waited")
            && msg.contains("whose cycle holds the process's cycle lock")
            && msg.contains("must not call"),
        "{msg}"
    );
    // Both go on: each completes a collection.
    support::assert_collects_within(&a, WATCHDOG);
    support::assert_collects_within(&b, WATCHDOG);
}
