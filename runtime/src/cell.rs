//! Barrier cells: [`GcCell`] and [`GcLock`], the only way to store a managed
//! pointer into an object after it was allocated.
//!
//! Both carry the brand `'gc` of the `mutate` call that reached them, and
//! every write takes that call's `&Mutation<'gc>`, which is where the write
//! barrier lives. So no write can go around the barrier (an object is only
//! ever reached through `&T`, and `Cell`, `RefCell` and locks of
//! non-`'static` data are not `Trace`), and no write can go through the
//! barrier of the wrong runtime: a `Mutation` of another runtime (or of
//! another `mutate` call, on a scoped thread) has another brand, and the
//! write does not compile. (A barrier serving the wrong runtime would let
//! the right one's minor cycle or concurrent mark miss the store, and free
//! a reachable object.)
//!
//! Between marks the barrier serves minor cycles: a [`GcCell`] store marks
//! the objects it stores and remembers the newly marked ones (an old object
//! may now point to them); a [`GcLock`] write records the object the lock is
//! in, for the next minor cycle to trace again (below). During a concurrent
//! mark it keeps the snapshot: a [`GcCell`] store shades the old value and
//! the new one (not the new one when the cell lies in a young object), a
//! [`GcLock`] write shades the old contents (once per mark) before it
//! writes (the barrier and its proof: `barrier.rs`). Both cells are also what makes
//! a concurrent mark free of data races: a marker reads a `GcCell`
//! atomically and a `GcLock` under its read lock.
//!
//! # A marker never waits for a `GcLock`
//! A lock's contents may hold another `GcLock` (through an `Arc`), so a
//! tracer holding one lock's read lock may meet a second that a writer
//! holds, and that writer may be waiting for the first (or be the very
//! thread whose write is shading). So `GcLock::trace` only *tries* the read
//! lock, and skips the contents when a writer holds it or waits for it:
//! 1. A tracer runs in a pause (the world stopped: no `mutate` call, so no
//!    writer) or during a concurrent mark, when every `mutate` call began
//!    after the mark did and so shades.
//! 2. A writer during a concurrent mark shades the contents, under the write
//!    lock and before its closure runs, unless a write of the same mark
//!    already did; writes of one mark happen one after another, and the
//!    first saw the contents as they were when the mark began.
//! 3. So a lock a writer holds or waits for has had, or is about to have,
//!    its contents of the mark's start shaded: everything the snapshot
//!    needs of it. What writes add later was either reachable when the mark
//!    began (and is marked through the path it had then, whose cutting is
//!    shaded) or allocated since (not swept by this cycle).
//!
//! A ragged cycle's tracers start only once every call that began before
//! its mark has ended (point 1 holds from then on); its "mark's start" is
//! that moment, *T*. A call that began in the window before it may write
//! before T: it shades the contents before and after its closure and does
//! not record the mark in `shaded`, so the first write after T shades
//! again (`barrier.rs`, "Ragged cycles", 2 and 7).
//!
//! No tracer ever blocks on a `GcLock`, so the only waits between locks are
//! those of the user's own nested writes. The protocol is model-checked in
//! `snapshot_model.rs` (`nested_locks_never_deadlock`).
//!
//! # Recording the object written
//! A write may change any number of pointers in the contents (a list's
//! push, a map's insert), so the barrier does not walk what it stores: it
//! records the *object the lock lives in*, and the next minor cycle traces
//! that object again, whole, like the objects a `GcCell` store remembers.
//! O(1) per write, once per lock and cycle (`logged`), however large the
//! contents. The lock learns its object from the markers: a marker tracing
//! object `o` sets the `owner` of every lock it meets inside `o` (inline, in
//! a `Vec`, nested in another lock) before it tries the read lock.
//! What makes that enough, for a write of a lock `L`:
//! 1. `owner == 0`: no marker has met `L` since it was made, so the object
//!    holding it (if any: a lock on the stack needs nothing) is young, or
//!    was marked by a barrier and waits in a remembered list, or is queued
//!    for a marker of the mark under way. Each of those is traced, from its
//!    current contents, by the next minor cycle or by this mark (whose
//!    marker then reads this write, or finds the lock held and traces the
//!    object again later, `Tracer::defer_current`). A marker that set the
//!    owner before this writer took the lock is seen by it: the read lock's
//!    release orders the store before the write lock's acquire.
//! 2. `owner == o`: the last mark that met `L` found it in `o`, so `o` was
//!    marked then and is allocated: minor cycles free no marked object, and
//!    a full cycle that frees `o` traced `L` elsewhere first, changing the
//!    owner (to `SHARED_OWNER`), unless the write read the owner before
//!    that marker set it: so during a mark the write also shades `o`, which
//!    this cycle's sweep then keeps. Recording `o` makes the next minor
//!    cycle trace `o`, and so `L`'s contents as they are then.
//! 3. `owner == SHARED_OWNER`: markers found `L` in two objects (an `Arc`);
//!    there is no one object to record, and the write makes the next cycle
//!    a full one, as every lock write did before owners were recorded.
//!    A lock moved from one object to another through an `Arc` becomes
//!    shared the first time a marker meets it in the second object.

