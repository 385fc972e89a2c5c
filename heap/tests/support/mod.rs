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

/// A test's size knob: the whole number in environment variable `name`, at
/// least `min`, or `default` when it is unset. A bad value stops the test
/// with a message: read as the default, or as 0, it ran another test than
/// the one asked for, or none at all.
pub fn knob(name: &str, default: usize, min: usize) -> usize {
    let Some(v) = std::env::var_os(name) else {
        return default;
    };
    let v = v.to_string_lossy();
    match v.trim().parse::<usize>() {
        Ok(n) if n >= min => n,
        _ => panic!("{name}={v:?}: expected a whole number of at least {min}"),
    }
}
