//! Thread exit: a heap whose thread ends is abandoned onto the orphan list with
//! its segments; live threads adopt them, and new threads reuse whole heaps.
//!
//! A remote free that was addressed to an abandoned heap lands in that heap's
//! queue, which lives forever (heaps are never unmapped). Whoever next holds
//! the orphan (an adopter on its slow path, a new thread, or `collect`)
//! drains it and either frees each block into the orphan's pages or, if the
//! block's segment was adopted meanwhile, forwards it to the new owner. Each
//! block is on exactly one list at every moment, so none is lost or freed twice.
//!
//! Lock order: the fallback heap's lock, then the orphan lock or the lent
//! lock (`lend.rs`; never both), then the free-segment cache's lock (a
//! tidy gives its wholly free segments there) or the segment registry lock
//! (releasing a segment while draining an orphan). Nothing takes them the
//! other way, and the cache's lock is never held while another is taken.

use crate::local_heap::LocalHeap;
use crate::spin::SpinLock;
use crate::sync::{AtomicUsize, Ordering};
use std::ptr;

/// The orphan heaps, in two lists by what they were abandoned with:
/// `owning`, with segments (some segment's owner named them, so a free
/// may still reach their queues: only a thread that will allocate, and so
/// drain the queue, may take one), and `spares`, with none (no segment's
/// owner names them ever again: a thread whose first call is a free may
/// take one). A listed orphan never gains a segment; once it has lost its
/// last (adopted, or given away by a tidy) it moves to `spares`
/// ([`settle_orphans`]): threads whose first call is a free, then
/// allocate, and exit with a block live left one `owning` heap each
/// otherwise, which only allocating threads take. One list searched at
/// each take let allocating threads take the spare a free-only thread had
/// just left, and with the two kinds of thread taking turns every
/// free-only thread made a heap (never unmapped).
pub(crate) struct Orphans {
    owning: *mut LocalHeap,
    spares: *mut LocalHeap,
}

// SAFETY: orphan heaps are only touched under the lock.
unsafe impl Send for Orphans {}

pub(crate) static ORPHANS: SpinLock<Orphans> = SpinLock::new(Orphans {
    owning: ptr::null_mut(),
    spares: ptr::null_mut(),
});

impl Orphans {
    /// Unlinks the head of `list` (one of ours), if any.
    fn pop(list: &mut *mut LocalHeap) -> Option<*mut LocalHeap> {
        let h = *list;
        if h.is_null() {
            return None;
        }
        // Under the orphan lock (the caller holds `self`), the listed
        // heaps and their links are ours to read.
        // SAFETY: as just said.
        *list = unsafe { (*h).orphan_next };
        Some(unlinked(h))
    }
}

/// Orphans on the list. Writers: under the lock (Relaxed). Readers: slow
/// paths deciding whether to take the lock (a hint).
static ORPHAN_COUNT: AtomicUsize = AtomicUsize::new(0);

/// How many heaps are on the orphan list (a hint).
#[inline]
pub(crate) fn orphan_count() -> usize {
    ORPHAN_COUNT.load(Ordering::Relaxed)
}

/// Abandons `heap`: sends and drains its traffic, gives back empty pages,
/// and puts it on the orphan list.
///
/// # Safety
/// The calling thread owns `heap` and will never touch it again.
pub(crate) unsafe fn abandon(heap: *mut LocalHeap) {
    // SAFETY: the caller owns the heap until it is published below.
    let h = unsafe { &mut *heap };
    // Free memory stays committed, as a running thread's does: wholly free
    // segments go to the process-wide cache, which any thread takes from
    // before it maps memory, and the free slices of the others stay for
    // the purge delay, for the next thread to take this heap whole (threads
    // started per task made the GC benchmark fault in 30,000 pages a run
    // when this purged at once). Later orphan visits decommit what stays
    // idle.
    h.tidy(false);
    crate::stats::COUNTERS
        .pages_abandoned
        .fetch_add(h.page_count as u64, Ordering::Relaxed);
    let mut list = ORPHANS.lock();
    // Its segments are adopted only from the list, so none can come back
    // to name it once it is listed without one.
    let list = &mut *list;
    let head = if h.segments.first.is_null() {
        &mut list.spares
    } else {
        &mut list.owning
    };
    h.orphan_next = *head;
    *head = heap;
    ORPHAN_COUNT.fetch_add(1, Ordering::Relaxed);
    // Counted on the list, under its lock: a thread that reads the count
    // and then takes the lock (`collect` visits the orphans) finds the
    // heap there. Counted before it, a test that waited for the count and
    // collected missed a heap still on its way, once in about sixty runs
    // under load (its blocks were not back).
    crate::stats::COUNTERS
        .heaps_abandoned
        .fetch_add(1, Ordering::Relaxed);
}

