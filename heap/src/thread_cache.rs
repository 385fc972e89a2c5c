//! The blocks this thread freed lately, per size class, kept to serve its
//! next allocations of their class before they go back to their pages:
//! jemalloc's and TCMalloc's thread cache, beside mimalloc's page lists.
//!
//! # Why
//! A block this thread has just freed is in its cache; the page free lists
//! hand out blocks freed long ago (a page's `free` list is refilled from
//! its `local_free` only when it runs dry), and blocks another thread
//! freed arrive through the inbox, a chain the owner walks at a cache miss
//! per block, the line last written on the freeing thread's core. A server
//! that hands work between threads (Larson and Krishnan's benchmark) frees
//! on each thread blocks the other allocated and allocates the same sizes
//! a moment later: sending each one home, two threads ran at 0.77x one
//! thread's rate where jemalloc and TCMalloc, which keep any freed block
//! for the freeing thread, scale.
//!
//! # Invariants
//! - A block here is a dead block of a small class page of any heap (this
//!   one, another, an abandoned one, or a segment adopted since): it has
//!   been through `block::on_free`, and its page still counts it as used
//!   (nobody told the page it was freed), so the page stays live, with its
//!   geometry, while the block is here.
//! - `held(c) <= LIMIT[c]` blocks of class `c` are held, in `c`'s run of
//!   `slots`; only this thread touches them (or, while its heap is lent
//!   with the cache unflushed, `lend_idle`, the holder of the lent lock,
//!   whose tidy flushes it), and the cache never reads or writes a
//!   block's memory (the allocator's checks aside).
//! - Served only to plain allocations (`LocalHeap::alloc_class`), never to
//!   `alloc_object`, whose allocated bit is written without atomics and
//!   belongs to the page's owner alone; a collector's sweep frees through
//!   page runs and batches, never through here.
//! - Only a thread that has allocated keeps other heaps' blocks
//!   (`allocates`, set by its first slow path, cleared when a new thread
//!   takes an exited one's heap): a thread that only frees (a collector's)
//!   sends them home at once.
//! - And not the first [`YOUNG_SENDS`] it frees (`young`, counted down from
//!   its first slow path): those go home too. A thread's first frees of
//!   other heaps' blocks are mostly of what it was handed as it started (a
//!   successor's predecessor's structures, a worker's request), in slots it
//!   keeps. A block kept stays its owner's; handed out again into such a
//!   slot, its next free is remote as well, and so on: on larson (each
//!   new thread takes over an exited thread's array) 1.25 – 1.8 million of
//!   two threads' 10 million frees were of such blocks, against the 10,000
//!   inherited. Blocks freed later, as live threads hand each other work
//!   (larson-ring, whose arrays go back to their blocks' owners), are kept
//!   as before. Keeping them only while a class ran low, or never, stopped
//!   the circulation too but cost larson-ring 1.3x – 2x its time
//!   (`docs/perf-log.md`, session 47).
//! - Every block goes back by `LocalHeap::flush_thread_cache`: from the slow
//!   path's housekeeping (every 64th slow path, at most once per purge
//!   delay), `flush`, `collect` and thread exit. A thread that keeps
//!   allocating holds a block for about a delay at most; one that stops
//!   (it no longer reaches the slow path) holds what it kept, at most the
//!   bound below, until it calls `flush` or exits.

use crate::block;
use crate::local_heap::LocalHeap;
use crate::size_class::{class_of, CLASS_SIZE, NUM_CLASSES};
use crate::sync::{AtomicU64, Ordering};
use std::ptr;

/// Blocks kept per class at most, and bytes: 128 of the smallest classes,
/// fewer of larger ones (64 of 256 bytes, 16 of 1 KiB), so that a thread
/// holds a few hundred KiB at the very most. Half as many cost larson 7%
/// on one thread and send three times as many blocks home on two; twice as
/// many gain nothing more.
const PER_CLASS: u32 = 128;
const PER_CLASS_BYTES: usize = 16 << 10;
/// Larger blocks always go back at once: the cache is for small blocks,
/// whose per-block return cost dominates.
pub(crate) const LARGEST: usize = 1024;

