//! Managed objects: the header every object starts with, the static type
//! descriptor it points to, and the `Gc<'gc, T>` pointer.
//!
//! Two layouts, both one allocation behind a thin pointer:
//! - a sized `T` is a [`GcBox<T>`]: the header word, then the payload;
//! - a slice `[T]` (and `str`, as `[u8]`) is the header word, the length
//!   word, then the elements from [`array_offset`]: `Gc<'gc, [T]>` stays one
//!   word (so a [`GcCell`](crate::GcCell) can hold it), and the collector
//!   reads an object's length where it reads its type. An array of
//!   untraced elements that say `Trace::GROWS_IN_PLACE` can be lengthened
//!   in place, so the collector reads every length word atomically
//!   ([`array_len`]), and so does `Deref` for those types.

use crate::trace::{Trace, Tracer};
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;

/// What the collector knows of a managed type: one static per type, named by
/// every object's header.
pub(crate) struct TypeDesc {
    /// Bytes of the whole object (header and payload), as allocated; for
    /// an array, of its header, length word and padding.
    pub(crate) size: usize,
    /// Bytes per element of an array (its length is the word after the
    /// header); 0 for a sized type.
    pub(crate) elem_size: usize,
    /// Calls `Trace::trace` on the payload of the object at the address.
    /// `None` when the type cannot hold a managed pointer.
    pub(crate) trace: Option<unsafe fn(*const u8, &mut Tracer)>,
    /// Of an array whose elements are traced: calls `Trace::trace` on the
    /// elements in the range only, so that the mark traces a long array a
    /// chunk at a time (`mark.rs`, "Long arrays"). `None` otherwise.
    pub(crate) trace_elems: Option<unsafe fn(*const u8, std::ops::Range<usize>, &mut Tracer)>,
    /// Of an object traced in parts (`Trace::TRACE_IN_PARTS`): its
    /// `trace_part` (traces part `k` of the object at the address and
    /// returns its count of parts as of now; `mark.rs`, "Long arrays").
    /// `None` otherwise.
    pub(crate) trace_part: Option<unsafe fn(*const u8, usize, &mut Tracer) -> usize>,
    /// Runs the payload's drop glue; `None` when it has none.
    pub(crate) drop: Option<unsafe fn(*mut u8)>,
    /// The type's name, for diagnostics.
    pub(crate) name: fn() -> &'static str,
}

/// The header word: the descriptor's address in the low 48 bits, the owning
/// runtime's id in the high 16. Several runtimes share the heap's pages (and
/// their side bitmaps); the id is how a sweep tells its objects from
/// another runtime's. Descriptors are aligned to 8, so the address's bit 0
/// is free: [`WINDOW_MADE`].
pub(crate) const ID_SHIFT: u32 = 48;
const DESC_MASK: usize = (1 << ID_SHIFT) - 1 - WINDOW_MADE;

/// Set in the header of an object made by a call that began in a ragged
/// start's window (`Mutation::window`): such an object may hold an object
/// of the sweep's copy that only that call reached, so the barriers never
/// pass over it and the mark's end traces it whenever it is shaded
/// (`barrier.rs`, "Ragged cycles", 6). Written with the header, before the
/// object is published; read by whoever reached the object.
pub(crate) const WINDOW_MADE: usize = 1;
const _: () = assert!(std::mem::align_of::<TypeDesc>() > WINDOW_MADE);

/// Whether the object at `addr` was made by a window call
/// ([`WINDOW_MADE`]).
///
/// # Safety
/// `addr` is an allocated managed object that the caller reached.
#[inline]
pub(crate) unsafe fn made_in_window(addr: usize) -> bool {
    // SAFETY: the first word of an allocated object is its header, written
    // before the object was published (caller).
    unsafe { *(addr as *const usize) & WINDOW_MADE != 0 }
}

/// An object in the managed heap: header, then payload.
#[repr(C)]
pub(crate) struct GcBox<T> {
    header: usize,
    value: T,
}

impl TypeDesc {
    /// The descriptor of objects whose payload (or elements) are `T`s:
    /// `trace` and `drop` are kept only where `T` needs them.
    const fn of<T: Trace>(
        size: usize,
        elem_size: usize,
        trace: unsafe fn(*const u8, &mut Tracer),
        drop: unsafe fn(*mut u8),
        name: fn() -> &'static str,
    ) -> TypeDesc {
        TypeDesc {
            size,
            elem_size,
            trace: if T::NEEDS_TRACE { Some(trace) } else { None },
            trace_elems: None,
            trace_part: None,
            drop: if std::mem::needs_drop::<T>() {
                Some(drop)
            } else {
                None
            },
            name,
        }
    }

