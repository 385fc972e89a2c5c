//! Segments: 4 MiB regions aligned to their size, cut into 64 KiB slices.
//! Masking any interior pointer finds its segment header, and the slice index
//! finds its page descriptor, in O(1) with no lock and no lookup table.

use crate::local_heap::LocalHeap;
use crate::os;
use crate::page::{Page, PageState};
use crate::spin::SpinLock;
use crate::walk_epochs::WalkEpochs;
use crate::sync::{AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
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
/// Slices at the start of each segment that hold the header and the three
/// side bitmaps (mark, allocated, seal); pages use the rest. The bitmap
/// slices are resident only where touched.
pub const HEADER_SLICES: usize = 4;
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
/// Offset of the first seal bitmap (a page's allocated bits as its owner
/// sealed them, `seal.rs`): the slice after the allocated bits, laid out
/// as they are.
pub(crate) const SEAL_OFFSET: usize = 3 * SLICE_SIZE;
/// Offset of the first pending bitmap (blocks a page run out holds, see
/// `PageRef::pending_words`): the second half of the header's slice.
pub(crate) const PENDING_OFFSET: usize = SLICE_SIZE / 2;
/// Bytes of pending bitmap per slice: one bit per block of a page whose
/// blocks are at least `MIN_RUN_BLOCK` (16) bytes, the only pages a
/// sweeper's page runs are made of (at most 4,096 blocks).
pub(crate) const PENDING_BYTES_PER_SLICE: usize = SLICE_SIZE / crate::remote::MIN_RUN_BLOCK / 8;

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
    /// (before publication), an adopter holding the orphan lock, and a
    /// heap taking the segment from the free-segment cache under its lock
    /// (Release). Readers: every `free` (Relaxed: it only picks a queue; a
    /// stale owner is an abandoned heap whose queue is still drained, see
    /// `abandon.rs`; a cached segment's names the heap that gave it up,
    /// and no block of it is live to be freed).
    pub(crate) owner: AtomicPtr<LocalHeap>,
    pub(crate) kind: SegmentKind,
    /// Bytes mapped (immutable).
    pub(crate) map_size: usize,
    /// Bit `i` set: slice `i` is free. Written by the owner (relaxed
    /// load/store), read by statistics.
    pub(crate) free_slices: AtomicU64,
    /// Bit `i` set: free slice `i` may be resident (not yet decommitted).
    pub(crate) dirty: AtomicU64,
    /// When a slice of this segment was last freed (the owner's; the
    /// free-segment cache's, under its lock, while it holds the segment).
    pub(crate) last_free_ms: u64,
    /// Bit `i` set: the last OS page of slice `i` is a guard page,
    /// inaccessible (owner only; `guard.rs`). Zero in a huge segment, whose
    /// guard is always its mapping's last page.
    pub(crate) guarded: u64,
    /// Owner's segment list (owner only), or the free-segment cache's list
    /// (under its lock).
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
    /// The first slice of the page covering each slice (its blocks start
    /// at that slice's base), written with `slice_block_size`: with it a
    /// free checks that a pointer is a block start without the descriptor.
    pub(crate) slice_first: [AtomicU8; SLICES],
    /// One descriptor per slice.
    pub(crate) pages: [Page; SLICES],
}

const _: () = assert!(std::mem::size_of::<Segment>() <= PENDING_OFFSET);
const _: () = assert!(PENDING_OFFSET + SLICES * PENDING_BYTES_PER_SLICE <= MARK_OFFSET);
const _: () = assert!(MARK_OFFSET + SLICES * MARK_BYTES_PER_SLICE <= ALLOC_OFFSET);
const _: () = assert!(ALLOC_OFFSET + SLICES * MARK_BYTES_PER_SLICE <= SEAL_OFFSET);
const _: () = assert!(SEAL_OFFSET + SLICES * MARK_BYTES_PER_SLICE <= HEADER_SLICES * SLICE_SIZE);

