//! Managed arrays and strings: the constructors of `Gc<'gc, [T]>` and
//! `Gc<'gc, str>` on [`Mutation`].
//!
//! An array is one allocation: the header word, the length word, then the
//! elements (layout: `gc.rs`). What changes in place is what its elements
//! let change, so an array of [`GcCell`](crate::GcCell)s is a mutable
//! managed array whose every store is one barrier of O(1) work, and a
//! growable collection is a small object pointing (through a cell) to an
//! array it replaces when it grows: the old array is garbage for the
//! collector, as in the seeds' allocate-here, free-there pattern.
//!
//! # Lengthening in place
//! Its length changes in one case: an array of elements that need no
//! tracing and say `Trace::GROWS_IN_PLACE` may be lengthened into its
//! block's room
//! ([`Mutation::try_grow_in_place`]), as `realloc` grows a block where it
//! is, and a collection then keeps its array instead of copying it. The
//! block's room is its slack (a size class's, a span's last slice), or
//! what [`Mutation::try_alloc_from_iter_with_room`] asked for. What holds:
//! - One lengthening of an array at a time: it takes a claim (one of 64
//!   striped by address, tried once: `Ok(false)` if taken), writes the new
//!   elements past the length, where nobody else reads or writes, and
//!   stores the new length (release) before it lets the claim go. Every
//!   read of such an array's length is an acquire load (`array_len`), so
//!   a reader sees the old length or the new one with its elements
//!   written; other arrays' lengths never change, and `Deref` reads them
//!   with a plain load. (The first
//!   version claimed the array with a bit in the length word, which every
//!   read then masked off: one more instruction in every push loop and
//!   string operation, `refill` 1.3 – 1.5 ms a million pushes against 1.2
//!   – 1.3.)
//! - No new managed pointer: elements that need tracing would be stores
//!   into an object a concurrent mark may have traced already, and need
//!   the barrier's work each; those arrays are never lengthened (so the
//!   mark's chunks of a long traced array keep their geometry).
//! - The accounting follows the length: a large block is charged for its
//!   length when made and for what a lengthening adds, and the sweep
//!   credits it what its length says (`TypeDesc::object_size`); a small
//!   block's size class and a `GlobalAlloc` space's allocation were
//!   charged whole.
//! - The block does not change: the sweep, the mark bits and the heap see
//!   the same object, only longer.
//!
//! The loom model `grow_model.rs` checks the claim and the publication.
//!
//! Publication: the allocated bit is set only once every element is
//! written. If filling stops early (an iterator that panics, or yields fewer
//! items than its `len` promised), the length word is cut to the elements
//! written and the object is published as it is, so that the sweep drops
//! exactly those; nothing else can see the object before that.

use crate::gc::{array_len_word, array_offset, ArrayDesc, Gc};
use crate::mutator::{AllocError, AllocErrorKind, Mutation, Mutator};
use crate::trace::Trace;
use crate::alloc_space::AllocSpace;
use loam_heap::AllocatedBit;

/// Why a block could not be had, and its size: an [`AllocError`] without
/// its value yet.
struct Failure {
    size: usize,
    kind: AllocErrorKind,
}

impl Failure {
    fn with<T>(self, value: T) -> AllocError<T> {
        AllocError::new(value, self.size, self.kind)
    }
}

/// A fresh array object whose header and length word are written, not yet
/// published.
struct Reserved<'m> {
    addr: usize,
    bit: Option<AllocatedBit>,
    /// What the heap accounting was charged, and the array's geometry.
    charged: usize,
    /// Whether the block is a large one (past `loam_heap::SMALL_MAX`),
    /// which the sweep credits with its length's bytes: a cut gives back
    /// the rest of the charge. A block's charge says so (`good_size`),
    /// except an array made with room, charged for its length in a larger
    /// block, and a span for elements aligned past 64 KiB, whose charge
    /// is its bytes (as before this field).
    large: bool,
    len: usize,
    offset: usize,
    elem: usize,
    mutator: &'m Mutator,
}

impl<'m> Reserved<'m> {
    /// The reservation of block `p`, an array of `len` `T`s charged `size`
    /// bytes, whose words are written.
    #[inline(always)]
    fn new<T>(p: *mut u8, bit: Option<AllocatedBit>, size: usize, len: usize, mutator: &'m Mutator) -> Self {
        Reserved {
            addr: p as usize,
            bit,
            charged: size,
            large: size > loam_heap::SMALL_MAX,
            len,
            offset: array_offset::<T>(),
            elem: std::mem::size_of::<T>(),
            mutator,
        }
    }

    /// Cuts the length to `len` (the elements written) and publishes the
    /// object.
    #[inline(always)]
    fn publish(&mut self, len: usize) {
        if len < self.len {
            self.cut(len);
        }
        if let Some(bit) = self.bit.take() {
            bit.set();
        }
    }

