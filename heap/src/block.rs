//! Free blocks and the words that link them, plus the debug and AddressSanitizer
//! poisoning of freed memory. Every read or write of a free block goes through
//! here so the poisoning stays consistent.

/// A free block: its first word links it into a free list or a remote batch.
#[repr(C)]
pub(crate) struct Block {
    pub(crate) next: *mut Block,
}

#[cfg(feature = "asan")]
extern "C" {
    fn __asan_poison_memory_region(addr: *const u8, size: usize);
    fn __asan_unpoison_memory_region(addr: *const u8, size: usize);
}

/// Marks `p..p+size` unaddressable for AddressSanitizer (no-op without the
/// `asan` feature).
#[inline(always)]
pub(crate) fn poison(p: *mut u8, size: usize) {
    #[cfg(feature = "asan")]
    // SAFETY: the ASan runtime only updates its shadow memory for the range.
    unsafe {
        __asan_poison_memory_region(p, size)
    };
    let _ = (p, size);
}

/// Marks `p..p+size` addressable again (no-op without the `asan` feature).
#[inline(always)]
pub(crate) fn unpoison(p: *mut u8, size: usize) {
    #[cfg(feature = "asan")]
    // SAFETY: the ASan runtime only updates its shadow memory for the range.
    unsafe {
        __asan_unpoison_memory_region(p, size)
    };
    let _ = (p, size);
}

/// Reads the link of free block `b`.
///
/// # Safety
/// `b` is a free block of at least 8 bytes that the caller owns.
#[inline(always)]
pub(crate) unsafe fn next(b: *mut Block) -> *mut Block {
    unpoison(b.cast(), 8);
    // SAFETY: the caller owns the free block; its first word is its link.
    let n = unsafe { (*b).next };
    poison(b.cast(), 8);
    n
}

/// Writes the link of free block `b`.
///
/// # Safety
/// `b` is a free block of at least 8 bytes that the caller owns.
#[inline(always)]
pub(crate) unsafe fn set_next(b: *mut Block, n: *mut Block) {
    unpoison(b.cast(), 8);
    // SAFETY: the caller owns the free block; its first word is its link.
    unsafe { (*b).next = n };
    poison(b.cast(), 8);
}

/// Reads word `i` of free block `b` (for messages that carry more than a
/// link, such as page runs).
///
/// # Safety
/// `b` is a free block of at least `8 * (i + 1)` bytes that the caller owns.
#[inline(always)]
pub(crate) unsafe fn word(b: *mut Block, i: usize) -> usize {
    // SAFETY: within the block (caller).
    let w = unsafe { b.cast::<usize>().add(i) };
    unpoison(w.cast(), 8);
    // SAFETY: as above; the caller owns the block.
    let v = unsafe { *w };
    poison(w.cast(), 8);
    v
}

/// Writes word `i` of free block `b`.
///
/// # Safety
/// As [`word`].
#[inline(always)]
pub(crate) unsafe fn set_word(b: *mut Block, i: usize, v: usize) {
    // SAFETY: within the block (caller).
    let w = unsafe { b.cast::<usize>().add(i) };
    unpoison(w.cast(), 8);
    // SAFETY: as above; the caller owns the block.
    unsafe { *w = v };
    poison(w.cast(), 8);
}

/// Bytes past the link that debug builds fill when a block is freed and check
/// when it is handed out again.
#[cfg(debug_assertions)]
const DEBUG_FILL_LEN: usize = 56;
#[cfg(debug_assertions)]
const DEBUG_FILL: u8 = 0xDD;

/// Called when the user gives block `p` of `size` bytes back: fills it in debug
/// builds and poisons it for ASan. The link is written afterwards by the list.
/// Also restores the fill of a free block whose words a message overwrote
/// (a page run's header), so the block may be poisoned already.
///
/// # Safety
/// `p..p+size` is a block the caller has just freed, or a free block it owns.
#[inline(always)]
pub(crate) unsafe fn on_free(p: *mut u8, size: usize) {
    #[cfg(debug_assertions)]
    if size > 8 {
        unpoison(p, size);
        // SAFETY: the block is `size` bytes and now ours; the link word is
        // left for the list.
        unsafe {
            p.add(8)
                .write_bytes(DEBUG_FILL, (size - 8).min(DEBUG_FILL_LEN))
        };
    }
    poison(p, size);
}

/// Called when free block `p` of `size` bytes is handed out again: unpoisons
/// it, and in debug builds checks the fill is intact (a write after free
/// aborts with a `heap:` message).
///
/// # Safety
/// `p` came off a free list (so [`on_free`] filled it) and is `size` bytes.
#[inline(always)]
pub(crate) unsafe fn on_reuse(p: *mut u8, size: usize) {
    unpoison(p, size);
    #[cfg(debug_assertions)]
    if size > 8 {
        let n = (size - 8).min(DEBUG_FILL_LEN);
        // SAFETY: the block is `size` bytes and ours.
        let tail = unsafe { std::slice::from_raw_parts(p.add(8), n) };
        if tail.iter().any(|&b| b != DEBUG_FILL) {
            crate::fatal("block written after it was freed (use after free or double free)");
        }
    }
}
