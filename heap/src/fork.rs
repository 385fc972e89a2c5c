//! `fork` in a multithreaded program: the child must be able to allocate.
//!
//! A child has one thread, the one that forked; every lock another thread
//! held at that instant stays held in the child for ever. The heap's global
//! spin locks (the orphan list, the lent list, the fallback heap, the cache of free
//! segments, the segment registry, the huge-segment cache, the spans
//! aligned past a segment) are taken around `fork` by `pthread_atfork`
//! handlers, in the order the heap nests them (the fallback heap's lock is
//! held while its allocation maps segments and takes the registry's; an
//! orphan is drained under the orphan lock and may unmap segments), and
//! released after it in both processes: the child inherits them free, and
//! the heap's metadata as the forking thread left it, consistent.
//!
//! The other threads' heaps are copied as they were and are never used in
//! the child (their threads do not exist there); blocks the child frees
//! into them wait in their queues. jemalloc and glibc do the same.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a thread has claimed the registration (registered, or under
/// way). Once per process: twice, a fork would take every lock twice and
/// wait for itself. A thread that finds it claimed does not wait for the
/// claimant: a child forked meanwhile would inherit that wait for ever (a
/// `Once` or a lock did that); it goes on without, as the first thread's
/// heap would have a moment earlier.
static CLAIMED: AtomicBool = AtomicBool::new(false);

/// Registers the handlers, once per process (the first thread heap calls
/// this; a registration that failed is tried again by the next).
pub(crate) fn install() {
    if CLAIMED.load(Ordering::Relaxed) || CLAIMED.swap(true, Ordering::Relaxed) {
        return;
    }
    // The three handlers are `extern "C" fn()` that take and
    // release the heap's spin locks (the child's also unmaps the
    // segments a parent's walk kept, with no other thread alive).
    // SAFETY: as just said.
    let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(child)) };
    if rc != 0 {
        CLAIMED.store(false, Ordering::Relaxed);
        // Without memory for the registration (its only failure). Inside
        // the allocator: no panic, no allocation; a child forked before a
        // later try succeeds may hang as it would without the handlers.
        crate::options::warn(
            b"loam-heap: pthread_atfork failed (out of memory): a child forked now may hang \
              in the allocator; tried again with the next thread's heap\n",
        );
    }
}

/// Before `fork`: takes every global lock, in nesting order.
extern "C" fn prepare() {
    // The environment's settings first: a `Once` another thread was
    // running at the fork would stay "running" in the child, where every
    // thread's first heap waited on it for ever.
    crate::options::init();
    crate::alloc::FALLBACK.lock_for_fork();
    crate::abandon::ORPHANS.lock_for_fork();
    crate::lend::LENT_LIST.lock_for_fork();
    crate::segment_cache::SEGMENT_CACHE.lock_for_fork();
    crate::segment::REGISTRY.lock_for_fork();
    crate::segment::HUGE_CACHE.lock_for_fork();
    crate::aligned::SPANS.lock_for_fork();
}

/// After `fork`, in the child: releases the locks, forgets the page walks
/// that other threads of the parent had under way
/// (`segment::for_each_segment_unlocked`), and the seals they were writing
/// (`seal::forget_seals_after_fork`).
extern "C" fn child() {
    release();
    crate::segment::forget_walks_after_fork();
    crate::seal::forget_seals_after_fork();
}

/// After `fork`, in the parent and in the child: releases them.
extern "C" fn release() {
    // SAFETY: `prepare` took each on this thread (the child's only thread
    // is the one that forked).
    unsafe {
        crate::aligned::SPANS.unlock_after_fork();
        crate::segment::HUGE_CACHE.unlock_after_fork();
        crate::segment::REGISTRY.unlock_after_fork();
        crate::segment_cache::SEGMENT_CACHE.unlock_after_fork();
        crate::lend::LENT_LIST.unlock_after_fork();
        crate::abandon::ORPHANS.unlock_after_fork();
        crate::alloc::FALLBACK.unlock_after_fork();
    }
}
