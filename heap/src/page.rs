//! Page descriptors: one span of slices serving one size class (or one large
//! object) for one owning heap, with its bump region and its two free lists.

use crate::block::{self, Block};
use crate::sync::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::ptr;

/// How far past a bumped block its allocation asks for the line ahead: 8
/// lines. Bump allocation walks memory nobody touched for a while (a
/// collector's heap allocates across its whole headroom before a cycle
/// frees any of it), and the first store into each line waited for it;
/// the JVM prefetches ahead of its allocation pointer for the same reason
/// (`AllocatePrefetchDistance`). Measured against none, interleaved
/// (`docs/perf-log.md`, session 29): binary-trees 0.76x against 0.83x –
/// 0.92x box's time at one thread, the collections' `strings` case 1.55x
/// – 1.59x against 1.95x – 1.99x `String`'s; 128 and 256 bytes ahead
/// gained less, 1,024 no more.
const BUMP_PREFETCH: usize = 512;

/// What a slice descriptor describes. Stored in an atomic so statistics and
/// page iteration may read it from any thread.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum PageState {
    /// The slice is free (or in a huge segment's unused header range).
    Free = 0,
    /// First slice of a page of a size class.
    Small = 1,
    /// First slice of a large span (one block).
    Large = 2,
    /// A huge segment's page (one block).
    Huge = 3,
    /// A non-first slice of a span; `slice_offset` leads to its first slice.
    Interior = 4,
}

/// A page: `capacity` blocks of `block_size` bytes from `start`.
///
/// # Invariants
/// `used + |free| + |local_free| + (bump_end - bump) / block_size = capacity`,
/// where `used` counts blocks handed out and not yet freed back to this page
/// (blocks in flight in remote queues still count as used);
/// `start <= bump <= bump_end` and `start <= bump_limit <= bump_end`; the
/// fast path bumps only a block that starts below `bump_limit` (so `bump`
/// may pass it by less than a block).
/// `free`, `local_free`, `bump`, `bump_limit`, `next`, `prev`, `in_full` are touched only by
/// the owning heap's thread (or by whoever holds an abandoned heap exclusively).
#[repr(C)]
pub(crate) struct Page {
    /// Blocks ready to hand out (owner only). The allocation fast path pops here.
    pub(crate) free: *mut Block,
    /// Next never-used block (owner only).
    pub(crate) bump: usize,
    /// Where the fast path stops bumping (owner only): it hands out a block
    /// from the bump region only if the block starts below this. Moved a
    /// step at a time (`extend_bump`), so that the blocks
    /// the owner freed are handed out again before memory no block has
    /// used yet is touched. Kept when the page is emptied (`reset_empty`):
    /// what is below it was touched already, all but the last step at
    /// most.
    pub(crate) bump_limit: usize,
    /// Blocks freed by the owner (owner only). Kept apart from `free` so that
    /// `free` runs dry at least every `capacity` allocations: that is when the
    /// slow path runs and drains the remote queue (mimalloc's reasoning).
    pub(crate) local_free: *mut Block,
    /// Blocks handed out. Written by the owner (relaxed load/store, no
    /// read-modify-write), read by statistics.
    pub(crate) used: AtomicU32,
    /// Writers: the owner when the page is set up. Readers: anyone holding a
    /// block of the page (ordered by that block's handoff) and statistics.
    pub(crate) capacity: AtomicU32,
    /// The last seal epoch whose copy of the allocated bits this page has
    /// (`seal.rs`). Beside `used`, which the owner writes on every
    /// allocation, so its check on every collector allocation reads a
    /// line it has at hand. Written by the owner's seal and a collector's
    /// walk (CAS), never at set-up: a page set up again keeps it.
    pub(crate) sealed: AtomicU64,
    /// As `capacity`.
    pub(crate) block_size: AtomicUsize,
    pub(crate) slice_count: AtomicU32,
    pub(crate) state: AtomicU32,
    /// For `Interior` descriptors: how many slices back the span starts.
    pub(crate) slice_offset: u32,
    /// Size class, or `NUM_CLASSES` for large and huge spans.
    pub(crate) class: u8,
    /// In the owner's full list rather than its class queue (owner only).
    pub(crate) in_full: bool,
    /// Every never-used block reads as zero (fresh from the OS or decommitted).
    pub(crate) is_zero: bool,
    /// Address of block 0. Written by the owner when the page is set up,
    /// read by anyone holding a block of the page (ordered by that block's
    /// handoff) and by page walks, which may meet a page being set up:
    /// atomic for them (a plain field was a data race there), relaxed
    /// everywhere (a plain load on the targets served).
    pub(crate) start: AtomicUsize,
    /// End of the bump region: `start + capacity * block_size` (owner
    /// only, but read by checks).
    pub(crate) bump_end: usize,
    /// Owner's queue links (owner only).
    pub(crate) next: *mut Page,
    pub(crate) prev: *mut Page,
    /// Bits a collector keeps per page (`PageRef::set_flags`); cleared when
    /// the page is set up.
    pub(crate) user_flags: AtomicU8,
    /// The tag of the collector objects allocated in the page since it was
    /// set up (`alloc_object`'s `tag`), stored as the tag plus one: 0 for
    /// none yet, [`TAG_MIXED_WORD`] once two tags met (a tag of 0 is a tag
    /// like any other). Written by the owner only, before the object's
    /// (release) allocated bit; it only moves from 0 to a tag and from a
    /// tag to mixed until the page is set up again.
    pub(crate) user_tag: AtomicU32,
    /// Page runs out of the page's use and not yet taken back by the owner
    /// (`runs.rs`), sent or held (`FreeBatch::hold_page_run`): incremented
    /// by the sender (or holder) after it set the run's pending bits,
    /// decremented by the owner after it cleared them (both release). Zero
    /// whenever the page is set up: a run holds its blocks in use.
    pub(crate) runs_out: AtomicU32,
}