    /// Bytes of the object at `addr`, of this descriptor.
    ///
    /// # Safety
    /// `addr` is an allocated managed object whose header names `self`.
    #[inline]
    pub(crate) unsafe fn object_size(&self, addr: usize) -> usize {
        if self.elem_size == 0 {
            return self.size;
        }
        // SAFETY: an array's length word follows its header (caller).
        let len = unsafe { array_len(addr) };
        self.size + len * self.elem_size
    }
}

impl<T: Trace> GcBox<T> {
    const DESC: TypeDesc = TypeDesc {
        trace_part: if T::NEEDS_TRACE && T::TRACE_IN_PARTS {
            Some(Self::trace_part_erased)
        } else {
            None
        },
        ..TypeDesc::of::<T>(
            std::mem::size_of::<GcBox<T>>(),
            0,
            Self::trace_erased,
            Self::drop_erased,
            std::any::type_name::<T>,
        )
    };

    /// `TypeDesc::trace_part` for `T`: one call (through the descriptor) an
    /// object, as for objects traced whole, of which most of a type that
    /// may be parted are (a list of a few elements).
    ///
    /// # Safety
    /// `p` is a live `GcBox<T>`.
    unsafe fn trace_part_erased(p: *const u8, part: usize, tracer: &mut Tracer) -> usize {
        // SAFETY: as in `trace_erased`.
        unsafe { (*p.cast::<GcBox<T>>()).value.trace_part(part, tracer) }
    }

    /// The header word for a `GcBox<T>` of runtime `id`.
    #[inline]
    pub(crate) fn header(id: u16) -> usize {
        header_word(&Self::DESC, id)
    }

    pub(crate) fn new(header: usize, value: T) -> Self {
        GcBox { header, value }
    }

    /// # Safety
    /// `p` is a live `GcBox<T>`.
    unsafe fn trace_erased(p: *const u8, tracer: &mut Tracer) {
        // SAFETY: `p` is a live `GcBox<T>` (caller), read shared: the world
        // is stopped or the payload is only read through `&T` (Trace's
        // contract 2).
        unsafe { (*p.cast::<GcBox<T>>()).value.trace(tracer) }
    }

    /// # Safety
    /// `p` is a dead `GcBox<T>` whose payload is dropped once, here.
    unsafe fn drop_erased(p: *mut u8) {
        // SAFETY: the caller owns the dead object; nothing reads it after.
        unsafe { std::ptr::drop_in_place(std::ptr::addr_of_mut!((*p.cast::<GcBox<T>>()).value)) }
    }
}

/// The header word naming `desc` for runtime `id`.
#[inline]
fn header_word(desc: &'static TypeDesc, id: u16) -> usize {
    let addr = desc as *const TypeDesc as usize;
    if addr & !DESC_MASK != 0 {
        descriptor_out_of_range(addr);
    }
    addr | (id as usize) << ID_SHIFT
}

/// Where the elements of a `[T]` object begin: after the header and the
/// length word, aligned for `T`.
pub(crate) const fn array_offset<T>() -> usize {
    let align = std::mem::align_of::<T>();
    (2 * std::mem::size_of::<usize>() + align - 1) & !(align - 1)
}

/// The length word of the array object at `addr`.
///
/// Once published the word is written only by `try_grow_in_place`,
/// atomically, for `GROWS_IN_PLACE` element types, whose every read is
/// atomic too; an array of any other type is only read after, plainly by
/// `Deref` and atomically here, which races nothing.
///
/// # Safety
/// `addr` is an allocated array object.
#[inline(always)]
pub(crate) unsafe fn array_len_word<'a>(addr: usize) -> &'a std::sync::atomic::AtomicUsize {
    let word = (addr + std::mem::size_of::<usize>()) as *mut usize;
    // SAFETY: a word-aligned `usize` after the header, written before the
    // object was published, every access since atomic or race-free (above).
    unsafe { std::sync::atomic::AtomicUsize::from_ptr(word) }
}

/// The length of the array object at `addr`.
///
/// A published array's length changes only where
/// [`Mutation::try_grow_in_place`] lengthens an array whose elements need
/// no tracing and say [`Trace::GROWS_IN_PLACE`], in place: its new
/// elements are written before the length that covers them is stored
/// (release), so this acquire load finds them written. A length read
/// once stays valid: the elements below it stay where they are. (A
/// `Gc<[T]>` of another type reads its length with a plain load.)
///
/// [`Mutation::try_grow_in_place`]: crate::Mutation::try_grow_in_place
///
/// # Safety
/// `addr` is an allocated array object.
#[inline(always)]
pub(crate) unsafe fn array_len(addr: usize) -> usize {
    // SAFETY: as the caller vouches.
    unsafe { array_len_word(addr) }.load(std::sync::atomic::Ordering::Acquire)
}

