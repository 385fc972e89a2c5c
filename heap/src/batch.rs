//! [`FreeBatch`]: the public way to hand many dead blocks back to their owners
//! at once, one atomic operation per page's batch (or per owner's, for pages
//! it frees only a few blocks of). The collector's sweeper
//! uses it so that the thread freeing is never the thread whose lists change.
//! Page runs are for blocks of pages ([`crate::alloc_object`]'s), never for a
//! block aligned above 2 MiB, which has a mapping of its own and no page
//! (`aligned.rs`); `push` takes those too.

use crate::block;
use crate::block::Block;
use crate::local_heap::owner_inbox;
use crate::page::{Page, PageState};
use crate::remote::{RunKind, MIN_RUN_BLOCK, REMOTE};
use crate::remote_cache::{page_key, RemoteCache};
use crate::segment;
use crate::segment::block_size_of;
use crate::sync::Ordering;
use std::fmt;
use std::ptr::{self, NonNull};

/// A batch of dead blocks bound for their owning threads' remote queues.
///
/// Blocks are grouped by page, as a thread's remote frees are
/// (`remote_cache.rs`): a page's group goes as one run, which its owner
/// splices onto the page's free list without walking it, when it reaches
/// 4096 blocks, when a block of another page takes its place, when the
/// batch holds 8 MiB, on [`flush`], and on drop; a group of fewer than four
/// blocks joins its owner's chain instead, sent at 4096 blocks. Each
/// message is one atomic operation. Owners take the blocks back on their
/// next slow path. Use it to
/// free a page's dead blocks, or a whole page's worth, from a thread that does
/// not own them.
///
/// [`flush`]: FreeBatch::flush
///
/// # Examples
/// ```
/// use std::alloc::{GlobalAlloc, Layout};
/// use loam_heap::{FreeBatch, LoamAlloc};
///
/// let layout = Layout::new::<[u64; 4]>();
/// // Addresses, so the blocks can cross to the sweeping thread.
/// let blocks: Vec<usize> = (0..100)
///     // SAFETY: a non-zero-sized layout.
///     .map(|_| unsafe { LoamAlloc.alloc(layout) } as usize)
///     .collect();
/// std::thread::spawn(move || {
///     let mut batch = FreeBatch::new();
///     for p in blocks {
///         // SAFETY: each block is live, from LoamAlloc, and never used again.
///         unsafe { batch.push(std::ptr::NonNull::new(p as *mut u8).unwrap()) };
///     }
///     batch.flush(); // or let it drop
/// })
/// .join()
/// .unwrap();
/// ```
pub struct FreeBatch {
    cache: RemoteCache,
    pending: usize,
}

/// A page run taken out of its page's use but not yet sent to the owner
/// ([`FreeBatch::hold_page_run`]); send it with
/// [`FreeBatch::push_held_page_run`]. Until then its blocks are pending:
/// a sweeper's copy of the page leaves them out.
#[derive(Debug)]
#[must_use = "a held run must be sent, or its blocks stay in use for good"]
pub struct HeldRun {
    /// The page's first block (the page stays live: the run holds blocks
    /// of it in use).
    page: usize,
    /// Blocks in the run.
    len: usize,
}

impl Drop for HeldRun {
    /// A run never sent keeps its blocks in use for good: a collector bug,
    /// said at once (not while a panic unwinds, which already says one).
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!(
                "heap: a held page run of {} block(s) was dropped without being sent \
                 (FreeBatch::push_held_page_run)",
                self.len
            );
        }
    }
}

impl FreeBatch {
    /// An empty batch.
    pub const fn new() -> Self {
        Self {
            cache: RemoteCache::for_sweeper(),
            pending: 0,
        }
    }

    /// Adds dead block `p` to the batch.
    ///
    /// # Safety
    /// `p` was returned by [`crate::LoamAlloc`], has not been freed, and nobody
    /// will use it again. A block whose allocated bit is set
    /// ([`alloc_object`](crate::alloc_object)) goes back through
    /// [`push_page_run`](Self::push_page_run) instead.
    pub unsafe fn push(&mut self, p: NonNull<u8>) {
        let p = p.as_ptr();
        if crate::aligned::is_aligned_block(p) {
            // A block of its own mapping (`aligned.rs`) has no owner to
            // send it to: any thread unmaps it.
            // SAFETY: a live block of ours that nobody uses again (caller).
            return unsafe { crate::aligned::free(p) };
        }
        // SAFETY: `p` is a live block (caller): its segment and page are
        // mapped and its block size fixed; heaps (hence queues) live forever.
        unsafe {
            let size = block_size_of(p);
            block::on_free(p, size);
            self.cache.push(owner_inbox(p), page_key(p), p, size);
        }
        self.pending += 1;
    }