use crate::gc::Gc;
use crate::log::GcLog;
use crate::mutator::Mutation;
use crate::trace::{Trace, Tracer};
use crate::weak::GcWeak;
use crossbeam_utils::atomic::AtomicCell;
use parking_lot::{RwLock, RwLockReadGuard};
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Invariant in `'gc`, like [`Gc`]: a cell of one `mutate` call can never
/// pass for one of another.
type Brand<'gc> = PhantomData<fn(&'gc ()) -> &'gc ()>;

/// A value a [`GcCell`] can hold: managed pointers (`Gc`, `Option<Gc>`,
/// `GcWeak`, `Option<GcWeak>`), the primitive integers, floats, `bool` and
/// `char`, and newtypes of them.
///
/// A cell's loads and stores must be single atomic instructions with no
/// data race and no uninitialised byte: `crossbeam_utils::atomic::AtomicCell`
/// turns them into the matching atomic integer operation for a type of one
/// machine word or less, and [`GcCell::new`] checks at compile time that it
/// does. (For a larger type `AtomicCell` falls back to a seqlock, whose
/// optimistic read races with a write in the memory model's terms.)
/// Anything else goes in a [`GcLock`].
///
/// # Safety
/// An implementing type has no padding or other uninitialised bytes (a
/// padded type would be copied, padding and all, as an integer). A
/// `#[repr(transparent)]` newtype of a `CellValue` qualifies, as a managed
/// collection's handle does:
/// ```
/// use loam_runtime::{CellValue, Gc, GcCell, Trace, Tracer};
///
/// /// A handle to a managed counter, storable in cells.
/// #[derive(Clone, Copy)]
/// #[repr(transparent)]
/// struct Counter<'gc>(Gc<'gc, GcCell<'gc, u64>>);
///
/// // SAFETY: a transparent newtype of `Gc`, one word with no padding.
/// unsafe impl CellValue for Counter<'_> {}
/// // SAFETY: reports the one pointer it holds; no `Drop`.
/// unsafe impl Trace for Counter<'_> {
///     fn trace(&self, tracer: &mut Tracer) {
///         self.0.trace(tracer)
///     }
/// }
/// ```
pub unsafe trait CellValue: Copy {
    /// Not public API: the address of the one managed object this value
    /// points to (0 for none), where the type says so without a trace
    /// (`Gc`, `Option<Gc>`); `None` otherwise, and the barrier traces the
    /// value. What it gives is what the value's `trace` reports. The
    /// argument's type cannot be named outside this crate, so no impl
    /// elsewhere can override it.
    #[doc(hidden)]
    #[inline(always)]
    fn __edge(&self, _: sealed::Token) -> Option<usize> {
        None
    }
}

/// Keeps [`CellValue::__edge`] this crate's own.
mod sealed {
    /// Named only inside this crate.
    #[derive(Clone, Copy, Debug)]
    pub struct Token(pub(super) ());
}

macro_rules! cell_values {
    ($($ty:ty),* $(,)?) => {$(
        // SAFETY: a primitive of one word or less, no padding.
        unsafe impl CellValue for $ty {}
    )*};
}

cell_values!(
    bool, char, u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64,
    NonZeroU32, NonZeroU64, NonZeroUsize,
);

// SAFETY: a `Gc` is one non-null pointer (thin for every `Managed` type),
// and `Option<Gc>` uses the null niche: one word, no padding. The edge is
// the address `Gc`'s `trace` reports (`gc.rs`).
unsafe impl<T: ?Sized> CellValue for Gc<'_, T> {
    #[inline(always)]
    fn __edge(&self, _: sealed::Token) -> Option<usize> {
        Some(self.addr())
    }
}
// SAFETY: as above; `None` reports nothing.
unsafe impl<T: ?Sized> CellValue for Option<Gc<'_, T>> {
    #[inline(always)]
    fn __edge(&self, _: sealed::Token) -> Option<usize> {
        Some(self.map_or(0, |g| g.addr()))
    }
}
// SAFETY: a `GcWeak` is one `Gc` (of its weak cell); the same niche.
unsafe impl<T> CellValue for GcWeak<'_, T> {}
// SAFETY: as above.
unsafe impl<T> CellValue for Option<GcWeak<'_, T>> {}

