//! The allocation entry points and the thread-local heap pointer: which heap a
//! request goes to, and what happens before a thread has one or after it exits.

use crate::local_heap::LocalHeap;
use crate::size_class::{class_of, MIN_BLOCK, SMALL_MAX};
use crate::spin::SpinLock;
use std::cell::Cell;
use std::ptr;

/// `HEAP` after the thread's exit hook ran: allocations go to the fallback
/// heap and frees are remote. Never a valid heap address.
pub(crate) const EXITED: usize = 1;

/// `HEAP` while the thread's heap is lent (`lend.rs`, which keeps the heap):
/// frees are remote, and an allocation takes the heap back first
/// (`lend::alloc_lent`, [`thread_init`]). Never a valid heap address.
pub(crate) const LENT: usize = 2;

thread_local! {
    /// This thread's heap: null before first use, `EXITED` after exit,
    /// `LENT` while lent. Const-initialized and without `Drop`, so reading
    /// it never allocates nor registers anything.
    static HEAP: Cell<*mut LocalHeap> = const { Cell::new(ptr::null_mut()) };
    /// Its `Drop` is the thread-exit hook that abandons the heap.
    static EXIT_HOOK: ExitHook = const { ExitHook };
}

struct ExitHook;

impl Drop for ExitHook {
    fn drop(&mut self) {
        // A thread that ends inside `lend` (its closure never returned:
        // `pthread_exit`) takes its heap back to abandon it.
        crate::lend::take_back();
        let heap = HEAP.with(|h| h.replace(EXITED as *mut LocalHeap));
        if is_live(heap) {
            // SAFETY: the heap was this thread's, and `HEAP` no longer
            // names it, so this thread will never touch it again.
            unsafe { crate::abandon::abandon(heap) };
        }
    }
}

/// The calling thread's heap, or null/`EXITED`/`LENT`.
#[inline(always)]
pub(crate) fn current_heap() -> *mut LocalHeap {
    HEAP.with(Cell::get)
}

/// The calling thread's heap, taken back first if the thread lent it (for
/// the entry points that act on a thread's own heap), or null/`EXITED`.
#[inline]
pub(crate) fn settled_heap() -> *mut LocalHeap {
    let heap = current_heap();
    if heap as usize != LENT {
        return heap;
    }
    crate::lend::take_back();
    current_heap()
}

/// Points this thread's `HEAP` at `heap` (`lend.rs`: a heap lent or taken
/// back, or the `LENT` sentinel).
#[inline]
pub(crate) fn set_current_heap(heap: *mut LocalHeap) {
    HEAP.with(|h| h.set(heap));
}

/// Whether `heap` (from [`current_heap`]) is a usable heap.
#[inline(always)]
pub(crate) fn is_live(heap: *mut LocalHeap) -> bool {
    heap as usize > LENT
}

/// Allocates `size` bytes aligned to `align` (a power of two); null when out
/// of memory or when the alignment is beyond what the heap serves.
#[inline]
pub(crate) fn alloc(size: usize, align: usize) -> *mut u8 {
    let heap = current_heap();
    if is_live(heap) {
        // SAFETY: a live heap in `HEAP` belongs to this thread.
        let heap = unsafe { &mut *heap };
        if size <= SMALL_MAX && align <= MIN_BLOCK {
            return heap.alloc_class(class_of(size));
        }
        return alloc_past_small(heap, size, align);
    }
    alloc_cold(size, align)
}

/// [`alloc`] past the small classes at their plain alignment, out of line:
/// inlined, its registers made every allocation save and restore three
/// (pushes, stores a program's stores may queue behind).
#[inline(never)]
fn alloc_past_small(heap: &mut LocalHeap, size: usize, align: usize) -> *mut u8 {
    match crate::size_class::class_for_aligned(size, align) {
        Some(c) => heap.alloc_class(c),
        None => heap.alloc_large(size, align),
    }
}