    /// Frees `blocks`, all dead blocks of one page, as one *page run*: one
    /// atomic operation, and if they are all the page has in use when its
    /// owner takes them back, the owner resets the page in O(1) (its blocks
    /// are then handed out again in address order) instead of walking them.
    /// The owner also clears the blocks' allocated bits (see
    /// [`alloc_object`](crate::alloc_object)); until it has, the blocks are
    /// *pending* ([`PageRef::pending_words`](crate::PageRef::pending_words))
    /// and the page's flags carry [`RUN_PENDING`](crate::RUN_PENDING).
    ///
    /// # Panics
    /// If the blocks are smaller than 16 bytes (a run needs two words).
    ///
    /// # Safety
    /// Each block was returned by [`crate::LoamAlloc`] or
    /// [`alloc_object`](crate::alloc_object), has not been freed, and nobody
    /// will use it again; all are in the same page; no block appears twice.
    ///
    /// # Examples
    /// ```
    /// use std::alloc::{GlobalAlloc, Layout};
    /// use std::ptr::NonNull;
    /// use loam_heap::{FreeBatch, LoamAlloc, PageRef};
    ///
    /// let layout = Layout::new::<[u64; 4]>();
    /// // SAFETY: non-zero-sized layouts; every block is freed once, below.
    /// let blocks: Vec<usize> = (0..64).map(|_| unsafe { LoamAlloc.alloc(layout) } as usize).collect();
    /// // SAFETY: block 0 is live while its page is read.
    /// let start = unsafe { PageRef::of(blocks[0] as *const u8) }.start() as usize;
    /// let (same, other): (Vec<usize>, Vec<usize>) = blocks
    ///     .into_iter()
    ///     // SAFETY: each block is live.
    ///     .partition(|&b| unsafe { PageRef::of(b as *const u8) }.start() as usize == start);
    /// std::thread::spawn(move || {
    ///     let mut batch = FreeBatch::new();
    ///     let run: Vec<NonNull<u8>> = same.iter().map(|&b| NonNull::new(b as *mut u8).unwrap()).collect();
    ///     // SAFETY: live blocks of one page, each once, never used again.
    ///     unsafe { batch.push_page_run(&run) };
    ///     for b in other {
    ///         // SAFETY: as above.
    ///         unsafe { batch.push(NonNull::new(b as *mut u8).unwrap()) };
    ///     }
    /// })
    /// .join()
    /// .unwrap();
    /// ```
    pub unsafe fn push_page_run(&mut self, blocks: &[NonNull<u8>]) {
        let Some(first) = blocks.first() else {
            return;
        };
        if crate::aligned::is_aligned_block(first.as_ptr()) {
            // A block aligned beyond what a segment places has a mapping
            // of its own and no page (`aligned.rs`): a run of it is the
            // block alone, which `push` unmaps. (Read as a page's, its
            // first bytes were taken for a segment header.)
            for &b in blocks {
                // SAFETY: live, dead to its users and ours (caller).
                unsafe { self.push(b) };
            }
            return;
        }
        // SAFETY: the blocks are live, dead to their users and ours, of one
        // page (caller): what the whole-page run and the hold ask.
        unsafe {
            let page = &*segment::page_of(first.as_ptr());
            if blocks.len() == page.capacity() && self.push_whole_page(*first) {
                return;
            }
            // A run sent at once is a run held and sent with nothing between.
            let held = Self::hold_page_run(blocks);
            self.push_held_page_run(held, blocks);
        }
    }

