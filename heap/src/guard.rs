//! Guard pages: with `LOAM_GUARD_PAGES` on (the default with the `secure`
//! feature), the last OS page of every page and span is made inaccessible,
//! so a write that runs off the end of a page's last block, or of a large
//! or huge block, stops the program with `SIGSEGV` at the faulting store
//! instead of corrupting the next page (mimalloc's secure mode does the
//! same). A page's blocks end before its guard: a page of a size class
//! holds `(slices × 64 KiB − 4 KiB) / size` blocks, a large span is one OS
//! page longer than its block needs, and a huge segment's mapping ends in
//! its guard.
//!
//! A segment remembers which slices end in a guard (`Segment::guarded`),
//! so a page set up again on the slices of an earlier one of the same
//! shape (the common case: pages come and go in the same classes) makes no
//! system call; only a span laid over another's guard unprotects it. Free
//! slices keep their guards; decommitting them is unaffected.
//!
//! Costs and limits: a system call when a page's geometry changes, and one
//! more kernel mapping per guard (Linux refuses more than
//! `vm.max_map_count`, 65,530 by default, about 2 GiB of 64 KiB pages). When
//! the kernel refuses a guard, the page goes unguarded (its blocks still
//! end before where the guard would be), never a failed allocation; if it
//! refuses to remove one inside a span being set up (`open`: out of memory
//! to merge mappings), that allocation fails (null) or a growth in place
//! moves instead, never the process. Spans of alignments above 2 MiB
//! (`aligned.rs`) have no guard.

use crate::os;
use crate::segment::{Segment, SLICE_SIZE};

/// Bytes at the end of every page and span that no block uses: one OS page
/// with guards on, else none.
#[inline]
pub(crate) fn tail() -> usize {
    if crate::options::guard_pages() {
        os::OS_PAGE
    } else {
        0
    }
}

/// Sets the guard of the span of slices `i..i + n` of our normal segment
/// `seg`: the last OS page of slice `i + n - 1` inaccessible, and that of
/// every other slice of the span (a guard of an earlier, shorter span)
/// read-write again. Nothing when guards are off.
///
/// # Safety
/// `seg` and the span's slices are ours, and no block of the span lies in
/// the last OS page of its last slice (the span was set up with `tail()`
/// bytes to spare).
pub(crate) unsafe fn place(seg: *mut Segment, i: usize, n: usize) {
    if tail() == 0 {
        return;
    }
    let last = i + n - 1;
    let base = seg as usize;
    let page_end = move |k: usize| base + (k + 1) * SLICE_SIZE - os::OS_PAGE;
    // SAFETY: `seg` is ours (caller): `guarded` is the owner's to write.
    let guarded = unsafe { &mut (*seg).guarded };
    // The caller opened the inner guards first (`open`).
    debug_assert_eq!(*guarded & (((1u64 << n) - 1) << i) & !(1u64 << last), 0);
    if *guarded & (1u64 << last) == 0 {
        // SAFETY: the span's tail, which no block uses (caller).
        if unsafe { os::protect(page_end(last) as *mut u8, os::OS_PAGE, true) } {
            *guarded |= 1u64 << last;
        } else {
            refused();
        }
    }
}

/// Makes the guards inside the span of slices `i..i + n` of our normal
/// segment `seg` read-write again (every slice's but the last's): what a
/// span laid over shorter ones' guards needs before it is set up. False if
/// the kernel refused one (`mprotect`, for want of memory to split or merge
/// its mappings): the span must not be set up, and the allocation fails
/// (null) or a growth in place gives way to a copy, instead of the process
/// stopping. The guards opened before the refusal stay open, and say so
/// (`Segment::guarded`). True at once with guards off.
///
/// # Safety
/// `seg` and the slices are ours; none of the slices holds a block (they
/// are free, or the span's own).
pub(crate) unsafe fn open(seg: *mut Segment, i: usize, n: usize) -> bool {
    if tail() == 0 {
        return true;
    }
    let last = i + n - 1;
    let base = seg as usize;
    let page_end = move |k: usize| base + (k + 1) * SLICE_SIZE - os::OS_PAGE;
    // SAFETY: `seg` is ours (caller): `guarded` is the owner's to write.
    let guarded = unsafe { &mut (*seg).guarded };
    let mut rest = (*guarded) & (((1u64 << n) - 1) << i) & !(1u64 << last);
    // Highest first: a growing span's own end guard (its lowest) goes
    // last, so a refusal leaves the live block guarded.
    while rest != 0 {
        let k = 63 - rest.leading_zeros() as usize;
        rest &= !(1u64 << k);
        // The last OS page of slice `k`, ours (caller), inaccessible
        // until now, so holding nothing.
        // SAFETY: as just said.
        if !unsafe { os::protect(page_end(k) as *mut u8, os::OS_PAGE, false) } {
            return false;
        }
        *guarded &= !(1u64 << k);
    }
    true
}

/// The kernel refused a guard (past `vm.max_map_count`): the page or span
/// goes unguarded, counted in `stats().unguarded` and said once on stderr,
/// since a safety setting should not fall away unseen.
#[cold]
fn refused() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    crate::options::refused(
        &crate::stats::COUNTERS.unguarded,
        &SAID,
        b"loam-heap: the kernel refused a guard page (vm.max_map_count?): \
          pages and spans past it go unguarded (stats().unguarded counts them)\n",
    );
}

/// Makes the last OS page of a fresh huge mapping `base..base + size` its
/// guard (a cached mapping keeps the guard it was made with).
///
/// # Safety
/// The mapping is ours and no block will use its last OS page.
pub(crate) unsafe fn place_huge(base: *mut u8, size: usize) {
    // SAFETY: the caller's; a refusal leaves it unguarded, harmlessly.
    if tail() != 0 && !unsafe { os::protect(base.add(size - os::OS_PAGE), os::OS_PAGE, true) } {
        refused();
    }
}
