//! Pages as a collector sees them: [`PageRef`], its side mark bitmap, and
//! iteration over every page, so a collector can mark and sweep with no second
//! object table.

use crate::page::{Page, PageState};
use crate::segment::{
    self, Segment, HEADER_SLICES, MARK_BYTES_PER_SLICE, PENDING_BYTES_PER_SLICE, SLICES, SLICE_SHIFT,
};
use crate::sync::{AtomicU64, Ordering};
use std::fmt;
use std::marker::PhantomData;

/// [`PageRef::tag`] of a page whose collector objects were allocated
/// with more than one tag.
pub const TAG_MIXED: u16 = u16::MAX;

/// Page flag, in [`PageRef::flags`] while a page run sent by
/// [`crate::FreeBatch::push_page_run`] (or held,
/// [`crate::FreeBatch::hold_page_run`]) is out (not yet taken back by the
/// page's owner, see [`PageRef::runs_out`]): the run's blocks still carry
/// allocated bits although they are freed, and their pending bits say so.
/// A sweeper copies such a page's allocated words less its pending words
/// ([`PageRef::pending_words`]).
pub const RUN_PENDING: u8 = 0x80;

/// The side bitmaps of a page, one bit per block each.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Bitmap {
    Mark,
    Allocated,
    /// The allocated bits as the page's owner sealed them (`seal.rs`).
    Seal,
}

impl Bitmap {
    /// The first word of this bitmap for the page whose first slice is
    /// `s` in segment `seg`.
    #[inline]
    fn words(self, seg: *mut Segment, s: usize) -> *const AtomicU64 {
        match self {
            Bitmap::Mark => Segment::mark_words(seg, s),
            Bitmap::Allocated => Segment::alloc_words(seg, s),
            Bitmap::Seal => Segment::seal_words(seg, s),
        }
    }
}

/// A live page of the heap: `capacity()` blocks of `block_size()` bytes from
/// `start()`, owned by one thread heap, with a side bitmap of one mark bit
/// per block.
///
/// A `PageRef<'a>` reads the page's metadata in place, so the page must stay
/// live for `'a`: that is the contract of the unsafe ways to get one
/// ([`PageRef::of`], [`for_each_page`]). Safe code sees pages as
/// [`PageInfo`] values instead. A `PageRef` cannot leave the closure that
/// received it:
///
/// ```compile_fail
/// let mut saved = None;
/// // SAFETY: the closure neither allocates nor frees.
/// unsafe { loam_heap::for_each_page(|p| saved = Some(p)) };
/// ```
///
/// The geometry (start, block size, capacity) is fixed while any block of the
/// page is live. The page also has a second bitmap of *allocated* bits, laid
/// out the same way. The marks are the collector's: the heap never reads or
/// clears them, so a collector clears a page's marks before it marks. The
/// allocated bits are written by the page's owning thread only, so that
/// setting one costs no atomic read-modify-write: set through
/// [`alloc_object`]'s [`AllocatedBit`], cleared by the owner when a
/// [`crate::FreeBatch::push_page_run`] run brings the blocks back. Until
/// then the run's blocks are *pending*: a third bitmap, written by the run's
/// sender and cleared by the owner (atomic read-modify-writes, on slow paths
/// only), says which allocated bits belong to freed blocks (see
/// [`PageRef::pending_words`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PageRef<'a> {
    page: *mut Page,
    _live: PhantomData<&'a Page>,
}

// SAFETY: a PageRef only reads atomics and immutable-while-live geometry.
unsafe impl Send for PageRef<'_> {}
// SAFETY: as above.
unsafe impl Sync for PageRef<'_> {}

