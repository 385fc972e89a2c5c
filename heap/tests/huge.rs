//! Huge blocks (past the largest size class) go back to a cache of
//! mappings when freed, and the next huge request reuses one: no page
//! fault per page touched again. A reused block is not taken for zeroed,
//! and `collect` gives the cached mappings back to the OS.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};

const MIB: usize = 1 << 20;

/// The tests share the process-wide cache: one at a time, and mappings
/// stay cached for the purge delay, long enough here.
fn hold() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    loam_heap::set_purge_delay(std::time::Duration::from_secs(60));
    g
}

#[test]
fn a_freed_huge_block_is_reused_dirty_and_zeroed_when_asked() {
    let _serial = hold();
    let big = Layout::from_size_align(8 * MIB, 8).unwrap();
    // SAFETY: each block is used within its layout and freed once with it.
    unsafe {
        let a = LoamAlloc.alloc(big);
        assert!(!a.is_null());
        a.write_bytes(0xAB, big.size());
        LoamAlloc.dealloc(a, big);
        // A smaller huge request fits the cached mapping: the same memory,
        // still holding what was written.
        let smaller = Layout::from_size_align(6 * MIB, 8).unwrap();
        let b = LoamAlloc.alloc(smaller);
        assert_eq!(b, a, "the cached mapping is reused");
        assert_eq!(*b.add(MIB), 0xAB, "reused, not fresh");
        LoamAlloc.dealloc(b, smaller);
        // Zeroed memory asked for is zero, cached mapping or not.
        let c = LoamAlloc.alloc_zeroed(smaller);
        assert_eq!(c, a);
        assert!(std::slice::from_raw_parts(c, smaller.size())
            .iter()
            .all(|&x| x == 0));
        LoamAlloc.dealloc(c, smaller);
        // Much smaller requests do not take a mapping twice their size.
        let tiny_huge = Layout::from_size_align(3 * MIB + MIB / 2, 8).unwrap();
        let d = LoamAlloc.alloc(tiny_huge);
        assert_ne!(d, a, "a 3.5 MiB block does not take an 8 MiB mapping");
        LoamAlloc.dealloc(d, tiny_huge);
    }
}

#[test]
fn collect_gives_cached_huge_mappings_back() {
    let _serial = hold();
    let big = Layout::from_size_align(12 * MIB, 8).unwrap();
    // SAFETY: used within its layout and freed once.
    unsafe {
        let a = LoamAlloc.alloc(big);
        a.write_bytes(1, big.size());
        LoamAlloc.dealloc(a, big);
    }
    assert!(
        loam_heap::stats().huge_cached_bytes >= big.size() as u64,
        "the freed mapping is cached"
    );
    let before = loam_heap::stats().segments_unmapped_total;
    loam_heap::collect();
    assert_eq!(loam_heap::stats().huge_cached_bytes, 0);
    assert!(
        loam_heap::stats().segments_unmapped_total > before,
        "collect unmaps the cached mapping"
    );
    // SAFETY: as above.
    unsafe {
        let b = LoamAlloc.alloc_zeroed(big);
        // Fresh from the OS (the cache was emptied): zero without a write,
        // and whatever address the OS gave.
        assert!(std::slice::from_raw_parts(b, big.size())
            .iter()
            .all(|&x| x == 0));
        LoamAlloc.dealloc(b, big);
    }
}

/// A collector frees a cycle's huge arrays together (a list that doubled
/// to 8 MiB a few times frees its 4 and 8 MiB arrays each time): the whole
/// burst stays cached, and the next round of growth reuses every mapping
/// instead of faulting fresh pages in.
#[test]
fn a_burst_of_huge_frees_is_cached_whole() {
    let _serial = hold();
    loam_heap::collect(); // an empty cache to start from
    let sizes = [
        5 * MIB,
        9 * MIB,
        5 * MIB,
        9 * MIB,
        5 * MIB,
        9 * MIB,
        40 * MIB,
        40 * MIB,
    ];
    let layouts: Vec<Layout> = sizes
        .iter()
        .map(|&s| Layout::from_size_align(s, 8).unwrap())
        .collect();
    // SAFETY: each block is used within its layout and freed once with it.
    unsafe {
        let first: Vec<*mut u8> = layouts.iter().map(|&l| LoamAlloc.alloc(l)).collect();
        assert!(first.iter().all(|p| !p.is_null()));
        for (&p, &l) in first.iter().zip(&layouts) {
            LoamAlloc.dealloc(p, l);
        }
        let mut again: Vec<*mut u8> = layouts.iter().map(|&l| LoamAlloc.alloc(l)).collect();
        for (&p, &l) in again.iter().zip(&layouts) {
            LoamAlloc.dealloc(p, l);
        }
        let mut first = first;
        first.sort();
        again.sort();
        assert_eq!(again, first, "every mapping of the burst was reused");
    }
}

/// The RAM and swap of this machine, in bytes.
fn backing() -> u64 {
    // SAFETY: `sysinfo` fills the struct it is given.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a `sysinfo`.
    assert_eq!(unsafe { libc::sysinfo(&mut info) }, 0);
    (info.totalram as u64 + info.totalswap as u64) * u64::from(info.mem_unit)
}

/// Requests the machine cannot back are a null, as from `malloc`, not
/// memory that ends in an OOM kill when touched (under the kernel's
/// default heuristic overcommit; with overcommit set to "always" the
/// kernel grants any mapping, and there is nothing to check).
#[test]
fn a_request_the_machine_cannot_back_is_null() {
    let _one_at_a_time = hold();
    let mode = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    if mode.trim() == "1" {
        eprintln!("overcommit_memory is 1: every mapping is granted; skipped");
        return;
    }
    let heap = LoamAlloc;
    for size in [backing() * 3, 1 << 40, 64 << 40] {
        let layout = Layout::from_size_align(size as usize, 8).unwrap();
        // SAFETY: a non-zero size.
        let p = unsafe { heap.alloc(layout) };
        assert!(
            p.is_null(),
            "{size} bytes on a machine with {} were granted",
            backing()
        );
    }
    // The heap carries on.
    let layout = Layout::from_size_align(64 << 20, 8).unwrap();
    // SAFETY: as above; freed with its layout.
    unsafe {
        let p = heap.alloc(layout);
        assert!(!p.is_null());
        heap.dealloc(p, layout);
    }
}
