//! Whole free segments waiting for whichever heap needs memory next.
//!
//! A heap's free slices serve only that heap: another thread that needs a
//! page maps and faults in fresh memory while they sit there, and the
//! owner gives them back to the OS after the purge delay. Where threads
//! come and go, or one waits while others allocate, that is a page fault
//! per 4 KiB on both sides of every hand-over: binary-trees at depth 16
//! with two threads faulted in 54 MiB a round (about a tenth of its CPU
//! time), nearly all of it segments its main thread gave back as it began
//! to wait and segments exited workers left empty (docs/perf-log.md).
//!
//! So a heap that goes idle or away gives its wholly free segments here:
//! on [`crate::release`] (a thread about to wait), when its thread exits,
//! and when an orphan is tidied. They stay mapped, registered and as
//! resident as they were, and a heap that finds no room in its own
//! segments (nor an orphan to adopt) takes the newest before it maps one.
//! A segment waits here until ten purge delays from its last free have
//! passed (at most a second, `expiry_ms`), then goes back to the OS: any
//! heap's purge looks (a relaxed load when the cache is empty), as does
//! [`crate::trim`], which a client with idle threads calls (the runtime's
//! collector does); [`crate::collect`] empties it. A running heap keeps its own empty segments for the purge
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
//! - `CACHED` counts the cached segments (changed under the lock, read
//!   without it only as a hint).

use crate::local_heap::LocalHeap;
use crate::os;
use crate::segment::{Segment, SegmentKind, SEGMENT_SIZE, USABLE_MASK};
use crate::spin::SpinLock;
use crate::sync::{AtomicUsize, Ordering};
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
    }
    seg
}

/// Gives back to the OS the cached segments whose last free is older than
/// the purge delay (all of them with `force`).
pub(crate) fn expire(force: bool) {
    if CACHED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let now = os::now_ms();
    let delay = expiry_ms();
    let mut expired: *mut Segment = ptr::null_mut();
    {
        let mut cache = SEGMENT_CACHE.lock();
        let mut link: *mut *mut Segment = &mut cache.head;
        // SAFETY: every segment on the list is the cache's (under the lock);
        // `link` points at the list head or at a cached segment's `next`.
        unsafe {
            while !(*link).is_null() {
                let seg = *link;
                if force || now.saturating_sub((*seg).last_free_ms) >= delay {
                    *link = (*seg).next;
                    (*seg).next = expired;
                    expired = seg;
                    CACHED.fetch_sub(1, Ordering::Relaxed);
                } else {
                    link = &mut (*seg).next;
                }
            }
        }
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
}

/// Bytes the cache holds mapped now.
pub(crate) fn cached_bytes() -> usize {
    CACHED.load(Ordering::Relaxed) * SEGMENT_SIZE
}


/// How long a segment waits here after its last free: ten purge delays,
/// at most a second (and never less than the purge delay itself).
///
/// Longer than a heap keeps its own free slices, at no cost to the peak: a
/// heap takes from here before it maps a segment, so while anything waits
/// here the mapped total does not grow, and what waits here was in use at
/// a moment when the total was at least as large. What it costs is
/// resident memory after a program's demand fell, for that long. At one
/// purge delay (20 ms under the collector's hold at depth 16), most
/// segments went back to the OS between one worker's exit and the next
/// thread's need: 102,000 page faults in ten rounds against 74,000 at 100
/// ms and 167,000 with no cache (docs/perf-log.md).
fn expiry_ms() -> u64 {
    let delay = crate::options::purge_delay_ms();
    (delay.saturating_mul(10)).min(1000).max(delay)
}
