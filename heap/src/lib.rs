//! loam-heap: a scalable size-class allocator whose threads allocate without
//! locks or atomic read-modify-writes and whose frees from other threads flow
//! back to the owner in batches.
//!
//! It exists for one pattern (the seeds of the loam project): worker threads
//! allocate small objects at a furious rate while *other* threads (a garbage
//! collector's) free them. An allocator that takes a lock, or that hands each
//! freed block back through a shared structure, collapses under that pattern
//! on multicore machines. Here a thread never touches another thread's lists:
//! a foreign block either serves the freeing thread's own next allocation of
//! its class (its thread cache) or travels to its owner through the owner's
//! remote queue, in batches, and the owner puts it back on its slow path.
//!
//! # Glossary
//! - **Segment** (`segment.rs`): a 4 MiB mapping aligned to 4 MiB. Its first
//!   four 64 KiB *slices* hold the header (owner, free-slice bitmap, one page
//!   descriptor per slice) and the pages' three side bitmaps, mark,
//!   allocated and seal, for a collector; the other 60 slices hold pages.
//!   `p & !(4 MiB - 1)` finds the header of any block.
//! - **Page** (`page.rs`): a span of slices serving one size class (or one
//!   large object) for one owner: a bump region, a `free` list to allocate
//!   from and a `local_free` list the owner frees to.
//! - **Size class** (`size_class.rs`): 52 classes, 8-byte steps to 64,
//!   16-byte steps to 128, then four per doubling to 128 KiB. Larger requests
//!   get a span of whole slices; beyond 60 slices, a huge segment of their
//!   own, which waits in a small cache when freed (`segment.rs`, `HugeCache`)
//!   for the next huge request instead of being unmapped at once.
//!   A block aligned to 4 MiB or more cannot share a segment with its
//!   header: it gets a mapping of its own with a one-page header before it,
//!   on a list under one lock (`aligned.rs`); `free` tells it apart by its
//!   address alone (no block of a segment starts on a 4 MiB boundary).
//! - **LocalHeap** (`local_heap.rs`): one per thread: a page queue per class,
//!   its segments, its inbox of remote frees and its outgoing batches.
//! - **Inbox / RemoteQueue / RunQueue** (`remote.rs`): the owner's inbox
//!   of blocks freed elsewhere: eight lock-free MPSC queues (lanes) of
//!   block chains, so that the owner can walk several at once, and two
//!   queues of *runs*, each one page's blocks, which the owner applies
//!   without walking them: a sweeper's page runs and other threads' freed
//!   runs.
//! - **RemoteCache** (`remote_cache.rs`) and **freed runs**
//!   (`freed_run.rs`): the sender's side. Blocks of one page gather and go
//!   as one *freed run* (up to 128 blocks, 4,096 from a `FreeBatch`; a
//!   header in the first words of two of them), which the owner splices
//!   onto the page's free list in O(1), snmalloc's message per slab;
//!   pages a thread frees only a few blocks of go in per-owner chains,
//!   spread over the lanes.
//! - [`FreeBatch`] (`batch.rs`): the same batching for a collector's sweeper,
//!   and *page runs*: a page's dead blocks sent as one message to the owner's
//!   `RunQueue` (`remote.rs`), which resets a page the run empties in O(1);
//!   a run may be *held* ([`HeldRun`]: pending and counted out, sent later),
//!   so that a collector's finalizer keeps only its own blocks, not their
//!   page, from later sweeps.
//! - **Collector support** (`inspect.rs`): [`PageRef`] (a page's geometry and
//!   bitmaps), [`alloc_object`] (a block and its [`AllocatedBit`], which
//!   only the owning thread writes, so no atomic read-modify-write),
//!   [`mark_block`], and the *pending* bits of the blocks a page run holds
//!   until its owner takes it back ([`PageRef::pending_words`], with the
//!   [`RUN_PENDING`] flag and [`PageRef::runs_out`] count), which a sweeper
//!   subtracts from the allocated bits so that it can sweep the page's
//!   other blocks meanwhile; and a page's *tag* ([`PageRef::tag`]: the one
//!   tag, such as a runtime's id, of every object allocated in it since it
//!   was set up, or [`TAG_MIXED`]), which tells a sweeper whose objects a
//!   page holds without reading them.
//! - **Seal** (`seal.rs`): a collector's copy of the allocated bits as of
//!   its stop, taken with the mutators running: a [`SealEpoch`] raised at
//!   the stop, which each allocation after it checks (one load), the owner
//!   copying a page's bits before its first allocation there
//!   (its *image*), and the collector's walk ([`PageRef::sealed_words`])
//!   copying the pages no owner sealed.
//! - **ThreadCache** (`thread_cache.rs`): per class, the small blocks this
//!   thread freed lately (its own or other heaps'), which its next plain
//!   allocations of the class take first, last in first out, as jemalloc's
//!   and TCMalloc's thread caches do: an array of pointers per class, so
//!   that keeping a block and handing it out again touch none of its
//!   memory; bounded (128 blocks or 16 KiB a class) and sent back every
//!   purge delay, on `flush`, `collect` and exit.
//! - [`LoamAlloc`] (`global_alloc.rs`): the heap as a `GlobalAlloc`.
//!
//! # Allocation
//! 1. Fast path (`LocalHeap::alloc_class`): read the thread-local heap
//!    pointer, look the size class up in a table, pop the thread cache's
//!    stack of the class, else the current page's `free` list, else bump its
//!    pointer up to the page's bump limit. No atomic read-modify-write, no
//!    lock. (`alloc_object`, for a collector's objects, skips the thread
//!    cache: an object's allocated bit is its page owner's to write.)
//! 2. At the bump limit, if the page has no frees of its own waiting and is
//!    its class's only page with room: the limit moves a step (4 KiB, or
//!    four blocks) on, and that is all. Blocks freed are handed out again
//!    before memory no block has used is touched (`Page::extend_bump`).
//! 3. Slow path (`alloc_class_slow`), otherwise:
//!    send this thread's outgoing batches; drain its inbox (one swap each
//!    for a sweeper's page runs, each resetting or walked into its page,
//!    and for freed runs, each spliced onto its page's free list; one per
//!    non-empty lane, the lanes' chains walked interleaved);
//!    now and then visit orphaned heaps; purge slices idle for the purge
//!    delay; then move the first page of the class with frees (after
//!    merging its `local_free`) to the front, or else the first with bump
//!    room left, its limit a step on, parking full pages on the full list;
//!    else cut a page from a segment's free slices (adopting an exited
//!    thread's segments, taking a wholly free segment another thread gave
//!    up, or mapping a new one, if none has room).
//!
//! # Free
//! 0. A block of 1 KiB or less goes to the thread cache if its class has
//!    room (for another heap's block, only on a thread that allocates, a
//!    collector's frees going home at once, and not among the first
//!    [`YOUNG_SENDS`] such frees of a thread). Its page still counts it as
//!    used. The class comes from the segment's side table; past the
//!    thread's youth the free does not ask whose the block is (no branch
//!    on it: where live threads free each other's blocks it went either
//!    way at random).
//! 1. Local (`free_local`): the block's segment names this thread's heap as
//!    owner: push on the page's `local_free`, decrement `used`. An emptied
//!    page goes back to its segment (unless it is the class's current page);
//!    a page on the full list goes back to its class queue.
//! 2. Remote (`free_remote`): batch the block in this thread's
//!    `RemoteCache`, with the other blocks of its page; a page's 128
//!    blocks go as one freed run to the owner with one CAS, and so
//!    does a page's batch when another page takes its slot (four blocks or
//!    more; fewer join the owner's chain, sent at 128 blocks to one lane of
//!    its inbox), and everything at 256 KiB in all. A thread that only
//!    frees (a collector's) gets a heap for its batches on its first
//!    foreign free.
//!
//! # Who owns what across threads
//! - A page's lists and a heap's queues are touched only by the owning thread.
//!   Other threads write only a heap's inbox, its queues (and read a
//!   segment's `owner` and a page's immutable-while-live geometry); a
//!   collector also sets mark bits, and a run's sender its pending bits and
//!   count (`local_heap/runs.rs`). A page's allocated bits are the owner's
//!   alone: set when it allocates an object, cleared when a page run brings
//!   the object's block back.
//! - When a thread exits, its heap (segments, pages, queue) is *abandoned*
//!   onto the orphan list (`abandon.rs`). A new thread reuses a whole orphan;
//!   a live thread that needs memory *adopts* an orphan's segments. Remote
//!   frees that arrive at an abandoned heap are drained by whoever holds it
//!   next and forwarded if the segment moved: never lost, never applied twice.
//!   Heaps are never unmapped, so a stale owner pointer is always safe to use.
//! - Free slices are decommitted (`madvise`) after the purge delay
//!   ([`set_purge_delay`], raised by [`hold_freed_memory`] for a client
//!   that frees in bursts); entirely free segments are unmapped. An exited
//!   thread's heap keeps the free slices of its other segments for the
//!   delay too, so that the next thread reuses them without faulting them
//!   in; orphan visits (at least every half delay on any slow path)
//!   decommit them after it.
//! - A heap whose thread exits, or goes idle through [`hand_over`], gives
//!   its wholly free segments, still resident, to a process-wide cache
//!   under one lock (`segment_cache.rs`), which every heap takes from
//!   before it maps a segment: a thread's freed memory serves the others
//!   instead of waiting with it. What nobody takes goes back to the OS
//!   after ten purge delays (at most a second, or one purge delay if that
//!   is longer), on any slow path that purges or
//!   [`trim`].
//! - A thread about to wait *lends* its heap ([`lend`], `lend.rs`): it
//!   lists the heap under a lock and points its own heap pointer at a
//!   sentinel, so that none of its paths touch the heap until it takes it
//!   back. A thread that would map a segment first drains the lent heaps
//!   (what sweeps and frees sent them meanwhile) and takes the segments
//!   that leaves wholly free, or adopts a lent heap's segments as an
//!   orphan's. A thread holding an allocated bit it has not set lends
//!   nothing: that word is its alone to write. A thread idle between two
//!   hooks (a pool worker's park) lends with [`lend_idle`] until
//!   [`take_back_idle`].
//! - The seven global spin locks (orphan list, lent list, fallback heap,
//!   free-segment cache, segment registry, huge-segment cache, aligned
//!   spans) are taken around `fork` by
//!   `pthread_atfork` handlers (`fork.rs`), so a child of a multithreaded
//!   program inherits them free and can allocate.
//!
//! # Invariants
//! Stated on each struct (`Segment`, `Page`, `LocalHeap`, `RemoteQueue`,
//! `RemoteCache`, `FreedQueue`), and for the first three checked by their
//! `assert_valid` under the `expensive-checks` feature and in tests; corrupted metadata aborts with a
//! `heap:` message. Debug builds fill freed blocks and check the fill when a
//! block is reused; the `asan` feature tells AddressSanitizer which blocks
//! are free. Debug builds, and release builds with the `secure` feature,
//! check every free: the pointer must lie in a live segment (a bitmap of
//! them, `segment_map.rs`), be where a block starts, and not carry the
//! freed tag (its address, encoded, in a freed block's second word,
//! `block.rs`: so a block of 16 bytes or more; an 8-byte block has no
//! second word, and its double free goes unseen), else the process stops
//! with `heap: free of 0x…: …`; a free
//! block's link is stored encoded (mixed with its block's address and a
//! per-process key) and must decode to a block of its page before it is
//! followed; a block the thread cache keeps carries a tag in its first
//! word too, checked when it is handed out. Release builds do not check by
//! default: it costs larson 40% (`block.rs`, `CHECKED`). With `secure` (or
//! `LOAM_GUARD_PAGES=1`) every page and span ends in an inaccessible guard
//! page, which no block reaches into (`guard.rs`).
//!
//! # References
//! mimalloc (Leijen et al., "Mimalloc: Free List Sharding in Action", 2019):
//! segments found by masking, per-page free-list sharding, `local_free` kept
//! apart so the slow path runs regularly. snmalloc (Liétar et al., "snmalloc:
//! A Message Passing Allocator", 2019): remote frees as batched messages to
//! the owner's queue. Go's `runtime/malloc.go`: size classes and spans.