/// A managed pointer or a primitive that an object can change in place,
/// such as `Option<Gc<'gc, T>>`: one atomic word, lock-free.
///
/// # Examples
/// ```
/// use loam_runtime::{Gc, GcCell, Runtime, Trace};
///
/// #[derive(Trace)]
/// struct Slot<'gc> {
///     item: GcCell<'gc, Option<Gc<'gc, u32>>>,
/// }
///
/// let rt = Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let slot = mc.alloc(Slot { item: GcCell::new(None) });
///     slot.item.set(mc, Some(mc.alloc(7)));
///     assert_eq!(slot.item.get().map(|g| *g), Some(7));
/// });
/// ```
///
/// A field cannot be written without it:
/// ```compile_fail
/// # use loam_runtime::{Gc, Runtime, Trace};
/// #[derive(Trace)]
/// struct Slot<'gc> {
///     item: Option<Gc<'gc, u32>>,
/// }
/// # let rt = Runtime::builder().gc_threads(1).build();
/// # let mut m = rt.attach();
/// m.mutate(|mc| {
///     let slot = mc.alloc(Slot { item: None });
///     slot.item = Some(mc.alloc(7));
/// });
/// ```
///
/// nor through another runtime's (or another call's) `Mutation`:
/// ```compile_fail
/// # use loam_runtime::{Gc, GcCell, Runtime, Trace};
/// # #[derive(Trace)]
/// # struct Slot<'gc> { item: GcCell<'gc, Option<Gc<'gc, u32>>> }
/// let (a, b) = (Runtime::new(), Runtime::new());
/// let mut ma = a.attach();
/// ma.mutate(|mc| {
///     let slot = mc.alloc(Slot { item: GcCell::new(Some(mc.alloc(1))) });
///     std::thread::scope(|s| {
///         s.spawn(|| {
///             let mut mb = b.attach();
///             mb.mutate(|mcb| slot.item.set(mcb, None));
///         });
///     });
/// });
/// ```
pub struct GcCell<'gc, T: CellValue> {
    // `ManuallyDrop`: `AtomicCell` has a `Drop` impl (for values that need
    // one), which made every object holding a cell "need drop" and sent
    // each to the sweep's drop glue; a `CellValue` is `Copy`, so there is
    // never anything to drop (binary-trees built with `set`: the sweep
    // took 510 – 630 ms of a run against 35 ms for the same trees without
    // cells).
    value: ManuallyDrop<AtomicCell<T>>,
    _brand: Brand<'gc>,
}

impl<'gc, T: CellValue> GcCell<'gc, T> {
    /// A cell holding `value` (no barrier: the cell is not in the heap yet).
    pub const fn new(value: T) -> Self {
        const {
            assert!(
                AtomicCell::<T>::is_lock_free(),
                "loam: a GcCell value must be one lock-free atomic word"
            )
        };
        GcCell {
            value: ManuallyDrop::new(AtomicCell::new(value)),
            _brand: PhantomData,
        }
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> T {
        self.value.load()
    }

    /// Where the cell is, for the barrier to find the object holding it.
    #[inline]
    fn addr(&self) -> *const u8 {
        (self as *const Self).cast()
    }

    /// The current value, loaded sequentially consistent: the markers'
    /// read (`Trace` below). A marker sets an object's mark bit
    /// sequentially consistent before it reads the cells (`mark_block`),
    /// and a store during a mark fences before it looks at the mark of
    /// the object holding the cell, so the marker reads the store or the
    /// store sees the mark (`barrier.rs`, "A young object's cells", 4). As
    /// cheap as `get` on x86-64 and AArch64 (a plain load, `ldar`).
    #[inline]
    fn get_seq_cst(&self) -> T {
        use std::mem::{size_of, transmute_copy};
        use std::sync::atomic::Ordering::SeqCst;
        #[cfg(target_has_atomic = "64")]
        use std::sync::atomic::AtomicU64;
        use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU8};
        let p = self.value.as_ptr();
        // `new` checked at compile time that `T` is one lock-free word:
        // `AtomicCell` then reads and writes it as the atomic integer of
        // its size, whose alignment `T`'s is at least, and so does this
        // load; the bits it reads are a `T` some store wrote.
        // SAFETY: as just said.
        unsafe {
            match size_of::<T>() {
                1 => transmute_copy(&AtomicU8::from_ptr(p.cast()).load(SeqCst)),
                2 => transmute_copy(&AtomicU16::from_ptr(p.cast()).load(SeqCst)),
                4 => transmute_copy(&AtomicU32::from_ptr(p.cast()).load(SeqCst)),
                #[cfg(target_has_atomic = "64")]
                8 => transmute_copy(&AtomicU64::from_ptr(p.cast()).load(SeqCst)),
                // Zero-sized, the only other size `new` lets through:
                // nothing to order.
                _ => self.value.load(),
            }
        }
    }
}