    /// Cuts the length word to `len`, the elements written (fewer than
    /// reserved: a filling iterator that panicked or fell short).
    #[cold]
    fn cut(&mut self, len: usize) {
        // The length word of our unpublished object: no other
        // thread can reach it before its bit is set (in a `GlobalAlloc`
        // space, which has no bit, its registry already lists it, but that
        // is read only with the world stopped, never during this call: such
        // a space runs no ragged cycles).
        // SAFETY: as just said.
        unsafe { *((self.addr + std::mem::size_of::<usize>()) as *mut usize) = len };
        // The sweep credits a large object with its size as its header and
        // length say (`TypeDesc::object_size`): a cut one gives the rest of
        // its charge back now.
        // (A `GlobalAlloc` space charges and credits the whole allocation.)
        let pages = self.mutator.alloc_space().is_none();
        if pages && self.large {
            let bytes = self.offset + len * self.elem;
            self.mutator.give_back(self.charged - bytes);
        }
        self.len = len;
    }
}

/// What [`Mutation::reserve_small`] found: a block of a size class with
/// its header and length words written and the bytes charged, or a case
/// for the general path, or the limit's or the OS's refusal.
enum Small {
    Got(*mut u8, AllocatedBit, usize),
    General,
    Failed(Failure),
}

/// Publishes an array being filled on every exit path, with the elements
/// written so far: an unwinding iterator leaves an object the sweep drops
/// correctly, never one with uninitialised elements.
struct Filling<'m, T> {
    reserved: Reserved<'m>,
    elems: *mut T,
    written: usize,
}

impl<T> Drop for Filling<'_, T> {
    fn drop(&mut self) {
        self.reserved.publish(self.written);
    }
}

/// Bytes of a `[T]` object of `len` elements; `None` past `isize::MAX`
/// (no allocation is larger, as for `Vec`).
fn array_bytes<T>(len: usize) -> Option<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .and_then(|b| b.checked_add(array_offset::<T>()))
        .filter(|&b| b <= isize::MAX as usize)
}

/// The sweep's page flag for objects holding `T`s: read the headers for
/// drop glue.
#[inline(always)]
pub(crate) fn drop_flags<T>() -> u8 {
    if std::mem::needs_drop::<T>() {
        crate::sweep::HAS_DROP
    } else {
        0
    }
}

/// Writes a fresh array's header word and length word.
///
/// # Safety
/// `p` is a fresh block of at least 16 bytes, aligned to a word, ours alone.
#[inline(always)]
unsafe fn write_array_words(p: *mut u8, header: usize, len: usize) {
    // SAFETY: as the caller vouches.
    unsafe {
        p.cast::<usize>().write(header);
        p.cast::<usize>().add(1).write(len);
    }
}

impl Failure {
    /// An array too large for any allocation: the `try_` constructors
    /// return it as their `Err` (`Vec::try_reserve`'s capacity overflow),
    /// the others panic with it ([`AllocError`]'s message names it).
    fn overflow() -> Failure {
        Failure {
            size: usize::MAX,
            kind: AllocErrorKind::CapacityOverflow,
        }
    }
}

/// Copies `n` bytes from `src` to `dst`: up to 16 of them with two
/// overlapping loads and stores of a word or half-word (a string's cached
/// hash, and most short strings, without a call to `memcpy`), longer runs
/// with `copy_nonoverlapping`. The words are loaded as `MaybeUninit`: a
/// `Copy` element may have padding or uninitialised bytes (`(u8, u32)`,
/// `Option<u32>::None`), which loaded as integers were undefined
/// behaviour; as `MaybeUninit` they are copied as they are, in the same
/// instructions.
///
/// # Safety
/// `src` is readable and `dst` writable for `n` bytes, and they do not
/// overlap.
#[inline(always)]
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    use std::mem::MaybeUninit;
    type Word = MaybeUninit<u64>;
    type Half = MaybeUninit<u32>;
    // Every access below is inside the first `n` bytes of `src` or `dst`
    // (the caller's ranges): the second load and store of a pair ends at
    // byte `n`, the first begins at byte 0, and each pair is used only
    // when its width is at most `n`; the loads need no initialised bytes.
    // SAFETY: as just said.
    unsafe {
        if (8..=16).contains(&n) {
            let (a, b) = (src.cast::<Word>().read_unaligned(), src.add(n - 8).cast::<Word>().read_unaligned());
            dst.cast::<Word>().write_unaligned(a);
            dst.add(n - 8).cast::<Word>().write_unaligned(b);
        } else if (4..8).contains(&n) {
            let (a, b) = (src.cast::<Half>().read_unaligned(), src.add(n - 4).cast::<Half>().read_unaligned());
            dst.cast::<Half>().write_unaligned(a);
            dst.add(n - 4).cast::<Half>().write_unaligned(b);
        } else {
            std::ptr::copy_nonoverlapping(src, dst, n);
        }
    }
}

