//! Whole free segments waiting for whichever heap needs memory next.
//!
//! A heap's free slices serve only that heap: another thread that needs a
//! page maps and faults in fresh memory while they sit there, and the
//! owner gives them back to the OS after the purge delay. Where threads
//! come and go, or one waits while others allocate, that is a page fault
//! per 4 KiB on both sides of every hand-over: binary-trees at depth 16
//! with two threads faulted in 8,500 – 17,000 pages a round after its
//! first (18.5% of its samples were page faults), most of them segments
//! its main thread gave back as it began to wait and segments exited
//! workers left empty (docs/perf-log.md).
//!
//! So a heap that goes idle or away gives its wholly free segments here:
//! on [`crate::hand_over`] (a thread about to wait), when its thread
//! exits, and when an orphan is tidied. They stay mapped, registered and as
//! resident as they were, and a heap that finds no room in its own
//! segments (nor an orphan to adopt) takes the newest before it maps one.
//! A segment waits here until ten purge delays from its last free have
//! passed (at most a second, or one purge delay if that is longer:
//! `expiry_ms`), then goes back to the OS: any
//! heap's purge looks (a relaxed load and a clock read while none is
//! due), as does [`crate::trim`], which a client with idle threads calls
//! (loam's collector does, after each cycle and `Mutator::blocking`);
//! [`crate::collect`] empties it. A running heap keeps its own empty segments for the purge
//! delay as before: taking a lock to give one away and take it back on
//! every large block freed and allocated again would put every thread
//! that does so behind one lock.
//!
//! mimalloc does the same with the segments abandoned threads leave and
//! its arenas' free blocks; Go's page heap is shared by every P outright.
//!
//! # Invariants
//! - A cached segment is a normal segment with every usable slice free,
//!   registered, on no heap's list, linked here through its `next` (this
//!   cache's alone while it is here, under the lock); its `owner` still
//!   names the heap that gave it up (no block of it is live, so no free
//!   reads it) until a heap takes it and stores itself there.
//! - `CACHED` counts the cached segments and `OLDEST_FREE_MS` is no later
//!   than the earliest of their last frees (both changed under the lock,
//!   read without it only as hints).

use crate::local_heap::LocalHeap;
use crate::os;
use crate::segment::{Segment, SegmentKind, SEGMENT_SIZE, USABLE_MASK};
use crate::spin::SpinLock;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use std::ptr;

pub(crate) struct SegmentCache {
    /// Newest first (the warmest in the caches of the CPU that freed it).
    head: *mut Segment,
}

// SAFETY: the cached segments are only touched under the lock.
unsafe impl Send for SegmentCache {}

pub(crate) static SEGMENT_CACHE: SpinLock<SegmentCache> = SpinLock::new(SegmentCache {
    head: ptr::null_mut(),
});

static CACHED: AtomicUsize = AtomicUsize::new(0);

/// The earliest last free (`os::now_ms`) of the cached segments, as of
/// the last `put` or `expire` (written under the lock; `u64::MAX` for
/// none): the first is due `expiry_ms` after it, whatever the purge delay
/// is by then. A segment taken since only makes `expire` walk early.
static OLDEST_FREE_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Takes `seg` into the cache.
///
/// # Safety
/// `seg` is a normal segment with every usable slice free, unlinked from
/// its owner's list, which gives up every claim on it.
pub(crate) unsafe fn put(seg: *mut Segment) {
    // SAFETY: the caller's claim, given up to the cache (lock below).
    debug_assert!(unsafe {
        (*seg).kind == SegmentKind::Normal
            && (*seg).free_slices.load(Ordering::Relaxed) == USABLE_MASK
    });
    let mut cache = SEGMENT_CACHE.lock();
    // SAFETY: `seg` is ours to link (caller); under the lock.
    unsafe {
        (*seg).prev = ptr::null_mut();
        (*seg).next = cache.head;
    }
    cache.head = seg;
    CACHED.fetch_add(1, Ordering::Relaxed);
    // SAFETY: as above.
    OLDEST_FREE_MS.fetch_min(unsafe { (*seg).last_free_ms }, Ordering::Relaxed);
}

