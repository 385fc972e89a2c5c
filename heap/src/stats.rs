//! Heap statistics: cumulative counters bumped on slow paths, and a snapshot
//! computed by walking every segment's page descriptors (so the allocation
//! fast path pays nothing for them).

use crate::local_heap::ALL_HEAPS;
use crate::page::PageState;
use crate::remote::REMOTE;
use crate::segment::{self, Segment, SegmentKind, HEADER_SLICES, SLICES, SLICE_SIZE};
use crate::size_class::{class_of, CLASS_SIZE, NUM_CLASSES, SMALL_MAX};
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::ptr;

pub(crate) struct Counters {
    pub(crate) segments_mapped: CachePadded<AtomicU64>,
    pub(crate) segments_unmapped: CachePadded<AtomicU64>,
    pub(crate) pages_abandoned: AtomicU64,
    pub(crate) pages_adopted: AtomicU64,
    pub(crate) heaps_abandoned: AtomicU64,
    pub(crate) bytes_decommitted: AtomicU64,
    pub(crate) fallback_allocs: AtomicU64,
    pub(crate) unguarded: AtomicU64,
    pub(crate) unmaps_refused: AtomicU64,
    pub(crate) lent_borrows: AtomicU64,
    pub(crate) lent_adoptions: AtomicU64,
}

pub(crate) static COUNTERS: Counters = Counters {
    segments_mapped: CachePadded::new(AtomicU64::new(0)),
    segments_unmapped: CachePadded::new(AtomicU64::new(0)),
    pages_abandoned: AtomicU64::new(0),
    pages_adopted: AtomicU64::new(0),
    heaps_abandoned: AtomicU64::new(0),
    bytes_decommitted: AtomicU64::new(0),
    fallback_allocs: AtomicU64::new(0),
    unguarded: AtomicU64::new(0),
    unmaps_refused: AtomicU64::new(0),
    lent_borrows: AtomicU64::new(0),
    lent_adoptions: AtomicU64::new(0),
};

/// One size class in a [`HeapStats`] snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// The class's block size in bytes.
    pub block_size: u64,
    /// Pages serving the class.
    pub pages: u64,
    /// Blocks handed out and not yet returned to their page.
    pub blocks_used: u64,
    /// Blocks the class's pages can hold.
    pub blocks_capacity: u64,
}

