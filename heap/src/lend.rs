//! Lending: a thread about to wait ([`lend`], which loam's
//! `Mutator::blocking` calls), or idle between two hooks ([`lend_idle`],
//! a managed pool's parked worker), lends its heap to the threads still
//! running.
//! While it waits they drain the heap's queues and take its wholly free
//! segments, or its segments, when they would otherwise map memory of
//! their own; the owner takes the heap back when it runs again. The whole
//! protocol is here: the owner's side (the heap it lent, the allocated
//! bits it holds unset) and the borrowers'.
//!
//! Why: a collector's sweeps free a waiting thread's objects by sending
//! page runs to its heap's queue, which only the heap's holder takes back.
//! [`crate::hand_over`] gives away what is free when the wait begins, but
//! what the sweeps free during the wait stayed with the sleeping thread
//! while the threads it waited for faulted in fresh segments
//! (`docs/perf-log.md`, "A waiting thread's heap lent to the threads that
//! run"). An exited thread's heap is drained by the living already
//! (`abandon.rs`); a lent heap is visited the same way, but keeps its
//! owner.
//!
//! The protocol, and why it is sound:
//! - The owner first points its thread's `HEAP` at the
//!   [`LENT`](crate::alloc::LENT) sentinel and keeps the heap in
//!   `LENT_HEAP`, so that none of its own paths touches the heap from then
//!   on (an allocation goes to the cold path, which takes the heap back
//!   first, and lends it again after a plain one, [`alloc_lent`]; a free
//!   goes to the owner's queue as any other thread's does), then lists the
//!   heap under the lent lock.
//! - A thread holding an allocated bit it has not set lends nothing
//!   ([`bits_out`]): the bit's word is its heap's owner's to write without
//!   a read-modify-write, and a borrower's drain clears bits of the same
//!   words, an adopter sets them.
//! - Whoever holds the lent lock holds every listed heap alone: a
//!   borrower tidies them under it.
//! - The owner takes the heap back by unlisting it under the same lock
//!   before it touches the heap again. The lock orders every borrower's
//!   writes before the owner's next use, and the owner's last writes
//!   before any borrower's, as the orphan lock does for an exited heap.
//! - Nothing allocates from a thread's own heap under the lent lock (the
//!   heap's code never allocates); a panic there would, and on a thread
//!   whose heap is lent its allocation would wait for the lock the thread
//!   holds: such an allocation stops the process with a message instead
//!   ([`Locked`]).
//!
//! The lent lock is held through a borrower's drains (page runs applied,
//! empty pages released) and a trim's purges, as the orphan lock is
//! through an orphan's: an owner that comes back meanwhile waits that
//! long.
//!
//! Lock order: after the fallback heap's (whose allocation may borrow) and
//! never nested with the orphan lock; before the free-segment cache's, the
//! registry's and the huge cache's, which a tidy takes.

use crate::alloc::{self, LENT};
use crate::local_heap::LocalHeap;
use crate::spin::{SpinGuard, SpinLock};
use crate::sync::{AtomicUsize, Ordering};
use std::cell::Cell;
use std::ptr;

/// The lent heaps, linked through `LocalHeap::lent_next`.
pub(crate) struct Lent(*mut LocalHeap);

// SAFETY: listed heaps are only touched under the lock.
unsafe impl Send for Lent {}

pub(crate) static LENT_LIST: SpinLock<Lent> = SpinLock::new(Lent(ptr::null_mut()));

/// Heaps on the list. Writers: under the lock. Readers: slow paths deciding
/// whether to take it (a hint).
static LENT_COUNT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The heap this thread lent, while its `HEAP` is `LENT`.
    static LENT_HEAP: Cell<*mut LocalHeap> = const { Cell::new(ptr::null_mut()) };
    /// Allocated bits this thread was handed ([`crate::alloc_object`])
    /// and has not set yet: while any is out, the thread lends no heap.
    static UNSET_BITS: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread holds the lent lock ([`Locked`]).
    static HOLDS_LOCK: Cell<bool> = const { Cell::new(false) };
    /// Whether [`lend_idle`] lent the heap this thread lent, for
    /// [`take_back_idle`] to take back (and not an enclosing [`lend`]'s).
    static IDLE_LENT: Cell<bool> = const { Cell::new(false) };
}