    /// Takes `blocks`, dead blocks of one page, out of the page's use as a
    /// page run that is *held*: their pending bits are set and the run is
    /// counted out on the page now, as [`push_page_run`](Self::push_page_run)
    /// does, but nothing goes to the owner until the run is sent with
    /// [`push_held_page_run`](Self::push_held_page_run). Meanwhile the
    /// blocks stay the caller's (a collector runs their destructors) and a
    /// sweeper's copy of the page leaves them out, so the page's other
    /// blocks can be swept and sent as further runs: a collector that hands
    /// a page's dead objects to a finalizer thread holds them this way
    /// instead of keeping the whole page from later sweeps.
    ///
    /// The returned [`HeldRun`] must be sent: a run never sent keeps its
    /// blocks, and the page, in use for good.
    ///
    /// # Panics
    /// If the blocks are smaller than 16 bytes, as `push_page_run`, or if
    /// they are aligned beyond 2 MiB (such a block has a mapping of its own
    /// and no page; [`push`](Self::push) frees it).
    ///
    /// # Safety
    /// As [`push_page_run`](Self::push_page_run): each block was returned by
    /// [`crate::LoamAlloc`] or [`alloc_object`](crate::alloc_object), has
    /// not been freed, is dead to its users and the caller's; all are in
    /// the same page; none appears twice or in another run.
    ///
    /// # Examples
    /// ```
    /// use std::ptr::NonNull;
    /// use loam_heap::{FreeBatch, PageRef, RUN_PENDING};
    ///
    /// // Kept live so that the page stays.
    /// let (keep, keep_bit) = loam_heap::alloc_object(32, 8, 0, 0);
    /// keep_bit.unwrap().set();
    /// let (p, bit) = loam_heap::alloc_object(32, 8, 0, 0);
    /// bit.unwrap().set();
    /// // SAFETY: `keep` is live while the page is read.
    /// let page = unsafe { PageRef::of(keep) };
    /// // A fresh heap hands a page's blocks out in order.
    /// // SAFETY: `p` is live.
    /// assert_eq!(unsafe { PageRef::of(p) }, page);
    /// let block = NonNull::new(p).unwrap();
    /// // SAFETY: a live block of this allocator, never used again.
    /// let held = unsafe { FreeBatch::hold_page_run(&[block]) };
    /// let i = page.block_index(p);
    /// assert!(page.is_allocated(i) && page.flags() & RUN_PENDING != 0);
    /// assert_eq!(page.pending_words().nth(i / 64).unwrap() >> (i % 64) & 1, 1);
    /// // ...the block's object is finalized here, then the run is sent:
    /// let mut batch = FreeBatch::new();
    /// // SAFETY: the blocks `held` was made of.
    /// unsafe { batch.push_held_page_run(held, &[block]) };
    /// batch.flush();
    /// loam_heap::collect(); // the owner (this thread) takes it back
    /// assert!(!page.is_allocated(i) && page.runs_out() == 0);
    /// # let mut batch = FreeBatch::new();
    /// # // SAFETY: live, never used again.
    /// # unsafe { batch.push_page_run(&[NonNull::new(keep).unwrap()]) };
    /// ```
    #[must_use = "a held run must be sent, or its blocks stay in use for good"]
    pub unsafe fn hold_page_run(blocks: &[NonNull<u8>]) -> HeldRun {
        let first = blocks.first().expect("heap: an empty page run");
        assert!(
            !crate::aligned::is_aligned_block(first.as_ptr()),
            "heap: a block aligned beyond 2 MiB has no page to hold a run in; \
             free it with FreeBatch::push"
        );
        // SAFETY: `first` is live (caller): its page is mapped.
        let size = unsafe { block_size_of(first.as_ptr()) };
        assert!(size >= MIN_RUN_BLOCK, "heap: page runs need blocks of 16 bytes or more");
        // SAFETY: as in `push_page_run`.
        unsafe {
            let page = &*segment::page_of(first.as_ptr());
            set_pending(page, blocks.iter().map(|b| page.block_index(b.as_ptr())));
            // Release: a reader that sees the count sees the pending bits.
            page.runs_out.fetch_add(1, Ordering::Release);
            HeldRun {
                page: page.start(),
                len: blocks.len(),
            }
        }
    }