// `T: 'gc`: the value's own brand must outlive the cell's, so a cell made
// in one call cannot be given another call's pointers (a fresh cell on the
// stack of runtime B's call, holding runtime A's object, would let B's
// barrier mark A's object). A pointer branded by another call does not
// outlive this call's brand (the brands of `mutate` calls are unrelated).
impl<'gc, T: CellValue + Trace + 'gc> GcCell<'gc, T> {
    /// Stores `value`, through the write barrier.
    #[inline]
    pub fn set(&self, mc: &Mutation<'gc>, value: T) {
        if T::NEEDS_TRACE && mc.mark_epoch() != 0 {
            self.set_marking_cold(mc, value);
        } else {
            // Between marks the barrier needs only the new value: a plain
            // store, no read-modify-write.
            self.value.store(value);
            match value.__edge(sealed::Token(())) {
                // A pointer: its one object, without a trace.
                Some(e) => mc.barrier_store_edge(self.addr(), e),
                None => mc.barrier_store_new(self.addr(), &value),
            }
        }
    }

    /// The write barrier for the value this cell holds as its object stops
    /// reporting the cell (a collection cutting an element off its end):
    /// during a concurrent mark, the value is shaded unless it was
    /// allocated after the mark's stop, as a store over it would shade it;
    /// outside a mark, nothing. Storing the value again with
    /// [`set`](Self::set) did the same, and shaded it as the stored value
    /// too: a young element popped off a list during a mark was marked,
    /// and with sticky marks old.
    ///
    /// # Examples
    /// ```
    /// use loam_runtime::{Gc, GcCell};
    ///
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let cell = GcCell::new(Some(mc.alloc(7_u64)));
    ///     cell.cut(mc); // a container would stop reporting `cell` now
    ///     assert_eq!(cell.get().map(|g| *g), Some(7));
    /// });
    /// ```
    #[inline]
    pub fn cut(&self, mc: &Mutation<'gc>) {
        if T::NEEDS_TRACE && mc.mark_epoch() != 0 {
            self.cut_marking(mc);
        }
    }

    #[cold]
    #[inline(never)]
    fn cut_marking(&self, mc: &Mutation<'gc>) {
        // From before the read until the value is shaded, as a store's
        // barrier (`set_marking`).
        let _bracket = mc.shading();
        mc.shade_old(&self.value.load());
    }

    /// Stores `value` and returns the old one, through the write barrier.
    #[inline]
    pub fn replace(&self, mc: &Mutation<'gc>, value: T) -> T {
        // From before the read of the old value until it is shaded.
        let _bracket = T::NEEDS_TRACE.then(|| mc.shading());
        let old = self.value.swap(value);
        self.barrier_store(mc, &old, &value);
        old
    }

    /// Stores `value` through the barrier for the stored value alone: the
    /// old value is neither read nor shaded. For a cell that its object's
    /// `Trace` impl does not report right now, such as a spare slot past a
    /// collection's length, whose old value may be an object the collector
    /// has freed (shading it would mark freed memory).
    ///
    /// # Safety
    /// Until this store, the cell is not reported by the `trace` of the
    /// object holding it (nor reachable otherwise), and the store happens
    /// before that object reports it (for example, before the collection's
    /// length grows over it, under the same exclusive access).
    ///
    /// # Examples
    /// ```
    /// use loam_runtime::{Gc, GcCell};
    ///
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let spare: GcCell<Option<Gc<u32>>> = GcCell::new(None);
    ///     // SAFETY: a local cell that nothing traces.
    ///     unsafe { spare.set_unreported(mc, Some(mc.alloc(1))) };
    ///     assert_eq!(spare.get().map(|g| *g), Some(1));
    /// });
    /// ```
    #[inline]
    pub unsafe fn set_unreported(&self, mc: &Mutation<'gc>, value: T) {
        self.value.store(value);
        mc.barrier_new(&value);
    }

    /// Stores `value` into a cell of an object whose [`GcLog`] this call
    /// recorded: during a concurrent mark, through the snapshot barrier as
    /// [`set`](Self::set); between marks, a plain store (the next minor
    /// cycle traces the object again: nothing stored is promoted).
    ///
    /// # Safety
    /// The cell's current value is reported by the `trace` of an object
    /// (the cell's owner) that either has a [`GcLog`] on which
    /// [`GcLog::record`] was called in this `mutate` call before this
    /// store, or was allocated in this call; and it stays reported by it.
    /// Nothing is asked for a `T` that needs no tracing (`T::NEEDS_TRACE`
    /// false, a number say): the store is then a plain one, which no
    /// collector reads a pointer from.
    #[inline]
    pub unsafe fn set_recorded(&self, mc: &Mutation<'gc>, value: T) {
        if T::NEEDS_TRACE && mc.mark_epoch() != 0 {
            // Not `own`: such a cell may be reported by another object
            // than the one it lies in (a collection's array slots, which
            // the collection's object reports).
            self.set_marking(mc, value, false);
        } else {
            self.value.store(value);
        }
    }

    /// [`set_recorded`](Self::set_recorded) without the shade of the
    /// stored value, which the caller leaves to
    /// [`GcLog::after_unreported_stores`]: during a concurrent mark the
    /// value overwritten gets the deletion barrier (as
    /// [`cut`](Self::cut)), and the new one is shaded only if a marker
    /// has met the object by then. A collection installing a grown array
    /// made in this call uses it: the array is young, and shading it
    /// promoted it.
    ///
    /// # Safety
    /// As [`set_recorded`](Self::set_recorded), with the object's
    /// [`GcLog`] recorded (being allocated in this call is not enough); no
    /// other thread stores into the cell until that
    /// `after_unreported_stores` returns (a store that overwrote this value
    /// without reading it would not shade it); and in
    /// this call, after the store, the caller calls
    /// [`GcLog::after_unreported_stores`] on that log with a `shade` that
    /// shades the value (stores it again with `set_recorded`).
    #[inline]
    pub unsafe fn set_unshaded(&self, mc: &Mutation<'gc>, value: T) {
        if T::NEEDS_TRACE && mc.mark_epoch() != 0 {
            self.set_unshaded_marking(mc, value);
        } else {
            self.value.store(value);
        }
    }

    #[cold]
    #[inline(never)]
    fn set_unshaded_marking(&self, mc: &Mutation<'gc>, value: T) {
        // As `set_marking`, less the stored value's shade.
        let _bracket = mc.shading();
        let old = self.store_marking(mc, value);
        mc.note_write();
        mc.shade_old(&old);
    }

    /// `set` during a concurrent mark, out of line: the store between
    /// marks, the common one, is then small enough to inline into its
    /// caller's loop.
    #[cold]
    #[inline(never)]
    fn set_marking_cold(&self, mc: &Mutation<'gc>, value: T) {
        self.set_marking(mc, value, true);
    }

    /// `Mutation::barrier_store` for this cell's store of `value` over
    /// `old`: for pointers, their objects without a trace
    /// (`CellValue::__edge`).
    #[inline]
    fn barrier_store(&self, mc: &Mutation<'gc>, old: &T, value: &T) {
        match (old.__edge(sealed::Token(())), value.__edge(sealed::Token(()))) {
            (Some(o), Some(n)) => mc.barrier_store_edges(self.addr(), o, n),
            _ => mc.barrier_store(self.addr(), old, value),
        }
    }

    /// A store during a concurrent mark, through the snapshot barrier: a
    /// load, then a store, as snapshot barriers do. The store that first
    /// overwrites the value of the mark's start is made by a writer whose
    /// load read that value (nothing lies between them in the cell's
    /// order, and the load follows the start), so it is shaded; every
    /// later value was shaded as the new one of its own store. A call in a
    /// ragged start's window may have loaded before the start (T), so it
    /// swaps instead.
    ///
    /// `own`: the cell is reported by the `Trace` of the object it lies
    /// in (as `Trace`'s contract has it for every cell stored with
    /// [`set`](Self::set)), so a store into a young object's cell may
    /// leave the value unshaded (`barrier.rs`, "A young object's cells").
    #[inline]
    fn set_marking(&self, mc: &Mutation<'gc>, value: T, own: bool) {
        // From before the load until the old value is shaded: a ragged
        // mark's end that missed the bracket has every marker's read of
        // this cell before the load (`barrier.rs`, "Ragged cycles", 3).
        let _bracket = mc.shading();
        let old = self.store_marking(mc, value);
        if own {
            self.barrier_store(mc, &old, &value);
        } else {
            mc.barrier_store_reported_elsewhere(&old, &value);
        }
    }

    /// Stores `value` during a concurrent mark and returns what it
    /// overwrote, for the barrier to shade (in a bracket the caller opened
    /// before).
    #[inline]
    fn store_marking(&self, mc: &Mutation<'gc>, value: T) -> T {
        if mc.window {
            // A window call may have begun before T, and an old call store
            // into this cell, unshaded, between the load and the store: a
            // value of T that the store would overwrite without having
            // read it, while a later call holds it. The swap reads what it
            // overwrites (`barrier.rs`, "Ragged cycles", 3).
            self.value.swap(value)
        } else {
            let old = self.value.load();
            self.value.store(value);
            old
        }
    }

    /// [`set_recorded`](Self::set_recorded) for a cell its owner does not
    /// report yet (a spare slot past a collection's length): the old value
    /// is neither read nor shaded, as in
    /// [`set_unreported`](Self::set_unreported).
    ///
    /// # Safety
    /// As [`set_recorded`](Self::set_recorded) (nothing for a `T` that
    /// needs no tracing), except that until this store the cell is not
    /// reported by its owner (nor reachable otherwise), and the owner
    /// starts reporting it only after the store.
    #[inline]
    pub unsafe fn fill_recorded(&self, mc: &Mutation<'gc>, value: T) {
        self.value.store(value);
        if T::NEEDS_TRACE && mc.mark_epoch() != 0 {
            mc.shade(&value);
        }
    }

    /// [`fill_recorded`](Self::fill_recorded) without its shade, which
    /// the caller hands to [`GcLog::after_unreported_stores`] once the
    /// owner reports the cell: an object no marker has met needs none
    /// (see there).
    ///
    /// # Safety
    /// As [`fill_recorded`](Self::fill_recorded); and in this `mutate`
    /// call, after the owner starts reporting the cell, the caller calls
    /// `after_unreported_stores` on the owner's log with a `shade` that
    /// shades this value (stores it again with
    /// [`set_recorded`](Self::set_recorded)).
    #[inline]
    pub unsafe fn fill_unshaded(&self, value: T) {
        self.value.store(value);
    }

    /// Stores `value` with no barrier at all: a move of a value within the
    /// object that holds this cell, inside [`GcLog::moving`], which shades
    /// what the moves need (see there).
    ///
    /// # Safety
    /// Called from the `moves` of a [`GcLog::moving`], under that call's
    /// contract: the cell is one that the `Trace` of the log's object
    /// reports (and no other object's), and `value` is one that those
    /// cells held when `moves` began.
    #[inline]
    pub unsafe fn set_moved(&self, value: T) {
        self.value.store(value);
    }
}

