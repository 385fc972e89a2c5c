//! The heap's environment variables, read once as the first heap is made:
//! a bad value is ignored with a warning that names the variable and shows
//! the value (in a child process: the environment is the process's, and
//! read once).

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::process::Command;

#[test]
fn bad_values_are_ignored_with_a_warning_that_shows_them() {
    if std::env::var_os("LOAM_ENV_TEST_CHILD").is_some() {
        let layout = Layout::from_size_align(64, 8).unwrap();
        // SAFETY: non-zero size; freed once below.
        let p = unsafe { LoamAlloc.alloc(layout) };
        assert!(!p.is_null());
        // SAFETY: as just said.
        unsafe { LoamAlloc.dealloc(p, layout) };
        // The bad delay left the default.
        assert_eq!(
            loam_heap::purge_delay(),
            std::time::Duration::from_millis(10)
        );
        return;
    }
    let long = "9".repeat(100);
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "bad_values_are_ignored_with_a_warning_that_shows_them",
            "--nocapture",
        ])
        .env("LOAM_ENV_TEST_CHILD", "1")
        .env("LOAM_PURGE_DELAY_MS", "ten")
        .env("LOAM_HUGE_PAGES", "maybe")
        .env("LOAM_GUARD_PAGES", format!("x{long}"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child failed: {stderr}");
    for want in [
        "loam-heap: ignoring LOAM_PURGE_DELAY_MS=\"ten\": not a number of milliseconds\n",
        "loam-heap: ignoring LOAM_HUGE_PAGES=\"maybe\": expected 1/0, true/false, on/off or yes/no\n",
        &format!("loam-heap: ignoring LOAM_GUARD_PAGES=\"x{}...\": expected", &long[..63]),
    ] {
        assert!(stderr.contains(want), "stderr says {stderr:?}, wanted {want:?}");
    }
}