/// Blocks kept of each class (a table: a division on every free cost the
/// single-threaded replay 3%).
const LIMIT: [u32; NUM_CLASSES] = {
    let mut l = [0; NUM_CLASSES];
    let mut c = 0;
    while c < NUM_CLASSES {
        let size = CLASS_SIZE[c] as usize;
        if size <= LARGEST {
            let by_bytes = (PER_CLASS_BYTES / size) as u32;
            l[c] = if by_bytes < PER_CLASS { by_bytes } else { PER_CLASS };
        }
        c += 1;
    }
    l
};

/// Where class `c`'s slots begin in `ThreadCache::slots`; the last entry
/// is the number of slots (2,101 with the limits above: 16 KiB a heap).
const OFFSET: [u16; NUM_CLASSES + 1] = {
    let mut o = [0; NUM_CLASSES + 1];
    let mut c = 0;
    while c < NUM_CLASSES {
        o[c + 1] = o[c] + LIMIT[c] as u16;
        c += 1;
    }
    o
};
const SLOTS: usize = OFFSET[NUM_CLASSES] as usize;

/// All ones for true, zero for false.
const fn mask(b: bool) -> usize {
    0_usize.wrapping_sub(b as usize)
}

/// Bits of a class's word ([`ThreadCache::words`]) that count the blocks
/// held; the statistic is above them.
const HELD_BITS: u32 = 16;
const HELD_MASK: u64 = (1 << HELD_BITS) - 1;
const _: () = {
    let mut c = 0;
    while c < NUM_CLASSES {
        assert!((LIMIT[c] as u64) < HELD_MASK);
        c += 1;
    }
};

/// How many frees of other heaps' small blocks (1 KiB or less, the thread
/// cache's) a thread sends home, from its first allocation that reaches
/// the slow path, before its thread cache keeps any (`thread_cache.rs`): a
/// new thread's first frees of others' blocks are mostly of structures it
/// took over, which it would otherwise fill with blocks it does not own.
/// A thread that takes an exited thread's heap starts the count afresh.
/// 16,384 blocks: larson's inherited array of 5,000 slots went home whole
/// (none kept, against 1.25 – 1.8 million frees of circulating blocks at
/// two threads).
pub const YOUNG_SENDS: u32 = 16_384;

pub(crate) struct ThreadCache {
    /// Class `c`'s blocks are `slots[OFFSET[c]..OFFSET[c] + held(c)]`,
    /// the last freed last. An array of pointers, not a list linked
    /// through the blocks: a block another thread wrote last (larson's
    /// blocks, and those sharing its lines) is neither written when it is
    /// kept nor read when it is handed out again, as in jemalloc's and
    /// TCMalloc's caches. Linked through their first word, the link's
    /// write and read were where two-thread larson spent its time.
    slots: [*mut u8; SLOTS],
    /// Per class, one word: the blocks held in the low [`HELD_BITS`], and
    /// above them the other heaps' blocks ever kept
    /// ([`push`](Self::push) with `foreign`; wrapping past 2^48 of one
    /// class), a statistic ([`crate::HeapStats::remote_frees_cached`]).
    /// One word, so that a free stores once for both: a free and an
    /// allocation that stored a total of held blocks and this count
    /// beside the class's held count filled the core's store buffer
    /// sooner behind a program's stores that wait for lines another core
    /// holds (larson-ring at two threads, 1.08x – 1.24x jemalloc's time
    /// against 0.98x – 1.07x with one store a free). Only this thread
    /// writes the words, with an atomic load and store (no
    /// read-modify-write; never through `get_mut`, a plain write that
    /// would race with `stats`, which reads them from any thread).
    words: [AtomicU64; NUM_CLASSES],
    /// Whether this thread allocates small blocks (it has run the slow
    /// path once): a thread that only frees (a collector's) would only
    /// hold other heaps' blocks back, so its frees go home at once.
    allocates: bool,
    /// Frees of other heaps' small blocks still to send home before any is
    /// kept ([`YOUNG_SENDS`] from the first slow path that notes the thread
    /// allocates).
    young: u32,
    /// All ones when `allocates && young == 0` (the cache keeps a block
    /// whoever owns it), else zero: a mask, for
    /// [`refuses`](Self::refuses).
    keeps_any: usize,
}

/// What a thread cache gave up, to be sent back to the blocks' pages: how
/// many of each class's slots hold one. The slots are read in place
/// ([`ThreadCache::given_up`]) rather than copied: a copy is 16 KiB on
/// the stack of an allocation's slow path.
pub(crate) struct Drained {
    counts: [u32; NUM_CLASSES],
}

