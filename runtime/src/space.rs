//! The object space: where a runtime's objects live and how the collector
//! finds each one and its mark. Everything the collector asks of memory
//! goes through [`Space`]: allocation (`mutator.rs`, `array.rs`), marking
//! and mark queries (`mark.rs`, the barriers, weak references), the
//! pause's snapshot and the sweep (`cycle.rs`), and the finalizer's
//! frees; pacing, the heap limit and the stats count the bytes each space
//! charges per object.
//!
//! Two spaces:
//! - [`Space::Pages`], loam's own (the default): objects in `loam-heap`'s
//!   size-class pages, marks and allocated bits in the pages' side
//!   bitmaps, dead objects handed back to their owning thread as page runs
//!   (`sweep.rs`). Per object: the block's size-class rounding (at most
//!   12.5% for small objects), two bits of bitmap, nothing in the object.
//! - [`Space::Alloc`], any `GlobalAlloc` (`alloc_space.rs`): objects
//!   allocated by the mutator through that allocator and freed by the GC
//!   threads' sweep through it, the seeds' pattern exactly. Per object: a
//!   16-byte prefix (its allocation size, and its mark as a cycle number)
//!   plus one word in its mutator's registry chunk, and the allocator's own
//!   overhead.
//!
//! A runtime has one space for its life; the choice is
//! [`RuntimeBuilder::global_alloc`](crate::RuntimeBuilder::global_alloc).

use crate::alloc_space::AllocSpace;

/// A runtime's object space (module docs).
pub(crate) enum Space {
    /// `loam-heap`'s pages, shared by every page-space runtime.
    Pages,
    /// A `GlobalAlloc`, this runtime's alone.
    Alloc(AllocSpace),
}

impl Space {
    /// Sets the mark of the object at `addr`; true if this call set it.
    ///
    /// # Safety
    /// `addr` is an allocated managed object of this space, and no sweep
    /// runs.
    #[inline]
    pub(crate) unsafe fn mark(&self, addr: usize) -> bool {
        match self {
            // SAFETY: the object is allocated, so its page is live (caller).
            Space::Pages => unsafe { loam_heap::mark_block(addr as *const u8) },
            // SAFETY: as the caller's.
            Space::Alloc(a) => unsafe { a.mark(addr) },
        }
    }

    /// [`mark`](Self::mark) for each of `objects`, in order, calling
    /// `newly` with each object this call marked (once for an object
    /// listed twice). In loam's pages, objects whose mark bits share a word
    /// are marked with one read-modify-write (`loam_heap::mark_blocks`).
    ///
    /// # Safety
    /// As [`mark`](Self::mark), for every object.
    #[inline]
    pub(crate) unsafe fn mark_all(&self, objects: &[usize], mut newly: impl FnMut(usize)) {
        match self {
            // The objects are allocated, so their pages are live (caller).
            // SAFETY: as just said.
            Space::Pages => unsafe { loam_heap::mark_blocks(objects, newly) },
            Space::Alloc(a) => {
                for &o in objects {
                    // SAFETY: as the caller's.
                    if unsafe { a.mark(o) } {
                        newly(o);
                    }
                }
            }
        }
    }

    /// Whether the object at `addr` is marked.
    ///
    /// # Safety
    /// As [`mark`](Self::mark).
    #[inline]
    pub(crate) unsafe fn is_marked(&self, addr: usize) -> bool {
        match self {
            Space::Pages => {
                // SAFETY: as in `mark`.
                let page = unsafe { loam_heap::PageRef::of(addr as *const u8) };
                page.is_marked(page.block_index(addr as *const u8))
            }
            // SAFETY: as the caller's.
            Space::Alloc(a) => unsafe { a.is_marked(addr) },
        }
    }

    /// Whether the object at `addr` was certainly allocated after the stop
    /// that raised `seal` (`loam_heap::PageRef::allocated_since`): no
    /// sweep of that cycle frees it. False when the space cannot tell (a
    /// `GlobalAlloc` space keeps no seal).
    ///
    /// # Safety
    /// As [`mark`](Self::mark).
    #[inline]
    pub(crate) unsafe fn allocated_since(&self, addr: usize, seal: loam_heap::SealEpoch) -> bool {
        match self {
            Space::Pages => {
                // SAFETY: as in `mark`.
                let page = unsafe { loam_heap::PageRef::of(addr as *const u8) };
                page.allocated_since(addr as *const u8, seal)
            }
            Space::Alloc(_) => false,
        }
    }

    /// The `GlobalAlloc` space, if this is one.
    #[inline]
    pub(crate) fn alloc_space(&self) -> Option<&AllocSpace> {
        match self {
            Space::Pages => None,
            Space::Alloc(a) => Some(a),
        }
    }

    /// What the space is, for reports: `"loam pages"` or the allocator's
    /// type name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Space::Pages => "loam pages",
            Space::Alloc(a) => a.name(),
        }
    }
}
