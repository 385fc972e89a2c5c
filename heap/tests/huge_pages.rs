//! Which mappings ask for transparent huge pages (`MADV_HUGEPAGE`, seen as
//! `hg` in the mapping's `VmFlags` in `/proc/self/smaps`): by default the
//! segment of a huge block and not a segment of small pages;
//! `LOAM_HUGE_PAGES=1` every segment, `0` none. Each setting in a child
//! process: the environment is read once, as the first heap is made.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::process::Command;

/// Whether the mapping that holds `p` has `MADV_HUGEPAGE` set.
fn advised_huge(p: *const u8) -> bool {
    let addr = p as usize;
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
    panic!("no mapping in /proc/self/smaps holds {p:?}");
}

/// In the child: allocates a small block and a huge one and prints which
/// of their mappings are advised.
fn report() {
    let small = Layout::from_size_align(64, 8).unwrap();
    let huge = Layout::from_size_align(16 << 20, 8).unwrap();
    // SAFETY: non-zero sizes; each freed once with its layout below.
    unsafe {
        let (s, h) = (LoamAlloc.alloc(small), LoamAlloc.alloc(huge));
        assert!(!s.is_null() && !h.is_null());
        println!("small={} huge={}", advised_huge(s), advised_huge(h));
        LoamAlloc.dealloc(s, small);
        LoamAlloc.dealloc(h, huge);
    }
}

/// Runs `report` in a child with `LOAM_HUGE_PAGES` set to `setting` (or
/// unset) and returns what it printed.
fn child(setting: Option<&str>) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "the_default_advises_huge_blocks_only",
        "--nocapture",
    ])
    .env("LOAM_HUGE_PAGES_TEST_CHILD", "1")
    .env_remove("LOAM_HUGE_PAGES");
    if let Some(v) = setting {
        cmd.env("LOAM_HUGE_PAGES", v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("small="))
        .expect("the child's report");
    line.to_string()
}

#[test]
fn the_default_advises_huge_blocks_only() {
    if std::env::var_os("LOAM_HUGE_PAGES_TEST_CHILD").is_some() {
        report();
        return;
    }
    // A kernel built without transparent huge pages refuses the advice,
    // and no mapping is ever flagged.
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        eprintln!("skipped: this kernel has no transparent huge pages");
        return;
    }
    assert_eq!(child(None), "small=false huge=true", "the default");
    assert_eq!(
        child(Some("1")),
        "small=true huge=true",
        "LOAM_HUGE_PAGES=1"
    );
    assert_eq!(
        child(Some("0")),
        "small=false huge=false",
        "LOAM_HUGE_PAGES=0"
    );
}
