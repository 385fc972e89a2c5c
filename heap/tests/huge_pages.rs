//! Which memory asks for transparent huge pages (`MADV_HUGEPAGE`, seen as
//! `hg` in the mapping's `VmFlags` in `/proc/self/smaps`): by default the
//! whole 2 MiB units inside a huge block, and not a segment of small
//! pages; `LOAM_HUGE_PAGES=1` every segment, `0` nothing; after
//! `prefer_huge_pages`, every segment unless `LOAM_HUGE_PAGES` is `0`. Each setting in
//! a child process: the environment is read once, as the first heap is
//! made.

#[path = "support/huge_pages.rs"]
mod huge_pages;

use huge_pages::{advised_huge, child_report, kernel_has_them, print_report};
use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

/// In the child: allocates a small block, a huge one, a small one aligned
/// to 2 MiB (a huge segment of its own, mostly padding), an aligned span
/// (8 MiB at 4 MiB) and a small one (4 KiB at 4 MiB), then the padded
/// block again in a cached mapping, and prints which of them lie in
/// advised memory (each halfway in).
fn report() {
    if std::env::var_os("LOAM_HUGE_PAGES_TEST_PREFER").is_some() {
        loam_heap::prefer_huge_pages();
    }
    let layouts = [
        ("small", Layout::from_size_align(64, 8).unwrap()),
        ("huge", Layout::from_size_align(16 << 20, 8).unwrap()),
        (
            "padded",
            Layout::from_size_align(100 << 10, 2 << 20).unwrap(),
        ),
        (
            "aligned",
            Layout::from_size_align(8 << 20, 4 << 20).unwrap(),
        ),
        (
            "aligned_small",
            Layout::from_size_align(4 << 10, 4 << 20).unwrap(),
        ),
    ];
    let mut line = Vec::new();
    for (name, layout) in layouts {
        // SAFETY: non-zero sizes; each block freed once with its layout,
        // and only its address used before.
        unsafe {
            let p = LoamAlloc.alloc(layout);
            assert!(!p.is_null(), "{name}: no memory");
            line.push(format!(
                "{name}={}",
                advised_huge(p.add(layout.size() / 2) as usize)
            ));
            LoamAlloc.dealloc(p, layout);
        }
    }
    // A runtime built now, with the padded block's mapping cached under
    // the default (advised nowhere): its reuse is advised whole.
    if std::env::var_os("LOAM_HUGE_PAGES_TEST_PREFER_LATE").is_some() {
        loam_heap::prefer_huge_pages();
        let padded = layouts[2].1;
        // SAFETY: as above.
        unsafe {
            let p = LoamAlloc.alloc(padded);
            assert!(!p.is_null());
            line.push(format!(
                "padded_late={}",
                advised_huge(p.add(padded.size() / 2) as usize)
            ));
            LoamAlloc.dealloc(p, padded);
        }
    }
    // A padded block in a cached mapping whose last block, unpadded,
    // had its first unit advised: taken back (kept under
    // `LOAM_HUGE_PAGES=1`, where every segment is advised whole).
    // (`collect` empties the cache first: the padded block's own mapping,
    // cached above, would fit it better.)
    loam_heap::collect();
    loam_heap::set_purge_delay(std::time::Duration::from_secs(60));
    let last = Layout::from_size_align(4_000_000, 8).unwrap();
    let padded = layouts[2].1;
    let base = |p: *mut u8| p as usize & !(loam_heap::SEGMENT_SIZE - 1);
    // SAFETY: as above.
    unsafe {
        let b = LoamAlloc.alloc(last);
        assert!(!b.is_null());
        let seg = base(b);
        LoamAlloc.dealloc(b, last);
        let p = LoamAlloc.alloc(padded);
        assert_eq!(base(p), seg, "the cached mapping was not reused");
        line.push(format!(
            "padded_reused={}",
            advised_huge(p.add(padded.size() / 2) as usize)
        ));
        LoamAlloc.dealloc(p, padded);
    }
    print_report(&line.join(" "));
}

const TEST: &str = "the_default_advises_huge_blocks_only";

/// Runs `report` in a child with `LOAM_HUGE_PAGES` set to `setting` (or
/// unset), after `prefer_huge_pages` if `prefer`, and returns what it
/// printed.
fn child(setting: Option<&str>, prefer: bool) -> String {
    child_with(setting, prefer, false)
}

/// `child`, and `prefer_huge_pages` just before the cached mapping's
/// reuse if `late`.
fn child_with(setting: Option<&str>, prefer: bool, late: bool) -> String {
    let mut env = vec!["LOAM_HUGE_PAGES_TEST_CHILD"];
    if prefer {
        env.push("LOAM_HUGE_PAGES_TEST_PREFER");
    }
    if late {
        env.push("LOAM_HUGE_PAGES_TEST_PREFER_LATE");
    }
    child_report(TEST, setting, &env)
}

#[test]
fn the_default_advises_huge_blocks_only() {
    if std::env::var_os("LOAM_HUGE_PAGES_TEST_CHILD").is_some() {
        report();
        return;
    }
    if !kernel_has_them() {
        eprintln!("skipped: this kernel has no transparent huge pages (/sys/kernel/mm/transparent_hugepage)");
        return;
    }
    // By default only the whole 2 MiB units inside huge blocks: not the
    // padding around a small block aligned to 2 MiB, nor an aligned span
    // of 4 KiB.
    const DEFAULT: &str =
        "small=false huge=true padded=false aligned=true aligned_small=false padded_reused=false";
    // Every segment, whole, with `1` (an aligned span is no segment: its
    // whole units only, as by default).
    const ALL: &str =
        "small=true huge=true padded=true aligned=true aligned_small=false padded_reused=true";
    const NONE: &str =
        "small=false huge=false padded=false aligned=false aligned_small=false padded_reused=false";
    assert_eq!(child(None, false), DEFAULT, "the default");
    assert_eq!(child(Some("1"), false), ALL, "LOAM_HUGE_PAGES=1");
    assert_eq!(child(Some("0"), false), NONE, "LOAM_HUGE_PAGES=0");
    // `prefer_huge_pages` (what a runtime calls as it is built): every
    // segment, unless the environment says otherwise.
    assert_eq!(child(None, true), ALL, "prefer_huge_pages");
    assert_eq!(
        child(Some("0"), true),
        NONE,
        "prefer_huge_pages, LOAM_HUGE_PAGES=0"
    );
    assert_eq!(
        child(Some("1"), true),
        ALL,
        "prefer_huge_pages, LOAM_HUGE_PAGES=1"
    );
    // Asked for after a huge mapping was cached under the default: its
    // reuse is advised whole.
    let late = child_with(None, false, true);
    assert!(
        late.contains("padded_late=true"),
        "prefer_huge_pages after a mapping was cached: {late}"
    );
}
