//! Segments: 4 MiB regions aligned to their size, cut into 64 KiB slices.
//! Masking any interior pointer finds its segment header, and the slice index
//! finds its page descriptor, in O(1) with no lock and no lookup table.

use crate::local_heap::LocalHeap;
use crate::os;
use crate::page::{Page, PageState};
use crate::spin::SpinLock;
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::ptr;

/// log2 of the segment size.
pub const SEGMENT_SHIFT: usize = 22;
/// Bytes in a segment (and its alignment).
pub const SEGMENT_SIZE: usize = 1 << SEGMENT_SHIFT;
/// log2 of the slice size.
pub const SLICE_SHIFT: usize = 16;
/// Bytes in a slice, the unit pages are made of.
pub const SLICE_SIZE: usize = 1 << SLICE_SHIFT;
/// Slices in a segment.
pub const SLICES: usize = SEGMENT_SIZE / SLICE_SIZE;
/// Slices at the start of each segment that hold the header and the two
/// side bitmaps (mark, allocated); pages use the rest. The bitmap slices are
/// resident only where touched.
pub const HEADER_SLICES: usize = 3;
/// Slices a page can use.
pub const USABLE_SLICES: usize = SLICES - HEADER_SLICES;
/// Free-slice mask of an empty segment.
pub(crate) const USABLE_MASK: u64 = !((1u64 << HEADER_SLICES) - 1);
/// Offset of the first mark bitmap from the segment start.
pub(crate) const MARK_OFFSET: usize = SLICE_SIZE;
/// Bytes of mark bitmap per slice: one bit per 8-byte block of a 64 KiB slice.
pub(crate) const MARK_BYTES_PER_SLICE: usize = SLICE_SIZE / 8 / 8;
/// Offset of the first allocated-bit bitmap: the slice after the marks.
pub(crate) const ALLOC_OFFSET: usize = 2 * SLICE_SIZE;

/// What a segment holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum SegmentKind {
    /// Slices shared by pages of many classes and large spans.
    Normal = 0,
    /// One huge object (larger than a normal segment's usable slices, or
    /// aligned beyond a slice); unmapped when it is freed.
    Huge = 1,
}

/// A segment header, at the start of its own mapping.
///
/// # Invariants
/// - `self as usize % SEGMENT_SIZE == 0`; `map_size >= SEGMENT_SIZE` for huge
///   segments, `== SEGMENT_SIZE` otherwise.
/// - Normal: for every usable slice `i`, exactly one of: bit `i` of
///   `free_slices` is set and `pages[i]` is `Free`; or slice `i` belongs to one
///   page span whose first descriptor is `Small`/`Large` and whose other
///   descriptors are `Interior` with `slice_offset` back to it.
/// - `dirty ⊆ free_slices`: a dirty slice is free but may still be resident.
pub(crate) struct Segment {
    /// The heap that owns every page here. Writers: the creating heap
    /// (before publication) and an adopter holding the orphan lock (Release).
    /// Readers: every `free` (Relaxed: it only picks a queue; a stale owner
    /// is an abandoned heap whose queue is still drained, see `abandon.rs`).
    pub(crate) owner: AtomicPtr<LocalHeap>,
    pub(crate) kind: SegmentKind,
    /// Bytes mapped (immutable).
    pub(crate) map_size: usize,
    /// Bit `i` set: slice `i` is free. Written by the owner (relaxed
    /// load/store), read by statistics.
    pub(crate) free_slices: AtomicU64,
    /// Bit `i` set: free slice `i` may be resident (not yet decommitted).
    pub(crate) dirty: AtomicU64,
    /// When a slice of this segment was last freed (owner only).
    pub(crate) last_free_ms: u64,
    /// Owner's segment list (owner only).
    pub(crate) next: *mut Segment,
    pub(crate) prev: *mut Segment,
    /// Registry of all segments (under `REGISTRY`).
    all_next: *mut Segment,
    all_prev: *mut Segment,
    /// Block size of the page covering each slice. Written by the owner when
    /// it sets a page up (before any of its blocks is handed out, so every
    /// holder of a block is ordered after the write); read by remote frees.
    /// Kept apart from the page descriptors, whose cache lines the owner
    /// writes on every allocation: a freeing thread reading the block size
    /// there would pull those lines away from the owner.
    pub(crate) slice_block_size: [AtomicUsize; SLICES],
    /// One descriptor per slice.
    pub(crate) pages: [Page; SLICES],
}