/// Copies `parts` one after another to `at`, as bytes.
///
/// # Safety
/// `at` is the first element of an unpublished array of ours with room for
/// the parts' lengths together; a `Copy` element is copied as bytes (the
/// parts are a caller's slices, which cannot overlap our fresh block).
#[inline(always)]
unsafe fn copy_parts<T: Copy>(at: usize, parts: &[&[T]]) {
    let mut at = at as *mut T;
    for part in parts {
        let bytes = std::mem::size_of_val::<[T]>(*part);
        // As the caller vouches: `bytes` readable from the part,
        // writable at `at` (`copy_bytes`).
        // SAFETY: as just said.
        unsafe {
            copy_bytes(part.as_ptr().cast::<u8>(), at.cast::<u8>(), bytes);
            at = at.add(part.len());
        }
    }
}

/// The claims of arrays being lengthened in place, one per stripe of
/// addresses (hashed): lengthenings are rare (each doubles an array, at
/// most), so 64 stripes let unrelated ones run at once, and a claim in the
/// length word itself would cost every read of every length a mask. A
/// claim is held across the charge (`take_credit`, which may assist the
/// collector) and the `fill`; one held when a process forks stays held in
/// the child, whose lengthenings of arrays of that stripe then answer
/// `Ok(false)` (their callers copy).
static CLAIMS: [parking_lot::Mutex<()>; 64] = [const { parking_lot::Mutex::new(()) }; 64];

/// The claim of the stripe of the object at `addr`, if no one holds it
/// (tried once); released when the guard drops, a panic included.
fn claim(addr: usize) -> Option<parking_lot::MutexGuard<'static, ()>> {
    // A hash of the address (Fibonacci's), its top six bits: the low bits
    // of the arrays that grow are all zero (a large block starts on a 64
    // KiB slice, a huge one at its segment's header's end), and a stripe
    // taken from them put every one on claim 0.
    const _: () = assert!(CLAIMS.len() == 64);
    CLAIMS[(addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) % CLAIMS.len()].try_lock()
}

