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