/// Takes a whole orphan heap for a new thread that allocates, if any: one
/// abandoned with segments first, else a spare. Its queue is drained on
/// the new owner's first slow path, as its own queue would be (a thread
/// whose first call is a free takes only a spare, [`take_spare`]).
pub(crate) fn take_orphan() -> Option<*mut LocalHeap> {
    if orphan_count() == 0 {
        return None;
    }
    let mut list = ORPHANS.lock();
    let list = &mut *list;
    Orphans::pop(&mut list.owning).or_else(|| Orphans::pop(&mut list.spares))
}

/// The rest of taking orphan `heap` for a new thread, its list's link to
/// it already cut, under the orphan lock: the heap's own link and count,
/// and its thread cache's state.
fn unlinked(heap: *mut LocalHeap) -> *mut LocalHeap {
    // Cut from the list under its lock (caller): no other thread can
    // reach it.
    // SAFETY: as just said.
    let h = unsafe { &mut *heap };
    h.orphan_next = ptr::null_mut();
    ORPHAN_COUNT.fetch_sub(1, Ordering::Relaxed);
    // The new thread has allocated nothing yet: until it does, it keeps
    // no other heap's blocks (a free-only thread's frees go home).
    h.tcache.forget_allocating();
    crate::stats::COUNTERS
        .pages_adopted
        .fetch_add(h.page_count as u64, Ordering::Relaxed);
    heap
}

/// Takes an orphan that owns no segment (abandoned with none, or moved by
/// [`settle_orphans`]), for a thread whose first call is a free
/// (`alloc::thread_init_for_free`), if any: no new free reaches such a
/// heap's queue, so a thread that never drains it strands nothing new
/// there (a free that read a segment's owner before the segment left the
/// heap may still land in it, and stays until the holder drains the
/// queue, at the latest at its thread's exit). (Fresh heaps for such
/// threads piled up on the list otherwise, one per thread that only
/// freed, and every orphan visit walked them all.)
pub(crate) fn take_spare() -> Option<*mut LocalHeap> {
    if orphan_count() == 0 {
        return None;
    }
    Orphans::pop(&mut ORPHANS.lock().spares)
}

/// Moves the `owning` orphans that have no segment left to `spares`,
/// after a visit tidied them. No segment's owner names such a heap any
/// more, so no new free reaches its queue; one that read the owner before
/// the segment went may still land there, and waits for whoever holds the
/// heap to drain it (at the latest its thread's exit, `abandon`): the
/// block stays allocated until then, as blocks freed to an idle thread
/// do, and is never lost.
pub(crate) fn settle_orphans() {
    if orphan_count() == 0 {
        return;
    }
    let mut list = ORPHANS.lock();
    let list = &mut *list;
    let mut link: *mut *mut LocalHeap = &mut list.owning;
    // Under the orphan lock: the listed heaps and their links are ours;
    // `link` points at `list.owning` or at a listed heap's `orphan_next`.
    // SAFETY: as just said.
    unsafe {
        while !(*link).is_null() {
            let h = *link;
            if (*h).segments.first.is_null() {
                *link = (*h).orphan_next;
                (*h).orphan_next = list.spares;
                list.spares = h;
            } else {
                link = &mut (*h).orphan_next;
            }
        }
    }
}

/// Runs `f` on each orphan while holding the orphan lock.
pub(crate) fn for_each_orphan(mut f: impl FnMut(*mut LocalHeap)) {
    let list = ORPHANS.lock();
    for mut h in [list.owning, list.spares] {
        while !h.is_null() {
            f(h);
            // SAFETY: orphans stay listed while the lock is held.
            h = unsafe { (*h).orphan_next };
        }
    }
}
