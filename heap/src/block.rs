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
    #[cfg(loom)]
    shadow::read(b as usize);
    ((n as usize) ^ link_key(b)) as *mut Block
}

/// Asks the CPU to fetch the line at `p`: a free block about to be handed
/// out, or memory ahead of a page's bump pointer. A hint: any address will
/// do, null or unmapped included.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    let _ = p;
}

/// Writes the link of free block `b`.
///
/// # Safety
/// `b` is a free block of at least 8 bytes that the caller owns.
#[inline(always)]
pub(crate) unsafe fn set_next(b: *mut Block, n: *mut Block) {
    unpoison(b.cast(), 8);
    // SAFETY: the caller owns the free block; its first word is its link.
    unsafe { (*b).next = ((n as usize) ^ link_key(b)) as *mut Block };
    poison(b.cast(), 8);
    #[cfg(loom)]
    shadow::write(b as usize);
}

/// What the link stored in free block `b` is mixed with: 0 in unchecked
/// builds; in checked ones (debug, `secure`) the block's address rotated
/// and mixed with the address of a static, which ASLR places anew in each
/// process (mimalloc's secure mode encodes its links likewise). A write
/// after free over a link then decodes to an address that is no block of
/// the list's page (the check in `Page::try_alloc` stops the process),
/// not to where a forged pointer
/// aimed, and a link zeroed by the program is no longer the end of the
/// list (it decodes to garbage too), where it silently cut the list off.
#[inline(always)]
fn link_key(b: *mut Block) -> usize {
    if !CHECKED {
        return 0;
    }
    static ANCHOR: u8 = 0;
    let process = (&ANCHOR as *const u8 as usize).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (b as usize).rotate_left(29) ^ process
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
    #[cfg(loom)]
    shadow::read(w as usize);
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
    #[cfg(loom)]
    shadow::write(w as usize);
}

/// Under loom, every word of a free block that the accessors above touch
/// has a loom cell beside it, read and written with each access: the words
/// themselves are plain memory, which loom cannot see, so without them no
/// model checked that a consumer's read of a link happens after the
/// producer's write (a queue's push with a relaxed compare-and-swap
/// passed every model). A read not ordered after the last write, or a
/// write racing a read, fails the model with loom's causality report.
///
/// The cells live for one execution of a model ([`shadow::reset`], which
/// `sync::model` runs first), keyed by address, in a thread local: loom
/// runs a model's threads as coroutines of the test's own thread, and a
/// `loom::lazy_static` would order every thread after the one that first
/// touched it, hiding that thread's first writes.
#[cfg(loom)]
pub(crate) mod shadow {
    use loom::cell::UnsafeCell;
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::rc::Rc;

    thread_local! {
        static WORDS: RefCell<HashMap<usize, Rc<UnsafeCell<()>>>> = RefCell::new(HashMap::new());
    }

    /// Forgets the cells of the last execution (loom objects of one
    /// execution are meaningless in the next).
    pub(crate) fn reset() {
        WORDS.with(|w| w.borrow_mut().clear());
    }

    /// A read of the word at `addr`: checked against the last write, if
    /// one was made through these accessors (a word never written through
    /// them, as a fresh block's, has nothing to race with here).
    pub(super) fn read(addr: usize) {
        let cell = WORDS.with(|w| w.borrow().get(&addr).cloned());
        if let Some(c) = cell {
            c.with(|_| ());
        }
    }

    /// A write of the word at `addr`: its cell made on first use, and the
    /// write recorded at the thread's clock now (a cell's making alone took
    /// the clock of the thread's last atomic operation: a write just after
    /// a push's compare-and-swap would read as before it).
    pub(super) fn write(addr: usize) {
        let c = WORDS.with(|w| {
            w.borrow_mut()
                .entry(addr)
                .or_insert_with(|| Rc::new(UnsafeCell::new(())))
                .clone()
        });
        c.with_mut(|_| ());
    }
}

/// Whether blocks are filled and checked (debug builds, the `secure`
/// feature). A freed block of 16 bytes or more carries a tag in its second
/// word (its address, encoded) and `DEBUG_FILL` after it, up to 64 bytes
/// in all: a block handed out again must still hold both (else it was
/// written after it was freed), and a block being freed must not hold the
/// tag (else it is being freed twice). Handing a block out overwrites the
/// tag. A constant byte fill is not enough to tell a freed block: programs
/// fill their own buffers with constants too (`vec![0xDD; n]` read as freed).
///
/// `free` checks its pointer under the same switch (a block start in a
/// live segment of ours, `free.rs`). Measured in release, interleaved
/// against the unchecked build: the segment-map lookup alone cost larson 5%
/// and tree building 1.5%, the block-start check on top 20% and 4% more;
/// with the freed tag and the free lists' link checks, larson runs at 0.6x
/// its speed and tree building at 1.1x the time (mimalloc and jemalloc do
/// not check in release either).
pub(crate) const CHECKED: bool = cfg!(any(debug_assertions, feature = "secure"));
/// Whether the fill after the tag is written and checked too: debug builds
/// only (with it, the `secure` feature ran larson at a fifth of its speed;
/// the tag alone is four 8-byte accesses a block).
const FILL: bool = cfg!(debug_assertions);
/// Bytes past the link that are filled and checked.
const DEBUG_FILL_LEN: usize = 56;
const DEBUG_FILL: u8 = 0xDD;
/// What a handed-out block's second word is set to.
const ALLOC_WORD: u64 = 0xA5A5_A5A5_A5A5_A5A5;

