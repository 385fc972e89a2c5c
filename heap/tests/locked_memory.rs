//! A purge the kernel refuses (`madvise(MADV_DONTNEED)` fails with
//! `EINVAL` on locked memory, after `mlockall`) leaves the memory's
//! contents: the heap must not take it for zeroed.

#![cfg(target_os = "linux")]

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

/// With every page locked, a 200,000-byte span filled with 0xAA is freed
/// and purged, and `alloc_zeroed` of the same size gets the same slices:
/// they read zero. The purge cleared the slices' dirty bits although the
/// kernel had refused, and `alloc_zeroed` skipped the clearing. In a child
/// process of its own, for the lock.
#[test]
fn a_refused_purge_is_not_taken_for_zeroed_memory() {
    const CHILD: &str = "LOAM_HEAP_MLOCK_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "a_refused_purge_is_not_taken_for_zeroed_memory",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the child failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    std::thread::spawn(|| {
        // SAFETY: flags only.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            eprintln!(
                "mlockall refused here ({}): nothing to check",
                std::io::Error::last_os_error()
            );
            return;
        }
        let small = Layout::from_size_align(64, 8).unwrap();
        let big = Layout::from_size_align(200_000, 8).unwrap();
        // SAFETY: valid layouts; each block freed once.
        unsafe {
            // Keeps the segment, so the purge decommits instead of unmapping.
            let keep = LoamAlloc.alloc(small);
            let p = LoamAlloc.alloc(big);
            p.write_bytes(0xAA, big.size());
            LoamAlloc.dealloc(p, big);
            loam_heap::release();
            let z = LoamAlloc.alloc_zeroed(big);
            let bytes = std::slice::from_raw_parts(z, big.size());
            let dirty = bytes.iter().filter(|&&b| b != 0).count();
            assert_eq!(
                dirty,
                0,
                "alloc_zeroed gave {dirty} non-zero bytes (same span: {})",
                z == p
            );
            LoamAlloc.dealloc(z, big);
            LoamAlloc.dealloc(keep, small);
        }
    })
    .join()
    .unwrap();
}
