//! A runtime asks for transparent huge pages for its heap's segments as it
//! is built (`loam_heap::prefer_huge_pages`), so that its small objects are
//! on 2 MiB pages, unless `LOAM_HUGE_PAGES=0`. Checked in a child process
//! per setting (the heap reads the environment once), by the `hg` flag in
//! `/proc/self/smaps`'s `VmFlags` of the mapping that holds an object.

#[path = "../../heap/tests/support/huge_pages.rs"]
mod huge_pages;

use huge_pages::{advised_huge, child_report, kernel_has_them, print_report};
use loam_heap::LoamAlloc;
use loam_runtime::{Gc, Runtime};
use std::alloc::{GlobalAlloc, Layout};

/// In the child: builds a runtime, makes a small object and reports
/// whether its mapping asks for huge pages.
fn report() {
    // First a runtime over another allocator: it asks for nothing, so a
    // block of loam's heap made after it (on a thread of its own, whose
    // segment no later block shares) is on 4 KiB pages.
    let other = Runtime::builder()
        .gc_threads(1)
        .ignore_env()
        .global_alloc(std::alloc::System)
        .build();
    drop(other);
    // The thread keeps its segment until the end (an exited thread's
    // free segments go to the next heap that needs one, the mutator's).
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let layout = Layout::new::<[u64; 8]>();
        // SAFETY: a non-zero size; freed once with its layout below, and
        // only its address read before.
        unsafe {
            let p = LoamAlloc.alloc(layout);
            assert!(!p.is_null());
            held_tx.send(advised_huge(p as usize + 32)).unwrap();
            let _ = done_rx.recv();
            LoamAlloc.dealloc(p, layout);
        }
    });
    let before_huge = held_rx.recv().unwrap();
    let rt = Runtime::builder().gc_threads(1).ignore_env().build();
    let mut m = rt.attach();
    let huge = m.mutate(|mc| {
        let x: Gc<'_, u64> = mc.alloc(7);
        advised_huge(&*x as *const u64 as usize)
    });
    drop(done_tx);
    holder.join().unwrap();
    print_report(&format!("before={before_huge} small_object={huge}"));
}

fn child(setting: Option<&str>) -> String {
    child_report(
        "a_runtimes_objects_are_on_huge_pages_unless_told_not",
        setting,
        &["LOAM_RT_HUGE_PAGES_TEST_CHILD"],
    )
}

#[test]
fn a_runtimes_objects_are_on_huge_pages_unless_told_not() {
    if std::env::var_os("LOAM_RT_HUGE_PAGES_TEST_CHILD").is_some() {
        report();
        return;
    }
    if !kernel_has_them() {
        eprintln!("skipped: this kernel has no transparent huge pages (/sys/kernel/mm/transparent_hugepage)");
        return;
    }
    assert_eq!(child(None), "before=false small_object=true", "the default");
    assert_eq!(
        child(Some("1")),
        "before=true small_object=true",
        "LOAM_HUGE_PAGES=1"
    );
    assert_eq!(
        child(Some("0")),
        "before=false small_object=false",
        "LOAM_HUGE_PAGES=0"
    );
}