/// A snapshot of the whole heap (every thread's).
///
/// Obtained with [`stats`]. Figures are read while other threads run, so each
/// is exact for some recent moment but they need not agree with each other.
/// A block freed by another thread counts as allocated until its owner drains
/// it from its remote queue ([`crate::collect`] drains everything reachable
/// from the calling thread and from exited threads).
#[derive(Debug, Clone, Copy)]
pub struct HeapStats {
    /// Bytes in blocks handed out (block sizes, so including class rounding).
    pub allocated_bytes: u64,
    /// Bytes of slices in use or freed but not yet decommitted, plus segment
    /// headers; with [`huge_cached_bytes`](Self::huge_cached_bytes) (freed
    /// huge mappings waiting, still resident, for the next huge request,
    /// which no segment walk sees), an upper bound on what the heap keeps
    /// resident.
    pub committed_bytes: u64,
    /// Bytes mapped from the OS.
    pub mapped_bytes: u64,
    /// Live segments.
    pub segments: u64,
    /// Per size class.
    pub classes: [ClassStats; NUM_CLASSES],
    /// Bytes in large and huge spans handed out.
    pub large_bytes: u64,
    /// Large and huge spans handed out.
    pub large_count: u64,
    /// Blocks freed by a thread that did not own them (sent to the owner's
    /// inbox, in a chain or a run).
    pub remote_frees_sent: u64,
    /// Blocks freed by a thread that did not own them and kept in that
    /// thread's cache for its own next allocations of their size, instead
    /// of being sent: a process total since start, of every time a block
    /// was kept (a block the cache sends home later counts in
    /// `remote_frees_sent` too, unless its segment has become the freeing
    /// heap's meanwhile). Such a block stays its owner's: when the thread
    /// allocates it again and frees it, that free is remote again (see
    /// [`crate::YOUNG_SENDS`]). Counts past 2^48 blocks of one size
    /// class kept by one heap wrap.
    pub remote_frees_cached: u64,
    /// Remote frees taken back by their owners (a block forwarded to a
    /// segment's new owner counts once, where it is applied).
    pub remote_frees_drained: u64,
    /// Batches (chains and runs) sent, one atomic operation each; blocks
    /// and runs forwarded to a segment's new owner are not counted.
    pub remote_batches: u64,
    /// Of `remote_batches`, the runs of one page's blocks that the owner
    /// splices without walking them (a thread's frees, and `FreeBatch::push`);
    /// the rest are chains the owner walks, and a sweeper's page runs.
    pub remote_freed_runs: u64,
    /// Pages left behind by exiting threads.
    pub pages_abandoned: u64,
    /// Pages taken over from exited threads, by live or new threads, and
    /// from the lent heaps of waiting threads ([`crate::lend`]).
    pub pages_adopted: u64,
    /// Heaps abandoned by exiting threads.
    pub heaps_abandoned: u64,
    /// Heaps lent now by threads waiting in [`crate::lend`] or idle in
    /// [`crate::lend_idle`].
    pub heaps_lent: u64,
    /// Times a thread about to map memory found some in a lent heap:
    /// wholly free segments the heap's drain gave to the cache (which
    /// another thread may take first), or the heap's segments, adopted.
    pub lent_borrows: u64,
    /// Of `lent_borrows`, the lent heaps whose segments and pages another
    /// thread took (its owner's frees of what it left there are remote;
    /// the pages count in `pages_adopted` too).
    pub lent_adoptions: u64,
    /// Thread heaps ever created (they are reused, never unmapped).
    pub heaps_created: u64,
    /// Segments mapped since start.
    pub segments_mapped_total: u64,
    /// Segments unmapped since start.
    pub segments_unmapped_total: u64,
    /// Bytes decommitted (`madvise`) since start.
    pub bytes_decommitted_total: u64,
    /// Allocations made by threads whose heap had already been abandoned
    /// (thread-local destructors running after the heap's exit hook), served
    /// by a shared heap under a lock.
    pub fallback_allocs: u64,
    /// Pages and spans that went without their guard page because the
    /// kernel refused one (past `vm.max_map_count`), with guard pages on.
    pub unguarded: u64,
    /// Unmaps the kernel refused (past `vm.max_map_count`): their pages were
    /// given back, their address space stays mapped, out of the other
    /// figures.
    pub unmaps_refused: u64,
    /// Bytes of freed huge segments kept mapped for reuse (not in
    /// `mapped_bytes`; given back after the purge delay, or by
    /// [`crate::collect`]).
    pub huge_cached_bytes: u64,
    /// Bytes of wholly free segments that threads gave up as they went idle
    /// or exited, waiting for another thread's need (in `mapped_bytes`;
    /// their resident slices are in `committed_bytes`).
    pub segment_cached_bytes: u64,
}

