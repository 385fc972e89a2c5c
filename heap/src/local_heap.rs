//! The per-thread heap: size-class page queues, the allocation and local-free
//! paths, the slow path's housekeeping, and large spans. Taking back the
//! collector's page runs is in `runs.rs`; purging and the visits to exited
//! threads' heaps in `tidy.rs` (child modules: they share the heap's
//! private fields).

mod runs;
mod tidy;

use crate::block;
use crate::guard;
use crate::options;
use crate::os;
use crate::page::{Page, PageQueue, PageState};
use crate::thread_cache::ThreadCache;
use crate::remote::{route_chains, Inbox, REMOTE};
use crate::remote_cache::{page_key, RemoteCache};
use crate::segment::{
    self, Segment, SegmentKind, HEADER_SLICES, SEGMENT_SIZE, SLICES, SLICE_SHIFT, SLICE_SIZE,
    USABLE_SLICES,
};
use crate::size_class::{
    class_for_aligned, class_of, slices_for_class, CLASS_SIZE, MIN_BLOCK, NUM_CLASSES, SMALL_MAX,
};
use crate::sync::{AtomicPtr, Ordering};
use std::ptr;

/// A thread's heap.
///
/// # Invariants
/// - Every page of every segment in `segments` is owned by this heap; each
///   `Small` page is in exactly one of `queues[page.class]` or `full`
///   (`in_full` says which); `Large`/`Huge` pages are in no queue.
/// - `current[c]` is null or `queues[c].first`.
/// - `dirty_segments` counts segments in `segments` with a non-zero `dirty`.
/// - All fields but `queue` are touched only by the thread that owns the heap,
///   or by whoever holds it exclusively once abandoned (the orphan lock) or
///   while lent (the lent lock, `lend.rs`: its owner's `HEAP` names it no
///   more until it is unlisted), with two exceptions for walkers of all heaps (`stats`): `all_next`,
///   written once before the heap is published, and the thread cache's
///   per-class words, with their counts of other heaps' blocks kept
///   (`ThreadCache::foreign_kept`), atomics read through a pointer to
///   them alone.
#[repr(C)]
pub(crate) struct LocalHeap {
    /// Where other threads send this heap's blocks back, as chains and as
    /// page runs (the only field other threads write).
    pub(crate) queue: Inbox,
    /// Indexed by class; the extra last entry (the class of large spans)
    /// stays null.
    current: [*mut Page; NUM_CLASSES + 1],
    queues: [PageQueue; NUM_CLASSES],
    full: PageQueue,
    /// Our segments, those with free slices first (`has_room`): a walk
    /// for free slices (a page's allocation, a purge, giving empty
    /// segments away) stops at the first without. A heap of thousands of
    /// full segments read every header at each new segment it mapped, and
    /// at each purge (every half purge delay).
    pub(crate) segments: crate::queue::Queue<Segment>,
    /// Outgoing batches of blocks this thread freed for other heaps.
    pub(crate) cache: RemoteCache,
    /// Blocks this thread freed lately (its own and other heaps'), kept for
    /// its next plain allocations of their class (`thread_cache.rs`).
    pub(crate) tcache: ThreadCache,
    next_tcache_flush_ms: u64,
    dirty_segments: usize,
    next_purge_ms: u64,
    next_orphan_visit_ms: u64,
    slow_count: u32,
    /// Pages in use (any state but free), for abandon/adopt statistics.
    pub(crate) page_count: usize,
    /// Next heap on the orphan list (under the orphan lock).
    pub(crate) orphan_next: *mut LocalHeap,
    /// Next heap on the lent list (under the lent lock, `lend.rs`).
    pub(crate) lent_next: *mut LocalHeap,
    /// When the heap was last lent (`os::now_ms`; under the lent lock).
    pub(crate) lent_at_ms: u64,
    /// Lent without being tidied first (`lend::lend_idle`): its empty
    /// pages and wholly free segments are not yet where a borrower can
    /// take them, so the next borrower's drain releases and gives them
    /// whether or not it finds anything in the queue (`drain_lent`).
    /// Written by the owner before it lists the heap, and under the lent
    /// lock.
    pub(crate) lent_untidy: bool,
    /// Next heap ever created (written once before publication).
    pub(crate) all_next: *mut LocalHeap,
    /// Whether `page_alloc` may adopt exited threads' and lent heaps'
    /// segments: not the fallback heap's (`alloc::with_fallback`), which is never abandoned:
    /// segments it took stayed with it for good, out of reach of the
    /// thread that takes the exited heap next.
    pub(crate) adopts: bool,
}

