//! What the heap's integration tests share.

// Each test binary takes the helpers it needs.
#![allow(dead_code)]

use std::process::Command;

/// Runs `test` of this test binary again in a child process with `var` set
/// to `case`, and asserts that the child died (a bad free must not
/// return) with a stderr that contains every one of `want`.
pub fn assert_child_dies(test: &str, var: &str, case: &str, want: &[&str]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(var, case)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{case}: the child survived: {stderr}"
    );
    assert!(
        want.iter().all(|w| stderr.contains(w)),
        "{case}: stderr says {stderr:?}, wanted {want:?}"
    );
}

mod knob;
#[allow(unused_imports)]
pub use knob::{flag_knob, knob};

/// A thread that allocated blocks for the caller and stays alive, its heap
/// with it, until this is dropped (then it exits and is joined): freeing
/// its blocks elsewhere is a remote free into a live heap.
pub struct LiveOwner {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// `n` blocks of `layout` allocated by a new thread that stays alive (see
/// [`LiveOwner`]), as addresses, for the caller to free once each.
pub fn blocks_of_a_live_thread(n: usize, layout: std::alloc::Layout) -> (Vec<usize>, LiveOwner) {
    use std::alloc::GlobalAlloc;
    let (blocks_tx, blocks_rx) = std::sync::mpsc::channel::<Vec<usize>>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let blocks = (0..n)
            // SAFETY: a non-zero size; the blocks are handed over, freed
            // by the caller.
            .map(|_| unsafe { loam_heap::LoamAlloc.alloc(layout) } as usize)
            .collect();
        blocks_tx.send(blocks).unwrap();
        // Alive until the owner is dropped (or the sender goes with it).
        let _ = done_rx.recv();
    });
    let blocks = blocks_rx.recv().unwrap();
    let owner = LiveOwner {
        done: Some(done_tx),
        thread: Some(thread),
    };
    (blocks, owner)
}

impl Drop for LiveOwner {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// A small deterministic generator (xorshift64*), so that a failing
/// seed repeats.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (not zero).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