/// All live segments, for statistics and page iteration.
pub(crate) struct Registry {
    head: *mut Segment,
    count: usize,
    mapped: usize,
    /// The walks under way without the lock (`walk_epochs.rs`).
    epochs: WalkEpochs,
    /// Segments unlinked during walks, by the parity of the epoch they died
    /// in (`WalkEpochs::defer_to`; linked through `next`: an unlinked
    /// segment is in no owner's list).
    deferred: [*mut Segment; 2],
}

impl Registry {
    /// After a walk of parity `p` ended: takes the lists of what died in
    /// the epochs no walk under way can meet any more (two lists, to
    /// release once the lock is let go).
    fn walk_ended(&mut self, p: usize) -> [*mut Segment; 2] {
        let mut dead = [ptr::null_mut(); 2];
        for (d, q) in dead.iter_mut().zip(self.epochs.end(p)) {
            if let Some(q) = q {
                *d = std::mem::replace(&mut self.deferred[q], ptr::null_mut());
            }
        }
        dead
    }
}

// SAFETY: the registry's pointers are only followed under its lock, and the
// segments they name stay mapped until they are unlinked under that lock.
unsafe impl Send for Registry {}

pub(crate) static REGISTRY: SpinLock<Registry> = SpinLock::new(Registry {
    head: ptr::null_mut(),
    count: 0,
    mapped: 0,
    epochs: WalkEpochs::new(),
    deferred: [ptr::null_mut(); 2],
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

/// Whether `p` is where a block of its page starts, by the segment's side
/// tables (`size` is `block_size_of(p)`) and the page's capacity: a
/// multiple of the block size past the first slice of its page, found
/// with the class's reciprocal, not a division, below the capacity.
///
/// # Safety
/// `p` lies in a live segment of ours.
#[inline(always)]
pub(crate) unsafe fn is_block_start(p: *const u8, size: usize) -> bool {
    let seg = segment_of(p);
    let in_seg = (p as usize) - (seg as usize);
    let idx = in_seg >> SLICE_SHIFT;
    // SAFETY: `seg` is live (caller) and `idx < SLICES`.
    let first = unsafe { (*seg).slice_first[idx].load(Ordering::Relaxed) } as usize;
    if size == 0 || idx < HEADER_SLICES || first > idx {
        return false; // the header, or a slice no page ever covered
    }
    // `first` is the first slice of a page covering `p`, whose descriptor
    // is in the live segment's header; its fields read here are atomic.
    let page = Segment::page(seg, first);
    // A page given back keeps its side tables (they are only rewritten
    // when a page is laid there again), so its descriptor's state says
    // whether one is there now: a free into a page given back is none.
    // SAFETY: as just said.
    if matches!(unsafe { (*page).state() }, PageState::Free | PageState::Interior) {
        return false;
    }
    let offset = (in_seg - (first << SLICE_SHIFT)) as u64;
    if size > crate::size_class::SMALL_MAX {
        return offset == 0; // a span of one block
    }
    let c = crate::size_class::class_of(size);
    let k = (offset * crate::size_class::RECIP[c]) >> crate::size_class::RECIP_SHIFT;
    // Below the page's capacity too: a multiple of the size past its last
    // block (in the page's tail, short of a block) is none.
    // SAFETY: as above.
    let capacity = unsafe { (*page).capacity() } as u64;
    k * size as u64 == offset && k < capacity
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

/// Huge segments freed lately, kept mapped for the next huge allocation.
///
/// A huge segment holds one object past the largest size class (a managed
/// array past 4 MiB, a big `Vec`). Programs that grow such objects free
/// one size and ask for the next (a list doubling its array, a dictionary
/// its entries); unmapping each and mapping the next costs a page fault
/// and a zeroed page per 4 KiB the new one touches: 39% of the time of
/// pushing a million elements into a managed list went to the kernel
/// zeroing pages. A freed huge mapping waits here, dirty, for at most the
/// purge delay (checked whenever the cache is used, and by
/// [`crate::collect`]), and serves a request of up to its own size that
/// wastes at most half of it. The state in its header is zeroed on reuse
/// (the segment struct and both side bitmaps); its block is not, so a reused block is not reported as zero to `alloc_zeroed`.
///
/// # Invariants
/// A slot with `base != 0` owns a whole, unregistered mapping of `size`
/// bytes that no thread refers to; `HUGE_CACHED` counts those slots (it is
/// changed under the lock, and read without it only as a hint).
pub(crate) struct HugeCache {
    slots: [HugeSlot; HUGE_CACHE_SLOTS],
}

#[derive(Clone, Copy)]
struct HugeSlot {
    /// The mapping's base (0: an empty slot) and size.
    base: usize,
    size: usize,
    freed_ms: u64,
}

const EMPTY_SLOT: HugeSlot = HugeSlot {
    base: 0,
    size: 0,
    freed_ms: 0,
};

/// Mappings the cache holds at most, and the bytes. A garbage-collected
/// program frees its huge arrays a cycle after it stopped using them, all
/// at once: a list that grew to 8 MiB three times between two cycles frees
/// its 4 and 8 MiB arrays three times over. Four slots (the first version)
/// let two thirds of those go back to the OS and the next cycle's growth
/// fault them in again (4,000 faults, 70% of the time of a million pushes
/// on this VM). The bound on what the cache keeps resident is the purge
/// delay, as for freed slices; the byte budget only stops one burst of
/// frees from holding more than a program is likely to ask for again.
const HUGE_CACHE_SLOTS: usize = 32;
const HUGE_CACHE_BYTES: usize = 1 << 30;

/// Mappings in the cache now: the thread heaps' purge looks at the cache
/// only when this is not zero (a relaxed load, no lock).
static HUGE_CACHED: AtomicUsize = AtomicUsize::new(0);

pub(crate) static HUGE_CACHE: SpinLock<HugeCache> = SpinLock::new(HugeCache {
    slots: [EMPTY_SLOT; HUGE_CACHE_SLOTS],
});

/// Mappings taken out of the cache, to unmap outside its lock: index `i`
/// for slot `i`, the last one for a mapping never cached. A fixed array:
/// this runs inside the allocator, which must not allocate.
type Evicted = [HugeSlot; HUGE_CACHE_SLOTS + 1];

/// Takes the smallest cached mapping that holds `map_size` bytes and is
/// at most twice that.
fn huge_cache_take(map_size: usize) -> Option<(usize, usize)> {
    let mut out = [EMPTY_SLOT; HUGE_CACHE_SLOTS + 1];
    let mut cache = HUGE_CACHE.lock();
    let _ = expire(&mut cache, false, &mut out);
    let best = cache
        .slots
        .iter_mut()
        .filter(|s| s.base != 0 && s.size >= map_size && s.size / 2 <= map_size)
        .min_by_key(|s| s.size)
        .map(|s| std::mem::replace(s, EMPTY_SLOT));
    if best.is_some() {
        HUGE_CACHED.fetch_sub(1, Ordering::Relaxed);
    }
    drop(cache);
    unmap_all(&out);
    best.map(|s| (s.base, s.size))
}

/// Keeps a freed huge mapping, or unmaps it (too large, or the cache full
/// of younger ones: the oldest goes).
fn huge_cache_put(base: usize, size: usize) {
    let mut out = [EMPTY_SLOT; HUGE_CACHE_SLOTS + 1];
    if size > HUGE_CACHE_BYTES {
        out[HUGE_CACHE_SLOTS] = HugeSlot {
            base,
            size,
            freed_ms: 0,
        };
        unmap_all(&out);
        return;
    }
    let mut cache = HUGE_CACHE.lock();
    let _ = expire(&mut cache, false, &mut out);
    // Make room: the oldest mappings go until a slot is free and the
    // budget holds this one. Each goes to its own index of `out`.
    loop {
        let used: usize = cache.slots.iter().map(|s| s.size).sum();
        let free = cache.slots.iter().position(|s| s.base == 0);
        if free.is_some() && used + size <= HUGE_CACHE_BYTES {
            break;
        }
        let i = (0..HUGE_CACHE_SLOTS)
            .filter(|&i| cache.slots[i].base != 0)
            .min_by_key(|&i| cache.slots[i].freed_ms)
            .expect("a full cache has a mapping to evict");
        out[i] = std::mem::replace(&mut cache.slots[i], EMPTY_SLOT);
        HUGE_CACHED.fetch_sub(1, Ordering::Relaxed);
    }
    let slot = cache
        .slots
        .iter()
        .position(|s| s.base == 0)
        .expect("room made above");
    HUGE_CACHED.fetch_add(1, Ordering::Relaxed);
    cache.slots[slot] = HugeSlot {
        base,
        size,
        freed_ms: os::now_ms(),
    };
    drop(cache);
    unmap_all(&out);
}

/// Moves the cached mappings older than the purge delay (all of them with
/// `force`) into `out`, for the caller to unmap outside the lock. Returns
/// in how many milliseconds the first of those left is due, if any is.
fn expire(cache: &mut HugeCache, force: bool, out: &mut Evicted) -> Option<u64> {
    let now = os::now_ms();
    let delay = crate::options::purge_delay_ms();
    let mut next = None::<u64>;
    for (i, s) in cache.slots.iter_mut().enumerate() {
        if s.base == 0 {
            continue;
        }
        let due = s.freed_ms.saturating_add(delay);
        if force || now >= due {
            out[i] = std::mem::replace(s, EMPTY_SLOT);
            HUGE_CACHED.fetch_sub(1, Ordering::Relaxed);
        } else {
            next = Some(next.map_or(due - now, |n| n.min(due - now)));
        }
    }
    next
}

/// Unmaps the mappings taken out of the cache (empty slots skipped).
fn unmap_all(maps: &Evicted) {
    for m in maps.iter().filter(|m| m.base != 0) {
        // SAFETY: a huge segment's whole mapping, unregistered when it was
        // cached and the cache's alone until taken out of it.
        unsafe { os::unmap(m.base as *mut u8, m.size) };
        crate::stats::COUNTERS
            .segments_unmapped
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Gives the cached huge mappings older than the purge delay back to the
/// OS, if there are any (the thread heaps' purge calls this). Returns in
/// how many milliseconds the first of those left is due, if any is left.
pub(crate) fn expire_huge_cache() -> Option<u64> {
    if HUGE_CACHED.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let mut out = [EMPTY_SLOT; HUGE_CACHE_SLOTS + 1];
    let next = expire(&mut HUGE_CACHE.lock(), false, &mut out);
    unmap_all(&out);
    next
}

/// Bytes the cache holds now.
pub(crate) fn huge_cached_bytes() -> usize {
    if HUGE_CACHED.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    HUGE_CACHE.lock().slots.iter().map(|s| s.size).sum()
}

/// Gives every cached huge mapping back to the OS (`loam_heap::collect`).
pub(crate) fn purge_huge_cache() {
    let mut out = [EMPTY_SLOT; HUGE_CACHE_SLOTS + 1];
    let _ = expire(&mut HUGE_CACHE.lock(), true, &mut out);
    unmap_all(&out);
}

impl Segment {
    /// A segment for one huge block of `map_size` bytes (header included),
    /// owned by `owner`: a cached mapping if one fits (its header zeroed),
    /// or a fresh one. Returns null if the OS is out of memory, and whether
    /// the block part reads as zero (a fresh mapping).
    ///
    /// The mapping's whole 2 MiB units from `huge_from` bytes in ask for
    /// transparent huge pages (`options::huge_pages_for_blocks`): a fresh
    /// mapping's before its header is written, since a unit with a 4 KiB
    /// page faulted in stays in 4 KiB pages (a million-element array's
    /// first 2 MiB did, advised after).
    pub(crate) fn create_huge(owner: *mut LocalHeap, map_size: usize, huge_from: usize) -> (*mut Segment, bool) {
        match huge_cache_take(map_size) {
            Some((base, size)) => {
                if crate::options::huge_pages_everywhere() {
                    // Advised whole when it was mapped, unless that was
                    // before a runtime asked for every segment
                    // (`options::prefer_huge_pages`): advised again, a
                    // system call on the reuse of megabytes.
                    // SAFETY: the whole of our cached mapping.
                    unsafe { os::advise_huge(base as *mut u8, size) };
                } else if crate::options::huge_pages_for_blocks() {
                    // A cached mapping keeps the advice of its last block,
                    // which may have covered what is now a padded block's
                    // header and padding: taken back first.
                    // SAFETY: the whole of our cached mapping, and a part
                    // of it.
                    unsafe {
                        os::advise_no_huge(base as *mut u8, size);
                        Self::advise_block(base as *mut u8, map_size, huge_from);
                    }
                }
                // The header's parts that hold state: the segment struct
                // and the pending, mark and allocated bitmaps (not the whole
                // header slices, so that the rest stays untouched and need
                // not be resident).
                // SAFETY: the cache gave us the whole mapping, dead and
                // unregistered; these ranges lie inside its header.
                unsafe {
                    let b = base as *mut u8;
                    ptr::write_bytes(b, 0, std::mem::size_of::<Segment>());
                    ptr::write_bytes(b.add(MARK_OFFSET), 0, SLICES * MARK_BYTES_PER_SLICE);
                    ptr::write_bytes(b.add(ALLOC_OFFSET), 0, SLICES * MARK_BYTES_PER_SLICE);
                    ptr::write_bytes(b.add(PENDING_OFFSET), 0, SLICES * PENDING_BYTES_PER_SLICE);
                    // Not the seal bitmaps: one is read only under the
                    // epoch and length its page's zeroed `sealed` word
                    // does not have (`seal.rs`).
                }
                // SAFETY: a zeroed header in a mapping of `size` bytes.
                let seg = unsafe { Self::register(base as *mut u8, owner, SegmentKind::Huge, size) };
                (seg, false)
            }
            None => (Self::create(owner, SegmentKind::Huge, map_size, Some(huge_from)), true),
        }
    }

    /// Advises the whole 2 MiB units of the mapping of `map_size` bytes at
    /// `base` from `huge_from` bytes in (`create_huge`).
    ///
    /// # Safety
    /// The mapping is ours and live.
    unsafe fn advise_block(base: *mut u8, map_size: usize, huge_from: usize) {
        if huge_from < map_size {
            // SAFETY: a part of the caller's mapping.
            unsafe { os::advise_huge_inside(base.add(huge_from), map_size - huge_from) };
        }
    }

    /// Maps and registers a segment of `map_size` bytes owned by `owner`.
    /// Returns null if the OS is out of memory. A huge segment's block
    /// advises its units from `huge_from` bytes in, before anything is
    /// written to the mapping (`create_huge`).
    pub(crate) fn create(
        owner: *mut LocalHeap,
        kind: SegmentKind,
        map_size: usize,
        huge_from: Option<usize>,
    ) -> *mut Segment {
        let base = os::map_aligned(map_size, SEGMENT_SIZE, kind == SegmentKind::Huge);
        if base.is_null() {
            return ptr::null_mut();
        }
        if crate::options::huge_pages_everywhere() {
            // SAFETY: the page part of our fresh mapping.
            unsafe { os::advise_huge(base, map_size) };
        } else if let Some(from) = huge_from.filter(|_| crate::options::huge_pages_for_blocks()) {
            // SAFETY: our fresh mapping of `map_size` bytes.
            unsafe { Self::advise_block(base, map_size, from) };
        }
        crate::stats::COUNTERS
            .segments_mapped
            .fetch_add(1, Ordering::Relaxed);
        // SAFETY: a fresh, zeroed mapping of `map_size` bytes.
        unsafe { Self::register(base, owner, kind, map_size) }
    }

    /// Sets up the segment header at `base` and registers it.
    ///
    /// # Safety
    /// `base` is a `SEGMENT_SIZE`-aligned mapping of `map_size` bytes,
    /// ours alone, whose header reads as zero.
    unsafe fn register(
        base: *mut u8,
        owner: *mut LocalHeap,
        kind: SegmentKind,
        map_size: usize,
    ) -> *mut Segment {
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
        crate::segment_map::insert(seg as usize);
        seg
    }

    /// Unregisters and unmaps `seg` (or caches it, if huge); while a walk
    /// runs (`for_each_segment_unlocked`), only unregisters it, and it is
    /// unmapped once the walks that may meet it have ended
    /// (`walk_epochs.rs`).
    ///
    /// # Safety
    /// `seg` holds no live block, is unlinked from its owner's list, and no
    /// thread will touch it again.
    pub(crate) unsafe fn destroy(seg: *mut Segment) {
        let mut reg = REGISTRY.lock();
        // SAFETY: under the registry lock; `seg` is registered (created by
        // `create`) so its neighbours are live registered segments.
        let (size, huge) = unsafe {
            let (n, p) = ((*seg).all_next, (*seg).all_prev);
            if !n.is_null() {
                (*n).all_prev = p;
            }
            if p.is_null() {
                reg.head = n;
            } else {
                (*p).all_next = n;
            }
            ((*seg).map_size, (*seg).kind == SegmentKind::Huge)
        };
        reg.count -= 1;
        reg.mapped -= size;
        crate::segment_map::remove(seg as usize);
        if let Some(now) = reg.epochs.defer_to() {
            // A walk may be reading it, or stand on it: unmapped when the
            // walks that may have met it have ended (`walk_epochs.rs`).
            // Its `all_next` stays as it is, so a walk standing here goes
            // on to the segments still linked.
            // Unlinked from its owner's list (caller), so `next` is ours to
            // use; under the registry lock.
            // SAFETY: as just said.
            unsafe { (*seg).next = reg.deferred[now] };
            reg.deferred[now] = seg;
            return;
        }
        drop(reg);
        // SAFETY: unregistered, unlinked, dead (caller), and no walk runs.
        unsafe { Self::release_mapping(seg, size, huge) };
    }

    /// Unmaps an unregistered segment's mapping, or caches it if huge.
    ///
    /// # Safety
    /// `seg` is unregistered and unlinked, and nothing refers to it.
    unsafe fn release_mapping(seg: *mut Segment, size: usize, huge: bool) {
        if huge {
            // Unregistered, unlinked and dead (caller): the cache's now.
            huge_cache_put(seg as usize, size);
            return;
        }
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

    /// The slice whose descriptor `page` is (the inverse of
    /// [`page`](Self::page)), computed from addresses alone: it reads
    /// nothing of the descriptor, which its owner may be setting up. A
    /// page's first slice is its descriptor's index, huge pages included
    /// (their offset is whole slices).
    #[inline]
    pub(crate) fn index_of(page: *const Page) -> usize {
        let seg = segment_of(page.cast());
        (page as usize - seg as usize - std::mem::offset_of!(Segment, pages)) / std::mem::size_of::<Page>()
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

    /// The seal bitmap of the page whose first slice is `i` (`seal.rs`),
    /// laid out as its mark bitmap.
    pub(crate) fn seal_words(seg: *mut Segment, i: usize) -> *const AtomicU64 {
        (seg as usize + SEAL_OFFSET + i * MARK_BYTES_PER_SLICE) as *const AtomicU64
    }

    /// The pending bitmap of the page whose first slice is `i`: one bit per
    /// block index, `PENDING_BYTES_PER_SLICE` bytes.
    pub(crate) fn pending_words(seg: *mut Segment, i: usize) -> *const AtomicU64 {
        (seg as usize + PENDING_OFFSET + i * PENDING_BYTES_PER_SLICE) as *const AtomicU64
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

/// Unmaps (or caches) the segments of a deferred list.
///
/// # Safety
/// Each was unregistered and unlinked by `destroy` while a walk ran, no
/// walk that began before it was unlinked runs now, and the list is the
/// caller's alone.
unsafe fn release_deferred(mut dead: *mut Segment) {
    while !dead.is_null() {
        // SAFETY: still mapped (caller); read before its release.
        unsafe {
            let next = (*dead).next;
            let (size, huge) = ((*dead).map_size, (*dead).kind == SegmentKind::Huge);
            Segment::release_mapping(dead, size, huge);
            dead = next;
        }
    }
}

/// In a child after `fork`: the walks the parent had under way are on
/// threads the child does not have, so none runs, and the segments that
/// died during them are released now (otherwise the count never drops and
/// no segment that dies in the child is ever unmapped). The child's own
/// thread is not inside a walk: walks are collectors', whose closures do
/// not fork.
pub(crate) fn forget_walks_after_fork() {
    let mut reg = REGISTRY.lock();
    reg.epochs.forget_walks();
    let dead = std::mem::replace(&mut reg.deferred, [ptr::null_mut(); 2]);
    drop(reg);
    for d in dead {
        // SAFETY: taken off the registry; no walk runs in the child.
        unsafe { release_deferred(d) };
    }
}

/// Runs `f` on every segment registered when the call began, without
/// holding the registry lock while `f` runs (the lock is taken only to
/// step from one segment to the next), so `f` may allocate and free, and
/// other threads may map and unmap segments meanwhile. A segment that
/// dies during the walk is unlinked but stays mapped until the walk ends
/// (`Segment::destroy`), so `f` may still read it (its pages are free);
/// segments registered after the walk began may be missed.
///
/// Why the walk reaches every segment that stays registered: an unlinked
/// segment keeps its `all_next` (no one writes it once unlinked, nor maps
/// anything over it), which names the segment after it at its unlinking,
/// itself registered then or unlinked later, and so on: following the
/// links from any segment the walk stood on leads through every segment
/// behind it that is still registered, in order. New segments go in at
/// the head, behind no one.
pub(crate) fn for_each_segment_unlocked(mut f: impl FnMut(*mut Segment)) {
    /// Ends the walk (of epoch parity `.0`), on unwinding too, unmapping
    /// what no walk under way can meet any more (`walk_epochs.rs`).
    struct Walking(usize);
    impl Drop for Walking {
        fn drop(&mut self) {
            let dead = REGISTRY.lock().walk_ended(self.0);
            for d in dead {
                // Taken off the registry once every walk that began
                // before those segments were unlinked had ended.
                // SAFETY: as just said.
                unsafe { release_deferred(d) };
            }
        }
    }
    let (mut s, walking) = {
        let mut reg = REGISTRY.lock();
        let p = reg.epochs.begin();
        (reg.head, Walking(p))
    };
    let _walking = walking;
    while !s.is_null() {
        f(s);
        let _reg = REGISTRY.lock();
        // SAFETY: `s` stays mapped while this walk runs (above); its
        // `all_next` is written under the registry lock only.
        s = unsafe { (*s).all_next };
    }
}

// A segment's `next` and `prev` are two fields, used only by the list of
// segments of the heap that owns it (`LocalHeap::segments`).
// SAFETY: as just said.
unsafe impl crate::queue::Linked for Segment {
    unsafe fn next(this: *mut Self) -> *mut *mut Self {
        // SAFETY: live (caller).
        unsafe { std::ptr::addr_of_mut!((*this).next) }
    }

    unsafe fn prev(this: *mut Self) -> *mut *mut Self {
        // SAFETY: live (caller).
        unsafe { std::ptr::addr_of_mut!((*this).prev) }
    }
}