/// `Page::user_tag` of a page whose objects were allocated with more than
/// one tag (no tag plus one reaches it).
pub(crate) const TAG_MIXED_WORD: u32 = u32::MAX;

impl Page {
    #[inline(always)]
    pub(crate) fn state(&self) -> PageState {
        match self.state.load(Ordering::Relaxed) {
            0 => PageState::Free,
            1 => PageState::Small,
            2 => PageState::Large,
            3 => PageState::Huge,
            4 => PageState::Interior,
            _ => crate::fatal("corrupted page state"),
        }
    }

    #[inline(always)]
    pub(crate) fn set_state(&self, s: PageState) {
        self.state.store(s as u32, Ordering::Relaxed);
    }

    /// Index of the block holding `p`, an address in this page: a multiply
    /// by the class's reciprocal, not a division (a large or huge span is
    /// one block).
    #[inline(always)]
    pub(crate) fn block_index(&self, p: *const u8) -> usize {
        let offset = (p as usize - self.start()) as u64;
        match crate::size_class::RECIP.get(self.class as usize) {
            Some(&r) => ((offset * r) >> crate::size_class::RECIP_SHIFT) as usize,
            None => 0,
        }
    }

    /// Whether `p` is where one of this page's blocks starts (false for a
    /// page that is free, or an address past its blocks or between them).
    #[inline(always)]
    pub(crate) fn is_block_start(&self, p: *const u8) -> bool {
        let offset = (p as usize).wrapping_sub(self.start());
        match self.state() {
            PageState::Small => {
                offset < self.capacity() * self.block_size()
                    && self.block_index(p) * self.block_size() == offset
            }
            PageState::Large | PageState::Huge => offset == 0,
            _ => false,
        }
    }

    /// Sets collector flag bits (a load first: most calls find them set).
    #[inline(always)]
    pub(crate) fn set_user_flags(&self, bits: u8) {
        if self.user_flags.load(Ordering::Relaxed) & bits != bits {
            self.user_flags.fetch_or(bits, Ordering::Release);
        }
    }