/// Allocates a block of class `c` from this thread's heap and returns it with
/// its page descriptor, as [`alloc_with_page`] (null when out of memory, or
/// when the thread has no heap of its own).
#[cold]
#[inline(never)]
pub(crate) fn alloc_class_with_page_slow(c: usize) -> (*mut u8, *mut crate::page::Page) {
    let Some(heap) = own_heap() else {
        return (ptr::null_mut(), ptr::null_mut());
    };
    // SAFETY: `own_heap` returns this thread's live heap (`HEAP`), which
    // only this thread uses; `c` is a class index (the caller's).
    unsafe { (*heap).alloc_class_with_page(c) }
}

/// This thread's own heap, made on first use; `None` once the thread has
/// exited or when no heap can be made (never the shared fallback heap).
#[inline]
fn own_heap() -> Option<*mut LocalHeap> {
    let heap = current_heap();
    if is_live(heap) {
        Some(heap)
    } else {
        thread_init()
    }
}

/// The current page of class `c` in this thread's heap and a block popped
/// from it, if the thread has a heap and that page a free block: the whole
/// fast path, for callers that know `c` at compile time.
#[inline(always)]
pub(crate) fn alloc_class_fast(c: usize) -> Option<(*mut u8, *mut crate::page::Page)> {
    let heap = current_heap();
    if !is_live(heap) {
        return None;
    }
    // SAFETY: a live heap in `HEAP` belongs to this thread.
    unsafe { (*heap).alloc_class_fast(c) }
}

/// Allocates as [`alloc`] and also returns the block's page descriptor
/// (null with a null block), which the fast path has at hand anyway. Only
/// from this thread's own heap: a thread whose heap has exited (or cannot be
/// made) gets null, since the block's allocated bit, written without an
/// atomic read-modify-write, must be its owner's alone, and the shared
/// fallback heap has many threads. The page is sealed for the current
/// seal epoch (`seal.rs`), as on every path that serves a collector's
/// object, before its bit is set.
#[inline]
pub(crate) fn alloc_with_page(size: usize, align: usize) -> (*mut u8, *mut crate::page::Page) {
    let Some(heap) = own_heap() else {
        return (ptr::null_mut(), ptr::null_mut());
    };
    if align > crate::aligned::MAX_SEGMENT_ALIGN {
        // Such a block has no page (`aligned.rs`), so no allocated bit.
        return (ptr::null_mut(), ptr::null_mut());
    }
    if size <= SMALL_MAX && align <= MIN_BLOCK {
        // SAFETY: a live heap in `HEAP` belongs to this thread.
        return unsafe { (*heap).alloc_class_with_page(class_of(size)) };
    }
    // An aligned small request goes through its class's pages too, never
    // `alloc_general`: that takes the thread cache first, whose blocks may
    // be other heaps', whose allocated bits are not ours to write.
    if let Some(c) = crate::size_class::class_for_aligned(size, align) {
        // SAFETY: a live heap in `HEAP` belongs to this thread; `c` is the
        // class `class_for_aligned` chose.
        return unsafe { (*heap).alloc_class_with_page(c) };
    }
    // SAFETY: as above; a span of its own (no class, no thread cache).
    let p = unsafe { (*heap).alloc_general(size, align) };
    if p.is_null() {
        return (p, ptr::null_mut());
    }
    // SAFETY: `p` is a fresh live block of ours (a span: no fast path
    // sealed it), its allocated bit not set yet.
    unsafe {
        let page = crate::segment::page_of(p);
        crate::seal::seal_before_alloc(page);
        (p, page)
    }
}

/// The heap for threads that have exited (allocations made by later
/// thread-local destructors) or cannot register an exit hook.
pub(crate) static FALLBACK: SpinLock<FallbackHeap> = SpinLock::new(FallbackHeap(ptr::null_mut()));

pub(crate) struct FallbackHeap(*mut LocalHeap);

// SAFETY: the fallback heap is only touched under its lock.
unsafe impl Send for FallbackHeap {}

#[cold]
#[inline(never)]
fn alloc_cold(size: usize, align: usize) -> *mut u8 {
    if current_heap() as usize == LENT {
        return crate::lend::alloc_lent(size, align);
    }
    if let Some(heap) = thread_init() {
        // SAFETY: the heap was just installed for this thread.
        return unsafe { (*heap).alloc_general(size, align) };
    }
    crate::stats::COUNTERS
        .fallback_allocs
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    with_fallback(|heap| heap.alloc_general(size, align)).unwrap_or(ptr::null_mut())
}