const _: () = assert!(std::mem::size_of::<Segment>() <= MARK_OFFSET);
const _: () = assert!(MARK_OFFSET + SLICES * MARK_BYTES_PER_SLICE <= ALLOC_OFFSET);
const _: () = assert!(ALLOC_OFFSET + SLICES * MARK_BYTES_PER_SLICE <= HEADER_SLICES * SLICE_SIZE);

/// All live segments, for statistics and page iteration.
struct Registry {
    head: *mut Segment,
    count: usize,
    mapped: usize,
}

// SAFETY: the registry's pointers are only followed under its lock, and the
// segments they name stay mapped until they are unlinked under that lock.
unsafe impl Send for Registry {}

static REGISTRY: SpinLock<Registry> = SpinLock::new(Registry {
    head: ptr::null_mut(),
    count: 0,
    mapped: 0,
});

/// The segment holding `p` (any pointer into a block or segment header).
#[inline(always)]
pub(crate) fn segment_of(p: *const u8) -> *mut Segment {
    ((p as usize) & !(SEGMENT_SIZE - 1)) as *mut Segment
}

/// The block size of the page holding `p`, without touching its descriptor.
///
/// # Safety
/// `p` points into a live block of a live segment of ours.
#[inline(always)]
pub(crate) unsafe fn block_size_of(p: *const u8) -> usize {
    let seg = segment_of(p);
    let idx = ((p as usize) - (seg as usize)) >> SLICE_SHIFT;
    // SAFETY: `seg` is live (caller) and `idx < SLICES`.
    unsafe { (*seg).slice_block_size[idx].load(Ordering::Relaxed) }
}

/// The page descriptor of the page holding `p`.
///
/// # Safety
/// `p` points into a live page of a live segment of ours.
#[inline(always)]
pub(crate) unsafe fn page_of(p: *const u8) -> *mut Page {
    let seg = segment_of(p);
    let idx = ((p as usize) - (seg as usize)) >> SLICE_SHIFT;
    // SAFETY: `seg` is a live segment header (caller), and `idx < SLICES`
    // because `p` lies within the segment's first SEGMENT_SIZE bytes.
    unsafe {
        let d = ptr::addr_of_mut!((*seg).pages).cast::<Page>().add(idx);
        d.sub((*d).slice_offset as usize)
    }
}

impl Segment {
    /// Maps and registers a segment of `map_size` bytes owned by `owner`.
    /// Returns null if the OS is out of memory.
    pub(crate) fn create(
        owner: *mut LocalHeap,
        kind: SegmentKind,
        map_size: usize,
    ) -> *mut Segment {
        let base = os::map_aligned(map_size, SEGMENT_SIZE);
        if base.is_null() {
            return ptr::null_mut();
        }
        if kind == SegmentKind::Normal && crate::options::huge_pages() {
            // SAFETY: the page part of our fresh mapping.
            unsafe { os::advise_huge(base, map_size) };
        }
        let seg = base.cast::<Segment>();
        // SAFETY: the mapping is fresh, zeroed, aligned and large enough for
        // the header; zero is a valid bit pattern for every field
        // (null pointers, zero atomics, `Free` descriptors, `Normal` kind),
        // so only the non-zero fields need writing.
        unsafe {
            (*seg).owner = AtomicPtr::new(owner);
            (*seg).kind = kind;
            (*seg).map_size = map_size;
            let free = if kind == SegmentKind::Normal {
                USABLE_MASK
            } else {
                0
            };
            (*seg).free_slices = AtomicU64::new(free);
        }
        let mut reg = REGISTRY.lock();
        // SAFETY: `seg` is ours and unpublished; the registry lock protects
        // the links of every registered segment.
        unsafe {
            (*seg).all_next = reg.head;
            if !reg.head.is_null() {
                (*reg.head).all_prev = seg;
            }
        }
        reg.head = seg;
        reg.count += 1;
        reg.mapped += map_size;
        crate::stats::COUNTERS
            .segments_mapped
            .fetch_add(1, Ordering::Relaxed);
        seg
    }