/// The fewest free slices (1 MiB) for which [`borrow`] takes a lent heap's
/// segments. Adopting a waiting thread's heap makes its owner's frees of
/// what it left there remote, for good: worth it for a megabyte, not for
/// a page. (A segment's worth was too many: `docs/perf-log.md`, "Review
/// mends".)
pub(crate) const MIN_ADOPTED_SLICES: usize = 16;

/// The lent lock, held: marks the thread as its holder while held.
pub(crate) struct Locked(SpinGuard<'static, Lent>);

impl Locked {
    /// Takes the lent lock; stops the process if this thread holds it
    /// already (a panic under it, whose message allocated: see the
    /// module's header).
    fn take() -> Locked {
        not_under_the_lock();
        let guard = LENT_LIST.lock();
        HOLDS_LOCK.with(|h| h.set(true));
        Locked(guard)
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        HOLDS_LOCK.with(|h| h.set(false));
    }
}

/// Stops the process if this thread holds the lent lock: it is about to
/// take it again, which would wait for ever (an allocation under the lock,
/// a panic's message most likely).
fn not_under_the_lock() {
    if HOLDS_LOCK.with(Cell::get) {
        crate::fatal(concat!(
            "heap: the lent lock taken again by its holder: ",
            "an allocation while tidying a lent heap (a panic there?)"
        ));
    }
}

/// How many heaps are lent (a hint).
#[inline]
pub(crate) fn lent_count() -> usize {
    LENT_COUNT.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------- the owner

/// Lends the calling thread's heap to the other threads while `f` runs,
/// for a thread that waits for them. It first hands over what the heap
/// holds freed, as [`hand_over`](crate::hand_over) does, but decommits
/// nothing. While `f` runs, a thread that would map memory drains what
/// was freed to the heap meanwhile (a collector's sweeps, other threads'
/// frees) and takes the segments that leaves wholly free, or, if none, all
/// the heap's segments (if they hold a megabyte of free slices and a run
/// of what it needs; the shared heap of exited threads' late allocations
/// never takes them), as it takes an exited thread's. Once the heap has
/// been lent as long as the process-wide cache keeps a segment (ten purge
/// delays, at most a second, or one purge delay if that is longer),
/// [`trim`](crate::trim) drains it too and decommits its slices idle that
/// long. loam's `Mutator::blocking` calls it.
///
/// The thread takes its heap back when `f` returns or unwinds, waiting if
/// another thread is tidying it then; wherever its memory went, it then
/// takes more as a new thread does, and its frees of blocks left in
/// segments another heap took are remote. Inside `f`, a plain allocation
/// takes the heap back for its time and lends it again, a collector's
/// object ([`alloc_object`](crate::alloc_object)) takes it back until `f`
/// returns, and a free goes to the heap's queue, as another thread's
/// would. [`release`](crate::release), [`hand_over`](crate::hand_over),
/// [`for_each_local_page`](crate::for_each_local_page) and
/// [`assert_valid`](crate::assert_valid) inside `f` take the heap back
/// until `f` returns; [`flush`](crate::flush) and
/// [`reclaim_runs`](crate::reclaim_runs) leave it lent. A thread that holds
/// an [`AllocatedBit`](crate::AllocatedBit) it has not set lends nothing
/// (the bit's word is its heap's alone to write): it only hands over, as
/// [`hand_over`](crate::hand_over).
///
/// # Examples
/// ```
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// use std::sync::mpsc;
/// // Nothing goes back to the OS while the threads run.
/// loam_heap::set_purge_delay(std::time::Duration::from_secs(3600));
/// let (tx, rx) = mpsc::channel();
/// let freer = std::thread::spawn(move || {
///     let blocks: Vec<Box<[u8; 64]>> = rx.recv().unwrap();
///     drop(blocks); // sent back to the lending thread's heap
/// });
/// let blocks: Vec<Box<[u8; 64]>> = (0..100_000).map(|_| Box::new([1; 64])).collect();
/// let before = loam_heap::stats();
/// loam_heap::lend(|| {
///     tx.send(blocks).unwrap();
///     freer.join().unwrap();
///     // Another thread needs memory: it takes the segments the frees
///     // emptied in the lent heap instead of mapping its own.
///     std::thread::spawn(|| {
///         let v: Vec<Box<[u8; 64]>> = (0..100_000).map(|_| Box::new([2; 64])).collect();
///         assert!(v.iter().all(|b| b[63] == 2));
///     })
///     .join()
///     .unwrap();
/// });
/// let after = loam_heap::stats();
/// assert!(after.lent_borrows > before.lent_borrows);
/// // (At most one for the threads' own first needs.)
/// assert!(after.segments_mapped_total <= before.segments_mapped_total + 1);
/// ```
pub fn lend<R>(f: impl FnOnce() -> R) -> R {
    /// Takes the heap back when `f` returns or unwinds.
    struct TakeBack;
    impl Drop for TakeBack {
        fn drop(&mut self) {
            take_back();
        }
    }
    let heap = alloc::current_heap();
    if !alloc::is_live(heap) {
        return f();
    }
    // SAFETY: the calling thread's own heap, no method of which is under
    // way: lending it needs no reference into it to be live.
    let lent = unsafe {
        if bits_out() {
            // A block's allocated bit is out (`AllocatedBit::set`): its
            // word is this thread's alone to write until it is set.
            (*heap).hand_over();
            false
        } else {
            (*heap).give_back();
            // Tidied just now: a borrower's drain need not walk it.
            (*heap).lent_untidy = false;
            lend_current(None, false)
        }
    };
    let _back = lent.then_some(TakeBack);
    f()
}

/// Lends this thread's heap for an idle spell that no closure spans, as
/// [`lend`] does, until [`take_back_idle`]: a thread pool's worker lends
/// it as it parks and takes it back as it wakes (loam's `ManagedPool`
/// does, in its park hooks). What other threads free into the heap while
/// the thread sleeps, a collector's sweeps most of all, then serves the
/// threads that run, as it does for a thread waiting in [`lend`].
///
/// Unlike [`lend`], it gives nothing back first (its thread cache, the
/// blocks it holds for other heaps, its empty pages and wholly free
/// segments): a worker parks and wakes often, and what it holds is what
/// it allocates from when it wakes. The first thread that borrows the
/// heap releases its empty pages and takes the segments that leaves
/// wholly free, as it does with what a drain empties, or adopts the heap
/// if it holds a megabyte free. (The thread cache stays counted as used
/// until a tidy of the heap, `collect`'s, flushes it.)
///
/// A no-op where [`lend`] lends nothing (no heap yet, lent already, an
/// allocated bit unset). Until [`take_back_idle`], this thread's frees are
/// remote, and its allocations take the heap back first (a plain one for
/// its length, a collector object's for good), as do the calls that act
/// on this thread's heap ([`release`](crate::release),
/// [`hand_over`](crate::hand_over), [`for_each_local_page`](crate::for_each_local_page),
/// [`assert_valid`](crate::assert_valid)), for good; a thread that exits
/// takes it back to hand it on.
///
/// # Examples
/// ```
/// # #[global_allocator] static A: loam_heap::LoamAlloc = loam_heap::LoamAlloc;
/// drop(std::hint::black_box(vec![0_u8; 64])); // this thread has a heap
/// loam_heap::lend_idle();
/// assert_eq!(loam_heap::stats().heaps_lent, 1);
/// // ... the thread parks; other threads may take what is freed into
/// // its heap meanwhile ...
/// loam_heap::take_back_idle();
/// assert_eq!(loam_heap::stats().heaps_lent, 0);
/// ```
pub fn lend_idle() {
    if IDLE_LENT.with(Cell::get) {
        return;
    }
    // SAFETY: called from outside the heap's code (a public entry point
    // the heap never calls itself): no reference into this thread's heap
    // is live.
    if unsafe { lend_current(None, true) } {
        IDLE_LENT.with(|i| i.set(true));
    }
}

/// Takes back the heap [`lend_idle`] lent, waiting for a thread that
/// borrows it; a no-op if it lent none, or if the heap came back
/// meanwhile. A heap lent by an enclosing [`lend`] stays lent: that call
/// takes it back as it returns.
pub fn take_back_idle() {
    if IDLE_LENT.with(Cell::get) {
        take_back();
    }
}

/// Counts an allocated bit handed out to this thread's caller.
#[inline(always)]
pub(crate) fn bit_out() {
    UNSET_BITS.with(|c| c.set(c.get().wrapping_add(1)));
}

/// Counts an allocated bit set (one [`bit_out`] counted).
#[inline(always)]
pub(crate) fn bit_in() {
    UNSET_BITS.with(|c| {
        debug_assert!(
            c.get() != 0,
            "heap: an allocated bit set that was never counted out \
             (`set` on a bit of `alloc_object_in_unlendable`?)"
        );
        c.set(c.get().wrapping_sub(1));
    });
}

/// Whether this thread holds an allocated bit it has not set: the block's
/// allocated word is its heap's owner's to write without a
/// read-modify-write, so the heap is lent to no other thread meanwhile
/// (a borrower's drain or allocation would race the `set`).
pub(crate) fn bits_out() -> bool {
    UNSET_BITS.with(Cell::get) != 0
}

/// Lends the calling thread's heap, if it has one, has not lent it already
/// and holds no allocated bit unset: returns whether it did. Until
/// [`take_back`], the thread's frees are remote and its allocations take
/// the heap back first. `since`: as [`list`]'s. `untidy`: the heap was
/// not tidied for the lend (`lend_idle`), and the first borrower's drain
/// walks it (`LocalHeap::lent_untidy`, which stays set otherwise until
/// a drain or a `lend` clears it).
///
/// # Safety
/// Nothing on the calling thread holds a reference into its heap (no
/// heap method is under way on this thread).
unsafe fn lend_current(since: Option<u64>, untidy: bool) -> bool {
    let heap = alloc::current_heap();
    if !alloc::is_live(heap) || bits_out() {
        return false;
    }
    if untidy {
        // SAFETY: the heap is this thread's and not listed yet (the
        // caller): nothing else reads it.
        unsafe { (*heap).lent_untidy = true };
    }
    // `HEAP` first, so that nothing of this thread's reaches the heap once
    // it is listed.
    LENT_HEAP.with(|h| h.set(heap));
    alloc::set_current_heap(LENT as *mut LocalHeap);
    // SAFETY: the heap is this thread's, no reference into it is live
    // (caller), and `HEAP` no longer names it.
    unsafe { list(heap, since) };
    true
}

/// Takes back the heap this thread lent, if it lent one (waiting for a
/// thread that borrows it): `HEAP` names it again.
#[cold]
pub(crate) fn take_back() {
    // For good: whichever lending lent it, [`take_back_idle`] has
    // nothing left to take back.
    IDLE_LENT.with(|i| i.set(false));
    let _ = take_back_since();
}

/// [`take_back`], returning when the heap was lent, if it was.
#[cold]
fn take_back_since() -> Option<u64> {
    if alloc::current_heap() as usize != LENT {
        return None;
    }
    let heap = LENT_HEAP.with(Cell::get);
    // SAFETY: `HEAP` is `LENT` only between `lend_current`, which listed
    // `LENT_HEAP`'s heap, and here.
    let since = unsafe { withdraw(heap) };
    // Named again only once unlisted: `LENT_HEAP` stays set until then.
    LENT_HEAP.with(|h| h.set(ptr::null_mut()));
    alloc::set_current_heap(heap);
    Some(since)
}

/// A plain allocation of a thread whose heap is lent: takes the heap back
/// for it and lends it again. A waiting thread allocates a little (a
/// thread's spawn, a channel's node); taken back for good at the first,
/// the heap was lent only until then. Costs two turns of the lent lock,
/// which may wait for a borrower's drain.
#[cold]
#[inline(never)]
pub(crate) fn alloc_lent(size: usize, align: usize) -> *mut u8 {
    let since = take_back_since();
    let p = alloc::alloc(size, align);
    // SAFETY: the allocation has returned: no reference into the heap is
    // live on this thread.
    unsafe { lend_current(since, false) };
    p
}

// ------------------------------------------------------------- the list

/// Lists `heap` as lent, since `since` (`os::now_ms`; now if `None`: a
/// heap taken back for one allocation keeps the time it was first lent,
/// [`crate::trim`]'s measure of how long it has waited).
///
/// # Safety
/// The calling thread owns `heap`, is not listed yet, and touches it no
/// more until [`withdraw`] returns.
unsafe fn list(heap: *mut LocalHeap, since: Option<u64>) {
    let since = since.unwrap_or_else(crate::os::now_ms);
    let mut lent = Locked::take();
    // SAFETY: ours (caller) until listed, which happens under the lock.
    unsafe {
        (*heap).lent_next = lent.0 .0;
        (*heap).lent_at_ms = since;
    }
    lent.0 .0 = heap;
    LENT_COUNT.fetch_add(1, Ordering::Relaxed);
}

/// Unlists `heap`, waiting for a borrower that holds it: from the return
/// on, it is the caller's alone again. Returns when it was lent.
///
/// # Safety
/// `heap` was listed by the calling thread ([`list`]) and not withdrawn.
unsafe fn withdraw(heap: *mut LocalHeap) -> u64 {
    let mut lent = Locked::take();
    let mut link: *mut *mut LocalHeap = &mut lent.0 .0;
    // Under the lent lock the listed heaps and their links are ours;
    // `link` points at the list's head or at a listed heap's `lent_next`,
    // and `heap` is listed (caller), so the walk finds it. (Not a panic if
    // it did not: its message would allocate on this thread, whose heap
    // is lent, under the lock.)
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
    let lent = Locked::take();
    let mut h = lent.0 .0;
    while !h.is_null() {
        // SAFETY: listed heaps are the lock holder's alone, and stay
        // listed while it is held; heaps are never unmapped.
        unsafe {
            f(&mut *h);
            h = (*h).lent_next;
        }
    }
}

// ------------------------------------------------------- the borrowers

/// For [`crate::trim`]: each heap lent for as long as the process-wide
/// cache keeps a wholly free segment (`segment_cache::expiry_ms`: ten
/// purge delays, at most a second, or one purge delay if that is longer)
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

/// For heap `me`, about to map `need` slices: drains the lent heaps,
/// releasing their empty pages and giving their wholly free segments to
/// the process-wide cache (for `me` to take next), until one gives any; if
/// none does, takes every segment and page of the lent heap with the most
/// free slices, as from an exited thread's (`LocalHeap::adopt`), if they
/// come to [`MIN_ADOPTED_SLICES`] and one of its segments has a run of
/// `need` free: its free slices are what its sweeps emptied while its
/// owner waited, which the owner could not use before it comes back.
/// Returns whether it found memory.
///
/// The owner, back, finds its heap without them and takes memory as a new
/// thread does (the cache, exited threads' heaps, a lent heap); its frees
/// of the blocks it left there are remote. (Only the segments with room,
/// with their pages, would leave it its full ones; but a waiting thread's
/// segments have room where its sweeps freed, which is most of them, and
/// finding a segment's pages walks every page queue.)
pub(crate) fn borrow(me: &mut LocalHeap, need: usize) -> bool {
    // A borrower's own allocation under the lock (a panic's) maps instead.
    if lent_count() == 0 || HOLDS_LOCK.with(Cell::get) {
        return false;
    }
    let lent = Locked::take();
    let mut richest: Option<(usize, *mut LocalHeap)> = None;
    let mut h = lent.0 .0;
    while !h.is_null() {
        // SAFETY: listed heaps are the lock holder's alone, and stay
        // listed while it is held; heaps are never unmapped. `me` is not
        // listed: its thread is running.
        unsafe {
            if (*h).give_back_lent() > 0 {
                crate::stats::COUNTERS.lent_borrows.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            let (free, fits) = (*h).free_slices(need);
            if fits && free >= MIN_ADOPTED_SLICES && richest.map_or(true, |(most, _)| free > most) {
                richest = Some((free, h));
            }
            h = (*h).lent_next;
        }
    }
    match richest {
        Some((_, h)) if me.adopts => {
            // SAFETY: as above.
            me.adopt(unsafe { &mut *h });
            crate::stats::COUNTERS.lent_borrows.fetch_add(1, Ordering::Relaxed);
            crate::stats::COUNTERS.lent_adoptions.fetch_add(1, Ordering::Relaxed);
            true
        }
        _ => false,
    }
}