/// The descriptor of `[T]` objects.
pub(crate) struct ArrayDesc<T>(PhantomData<T>);

impl<T: Trace> ArrayDesc<T> {
    const DESC: TypeDesc = TypeDesc {
        trace_elems: if T::NEEDS_TRACE {
            Some(Self::trace_elems_erased)
        } else {
            None
        },
        ..TypeDesc::of::<T>(
            array_offset::<T>(),
            std::mem::size_of::<T>(),
            Self::trace_erased,
            Self::drop_erased,
            std::any::type_name::<[T]>,
        )
    };

    /// The header word for a `[T]` object of runtime `id`.
    #[inline]
    pub(crate) fn header(id: u16) -> usize {
        header_word(&Self::DESC, id)
    }

    /// The descriptor itself.
    #[cfg(test)]
    pub(crate) fn desc() -> &'static TypeDesc {
        &Self::DESC
    }

    /// # Safety
    /// `p` is a live `[T]` object.
    unsafe fn trace_erased(p: *const u8, tracer: &mut Tracer) {
        // SAFETY: a live array (caller), read shared as in `GcBox`.
        unsafe { <[T]>::payload(p as usize).trace(tracer) }
    }

    /// # Safety
    /// `p` is a live `[T]` object with at least `elems.end` elements.
    unsafe fn trace_elems_erased(p: *const u8, elems: std::ops::Range<usize>, tracer: &mut Tracer) {
        // SAFETY: a live array (caller), read shared as in `GcBox`.
        let all = unsafe { <[T]>::payload(p as usize) };
        all[elems].trace(tracer)
    }

    /// # Safety
    /// `p` is a dead `[T]` object whose elements are dropped once, here.
    unsafe fn drop_erased(p: *mut u8) {
        // SAFETY: the caller owns the dead object and its `len` elements.
        unsafe {
            let len = array_len(p as usize);
            let elems = p.add(array_offset::<T>()).cast::<T>();
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(elems, len))
        }
    }
}

/// The descriptor of `str` objects: `[u8]`'s layout, under its own name.
pub(crate) static STR_DESC: TypeDesc = TypeDesc {
    size: array_offset::<u8>(),
    elem_size: 1,
    trace: None,
    trace_elems: None,
    trace_part: None,
    drop: None,
    name: || "str",
};

/// The header word for a `str` object of runtime `id`.
#[inline]
pub(crate) fn str_header(id: u16) -> usize {
    header_word(&STR_DESC, id)
}

mod sealed {
    pub trait Sealed {}
}

/// What a [`Gc`] can point to: every sized [`Trace`] type, slices of them
/// (`Gc<'gc, [T]>`, allocated by [`Mutation::alloc_slice`] and its
/// siblings) and `str` ([`Mutation::alloc_str`]). Sealed: the collector
/// knows these layouts, and no others.
///
/// [`Mutation::alloc_slice`]: crate::Mutation::alloc_slice
/// [`Mutation::alloc_str`]: crate::Mutation::alloc_str
pub trait Managed: sealed::Sealed + Send + Sync {
    /// The payload of the object at `addr`.
    ///
    /// # Safety
    /// `addr` is a live object of this type, live for `'a`.
    #[doc(hidden)]
    unsafe fn payload<'a>(addr: usize) -> &'a Self;
}

impl<T: Trace> sealed::Sealed for T {}
impl<T: Trace> Managed for T {
    #[inline(always)]
    unsafe fn payload<'a>(addr: usize) -> &'a T {
        // SAFETY: a live `GcBox<T>` (caller), only ever accessed shared.
        unsafe { &(*(addr as *const GcBox<T>)).value }
    }
}

impl<T: Trace> sealed::Sealed for [T] {}
impl<T: Trace> Managed for [T] {
    #[inline(always)]
    unsafe fn payload<'a>(addr: usize) -> &'a [T] {
        // SAFETY: a live `[T]` object (caller): its `len` elements are
        // initialised from `array_offset`, only ever accessed shared.
        unsafe {
            let len = if T::GROWS_IN_PLACE {
                array_len(addr)
            } else {
                // Never lengthened (`try_grow_in_place` refuses such
                // arrays): the word written before publication, which
                // nothing writes again, so a plain load races nothing.
                *((addr + std::mem::size_of::<usize>()) as *const usize)
            };
            std::slice::from_raw_parts((addr + array_offset::<T>()) as *const T, len)
        }
    }
}

