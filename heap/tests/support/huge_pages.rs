//! Reading which memory asks for transparent huge pages, and running a
//! test's report in a child process: shared by the heap's and the
//! runtime's `huge_pages` tests (the runtime's includes this file). The
//! heap reads `LOAM_HUGE_PAGES` once, as its first heap is made, so each
//! setting needs a process of its own.

use std::process::Command;

/// Whether the mapping that holds `addr` has `MADV_HUGEPAGE` set (`hg` in
/// its `VmFlags` in `/proc/self/smaps`).
pub fn advised_huge(addr: usize) -> bool {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            let lo = usize::from_str_radix(lo, 16).expect("a mapping's start");
            let hi = usize::from_str_radix(hi, 16).expect("a mapping's end");
            inside = (lo..hi).contains(&addr);
        } else if inside {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return flags.split_whitespace().any(|f| f == "hg");
            }
        }
    }
    panic!("no mapping in /proc/self/smaps holds {addr:#x}");
}

/// Whether this kernel has transparent huge pages (one without refuses
/// the advice, and no mapping is ever flagged).
pub fn kernel_has_them() -> bool {
    std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists()
}

/// Runs `test` of this test binary again in a child, with `LOAM_HUGE_PAGES`
/// set to `setting` (or unset) and every variable of `env` set, and
/// returns the line it printed after `REPORT `.
pub fn child_report(test: &str, setting: Option<&str>, env: &[&str]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture"])
        .env_remove("LOAM_HUGE_PAGES");
    if let Some(v) = setting {
        cmd.env("LOAM_HUGE_PAGES", v);
    }
    for var in env {
        cmd.env(var, "1");
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("REPORT ")) else {
        panic!("no report from the child: {stdout}");
    };
    line.trim_end().to_string()
}

/// Prints `report` for `child_report`, on a line of its own: libtest may
/// have printed the test's name without a newline before it (one test
/// thread).
pub fn print_report(report: &str) {
    println!("\nREPORT {report}");
}