/// Runs `f` on the fallback heap under its lock (creating it on first use).
pub(crate) fn with_fallback<R>(f: impl FnOnce(&mut LocalHeap) -> R) -> Option<R> {
    let mut g = FALLBACK.lock();
    if g.0.is_null() {
        let heap = LocalHeap::create();
        if heap.is_null() {
            return None;
        }
        // A new heap, listed among all heaps but used by no thread yet
        // (walkers read only its `all_next` and its thread cache's atomic
        // per-class words): ours to set up.
        // SAFETY: as just said.
        unsafe { (*heap).adopts = false };
        g.0 = heap;
    }
    // SAFETY: the fallback heap is only ever used under this lock.
    Some(f(unsafe { &mut *g.0 }))
}

/// Whether the fallback heap exists (without creating it).
pub(crate) fn fallback_exists() -> bool {
    !FALLBACK.lock().0.is_null()
}

/// Gives this thread a heap (reusing an orphan's if there is one) and
/// registers its exit hook. `None` if the thread has exited, is tearing down
/// its thread-locals, or the OS is out of memory.
pub(crate) fn thread_init() -> Option<*mut LocalHeap> {
    thread_init_with(true)
}

/// [`thread_init`] for a thread whose first call is a free: an exited
/// thread's heap only if it had no segment left (`abandon::take_spare`),
/// else a new one. A thread that only frees never reaches an allocation's
/// slow path, which is what drains a heap's queue and tidies its pages:
/// an orphan with segments it took would keep every block freed to it (by
/// any thread, to the exited owner's pages) for as long as the thread
/// lived, out of reach of the next allocating thread, which maps new
/// memory instead. Such an orphan stays on the list for that thread.
pub(crate) fn thread_init_for_free() -> Option<*mut LocalHeap> {
    thread_init_with(false)
}

fn thread_init_with(take_orphan: bool) -> Option<*mut LocalHeap> {
    match current_heap() as usize {
        EXITED => return None,
        LENT => {
            crate::lend::take_back();
            return Some(current_heap());
        }
        _ => {}
    }
    crate::fork::install();
    let orphan = if take_orphan {
        crate::abandon::take_orphan()
    } else {
        crate::abandon::take_spare()
    };
    let heap = match orphan {
        Some(h) => h,
        None => {
            let h = LocalHeap::create();
            if h.is_null() {
                return None;
            }
            h
        }
    };
    // Install first: registering the exit hook may allocate, and that
    // allocation must find the heap already in place.
    HEAP.with(|h| h.set(heap));
    if EXIT_HOOK.try_with(|_| ()).is_err() {
        // Thread-locals are being destroyed: no hook can run, so give the
        // heap straight back.
        HEAP.with(|h| h.set(EXITED as *mut LocalHeap));
        // SAFETY: the heap is ours and no longer installed.
        unsafe { crate::abandon::abandon(heap) };
        return None;
    }
    Some(heap)
}

/// Resizes `p` from `old_size` to `new_size` bytes, keeping `align`.
///
/// # Safety
/// `p` is a live block of this allocator of at least `old_size` bytes.
pub(crate) unsafe fn realloc(
    p: *mut u8,
    old_size: usize,
    align: usize,
    new_size: usize,
) -> *mut u8 {
    if crate::aligned::is_aligned_block(p) {
        // SAFETY: `p` is live (caller): one of `aligned.rs`'s spans.
        return unsafe { crate::aligned::realloc(p, old_size, align, new_size) };
    }
    let heap = current_heap();
    if is_live(heap) {
        // SAFETY: our own heap; `p` is live (caller).
        return unsafe { (*heap).realloc(p, old_size, align, new_size) };
    }
    let q = alloc(new_size, align);
    if !q.is_null() {
        // SAFETY: both blocks are live and distinct (caller, and fresh).
        unsafe {
            ptr::copy_nonoverlapping(p, q, old_size.min(new_size));
            crate::free::free(p);
        }
    }
    q
}