impl sealed::Sealed for str {}
impl Managed for str {
    #[inline(always)]
    unsafe fn payload<'a>(addr: usize) -> &'a str {
        // SAFETY: a live `str` object (caller) has `[u8]`'s layout and was
        // written from a `&str`, so its bytes are UTF-8.
        unsafe { std::str::from_utf8_unchecked(<[u8]>::payload(addr)) }
    }
}

#[cold]
#[inline(never)]
fn descriptor_out_of_range(addr: usize) -> ! {
    panic!(
        "loam: a type descriptor sits at {addr:#x}, above the 48-bit range object headers encode"
    )
}

/// Reads the header of the object at `addr`: its descriptor and runtime id.
///
/// # Safety
/// `addr` is an allocated managed object.
#[inline]
pub(crate) unsafe fn header_of(addr: usize) -> (&'static TypeDesc, u16) {
    // SAFETY: the first word of an allocated object is its header (caller).
    let h = unsafe { *(addr as *const usize) };
    // SAFETY: headers are only ever written by `GcBox::header`,
    // `ArrayDesc::header` and `str_header` (their flag bits, such as
    // `WINDOW_MADE`, are outside `DESC_MASK`), or the verify-mode poison, a
    // static descriptor too.
    let desc = unsafe { &*((h & DESC_MASK) as *const TypeDesc) };
    (desc, (h >> ID_SHIFT) as u16)
}

/// Overwrites the header of a freed object (verify mode) so that reaching it
/// again is caught.
///
/// # Safety
/// The caller owns the dead object at `addr`.
pub(crate) unsafe fn poison(addr: usize, size: usize, id: u16) {
    let h = &FREED as *const TypeDesc as usize | (id as usize) << ID_SHIFT;
    // SAFETY: the caller owns `size` bytes at `addr`.
    unsafe {
        (addr as *mut u8).add(8).write_bytes(0xDB, size - 8);
        *(addr as *mut usize) = h;
    }
}

/// The descriptor verify mode writes into freed objects.
pub(crate) static FREED: TypeDesc = TypeDesc {
    size: 0,
    elem_size: 0,
    trace: None,
    trace_elems: None,
    trace_part: None,
    drop: None,
    name: || "<freed object>",
};

/// Whether `desc` is the poison descriptor.
pub(crate) fn is_freed(desc: &TypeDesc) -> bool {
    std::ptr::eq(desc, &FREED)
}

/// A pointer to a managed object, valid for the `mutate` call whose brand
/// `'gc` it carries.
///
/// `Gc` is `Copy` and derefs to `&T`. It cannot outlive the closure passed
/// to [`Mutator::mutate`](crate::Mutator::mutate): to keep an object across
/// calls (and so across collections), root it
/// ([`Mutation::root`](crate::Mutation::root),
/// [`Mutation::global_root`](crate::Mutation::global_root)) or store it in
/// an object that is reachable from a root. To change what an object points
/// to after it was allocated, give it a barrier cell field
/// ([`GcCell`](crate::GcCell), [`GcLock`](crate::GcLock)).
///
/// # Examples
/// ```
/// use loam_runtime::{Gc, Runtime, Trace};
///
/// #[derive(Trace)]
/// struct Pair<'gc> {
///     left: Gc<'gc, u64>,
///     right: Gc<'gc, u64>,
/// }
///
/// let rt = Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// let sum = m.mutate(|mc| {
///     let pair = mc.alloc(Pair { left: mc.alloc(40), right: mc.alloc(2) });
///     *pair.left + *pair.right
/// });
/// assert_eq!(sum, 42);
/// ```
///
/// A `Gc` cannot be kept past its `mutate` call:
/// ```compile_fail
/// # let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
/// # let mut m = rt.attach();
/// let mut kept = None;
/// m.mutate(|mc| kept = Some(mc.alloc(1_u32)));
/// ```
pub struct Gc<'gc, T: ?Sized + 'gc> {
    /// The object's header; thin for slices and `str` too (their length is
    /// in the object).
    ptr: NonNull<u8>,
    _type: PhantomData<*const T>,
    /// Invariant in `'gc`: a `Gc` of one `mutate` call can never pass for
    /// one of another (or of another runtime).
    _brand: PhantomData<fn(&'gc ()) -> &'gc ()>,
}

// SAFETY: a `Gc` gives only `&T` access, and every `T: Trace` is
// `Send + Sync`; the object lives as long as the brand: marks run beside
// `mutate` calls, but no cycle frees an object a call holds before the call
// returns (`barrier.rs`, "The invariants" and "Ragged cycles"), and the
// brand ends with the call.
unsafe impl<T: ?Sized + Managed> Send for Gc<'_, T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Managed> Sync for Gc<'_, T> {}

impl<T: ?Sized> Clone for Gc<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for Gc<'_, T> {}

impl<T: ?Sized> Gc<'_, T> {
    /// The object's address (its header), the collector's name for it.
    #[inline]
    pub(crate) fn addr(self) -> usize {
        self.ptr.as_ptr() as usize
    }
}