/// Takes the newest cached segment for `owner`, or null if there is none.
/// The caller links it into `owner`'s list (`dirty` says which of its free
/// slices are still resident).
pub(crate) fn take(owner: *mut LocalHeap) -> *mut Segment {
    if CACHED.load(Ordering::Relaxed) == 0 {
        return ptr::null_mut();
    }
    let mut cache = SEGMENT_CACHE.lock();
    let seg = cache.head;
    if !seg.is_null() {
        // SAFETY: a cached segment, the cache's under its lock; from here
        // the caller's. The Release store pairs with nothing in particular,
        // as in `adopt`: no block of it is live, so no free reads `owner`
        // before the new owner hands one out.
        unsafe {
            cache.head = (*seg).next;
            (*seg).next = ptr::null_mut();
            (*seg).owner.store(owner, Ordering::Release);
        }
        CACHED.fetch_sub(1, Ordering::Relaxed);
        if cache.head.is_null() {
            OLDEST_FREE_MS.store(u64::MAX, Ordering::Relaxed);
        }
    }
    seg
}

/// Gives back to the OS the cached segments that have waited their time
/// (`expiry_ms` from their last free; all of them with `force`). Returns
/// in how many milliseconds the next of those left is due, if any is left.
/// Costs a relaxed load and a clock read while none is due, so every
/// heap's purge may call it.
pub(crate) fn expire(force: bool) -> Option<u64> {
    if CACHED.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let now = os::now_ms();
    let delay = expiry_ms();
    let oldest = OLDEST_FREE_MS.load(Ordering::Relaxed);
    let due = oldest.saturating_add(delay);
    // A hint of none with segments counted is a `put` or `take` under way
    // (the count changes first): walk.
    if !force && oldest != u64::MAX && now < due {
        return Some(due - now);
    }
    let mut expired: *mut Segment = ptr::null_mut();
    let mut oldest = u64::MAX;
    {
        let mut cache = SEGMENT_CACHE.lock();
        let mut link: *mut *mut Segment = &mut cache.head;
        // SAFETY: every segment on the list is the cache's (under the lock);
        // `link` points at the list head or at a cached segment's `next`.
        unsafe {
            while !(*link).is_null() {
                let seg = *link;
                let freed = (*seg).last_free_ms;
                if force || now >= freed.saturating_add(delay) {
                    *link = (*seg).next;
                    (*seg).next = expired;
                    expired = seg;
                    CACHED.fetch_sub(1, Ordering::Relaxed);
                } else {
                    oldest = oldest.min(freed);
                    link = &mut (*seg).next;
                }
            }
        }
        OLDEST_FREE_MS.store(oldest, Ordering::Relaxed);
    }
    // Outside the cache's lock: `destroy` takes the registry's.
    while !expired.is_null() {
        // SAFETY: taken off the cache above, so ours alone: no live block,
        // on no heap's list; `destroy` unregisters and unmaps it.
        unsafe {
            let next = (*expired).next;
            Segment::destroy(expired);
            expired = next;
        }
    }
    (oldest != u64::MAX).then(|| oldest.saturating_add(delay) - now)
}

/// Bytes the cache holds mapped now.
pub(crate) fn cached_bytes() -> usize {
    CACHED.load(Ordering::Relaxed) * SEGMENT_SIZE
}

/// How long a segment waits here after its last free: ten purge delays,
/// at most a second (and never less than the purge delay itself).
///
/// Longer than a heap keeps its own free slices: a heap takes from here
/// before it maps a segment, so while anything waits here the heaps map
/// nothing new; what it costs is resident memory after a program's demand
/// fell, for that long. At one purge delay (20 ms under the collector's
/// hold at binary-trees depth 16), most segments went back to the OS
/// between one worker's exit and the next thread's need: 102,000 page
/// faults in ten rounds against 74,000 at 100 ms and 167,000 with no
/// cache (docs/perf-log.md).
pub(crate) fn expiry_ms() -> u64 {
    let delay = crate::options::purge_delay_ms();
    (delay.saturating_mul(10)).min(1000).max(delay)
}