impl<'a> PageRef<'a> {
    /// The page holding block `p`.
    ///
    /// # Safety
    /// `p` is a live block from this allocator, allocated with an alignment
    /// of at most 2 MiB (a block aligned past that has a mapping of its own
    /// and no page: [`holding`](Self::holding) says `None` for it), and the
    /// page stays live (some block of it stays allocated, so neither the
    /// page nor a huge segment is given back) for `'a`.
    ///
    /// # Examples
    /// ```
    /// use std::alloc::{GlobalAlloc, Layout};
    /// let layout = Layout::from_size_align(48, 8).unwrap();
    /// // SAFETY: `p` stays live while `page` is used, then is freed once.
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
    #[inline]
    pub unsafe fn of(p: *const u8) -> PageRef<'a> {
        // SAFETY: `p` is live (caller).
        let page = unsafe { segment::page_of(p) };
        PageRef {
            page,
            _live: PhantomData,
        }
    }

    /// The page and the index of the block that holds address `p` (any
    /// byte of the block), or `None` if this allocator cannot say: `p` is
    /// in none of its segments (the stack, a static, another allocator, a
    /// span of `aligned.rs`), or past the first slice of a huge block
    /// (whose side tables only its first slice fills). The block may be
    /// any block of the page, an object's or a `malloc`'s: its allocated
    /// bit tells (set only through [`alloc_object`]).
    ///
    /// # Safety
    /// If `p` lies in a segment of this allocator, it lies in a block that
    /// stays allocated (so its page stays live) for `'a`.
    ///
    /// # Examples
    /// ```
    /// use std::alloc::{GlobalAlloc, Layout};
    /// let layout = Layout::from_size_align(48, 8).unwrap();
    /// let local = 7_u64;
    /// // SAFETY: `p` stays live while `page` is used, then is freed once;
    /// // `local` is not in the heap.
    /// unsafe {
    ///     let p = loam_heap::LoamAlloc.alloc(layout);
    ///     let (page, i) = loam_heap::PageRef::holding(p.add(20)).unwrap();
    ///     assert_eq!(page.block(i), p);
    ///     assert!(loam_heap::PageRef::holding((&local as *const u64).cast()).is_none());
    ///     loam_heap::LoamAlloc.dealloc(p, layout);
    /// }
    /// ```
    #[inline]
    pub unsafe fn holding(p: *const u8) -> Option<(PageRef<'a>, usize)> {
        let seg = segment::segment_of(p);
        if !crate::segment_map::contains_tracked(seg as usize) {
            return None;
        }
        let idx = ((p as usize) - (seg as usize)) >> SLICE_SHIFT;
        // SAFETY: the segment is registered, so mapped: `p` lies in one of
        // its blocks (caller), which keeps it registered; `idx < SLICES`.
        let (size, first) = unsafe {
            (
                (*seg).slice_block_size[idx].load(Ordering::Relaxed),
                (*seg).slice_first[idx].load(Ordering::Relaxed) as usize,
            )
        };
        // A slice no page covers reads zero (fresh, or a cached huge
        // segment's zeroed header), as do a huge block's later slices.
        if size == 0 || idx < HEADER_SLICES || first > idx {
            return None;
        }
        // The tables of a slice of a live block name its page's first
        // slice, whose descriptor is the page's (written before the
        // block was handed out, which the caller's hold is ordered after).
        // SAFETY: as just said; the page stays live with the block.
        let page = unsafe { PageRef::of(((seg as usize) + (first << SLICE_SHIFT)) as *const u8) };
        // `None` also for a huge page's offset, before its block.
        page.index_of(p).map(|i| (page, i))
    }

    #[inline]
    fn page(&self) -> &'a Page {
        // SAFETY: a PageRef names a descriptor inside a segment header, which
        // stays mapped while any of its blocks is live.
        unsafe { &*self.page }
    }

    /// Bytes per block.
    #[inline]
    pub fn block_size(&self) -> usize {
        self.page().block_size()
    }

    /// Blocks the page holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.page().capacity()
    }

    /// Blocks handed out and not yet returned to the page.
    pub fn used(&self) -> usize {
        self.page().used() as usize
    }

    /// Address of block 0.
    #[inline]
    pub fn start(&self) -> *mut u8 {
        self.page().start() as *mut u8
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
    #[inline]
    pub fn block_index(&self, p: *const u8) -> usize {
        self.page().block_index(p)
    }

    /// Index of the block of this page that holds address `p`, or `None`
    /// if `p` lies outside the page's blocks: [`holding`](Self::holding)
    /// without the segment map and the slice tables, for an address
    /// likely to be near a block already in hand.
    ///
    /// # Examples
    /// ```
    /// use std::alloc::{GlobalAlloc, Layout};
    /// let layout = Layout::from_size_align(48, 8).unwrap();
    /// let local = 7_u64;
    /// // SAFETY: `p` stays live while `page` is used, then is freed once.
    /// unsafe {
    ///     let p = loam_heap::LoamAlloc.alloc(layout);
    ///     let page = loam_heap::PageRef::of(p);
    ///     assert_eq!(page.index_of(p.add(20)), Some(page.block_index(p)));
    ///     assert_eq!(page.index_of((&local as *const u64).cast()), None);
    ///     loam_heap::LoamAlloc.dealloc(p, layout);
    /// }
    /// ```
    #[inline]
    pub fn index_of(&self, p: *const u8) -> Option<usize> {
        let start = self.page().start();
        let end = start + self.capacity() * self.block_size();
        (start..end)
            .contains(&(p as usize))
            .then(|| self.block_index(p))
    }

    /// Address of block `i`.
    #[inline]
    pub fn block(&self, i: usize) -> *mut u8 {
        assert!(i < self.capacity(), "heap: block index {i} out of range");
        (self.page().start() + i * self.block_size()) as *mut u8
    }

    /// A page of a live descriptor (`seal.rs`).
    ///
    /// # Safety
    /// `page` is a live page's first descriptor, and stays live for `'a`.
    pub(crate) unsafe fn from_raw(page: *mut Page) -> PageRef<'a> {
        PageRef {
            page,
            _live: PhantomData,
        }
    }

    /// The page's descriptor.
    pub(crate) fn raw(&self) -> *mut Page {
        self.page
    }

    /// One of the page's side bitmaps laid out alike (mark, allocated,
    /// seal), `bitmap_words()` words.
    #[inline]
    pub(crate) fn bitmap(&self, which: Bitmap) -> &'a [AtomicU64] {
        let (seg, i, words) = self.bitmap_place();
        let base = which.words(seg, i);
        // SAFETY: the bitmaps of slice `i` lie in the segment header, are
        // `MARK_BYTES_PER_SLICE` bytes of atomics each (zero-initialized by
        // mmap), and cover one bit per block of any page starting at slice
        // `i` (no page has more than 8192 blocks).
        unsafe { std::slice::from_raw_parts(base, words) }
    }

    /// Where the page's side bitmaps lie: its segment, the slice it starts
    /// at, and the words each bitmap has.
    #[inline]
    fn bitmap_place(&self) -> (*mut Segment, usize, usize) {
        let (seg, i) = self.first_slice();
        let words = self.capacity().div_ceil(64).min(MARK_BYTES_PER_SLICE / 8);
        (seg, i, words)
    }

    /// The page's segment and the slice it starts at.
    #[inline]
    fn first_slice(&self) -> (*mut Segment, usize) {
        let seg = segment::segment_of(self.page.cast());
        (seg, Segment::index_of(self.page))
    }

    /// The word of the `which` bitmap that holds block `i`'s bit, and the
    /// bit: the single-bit look-ups' way in, which reads no capacity (an
    /// atomic load each time, where a barrier asks several bits of one
    /// page in a row). The bound is the room each bitmap has per slice,
    /// which covers every block of any page (8192 at most): an index past
    /// the page's blocks but within it reads a bit no block of this page
    /// uses. Writers check the index against the capacity first
    /// ([`set_mark`](Self::set_mark)).
    #[inline]
    fn bit(&self, which: Bitmap, i: usize) -> (&'a AtomicU64, u64) {
        assert!(
            i < MARK_BYTES_PER_SLICE * 8,
            "heap: block index {i} out of range"
        );
        debug_assert!(i < self.capacity(), "heap: block index {i} out of range");
        let (seg, s) = self.first_slice();
        let base = which.words(seg, s);
        // Slice `s`'s bitmaps lie in the segment header,
        // `MARK_BYTES_PER_SLICE` bytes of atomics each (as in `bitmap`),
        // and word `i / 64` is within them (just checked); the segment
        // stays mapped while the page is live, which it is for `'a`
        // (`PageRef`).
        // SAFETY: as just said.
        let word = unsafe { &*base.add(i / 64) };
        (word, 1u64 << (i % 64))
    }

    /// Whether block `i` holds a young collector object: its allocated bit
    /// set and its mark bit clear, read in that order (acquire), with one
    /// look-up of the page's bitmaps for both (a write barrier asks it on
    /// every store of an unmarked value).
    ///
    /// # Examples
    /// ```
    /// let (p, bit) = loam_heap::alloc_object(48, 8, 0, 0);
    /// // SAFETY: `p` is live while its page is read.
    /// let page = unsafe { loam_heap::PageRef::of(p) };
    /// let i = page.block_index(p);
    /// assert!(!page.is_allocated_unmarked(i)); // not published yet
    /// bit.unwrap().set();
    /// page.clear_mark(i);
    /// assert!(page.is_allocated_unmarked(i));
    /// page.set_mark(i);
    /// assert!(!page.is_allocated_unmarked(i));
    /// # // Leaked: a block with its allocated bit set goes back through a page run.
    /// ```
    #[inline]
    pub fn is_allocated_unmarked(&self, i: usize) -> bool {
        // Once inlined, the two look-ups share their arithmetic: the
        // bitmaps sit at fixed distances in the same slice's header.
        self.is_allocated(i) && !self.is_marked(i)
    }

    #[inline]
    fn marks(&self) -> &'a [AtomicU64] {
        self.bitmap(Bitmap::Mark)
    }

    /// Number of 64-bit words in each of the page's bitmaps.
    pub fn bitmap_words(&self) -> usize {
        self.capacity().div_ceil(64)
    }

    /// Word `w` of the mark bitmap (bit `b` is block `64 * w + b`).
    #[inline]
    pub fn mark_word(&self, w: usize) -> u64 {
        self.marks()[w].load(Ordering::Acquire)
    }

    /// Word `w` of the allocated bitmap.
    #[inline]
    pub fn allocated_word(&self, w: usize) -> u64 {
        self.bitmap(Bitmap::Allocated)[w].load(Ordering::Acquire)
    }

    /// Every word of the mark bitmap in order, as [`mark_word`](Self::mark_word)
    /// reads each (the bitmap found once, not per word).
    #[inline]
    pub fn mark_words(&self) -> impl Iterator<Item = u64> + 'a {
        self.marks().iter().map(|w| w.load(Ordering::Acquire))
    }

    /// Every word of the allocated bitmap in order, as
    /// [`allocated_word`](Self::allocated_word) reads each.
    #[inline]
    pub fn allocated_words(&self) -> impl Iterator<Item = u64> + 'a {
        self.bitmap(Bitmap::Allocated).iter().map(|w| w.load(Ordering::Acquire))
    }

    /// Whether block `i`'s allocated bit is set.
    #[inline]
    pub fn is_allocated(&self, i: usize) -> bool {
        let (word, bit) = self.bit(Bitmap::Allocated, i);
        word.load(Ordering::Acquire) & bit != 0
    }

    /// The page's flag bits (zero when the page was set up, and when a page
    /// run resets it). Bit 7 is [`RUN_PENDING`], set while
    /// [`runs_out`](Self::runs_out) is not zero; the others are the
    /// collector's.
    #[inline]
    pub fn flags(&self) -> u8 {
        let flags = self.page().user_flags.load(Ordering::Acquire);
        if self.runs_out() != 0 {
            flags | RUN_PENDING
        } else {
            flags
        }
    }

    /// Page runs out (sent to the page's owner, or held to be sent later,
    /// [`crate::FreeBatch::hold_page_run`]) and not yet taken back. Read it
    /// (acquire) before the pending words: zero means every run's pending
    /// bits are cleared, and while a sweep cannot run (between a
    /// collector's sweeps) no new ones appear.
    #[inline]
    pub fn runs_out(&self) -> u32 {
        self.page().runs_out.load(Ordering::Acquire)
    }

    /// Every word of the pending bitmap in order (bit `b` of word `w`: block
    /// `64 * w + b` is in a page run that is out). Each pending block's
    /// allocated bit is still set; the owner clears the allocated bit first
    /// and the pending bit after (release), so a word read here (acquire)
    /// before the allocated word covers every block whose allocated bit
    /// that read can still see from its run. A page of blocks under 16
    /// bytes has no page runs and no pending bitmap: it yields no words.
    #[inline]
    pub fn pending_words(&self) -> impl Iterator<Item = u64> + 'a {
        let words = if self.block_size() < crate::remote::MIN_RUN_BLOCK {
            0
        } else {
            self.bitmap_words()
        };
        // SAFETY: live (the caller's contract for `self`).
        let bits = unsafe { pending_bitmap(self.page, words) };
        bits.iter().map(|w| w.load(Ordering::Acquire))
    }

    /// Sets flag bits `bits` (not [`RUN_PENDING`], which is the heap's).
    #[inline]
    pub fn set_flags(&self, bits: u8) {
        assert!(bits & RUN_PENDING == 0, "heap: RUN_PENDING is set by the heap only");
        self.page().set_user_flags(bits);
    }

    /// Clears flag bits `bits` (not [`RUN_PENDING`], which is the heap's).
    #[inline]
    pub fn clear_flags(&self, bits: u8) {
        assert!(bits & RUN_PENDING == 0, "heap: RUN_PENDING is cleared by the heap only");
        if self.flags() & bits != 0 {
            self.page().user_flags.fetch_and(!bits, Ordering::Release);
        }
    }

    /// Sets block `i`'s mark bit; returns whether it was already set.
    /// Sequentially consistent, as [`mark_block`]'s (which this is, for a
    /// caller that has the page and the index already, less its first
    /// load).
    ///
    /// # Panics
    /// If `i` is not a block of the page: a bit set past them would
    /// outlive the page, since [`clear_marks`](Self::clear_marks) clears
    /// only the words its blocks use, and mark a block of a later page
    /// with more blocks set up at the same slice.
    #[inline]
    pub fn set_mark(&self, i: usize) -> bool {
        assert!(i < self.capacity(), "heap: block index {i} out of range");
        let (word, bit) = self.bit(Bitmap::Mark, i);
        word.fetch_or(bit, Ordering::SeqCst) & bit != 0
    }

    /// Clears block `i`'s mark bit (an atomic `fetch_and`: marks set beside
    /// it in the same word stay).
    #[inline]
    pub fn clear_mark(&self, i: usize) {
        let bit = 1u64 << (i % 64);
        self.marks()[i / 64].fetch_and(!bit, Ordering::AcqRel);
    }

    /// The tag of every collector object allocated in the page since it was
    /// set up ([`alloc_object`]'s `tag`), if they all had one and the same;
    /// [`TAG_MIXED`] if two tags met; 0 also if none was allocated yet (so
    /// a collector that reads 0 cannot tell, and should use tags other
    /// than 0 and `TAG_MIXED`). It reads as one
    /// tag `t` only if every allocated object of the page was allocated with
    /// `t`: whoever sees an object's allocated bit (acquire) and then reads
    /// the tag sees the object's tag noted. It goes back to 0 only when the
    /// page is set up again, which no allocated object outlives.
    ///
    /// # Examples
    /// ```
    /// let (a, bit) = loam_heap::alloc_object(48, 8, 0, 3);
    /// bit.unwrap().set();
    /// // SAFETY: `a` is live while its page is read.
    /// let page = unsafe { loam_heap::PageRef::of(a) };
    /// let (b, bit) = loam_heap::alloc_object(48, 8, 0, 4);
    /// bit.unwrap().set();
    /// // The same page (the thread's current one for the class): now mixed.
    /// // SAFETY: `b` is live while its page is read.
    /// if unsafe { loam_heap::PageRef::of(b) }.start() == page.start() {
    ///     assert_eq!(page.tag(), loam_heap::TAG_MIXED);
    /// }
    /// // A tag of 0 is a tag like another: 0 then 5 is mixed (another class,
    /// // another page).
    /// let (c, bit) = loam_heap::alloc_object(112, 8, 0, 0);
    /// bit.unwrap().set();
    /// let (d, bit) = loam_heap::alloc_object(112, 8, 0, 5);
    /// bit.unwrap().set();
    /// // SAFETY: `c` and `d` are live while their pages are read.
    /// let (pc, pd) = unsafe { (loam_heap::PageRef::of(c), loam_heap::PageRef::of(d)) };
    /// if pc.start() == pd.start() {
    ///     assert_eq!(pd.tag(), loam_heap::TAG_MIXED);
    /// }
    /// # // Leaked: blocks with their allocated bit set go back through page runs.
    /// ```
    #[inline]
    pub fn tag(&self) -> u16 {
        self.page().user_tag()
    }

    /// Whether block `i` is marked.
    #[inline]
    pub fn is_marked(&self, i: usize) -> bool {
        let (word, bit) = self.bit(Bitmap::Mark, i);
        word.load(Ordering::Acquire) & bit != 0
    }

    /// Clears every mark bit of the page.
    pub fn clear_marks(&self) {
        for w in self.marks() {
            // Words already clear are left unwritten: a page whose objects
            // were never marked (young garbage) has its bitmap's memory
            // read from the shared zero page, not faulted in. The same as
            // storing zero: a mark set after the load is one set after the
            // clear.
            if w.load(Ordering::Relaxed) != 0 {
                w.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// The first `words` words of the pending bitmap of `page` (`words` at most
/// the page's bitmap words, and 64: pages of blocks under 16 bytes have
/// none).
///
/// # Safety
/// `page` is a live page descriptor (its first, for a span).
pub(crate) unsafe fn pending_bitmap<'a>(page: *mut Page, words: usize) -> &'a [AtomicU64] {
    let seg = segment::segment_of(page.cast());
    // The slice from the descriptor's place, not from its `start`: a walk
    // may look at a page its owner is setting up, and its `start` may then
    // be another set-up's (or a first set-up's 0, which wrapped round).
    let slice = Segment::index_of(page);
    let words = words.min(PENDING_BYTES_PER_SLICE / 8);
    // SAFETY: the pending bitmap of slice `slice` lies in the segment header,
    // `PENDING_BYTES_PER_SLICE` bytes of atomics (zero-initialized by mmap).
    unsafe { std::slice::from_raw_parts(Segment::pending_words(seg, slice), words) }
}

/// The side-bitmap bits of one block, found from its page descriptor on the
/// allocation path (where the descriptor is at hand), set once the caller has
/// initialized the block: see [`alloc_object`].
#[derive(Debug)]
#[must_use = "a block whose allocated bit is never set is invisible to the collector"]
pub struct AllocatedBit {
    alloc: *const AtomicU64,
    mark: *const AtomicU64,
    bit: u64,
}

impl AllocatedBit {
    /// The bits of block `p` of `page`.
    ///
    /// # Safety
    /// `page` is the live page holding block `p`.
    #[inline(always)]
    pub(crate) unsafe fn of(page: *mut Page, p: *mut u8) -> AllocatedBit {
        // SAFETY: live (caller); the index of a block of the page.
        unsafe { AllocatedBit::at(page, (*page).block_index(p)) }
    }

    /// The bits of block `idx` of `page`.
    ///
    /// # Safety
    /// `page` is a live page and `idx` the index of one of its blocks.
    #[inline(always)]
    pub(crate) unsafe fn at(page: *mut Page, idx: usize) -> AllocatedBit {
        let seg = segment::segment_of(page.cast());
        // A page's first slice, from its descriptor's place (block 0 starts
        // at it: small and large pages at the slice start, huge ones at a
        // slice-aligned offset, whose descriptor is that slice's), not from
        // `start`: the caller read that already, and a second atomic load
        // is not merged with the first on this allocation path.
        let slice = Segment::index_of(page);
        // SAFETY: the bitmaps of slice `slice` cover every block of the page
        // (see `PageRef::bitmap`); `idx / 64` is in range for it.
        unsafe {
            AllocatedBit {
                alloc: Segment::alloc_words(seg, slice).add(idx / 64),
                mark: Segment::mark_words(seg, slice).add(idx / 64),
                bit: 1 << (idx % 64),
            }
        }
    }

    /// The bits of block `p` of `page`, whose class's reciprocal (see
    /// `size_class::RECIP`) is `recip`: [`AllocatedBit::of`] with the
    /// division's constant known at compile time.
    ///
    /// # Safety
    /// `page` is the live small page holding block `p`, of the class whose
    /// reciprocal is `recip`.
    #[inline(always)]
    unsafe fn of_class(page: *mut Page, p: *mut u8, recip: u64) -> AllocatedBit {
        // SAFETY: live (caller).
        let offset = (p as usize - unsafe { (*page).start() }) as u64;
        let idx = ((offset * recip) >> crate::size_class::RECIP_SHIFT) as usize;
        // SAFETY: `idx` is `p`'s index, `recip` being the page class's.
        unsafe { AllocatedBit::at(page, idx) }
    }

    /// Clears the allocated bit (the owner taking the block back).
    pub(crate) fn clear(self) {
        // SAFETY: as in `set`; only the owning thread writes these words.
        unsafe {
            let w = (*self.alloc).load(Ordering::Relaxed);
            if w & self.bit != 0 {
                // Release, as `set`'s: a sweeper that acquires the word
                // then sees what the owner wrote before every store to it
                // (a plain store would break `set`'s release sequence; the
                // same instruction on x86-64).
                (*self.alloc).store(w & !self.bit, Ordering::Release);
            }
        }
    }

    /// Clears every allocated bit of `page` (the owner resetting it).
    ///
    /// # Safety
    /// `page` is a live page of the calling thread's heap.
    pub(crate) unsafe fn clear_page(page: *mut Page) {
        // SAFETY: live (caller).
        let start = unsafe { (*page).start() } as *mut u8;
        // SAFETY: block 0 of the page.
        let first = unsafe { AllocatedBit::of(page, start) };
        // SAFETY: live (caller).
        let words = unsafe { (*page).capacity() }.div_ceil(64);
        for w in 0..words {
            // SAFETY: the page's bitmap has `words` words (see `bitmap`).
            let a = unsafe { &*first.alloc.add(w) };
            if a.load(Ordering::Relaxed) != 0 {
                // Release, as in `clear`.
                a.store(0, Ordering::Release);
            }
        }
    }

    /// Sets the allocated bit (publishing the block: it is white, its mark
    /// bit untouched). The store is a release: a sweeper that sees the
    /// allocated bit (acquire) sees every write made to the block before.
    /// Call it on the thread that allocated the block. Until then the
    /// thread lends its heap to no other ([`crate::lend`] only hands
    /// over), and a bit dropped without being set keeps it from lending
    /// for good.
    ///
    /// (There is no "allocate black" here: with sticky marks a block marked
    /// at allocation counts as old, which turned every later cycle full in
    /// a trial; `docs/handshakes.md` keeps allocation during a mark apart.)
    #[inline(always)]
    pub fn set(self) {
        // SAFETY: the words are atomics in a segment header that stays mapped
        // while the block is allocated (the caller holds it).
        unsafe {
            // Only the owning thread writes allocated words (the run drain
            // clears them), so a load and a store suffice. Its heap is lent
            // to no other thread while the bit is out (`lend::bits_out`).
            let w = (*self.alloc).load(Ordering::Relaxed);
            (*self.alloc).store(w | self.bit, Ordering::Release);
        }
        crate::lend::bit_in();
    }

    /// [`set`](Self::set) for a bit from [`alloc_object_in_unlendable`],
    /// which its thread did not count as out. (On a counted bit its thread
    /// keeps counting it, and lends its heap no more: safe, but
    /// [`alloc_object_in_unlendable`]'s contract is to set its bits so, and
    /// only its bits.)
    ///
    /// # Examples
    /// ```
    /// let class = loam_heap::ObjectClass::of(32, 8).unwrap();
    /// // SAFETY: set with `set_uncounted` right below, nothing in between.
    /// let (p, bit) = unsafe { loam_heap::alloc_object_in_unlendable(class, 0, 0) };
    /// assert!(!p.is_null());
    /// bit.unwrap().set_uncounted();
    /// // No bit is counted out: the thread may lend its heap.
    /// assert_eq!(loam_heap::lend(|| loam_heap::stats().heaps_lent), 1);
    /// # // Leaked: a block with its allocated bit set goes back through a page run.
    /// ```
    #[inline(always)]
    pub fn set_uncounted(self) {
        // SAFETY: as in `set`.
        unsafe {
            let w = (*self.alloc).load(Ordering::Relaxed);
            (*self.alloc).store(w | self.bit, Ordering::Release);
        }
    }
}

/// Sets the mark bit of block `p`; returns true if this call set it (false
/// if it was set already). The bit is found from the page descriptor in a
/// few arithmetic steps, and an already-set bit costs a load, not a
/// read-modify-write. (A marker's hot path, an object's edges, is
/// [`mark_blocks`].)
///
/// The bit is set sequentially consistent, which costs nothing over
/// acquire-release where it matters (a locked `or` on x86-64, `ldsetal` on
/// AArch64): a collector that sets it and then reads the block's fields
/// with sequentially consistent loads pairs with a writer that stores a
/// field, fences (`SeqCst`) and then reads the bit (Dekker): either the
/// collector reads the store or the writer sees the bit.
///
/// # Safety
/// `p` points into a live block of this allocator allocated with an
/// alignment of at most 2 MiB (a block aligned past that has no page), no
/// further than its first 64 KiB (a huge block's later slices have no page
/// descriptor of their own), and its page stays live during the call. The
/// start of an object a collector allocated meets all three.
///
/// # Examples
/// ```
/// use std::alloc::{GlobalAlloc, Layout};
/// let layout = Layout::from_size_align(40, 8).unwrap();
/// // SAFETY: a non-zero-sized layout; the block is live while marked, then
/// // freed once.
/// unsafe {
///     let p = loam_heap::LoamAlloc.alloc(layout);
///     let page = loam_heap::PageRef::of(p);
///     page.clear_marks();
///     assert!(loam_heap::mark_block(p));
///     assert!(!loam_heap::mark_block(p));
///     assert!(page.is_marked(page.block_index(p)));
///     page.clear_mark(page.block_index(p));
///     assert!(!page.is_marked(page.block_index(p)));
///     loam_heap::LoamAlloc.dealloc(p, layout);
/// }
/// ```
#[inline]
pub unsafe fn mark_block(p: *const u8) -> bool {
    // SAFETY: `p` is in a live block (caller).
    let bits = unsafe { AllocatedBit::of(segment::page_of(p), p.cast_mut()) };
    // SAFETY: the word is an atomic in a segment header that stays mapped
    // while the block is live.
    let word = unsafe { &*bits.mark };
    if word.load(Ordering::Relaxed) & bits.bit != 0 {
        return false;
    }
    word.fetch_or(bits.bit, Ordering::SeqCst) & bits.bit == 0
}

/// [`mark_block`] for each of `blocks`, in order, calling `newly` with
/// each block whose bit this call set (once for a block listed twice).
/// Blocks in a row whose bits share a bitmap word (up to 64 neighbouring
/// blocks of a page: objects allocated one after another, such as a
/// tree's sibling leaves or an array's elements made in a loop) are
/// marked with one `fetch_or`: the read-modify-write, a full barrier on
/// x86-64, is most of a mark's cost per object once the object is in the
/// cache.
///
/// Every bit it sets, it sets with a sequentially consistent `fetch_or`
/// after a relaxed look, as [`mark_block`] does, so the pairing described
/// there holds for each block alike.
///
/// # Safety
/// As [`mark_block`], for every block.
///
/// # Examples
/// ```
/// use std::alloc::{GlobalAlloc, Layout};
/// let layout = Layout::from_size_align(24, 8).unwrap();
/// // Non-zero-sized layouts; the blocks are live while marked, then
/// // freed once each.
/// // SAFETY: as just said.
/// unsafe {
///     let ps: Vec<*mut u8> = (0..4).map(|_| loam_heap::LoamAlloc.alloc(layout)).collect();
///     assert!(ps.iter().all(|p| !p.is_null()));
///     for &p in &ps {
///         loam_heap::PageRef::of(p).clear_mark(loam_heap::PageRef::of(p).block_index(p));
///     }
///     assert!(loam_heap::mark_block(ps[1]));
///     let blocks: Vec<usize> = [0, 1, 2, 2, 3].iter().map(|&i| ps[i] as usize).collect();
///     let mut newly = Vec::new();
///     loam_heap::mark_blocks(&blocks, |b| newly.push(b));
///     assert_eq!(newly, [ps[0] as usize, ps[2] as usize, ps[3] as usize]);
///     for p in ps {
///         loam_heap::LoamAlloc.dealloc(p, layout);
///     }
/// }
/// ```
#[inline]
pub unsafe fn mark_blocks(blocks: &[usize], mut newly: impl FnMut(usize)) {
    /// The most list entries one `fetch_or` covers: a word's 64 blocks
    /// (a run with repeats is split, at the cost of one more `fetch_or`).
    const GROUP: usize = 64;
    let bits_of = |b: usize| {
        let p = b as *mut u8;
        // SAFETY: `b` is in a live block (caller).
        unsafe { AllocatedBit::of(segment::page_of(p), p) }
    };
    let mut i = 0;
    // The first block's bits of the group that starts at `i`, when the
    // last group ended at a block of another word.
    let mut next = None;
    while i < blocks.len() {
        let first = next.take().unwrap_or_else(|| bits_of(blocks[i]));
        // The group's bits by their place in the word: a byte each, so
        // that the array's setup is a store or two (a `u64` each was a
        // 512-byte `memset` per group, 2% of a mark).
        let mut bits = [0u8; GROUP];
        bits[0] = first.bit.trailing_zeros() as u8;
        let mut mask = first.bit;
        let mut j = i + 1;
        while j < blocks.len() && j - i < GROUP {
            let b = bits_of(blocks[j]);
            if b.mark != first.mark {
                next = Some(b);
                break;
            }
            bits[j - i] = b.bit.trailing_zeros() as u8;
            mask |= b.bit;
            j += 1;
        }
        // An atomic in a segment header, mapped while its blocks are live
        // (caller).
        // SAFETY: as just said.
        let word = unsafe { &*first.mark };
        // As `mark_block`: a load when every bit is set, else one
        // sequentially consistent `fetch_or` for all of them.
        let mut set = if word.load(Ordering::Relaxed) & mask == mask {
            0
        } else {
            mask & !word.fetch_or(mask, Ordering::SeqCst)
        };
        for (k, &place) in bits[..j - i].iter().enumerate() {
            let bit = 1 << place;
            if set & bit != 0 {
                set &= !bit;
                newly(blocks[i + k]);
            }
        }
        i = j;
    }
}

/// Allocates a block for a collector's object, as [`crate::LoamAlloc`]
/// would, and returns it with its [`AllocatedBit`] (null on failure). Set
/// `flags` on the block's page first ([`PageRef::set_flags`]), and note
/// `tag` there ([`PageRef::tag`]: a collector's own number, such as the id
/// of the runtime the object belongs to; 0 for none). The caller
/// writes the object, then sets the bit: a sweeper that sees the bit sees the
/// object. An alignment above 2 MiB gets null: such a block has a mapping
/// of its own and no page to keep its bit.
///
/// A block whose allocated bit is set must be freed through
/// [`crate::FreeBatch::push_page_run`], whose drain clears the bit.
///
/// # Panics
/// If `align` is not a power of two (as `Layout` requires): 0 divided by
/// zero deep in the span path, and other alignments were not honoured.
/// A constant alignment, as the runtime's, costs nothing once inlined.
///
/// # Examples
/// ```
/// use std::alloc::{GlobalAlloc, Layout};
/// let layout = Layout::from_size_align(48, 8).unwrap();
/// // SAFETY: a non-zero-sized layout. Kept live so the page stays.
/// let keep = unsafe { loam_heap::LoamAlloc.alloc(layout) };
/// let (p, bit) = loam_heap::alloc_object(48, 8, 0, 7);
/// assert!(!p.is_null());
/// // SAFETY: `p` is live while its page is read.
/// assert_eq!(unsafe { loam_heap::PageRef::of(p) }.tag(), 7);
/// // SAFETY: a fresh 48-byte block; freed once below.
/// unsafe { p.cast::<u64>().write(7) };
/// bit.unwrap().set();
/// // SAFETY: `p` is live while its page is read.
/// let page = unsafe { loam_heap::PageRef::of(p) };
/// let i = page.block_index(p);
/// assert!(page.is_allocated(i));
/// // A sweeper on another thread frees it as a run of one block...
/// let addr = p as usize;
/// std::thread::spawn(move || {
///     let mut batch = loam_heap::FreeBatch::new();
///     let block = std::ptr::NonNull::new(addr as *mut u8).unwrap();
///     // SAFETY: live, from this allocator, never used again.
///     unsafe { batch.push_page_run(&[block]) };
/// })
/// .join()
/// .unwrap();
/// // ...and this thread, its owner, takes it back and clears the bit.
/// loam_heap::collect();
/// assert!(!page.is_allocated(i) && page.flags() & loam_heap::RUN_PENDING == 0);
/// // SAFETY: live, from this allocator, freed once.
/// unsafe { loam_heap::LoamAlloc.dealloc(keep, layout) };
/// ```
// Always inlined: left to LLVM it stayed a call from the runtime's array
// allocation, whose tuple came back through the stack; inlined, a million
// small managed strings cost 7% less.
#[inline(always)]
pub fn alloc_object(size: usize, align: usize, flags: u8, tag: u16) -> (*mut u8, Option<AllocatedBit>) {
    assert!(
        align.is_power_of_two(),
        "heap: alloc_object: alignment {align} is not a power of two"
    );
    let (p, page) = crate::alloc::alloc_with_page(size, align);
    if p.is_null() {
        return (p, None);
    }
    // SAFETY: `page` holds the fresh block `p`, which the caller holds, and
    // is this thread's own (the tag's writer). (Sealed: every path of
    // `alloc_with_page` returns a page sealed for the current epoch,
    // `seal.rs`.)
    unsafe {
        if flags != 0 {
            (*page).set_user_flags(flags);
        }
        (*page).note_user_tag(tag);
        crate::lend::bit_out();
        (p, Some(AllocatedBit::of(page, p)))
    }
}

/// A size class for [`alloc_object_in`], chosen at compile time: the class
/// lookup and the block-index division's constant then cost nothing per
/// allocation.
///
/// # Examples
/// ```
/// const C: Option<loam_heap::ObjectClass> = loam_heap::ObjectClass::of(24, 8);
/// let class = C.unwrap();
/// assert_eq!(class.size(), 24);
/// assert!(loam_heap::ObjectClass::of(1 << 20, 8).is_none()); // a span, not a class
/// let (p, bit) = loam_heap::alloc_object_in(class, 0, 0);
/// assert!(!p.is_null());
/// // SAFETY: a fresh 24-byte block.
/// unsafe { p.cast::<u64>().write(7) };
/// bit.unwrap().set();
/// # // Leaked: a block with its allocated bit set goes back through a page run.
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectClass {
    class: usize,
    size: usize,
    recip: u64,
}

impl ObjectClass {
    /// The class serving `size` bytes at alignment `align` (a power of two),
    /// or `None` if none does (the request needs a span of its own: use
    /// [`alloc_object`]).
    pub const fn of(size: usize, align: usize) -> Option<ObjectClass> {
        match crate::size_class::const_class(size, align) {
            Some(c) => Some(ObjectClass {
                class: c,
                size: crate::size_class::const_class_size(c),
                recip: crate::size_class::const_recip(c),
            }),
            None => None,
        }
    }

    /// The class serving `size` bytes at the heap's minimum alignment (8),
    /// found at run time with two table reads: for sizes known only then,
    /// such as managed arrays', so that they take [`alloc_object_in`]'s
    /// inlined fast path too. `None` past [`SMALL_MAX`](crate::SMALL_MAX).
    ///
    /// # Examples
    /// ```
    /// let c = loam_heap::ObjectClass::small(40).unwrap();
    /// assert_eq!(Some(c), loam_heap::ObjectClass::of(40, 8));
    /// assert!(loam_heap::ObjectClass::small(1 << 20).is_none());
    /// ```
    #[inline]
    pub fn small(size: usize) -> Option<ObjectClass> {
        use crate::size_class::{class_of, CLASS_SIZE, RECIP, SMALL_MAX};
        if size > SMALL_MAX {
            return None;
        }
        let class = class_of(size);
        Some(ObjectClass {
            class,
            size: CLASS_SIZE[class] as usize,
            recip: RECIP[class],
        })
    }

    /// The class's block size: what a block of it holds.
    pub const fn size(self) -> usize {
        self.size
    }
}

/// [`alloc_object`] for a class known at compile time: the common case (the
/// thread's current page of the class has a free block) is inlined whole,
/// with no class lookup and no division; anything else goes out of line.
#[inline(always)]
pub fn alloc_object_in(class: ObjectClass, flags: u8, tag: u16) -> (*mut u8, Option<AllocatedBit>) {
    let got = alloc_object_in_uncounted(class, flags, tag);
    if got.1.is_some() {
        crate::lend::bit_out();
    }
    got
}

/// [`alloc_object_in`] for a caller that sets the bit with
/// [`AllocatedBit::set_uncounted`] before anything else runs on its
/// thread: the bit is not counted among those its thread holds unset
/// (which keep the thread from lending its heap, [`crate::lend`]), which
/// saves a collector's allocation path two thread-local updates.
///
/// # Safety
/// The bit is set with [`AllocatedBit::set_uncounted`] (`set` would take
/// another bit off the count), and nothing that lends the calling thread's
/// heap ([`crate::lend`], loam's `Mutator::blocking`, [`crate::lend_idle`],
/// so a managed pool's park: a `join` that waits) runs on this thread
/// between this call and that set: another thread could then write the
/// bit's word alongside it.
///
/// # Examples
/// ```
/// let class = loam_heap::ObjectClass::of(24, 8).unwrap();
/// // SAFETY: the bit is set at once.
/// let (p, bit) = unsafe { loam_heap::alloc_object_in_unlendable(class, 0, 0) };
/// assert!(!p.is_null());
/// // SAFETY: a fresh 24-byte block.
/// unsafe { p.cast::<u64>().write(7) };
/// bit.unwrap().set_uncounted();
/// # // Leaked: a block with its allocated bit set goes back through a page run.
/// ```
#[inline(always)]
pub unsafe fn alloc_object_in_unlendable(
    class: ObjectClass,
    flags: u8,
    tag: u16,
) -> (*mut u8, Option<AllocatedBit>) {
    alloc_object_in_uncounted(class, flags, tag)
}

/// [`alloc_object_in`] without counting the bit.
#[inline(always)]
fn alloc_object_in_uncounted(class: ObjectClass, flags: u8, tag: u16) -> (*mut u8, Option<AllocatedBit>) {
    let (p, page) = match crate::alloc::alloc_class_fast(class.class) {
        Some(hit) => hit,
        None => {
            let (p, page) = crate::alloc::alloc_class_with_page_slow(class.class);
            if p.is_null() {
                return (p, None);
            }
            (p, page)
        }
    };
    // SAFETY: `page` holds the fresh block `p` of class `class`, which the
    // caller holds, and is this thread's own (the tag's writer). (Sealed:
    // the fast path allocates only from a page sealed for the current
    // epoch, and the slow one seals.)
    unsafe {
        if flags != 0 {
            (*page).set_user_flags(flags);
        }
        (*page).note_user_tag(tag);
        (p, Some(AllocatedBit::of_class(page, p, class.recip)))
    }
}

impl fmt::Debug for PageRef<'_> {
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

/// A snapshot of one page, by value: what safe code may know of a page
/// without holding it live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageInfo {
    /// Address of block 0.
    pub start: usize,
    /// Bytes per block.
    pub block_size: usize,
    /// Blocks the page holds.
    pub capacity: usize,
    /// Blocks handed out and not yet returned to the page.
    pub used: usize,
    /// A large or huge span (one block).
    pub is_large: bool,
}

impl PageInfo {
    fn of(page: PageRef<'_>) -> PageInfo {
        PageInfo {
            start: page.start() as usize,
            block_size: page.block_size(),
            capacity: page.capacity(),
            used: page.used(),
            is_large: page.is_large(),
        }
    }
}

/// Calls `f` with a snapshot of every page of the calling thread's heap.
/// If `f` allocates or frees, pages may be missed or seen twice: those it
/// creates or releases, and others (a segment that fills up or has room
/// again moves in the heap's list of segments, which the walk takes 64
/// pages at a time).
///
/// # Examples
/// ```
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// let b = Box::new([0u8; 100]);
/// let mut pages = 0;
/// loam_heap::for_each_local_page(|p| pages += (p.block_size == 112 && p.used > 0) as usize);
/// assert!(pages >= 1);
/// drop(b);
/// ```
pub fn for_each_local_page(mut f: impl FnMut(PageInfo)) {
    let heap = crate::alloc::settled_heap();
    if !crate::alloc::is_live(heap) {
        return;
    }
    // Snapshot first, then call `f`: `f` may allocate or free, which could
    // release a page (or unmap a huge segment) under a live reference.
    let mut batch = [None::<PageInfo>; 64];
    let mut skip = 0usize;
    loop {
        let mut n = 0usize;
        let mut seen = 0usize;
        // SAFETY: the calling thread's own heap; nothing runs between the
        // walk's reads but this closure, which only copies values.
        unsafe {
            (*heap).for_each_own_page(|p| {
                if seen >= skip && n < batch.len() {
                    batch[n] = Some(PageInfo::of(PageRef {
                        page: p,
                        _live: PhantomData,
                    }));
                    n += 1;
                }
                seen += 1;
            })
        };
        for info in batch.iter_mut().take(n) {
            f(info.take().expect("filled above"));
        }
        if n < batch.len() {
            return;
        }
        skip += n;
    }
}

/// Calls `f` on every page of every thread's heap: for a collector's
/// walk, in a pause or with the mutators running. No lock is held while
/// `f` runs, so `f` may allocate and free, and other threads may too; a
/// segment the walk visits stays mapped until it returns (one that dies
/// meanwhile is unmapped once this walk and the others under way as it
/// died have returned), so `f` may read any page it is given.
/// Pages set up after the walk began may be missed.
///
/// # Safety
/// Pages owned by running threads change while `f` reads them, and may be
/// released and set up again with another geometry: only their atomic
/// fields (`used`, the bitmaps, [`PageRef::sealed_words`]) are meaningful
/// then, and the geometry only of pages whose blocks `f` knows to be live
/// (a collector's objects before its sweep). `f` must not keep a
/// `PageRef` past its call.
///
/// # Examples
/// ```
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// let b = Box::new(7u64);
/// let mut used = Vec::new();
/// // SAFETY: the closure reads a counter and keeps no PageRef.
/// unsafe { loam_heap::for_each_page(|p| used.push(p.used())) };
/// assert!(used.iter().sum::<usize>() >= 1);
/// drop(b);
/// ```
pub unsafe fn for_each_page(mut f: impl FnMut(PageRef<'_>)) {
    segment::for_each_segment_unlocked(|seg| {
        for_each_page_in(seg, &mut |p| {
            f(PageRef {
                page: p,
                _live: PhantomData,
            })
        });
    });
}