impl<'gc> Mutation<'gc> {
    /// Reserves a block for an array of `len` elements whose header word is
    /// `header`, and writes both words.
    #[inline(always)]
    fn reserve_array<T>(&self, header: usize, len: usize) -> Result<Reserved<'_>, Failure> {
        match self.reserve_small::<T>(header, len) {
            Small::Got(p, bit, size) => Ok(Reserved::new::<T>(p, Some(bit), size, len, self.mutator())),
            Small::General => self.reserve_array_general::<T>(header, len),
            Small::Failed(f) => Err(f),
        }
    }

    /// [`reserve_array`](Self::reserve_array)'s common case, inlined into
    /// the constructors as `try_alloc`'s is: loam's pages, a size class,
    /// credit at hand, the class's current page with a free block. Every
    /// managed string is such an array, so the small case pays no call,
    /// no check that only the general case needs, and no `Reserved` in
    /// memory (`docs/perf-log.md`, session 49: the strings case of
    /// `benches/collections.rs` ran 9% fewer instructions in all).
    #[inline(always)]
    fn reserve_small<T>(&self, header: usize, len: usize) -> Small {
        let m = self.mutator();
        let class = match (m.alloc_space(), array_bytes::<T>(len)) {
            (None, Some(bytes)) if std::mem::align_of::<T>() <= 8 => loam_heap::ObjectClass::small(bytes),
            _ => None,
        };
        let Some(class) = class else {
            return Small::General;
        };
        let size = class.size();
        if !m.take_credit(size) {
            return Small::Failed(Failure { size, kind: crate::mutator::limit_kind(m) });
        }
        let (p, bit) = loam_heap::alloc_object_in(class, drop_flags::<T>(), m.shared().id);
        let Some(bit) = bit else {
            return Small::Failed(Failure { size, kind: crate::mutator::refused_kind(m, size, true) });
        };
        crate::mutator::check_fresh(p);
        // `p` is a fresh block of the class, at least 16 bytes, aligned to a
        // word, ours alone until published.
        // SAFETY: as just said.
        unsafe { write_array_words(p, header | self.window_made(), len) };
        Small::Got(p, bit, size)
    }

    /// [`reserve_array`](Self::reserve_array) for every other case: a
    /// `GlobalAlloc` space, a large array, an over-aligned element, a size
    /// past `isize::MAX`.
    #[cold]
    #[inline(never)]
    fn reserve_array_general<T>(&self, header: usize, len: usize) -> Result<Reserved<'_>, Failure> {
        let Some(bytes) = array_bytes::<T>(len) else {
            return Err(Failure::overflow());
        };
        let align = std::mem::align_of::<T>().max(std::mem::align_of::<usize>());
        let m = self.mutator();
        let space = m.alloc_space();
        // As in `try_alloc`: accounting in blocks, blocks of 16 bytes or
        // more (an empty array is two words); in a `GlobalAlloc` space, the
        // allocation with its prefix.
        let size = match space {
            None => loam_heap::good_size(bytes, align),
            Some(_) => AllocSpace::charge(bytes, align),
        };
        if space.is_none() && align > crate::mutator::MAX_PAGE_ALIGN {
            crate::mutator::over_aligned(align);
        }
        if !m.take_credit(size) {
            return Err(Failure { size, kind: crate::mutator::limit_kind(m) });
        }
        let (p, bit) = match space {
            None => {
                let (p, bit) = loam_heap::alloc_object(bytes, align, drop_flags::<T>(), m.shared().id);
                (p, bit.map(Some))
            }
            Some(space) => {
                let p = space.alloc(&m.space_local, bytes, align);
                // No allocated bit: the registry entry is the publication,
                // read only by a pause after this call.
                (p, (!p.is_null()).then_some(None))
            }
        };
        let Some(bit) = bit else {
            return Err(Failure { size, kind: crate::mutator::refused_kind(m, size, space.is_none()) });
        };
        if space.is_none() {
            crate::mutator::check_fresh(p);
        }
        // `p` is a fresh block of `bytes >= 16` bytes, aligned to at least a
        // word, ours alone until published.
        // SAFETY: as just said.
        unsafe { write_array_words(p, header | self.window_made(), len) };
        Ok(Reserved::new::<T>(p, bit, size, len, m))
    }

    /// Allocates an array of `len` elements taken from `items`, which must
    /// yield at least that many (fewer: the array is cut to what it gave).
    fn fill_array<T: Trace + 'gc>(
        &self,
        reserved: Reserved<'_>,
        len: usize,
        items: impl Iterator<Item = T>,
    ) -> Gc<'gc, [T]> {
        let addr = reserved.addr;
        let mut fill = Filling {
            reserved,
            elems: (addr + array_offset::<T>()) as *mut T,
            written: 0,
        };
        // `for_each`, not a `for` loop: a chain of iterators (a list grown
        // from its old elements and then copies of one value) runs each
        // part as its own loop instead of asking which part on every item.
        items.take(len).for_each(|item| {
            // SAFETY: element `written < len` of our unpublished array.
            unsafe { fill.elems.add(fill.written).write(item) };
            fill.written += 1;
        });
        drop(fill); // publishes, with the length cut to what was written
        // A published `[T]` object, live for `'gc`: no cycle frees what a
        // `mutate` call holds before the call returns (`barrier.rs`).
        // SAFETY: as just said.
        let gc: Gc<'gc, [T]> = unsafe { Gc::from_addr(addr) };
        gc
    }

    /// Allocates a managed array holding the items of `iter`, or fails at
    /// the heap limit (before taking any item from an iterator whose size
    /// is known; otherwise the items taken are dropped).
    ///
    /// An iterator whose `size_hint` is exact (ranges, slices' iterators,
    /// `map`s of them) is written straight into the array; any other is
    /// collected into a `Vec` first. Items past an exact hint are not
    /// taken.
    ///
    /// # Panics
    /// If the iterator panics, or yields fewer items than its exact hint
    /// promised (the items it gave are dropped in either case, with the
    /// array, which is never handed out).
    pub fn try_alloc_from_iter<T, I>(&self, iter: I) -> Result<Gc<'gc, [T]>, AllocError<()>>
    where
        T: Trace + 'gc,
        I: IntoIterator<Item = T>,
    {
        let iter = iter.into_iter();
        match iter.size_hint() {
            (lower, Some(upper)) if lower == upper => self.try_alloc_exact(lower, iter),
            // Not known in advance: gather, then allocate once.
            _ => {
                let items: Vec<T> = iter.collect();
                self.try_alloc_exact(items.len(), items.into_iter())
            }
        }
    }

    /// An array of the first `len` items of `iter`.
    fn try_alloc_exact<T: Trace + 'gc>(
        &self,
        len: usize,
        iter: impl Iterator<Item = T>,
    ) -> Result<Gc<'gc, [T]>, AllocError<()>> {
        match self.reserve_array::<T>(ArrayDesc::<T>::header(self.shared().id), len) {
            Ok(r) => {
                let gc = self.fill_array(r, len, iter);
                // An exact hint that promised more than the iterator gave
                // is a broken iterator, like one that panics, and ends the
                // same way: its array is never handed out, and the next
                // cycle frees it. Handed out cut, a large one kept its whole
                // span under a charge of its cut length, out of the heap
                // limit's sight for as long as it lived.
                assert!(
                    gc.len() == len,
                    "loam-runtime: alloc_from_iter: the iterator gave {} items where its exact \
                     size_hint promised {len}",
                    gc.len()
                );
                Ok(gc)
            }
            Err(f) => Err(f.with(())),
        }
    }

    /// [`try_alloc_from_iter`](Self::try_alloc_from_iter) for an array
    /// that will grow: its block has room for `room` elements in all, so
    /// that [`try_grow_in_place`](Self::try_grow_in_place) can lengthen it
    /// to that many without moving it.
    ///
    /// The room is address space until it is used: the array is charged
    /// (to the heap limit and the pacing) for its length, and each
    /// lengthening for what it adds; pages of the room that nothing wrote
    /// are not resident, unless the block reuses a freed one (a huge
    /// block's mapping waits in a cache for the next, dirty). So the room
    /// is worth having for large arrays only: where its block would be a
    /// small one (`loam_heap::SMALL_MAX` bytes or less), in a
    /// `GlobalAlloc` space, where `room` is not above the length, or where
    /// the OS refuses the room, the array is allocated as
    /// `try_alloc_from_iter` would (a small block may still have a few
    /// elements' room, its size class's).
    ///
    /// # Panics
    /// As [`try_alloc_from_iter`](Self::try_alloc_from_iter): if the
    /// iterator panics, or yields fewer items than its exact hint
    /// promised.
    ///
    /// # Examples
    /// ```
    /// use std::mem::MaybeUninit;
    ///
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     // 64 KiB of slots in a block of 8 MiB.
    ///     let slots = (0..1 << 13).map(|i| MaybeUninit::new(i as u64));
    ///     let a = mc.try_alloc_from_iter_with_room(slots, 1 << 20).unwrap();
    ///     assert!(mc.try_grow_in_place(a, 1 << 20, MaybeUninit::uninit).unwrap());
    ///     assert_eq!(a.len(), 1 << 20);
    ///     // SAFETY: written when the array was made.
    ///     assert_eq!(unsafe { a[5].assume_init() }, 5);
    /// });
    /// ```
    pub fn try_alloc_from_iter_with_room<T, I>(&self, iter: I, room: usize) -> Result<Gc<'gc, [T]>, AllocError<()>>
    where
        T: Trace + 'gc,
        I: IntoIterator<Item = T>,
    {
        let iter = iter.into_iter();
        match iter.size_hint() {
            (lower, Some(upper)) if lower == upper => self.try_alloc_exact_with_room(lower, iter, room),
            // As `try_alloc_from_iter`: gather, then allocate once.
            _ => {
                let items: Vec<T> = iter.collect();
                self.try_alloc_exact_with_room(items.len(), items.into_iter(), room)
            }
        }
    }

    /// An array of the first `len` items of `iter`, with room for `room`.
    fn try_alloc_exact_with_room<T: Trace + 'gc>(
        &self,
        len: usize,
        iter: impl Iterator<Item = T>,
        room: usize,
    ) -> Result<Gc<'gc, [T]>, AllocError<()>> {
        match self.reserve_array_with_room::<T>(ArrayDesc::<T>::header(self.shared().id), len, room) {
            Some(Ok(r)) => {
                let gc = self.fill_array(r, len, iter);
                // As in `try_alloc_exact`.
                assert!(
                    gc.len() == len,
                    "loam-runtime: alloc_from_iter_with_room: the iterator gave {} items where its \
                     exact size_hint promised {len}",
                    gc.len()
                );
                Ok(gc)
            }
            Some(Err(f)) => Err(f.with(())),
            None => self.try_alloc_exact(len, iter),
        }
    }

    /// [`reserve_array`](Self::reserve_array) of `len` elements in a block
    /// of `room`, charged for `len` (the sweep credits a large object with
    /// the bytes of its length, `TypeDesc::object_size`, and a lengthening
    /// charges what it adds); `None` where the room is not worth it or
    /// not to be had (see `try_alloc_from_iter_with_room`).
    #[cold]
    #[inline(never)]
    fn reserve_array_with_room<T>(&self, header: usize, len: usize, room: usize) -> Option<Result<Reserved<'_>, Failure>> {
        let m = self.mutator();
        if m.alloc_space().is_some() || room <= len {
            return None;
        }
        let (bytes, room_bytes) = (array_bytes::<T>(len)?, array_bytes::<T>(room)?);
        let align = std::mem::align_of::<T>().max(std::mem::align_of::<usize>());
        if room_bytes <= loam_heap::SMALL_MAX || align > crate::mutator::MAX_PAGE_ALIGN {
            return None;
        }
        if !m.take_credit(bytes) {
            return Some(Err(Failure { size: bytes, kind: crate::mutator::limit_kind(m) }));
        }
        let (p, bit) = loam_heap::alloc_object(room_bytes, align, drop_flags::<T>(), m.shared().id);
        let Some(bit) = bit else {
            // The OS refused the room: the array without it.
            m.give_back(bytes);
            return None;
        };
        crate::mutator::check_fresh(p);
        // `p` is a fresh block of `room_bytes > bytes >= 16` bytes, aligned
        // to at least a word, ours alone until published.
        // SAFETY: as just said.
        unsafe { write_array_words(p, header | self.window_made(), len) };
        let mut r = Reserved::new::<T>(p, Some(bit), bytes, len, m);
        // The block is large (`room_bytes` past `SMALL_MAX`) whatever the
        // charge for the length says: a cut gives back what it did not
        // fill (the sweep credits its length).
        r.large = true;
        Some(Ok(r))
    }

    /// Lengthens `array` to `new_len` elements in place, the new ones made
    /// by `fill`, if its block has room for them: `Ok(true)` when its
    /// length is `new_len` (or more) now, `Ok(false)` when it could not
    /// be lengthened, and the heap-limit `Err` (the array unchanged) when
    /// what it would add does not fit.
    ///
    /// A block's room is what it holds past the array: a few elements'
    /// worth in most (a size class's, a span's last slice), as much as was
    /// asked for with
    /// [`try_alloc_from_iter_with_room`](Self::try_alloc_from_iter_with_room).
    /// A growable collection tries this before it copies its array into a
    /// larger one (as `realloc` does): no copy, and nothing for the
    /// collector to free.
    ///
    /// Only arrays of elements that say [`Trace::GROWS_IN_PLACE`]
    /// (`MaybeUninit`s, a collection's own slot type) and need no tracing
    /// are lengthened: new managed pointers in an object the collector may
    /// already have traced would need the barrier's work, element by
    /// element, and the length of any other array is read with a plain
    /// load. For any other, `Ok(false)`. So is the answer while another lengthening
    /// holds the claim this one needs (one array at a time; the claims
    /// are striped by address, so an unrelated array's lengthening, or
    /// one inside `fill`, may hold it too): a caller copies then, as when
    /// there is no room.
    ///
    /// Everyone holding the array sees the longer length from the next
    /// time they read it (an acquire load, after the new elements were
    /// written); a slice taken before keeps its length, and the elements
    /// it covers do not move.
    ///
    /// # Panics
    /// If `fill` panics: the array is then as long as the elements it
    /// made.
    ///
    /// # Examples
    /// ```
    /// use std::mem::MaybeUninit;
    ///
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let a = mc.try_alloc_from_iter_with_room((0..1000_u64).map(MaybeUninit::new), 1 << 20).unwrap();
    ///     let mut next = 1000;
    ///     let grown = mc.try_grow_in_place(a, 4000, || {
    ///         next += 1;
    ///         MaybeUninit::new(next - 1)
    ///     });
    ///     assert!(grown.unwrap());
    ///     // SAFETY: every element below the length was written.
    ///     assert!(a.iter().map(|x| unsafe { x.assume_init() }).eq(0..4000));
    ///     // Past its room: not in place.
    ///     assert!(!mc.try_grow_in_place(a, 3 << 20, MaybeUninit::uninit).unwrap());
    ///     assert_eq!(a.len(), 4000);
    ///     // Nor an array of a type that does not say `GROWS_IN_PLACE`.
    ///     let b = mc.alloc_slice(&[1_u64, 2]);
    ///     assert!(!mc.try_grow_in_place(b, 3, || 3).unwrap());
    /// });
    /// ```
    pub fn try_grow_in_place<T: Trace + 'gc>(
        &self,
        array: Gc<'gc, [T]>,
        new_len: usize,
        mut fill: impl FnMut() -> T,
    ) -> Result<bool, AllocError<()>> {
        if T::NEEDS_TRACE || !T::GROWS_IN_PLACE {
            return Ok(false);
        }
        let addr = array.addr();
        let m = self.mutator();
        let elem = std::mem::size_of::<T>();
        // The room first: most blocks have none to speak of, and a caller
        // asking for more than there is takes no claim.
        let (usable, pages) = match m.alloc_space() {
            // SAFETY: a live block of loam's heap (an object of ours).
            None => (unsafe { loam_heap::usable_size(addr as *const u8) }, true),
            // SAFETY: a live object of this space.
            Some(_) => (unsafe { AllocSpace::usable(addr) }, false),
        };
        // Elements of no size take no room.
        let room = (usable - array_offset::<T>())
            .checked_div(elem)
            .unwrap_or(isize::MAX as usize);
        if new_len > room {
            return Ok(false);
        }
        // One lengthening of an array at a time: its stripe's claim,
        // tried once (a `fill` that lengthens an array of the same stripe
        // finds it taken, and waits for nothing).
        let Some(_claim) = claim(addr) else {
            return Ok(false);
        };
        // SAFETY: `array` is a published array of ours, live for `'gc`.
        let word = unsafe { array_len_word(addr) };
        // Only lengthenings store it, and the claim orders us after the
        // last one.
        let old = word.load(std::sync::atomic::Ordering::Relaxed);
        if new_len <= old {
            return Ok(true);
        }
        // A large block is charged for its length (the sweep credits what
        // its length says); a small one (its whole size class) and a
        // `GlobalAlloc` space's (its whole allocation) were charged whole.
        let charge = if pages && usable > loam_heap::SMALL_MAX {
            (new_len - old) * elem
        } else {
            0
        };
        if charge != 0 && !m.take_credit(charge) {
            return Err(AllocError::new((), charge, crate::mutator::limit_kind(m)));
        }
        /// Stores the length over the elements written so far (all of
        /// them, or those before a panic of `fill`), and gives back the
        /// charge of any not written (before the claim ends).
        struct Growing<'a> {
            word: &'a std::sync::atomic::AtomicUsize,
            len: usize,
            unwritten: usize,
            charge_each: usize,
            mutator: &'a crate::Mutator,
        }
        impl Drop for Growing<'_> {
            fn drop(&mut self) {
                self.word.store(self.len, std::sync::atomic::Ordering::Release);
                if self.unwritten != 0 && self.charge_each != 0 {
                    self.mutator.give_back(self.unwritten * self.charge_each);
                }
            }
        }
        let mut growing = Growing {
            word,
            len: old,
            unwritten: new_len - old,
            charge_each: if charge != 0 { elem } else { 0 },
            mutator: m,
        };
        let elems = (addr + array_offset::<T>()) as *mut T;
        while growing.len < new_len {
            let value = fill();
            // Element `len` is inside the block (`new_len <= room`), past
            // the length every other thread reads (only a lengthening
            // stores it, and the claim keeps out any other), so nobody
            // reads or writes it; it is written before the release store
            // of a length covering it.
            // SAFETY: as just said.
            unsafe { elems.add(growing.len).write(value) };
            growing.len += 1;
            growing.unwritten -= 1;
        }
        drop(growing);
        Ok(true)
    }

    /// Allocates a managed array holding the items of `iter`.
    ///
    /// # Panics
    /// At the heap limit (see [`try_alloc`](Self::try_alloc)), and as
    /// [`try_alloc_from_iter`](Self::try_alloc_from_iter).
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let squares = mc.alloc_from_iter((1..5_u64).map(|i| i * i));
    ///     assert_eq!(&squares[..], &[1, 4, 9, 16]);
    ///     let odd = mc.alloc_from_iter((0..10_u32).filter(|i| i % 2 == 1));
    ///     assert_eq!(odd.len(), 5);
    /// });
    /// ```
    pub fn alloc_from_iter<T, I>(&self, iter: I) -> Gc<'gc, [T]>
    where
        T: Trace + 'gc,
        I: IntoIterator<Item = T>,
    {
        self.try_alloc_from_iter(iter)
            .unwrap_or_else(|e| crate::mutator::alloc_failed(e))
    }

    /// Allocates a managed array holding clones of `items`, or fails at the
    /// heap limit.
    pub fn try_alloc_slice<T: Trace + Clone + 'gc>(
        &self,
        items: &[T],
    ) -> Result<Gc<'gc, [T]>, AllocError<()>> {
        self.try_alloc_from_iter(items.iter().cloned())
    }

    /// Allocates a managed array holding clones of `items`.
    ///
    /// # Panics
    /// At the heap limit.
    ///
    /// # Examples
    /// An array of cells is a managed array whose elements change in
    /// place, each store through the barrier:
    /// ```
    /// use loam_runtime::{Gc, GcCell};
    ///
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let slots: Gc<[GcCell<Option<Gc<u32>>>]> = mc.alloc_slice(&[GcCell::new(None), GcCell::new(None)]);
    ///     slots[1].set(mc, Some(mc.alloc(7)));
    ///     assert_eq!(slots[1].get().map(|g| *g), Some(7));
    /// });
    /// ```
    pub fn alloc_slice<T: Trace + Clone + 'gc>(&self, items: &[T]) -> Gc<'gc, [T]> {
        self.try_alloc_slice(items)
            .unwrap_or_else(|e| crate::mutator::alloc_failed(e))
    }

    /// Allocates a managed array of `len` clones of `value`, or gives the
    /// value back in `Err` at the heap limit.
    pub fn try_alloc_slice_fill<T: Trace + Clone + 'gc>(
        &self,
        len: usize,
        value: T,
    ) -> Result<Gc<'gc, [T]>, AllocError<T>> {
        match self.reserve_array::<T>(ArrayDesc::<T>::header(self.shared().id), len) {
            Ok(r) => Ok(self.fill_array(r, len, std::iter::repeat(value))),
            Err(f) => Err(f.with(value)),
        }
    }

    /// Allocates a managed array of `len` clones of `value`.
    ///
    /// # Panics
    /// At the heap limit.
    ///
    /// # Examples
    /// ```
    /// use loam_runtime::GcCell;
    ///
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let counts = mc.alloc_slice_fill(3, GcCell::new(0_u32));
    ///     counts[2].set(mc, 5);
    ///     assert_eq!(counts.iter().map(GcCell::get).sum::<u32>(), 5);
    /// });
    /// ```
    pub fn alloc_slice_fill<T: Trace + Clone + 'gc>(&self, len: usize, value: T) -> Gc<'gc, [T]> {
        self.try_alloc_slice_fill(len, value)
            .unwrap_or_else(|e| crate::mutator::alloc_failed(e))
    }

    /// Allocates a managed array holding `parts` one after another, copied
    /// as bytes, or fails at the heap limit.
    #[inline]
    pub fn try_alloc_concat<T: Trace + Copy + 'gc>(
        &self,
        parts: &[&[T]],
    ) -> Result<Gc<'gc, [T]>, AllocError<()>> {
        let addr = self.alloc_parts(ArrayDesc::<T>::header(self.shared().id), parts)?;
        // SAFETY: a published `[T]` object holding the parts, live for `'gc`.
        Ok(unsafe { Gc::from_addr(addr) })
    }

    /// A published array object whose header word is `header`, holding
    /// `parts` one after another; its address, or the heap-limit `Err`.
    #[inline(always)]
    fn alloc_parts<T: Copy>(&self, header: usize, parts: &[&[T]]) -> Result<usize, AllocError<()>> {
        let Some(len) = parts.iter().try_fold(0_usize, |n, p| n.checked_add(p.len())) else {
            return Err(Failure::overflow().with(()));
        };
        match self.reserve_small::<T>(header, len) {
            Small::Got(p, bit, _) => {
                // `p` is our unpublished object with room for `len`
                // elements, the parts' lengths adding up to `len`.
                // SAFETY: as just said.
                unsafe { copy_parts(p as usize + array_offset::<T>(), parts) };
                bit.set();
                Ok(p as usize)
            }
            Small::General => self.alloc_parts_general(header, len, parts),
            Small::Failed(f) => Err(f.with(())),
        }
    }

    /// [`alloc_parts`](Self::alloc_parts) past the small path.
    #[cold]
    #[inline(never)]
    fn alloc_parts_general<T: Copy>(
        &self,
        header: usize,
        len: usize,
        parts: &[&[T]],
    ) -> Result<usize, AllocError<()>> {
        let mut r = self.reserve_array_general::<T>(header, len).map_err(|f| f.with(()))?;
        // SAFETY: as in `alloc_parts`.
        unsafe { copy_parts(r.addr + array_offset::<T>(), parts) };
        r.publish(len);
        Ok(r.addr)
    }

    /// Allocates a managed array holding `parts` one after another: one
    /// allocation and a copy of each part.
    ///
    /// # Panics
    /// At the heap limit.
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let ab = mc.alloc_concat(&[&[1_u8, 2][..], &[3][..]]);
    ///     assert_eq!(&ab[..], &[1, 2, 3]);
    /// });
    /// ```
    pub fn alloc_concat<T: Trace + Copy + 'gc>(&self, parts: &[&[T]]) -> Gc<'gc, [T]> {
        self.try_alloc_concat(parts)
            .unwrap_or_else(|e| crate::mutator::alloc_failed(e))
    }

    /// Allocates `s` as a managed string, or fails at the heap limit.
    #[inline]
    pub fn try_alloc_str(&self, s: &str) -> Result<Gc<'gc, str>, AllocError<()>> {
        let addr = self.alloc_parts(crate::gc::str_header(self.shared().id), &[s.as_bytes()])?;
        // A published `str` object holding `s`'s UTF-8 bytes, live
        // for `'gc`.
        // SAFETY: as just said.
        Ok(unsafe { Gc::from_addr(addr) })
    }

    /// Allocates `s` as a managed string: one allocation, the length beside
    /// the header.
    ///
    /// # Panics
    /// At the heap limit.
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let s = mc.alloc_str("héllo");
    ///     assert_eq!(&*s, "héllo");
    ///     assert_eq!(s.len(), 6);
    /// });
    /// ```
    pub fn alloc_str(&self, s: &str) -> Gc<'gc, str> {
        self.try_alloc_str(s)
            .unwrap_or_else(|e| crate::mutator::alloc_failed(e))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::Runtime;

    /// Arrays of `Copy` elements with padding or uninitialised bytes,
    /// concatenated through the short copies (4 – 16 bytes): copied whole,
    /// as they were. The copies loaded such bytes as integers, which is
    /// undefined behaviour (Miri, `cargo +nightly miri test -p
    /// loam-runtime --lib`, reports it); they load them as `MaybeUninit`.
    #[test]
    fn concatenated_elements_with_padding_are_copied_as_they_are() {
        let rt = Runtime::builder()
            .global_alloc(std::alloc::System)
            .gc_threads(1)
            .ignore_env()
            .build();
        let mut m = rt.attach();
        m.mutate(|mc| {
            let none = mc.alloc_concat(&[&[None::<u32>][..]]);
            assert_eq!(none[0], None);
            let padded = mc.alloc_concat(&[&[(1_u8, 2_u32)][..], &[(3, 4)][..]]);
            assert_eq!(&padded[..], &[(1, 2), (3, 4)]);
            let half = mc.alloc_concat(&[&[(1_u8, 2_u16)][..]]);
            assert_eq!(half[0], (1, 2));
        });
    }
}
