//! The free entry point: a small block goes to this thread's cache
//! (`keep`: this heap's, or any heap's once the thread is past its youth),
//! else back to its page directly when this thread owns it (`free_owned`),
//! else into a batch for its owner's remote queue (`free_remote`).

use crate::alloc::{current_heap, is_live, thread_init_for_free};
use crate::block;
use crate::local_heap::LocalHeap;
use crate::remote::Inbox;
use crate::remote::REMOTE;
use crate::remote_cache::page_key;
use crate::thread_cache::ThreadCache;
use crate::segment::{block_size_of, segment_of};
use crate::sync::Ordering;
use std::ptr;

/// Frees `p`.
///
/// # Safety
/// `p` is a live block from this allocator that nobody will use again.
#[inline]
pub(crate) unsafe fn free(p: *mut u8) {
    if crate::aligned::is_aligned_block(p) {
        // SAFETY: as the caller promised; `aligned::free` checks that `p`
        // is one of its spans before it reads anything.
        return unsafe { crate::aligned::free(p) };
    }
    let seg = segment_of(p);
    // A pointer of someone else's (a `malloc` block, a static, the stack)
    // would have us read a header that is not there: stop with a message.
    if block::CHECKED && !crate::segment_map::contains(seg as usize) {
        block::invalid_free(p, "not in any segment of this allocator (not allocated by it)");
    }
    // SAFETY: `p` is in a live segment of ours (just checked; a live block,
    // by the caller), so the header is mapped; its owner field is atomic.
    let owner = unsafe { (*seg).owner.load(Ordering::Relaxed) };
    let heap = current_heap();
    // SAFETY: a live heap in `HEAP` is this thread's; `p` as promised.
    if is_live(heap) && unsafe { keep(&mut *heap, owner, p) } {
        return;
    }
    // SAFETY: as the caller promised; `owner` read from `p`'s segment.
    unsafe { free_unkept(heap, owner, p) }
}

/// A free the thread cache did not keep (a large block, a young or
/// free-only thread's free of another heap's block, another heap's block
/// of a full class): to the page if the block is this heap's, else
/// towards its owner. Out of line, so that the kept free saves few
/// registers (a push is a store, and a program's stores may queue behind
/// one that waits for another core's line, as the allocation's did:
/// `alloc::alloc_past_small`). With these paths inline it saved more;
/// with the full class's page path (in `keep`) out of line too it saves
/// none, but tree building's free phase, which takes that path for nearly
/// every block, took 1.15x its time.
///
/// # Safety
/// As [`free`]; `owner` is the owner read from `p`'s segment.
#[inline(never)]
unsafe fn free_unkept(heap: *mut LocalHeap, owner: *mut LocalHeap, p: *mut u8) {
    if owner == heap {
        // SAFETY: this thread owns the segment, hence the page and block.
        unsafe { (*heap).free_owned(p) };
    } else {
        // SAFETY: as the caller promised.
        unsafe { free_remote(heap, owner, p) };
    }
}