/// The inbox of the heap that owns the segment holding `p`.
///
/// # Safety
/// `p` is in a live segment: a live block, or a dead one its page still
/// counts as used.
#[inline(always)]
pub(crate) unsafe fn owner_inbox(p: *const u8) -> *const Inbox {
    // SAFETY: the segment is mapped (caller); heaps are never unmapped.
    unsafe { ptr::addr_of!((*(*segment::segment_of(p)).owner.load(Ordering::Relaxed)).queue) }
}

/// Every heap ever created, newest first. Heaps are never unmapped, so a
/// walker needs no lock: it follows `all_next` links written before each
/// heap was published with a Release CAS.
pub(crate) static ALL_HEAPS: AtomicPtr<LocalHeap> = AtomicPtr::new(ptr::null_mut());

impl LocalHeap {
    /// Maps, initializes and registers a new heap; null if out of memory.
    pub(crate) fn create() -> *mut LocalHeap {
        // The settings, and the page size the layout assumes, before the
        // first mapping.
        options::init();
        let size = std::mem::size_of::<LocalHeap>().next_multiple_of(os::OS_PAGE);
        let heap = os::map_aligned(size, os::OS_PAGE, false).cast::<LocalHeap>();
        if heap.is_null() {
            return heap;
        }
        // SAFETY: a fresh private mapping of the right size and alignment.
        unsafe {
            heap.write(LocalHeap {
                queue: Inbox::new(),
                current: [ptr::null_mut(); NUM_CLASSES + 1],
                queues: [PageQueue::NEW; NUM_CLASSES],
                full: PageQueue::NEW,
                segments: crate::queue::Queue::NEW,
                cache: RemoteCache::for_thread(),
                tcache: ThreadCache::new(),
                next_tcache_flush_ms: 0,
                dirty_segments: 0,
                next_purge_ms: 0,
                next_orphan_visit_ms: 0,
                slow_count: 0,
                page_count: 0,
                orphan_next: ptr::null_mut(),
                lent_next: ptr::null_mut(),
                lent_at_ms: 0,
                lent_untidy: false,
                all_next: ptr::null_mut(),
                adopts: true,
            });
        }
        let mut head = ALL_HEAPS.load(Ordering::Relaxed);
        loop {
            // SAFETY: unpublished, so ours alone.
            unsafe { (*heap).all_next = head };
            match ALL_HEAPS.compare_exchange_weak(head, heap, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        heap
    }

    // ---------------------------------------------------------------- alloc

    /// Allocates a block of class `c`: the fast path.
    #[inline(always)]
    pub(crate) fn alloc_class(&mut self, c: usize) -> *mut u8 {
        // The block of this class this thread freed last, hot in its cache.
        let p = self.tcache.take(c);
        if !p.is_null() {
            return p;
        }
        let page = self.current[c];
        if !page.is_null() {
            // SAFETY: `current[c]` is a live page of ours (invariant).
            let p = unsafe { (*page).try_alloc() };
            if !p.is_null() {
                return p;
            }
        }
        self.alloc_class_slow(c)
    }

    /// The fast path of [`LocalHeap::alloc_class_with_page`] alone: a block
    /// of the current page of class `c`, if it has one and is sealed for
    /// the current seal epoch (both serve collectors' objects only).
    #[inline(always)]
    pub(crate) fn alloc_class_fast(&mut self, c: usize) -> Option<(*mut u8, *mut Page)> {
        let page = self.current[c];
        if page.is_null() {
            return None;
        }
        // A collector's object goes only into a page sealed for the current
        // epoch (`seal.rs`); else the slow path, which seals it. One load
        // and compare on the descriptor's line the pop writes anyway.
        // SAFETY: `current[c]` is a live page of ours (invariant).
        if !unsafe { crate::seal::is_sealed(page) } {
            return None;
        }
        // SAFETY: as above.
        let p = unsafe { (*page).try_alloc() };
        (!p.is_null()).then_some((p, page))
    }

    /// As [`alloc_class`](Self::alloc_class), also returning the page.
    #[inline(always)]
    pub(crate) fn alloc_class_with_page(&mut self, c: usize) -> (*mut u8, *mut Page) {
        if let Some(hit) = self.alloc_class_fast(c) {
            return hit;
        }
        let p = self.alloc_class_slow(c);
        if p.is_null() {
            return (p, ptr::null_mut());
        }
        // SAFETY: `p` is a fresh live block of ours; its page is ours, and
        // its allocated bit is not set yet (the fast path's seal check
        // missed, or the slow path moved to another page).
        unsafe {
            let page = segment::page_of(p);
            crate::seal::seal_before_alloc(page);
            (p, page)
        }
    }

    /// Allocates `size` bytes aligned to `align`, any size.
    #[inline]
    pub(crate) fn alloc_general(&mut self, size: usize, align: usize) -> *mut u8 {
        if size <= SMALL_MAX && align <= MIN_BLOCK {
            return self.alloc_class(class_of(size));
        }
        match class_for_aligned(size, align) {
            Some(c) => self.alloc_class(c),
            None => self.alloc_large(size, align),
        }
    }

    #[cold]
    #[inline(never)]
    fn alloc_class_slow(&mut self, c: usize) -> *mut u8 {
        // The class's lone page with room (full pages are parked until a
        // block comes back), with none of its own frees waiting: its bump
        // region a step further (`Page::extend_bump`), without
        // housekeeping, which runs when a page's blocks have all been
        // handed out, as before the steps. (A block coming back to the
        // page through the inbox or a page run waits for that
        // housekeeping.) Or a block the fast path did not take (a
        // collector's allocation comes here when the page is not sealed
        // for its epoch).
        let page = self.current[c];
        if !page.is_null()
            // SAFETY: `current[c]` is a live page of ours (invariant).
            && unsafe {
                (*page).local_free.is_null()
                    && (*page).next.is_null()
                    && self.queues[c].first == page
                    && ((*page).has_ready() || (*page).extend_bump())
            }
        {
            // SAFETY: as above; it has a block ready, or the step left it
            // one.
            return unsafe { (*page).try_alloc() };
        }
        self.tcache.note_allocating();
        self.housekeeping();
        // A page of the class with a block ready, its frees merged (or
        // room below its bump limit: touched already, as on a page a
        // collector emptied); else the first page with bump room left, a
        // step further; else a new page. Pages with room but nothing
        // ready are looked at up to `SEARCH` of them, and those passed
        // over go to the back of the queue, so that frees on the pages
        // behind them are found next time and the queue is not walked
        // whole at every step.
        const SEARCH: usize = 8;
        let mut bumpable: *mut Page = ptr::null_mut();
        let mut looked = 0;
        let mut page = self.queues[c].first;
        while !page.is_null() && looked < SEARCH {
            // SAFETY: pages in our queues are live and ours (invariant).
            unsafe {
                let next = (*page).next;
                (*page).collect();
                if (*page).has_ready() {
                    return self.allocate_from(c, page);
                }
                if (*page).bump < (*page).bump_end {
                    looked += 1;
                    if bumpable.is_null() {
                        bumpable = page;
                    } else if !next.is_null() {
                        self.queues[c].remove(page);
                        self.queues[c].push_back(page);
                    }
                } else {
                    // Full: park it until one of its blocks comes back.
                    self.queues[c].remove(page);
                    (*page).in_full = true;
                    self.full.push_back(page);
                }
                page = next;
            }
        }
        if !bumpable.is_null() {
            // SAFETY: a page of our queue with bump room left, which the
            // step hands out.
            unsafe {
                (*bumpable).extend_bump();
                return self.allocate_from(c, bumpable);
            }
        }
        let slices = slices_for_class(c);
        let page = self.page_alloc(PageSpec {
            state: PageState::Small,
            class: c,
            block: CLASS_SIZE[c] as usize,
            slices,
            // Blocks end before the guard page, if any (at least 7 still
            // fit: the largest class has 8 to a 1 MiB page).
            capacity: ((slices << SLICE_SHIFT) - guard::tail()) / CLASS_SIZE[c] as usize,
        });
        if page.is_null() {
            self.current[c] = ptr::null_mut();
            return ptr::null_mut();
        }
        // SAFETY: a fresh page of ours, in no queue.
        unsafe {
            self.queues[c].push_front(page);
            self.current[c] = page;
            (*page).try_alloc()
        }
    }

    /// Makes `page`, of class `c`'s queue, the class's current page (at
    /// the queue's front) and takes a block from it (null if it has none
    /// ready, which the callers have made sure it has).
    ///
    /// # Safety
    /// `page` is a live page of ours in the queue of class `c`.
    unsafe fn allocate_from(&mut self, c: usize, page: *mut Page) -> *mut u8 {
        // SAFETY: the caller's: `page` is live, ours, in this queue.
        unsafe {
            if page != self.queues[c].first {
                self.queues[c].remove(page);
                self.queues[c].push_front(page);
            }
            self.current[c] = page;
            (*page).try_alloc()
        }
    }

    /// A span of its own for a request no class serves.
    #[cold]
    #[inline(never)]
    pub(crate) fn alloc_large(&mut self, size: usize, align: usize) -> *mut u8 {
        if align > crate::aligned::MAX_SEGMENT_ALIGN {
            // No segment can place it (`aligned.rs`).
            return crate::aligned::alloc(size, align);
        }
        self.housekeeping();
        // With room for the guard page after the block, if any.
        let tail = guard::tail();
        let slices = size.saturating_add(tail).div_ceil(SLICE_SIZE).max(1);
        let page = if align <= SLICE_SIZE && slices <= USABLE_SLICES {
            self.page_alloc(PageSpec {
                state: PageState::Large,
                class: NUM_CLASSES,
                block: (slices << SLICE_SHIFT) - tail,
                slices,
                capacity: 1,
            })
        } else {
            self.alloc_huge(size, align)
        };
        if page.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: a fresh page of ours with capacity 1.
        unsafe { (*page).try_alloc() }
    }

    /// A huge object: a segment of its own, cached or unmapped when it is
    /// freed (`segment.rs`, `HugeCache`).
    fn alloc_huge(&mut self, size: usize, align: usize) -> *mut Page {
        // Larger alignments never come here (`alloc_large`): the block would
        // start on a segment boundary, where `free` takes it for one of
        // `aligned.rs`'s spans.
        debug_assert!(align <= crate::aligned::MAX_SEGMENT_ALIGN);
        let offset = (HEADER_SLICES * SLICE_SIZE).next_multiple_of(align);
        let tail = guard::tail();
        let Some(map_size) = size
            .checked_add(offset + tail)
            .and_then(|s| s.checked_next_multiple_of(os::OS_PAGE))
        else {
            return ptr::null_mut();
        };
        // The block's whole 2 MiB units ask for huge pages; with the
        // header's too when no alignment pads the block (the header's
        // slices, then the block, fill that unit: only the header's
        // untouched part becomes resident with it). Not a padded block's
        // first unit, which would be resident 2 MiB at a time for a block
        // that may be small.
        let huge_from = if offset == HEADER_SLICES * SLICE_SIZE { 0 } else { offset };
        let (seg, zeroed) = Segment::create_huge(self, map_size, huge_from);
        if seg.is_null() {
            return ptr::null_mut();
        }
        self.link_segment(seg);
        let page = Segment::page(seg, offset >> SLICE_SHIFT);
        let block = if tail == 0 {
            map_size - offset
        } else {
            // The block runs to the guard at the end of the mapping, which a
            // cached one (perhaps larger than asked for) has had since it
            // was made, and a fresh one gets now.
            // SAFETY: our fresh segment; its mapping's last OS page is past
            // every block.
            unsafe {
                let mapped = (*seg).map_size;
                if zeroed {
                    guard::place_huge(seg.cast(), mapped);
                }
                mapped - offset - tail
            }
        };
        // SAFETY: our fresh segment.
        unsafe {
            let first = offset >> SLICE_SHIFT;
            (*seg).slice_block_size[first].store(block, Ordering::Relaxed);
            (*seg).slice_first[first].store(first as u8, Ordering::Relaxed);
        }
        // SAFETY: a descriptor of our fresh segment.
        unsafe {
            (*page).init(
                PageState::Huge,
                NUM_CLASSES,
                seg as usize + offset,
                block,
                block.div_ceil(SLICE_SIZE),
                1,
                zeroed,
            );
        }
        self.page_count += 1;
        page
    }

    /// Takes `slices` free slices from our segments (adopting an orphan's,
    /// taking a cached one, borrowing a lent heap's or mapping a new
    /// segment if none has room) and sets them up as a page.
    fn page_alloc(&mut self, spec: PageSpec) -> *mut Page {
        let mut tried_orphans = false;
        let mut tried_lent = false;
        loop {
            let mut seg = self.segments.first;
            // SAFETY: segments on our list are live and ours.
            while !seg.is_null() && unsafe { has_room(seg) } {
                // SAFETY: as just said.
                unsafe {
                    let free = (*seg).free_slices.load(Ordering::Relaxed);
                    if let Some(i) = Segment::find_free_run(free, spec.slices) {
                        return self.page_init_in(seg, i, spec);
                    }
                    seg = (*seg).next;
                }
            }
            if !tried_orphans && self.adopts && crate::abandon::orphan_count() > 0 {
                tried_orphans = true;
                self.visit_orphans(true, false);
                continue;
            }
            // A segment another heap gave up, still resident.
            let seg = self.take_cached_segment();
            if !seg.is_null() {
                return self.page_init_in(seg, HEADER_SLICES, spec);
            }
            // What a waiting thread's heap holds free (`lend.rs`): its
            // wholly free segments to the cache, else its segments.
            if !tried_lent && crate::lend::lent_count() > 0 {
                tried_lent = true;
                if crate::lend::borrow(self, spec.slices) {
                    continue;
                }
            }
            break;
        }
        let seg = Segment::create(self, SegmentKind::Normal, SEGMENT_SIZE, None);
        if seg.is_null() {
            return ptr::null_mut();
        }
        self.link_segment(seg);
        self.page_init_in(seg, HEADER_SLICES, spec)
    }

    fn page_init_in(&mut self, seg: *mut Segment, i: usize, spec: PageSpec) -> *mut Page {
        let PageSpec {
            state,
            class,
            block,
            slices,
            capacity,
        } = spec;
        // The guards inside the span first: a refusal leaves the slices
        // free, and the allocation fails.
        // SAFETY: `seg` is ours; the slices are free.
        if !unsafe { guard::open(seg, i, slices) } {
            return ptr::null_mut();
        }
        let is_zero = self.claim_slices(seg, run_mask(i, slices));
        // SAFETY: `seg` is ours and the slices are now ours too.
        unsafe {
            let page = Segment::page(seg, i);
            (*page).init(
                state,
                class,
                Segment::slice_start(seg, i),
                block,
                slices,
                capacity,
                is_zero,
            );
            set_span(seg, i, 1, slices, block);
            // SAFETY: our span, set up with `guard::tail()` to spare.
            guard::place(seg, i, slices);
            self.page_count += 1;
            page
        }
    }

    /// Takes the free slices in `mask` of our segment `seg` (all must be
    /// free); returns whether they read as zero (none was dirty).
    fn claim_slices(&mut self, seg: *mut Segment, mask: u64) -> bool {
        // SAFETY: `seg` is ours (caller), so are its slice bitmaps.
        unsafe {
            let free = (*seg).free_slices.load(Ordering::Relaxed);
            debug_assert_eq!(free & mask, mask);
            (*seg).free_slices.store(free & !mask, Ordering::Relaxed);
            if free & !mask == 0 {
                // Full: behind those with room.
                self.relink_segment(seg);
            }
            let dirty = (*seg).dirty.load(Ordering::Relaxed);
            if dirty & mask != 0 {
                (*seg).dirty.store(dirty & !mask, Ordering::Relaxed);
                if dirty & !mask == 0 {
                    self.dirty_segments -= 1;
                }
            }
            dirty & mask == 0
        }
    }

    /// Puts `seg` (ours, on no list) on our list: first if it has free
    /// slices, last if not.
    fn link_segment(&mut self, seg: *mut Segment) {
        // SAFETY: `seg` is ours and on no list; our list is ours.
        unsafe {
            if has_room(seg) {
                self.segments.push_front(seg);
            } else {
                self.segments.push_back(seg);
            }
        }
    }

    fn unlink_segment(&mut self, seg: *mut Segment) {
        // SAFETY: `seg` is on our list.
        unsafe { self.segments.remove(seg) };
    }

    /// Puts our segment `seg` back in its place after its free slices ran
    /// out or came back (`link_segment`).
    fn relink_segment(&mut self, seg: *mut Segment) {
        self.unlink_segment(seg);
        self.link_segment(seg);
    }

    // ----------------------------------------------------------------- free

    /// Frees block `p` of our page `page`: the local fast path.
    ///
    /// # Safety
    /// `page` is the page of `p`, this heap owns it, and `p` is a live block
    /// that nobody will use again.
    #[inline(always)]
    pub(crate) unsafe fn free_local(&mut self, page: *mut Page, p: *mut u8) {
        // SAFETY: the caller's contract.
        unsafe {
            (*page).push_local(p);
            self.after_local_free(page);
        }
    }

    /// Frees block `p`, which this heap owns, to its page: the free's
    /// thread cache found no room for it (its class full, or a block past
    /// the cache's sizes), so it is not asked again.
    ///
    /// # Safety
    /// As [`LocalHeap::free_local`]; `p`'s segment is owned by this heap.
    #[inline(always)]
    pub(crate) unsafe fn free_owned(&mut self, p: *mut u8) {
        // `p` is a live block of ours (caller), so its page is a live
        // page of ours, whose descriptor this thread writes anyway.
        // SAFETY: as just said.
        unsafe {
            let page = segment::page_of(p);
            if block::CHECKED && !(*page).is_block_start(p) {
                block::invalid_free(
                    p,
                    "not the start of a block (an interior pointer, or a block already freed)",
                );
            }
            block::check_not_free(p, (*page).block_size());
            self.free_local(page, p);
        }
    }

    /// Sends every block of the thread cache back: this heap's to their
    /// pages, others' towards their owners (through `cache`, which the
    /// caller flushes or lets fill).
    pub(crate) fn flush_thread_cache(&mut self) {
        if self.tcache.is_empty() {
            return;
        }
        let me: *mut LocalHeap = self;
        let drained = self.tcache.drain();
        for (class, k) in drained.blocks() {
            // Read before anything is kept again: sending blocks back
            // keeps none in the cache.
            let b = self.tcache.given_up(class, k);
            // A dead block whose page counts it as used (the cache's
            // invariant), so the segment and page are live.
            // SAFETY: as just said.
            unsafe {
                block::check_kept(b);
                let owner = (*segment::segment_of(b)).owner.load(Ordering::Relaxed);
                if owner == me {
                    self.free_drained(segment::page_of(b), b);
                } else {
                    let size = segment::block_size_of(b);
                    self.cache
                        .push(ptr::addr_of!((*owner).queue), page_key(b), b, size);
                }
            }
        }
    }

    /// Frees a block that came back through our remote queue (its sender
    /// already filled and poisoned it).
    ///
    /// # Safety
    /// As [`LocalHeap::free_local`], and `block::on_free` was applied to `p`.
    #[inline(always)]
    unsafe fn free_drained(&mut self, page: *mut Page, p: *mut u8) {
        // SAFETY: the caller's contract.
        unsafe {
            (*page).push_freed(p);
            self.after_local_free(page);
        }
    }

    #[inline(always)]
    unsafe fn after_local_free(&mut self, page: *mut Page) {
        // SAFETY: `page` is a live page of ours (callers).
        unsafe {
            if (*page).used() == 0 || (*page).in_full {
                // The common empty page is the class's current one (a block
                // allocated and freed at once): it stays, with no call.
                if !(*page).in_full && self.current[(*page).class as usize] == page {
                    return;
                }
                self.free_local_cold(page);
            }
        }
    }

    #[cold]
    #[inline(never)]
    unsafe fn free_local_cold(&mut self, page: *mut Page) {
        // SAFETY: `page` is a live page of ours (caller of `free_local`).
        unsafe {
            match (*page).state() {
                PageState::Small => {
                    let c = (*page).class as usize;
                    self.requeue_full(page);
                    if (*page).used() == 0 && self.current[c] != page {
                        self.queues[c].remove(page);
                        self.release_page(page);
                    }
                }
                PageState::Large | PageState::Huge => self.release_page(page),
                _ => crate::fatal("free of a block in a free or interior page descriptor"),
            }
        }
    }

    /// Gives an empty page's slices back to its segment (a huge segment goes
    /// back to the OS). The page is in no queue.
    unsafe fn release_page(&mut self, page: *mut Page) {
        #[cfg(feature = "expensive-checks")]
        // SAFETY: `page` is ours (caller).
        unsafe {
            (*page).assert_valid()
        };
        self.page_count -= 1;
        let seg = segment::segment_of(page.cast());
        // SAFETY: `page` is an empty page of ours, in no queue (caller), so its
        // segment is ours too.
        unsafe {
            if (*seg).kind == SegmentKind::Huge {
                (*page).set_state(PageState::Free);
                self.unlink_segment(seg);
                Segment::destroy(seg);
                return;
            }
            let i = Segment::index_of(page);
            let n = (*page).slice_count();
            block::poison(Segment::slice_start(seg, i) as *mut u8, n << SLICE_SHIFT);
            for k in 0..n {
                let d = Segment::page(seg, i + k);
                (*d).slice_offset = 0;
                (*d).set_state(PageState::Free);
            }
            let mask = run_mask(i, n);
            let free = (*seg).free_slices.load(Ordering::Relaxed);
            (*seg).free_slices.store(free | mask, Ordering::Relaxed);
            if free == 0 {
                // Room again: among those with room.
                self.relink_segment(seg);
            }
            let dirty = (*seg).dirty.load(Ordering::Relaxed);
            if dirty == 0 {
                self.dirty_segments += 1;
            }
            (*seg).dirty.store(dirty | mask, Ordering::Relaxed);
            (*seg).last_free_ms = os::now_ms();
        }
    }

    // ------------------------------------------------------------- realloc

    /// Resizes block `p` (of at least `old_size` bytes, aligned to `align`).
    ///
    /// # Safety
    /// `p` is a live block of ours-or-anyone's from this allocator.
    pub(crate) unsafe fn realloc(
        &mut self,
        p: *mut u8,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> *mut u8 {
        // SAFETY: `p` is a live block (caller), so its page is live and its
        // block size fixed while we hold it.
        let usable = unsafe { (*segment::page_of(p)).block_size() };
        if new_size <= usable && (usable <= 128 || new_size >= usable / 2) {
            return p;
        }
        if new_size > usable && usable > SMALL_MAX {
            // SAFETY: `p` is live (caller).
            if unsafe { self.try_grow_span(p, new_size) } {
                return p;
            }
        }
        let q = self.alloc_general(new_size, align);
        if !q.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe {
                ptr::copy_nonoverlapping(p, q, old_size.min(new_size));
                crate::free::free(p);
            }
        }
        q
    }

    /// Grows the large span holding `p` in place to at least `new_size` bytes
    /// by taking the free slices right after it, if this heap owns it and
    /// they are free. Growing a large vector then copies nothing.
    ///
    /// # Safety
    /// `p` is a live block of this allocator.
    unsafe fn try_grow_span(&mut self, p: *mut u8, new_size: usize) -> bool {
        let seg = segment::segment_of(p);
        let me: *mut LocalHeap = self;
        // SAFETY: `p` is live, so its segment is mapped; when we own it, its
        // free-slice bits and descriptors are ours to change.
        unsafe {
            if (*seg).owner.load(Ordering::Relaxed) != me || (*seg).kind != SegmentKind::Normal {
                return false;
            }
            let page = segment::page_of(p);
            if (*page).state() != PageState::Large {
                return false;
            }
            let i = (p as usize - seg as usize) >> SLICE_SHIFT;
            let n = (*page).slice_count();
            let tail = guard::tail();
            let want = new_size.saturating_add(tail).div_ceil(SLICE_SIZE);
            if i + want > SLICES {
                return false;
            }
            let extra = run_mask(i + n, want - n);
            let free = (*seg).free_slices.load(Ordering::Relaxed);
            if free & extra != extra {
                return false;
            }
            // The guards inside the grown span first (the old end's among
            // them): refused, the block moves instead.
            if !guard::open(seg, i, want) {
                return false;
            }
            self.claim_slices(seg, extra);
            let block = (want << SLICE_SHIFT) - tail;
            set_span(seg, i, n, want, block);
            // The guard moves to the new end (the old one becomes part of
            // the block).
            guard::place(seg, i, want);
            (*page).block_size.store(block, Ordering::Relaxed);
            (*page).slice_count.store(want as u32, Ordering::Relaxed);
            (*page).bump_end = (*page).start() + block;
            (*page).bump = (*page).bump_end;
            (*page).bump_limit = (*page).bump_end;
            block::unpoison(p, block);
            true
        }
    }

    // ------------------------------------------------------------ housekeeping

    /// The slow path's chores: send our outgoing batches, take back what other
    /// threads freed, now and then visit orphaned heaps, purge idle slices.
    fn housekeeping(&mut self) {
        if self.slow_count % 64 == 0 && !self.tcache.is_empty() {
            let now = os::now_ms();
            if now >= self.next_tcache_flush_ms {
                // Kept blocks hold their pages: at most about a purge
                // delay (`thread_cache.rs`).
                // Saturating: a purge delay of "for ever" (`u64::MAX` ms,
                // what `set_purge_delay(Duration::MAX)` stores) overflowed
                // here, a panic inside the allocator in a debug build.
                self.next_tcache_flush_ms = now.saturating_add(options::purge_delay_ms().max(1));
                self.flush_thread_cache();
            }
        }
        self.cache.flush();
        self.drain_remote();
        self.slow_count = self.slow_count.wrapping_add(1);
        if crate::abandon::orphan_count() > 0
            && (self.slow_count % 256 == 0 || os::now_ms() >= self.next_orphan_visit_ms)
        {
            // Every 256 slow paths, and at least every half purge delay: an
            // exited thread's idle memory is decommitted on the purge delay
            // like ours (it keeps it that long so that a thread started next
            // reuses it without faulting it in again, as mimalloc does by
            // default), and only a visit can do it.
            self.next_orphan_visit_ms = os::now_ms().saturating_add((options::purge_delay_ms() / 2).max(1));
            self.visit_orphans(false, false);
        }
        if self.dirty_segments > 0 {
            self.purge(false);
        }
    }

    /// Takes every block and run other threads sent us and frees it
    /// locally; one whose segment has meanwhile been adopted by another heap
    /// is forwarded. Returns how many blocks it took (forwarded runs count
    /// one each): zero when the queues were empty.
    pub(crate) fn drain_remote(&mut self) -> u64 {
        let runs = self.reclaim_runs();
        let chains = self.queue.take_all();
        if chains.iter().all(|c| c.is_null()) {
            return runs;
        }
        let me = ptr::addr_of!(self.queue);
        let mut applied = 0;
        // The chains came from our queue; heaps (hence queues) live
        // forever; each block is dead and its segment mapped. A block
        // forwarded is addressed to its segment's owner now, the heap
        // `owner_inbox` read.
        // SAFETY: as just said.
        let walked = unsafe {
            route_chains(
                chains,
                me,
                |b| owner_inbox(b.cast()),
                |b| {
                    applied += 1;
                    self.free_drained(segment::page_of(b.cast()), b.cast());
                },
                // Rare (a block sent just before its segment was adopted):
                // one push each, no batch, so that the cache stays out of
                // this walk.
                |owner, b| (*owner).push(0, b, b),
            )
        };
        // Counted where applied: a forwarded block counts at its new owner.
        REMOTE.drained.fetch_add(applied, Ordering::Relaxed);
        walked + runs
    }

    /// Calls `f` on every page this heap owns.
    pub(crate) fn for_each_own_page(&self, mut f: impl FnMut(*mut Page)) {
        let mut seg = self.segments.first;
        while !seg.is_null() {
            crate::inspect::for_each_page_in(seg, &mut f);
            // SAFETY: segments on our list are ours.
            seg = unsafe { (*seg).next };
        }
    }

    /// Checks every invariant of this heap (expensive).
    pub(crate) fn assert_valid(&self) {
        let me = self as *const LocalHeap as *mut LocalHeap;
        let mut pages = 0;
        let mut seg = self.segments.first;
        let (mut last, mut room) = (ptr::null_mut(), true);
        while !seg.is_null() {
            // SAFETY: segments on our list are ours.
            unsafe {
                if (*seg).owner.load(Ordering::Relaxed) != me {
                    crate::fatal("heap lists a segment it does not own");
                }
                if has_room(seg) && !room {
                    crate::fatal("heap lists a segment with room after one without");
                }
                room = has_room(seg);
                last = seg;
                Segment::assert_valid(seg);
                seg = (*seg).next;
            }
        }
        if last != self.segments.last {
            crate::fatal("heap's last segment is not its list's tail");
        }
        self.for_each_own_page(|_| pages += 1);
        if pages != self.page_count {
            crate::fatal("heap page count out of step with its segments");
        }
        for c in 0..NUM_CLASSES {
            if !self.current[c].is_null() && self.current[c] != self.queues[c].first {
                crate::fatal("current page is not the first of its queue");
            }
        }
    }
}

/// What page to cut from free slices.
#[derive(Clone, Copy)]
struct PageSpec {
    state: PageState,
    /// Size class, or `NUM_CLASSES` for a large span.
    class: usize,
    /// Block size in bytes.
    block: usize,
    /// Span length in slices.
    slices: usize,
    /// Blocks in the page; 0 for as many as fit.
    capacity: usize,
}

/// Records a span of `n` slices from slice `i` holding blocks of `block`
/// bytes: the block size of every slice, and `Interior` descriptors for
/// slices `i+from..i+n` pointing back to `i`.
///
/// # Safety
/// `seg` and the slices are ours.
unsafe fn set_span(seg: *mut Segment, i: usize, from: usize, n: usize, block: usize) {
    // SAFETY: the caller owns the segment and the slices.
    unsafe {
        for k in 0..n {
            (*seg).slice_block_size[i + k].store(block, Ordering::Relaxed);
            (*seg).slice_first[i + k].store(i as u8, Ordering::Relaxed);
        }
        for k in from..n {
            let d = Segment::page(seg, i + k);
            (*d).slice_offset = k as u32;
            (*d).set_state(PageState::Interior);
        }
    }
}

/// Mask of slices `i..i+n`.
#[inline]
fn run_mask(i: usize, n: usize) -> u64 {
    debug_assert!(i + n <= SLICES && n >= 1);
    (if n == 64 { u64::MAX } else { (1u64 << n) - 1 }) << i
}

/// Whether `seg` has free slices (a `Normal` segment not full): the
/// segments a heap lists first (`LocalHeap::segments`).
///
/// # Safety
/// `seg` is a live segment its caller owns.
#[inline]
pub(crate) unsafe fn has_room(seg: *mut Segment) -> bool {
    // SAFETY: live (caller).
    unsafe { (*seg).kind == SegmentKind::Normal && (*seg).free_slices.load(Ordering::Relaxed) != 0 }
}