    /// Notes a collector object of tag `tag` allocated in the page. Owner
    /// only (a load and a store, no read-modify-write), before the object's
    /// allocated bit is set: a sweeper relies on it to know whose objects
    /// the page holds. A load first: most calls find the page tagged so
    /// already, or mixed.
    #[inline(always)]
    pub(crate) fn note_user_tag(&self, tag: u16) {
        let want = u32::from(tag) + 1;
        let now = self.user_tag.load(Ordering::Relaxed);
        if now != want && now != TAG_MIXED_WORD {
            self.note_user_tag_slow(now, want);
        }
    }

    #[cold]
    #[inline(never)]
    fn note_user_tag_slow(&self, now: u32, want: u32) {
        let next = if now == 0 { want } else { TAG_MIXED_WORD };
        self.user_tag.store(next, Ordering::Release);
    }

    /// The tag as [`crate::PageRef::tag`] reports it.
    #[inline]
    pub(crate) fn user_tag(&self) -> u16 {
        match self.user_tag.load(Ordering::Acquire) {
            0 => 0,
            TAG_MIXED_WORD => crate::TAG_MIXED,
            t => (t - 1) as u16,
        }
    }

    #[inline(always)]
    pub(crate) fn block_size(&self) -> usize {
        self.block_size.load(Ordering::Relaxed)
    }