impl<'gc, T: ?Sized + Managed> Gc<'gc, T> {
    /// # Safety
    /// `addr` is a live object laid out as `T`'s (`Managed::payload`: a
    /// `GcBox<T>`, or an array or string object for `[T]` and `str`) that
    /// stays live for `'gc`.
    #[inline]
    pub(crate) unsafe fn from_addr(addr: usize) -> Self {
        Gc {
            // SAFETY: live objects are never at address 0.
            ptr: unsafe { NonNull::new_unchecked(addr as *mut u8) },
            _type: PhantomData,
            _brand: PhantomData,
        }
    }

    /// Whether `a` and `b` are the same object.
    ///
    /// ```
    /// # let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// # let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let a = mc.alloc(1_u8);
    ///     let b = mc.alloc(1_u8);
    ///     assert!(loam_runtime::Gc::ptr_eq(a, a));
    ///     assert!(!loam_runtime::Gc::ptr_eq(a, b));
    /// });
    /// ```
    #[inline]
    pub fn ptr_eq(a: Self, b: Self) -> bool {
        a.ptr == b.ptr
    }

    /// The payload as a reference that lives as long as the brand (an
    /// associated function, as `Rc::as_ptr`, so it never shadows a method of
    /// `T`).
    #[inline]
    pub fn get(this: Self) -> &'gc T {
        // SAFETY: the object is live for `'gc` (construction invariant) and
        // is only ever accessed shared.
        unsafe { T::payload(this.addr()) }
    }
}

impl<T: ?Sized + Managed> Deref for Gc<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        Gc::get(*self)
    }
}

impl<'gc, T: Trace> Gc<'gc, [T]> {
    /// The address of the array's first element, as `<[T]>::as_ptr`, but
    /// found without reading the length: `Gc::get(a).as_ptr()` builds the
    /// slice first, and for a type that says [`Trace::GROWS_IN_PLACE`]
    /// that is an acquire load of the length, which the compiler may not
    /// drop even where only the address is used. A loop that has read the
    /// length once (a list's push) uses this for the rest.
    ///
    /// The pointer is valid for reads of the array's length's worth of
    /// elements for `'gc`, shared as every managed object.
    ///
    /// ```
    /// # let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// # let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let a = mc.alloc_slice(&[1_u32, 2, 3]);
    ///     assert_eq!(loam_runtime::Gc::as_ptr(a), loam_runtime::Gc::get(a).as_ptr());
    /// });
    /// ```
    #[inline(always)]
    pub fn as_ptr(this: Self) -> *const T {
        (this.addr() + array_offset::<T>()) as *const T
    }
}

impl<T: ?Sized + Managed + fmt::Debug> fmt::Debug for Gc<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(Gc::get(*self), f)
    }
}

impl<T: ?Sized + Managed + fmt::Display> fmt::Display for Gc<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(Gc::get(*self), f)
    }
}

impl<T: ?Sized + Managed + PartialEq> PartialEq for Gc<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        Gc::get(*self) == Gc::get(*other)
    }
}

impl<T: ?Sized + Managed + Eq> Eq for Gc<'_, T> {}

impl<T: ?Sized + Managed + PartialOrd> PartialOrd for Gc<'_, T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Gc::get(*self).partial_cmp(Gc::get(*other))
    }
}

impl<T: ?Sized + Managed + Ord> Ord for Gc<'_, T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        Gc::get(*self).cmp(Gc::get(*other))
    }
}

impl<T: ?Sized + Managed + std::hash::Hash> std::hash::Hash for Gc<'_, T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Gc::get(*self).hash(state)
    }
}

// SAFETY: reports the one managed pointer a `Gc` is (1); pure (2); a `Gc`
// always needs tracing (3); no `Drop` (4).
unsafe impl<T: ?Sized + Managed> Trace for Gc<'_, T> {
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        tracer.visit_raw(self.addr());
    }
}