    /// Sends a run [`hold_page_run`](FreeBatch::hold_page_run) held to the
    /// blocks' owner, as [`push_page_run`](Self::push_page_run) would have
    /// (always as a list: the run is counted out already).
    ///
    /// # Panics
    /// If `blocks` is not as many blocks as `held` was made of (and, in
    /// debug builds, if one is not of its page).
    ///
    /// # Safety
    /// `blocks` are the blocks `held` was made of, each still dead and the
    /// caller's, and never used again.
    pub unsafe fn push_held_page_run(&mut self, held: HeldRun, blocks: &[NonNull<u8>]) {
        assert_eq!(blocks.len(), held.len, "heap: a held run sent with other blocks");
        let start = held.page;
        std::mem::forget(held); // sent: its drop check is for runs never sent
        // SAFETY: the held blocks keep their page live and its geometry
        // fixed (they are counted in use until the owner takes them back).
        unsafe {
            let page = &*segment::page_of(start as *const u8);
            debug_assert!(
                blocks.iter().all(|b| segment::page_of(b.as_ptr()) == std::ptr::from_ref(page).cast_mut()),
                "heap: a held run sent with blocks of another page"
            );
            self.send_run(page, blocks, block_size_of(start as *const u8));
        }
    }

    /// Links `blocks` (dead blocks of `page`, pending and counted out) into
    /// a run and pushes it to their owner.
    ///
    /// # Safety
    /// The blocks are the caller's dead blocks of `page`, a live page, of
    /// `size` bytes each (at least `MIN_RUN_BLOCK`), with their pending bits
    /// set and the run counted out; none used again.
    unsafe fn send_run(&mut self, page: &Page, blocks: &[NonNull<u8>], size: usize) {
        for (i, b) in blocks.iter().enumerate() {
            let p = b.as_ptr();
            // SAFETY: the caller's blocks, of `size` bytes.
            unsafe {
                block::on_free(p, size);
                let next = blocks.get(i + 1).map_or(ptr::null_mut(), |n| n.as_ptr().cast());
                block::set_next(p.cast(), next);
            }
        }
        let run: *mut Block = blocks[0].as_ptr().cast();
        if let Some(second) = blocks.get(1) {
            // SAFETY: as above.
            unsafe { block::set_word(second.as_ptr().cast(), 1, blocks.len()) };
        }
        let kind = if blocks.len() == 1 {
            RunKind::Single
        } else {
            RunKind::Linked
        };
        // SAFETY: a well-formed run of the caller's, counted out (caller).
        unsafe { self.queue_run(page, run, kind, blocks.len()) };
    }

