//! Lending: a thread about to wait ([`crate::lend`], which loam's
//! `Mutator::blocking` calls) lends its heap to the threads still running.
//! While it waits they drain the heap's queues and take its wholly free
//! segments when they would otherwise map memory of their own; the owner
//! takes the heap back when it runs again.
//!
//! Why: a collector's sweeps free a waiting thread's objects by sending
//! page runs to its heap's queue, which only the heap's holder takes back.
//! [`crate::hand_over`] gives away what is free when the wait begins, but
//! what the sweeps free during the wait stayed with the sleeping thread,
//! while the threads it waited for faulted in fresh segments (binary-trees
//! at two threads: the main thread's trees, freed while it waited for its
//! workers, came back to it only at the end of each depth, and the workers
//! faulted in about 4 MB a round, `docs/perf-log.md`). An exited thread's
//! heap is drained by the living already (`abandon.rs`); a lent heap is
//! visited the same way, but keeps its owner.
//!
//! The protocol, and why it is sound:
//! - The owner first points its thread's `HEAP` at the [`LENT`](crate::alloc::LENT)
//!   sentinel, so that none of its own paths touches the heap from then on
//!   (an allocation goes to the cold path, which takes the heap back
//!   first, and lends it again after a plain one; a free goes to the
//!   owner's queue as any other thread's does), then lists the heap under
//!   the lent lock.
//! - A thread holding an allocated bit it has not set lends nothing
//!   (`alloc::bits_out`): the bit's word is its heap's owner's to write
//!   without a read-modify-write, and a borrower's drain clears bits of
//!   the same words, an adopter sets them.
//! - Whoever holds the lent lock holds every listed heap alone: a
//!   borrower tidies them under it.
//! - The owner takes the heap back by unlisting it under the same lock
//!   before it touches the heap again. The lock orders every borrower's
//!   writes before the owner's next use, and the owner's last writes
//!   before any borrower's, as the orphan lock does for an exited heap.
//!
//! Lock order: after the fallback heap's (whose allocation may borrow) and
//! never nested with the orphan lock; before the free-segment cache's, the
//! registry's and the huge cache's, which a tidy takes.

use crate::local_heap::LocalHeap;
use crate::spin::SpinLock;
use crate::sync::{AtomicUsize, Ordering};
use std::ptr;

/// The lent heaps, linked through `LocalHeap::lent_next`.
pub(crate) struct Lent(*mut LocalHeap);

// SAFETY: listed heaps are only touched under the lock.
unsafe impl Send for Lent {}

pub(crate) static LENT: SpinLock<Lent> = SpinLock::new(Lent(ptr::null_mut()));

/// Heaps on the list. Writers: under the lock. Readers: slow paths deciding
/// whether to take it (a hint).
static LENT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The fewest free slices (1 MiB) for which [`borrow`] takes a lent heap's
/// segments. Adopting a waiting thread's heap makes its owner's frees of
/// what it left there remote, for good: worth it for a megabyte, not for
/// a page. (A segment's worth, 60 slices, was asked first: at binary-trees
/// depth 16 with two threads most borrows then found 35 – 59 slices free
/// in the main thread's heap, took none, and the workers faulted in 1.1x –
/// 2.6x the pages.)
pub(crate) const MIN_ADOPTED_SLICES: usize = 16;

/// How many heaps are lent (a hint).
#[inline]
pub(crate) fn lent_count() -> usize {
    LENT_COUNT.load(Ordering::Relaxed)
}

/// Lists `heap` as lent, since `since` (`os::now_ms`; now if `None`: a
/// heap taken back for one allocation keeps the time it was first lent,
/// [`crate::trim`]'s measure of how long it has waited).
///
/// # Safety
/// The calling thread owns `heap`, is not listed yet, and touches it no
/// more until [`withdraw`] returns.
pub(crate) unsafe fn list(heap: *mut LocalHeap, since: Option<u64>) {
    let since = since.unwrap_or_else(crate::os::now_ms);
    let mut lent = LENT.lock();
    // SAFETY: ours (caller) until listed, which happens under the lock.
    unsafe {
        (*heap).lent_next = lent.0;
        (*heap).lent_at_ms = since;
    }
    lent.0 = heap;
    LENT_COUNT.fetch_add(1, Ordering::Relaxed);
}