impl<T: CellValue + fmt::Debug> fmt::Debug for GcCell<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("GcCell").field(&self.get()).finish()
    }
}

impl<T: CellValue> Clone for GcCell<'_, T> {
    /// A fresh cell holding the current value (no barrier: the clone is not
    /// in the heap yet).
    fn clone(&self) -> Self {
        GcCell::new(self.get())
    }
}

impl<T: CellValue + Default> Default for GcCell<'_, T> {
    fn default() -> Self {
        GcCell::new(T::default())
    }
}

// SAFETY: traces the value the cell holds now (1); loading is pure (2); needs
// tracing when `T` does (3); no `Drop` of its own (4).
unsafe impl<T: CellValue + Trace> Trace for GcCell<'_, T> {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE;

    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        self.get_seq_cst().trace(tracer)
    }
}

/// Any value an object can change in place (a `Vec` of pointers, a map):
/// readers share, a writer goes through [`write`](GcLock::write), which
/// takes the call's `Mutation` (the barrier).
///
/// # Examples
/// ```
/// use loam_runtime::{Gc, GcLock, Runtime, Trace};
///
/// #[derive(Trace)]
/// struct Bag<'gc> {
///     items: GcLock<'gc, Vec<Gc<'gc, String>>>,
/// }
///
/// let rt = Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let bag = mc.alloc(Bag { items: GcLock::new(Vec::new()) });
///     bag.items.write(mc, |v| v.push(mc.alloc("a".to_string())));
///     assert_eq!(bag.items.read().len(), 1);
/// });
/// ```
pub struct GcLock<'gc, T> {
    value: RwLock<T>,
    /// The mutator whose call holds the write lock (its address), 0 when
    /// none: a `read`, `write` or `Debug` of the lock inside its own write
    /// panics instead of waiting for itself (the lock is not reentrant).
    writer: AtomicUsize,
    /// The concurrent mark whose snapshot this lock's contents were last
    /// shaded for (0: none yet): a write shades them once per mark, not
    /// once per write (a list's pushes would each cost its length).
    /// Written under the write lock; read there, so relaxed.
    shaded: AtomicU64,
    /// Records the object the lock is in (module docs, "Recording the
    /// object written").
    log: GcLog<'gc>,
    _brand: Brand<'gc>,
}