#![cfg_attr(loom, allow(dead_code, unused_imports))]

/// Items compiled only outside loom: under `--cfg loom` the crate is reduced
/// to the lock-free protocols its models check (the rest needs `const`
/// atomics and the OS, which loom's types do not offer).
macro_rules! not_under_loom {
    ($($item:item)*) => { $(#[cfg(not(loom))] $item)* };
}

mod block;
mod freed_run;
mod remote;
mod remote_cache;
mod spin;
mod sync;
mod walk_epochs;

not_under_loom! {
    mod abandon;
    mod aligned;
    mod alloc;
    mod batch;
    mod fork;
    mod free;
    mod global_alloc;
    mod guard;
    mod inspect;
    mod lend;
    mod local_heap;
    mod options;
    mod os;
    mod page;
    mod queue;
    mod seal;
    mod segment;
    mod segment_cache;
    mod segment_map;
    mod size_class;
    mod stats;
    mod thread_cache;

    pub use batch::{FreeBatch, HeldRun};
    pub use global_alloc::{good_size, usable_size, LoamAlloc};
    pub use lend::{lend, lend_idle, take_back_idle};
    pub use inspect::{
        alloc_object, alloc_object_in, alloc_object_in_unlendable, for_each_local_page,
        for_each_page, mark_block, mark_blocks, AllocatedBit, ObjectClass, PageInfo, PageRef,
        RUN_PENDING, TAG_MIXED,
    };
    pub use seal::SealEpoch;
    pub use options::{
        hold_freed_memory, parse_flag, parse_size, prefer_huge_pages, purge_delay, set_purge_delay,
    };
    pub use segment::{SEGMENT_SIZE, SLICE_SIZE};
    pub use size_class::{class_page_size, worst_case_waste, CLASS_SIZE, NUM_CLASSES, SMALL_MAX};
    pub use stats::{stats, ClassStats, HeapStats};
    pub use thread_cache::YOUNG_SENDS;
}

#[cfg(all(test, loom))]
mod handoff_model;
#[cfg(all(test, loom))]
mod pending_model;
#[cfg(all(test, loom))]
mod seal_model;
#[cfg(all(test, loom))]
mod walk_model;

/// Aborts the process with a `heap:`-prefixed message: heap metadata is
/// corrupted and continuing could only make it worse. Never allocates.
#[cold]
#[inline(never)]
pub(crate) fn fatal(msg: &str) -> ! {
    #[cfg(not(loom))]
    {
        options::warn(b"heap: ");
        options::warn(msg.as_bytes());
        options::warn(b"\n");
        std::process::abort()
    }
    #[cfg(loom)]
    panic!("heap: {msg}")
}

/// Sends this thread's pending remote frees to their owners now, and gives
/// back the blocks its thread cache keeps.
///
/// A thread batches the blocks it frees for other threads; batches go out
/// when they fill, on this thread's allocation slow path, and at thread exit.
/// An allocating thread also keeps the small blocks it freed lately for its
/// own next allocations (`thread_cache.rs`), for up to about a purge delay.
/// Call this when a thread that freed blocks is about to idle. (A thread
/// whose heap is lent, [`lend`], sends its frees at once and keeps none.)
///
/// # Examples
/// ```
/// let v = std::thread::spawn(|| vec![1u8; 100]).join().unwrap();
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// drop(v); // freed here, owned by the exited thread's heap
/// loam_heap::flush();
/// ```
#[cfg(not(loom))]
pub fn flush() {
    let heap = alloc::current_heap();
    if alloc::is_live(heap) {
        // SAFETY: the calling thread's own heap.
        unsafe {
            (*heap).flush_thread_cache();
            (*heap).cache.flush();
        }
    }
}

/// Whether the calling thread's heap is gone: the thread is exiting and
/// its thread-local destructors got past the heap's. Plain allocations
/// still work there (a shared fallback heap serves them), but a
/// collector's objects ([`alloc_object`]) need a heap of the thread's own
/// and come back null: a caller can tell this from the OS being out of
/// memory.
///
/// # Examples
/// ```
/// assert!(!loam_heap::thread_heap_exited());
/// ```
#[cfg(not(loom))]
pub fn thread_heap_exited() -> bool {
    alloc::current_heap() as usize == alloc::EXITED
}

/// Takes back the page runs other threads sent to this thread's heap
/// ([`FreeBatch::push_page_run`], and the runs of one page's blocks that
/// their frees gather): one relaxed load when there are none. A
/// collector's mutator calls it between steps, so that the blocks its
/// sweeper freed are reused soon (a page whose run is out is swept all the
/// same: its blocks are pending, see [`PageRef::pending_words`]). A thread
/// whose heap is lent ([`lend`]) leaves them to the threads that borrow
/// it.
///
/// # Examples
/// ```
/// loam_heap::reclaim_runs(); // nothing sent: a no-op
/// ```
#[cfg(not(loom))]
#[inline]
pub fn reclaim_runs() {
    let heap = alloc::current_heap();
    if alloc::is_live(heap) {
        // SAFETY: the calling thread's own heap.
        unsafe { (*heap).reclaim_runs() };
    }
}

/// Drains the queues of exited threads' heaps (blocks and page runs sent to
/// them), from any thread, so that what a sweeper freed for an exited
/// thread can be reused by the next thread to take its heap.
///
/// # Examples
/// ```
/// loam_heap::drain_orphans();
/// ```
#[cfg(not(loom))]
pub fn drain_orphans() {
    if abandon::orphan_count() == 0 {
        return;
    }
    abandon::for_each_orphan(|o| {
        // SAFETY: held exclusively under the orphan lock.
        unsafe { (*o).drain_remote() };
    });
}

/// Gives back everything that can be given back, now: sends this thread's
/// pending remote frees, drains its remote queue, drains the queues of exited
/// threads' heaps and of lent ones ([`lend`]), releases empty pages and
/// decommits free memory without waiting for the purge delay.
///
/// The heap does this on its own as it runs; call `collect` when a thread
/// goes idle after freeing much, so that the process's resident size falls
/// back, or before reading [`stats`] for exact figures.
///
/// # Examples
/// ```
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// let big: Vec<Box<[u8; 64]>> = (0..10_000).map(|_| Box::new([1; 64])).collect();
/// drop(big);
/// loam_heap::collect();
/// ```
#[cfg(not(loom))]
pub fn collect() {
    // A block drained from one orphan may be forwarded to another already
    // visited (its segment was adopted meanwhile), so repeat until a pass
    // finds every queue empty. Each forward moves a block to its segment's
    // current owner, so this settles in a pass or two.
    let heap = alloc::current_heap();
    for _ in 0..16 {
        let mut drained = 0;
        if alloc::is_live(heap) {
            // SAFETY: the calling thread's own heap.
            let h = unsafe { &mut *heap };
            drained += h.tidy(true);
            drained += h.visit_orphans(false, true);
            drained += h.tidy(true);
        } else {
            abandon::for_each_orphan(|o| {
                // SAFETY: held exclusively under the orphan lock.
                drained += unsafe { (*o).tidy(true) };
            });
            abandon::settle_orphans();
        }
        if alloc::fallback_exists() {
            drained += alloc::with_fallback(|h| h.tidy(true)).unwrap_or(0);
        }
        lend::for_each_lent(|h| drained += h.tidy(true));
        if drained == 0 {
            break;
        }
    }
    segment_cache::expire(true);
    segment::purge_huge_cache();
}

/// Gives back what the calling thread's heap holds freed, now: sends its
/// cached and batched frees, takes back the blocks and page runs other
/// threads sent it, releases its empty pages and decommits its free slices
/// without waiting for the purge delay. Unlike [`collect`], it leaves other
/// threads' heaps (exited ones included) alone, so a thread can call it as
/// it goes idle without costing the others their warm memory; and it leaves
/// the process's cache of freed huge blocks to the purge delay. A thread
/// with no heap (none allocated yet, or past its exit) has nothing to give.
/// The pages it releases are faulted in again when the thread allocates
/// there next.
///
/// Only a heap's own thread does any of this (the heap does it on its own
/// slow paths as it runs): a thread that waits a long time after others
/// freed its blocks keeps them resident unless it calls this first.
///
/// # Examples
/// ```
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// let big: Vec<Box<[u8; 64]>> = (0..10_000).map(|_| Box::new([1; 64])).collect();
/// drop(big);
/// loam_heap::release();
/// ```
#[cfg(not(loom))]
pub fn release() {
    let heap = alloc::settled_heap();
    if alloc::is_live(heap) {
        // SAFETY: the calling thread's own heap.
        unsafe { (*heap).tidy(true) };
    }
}

/// Hands what the calling thread's heap holds freed over to the other
/// threads, as the thread goes idle: sends its cached frees, takes back
/// the blocks and page runs other threads sent it and releases its empty
/// pages, as [`release`] does; then gives its wholly free segments, still
/// resident, to a process-wide cache that every thread takes from before
/// it maps new memory, and decommits its other free slices (which no
/// other thread can use) at once. What nobody takes goes back to the OS
/// after ten purge delays (at most a second, or one purge delay if that
/// is longer), on the next slow path of
/// any thread that purges, or [`trim`].
///
/// For a thread about to wait while others allocate: they reuse its
/// memory instead of faulting in their own (loam's `Mutator::blocking`
/// calls it). A thread that goes idle with nobody left allocating
/// returns its memory sooner with [`release`].
///
/// # Examples
/// ```
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// // Nothing goes back to the OS before the other thread has run.
/// loam_heap::set_purge_delay(std::time::Duration::from_secs(3600));
/// let big: Vec<Box<[u8; 64]>> = (0..100_000).map(|_| Box::new([1; 64])).collect();
/// drop(big);
/// loam_heap::hand_over();
/// assert!(loam_heap::stats().segment_cached_bytes > 0);
/// let mapped = loam_heap::stats().segments_mapped_total;
/// std::thread::spawn(|| drop(vec![[0u8; 64]; 10_000])).join().unwrap();
/// assert_eq!(loam_heap::stats().segments_mapped_total, mapped);
/// ```
#[cfg(not(loom))]
pub fn hand_over() {
    let heap = alloc::settled_heap();
    if alloc::is_live(heap) {
        // SAFETY: the calling thread's own heap.
        unsafe { (*heap).hand_over() };
    }
}

/// Gives back to the OS what the process-wide caches have held past their
/// time, from any thread: wholly free segments that threads gave up as
/// they went idle ([`hand_over`]) or exited, which wait for another
/// thread's need for ten purge delays (at most a second, or one purge
/// delay if that is longer) from their last
/// free, and freed huge mappings, which wait for one purge delay; and the
/// heaps lent that long by threads waiting in [`lend`], which it drains,
/// whose wholly free segments it caches and whose free slices idle that
/// long it decommits. Heaps do
/// this on their own slow paths that purge; a program whose threads may
/// all sit idle calls it so that the memory still goes back (loam's
/// garbage collector does, after each cycle and `Mutator::blocking`).
///
/// Returns how long until the next of what is left is due, if anything
/// is left: call again then.
///
/// # Examples
/// ```
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// let t = std::thread::spawn(|| drop(vec![1u8; 1 << 20]));
/// t.join().unwrap();
/// loam_heap::set_purge_delay(std::time::Duration::ZERO);
/// assert_eq!(loam_heap::trim(), None);
/// ```
#[cfg(not(loom))]
pub fn trim() -> Option<std::time::Duration> {
    let lent = lend::tidy_lent();
    let segments = segment_cache::expire(false);
    let huge = segment::expire_huge_cache();
    segments
        .into_iter()
        .chain(huge)
        .chain(lent)
        .min()
        .map(std::time::Duration::from_millis)
}

/// Checks every invariant of the calling thread's heap and of the orphaned
/// heaps, aborting with a `heap:` message on the first broken one. Walks all
/// metadata: for tests and debugging.
#[cfg(not(loom))]
pub fn assert_valid() {
    let heap = alloc::settled_heap();
    if alloc::is_live(heap) {
        // SAFETY: the calling thread's own heap.
        unsafe { (*heap).assert_valid() };
    }
    abandon::for_each_orphan(|o| {
        // SAFETY: held exclusively under the orphan lock.
        unsafe { (*o).assert_valid() }
    });
}