/// The tag of freed block `p`: its address, mixed so that no small
/// integer, pointer or constant fill a program stores reads as it.
#[inline(always)]
fn freed_tag(p: *const u8) -> u64 {
    (p as u64).rotate_left(23) ^ 0xD00D_F4EE_DB10_C4ED
}

/// Called when the user gives block `p` of `size` bytes back: fills it in debug
/// builds and poisons it for ASan. The first word is written afterwards:
/// a list's link, or the thread cache's kept tag ([`on_keep`]).
/// Also restores the fill of a free block whose words a message overwrote
/// (a page run's header), so the block may be poisoned already.
///
/// # Safety
/// `p..p+size` is a block the caller has just freed, or a free block it owns.
#[inline(always)]
pub(crate) unsafe fn on_free(p: *mut u8, size: usize) {
    if CHECKED && size >= 16 {
        unpoison(p, size);
        // SAFETY: the block is `size` bytes and now ours; the link word is
        // left for the list; the tag is the second word, the fill follows.
        unsafe {
            p.add(8).cast::<u64>().write_unaligned(freed_tag(p));
            if FILL {
                p.add(16)
                    .write_bytes(DEBUG_FILL, (size - 16).min(DEBUG_FILL_LEN - 8))
            }
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
    if CHECKED && size >= 16 {
        // SAFETY: the block is `size` bytes and ours.
        let (tag, tail) = unsafe {
            (
                p.add(8).cast::<u64>().read_unaligned(),
                std::slice::from_raw_parts(p.add(16), (size - 16).min(DEBUG_FILL_LEN - 8)),
            )
        };
        if tag != freed_tag(p) || (FILL && tail.iter().any(|&b| b != DEBUG_FILL)) {
            crate::fatal("block written after it was freed (use after free or double free)");
        }
        // SAFETY: as above.
        unsafe { on_alloc(p, size) };
    }
}

/// The first word of a block the thread cache keeps, in checked builds:
/// the freed tag turned, so that it differs from the second word's.
#[inline(always)]
fn kept_tag(p: *const u8) -> u64 {
    freed_tag(p).rotate_left(32)
}

/// Called when the thread cache keeps free block `p` (through
/// [`on_free`]): in checked builds its first word, which no list links
/// through while the block is kept, gets the kept tag, which
/// [`check_kept`] reads when the block is handed out again.
///
/// # Safety
/// `p` is a free block of at least 8 bytes that the caller owns.
#[inline(always)]
pub(crate) unsafe fn on_keep(p: *mut u8) {
    if CHECKED {
        unpoison(p, 8);
        // SAFETY: the caller owns the free block, at least 8 bytes.
        unsafe { p.cast::<u64>().write_unaligned(kept_tag(p)) };
        poison(p, 8);
    }
}

/// Called when the thread cache hands kept block `p` out again: in
/// checked builds, stops with a `heap:` message if its first word no
/// longer holds the kept tag ([`on_keep`]).
///
/// # Safety
/// `p` is a free block of at least 8 bytes that the caller owns.
#[inline(always)]
pub(crate) unsafe fn check_kept(p: *mut u8) {
    if CHECKED {
        unpoison(p, 8);
        // SAFETY: the caller owns the free block, at least 8 bytes.
        let w = unsafe { p.cast::<u64>().read_unaligned() };
        poison(p, 8);
        if w != kept_tag(p) {
            crate::fatal(
                "block written after it was freed (its first word, while the thread cache kept it)",
            );
        }
    }
}

/// Called when block `p` of `size` bytes is handed out: overwrites the
/// freed tag, so that a free can tell it from a free block
/// ([`check_not_free`]). (A block fresh from zeroed memory holds no tag
/// and need not be written.)
///
/// # Safety
/// `p..p+size` is a block being handed out, the caller's.
#[inline(always)]
pub(crate) unsafe fn on_alloc(p: *mut u8, size: usize) {
    if CHECKED && size >= 16 {
        // SAFETY: the block is `size` bytes and the caller's.
        unsafe { p.add(8).cast::<u64>().write_unaligned(ALLOC_WORD) };
    }
}

/// Called on the user's free of block `p` of `size` bytes, before anything
/// else touches it: stops with a `heap:` message if the block carries the
/// freed tag (a second free of a block nobody allocated since).
///
/// # Safety
/// `p..p+size` is mapped memory of a block of ours.
#[inline(always)]
pub(crate) unsafe fn check_not_free(p: *mut u8, size: usize) {
    if CHECKED && size >= 16 {
        unpoison(p.wrapping_add(8), 8);
        // SAFETY: the block is `size` bytes, mapped (caller).
        let tag = unsafe { p.add(8).cast::<u64>().read_unaligned() };
        if tag == freed_tag(p) {
            invalid_free(p, "freed twice (it carries the freed tag)");
        }
    }
}

/// Stops the process: `p` was handed to `free` but is not a block this
/// allocator gave out. Formats on the stack: the allocator must not
/// allocate here.
#[cold]
#[inline(never)]
pub(crate) fn invalid_free(p: *mut u8, why: &str) -> ! {
    struct Buf {
        bytes: [u8; 200],
        len: usize,
    }
    impl std::fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let n = s.len().min(self.bytes.len() - self.len);
            self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n;
            Ok(())
        }
    }
    let mut b = Buf {
        bytes: [0; 200],
        len: 0,
    };
    let _ = std::fmt::Write::write_fmt(&mut b, format_args!("free of {p:p}: {why}"));
    crate::fatal(std::str::from_utf8(&b.bytes[..b.len]).unwrap_or("free of an invalid pointer"))
}