impl<'gc, T> GcLock<'gc, T> {
    /// A lock holding `value`.
    pub const fn new(value: T) -> Self {
        GcLock {
            value: RwLock::new(value),
            writer: AtomicUsize::new(0),
            shaded: AtomicU64::new(0),
            log: GcLog::new(),
            _brand: PhantomData,
        }
    }

    /// Shared access; blocks while a writer holds the lock, or waits for
    /// it (writers are not starved), so a second `read` by a thread that
    /// holds a read guard of the same lock waits for ever if another
    /// thread waits to write meanwhile, as with `std::sync::RwLock`: take
    /// one guard at a time.
    ///
    /// # Panics
    /// Inside a [`write`](GcLock::write) of this lock on the same thread
    /// (it would wait for itself).
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        match self.value.try_read() {
            Some(g) => g,
            None => {
                self.refuse_own_write("read");
                self.value.read()
            }
        }
    }

    /// Panics if this thread holds the write lock: `what` would wait for
    /// itself. (Only on a lock found taken, off the fast path.)
    fn refuse_own_write(&self, what: &str) {
        // Only a call of this thread's mutator stores that mutator's
        // address, and clears it before it lets the lock go: an address
        // read equal to the caller's is this thread's write, under way.
        if is_own_write(&self.writer) {
            own_write(what);
        }
    }

    /// Consumes the lock, returning the value.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

