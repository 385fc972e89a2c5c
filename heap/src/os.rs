//! The operating system beneath the heap: aligned mappings, decommit, and a
//! monotonic millisecond clock. Every call here is a slow path.

use std::ptr;

/// Maps `size` bytes aligned to `align` (a power of two, at least the OS page),
/// zero-filled and read-write. Returns null when the OS refuses.
///
/// With `backed`, the mapping is charged to the kernel's commit accounting
/// like `malloc`'s, so a request the machine cannot back (64 GiB on a
/// 24 GiB machine under the default heuristic overcommit) is refused here,
/// as a null the program can handle, instead of succeeding and ending in an
/// OOM kill when touched. Huge blocks, one allocation each, are mapped so;
/// normal segments (4 MiB, reused many times) and heap records are
/// reserved without (`MAP_NORESERVE`).
pub(crate) fn map_aligned(size: usize, align: usize, backed: bool) -> *mut u8 {
    map_aligned_at(size, align, 0, backed)
}

/// As [`map_aligned`], but it is `base + offset` that is aligned to `align`
/// (`offset < size`, a multiple of the OS page): room for a header just
/// before an aligned block (`aligned.rs`).
pub(crate) fn map_aligned_at(size: usize, align: usize, offset: usize, backed: bool) -> *mut u8 {
    debug_assert!(align.is_power_of_two() && size % 4096 == 0);
    debug_assert!(offset < size.max(1) && offset % 4096 == 0);
    let Some(over) = size.checked_add(align) else {
        return ptr::null_mut();
    };
    // A backed mapping is reserved inaccessible first and made writable
    // once trimmed: the kernel charges a private mapping to its commit
    // accounting when it becomes writable, so only the part kept is
    // charged, not the `align` bytes of room (a page aligned to 32 GiB
    // would otherwise be refused on a 24 GiB machine).
    let (prot, flags) = if backed {
        (libc::PROT_NONE, 0)
    } else {
        (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_NORESERVE)
    };
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choosing touches no existing memory.
    let raw = unsafe {
        libc::mmap(
            ptr::null_mut(),
            over,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return ptr::null_mut();
    }
    let start = raw as usize;
    // The first `base` at or past `start` with `base + offset` aligned:
    // `over` leaves `align` bytes of room for it.
    let aligned = ((start + offset + align - 1) & !(align - 1)) - offset;
    let head = aligned - start;
    let tail = over - head - size;
    // SAFETY: both ranges lie inside the mapping just made and outside the
    // aligned part we keep; nothing else refers to them.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((aligned + size) as *mut libc::c_void, tail);
        }
    }
    if backed {
        // SAFETY: the part we kept of our fresh mapping.
        let rc = unsafe {
            libc::mprotect(aligned as *mut libc::c_void, size, libc::PROT_READ | libc::PROT_WRITE)
        };
        if rc != 0 {
            // Refused by the commit accounting: more than the machine can
            // back. SAFETY: our mapping, which nothing refers to yet.
            unsafe { libc::munmap(aligned as *mut libc::c_void, size) };
            return ptr::null_mut();
        }
    }
    aligned as *mut u8
}

/// Unmaps a region made by [`map_aligned`].
///
/// The kernel may refuse (`ENOMEM`: unmapping part of a larger mapping
/// splits it, past `vm.max_map_count` mappings); the range then stays
/// mapped, nothing refers to it, and its memory is given back instead
/// (`decommit`): the address space leaks, the memory does not. Counted in
/// `stats().unmaps_refused` and said once on stderr. (Unchecked, the
/// resident pages leaked for good while the statistics said they were
/// gone.)
///
/// # Safety
/// `p..p+size` is a live mapping from [`map_aligned`] and nothing refers to it
/// any more.
pub(crate) unsafe fn unmap(p: *mut u8, size: usize) {
    // SAFETY: the caller guarantees the range is ours and dead.
    if unsafe { libc::munmap(p.cast(), size) } == 0 {
        return;
    }
    // Still mapped and dead: dropping its contents is all that is left.
    // SAFETY: as just said.
    let _ = unsafe { decommit(p, size) };
    unmap_refused();
}