/// Keeps `p` in `heap`'s thread cache, if `p`'s class has room and the
/// cache keeps it (this heap's block, or any heap's past the thread's
/// youth: [`ThreadCache::refuses`](crate::thread_cache::ThreadCache::refuses)),
/// or frees this heap's block of a full class to its page; false leaves
/// `p` for the paths that ask whose it is.
///
/// The class comes from the segment's side table, as for a remote free,
/// so a free of a block of this heap's reads no page descriptor either.
/// Past the thread's youth, `owner` decides no branch on a kept free: it
/// feeds the statistic, as data (`ThreadCache::refuses`).
///
/// # Safety
/// As [`free`]; `heap` is this thread's live heap and `owner` the owner
/// read from `p`'s segment.
#[inline(always)]
unsafe fn keep(heap: &mut LocalHeap, owner: *mut LocalHeap, p: *mut u8) -> bool {
    let me: *mut LocalHeap = heap;
    // Whose the block is matters here only before the thread keeps any
    // heap's; past that, no branch on it (`refuses`).
    if heap.tcache.refuses(owner, me) {
        return false;
    }
    // SAFETY: `p` is in a live segment of ours (`free`), side tables mapped.
    let size = unsafe { block_size_of(p) };
    let Some(class) = ThreadCache::class_for(size) else {
        return false;
    };
    let Some(w) = heap.tcache.room(class) else {
        if owner != me {
            return false;
        }
        // A full class, this heap's block: to its page here, not through
        // `free_unkept`'s call (a thread freeing a structure of its own
        // takes this way for every block past its class's first 128: tree
        // building's free phase took 1.15x its time through the call).
        // SAFETY: this heap owns the segment, hence the page and block.
        unsafe { heap.free_owned(p) };
        return true;
    };
    // SAFETY: as above.
    if block::CHECKED && !unsafe { crate::segment::is_block_start(p, size) } {
        block::invalid_free(p, "not the start of a block (an interior pointer, or a block already freed)");
    }
    #[cfg(debug_assertions)]
    {
        // SAFETY: as above.
        let page_size = unsafe { (*crate::segment::page_of(p)).block_size() };
        debug_assert_eq!(size, page_size, "heap: slice block size out of step");
    }
    // A block start of `size` bytes in a live small page (checked where
    // checks are built), dead and ours to hand over (caller); `w` is its
    // class's word, read just above with room found.
    // SAFETY: as just said.
    unsafe {
        block::check_not_free(p, size);
        block::on_free(p, size);
        heap.tcache.push(class, w, p, owner != me);
    }
    true
}

/// Sends `p` towards `owner`: batched through this thread's cache when it has
/// a heap, else pushed on its own.
///
/// # Safety
/// As [`free`]; `owner` is the owner read from `p`'s segment.
#[inline(never)]
unsafe fn free_remote(heap: *mut LocalHeap, owner: *mut LocalHeap, p: *mut u8) {
    // SAFETY: `p` is in a live segment of ours (`free`), so the side tables
    // are mapped, and stable while any block of the page lives.
    let size = unsafe { block_size_of(p) };
    // SAFETY: as above.
    if block::CHECKED && !unsafe { crate::segment::is_block_start(p, size) } {
        block::invalid_free(p, "not the start of a block (an interior pointer, or a block already freed)");
    }
    // SAFETY: a block start in a live segment of ours, `size` bytes.
    unsafe { block::check_not_free(p, size) };
    #[cfg(debug_assertions)]
    {
        // SAFETY: as above.
        let page_size = unsafe { (*crate::segment::page_of(p)).block_size() };
        debug_assert_eq!(size, page_size, "heap: slice block size out of step");
    }
    // `p` is dead and ours to hand over (caller); heaps are never
    // unmapped, so `owner`'s queue outlives the push.
    // SAFETY: as just said.
    unsafe {
        block::on_free(p, size);
        let queue = ptr::addr_of!((*owner).queue);
        // A thread that only frees (a collector's) has no heap until now:
        // give it one, for the outgoing batches. Without it every foreign
        // free would be a CAS on the owner's queue head. A new one, not an
        // exited thread's (`thread_init_for_free`).
        let heap = if heap.is_null() {
            thread_init_for_free().unwrap_or(heap)
        } else {
            heap
        };
        // The thread cache refused the block (a young thread's, or one
        // that only frees: `thread_cache::YOUNG_SENDS`) or had no room
        // for it (`keep`): it goes home.
        if is_live(heap) {
            (*heap).tcache.note_sent(size);
            send(&mut *heap, queue, p, size);
        } else {
            (*queue).push(0, p.cast(), p.cast());
            REMOTE.sent.fetch_add(1, Ordering::Relaxed);
            REMOTE.batches.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Batches `p` for `queue`'s heap in `heap`'s outgoing cache. Out of line:
/// inlined, the cache's page-slot code made `free_remote`'s own prologue
/// and registers heavier on every free, the thread cache's too (larson at
/// two threads, where most remote frees stay in the thread cache, 6%
/// slower).
///
/// # Safety
/// As [`RemoteCache::push`](crate::remote_cache::RemoteCache::push), with
/// `p` of `size` bytes.
#[inline(never)]
unsafe fn send(heap: &mut LocalHeap, queue: *const Inbox, p: *mut u8, size: usize) {
    // SAFETY: the caller's.
    unsafe { heap.cache.push(queue, page_key(p), p, size) }
}