// `T: 'gc`, for the reason given at `GcCell::set`.
impl<'gc, T: Trace + 'gc> GcLock<'gc, T> {
    /// Runs `f` with exclusive access, through the write barrier, which
    /// records the lock's owner object for the next minor cycle in O(1)
    /// (a lock shared through an `Arc`, with no one owner, makes the next
    /// cycle a full one: see the comment inside). The barrier holds
    /// however `f` ends, a panic included.
    ///
    /// # Panics
    /// Inside another `write` of this lock on the same thread (it would
    /// wait for itself), or if `f` panics (after the barrier's work).
    ///
    /// A `write` while this thread holds a [`read`](Self::read) guard of
    /// the same lock waits for ever, as with `std::sync::RwLock`: drop the
    /// guard first (the lock does not know which threads read it).
    pub fn write<R>(&self, mc: &Mutation<'gc>, f: impl FnOnce(&mut T) -> R) -> R {
        let mut g = match self.value.try_write() {
            Some(g) => g,
            None => {
                self.refuse_own_write("write");
                self.value.write()
            }
        };
        // Cleared before the lock is let go (declared after the guard),
        // however the write ends.
        // The call's mutator: no thread-local to look up (a write is made
        // inside a call, whose mutator `mutate` records for the cold
        // path's comparison, `mutator::caller`).
        self.writer
            .store(std::ptr::from_ref(mc.mutator()) as usize, Ordering::Relaxed);
        let _writer = ClearWriter(&self.writer);
        let epoch = mc.mark_epoch();
        // A concurrent mark is under way: the snapshot needs whatever the
        // contents point to now, before `f` may drop it. Under the write
        // lock, so no other writer slips in between (module docs, 2).
        if T::NEEDS_TRACE && epoch != 0 && self.shaded.load(Ordering::Relaxed) != epoch {
            // A user's `Trace` impl that panics here leaves the contents
            // unshaded while a marker may have skipped them (module docs,
            // 3): the panic goes on to the caller, but the mark under way
            // is told, and its cycle frees nothing.
            shade_contents(mc, &*g);
            // Not for a window call: a call that began before the mark may
            // still write the lock unshaded after it, so the first write
            // after the window must shade again (`barrier.rs`, "Ragged
            // cycles").
            if !mc.window {
                self.shaded.store(epoch, Ordering::Relaxed);
            }
        }
        // What `f` stores is covered by recording the object that holds
        // the lock, for the next minor cycle to trace again (module docs,
        // "Recording the object written"): O(1), however much `f` changes.
        // Before `f` runs, so that a panic in `f` (after it stored a young
        // pointer, say) cannot skip it: the record is only read with every
        // `mutate` call finished.
        if T::NEEDS_TRACE {
            self.log.record(mc);
        }
        if T::NEEDS_TRACE && mc.window {
            // A call in a ragged start's window may store what it holds
            // from before the mark began, which nothing else shades
            // (`barrier.rs`, "Ragged cycles"): the contents are shaded
            // after `f` as well, however it ends. Window calls are few
            // (those that begin while a mark waits for older calls).
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut g)));
            shade_contents(mc, &*g);
            return r.unwrap_or_else(|payload| std::panic::resume_unwind(payload));
        }
        f(&mut g)
    }

    /// Replaces the value, through the write barrier.
    pub fn set(&self, mc: &Mutation<'gc>, value: T) -> T {
        self.write(mc, |v| std::mem::replace(v, value))
    }
}

