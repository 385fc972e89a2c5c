//! [`LoamAlloc`]: the heap as a Rust `GlobalAlloc`.

use crate::alloc;
use crate::free;
use crate::segment::page_of;
use std::alloc::{GlobalAlloc, Layout};

/// loam's scalable heap as a [`GlobalAlloc`].
///
/// A unit struct: every instance shares the one process-wide heap (thread
/// heaps, segments, remote queues). Use it as the program's allocator, or call
/// it directly through `GlobalAlloc` on a static instance. Out of memory
/// returns null; it never panics. Alignments of 4 MiB and up are served
/// too, each block in a mapping of its own.
///
/// # Examples
/// ```
/// #[global_allocator]
/// static GLOBAL: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
///
/// let v: Vec<u64> = (0..1000).collect();
/// assert_eq!(v.iter().sum::<u64>(), 499_500);
/// ```
///
/// Calling it directly:
/// ```
/// use std::alloc::{GlobalAlloc, Layout};
/// let layout = Layout::from_size_align(24, 8).unwrap();
/// // SAFETY: a non-zero-sized layout; the block is written within its size
/// // and freed once with the same layout.
/// unsafe {
///     let p = loam_heap::LoamAlloc.alloc(layout);
///     assert!(!p.is_null());
///     p.write_bytes(7, 24);
///     loam_heap::LoamAlloc.dealloc(p, layout);
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct LoamAlloc;

// SAFETY: `alloc` returns null or a block of at least `layout.size()` bytes
// aligned to `layout.align()` that no other live allocation overlaps (size
// classes and spans hand each block out once until it is freed); `dealloc`
// takes only such blocks back; `realloc` preserves the contents up to the
// smaller size. None of them unwinds.
unsafe impl GlobalAlloc for LoamAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        alloc::alloc(layout.size(), layout.align())
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: GlobalAlloc's contract: `ptr` came from this allocator and
        // is live.
        unsafe { free::free(ptr) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = alloc::alloc(layout.size(), layout.align());
        if !p.is_null() {
            // SAFETY: `p` is a fresh block of ours; its page cannot change
            // while the block is live. A one-block span fresh from the OS
            // (or decommitted) is already zero.
            unsafe {
                // A span of its own mapping (`aligned.rs`) is fresh from
                // the OS, so zero.
                if crate::aligned::is_aligned_block(p) {
                    return p;
                }
                let page = page_of(p);
                if !((*page).capacity() == 1 && (*page).is_zero) {
                    p.write_bytes(0, layout.size());
                }
            }
        }
        p
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc's contract: `ptr` is live with `layout`.
        unsafe { alloc::realloc(ptr, layout.size(), layout.align(), new_size) }
    }
}

/// The size of the block a request of `size` bytes at alignment `align`
/// gets, without allocating: its size class, equal to [`usable_size`] of
/// the block `alloc` returns for the same layout; or `size` itself for a
/// span (mimalloc's `mi_good_size`), whose block may be larger (a large
/// span is whole 64 KiB slices, 262,144 bytes for 200,000; `usable_size`
/// says).
///
/// # Examples
/// ```
/// assert_eq!(loam_heap::good_size(20, 8), 24);
/// assert_eq!(loam_heap::good_size(1 << 20, 8), 1 << 20);
/// ```
#[inline]
pub fn good_size(size: usize, align: usize) -> usize {
    use crate::size_class::{class_for_aligned, class_of, CLASS_SIZE, MIN_BLOCK, SMALL_MAX};
    if size <= SMALL_MAX && align <= MIN_BLOCK {
        return CLASS_SIZE[class_of(size)] as usize;
    }
    if align > crate::aligned::MAX_SEGMENT_ALIGN {
        return crate::aligned::good_size(size);
    }
    match class_for_aligned(size, align) {
        Some(c) => CLASS_SIZE[c] as usize,
        None => size,
    }
}

/// The usable size of block `p`: at least what was asked for, and what
/// `realloc` can grow to in place.
///
/// # Safety
/// `p` is a live block from [`LoamAlloc`].
///
/// # Examples
/// ```
/// use std::alloc::{GlobalAlloc, Layout};
/// let layout = Layout::from_size_align(20, 8).unwrap();
/// // SAFETY: `p` is live from `alloc` until the `dealloc` with its layout.
/// unsafe {
///     let p = loam_heap::LoamAlloc.alloc(layout);
///     assert_eq!(loam_heap::usable_size(p), 24); // the 24-byte class
///     loam_heap::LoamAlloc.dealloc(p, layout);
/// }
/// ```
pub unsafe fn usable_size(p: *const u8) -> usize {
    if crate::aligned::is_aligned_block(p) {
        // SAFETY: `p` is live (caller): one of `aligned.rs`'s spans.
        return unsafe { crate::aligned::usable_size(p) };
    }
    // SAFETY: `p` is live (caller), so its page is.
    unsafe { (*page_of(p)).block_size() }
}