    /// Pushes `run`, of `len` blocks, to its owner.
    ///
    /// # Safety
    /// `run` is a well-formed run of `kind` of the caller's dead blocks of
    /// `page`, a live page, whose pending bits the caller set before it
    /// counted the run out on the page.
    unsafe fn queue_run(&mut self, page: &Page, run: *mut Block, kind: RunKind, len: usize) {
        debug_assert!(page.runs_out.load(Ordering::Relaxed) > 0, "heap: a run sent uncounted");
        // The page is live (caller), so its segment is; heaps live forever.
        // SAFETY: as just said.
        unsafe { (*owner_inbox(run.cast())).runs.push(run, kind) };
        self.cache.batches_sent += 1;
        REMOTE.sent.fetch_add(len as u64, Ordering::Relaxed);
        REMOTE.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Frees every block of the page holding `block`, as a whole-page run
    /// (one write to the page, none to its other blocks), if all of the
    /// page's blocks are in use; returns false, and does nothing, otherwise.
    /// A sweeper that finds a page all garbage calls it without listing the
    /// blocks.
    ///
    /// # Safety
    /// `block` was returned by [`crate::LoamAlloc`] or
    /// [`alloc_object`](crate::alloc_object) and is live; if every block of
    /// its page is in use, every one of them is dead, owned by the caller and
    /// never used again.
    ///
    /// # Examples
    /// ```
    /// use std::alloc::{GlobalAlloc, Layout};
    /// use std::ptr::NonNull;
    /// let layout = Layout::from_size_align(32 << 10, 8).unwrap();
    /// // SAFETY: non-zero-sized; every block is freed once, below.
    /// let first = unsafe { loam_heap::LoamAlloc.alloc(layout) };
    /// // SAFETY: `first` is live.
    /// let page = unsafe { loam_heap::PageRef::of(first) };
    /// // Fill the page (a fresh heap bumps through it in order).
    /// for _ in 1..page.capacity() {
    ///     // SAFETY: as above; `p` is live while its page is read.
    ///     let p = unsafe { loam_heap::LoamAlloc.alloc(layout) };
    ///     assert_eq!(unsafe { loam_heap::PageRef::of(p) }, page);
    /// }
    /// assert_eq!(page.used(), page.capacity());
    /// let mut batch = loam_heap::FreeBatch::new();
    /// // SAFETY: every block of the page is in use, dead and ours.
    /// assert!(unsafe { batch.push_whole_page(NonNull::new(first).unwrap()) });
    /// loam_heap::collect(); // this thread owns the page: it takes it back
    /// ```
    pub unsafe fn push_whole_page(&mut self, block: NonNull<u8>) -> bool {
        if crate::aligned::is_aligned_block(block.as_ptr()) {
            // No page (`push_page_run`).
            return false;
        }
        // SAFETY: `block` is live (caller), so its page and segment are.
        unsafe {
            let page = &*segment::page_of(block.as_ptr());
            let cap = page.capacity();
            if page.state() != PageState::Small
                || page.block_size() < MIN_RUN_BLOCK
                || page.used() as usize != cap
            {
                return false;
            }
            // Every block in use, all the caller's: nobody else can free one
            // and the owner cannot allocate one (none is free) until it takes
            // this run, so `used` stays at capacity and the owner will reset
            // the page without reading links: write none.
            let first: *mut Block = (page.start() as *mut u8).cast();
            set_all_pending(page);
            page.runs_out.fetch_add(1, Ordering::Release);
            self.queue_run(page, first, RunKind::WholePage, cap);
        }
        true
    }

    /// Blocks added since the last flush.
    pub fn len(&self) -> usize {
        self.pending
    }

    /// Whether no block is waiting to be sent.
    pub fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Batches sent so far (each one atomic operation on an owner's queue).
    pub fn batches_sent(&self) -> u64 {
        self.cache.batches_sent
    }

    /// Sends every group to its owner now.
    pub fn flush(&mut self) {
        self.cache.flush();
        self.pending = 0;
    }
}

/// Sets the pending bits of blocks `indices` (ascending) of `page`: one
/// atomic OR per bitmap word (relaxed: the run's count, a release, publishes
/// them).
fn set_pending(page: &Page, indices: impl Iterator<Item = usize>) {
    let page_ptr = std::ptr::from_ref(page).cast_mut();
    // SAFETY: a live page (the callers hold blocks of it); runs are made of
    // blocks of 16 bytes or more, whose pages the pending bitmap covers.
    let bits = unsafe { crate::inspect::pending_bitmap(page_ptr, page.capacity().div_ceil(64)) };
    let mut word = usize::MAX;
    let mut mask = 0u64;
    for i in indices {
        if i / 64 != word {
            if mask != 0 {
                bits[word].fetch_or(mask, Ordering::Relaxed);
            }
            word = i / 64;
            mask = 0;
        }
        mask |= 1u64 << (i % 64);
    }
    if mask != 0 {
        bits[word].fetch_or(mask, Ordering::Relaxed);
    }
}

/// Sets the pending bit of every block of `page`: a word at a time (a
/// whole-page run stays O(words), not O(blocks)).
fn set_all_pending(page: &Page) {
    let cap = page.capacity();
    let page_ptr = std::ptr::from_ref(page).cast_mut();
    // SAFETY: as in `set_pending`.
    let bits = unsafe { crate::inspect::pending_bitmap(page_ptr, cap.div_ceil(64)) };
    for (w, word) in bits.iter().enumerate() {
        let n = (cap - w * 64).min(64);
        let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        word.fetch_or(mask, Ordering::Relaxed);
    }
}

impl Default for FreeBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for FreeBatch {
    fn drop(&mut self) {
        self.flush();
    }
}

impl fmt::Debug for FreeBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreeBatch")
            .field("pending", &self.pending)
            .finish()
    }
}

// SAFETY: a batch owns the dead blocks it holds outright (nobody else may use
// them), and the queues they go to are thread-safe; moving it between threads
// moves that ownership.
unsafe impl Send for FreeBatch {}