/// Shades what a lock's contents point to; a panic of the user's `Trace`
/// impl is logged (the cycle under way then frees nothing) and goes on.
fn shade_contents<T: Trace + ?Sized>(mc: &Mutation<'_>, contents: &T) {
    // A bracket of its own around the shade's and the record: the shade's
    // closes as the panic unwinds out of it, and a ragged end that waited
    // only for that one could check for panics before the record and
    // sweep on marks the panic made incomplete.
    let _bracket = mc.shading();
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mc.shade(contents))) {
        mc.shared().shade_panics.record_for_mark(
            crate::panics::Kind::Trace,
            std::any::type_name::<T>(),
            "panicked while a GcLock write shaded its contents".to_string(),
            mc.mark_epoch(),
        );
        std::panic::resume_unwind(payload);
    }
}

/// Clears a [`GcLock`]'s writer token as the write ends.
struct ClearWriter<'a>(&'a AtomicUsize);

impl Drop for ClearWriter<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// Whether `writer` names the mutator whose call this thread is in (so
/// this thread's write holds the lock). Off the fast path.
fn is_own_write(writer: &AtomicUsize) -> bool {
    let me = crate::mutator::caller();
    me != 0 && writer.load(Ordering::Relaxed) == me
}

#[cold]
#[inline(never)]
fn own_write(what: &str) -> ! {
    panic!(
        "loam: GcLock::{what} inside a write of the same lock on this thread would wait \
         for itself (the lock is not reentrant); read or write it before or after the write"
    )
}

impl<T: fmt::Debug> fmt::Debug for GcLock<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = f.debug_tuple("GcLock");
        match self.value.try_read() {
            Some(g) => t.field(&*g),
            // Inside this thread's own write (`dbg!` of the object in the
            // write's closure): waiting would be for ever.
            None if is_own_write(&self.writer) => {
                t.field(&format_args!("<locked by this thread's write>"))
            }
            // Another thread writes, or waits to: as std's `RwLock`, never
            // wait (this thread may hold a read guard, which the waiting
            // writer's claim keeps this read behind).
            None => t.field(&format_args!("<locked>")),
        };
        t.finish()
    }
}

impl<T: Default> Default for GcLock<'_, T> {
    fn default() -> Self {
        GcLock::new(T::default())
    }
}

// SAFETY: traces the current contents under a read lock (1, 2), so a marker
// never races a writer. When a writer holds the lock, or waits for it, the
// contents are skipped: that writer shades them (module docs, "A marker
// never waits for a `GcLock`"). Needs tracing when `T` does (3); no `Drop`
// of its own (4).
unsafe impl<T: Trace> Trace for GcLock<'_, T> {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE;

    fn trace(&self, tracer: &mut Tracer) {
        if !T::NEEDS_TRACE {
            return;
        }
        // Before the read lock is tried: a writer that takes the lock after
        // this read lock is released sees the owner (the unlock releases,
        // the write lock acquires).
        self.log.trace(tracer);
        match self.value.try_read() {
            Some(g) => g.trace(tracer),
            // The writer shades what the contents held (module docs, 2);
            // what it stores may have gone unrecorded if it read the owner
            // before this marker set it, so the object is traced again.
            None => tracer.defer_current(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::needs_drop;

    /// An object whose fields are cells has no drop glue, so the sweep
    /// frees it without running any (`AtomicCell`'s own `Drop` impl made
    /// every such object look as if it needed one).
    #[test]
    fn cells_need_no_drop() {
        assert!(!needs_drop::<GcCell<'static, u64>>());
        assert!(!needs_drop::<GcCell<'static, Option<Gc<'static, u64>>>>());
        assert!(!needs_drop::<GcCell<'static, Option<GcWeak<'static, u64>>>>());
        assert!(!needs_drop::<[GcCell<'static, Gc<'static, u64>>; 4]>());
        assert!(!needs_drop::<GcLog<'static>>());
        assert!(!needs_drop::<GcLock<'static, Option<Gc<'static, u64>>>>());
        assert!(!needs_drop::<GcWeak<'static, u64>>());
        // A lock of a value that needs one still does.
        assert!(needs_drop::<GcLock<'static, Vec<Gc<'static, u64>>>>());
    }
}