impl ThreadCache {
    pub(crate) const fn new() -> ThreadCache {
        ThreadCache {
            slots: [ptr::null_mut(); SLOTS],
            words: [const { AtomicU64::new(0) }; NUM_CLASSES],
            allocates: false,
            young: 0,
            keeps_any: 0,
        }
    }

    /// Notes that this thread allocates small blocks (from the slow path);
    /// the first time, its [`YOUNG_SENDS`] begin.
    #[inline]
    pub(crate) fn note_allocating(&mut self) {
        if !self.allocates {
            self.young = YOUNG_SENDS;
            self.keeps_any = mask(YOUNG_SENDS == 0);
        }
        self.allocates = true;
    }

    /// Forgets that the heap's thread allocated (a new thread takes the
    /// heap of one that exited); the cache is empty then (`tidy`).
    pub(crate) fn forget_allocating(&mut self) {
        debug_assert!(self.is_empty(), "heap: an orphan's thread cache holds blocks");
        self.allocates = false;
        // Armed again by the new thread's first slow path.
        self.young = 0;
        self.keeps_any = 0;
    }

    /// Notes that another heap's block of `size` bytes is sent home rather
    /// than kept: a young thread's frees of small blocks count its youth
    /// down ([`YOUNG_SENDS`]), and the last one lets the cache keep every
    /// heap's blocks from then on ([`refuses`](Self::refuses)). Only
    /// [`free_remote`](crate::free) calls it, for a block the cache
    /// refused or had no room for.
    #[inline(always)]
    pub(crate) fn note_sent(&mut self, size: usize) {
        if size <= LARGEST && self.allocates && self.young > 0 {
            self.young -= 1;
            self.keeps_any = mask(self.young == 0);
        }
    }

    /// Whether the cache refuses a block whose segment names `owner`, this
    /// thread's heap being `me`: another heap's, before the thread keeps
    /// any heap's blocks (it allocates and is no longer young; a thread
    /// that only frees sends others' home). Asked before
    /// [`class_for`](Self::class_for).
    ///
    /// Past its youth, whether a block is this heap's only decides what the
    /// statistic counts ([`push`](Self::push)), not which way the free
    /// goes. A branch on it was taken at random where live threads free
    /// each other's blocks (larson-ring: 0.43 more mispredictions a
    /// replacement at two threads than at one, under cachegrind), each
    /// resolved only once the segment's owner field had been read. So the
    /// answer is arithmetic on a mask, one test: written as
    /// `!keeps_any && owner != me`, the compiler tested the owner first,
    /// which took larson-ring pinned to one core at two threads back from
    /// 1.06x to 1.4x jemalloc's time.
    #[inline(always)]
    pub(crate) fn refuses(&self, owner: *const LocalHeap, me: *const LocalHeap) -> bool {
        (owner as usize ^ me as usize) & !self.keeps_any != 0
    }

    /// The class a freed block of `size` bytes (its page's block size, from
    /// the segment's side table, a class's size exactly) is kept in, if the
    /// cache keeps blocks of that size; `None` past them. The caller asks
    /// [`refuses`](Self::refuses) and [`room`](Self::room) too.
    #[inline(always)]
    pub(crate) fn class_for(size: usize) -> Option<usize> {
        if size > LARGEST {
            return None;
        }
        let class = class_of(size);
        debug_assert_eq!(CLASS_SIZE[class] as usize, size, "heap: not a class size");
        Some(class)
    }

    /// Class `class`'s word, if the class has room (`None`: it holds all it
    /// may), for [`push`](Self::push): read once for both, an atomic load
    /// the compiler does not merge.
    #[inline(always)]
    pub(crate) fn room(&self, class: usize) -> Option<u64> {
        let w = self.words[class].load(Ordering::Relaxed);
        ((w & HELD_MASK) < u64::from(LIMIT[class])).then_some(w)
    }

    /// Blocks of class `class` held.
    #[inline(always)]
    fn held(&self, class: usize) -> u32 {
        (self.words[class].load(Ordering::Relaxed) & HELD_MASK) as u32
    }