/// Unlists `heap`, waiting for a borrower that holds it: from the return
/// on, it is the caller's alone again. Returns when it was lent.
///
/// # Safety
/// `heap` was listed by the calling thread ([`list`]) and not withdrawn.
pub(crate) unsafe fn withdraw(heap: *mut LocalHeap) -> u64 {
    let mut lent = LENT.lock();
    let mut link: *mut *mut LocalHeap = &mut lent.0;
    // Under the lent lock the listed heaps and their links are ours;
    // `link` points at the list's head or at a listed heap's `lent_next`,
    // and `heap` is listed (caller), so the walk finds it. (Not a panic if
    // it did not: its message would allocate on this thread, whose heap
    // is lent, and wait for the lock it holds.)
    // SAFETY: as just said.
    unsafe {
        while *link != heap {
            if (*link).is_null() {
                crate::fatal("heap: a lent heap missing from the lent list");
            }
            link = &mut (**link).lent_next;
        }
        *link = (*heap).lent_next;
        (*heap).lent_next = ptr::null_mut();
    }
    LENT_COUNT.fetch_sub(1, Ordering::Relaxed);
    // SAFETY: unlisted under the lock: the caller's alone.
    unsafe { (*heap).lent_at_ms }
}

/// Runs `f` on each lent heap while holding the lent lock: a heap's owner
/// waits meanwhile if it comes back.
pub(crate) fn for_each_lent(mut f: impl FnMut(&mut LocalHeap)) {
    if lent_count() == 0 {
        return;
    }
    let lent = LENT.lock();
    let mut h = lent.0;
    while !h.is_null() {
        // SAFETY: listed heaps are the lock holder's alone, and stay
        // listed while it is held; heaps are never unmapped.
        unsafe {
            f(&mut *h);
            h = (*h).lent_next;
        }
    }
}

/// For [`crate::trim`]: each heap lent for as long as the process-wide
/// cache keeps a wholly free segment (ten purge delays, at most a second)
/// is drained, its empty pages released, its wholly free segments given to
/// the cache and its slices idle that long decommitted
/// (`LocalHeap::tidy_lent`), so that what its sweeps freed goes back to
/// the OS however long its thread waits. A heap lent more lately is left
/// to the threads that borrow it: its owner's wait may be short, and the
/// collector, which trims after each cycle, would drain it on the way to
/// the next. Returns in how many milliseconds the next of what is left is
/// due, if anything is.
pub(crate) fn tidy_lent() -> Option<u64> {
    let now = crate::os::now_ms();
    let expiry = crate::segment_cache::expiry_ms();
    let mut due = None::<u64>;
    let mut sooner = |d: u64| due = Some(due.map_or(d, |e: u64| e.min(d)));
    for_each_lent(|h| {
        let ripe = h.lent_at_ms.saturating_add(expiry);
        if now < ripe {
            sooner(ripe - now);
        } else if let Some(d) = h.tidy_lent() {
            sooner(d);
        }
    });
    due
}

/// For heap `me`, about to map memory: drains the lent heaps, releasing
/// their empty pages and giving their wholly free segments to the
/// process-wide cache (for `me` to take next), until one gives any; if
/// none does, takes every segment and page of the lent heap with the most
/// free slices, as from an exited thread's (`LocalHeap::adopt`), if they
/// come to `need` slices and at least [`MIN_ADOPTED_SLICES`]: its free
/// slices are what its sweeps emptied while its owner waited, which the
/// owner could not use before it comes back. Returns whether it found
/// any memory.
///
/// The owner, back, finds its heap without them and takes memory as a new
/// thread does (the cache, exited threads' heaps, a lent heap); its frees
/// of the blocks it left there are remote. (Only the segments with room,
/// with their pages, would leave it its full ones; but a waiting thread's
/// segments have room where its sweeps freed, which is most of them, and
/// finding a segment's pages walks every page queue.)
pub(crate) fn borrow(me: &mut LocalHeap, need: usize) -> bool {
    if lent_count() == 0 {
        return false;
    }
    let lent = LENT.lock();
    let mut richest: Option<(usize, *mut LocalHeap)> = None;
    let mut h = lent.0;
    while !h.is_null() {
        // SAFETY: listed heaps are the lock holder's alone, and stay
        // listed while it is held; heaps are never unmapped. `me` is not
        // listed: its thread is running.
        unsafe {
            if (*h).give_back() > 0 {
                crate::stats::COUNTERS.lent_borrows.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            let free = (*h).free_slices();
            if richest.map_or(true, |(most, _)| free > most) {
                richest = Some((free, h));
            }
            h = (*h).lent_next;
        }
    }
    match richest {
        Some((free, h)) if me.adopts && free >= need.max(MIN_ADOPTED_SLICES) => {
            // SAFETY: as above.
            me.adopt(unsafe { &mut *h });
            crate::stats::COUNTERS.lent_borrows.fetch_add(1, Ordering::Relaxed);
            true
        }
        _ => false,
    }
}