/// Takes a [`HeapStats`] snapshot of the whole heap.
///
/// Walks every page descriptor under the segment registry lock: cheap enough
/// to call often, but not on a hot path.
///
/// # Examples
/// ```
/// use std::alloc::{GlobalAlloc, Layout};
/// let layout = Layout::from_size_align(100, 8).unwrap();
/// // SAFETY: a non-zero-sized layout.
/// let p = unsafe { loam_heap::LoamAlloc.alloc(layout) };
/// let s = loam_heap::stats();
/// assert!(s.allocated_bytes >= 112);
/// assert!(s.classes.iter().any(|c| c.block_size == 112 && c.blocks_used >= 1));
/// // SAFETY: `p` came from `alloc` with this layout and is freed once.
/// unsafe { loam_heap::LoamAlloc.dealloc(p, layout) };
/// ```
pub fn stats() -> HeapStats {
    let mut s = HeapStats {
        allocated_bytes: 0,
        committed_bytes: 0,
        mapped_bytes: 0,
        segments: 0,
        classes: [ClassStats::default(); NUM_CLASSES],
        large_bytes: 0,
        large_count: 0,
        remote_frees_sent: REMOTE.sent.load(Ordering::Relaxed),
        remote_frees_cached: 0,
        remote_frees_drained: REMOTE.drained.load(Ordering::Relaxed),
        remote_batches: REMOTE.batches.load(Ordering::Relaxed),
        remote_freed_runs: REMOTE.freed_runs.load(Ordering::Relaxed),
        pages_abandoned: COUNTERS.pages_abandoned.load(Ordering::Relaxed),
        pages_adopted: COUNTERS.pages_adopted.load(Ordering::Relaxed),
        heaps_abandoned: COUNTERS.heaps_abandoned.load(Ordering::Relaxed),
        heaps_lent: crate::lend::lent_count() as u64,
        lent_borrows: COUNTERS.lent_borrows.load(Ordering::Relaxed),
        lent_adoptions: COUNTERS.lent_adoptions.load(Ordering::Relaxed),
        heaps_created: 0,
        segments_mapped_total: COUNTERS.segments_mapped.load(Ordering::Relaxed),
        segments_unmapped_total: COUNTERS.segments_unmapped.load(Ordering::Relaxed),
        bytes_decommitted_total: COUNTERS.bytes_decommitted.load(Ordering::Relaxed),
        fallback_allocs: COUNTERS.fallback_allocs.load(Ordering::Relaxed),
        unguarded: COUNTERS.unguarded.load(Ordering::Relaxed),
        unmaps_refused: COUNTERS.unmaps_refused.load(Ordering::Relaxed),
        huge_cached_bytes: crate::segment::huge_cached_bytes() as u64,
        segment_cached_bytes: crate::segment_cache::cached_bytes() as u64,
    };
    for (c, cs) in s.classes.iter_mut().enumerate() {
        cs.block_size = u64::from(CLASS_SIZE[c]);
    }
    // Spans aligned past a segment (`aligned.rs`): large spans of their
    // own mappings, in no segment.
    let (spans, span_mapped, span_usable) = crate::aligned::totals();
    s.large_count += spans as u64;
    s.large_bytes += span_usable as u64;
    s.allocated_bytes += span_usable as u64;
    s.mapped_bytes += span_mapped as u64;
    s.committed_bytes += span_mapped as u64;
    segment::for_each_segment(|seg| {
        s.segments += 1;
        // SAFETY: registered segments stay mapped while the registry lock is
        // held; the descriptor fields read here are atomics.
        unsafe {
            s.mapped_bytes += (*seg).map_size as u64;
            if (*seg).kind == SegmentKind::Huge {
                s.committed_bytes += (*seg).map_size as u64;
            } else {
                let free = (*seg).free_slices.load(Ordering::Relaxed);
                let dirty = (*seg).dirty.load(Ordering::Relaxed);
                let resident = (SLICES as u32 - free.count_ones() + dirty.count_ones()) as u64;
                s.committed_bytes += resident * SLICE_SIZE as u64;
            }
            for i in HEADER_SLICES.min(SLICES)..SLICES {
                let d = Segment::page(seg, i);
                let used = u64::from((*d).used());
                let bs = (*d).block_size() as u64;
                match (*d).state() {
                    PageState::Small => {
                        // The class from the (atomic) block size: `class` itself is
                        // owner-only. A page being set up may show a stale size.
                        let c = &mut s.classes[class_of((bs as usize).clamp(1, SMALL_MAX))];
                        c.pages += 1;
                        c.blocks_used += used;
                        c.blocks_capacity += (*d).capacity() as u64;
                        s.allocated_bytes += used * bs;
                    }
                    PageState::Large | PageState::Huge => {
                        s.large_count += used;
                        s.large_bytes += used * bs;
                        s.allocated_bytes += used * bs;
                    }
                    _ => {}
                }
            }
        }
    });
    let mut h = ALL_HEAPS.load(Ordering::Acquire);
    while !h.is_null() {
        s.heaps_created += 1;
        // Heaps are never unmapped; `all_next` was written before the heap
        // was published (Release CAS, Acquire load above). Of its other
        // fields only the thread cache's per-class words are read (their
        // counts of other heaps' blocks), atomics any thread may load.
        // SAFETY: as just said.
        unsafe {
            s.remote_frees_cached +=
                crate::thread_cache::ThreadCache::foreign_kept(ptr::addr_of!((*h).tcache));
            h = (*h).all_next;
        }
    }
    s
}
