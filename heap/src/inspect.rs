//! Pages as a collector sees them: [`PageRef`], its side mark bitmap, and
//! iteration over every page, so a collector can mark and sweep with no second
//! object table.

use crate::alloc::current_heap;
use crate::page::{Page, PageState};
use crate::segment::{self, Segment, HEADER_SLICES, MARK_BYTES_PER_SLICE, SLICES};
use crate::sync::{AtomicU64, Ordering};
use std::fmt;

/// A page of the heap: `capacity()` blocks of `block_size()` bytes from
/// `start()`, owned by one thread heap, with a side bitmap of one mark bit
/// per block.
///
/// The geometry (start, block size, capacity) is fixed while any block of the
/// page is live. The mark bits are the collector's: the heap never reads or
/// clears them, so a collector clears a page's bits before it marks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PageRef {
    page: *mut Page,
}

// SAFETY: a PageRef only reads atomics and immutable-while-live geometry.
unsafe impl Send for PageRef {}
// SAFETY: as above.
unsafe impl Sync for PageRef {}

impl PageRef {
    /// The page holding block `p`.
    ///
    /// # Safety
    /// `p` is a live block from this allocator.
    ///
    /// # Examples
    /// ```
    /// use std::alloc::{GlobalAlloc, Layout};
    /// let layout = Layout::from_size_align(48, 8).unwrap();
    /// unsafe {
    ///     let p = loam_heap::LoamAlloc.alloc(layout);
    ///     let page = loam_heap::PageRef::of(p);
    ///     assert_eq!(page.block_size(), 48);
    ///     let i = page.block_index(p);
    ///     assert_eq!(page.block(i), p);
    ///     assert!(!page.set_mark(i)); // was clear (fresh page), now set
    ///     assert!(page.is_marked(i));
    ///     page.clear_marks();
    ///     loam_heap::LoamAlloc.dealloc(p, layout);
    /// }
    /// ```
    pub unsafe fn of(p: *const u8) -> PageRef {
        // SAFETY: `p` is live (caller).
        let page = unsafe { segment::page_of(p) };
        PageRef { page }
    }

    fn page(&self) -> &Page {
        // SAFETY: a PageRef names a descriptor inside a segment header, which
        // stays mapped while any of its blocks is live.
        unsafe { &*self.page }
    }

    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.page().block_size()
    }

    /// Blocks the page holds.
    pub fn capacity(&self) -> usize {
        self.page().capacity()
    }

    /// Blocks handed out and not yet returned to the page.
    pub fn used(&self) -> usize {
        self.page().used() as usize
    }

    /// Address of block 0.
    pub fn start(&self) -> *mut u8 {
        self.page().start as *mut u8
    }

    /// Whether the page is a large or huge span (one block).
    pub fn is_large(&self) -> bool {
        matches!(self.page().state(), PageState::Large | PageState::Huge)
    }

    /// An opaque identity of the heap owning the page (equal for pages of the
    /// same thread heap).
    pub fn owner_id(&self) -> usize {
        let seg = segment::segment_of(self.page.cast());
        // SAFETY: the segment is mapped (see `page`); the field is atomic.
        unsafe { (*seg).owner.load(Ordering::Relaxed) as usize }
    }

    /// Index of the block containing `p` (any address inside the page).
    pub fn block_index(&self, p: *const u8) -> usize {
        (p as usize - self.page().start) / self.block_size()
    }

    /// Address of block `i`.
    pub fn block(&self, i: usize) -> *mut u8 {
        assert!(i < self.capacity(), "heap: block index {i} out of range");
        (self.page().start + i * self.block_size()) as *mut u8
    }

    fn marks(&self) -> &[AtomicU64] {
        let seg = segment::segment_of(self.page.cast());
        let i = (self.page as usize - seg as usize - std::mem::offset_of!(Segment, pages))
            / std::mem::size_of::<Page>();
        let words = self.capacity().div_ceil(64).min(MARK_BYTES_PER_SLICE / 8);
        // SAFETY: the bitmap of slice `i` lies in the segment header, is
        // `MARK_BYTES_PER_SLICE` bytes of atomics (zero-initialized by mmap),
        // and covers one bit per block of any page starting at slice `i`.
        unsafe { std::slice::from_raw_parts(Segment::mark_words(seg, i), words) }
    }

    /// Sets block `i`'s mark bit; returns whether it was already set.
    pub fn set_mark(&self, i: usize) -> bool {
        let bit = 1u64 << (i % 64);
        self.marks()[i / 64].fetch_or(bit, Ordering::AcqRel) & bit != 0
    }

    /// Whether block `i` is marked.
    pub fn is_marked(&self, i: usize) -> bool {
        self.marks()[i / 64].load(Ordering::Acquire) & (1u64 << (i % 64)) != 0
    }

    /// Clears every mark bit of the page.
    pub fn clear_marks(&self) {
        for w in self.marks() {
            w.store(0, Ordering::Relaxed);
        }
    }
}

impl fmt::Debug for PageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageRef")
            .field("start", &self.start())
            .field("block_size", &self.block_size())
            .field("capacity", &self.capacity())
            .field("used", &self.used())
            .finish()
    }
}

/// Calls `f` on every page in segment `seg`.
pub(crate) fn for_each_page_in(seg: *mut Segment, f: &mut impl FnMut(*mut Page)) {
    for i in HEADER_SLICES..SLICES {
        let d = Segment::page(seg, i);
        // SAFETY: `seg` is live (caller); the state field is atomic.
        let state = unsafe { (*d).state() };
        if matches!(state, PageState::Small | PageState::Large | PageState::Huge) {
            f(d);
        }
    }
}

/// Calls `f` on every page of the calling thread's heap.
///
/// The pages are this thread's alone, so none can change under `f` unless `f`
/// itself allocates or frees (which it must not do with this heap).
///
/// # Examples
/// ```
/// let b = Box::new([0u8; 100]);
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// let mut pages = 0;
/// loam_heap::for_each_local_page(|p| pages += (p.used() > 0) as usize);
/// assert!(pages >= 1);
/// drop(b);
/// ```
pub fn for_each_local_page(mut f: impl FnMut(PageRef)) {
    let heap = current_heap();
    if crate::alloc::is_live(heap) {
        // SAFETY: the calling thread's own heap.
        unsafe { (*heap).for_each_own_page(|p| f(PageRef { page: p })) };
    }
}
