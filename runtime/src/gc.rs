//! Managed objects: the header every object starts with, the static type
//! descriptor it points to, and the `Gc<'gc, T>` pointer.

use crate::trace::{Trace, Tracer};
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;

/// What the collector knows of a managed type: one static per type, named by
/// every object's header.
pub(crate) struct TypeDesc {
    /// Bytes of the whole object (header and payload), as allocated.
    pub(crate) size: usize,
    /// Calls `Trace::trace` on the payload of the object at the address.
    /// `None` when the type cannot hold a managed pointer.
    pub(crate) trace: Option<unsafe fn(*const u8, &mut Tracer)>,
    /// Runs the payload's drop glue; `None` when it has none.
    pub(crate) drop: Option<unsafe fn(*mut u8)>,
    /// The type's name, for diagnostics.
    pub(crate) name: fn() -> &'static str,
}

/// The header word: the descriptor's address in the low 48 bits, the owning
/// runtime's id in the high 16. Several runtimes share the heap's pages (and
/// their side bitmaps); the id is how a sweep tells its objects from
/// another runtime's.
pub(crate) const ID_SHIFT: u32 = 48;
const DESC_MASK: usize = (1 << ID_SHIFT) - 1;

/// An object in the managed heap: header, then payload.
#[repr(C)]
pub(crate) struct GcBox<T> {
    header: usize,
    value: T,
}

impl<T: Trace> GcBox<T> {
    const DESC: TypeDesc = TypeDesc {
        size: std::mem::size_of::<GcBox<T>>(),
        trace: if T::NEEDS_TRACE {
            Some(Self::trace_erased)
        } else {
            None
        },
        drop: if std::mem::needs_drop::<T>() {
            Some(Self::drop_erased)
        } else {
            None
        },
        name: std::any::type_name::<T>,
    };

    /// The header word for a `GcBox<T>` of runtime `id`.
    #[inline]
    pub(crate) fn header(id: u16) -> usize {
        let desc: &'static TypeDesc = &Self::DESC;
        let addr = desc as *const TypeDesc as usize;
        if addr & !DESC_MASK != 0 {
            descriptor_out_of_range(addr);
        }
        addr | (id as usize) << ID_SHIFT
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
    // SAFETY: headers are only ever written by `GcBox::header` (or the
    // verify-mode poison, a static descriptor too).
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
    trace: None,
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
pub struct Gc<'gc, T: 'gc> {
    ptr: NonNull<GcBox<T>>,
    /// Invariant in `'gc`: a `Gc` of one `mutate` call can never pass for
    /// one of another (or of another runtime).
    _brand: PhantomData<fn(&'gc ()) -> &'gc ()>,
}

// SAFETY: a `Gc` gives only `&T` access, and every `T: Trace` is
// `Send + Sync`; the object lives as long as the brand (the collector cannot
// run a mark while any `mutate` holding the brand is running).
unsafe impl<T: Trace> Send for Gc<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Trace> Sync for Gc<'_, T> {}

impl<T> Clone for Gc<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Gc<'_, T> {}

impl<'gc, T: Trace> Gc<'gc, T> {
    /// # Safety
    /// `addr` is a live `GcBox<T>` that stays live for `'gc`.
    #[inline]
    pub(crate) unsafe fn from_addr(addr: usize) -> Self {
        Gc {
            // SAFETY: live objects are never at address 0.
            ptr: unsafe { NonNull::new_unchecked(addr as *mut GcBox<T>) },
            _brand: PhantomData,
        }
    }

    /// The object's address (its header), the collector's name for it.
    #[inline]
    pub(crate) fn addr(self) -> usize {
        self.ptr.as_ptr() as usize
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
        unsafe { &(*this.ptr.as_ptr()).value }
    }
}

impl<T: Trace> Deref for Gc<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        Gc::get(*self)
    }
}

impl<T: Trace + fmt::Debug> fmt::Debug for Gc<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(Gc::get(*self), f)
    }
}

impl<T: Trace + fmt::Display> fmt::Display for Gc<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(Gc::get(*self), f)
    }
}

impl<T: Trace + PartialEq> PartialEq for Gc<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        Gc::get(*self) == Gc::get(*other)
    }
}

impl<T: Trace + Eq> Eq for Gc<'_, T> {}

impl<T: Trace + std::hash::Hash> std::hash::Hash for Gc<'_, T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Gc::get(*self).hash(state)
    }
}

// SAFETY: reports the one managed pointer a `Gc` is (1); pure (2); a `Gc`
// always needs tracing (3); no `Drop` (4).
unsafe impl<T: Trace> Trace for Gc<'_, T> {
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        tracer.visit_raw(self.addr());
    }
}