    /// Address of block 0 (`start`).
    #[inline(always)]
    pub(crate) fn start(&self) -> usize {
        self.start.load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed) as usize
    }

    #[inline(always)]
    pub(crate) fn slice_count(&self) -> usize {
        self.slice_count.load(Ordering::Relaxed) as usize
    }

    #[inline(always)]
    pub(crate) fn used(&self) -> u32 {
        self.used.load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn set_used(&self, n: u32) {
        self.used.store(n, Ordering::Relaxed);
    }

    /// Sets the page up as a fresh span of `slices` slices at `start` holding
    /// `capacity` blocks (0: as many as fit).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn init(
        &mut self,
        state: PageState,
        class: usize,
        start: usize,
        block_size: usize,
        slices: usize,
        capacity: usize,
        is_zero: bool,
    ) {
        let capacity = if capacity == 0 {
            (slices << crate::segment::SLICE_SHIFT) / block_size
        } else {
            capacity
        };
        self.free = ptr::null_mut();
        self.local_free = ptr::null_mut();
        self.bump = start;
        self.bump_end = start + capacity * block_size;
        self.bump_limit = start;
        self.bump_limit = self.next_bump_limit(block_size);
        self.used.store(0, Ordering::Relaxed);
        self.block_size.store(block_size, Ordering::Relaxed);
        self.capacity.store(capacity as u32, Ordering::Relaxed);
        self.slice_count.store(slices as u32, Ordering::Relaxed);
        self.slice_offset = 0;
        self.class = class as u8;
        self.in_full = false;
        self.is_zero = is_zero;
        self.start.store(start, Ordering::Relaxed);
        self.next = ptr::null_mut();
        self.prev = ptr::null_mut();
        self.user_flags.store(0, Ordering::Relaxed);
        self.user_tag.store(0, Ordering::Relaxed);
        debug_assert_eq!(self.runs_out.load(Ordering::Relaxed), 0);
        self.set_state(state);
    }

    /// Pops a block, from the free list or else the bump region.
    #[inline(always)]
    pub(crate) fn try_alloc(&mut self) -> *mut u8 {
        let b = self.free;
        if !b.is_null() {
            // SAFETY: `b` heads this page's free list, which the owner (us)
            // owns; every entry is a free block of `block_size >= 8` bytes.
            unsafe {
                let next = block::next(b);
                // A write after free over the link would send the next
                // allocation anywhere: checked builds stop here instead.
                if block::CHECKED && !next.is_null() && !self.is_block_start(next.cast()) {
                    crate::fatal(
                        "a free block's link was overwritten (a write after free, or a double free)",
                    );
                }
                self.free = next;
                block::prefetch(next.cast());
                block::on_reuse(b.cast(), self.block_size());
            }
            self.set_used(self.used() + 1);
            return b.cast();
        }
        let p = self.bump;
        if p < self.bump_limit {
            let size = self.block_size();
            self.bump = p + size;
            // Past the page's end, or its bump limit, the hint is dropped
            // or wasted, never a fault.
            block::prefetch((p + BUMP_PREFETCH) as *const u8);
            self.set_used(self.used() + 1);
            block::unpoison(p as *mut u8, size);
            if !self.is_zero {
                // SAFETY: a fresh block of `size` bytes, the caller's now;
                // memory that held blocks before may hold a freed tag.
                unsafe { block::on_alloc(p as *mut u8, size) };
            }
            return p as *mut u8;
        }
        ptr::null_mut()
    }

    /// Whether `try_alloc` finds a block: one on `free`, or below the bump
    /// limit.
    #[inline]
    pub(crate) fn has_ready(&self) -> bool {
        !self.free.is_null() || self.bump < self.bump_limit
    }

    /// Moves the bump region's limit a step on, if the region has blocks
    /// left (true).
    ///
    /// # Why a step at a time
    /// `free` runs dry long before the bump region does, and the owner's
    /// frees wait in `local_free` until the slow path merges them; a page
    /// bumped whole first was touched whole, whatever the class's live
    /// blocks needed: larson at one thread (10,000 live blocks of 16 - 256
    /// bytes, 1.3 MiB) kept 2.0 MiB of its segment resident, its one-page
    /// classes fully touched at 14 - 37% use; 1.7 MiB a step at a time.
    /// mimalloc extends its free lists by 4 KiB for the same reason. The
    /// step is an OS page or four blocks; a step of a class's lone page
    /// costs only the slow path's first check (`alloc_class_slow`).
    #[inline]
    pub(crate) fn extend_bump(&mut self) -> bool {
        if self.bump >= self.bump_end {
            return false;
        }
        self.bump_limit = self.next_bump_limit(self.block_size());
        true
    }

    /// The bump limit a step past `bump` (never lower than it is), at an OS
    /// page boundary, within the region.
    fn next_bump_limit(&self, block_size: usize) -> usize {
        let step = (4 * block_size).max(crate::os::OS_PAGE);
        let next = (self.bump + step).next_multiple_of(crate::os::OS_PAGE);
        next.max(self.bump_limit).min(self.bump_end)
    }

    /// Moves the owner's local frees onto the allocation list.
    pub(crate) fn collect(&mut self) {
        if self.local_free.is_null() {
            return;
        }
        if self.free.is_null() {
            self.free = std::mem::replace(&mut self.local_free, ptr::null_mut());
            return;
        }
        // Rare: both lists non-empty; append the shorter-lived one.
        let mut tail = self.local_free;
        // SAFETY: owner-only lists of free blocks of this page.
        unsafe {
            loop {
                let n = block::next(tail);
                if n.is_null() {
                    break;
                }
                tail = n;
            }
            block::set_next(tail, self.free);
        }
        self.free = std::mem::replace(&mut self.local_free, ptr::null_mut());
    }

    /// Pushes block `b` of this page onto the local free list.
    ///
    /// # Safety
    /// `b` is a block of this page that was handed out and is now dead; the
    /// caller is the page's owner.
    #[inline(always)]
    pub(crate) unsafe fn push_local(&mut self, b: *mut u8) {
        // SAFETY: `b` is a dead block of this page (caller), at least 8 bytes.
        unsafe {
            block::on_free(b, self.block_size());
            self.push_freed(b);
        }
    }

    /// Pushes block `b`, already filled and poisoned by [`block::on_free`]
    /// (it came through a remote queue), onto the local free list.
    ///
    /// # Safety
    /// As [`Page::push_local`], and `on_free` has been applied to `b`.
    #[inline(always)]
    pub(crate) unsafe fn push_freed(&mut self, b: *mut u8) {
        // SAFETY: `b` is a dead block of this page (caller).
        unsafe { block::set_next(b.cast(), self.local_free) };
        self.local_free = b.cast();
        self.set_used(self.used().wrapping_sub(1));
    }

    /// Splices a freed run, the chain `head ..= tail` of `count` blocks of
    /// this page (filled and poisoned by their sender), onto the local free
    /// list without walking it: one write, to the tail's link.
    ///
    /// # Safety
    /// The caller is the page's owner and the chain a well-formed chain of
    /// dead blocks of this page that it owns, each counted in `used`.
    #[inline]
    pub(crate) unsafe fn push_freed_run(&mut self, head: *mut Block, tail: *mut Block, count: u32) {
        debug_assert!(self.used() >= count, "heap: a freed run of more blocks than are in use");
        // SAFETY: the tail is a dead block of this page, ours (caller).
        unsafe { block::set_next(tail, self.local_free) };
        self.local_free = head;
        self.set_used(self.used() - count);
    }

    /// Makes the page fresh again: every block free, handed out from the
    /// bump region in address order. The free lists are dropped (their
    /// blocks are covered by the bump region).
    ///
    /// # Safety
    /// The caller owns the page and every block of it is free or dead: no
    /// block is in use or in flight to this page (`used` counts the dead
    /// ones being given back, and nothing else).
    pub(crate) unsafe fn reset_empty(&mut self) {
        self.free = ptr::null_mut();
        self.local_free = ptr::null_mut();
        // The limit stays: the page was used that far. Its blocks held
        // data (and, checked, the freed tag): not zero any more, so that
        // `alloc_zeroed` clears them and `on_alloc` runs (a page first
        // laid on fresh slices kept `is_zero`, and a re-bumped block kept
        // its freed tag: a valid free of it stopped the process as a
        // double free).
        self.is_zero = false;
        self.bump = self.start();
        self.set_used(0);
        block::poison(self.start() as *mut u8, self.bump_end - self.start());
    }

    /// Checks `used + |free| + |local_free| + unbumped = capacity` (walks both
    /// lists) and the bump region's order.
    pub(crate) fn assert_valid(&self) {
        let count = |mut b: *mut Block| {
            let mut n = 0usize;
            while !b.is_null() {
                n += 1;
                if n > self.capacity() {
                    crate::fatal("page free list longer than the page (cycle or corruption)");
                }
                let a = b as usize;
                if a < self.start() || a >= self.bump_end || (a - self.start()) % self.block_size() != 0
                {
                    crate::fatal("page free list holds a foreign or misaligned block");
                }
                // SAFETY: an entry of an owner-only free list of this page.
                b = unsafe { block::next(b) };
            }
            n
        };
        let within = |a: usize| self.start() <= a && a <= self.bump_end;
        if !within(self.bump) || !within(self.bump_limit) {
            crate::fatal("page bump pointer or limit outside the bump region");
        }
        let unbumped = (self.bump_end - self.bump) / self.block_size();
        let total = self.used() as usize + count(self.free) + count(self.local_free) + unbumped;
        if total != self.capacity() {
            crate::fatal(
                "page block accounting broken: used + free + local_free + unbumped != capacity",
            );
        }
    }
}

/// A doubly linked list of pages (owner only).
pub(crate) type PageQueue = crate::queue::Queue<Page>;

// A page's `next` and `prev` are two fields, used only by the one queue
// (of its owner) it is in.
// SAFETY: as just said.
unsafe impl crate::queue::Linked for Page {
    unsafe fn next(this: *mut Self) -> *mut *mut Self {
        // SAFETY: live (caller).
        unsafe { ptr::addr_of_mut!((*this).next) }
    }

    unsafe fn prev(this: *mut Self) -> *mut *mut Self {
        // SAFETY: live (caller).
        unsafe { ptr::addr_of_mut!((*this).prev) }
    }
}
