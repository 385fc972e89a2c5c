//! Blocks aligned beyond what a segment can place (4 MiB and up): each in a
//! mapping of its own, with a one-page header just before the block, on a
//! list under one lock.
//!
//! # Why not a huge segment
//! A block's segment is found by masking its address to 4 MiB
//! (`segment::segment_of`), and a segment's header fills its first slices,
//! so no block of a segment starts at a 4 MiB boundary. A block aligned to
//! 4 MiB or more always does: it cannot share a segment with its header.
//! The same fact tells the two apart on `free` for one test of the low bits
//! (`is_aligned_block`): an address on a 4 MiB boundary is one of these
//! spans or no block of ours at all.
//!
//! # Layout and ownership
//! ```text
//! map_base                 block (aligned to `align`)
//! | header page (`Span`)   | block: `size` rounded up to the OS page ... |
//! ```
//! Every span is on [`SPANS`]' list while it is live; `free` finds it
//! there by address before it reads the header, so a pointer that is no
//! live span (never allocated, or freed already) stops the process with a
//! `heap:` message in every build, never a read of memory that is not
//! ours (unless the address was mapped again as a new span meanwhile:
//! then a second free frees that one, as with any allocator that reuses
//! addresses). Spans are owned by no thread: any thread frees one directly
//! (an `munmap`), and none is cached: at 4 MiB and up a request is rare and
//! the mapping's cost is the system call, not the page faults a cache saves.
//!
//! # Invariants
//! - A span on the list is mapped, `map_base..map_base + map_size`, and its
//!   header is `block - OS_PAGE`, both within the mapping.
//! - `size` is a multiple of the OS page, at least the request.
//! - `count` and `bytes` are the number of spans on the list and the sum of
//!   their `map_size`s.
//!
//! Mapped without `MAP_NORESERVE` (`os::map_aligned_at`), as huge segments
//! are: a request the machine cannot back is a null, not a later OOM kill.

use crate::os;
use crate::segment::SEGMENT_SIZE;
use crate::spin::SpinLock;
use std::ptr;

/// The largest alignment a segment places; larger ones come here.
pub(crate) const MAX_SEGMENT_ALIGN: usize = SEGMENT_SIZE / 2;

/// A span's header, in the page before its block.
struct Span {
    map_base: usize,
    map_size: usize,
    /// Usable bytes from the block on.
    size: usize,
    prev: *mut Span,
    next: *mut Span,
}

/// The live spans: a doubly linked list through their headers.
pub(crate) struct Spans {
    head: *mut Span,
    count: usize,
    bytes: usize,
}

// SAFETY: the headers the list links are only read or written under the
// lock, and each stays mapped until it is unlinked under it.
unsafe impl Send for Spans {}

/// The live spans. A leaf lock: nothing else is taken while it is held
/// (`fork.rs` takes it last).
pub(crate) static SPANS: SpinLock<Spans> = SpinLock::new(Spans {
    head: ptr::null_mut(),
    count: 0,
    bytes: 0,
});

/// Whether `p` can only be a span of this file (module docs): no block of
/// a segment starts at a 4 MiB boundary.
#[inline(always)]
pub(crate) fn is_aligned_block(p: *const u8) -> bool {
    p as usize & (SEGMENT_SIZE - 1) == 0
}

/// The header of span `p`.
fn header_of(p: *mut u8) -> *mut Span {
    p.wrapping_sub(os::OS_PAGE).cast()
}