    /// Unregisters and unmaps `seg`.
    ///
    /// # Safety
    /// `seg` holds no live block, is unlinked from its owner's list, and no
    /// thread will touch it again.
    pub(crate) unsafe fn destroy(seg: *mut Segment) {
        let mut reg = REGISTRY.lock();
        // SAFETY: under the registry lock; `seg` is registered (created by
        // `create`) so its neighbours are live registered segments.
        let size = unsafe {
            let (n, p) = ((*seg).all_next, (*seg).all_prev);
            if !n.is_null() {
                (*n).all_prev = p;
            }
            if p.is_null() {
                reg.head = n;
            } else {
                (*p).all_next = n;
            }
            (*seg).map_size
        };
        reg.count -= 1;
        reg.mapped -= size;
        drop(reg);
        crate::stats::COUNTERS
            .segments_unmapped
            .fetch_add(1, Ordering::Relaxed);
        // SAFETY: unregistered, unlinked and dead (caller), so nothing refers
        // to the mapping any more.
        unsafe { os::unmap(seg.cast(), size) };
    }

    /// The first descriptor of slice `i`.
    #[inline(always)]
    pub(crate) fn page(seg: *mut Segment, i: usize) -> *mut Page {
        debug_assert!(i < SLICES);
        // SAFETY: in-bounds index into the descriptor array of a live segment.
        unsafe { ptr::addr_of_mut!((*seg).pages).cast::<Page>().add(i) }
    }

    /// Start address of slice `i`.
    #[inline(always)]
    pub(crate) fn slice_start(seg: *mut Segment, i: usize) -> usize {
        seg as usize + (i << SLICE_SHIFT)
    }

    /// The mark bitmap of the page whose first slice is `i`: one bit per block
    /// index, `MARK_BYTES_PER_SLICE` bytes.
    pub(crate) fn mark_words(seg: *mut Segment, i: usize) -> *const AtomicU64 {
        (seg as usize + MARK_OFFSET + i * MARK_BYTES_PER_SLICE) as *const AtomicU64
    }

    /// The allocated-bit bitmap of the page whose first slice is `i`, laid
    /// out as its mark bitmap.
    pub(crate) fn alloc_words(seg: *mut Segment, i: usize) -> *const AtomicU64 {
        (seg as usize + ALLOC_OFFSET + i * MARK_BYTES_PER_SLICE) as *const AtomicU64
    }

    /// Index of the first run of `n` free slices, if any.
    pub(crate) fn find_free_run(free: u64, n: usize) -> Option<usize> {
        debug_assert!((1..=USABLE_SLICES).contains(&n));
        let mut m = free;
        for k in 1..n {
            m &= free >> k;
        }
        (m != 0).then(|| m.trailing_zeros() as usize)
    }

    /// Checks the segment invariants (expensive: walks every descriptor).
    pub(crate) fn assert_valid(seg: *mut Segment) {
        // SAFETY: callers hold ownership of `seg` (owner thread or orphan lock).
        unsafe {
            if (*seg).kind == SegmentKind::Huge {
                return;
            }
            let free = (*seg).free_slices.load(Ordering::Relaxed);
            let dirty = (*seg).dirty.load(Ordering::Relaxed);
            if dirty & !free != 0 {
                crate::fatal("segment has dirty slices that are not free");
            }
            let mut i = HEADER_SLICES;
            while i < SLICES {
                let d = Segment::page(seg, i);
                match (*d).state() {
                    PageState::Free => {
                        if free & (1 << i) == 0 {
                            crate::fatal("free descriptor on a used slice");
                        }
                        i += 1;
                    }
                    PageState::Small | PageState::Large => {
                        let n = (*d).slice_count();
                        for k in 0..n {
                            let e = Segment::page(seg, i + k);
                            if free & (1 << (i + k)) != 0
                                || (k > 0
                                    && ((*e).state() != PageState::Interior
                                        || (*e).slice_offset as usize != k))
                            {
                                crate::fatal("page span corrupted");
                            }
                        }
                        (*d).assert_valid();
                        i += n;
                    }
                    _ => crate::fatal("interior descriptor without a page"),
                }
            }
        }
    }
}

/// Runs `f` on every live segment while holding the registry lock, so none
/// can be unmapped meanwhile. `f` must not allocate from this heap's slow path
/// (it may deadlock on the registry lock): statistics use fixed arrays.
pub(crate) fn for_each_segment(mut f: impl FnMut(*mut Segment)) {
    let reg = REGISTRY.lock();
    let mut s = reg.head;
    while !s.is_null() {
        f(s);
        // SAFETY: registered segments stay mapped while the lock is held.
        s = unsafe { (*s).all_next };
    }
}