    /// Keeps dead block `p` in `class` (from [`class_for`](Self::class_for)),
    /// whose word `w` [`room`](Self::room) read, counted in the statistic if
    /// it is another heap's (`foreign`), without a branch on it.
    ///
    /// # Safety
    /// `p` is a dead block of a small page of class `class`, ours to hand
    /// over, already through `block::on_free`; `w` is the class's word as
    /// `room` returned it, with nothing kept or taken since.
    #[inline(always)]
    pub(crate) unsafe fn push(&mut self, class: usize, w: u64, p: *mut u8, foreign: bool) {
        // SAFETY: a dead block of ours (caller), at least 8 bytes.
        unsafe { block::on_keep(p) };
        let n = (w & HELD_MASK) as usize;
        debug_assert!(n < LIMIT[class] as usize, "heap: a thread cache class over its limit");
        // `n < LIMIT[class]` (the caller checked for room), so the slot is
        // in the class's run, below `OFFSET[class + 1] <= SLOTS`.
        // SAFETY: as just said.
        unsafe { *self.slots.get_unchecked_mut(OFFSET[class] as usize + n) = p };
        // The held count stays below `LIMIT[class] < 2^HELD_BITS`, so
        // adding 1 never carries into the statistic.
        let kept = u64::from(foreign) << HELD_BITS;
        self.words[class].store(w.wrapping_add(1 + kept), Ordering::Relaxed);
    }

    /// Other heaps' blocks the cache at `cache` ever kept, asked from any
    /// thread: through a pointer to the atomic words, never a reference to
    /// the cache, which its owner may be writing.
    ///
    /// # Safety
    /// `cache` points at a live thread cache (heaps are never unmapped).
    pub(crate) unsafe fn foreign_kept(cache: *const ThreadCache) -> u64 {
        // SAFETY: live (caller); only the atomic words are read.
        let words = unsafe { &*ptr::addr_of!((*cache).words) };
        words
            .iter()
            .map(|w| w.load(Ordering::Relaxed) >> HELD_BITS)
            .sum()
    }

    /// The block of class `class` freed last, or null.
    #[inline(always)]
    pub(crate) fn take(&mut self, class: usize) -> *mut u8 {
        let w = self.words[class].load(Ordering::Relaxed);
        let n = (w & HELD_MASK) as usize;
        if n == 0 {
            return ptr::null_mut();
        }
        // `0 < n <= LIMIT[class]` (invariant): slot `n - 1` of the class's
        // run, below `OFFSET[class + 1] <= SLOTS`.
        // SAFETY: as just said.
        let b = unsafe { *self.slots.get_unchecked(OFFSET[class] as usize + n - 1) };
        // `n > 0`: no borrow from the statistic.
        self.words[class].store(w - 1, Ordering::Relaxed);
        // A block this cache kept (invariant), of its class's size, dead
        // and ours.
        // SAFETY: as just said.
        unsafe {
            block::check_kept(b);
            block::on_reuse(b, CLASS_SIZE[class] as usize);
        }
        b
    }

    /// Whether any block is held: a look at every class, which only a
    /// flush and every 64th slow path's housekeeping ask (a running total
    /// would cost every free and allocation a store).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        (0..NUM_CLASSES).all(|c| self.held(c) == 0)
    }

    /// Gives up every block, for the caller to send back: the cache is
    /// empty on return, and each block given up is read with
    /// [`given_up`](Self::given_up).
    pub(crate) fn drain(&mut self) -> Drained {
        let mut counts = [0; NUM_CLASSES];
        for (c, n) in counts.iter_mut().enumerate() {
            let w = self.words[c].load(Ordering::Relaxed);
            *n = (w & HELD_MASK) as u32;
            self.words[c].store(w & !HELD_MASK, Ordering::Relaxed);
        }
        Drained { counts }
    }

    /// Block `k` of class `class` that the last [`drain`](Self::drain)
    /// gave up (`(class, k)` from [`Drained::blocks`]), still dead and
    /// through `on_free`. Read it before this cache keeps another block
    /// of the class, which would take its slot.
    #[inline]
    pub(crate) fn given_up(&self, class: usize, k: u32) -> *mut u8 {
        debug_assert!(k < LIMIT[class], "heap: not a slot of the class");
        self.slots[OFFSET[class] as usize + k as usize]
    }
}

impl Drained {
    /// Every block given up, as `(class, k)` for
    /// [`ThreadCache::given_up`].
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .flat_map(|(c, &n)| (0..n).map(move |k| (c, k)))
    }
}