/// Allocates `size` bytes aligned to `align` (above
/// [`MAX_SEGMENT_ALIGN`]) in a mapping of their own; null when the OS
/// refuses or the sizes overflow.
#[cold]
#[inline(never)]
pub(crate) fn alloc(size: usize, align: usize) -> *mut u8 {
    debug_assert!(align > MAX_SEGMENT_ALIGN && align.is_power_of_two());
    // Possibly the process's first allocation: the page size is checked.
    crate::options::init();
    let Some(size) = size.max(1).checked_next_multiple_of(os::OS_PAGE) else {
        return ptr::null_mut();
    };
    let Some(map_size) = size.checked_add(os::OS_PAGE) else {
        return ptr::null_mut();
    };
    let base = os::map_aligned_at(map_size, align, os::OS_PAGE, true);
    if base.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: `base + OS_PAGE` is inside the fresh mapping (`map_size`
    // exceeds it by at least a page).
    let block = unsafe { base.add(os::OS_PAGE) };
    debug_assert!(block as usize % align == 0);
    if crate::options::huge_pages_for_blocks() {
        // SAFETY: the block part of our fresh mapping.
        unsafe { os::advise_huge_inside(block, size) };
    }
    let span = header_of(block);
    let mut spans = SPANS.lock();
    // SAFETY: the header page is ours, fresh and writable; the list is
    // ours under the lock, and its head is a live header (invariant).
    unsafe {
        span.write(Span {
            map_base: base as usize,
            map_size,
            size,
            prev: ptr::null_mut(),
            next: spans.head,
        });
        if !spans.head.is_null() {
            (*spans.head).prev = span;
        }
    }
    spans.head = span;
    spans.count += 1;
    spans.bytes += map_size;
    block
}

/// Takes span `p` off the list and unmaps it. Stops the process with a
/// `heap:` message if `p` is no live span (never allocated here, or freed
/// already), in every build: this is a slow path, and the check is what
/// keeps it from reading a header that is not there.
///
/// # Safety
/// Nobody uses `p` after this call.
#[cold]
#[inline(never)]
pub(crate) unsafe fn free(p: *mut u8) {
    let span = header_of(p);
    let (base, map_size) = {
        let mut spans = SPANS.lock();
        if !spans.contains(span) {
            drop(spans);
            crate::block::invalid_free(
                p,
                "not a live block of this allocator (never allocated by it, or freed twice)",
            );
        }
        // SAFETY: `span` is on the list, so a live header (invariant);
        // its neighbours too.
        unsafe {
            let Span {
                map_base,
                map_size,
                prev,
                next,
                ..
            } = span.read();
            if prev.is_null() {
                spans.head = next;
            } else {
                (*prev).next = next;
            }
            if !next.is_null() {
                (*next).prev = prev;
            }
            spans.count -= 1;
            spans.bytes -= map_size;
            (map_base, map_size)
        }
    };
    // SAFETY: the span was live and is now off the list, so nothing refers
    // to its mapping any more (the caller's promise for the block).
    unsafe { os::unmap(base as *mut u8, map_size) };
}

/// The usable size of span `p`.
///
/// # Safety
/// `p` is a live span.
pub(crate) unsafe fn usable_size(p: *const u8) -> usize {
    // SAFETY: a live span's header is mapped and written once, at
    // allocation, before the block was handed out.
    unsafe { (*header_of(p.cast_mut())).size }
}

/// What [`alloc`] gives a request of `size` bytes: the size rounded up to
/// the OS page.
pub(crate) fn good_size(size: usize) -> usize {
    // Past the largest multiple of a page no request can be served anyway.
    size.max(1).checked_next_multiple_of(os::OS_PAGE).unwrap_or(usize::MAX)
}

/// Resizes span `p`, keeping `align` (the block's, above
/// [`MAX_SEGMENT_ALIGN`]): in place when the new size fits (the pages
/// past it given back), else into a new span, copying `old_size` bytes at
/// most.
///
/// # Safety
/// `p` is a live span holding at least `old_size` bytes.
pub(crate) unsafe fn realloc(p: *mut u8, old_size: usize, align: usize, new_size: usize) -> *mut u8 {
    // SAFETY: `p` is live (caller).
    let usable = unsafe { usable_size(p) };
    if new_size <= usable {
        let keep = good_size(new_size);
        if keep < usable {
            // SAFETY: `p` is a live span (caller), so on the list: its
            // header is ours to change under the lock (`totals` reads it
            // there), and the pages past `keep` hold nothing the caller
            // still wants (the new size ends before them).
            unsafe {
                let span = header_of(p);
                let mut spans = SPANS.lock();
                (*span).size = keep;
                (*span).map_size -= usable - keep;
                spans.bytes -= usable - keep;
                drop(spans);
                os::unmap(p.add(keep), usable - keep);
            }
        }
        return p;
    }
    let q = alloc(new_size, align);
    if !q.is_null() {
        // SAFETY: both are live, distinct, and hold this many bytes.
        unsafe {
            ptr::copy_nonoverlapping(p, q, old_size.min(new_size));
            free(p);
        }
    }
    q
}

impl Spans {
    fn contains(&self, span: *mut Span) -> bool {
        let mut s = self.head;
        while !s.is_null() {
            if s == span {
                return true;
            }
            // SAFETY: on the list, so a live header (invariant).
            s = unsafe { (*s).next };
        }
        false
    }
}

/// Spans live and the bytes they map, for [`crate::stats`]: (count, mapped
/// bytes, usable bytes).
pub(crate) fn totals() -> (usize, usize, usize) {
    let spans = SPANS.lock();
    let mut usable = 0;
    let mut s = spans.head;
    while !s.is_null() {
        // SAFETY: on the list, so a live header (invariant).
        unsafe {
            usable += (*s).size;
            s = (*s).next;
        }
    }
    (spans.count, spans.bytes, usable)
}