#[cold]
fn unmap_refused() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    crate::options::refused(
        &crate::stats::COUNTERS.unmaps_refused,
        &SAID,
        b"loam-heap: the kernel refused to unmap memory (vm.max_map_count?): its pages \
          are given back where the kernel lets them go, its address space stays \
          (stats().unmaps_refused counts them)\n",
    );
}

/// Gives the physical memory behind `p..p+size` back to the OS; the range stays
/// mapped and reads as zero on next touch (private anonymous mappings).
/// False if the kernel refused: the range keeps its contents (`EINVAL` on
/// locked memory, after `mlockall`; a seccomp filter that denies
/// `madvise`), and must not be taken for zeroed.
///
/// # Safety
/// The range lies in a live mapping of ours and holds no live data.
#[must_use]
pub(crate) unsafe fn decommit(p: *mut u8, size: usize) -> bool {
    // The caller guarantees the range is ours and holds nothing live;
    // MADV_DONTNEED on private anonymous memory only drops its contents.
    // SAFETY: as just said.
    unsafe { libc::madvise(p.cast(), size, libc::MADV_DONTNEED) == 0 }
}

/// Makes `p..p+size` inaccessible (`guard`) or read-write again. Returns
/// false if the kernel refused (with `ENOMEM` once a process has
/// `vm.max_map_count` mappings: each guard splits its mapping in two).
///
/// # Safety
/// The range lies in a live mapping of ours, and with `guard` holds
/// nothing anyone will touch until it is made read-write again.
pub(crate) unsafe fn protect(p: *mut u8, size: usize, guard: bool) -> bool {
    let prot = if guard {
        libc::PROT_NONE
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    // SAFETY: the caller guarantees the range is ours and, for a guard,
    // untouched while inaccessible; mprotect changes only its permissions.
    unsafe { libc::mprotect(p.cast(), size, prot) == 0 }
}

/// Asks for transparent huge pages behind `p..p+size` (a hint; ignored where
/// the kernel does not support it).
///
/// # Safety
/// The range lies in a live mapping of ours.
pub(crate) unsafe fn advise_huge(p: *mut u8, size: usize) {
    // SAFETY: the caller guarantees the range is ours; MADV_HUGEPAGE only
    // changes how the kernel backs it.
    unsafe { libc::madvise(p.cast(), size, libc::MADV_HUGEPAGE) };
}

/// Takes back `advise_huge` for `p..p+size` (`MADV_NOHUGEPAGE`; pages
/// already huge stay so until they are freed).
///
/// # Safety
/// The range lies in a live mapping of ours.
pub(crate) unsafe fn advise_no_huge(p: *mut u8, size: usize) {
    // SAFETY: the caller guarantees the range is ours; MADV_NOHUGEPAGE
    // only changes how the kernel backs it.
    unsafe { libc::madvise(p.cast(), size, libc::MADV_NOHUGEPAGE) };
}

/// The size of a transparent huge page on x86-64 and most AArch64 kernels.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Asks for transparent huge pages behind the whole `HUGE_PAGE` units of
/// `p..p+size` (none if it holds no whole one): a block's, so that what
/// shares a unit with it (a segment header, an alignment's padding) is not
/// made resident 2 MiB at a time.
///
/// # Safety
/// The range lies in a live mapping of ours.
pub(crate) unsafe fn advise_huge_inside(p: *mut u8, size: usize) {
    let start = (p as usize).next_multiple_of(HUGE_PAGE);
    let end = (p as usize + size) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: a part of the caller's range.
        unsafe { advise_huge(start as *mut u8, end - start) };
    }
}

/// Milliseconds on the monotonic clock (vDSO, no syscall, no allocation).
pub(crate) fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// The OS page size (4 KiB on the machines we target; checked as the
/// heap's settings are first read, `options::init`).
pub(crate) const OS_PAGE: usize = 4096;
