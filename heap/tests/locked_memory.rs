//! A purge the kernel refuses (`madvise(MADV_DONTNEED)` fails with
//! `EINVAL` on locked memory) leaves the memory's contents: the heap must
//! not take it for zeroed.

#![cfg(target_os = "linux")]

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

/// A 200,000-byte span filled with 0xAA and locked (`mlock`, as a program
/// that locks its memory has it) is freed and purged, and `alloc_zeroed`
/// of the same size gets the same span back: it reads zero. The purge
/// cleared the slices' dirty bits although the kernel had refused, and
/// `alloc_zeroed` skipped the clearing. On a thread of its own, so that
/// its heap is fresh.
#[test]
fn a_refused_purge_is_not_taken_for_zeroed_memory() {
    std::thread::spawn(|| {
        let small = Layout::from_size_align(64, 8).unwrap();
        let big = Layout::from_size_align(200_000, 8).unwrap();
        // Valid layouts; each block freed once; the locked range is the
        // span's own, unlocked before the test ends.
        // SAFETY: as just said.
        unsafe {
            // Keeps the segment, so the purge decommits instead of unmapping.
            let keep = LoamAlloc.alloc(small);
            let p = LoamAlloc.alloc(big);
            assert!(!keep.is_null() && !p.is_null());
            p.write_bytes(0xAA, big.size());
            if libc::mlock(p.cast(), big.size()) != 0 {
                // A locked-memory limit under 200 KB: the case cannot be met.
                eprintln!(
                    "mlock refused ({}): case not met",
                    std::io::Error::last_os_error()
                );
                LoamAlloc.dealloc(p, big);
                LoamAlloc.dealloc(keep, small);
                return;
            }
            LoamAlloc.dealloc(p, big);
            loam_heap::release();
            let z = LoamAlloc.alloc_zeroed(big);
            // The premise: the freed span's slices come back (else the
            // memory is fresh, and zero whatever the purge did).
            assert_eq!(z, p, "alloc_zeroed gave another span");
            let bytes = std::slice::from_raw_parts(z, big.size());
            let dirty = bytes.iter().filter(|&&b| b != 0).count();
            assert_eq!(
                dirty,
                0,
                "alloc_zeroed gave {dirty} non-zero bytes (the same span: {})",
                z == p
            );
            libc::munlock(p.cast(), big.size());
            LoamAlloc.dealloc(z, big);
            LoamAlloc.dealloc(keep, small);
        }
    })
    .join()
    .unwrap();
}
