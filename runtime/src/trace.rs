//! `Trace`: how the collector finds the managed pointers a value owns, its
//! impls for std types, and the `Tracer` that `trace` reports them to.
//! `#[derive(Trace)]` (crate `loam-derive`) writes the impl for user types.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::marker::PhantomData;
use std::num::{
    NonZeroI128, NonZeroI16, NonZeroI32, NonZeroI64, NonZeroI8, NonZeroIsize, NonZeroU128,
    NonZeroU16, NonZeroU32, NonZeroU64, NonZeroU8, NonZeroUsize,
};
use std::sync::{atomic, Arc, Mutex, RwLock};
use std::time::Duration;

/// A type whose values the collector can scan for managed pointers.
///
/// Every type stored in the managed heap implements `Trace`, almost always
/// through `#[derive(Trace)]`, which checks the rules below for you: each
/// field must be `Trace`, the type may not implement `Drop` without an
/// explicit opt-in and an `unsafe impl` of [`UnsafeDrop`], and a skipped
/// field must be `'static`. Impls are provided
/// for the std types that make up object payloads: primitives, `String`,
/// `Box`, `Vec`, `VecDeque`, `Option`, `Result`, arrays, slices and `str`
/// (behind a `Box`), tuples up to 8, the std maps and sets, atomics,
/// `PhantomData`, the `NonZero` integers, `Duration`, `Arc`, and `Mutex` /
/// `RwLock` of `'static` data.
///
/// `trace` runs on the GC threads, and on any mutator thread that helps a
/// concurrent mark (a mark assist, inside one of its `mutate` calls or
/// just before one): an impl must not assume which thread calls it, and
/// must never block (that thread may hold the very lock it would wait
/// for; `GcLock`'s own impl only ever tries its lock).
///
/// # Why `Send + Sync`
/// A managed object is shared: its drop glue runs on a collector thread and a
/// global root hands it to any thread. So `Cell` and `RefCell` have no impl
/// (they are not `Sync`); interior mutability goes through the runtime's
/// barrier cells, which are the only way to store a managed pointer into an
/// existing object, so the write barrier cannot be skipped. For the same
/// reason `Mutex<T>` and `RwLock<T>` are `Trace` only for `'static` `T`: a lock
/// around a managed pointer would be a way to store one without the barrier.
/// (That also keeps the collector from ever taking a user's lock, and makes
/// poisoning moot: a `'static` payload has nothing to trace.)
///
/// # `Arc`
/// `Arc<T>` traces `T` although other `Arc`s may share it. That is sound: any
/// `Arc<T>` that can reach a managed pointer mentions the `'gc` brand, so every
/// clone alive at a safepoint lives in a traced object or a root, and visiting
/// the same pointer from several owners is harmless (marking is idempotent).
/// The shared `T` is reached only through `&T`, so it cannot be changed
/// behind the barrier's back, and when the last clone dies in a sweep, `T`'s
/// drop glue is the same as if it had been a field.
///
/// # Safety
/// The collector frees any object that no `trace` reported, so an impl must:
/// 1. visit, in [`trace`](Trace::trace), every managed pointer the value owns,
///    directly or through data it owns (a field, a box, a collection element),
///    by calling `trace` on the field that holds it (`Gc`'s own impl reports
///    the pointer). A [`GcCell`](crate::GcCell) is reported through its own
///    `trace` (not `cell.get().trace(..)`: the cell's `trace` reads it as the
///    barrier needs), by the object it lies in. Cells of another managed
///    object may be reported only if every store into them goes through
///    [`GcCell::set_recorded`](crate::GcCell::set_recorded) or its kin, under
///    their contracts, as the collections' arrays do: a store with
///    [`GcCell::set`](crate::GcCell::set) into a young object's cell
///    relies on that object's own trace reading it (`barrier.rs`, "A young
///    object's cells");
/// 2. report the same pointers for the same value for as long as the
///    collector runs: `trace` may not mutate, and must not allocate managed
///    objects or touch managed state except through the `tracer`;
/// 3. set [`NEEDS_TRACE`](Trace::NEEDS_TRACE) to `false` only if no value of
///    the type can reach a managed pointer (containers then skip it without
///    calling `trace`);
/// 4. if the type implements `Drop`, never dereference a managed pointer in
///    `drop`: destructors run during sweep, when the objects the value points
///    at may have been freed by the same sweep;
/// 5. not panic: a `trace` that stops partway has not visited every
///    pointer (1). The collector contains a panic on its own threads, and
///    in a [`GcLock`](crate::GcLock) write's shade (that cycle frees
///    nothing, and says so), but a cell store's barrier runs `trace` inside
///    a `mutate` call, on a value the store has just overwritten, and a
///    panic there leaves that value unshaded while the mark runs on;
/// 6. with [`TRACE_IN_PARTS`](Trace::TRACE_IN_PARTS), make the parts cover
///    what `trace` would, as the value is when each part runs: the mark
///    traces part 0 first, then each later part `k` (once, or more often:
///    tracing again is harmless), at any later point of the same mark and
///    on any thread, for every `k` below the count the part that queued
///    it returned (part 0 queues parts 1 to 64, part 64 the next 64, and
///    so on), and never a part at or past [`MAX_TRACE_PARTS`]: part
///    `MAX_TRACE_PARTS - 1` reports everything from its share on. Part
///    `k`'s share must not depend on the count (a fixed range of elements,
///    say). Part 0 reports the value's [`GcLog`](crate::GcLog) before it
///    reads anything the log covers, the count included: a change made
///    before that is what part 0's count, and each later part's reads,
///    see; every change made after it must shade what it stores, and
///    whatever the value reached when part 0 ran but no longer reaches
///    when its part runs (cut, or moved to a part traced already or past
///    the count its queuing part saw). A value whose changes all go
///    through its log and barrier cells has that (the collections'
///    objects are such values).
/// 7. with [`GcCards`](crate::GcCards), skip in a later part only the
///    slots [`GcCards::must_trace`](crate::GcCards::must_trace) says it
///    may, after part 0 took the cards ([`GcCards::take`](crate::GcCards::take),
///    after its log), and touch the card of every reported slot whose value
///    changes (a store, a move), in the change's `mutate` call: a change
///    left untouched is a slot the next minor cycle does not read. One
///    object's cards are its own (cards that two objects' traces take are
///    taken whole from then on, a cost, not a fault).
///
/// # Examples
/// Derive it:
/// ```
/// use loam_runtime::Trace;
///
/// #[derive(Trace)]
/// struct Account {
///     owner: String,
///     history: Vec<(u64, i64)>,
/// }
/// assert!(!<Account as Trace>::NEEDS_TRACE); // leaf data only
/// assert!(<Vec<Account> as Trace>::NEEDS_TRACE == Account::NEEDS_TRACE);
/// ```
/// or write it by hand for a type the derive cannot see into:
/// ```
/// use loam_runtime::{Trace, Tracer};
///
/// /// A list whose first `len` slots are initialised.
/// struct Prefix<T> {
///     slots: Vec<Option<T>>,
///     len: usize,
/// }
///
/// // SAFETY: every element that can hold a value is traced (1, 2); the
/// // answer for NEEDS_TRACE is `T`'s (3); no `Drop` impl (4).
/// unsafe impl<T: Trace> Trace for Prefix<T> {
///     const NEEDS_TRACE: bool = T::NEEDS_TRACE;
///
///     fn trace(&self, tracer: &mut Tracer) {
///         for slot in &self.slots[..self.len] {
///             slot.trace(tracer);
///         }
///     }
/// }
/// # let p = Prefix { slots: vec![Some(1_u8)], len: 1 };
/// # assert!(!<Prefix<u8> as Trace>::NEEDS_TRACE);
/// ```
pub unsafe trait Trace: Send + Sync {
    /// Whether a value of this type can hold a managed pointer at all.
    /// `false` lets containers skip it without iterating.
    const NEEDS_TRACE: bool = true;

    /// Whether the mark may trace an object of this type in parts
    /// ([`trace_part`](Trace::trace_part)), as it traces a long managed
    /// array a chunk at a time: for a type that can reach a great many
    /// pointers from one object (a collection whose elements live in an
    /// array that traces nothing itself), so that no one step of the mark,
    /// which its pauses, its assists and its deadlines cannot cut, traces
    /// them all. `false` (the default): always whole, with
    /// [`trace`](Trace::trace). Only an object's own payload is ever traced
    /// in parts; a value inside another object is traced whole with it.
    const TRACE_IN_PARTS: bool = false;

    /// Whether a managed array of this type (`Gc<'gc, [Self]>`) may be
    /// lengthened in place ([`Mutation::try_grow_in_place`]): for the slot
    /// type of a growable collection, whose elements its own object
    /// traces. `false` (the default): such arrays keep their length, and
    /// reading it is a plain load; where it is `true` every read of the
    /// length is an acquire load, which made string operations 4% slower
    /// when it applied to every array. Only a type that needs no tracing
    /// is ever lengthened, whatever it says here. `MaybeUninit<T>` says
    /// `true`.
    ///
    /// [`Mutation::try_grow_in_place`]: crate::Mutation::try_grow_in_place
    const GROWS_IN_PLACE: bool = false;

    /// With [`TRACE_IN_PARTS`](Trace::TRACE_IN_PARTS): reports the managed
    /// pointers of part `part` and returns how many parts the value has
    /// now (part 0 reads it after its log: safety rule 6): 1 if part 0
    /// reported everything (a short collection, traced in one step). The mark calls
    /// it in place of `trace`, and `trace` where it must see the whole at
    /// once (verify mode, an object a held `GcLock` made it trace again).
    /// The default traces the whole as part 0.
    fn trace_part(&self, part: usize, tracer: &mut Tracer) -> usize {
        if part == 0 {
            self.trace(tracer);
        }
        1
    }

    /// Reports every managed pointer this value owns to `tracer`.
    fn trace(&self, tracer: &mut Tracer);
}

/// The most parts the mark cuts an object's trace into
/// ([`Trace::trace_part`]): its queue entries number an object's parts,
/// as an array's chunks, in 15 bits. A larger count counts as this, and
/// the last part reports the rest.
pub const MAX_TRACE_PARTS: usize = 1 << 15;

/// The visitor `trace` reports managed pointers to.
///
/// Opaque: only the collector creates one, and `trace` impls only pass it on
/// to the `trace` of the fields they own. The `Gc` pointer's own impl (inside
/// this crate) reports its address with `visit_raw`; the collector drains the
/// addresses as its mark work list.
///
/// # Examples
/// A manual `trace` only passes the tracer on to what the value owns:
/// ```
/// use loam_runtime::{Trace, Tracer};
///
/// struct Pair<A, B>(A, B);
///
/// // SAFETY: both halves are traced; NEEDS_TRACE is theirs; no `Drop`.
/// unsafe impl<A: Trace, B: Trace> Trace for Pair<A, B> {
///     const NEEDS_TRACE: bool = A::NEEDS_TRACE || B::NEEDS_TRACE;
///
///     fn trace(&self, tracer: &mut Tracer) {
///         self.0.trace(tracer);
///         self.1.trace(tracer);
///     }
/// }
/// # assert!(!<Pair<u8, String> as Trace>::NEEDS_TRACE);
/// ```
///
/// # Invariants
/// `edges` holds, in visit order, every address reported since the tracer was
/// created or last drained.
#[derive(Debug)]
pub struct Tracer {
    edges: Vec<usize>,
    /// The object being traced, when a marker traces one (0: a barrier's
    /// walk of a value, or verify mode): a `GcLock` inside learns its owner
    /// from it (`cell.rs`).
    #[cfg_attr(loom, allow(dead_code))]
    current: usize,
    /// The mark-queue entry being traced: `current`, or one chunk of it
    /// (`mark.rs`, "Long arrays"). What `defer_current` asks to trace
    /// again.
    #[cfg_attr(loom, allow(dead_code))]
    entry: usize,
    /// Entries to trace again: a lock inside was held by a writer.
    #[cfg_attr(loom, allow(dead_code))]
    deferred: Vec<usize>,
}

impl Tracer {
    /// A tracer with nothing visited yet.
    pub(crate) fn new() -> Self {
        Self {
            edges: Vec::new(),
            current: 0,
            entry: 0,
            deferred: Vec::new(),
        }
    }

    /// Names the object whose payload is traced next (0: none), and the
    /// mark-queue entry that traces it (the object, or a chunk of it).
    #[inline]
    pub(crate) fn set_current(&mut self, addr: usize, entry: usize) {
        self.current = addr;
        self.entry = entry;
    }

    /// The object being traced (0: none).
    #[inline]
    pub(crate) fn current(&self) -> usize {
        self.current
    }

    /// Asks for the entry being traced (the object, or the chunk of it
    /// being traced) to be traced again later.
    pub(crate) fn defer_current(&mut self) {
        if self.current != 0 && self.deferred.last() != Some(&self.entry) {
            self.deferred.push(self.entry);
        }
    }

    /// Moves the entries to trace again into `out`: mark-queue entries,
    /// which only a mark's queues and `remembered` take.
    pub(crate) fn take_deferred(&mut self, out: &mut Vec<usize>) {
        out.append(&mut self.deferred);
    }

    /// Records an edge to the managed object at `addr`. Inline: every
    /// `Gc`'s `trace` calls it, from the crate that instantiates it.
    #[inline]
    pub(crate) fn visit_raw(&mut self, addr: usize) {
        self.edges.push(addr);
    }

    /// The addresses visited so far, in order.
    pub(crate) fn edges(&self) -> &[usize] {
        &self.edges
    }

    /// Forgets the addresses visited so far (keeping the buffer).
    pub(crate) fn clear(&mut self) {
        self.edges.clear();
    }
}

/// The promise, made with `unsafe impl`, that a `#[derive(Trace)]` type's
/// destructor never dereferences a managed pointer: what
/// `#[trace(unsafe_drop)]` asks for before the derive lets the type have
/// an `impl Drop` (`Trace`'s rule 4). The attribute alone took no `unsafe`
/// keyword, so safe code could write a destructor that read an object the
/// same sweep had freed.
///
/// # Safety
/// The type's `Drop` impl, and whatever it calls, reads no object through
/// a `Gc`, `GcCell`, `GcLock`, weak reference or collection of the value
/// being dropped: destructors run on the finalizer thread after the sweep
/// that found the value dead, when the objects it points to may have been
/// freed by the same sweep. (Its own plain fields, and `'static` data, it
/// may use as it likes.)
///
/// # Examples
/// ```
/// use loam_runtime::{Trace, UnsafeDrop};
///
/// #[derive(Trace)]
/// #[trace(unsafe_drop)]
/// struct Logged(u32);
///
/// // SAFETY: the destructor reads only the plain field.
/// unsafe impl UnsafeDrop for Logged {}
///
/// impl Drop for Logged {
///     fn drop(&mut self) {
///         println!("dropped {}", self.0);
///     }
/// }
/// # drop(Logged(1));
/// ```
pub unsafe trait UnsafeDrop {}

/// Not public API: support for the code `#[derive(Trace)]` generates.
#[doc(hidden)]
pub mod __private {
    /// Implemented by the derive for every traced type without
    /// `#[trace(unsafe_drop)]`; conflicts with the blanket impl below if the
    /// type also implements `Drop`.
    pub trait MustNotImplDrop {}

    #[allow(drop_bounds)] // the point: any `Drop` type gets this impl
    impl<T: Drop> MustNotImplDrop for T {}

    /// Compiles only for `'static` types: `#[trace(skip)]` calls it on the
    /// skipped field's type.
    #[inline(always)]
    pub fn assert_static<T: ?Sized + 'static>() {}
}

/// Leaf types: they hold no managed pointer, so tracing them does nothing.
macro_rules! impl_leaf {
    ($($ty:ty),* $(,)?) => {$(
        // SAFETY: the type holds no managed pointer (1, 3) and has no `Drop`
        // that could reach one (4).
        unsafe impl Trace for $ty {
            const NEEDS_TRACE: bool = false;
            #[inline]
            fn trace(&self, _: &mut Tracer) {}
        }
    )*};
}

impl_leaf!(
    (),
    bool,
    char,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    str,
    String,
    Duration,
    NonZeroU8,
    NonZeroU16,
    NonZeroU32,
    NonZeroU64,
    NonZeroU128,
    NonZeroUsize,
    NonZeroI8,
    NonZeroI16,
    NonZeroI32,
    NonZeroI64,
    NonZeroI128,
    NonZeroIsize,
    atomic::AtomicBool,
);

#[cfg(target_has_atomic = "8")]
impl_leaf!(atomic::AtomicU8, atomic::AtomicI8);
#[cfg(target_has_atomic = "16")]
impl_leaf!(atomic::AtomicU16, atomic::AtomicI16);
#[cfg(target_has_atomic = "32")]
impl_leaf!(atomic::AtomicU32, atomic::AtomicI32);
#[cfg(target_has_atomic = "64")]
impl_leaf!(atomic::AtomicU64, atomic::AtomicI64);
#[cfg(target_has_atomic = "ptr")]
impl_leaf!(atomic::AtomicUsize, atomic::AtomicIsize);

// SAFETY: a `MaybeUninit` may hold anything or nothing, so it reports
// nothing, and nothing it holds is kept alive by it (reading a managed
// pointer back out takes `assume_init`, whose caller vouches for it);
// it has no `Drop`. The slot of a growable array (`GROWS_IN_PLACE`).
unsafe impl<T: Send + Sync> Trace for std::mem::MaybeUninit<T> {
    const NEEDS_TRACE: bool = false;
    const GROWS_IN_PLACE: bool = true;
    #[inline]
    fn trace(&self, _: &mut Tracer) {}
}

// SAFETY: a raw pointer is not a managed pointer (1, 3); `AtomicPtr` has no
// `Drop` (4).
#[cfg(target_has_atomic = "ptr")]
unsafe impl<T> Trace for atomic::AtomicPtr<T> {
    const NEEDS_TRACE: bool = false;
    #[inline]
    fn trace(&self, _: &mut Tracer) {}
}

// SAFETY: holds no value at all (1, 3). `T: ?Sized + Send + Sync` is what
// makes it `Send + Sync`; `T` need not be `Trace`.
unsafe impl<T: ?Sized + Send + Sync> Trace for PhantomData<T> {
    const NEEDS_TRACE: bool = false;
    #[inline]
    fn trace(&self, _: &mut Tracer) {}
}

// SAFETY: `T: 'static` means the referent cannot hold a managed pointer (the
// `'gc` brand is never `'static`) (1, 3); a reference has no `Drop` (4).
unsafe impl<T: ?Sized + Sync + 'static> Trace for &'static T {
    const NEEDS_TRACE: bool = false;
    #[inline]
    fn trace(&self, _: &mut Tracer) {}
}

// SAFETY: `T: 'static`, so the locked data holds no managed pointer (1, 3),
// and the collector never takes the lock; see "Why `Send + Sync`" on `Trace`.
unsafe impl<T: ?Sized + Send + 'static> Trace for Mutex<T> {
    const NEEDS_TRACE: bool = false;
    #[inline]
    fn trace(&self, _: &mut Tracer) {}
}

// SAFETY: as for `Mutex`.
unsafe impl<T: ?Sized + Send + Sync + 'static> Trace for RwLock<T> {
    const NEEDS_TRACE: bool = false;
    #[inline]
    fn trace(&self, _: &mut Tracer) {}
}

// SAFETY: the box owns its `T`, which traces itself (1, 2, 3); dropping the
// box runs `T`'s drop glue, which `T`'s impl answers for (4).
unsafe impl<T: ?Sized + Trace> Trace for Box<T> {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE;
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        (**self).trace(tracer);
    }
}

// SAFETY: shared ownership of `T`, traced through every owner; see "`Arc`" on
// `Trace` for why that is sound.
unsafe impl<T: ?Sized + Trace> Trace for Arc<T> {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE;
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        (**self).trace(tracer);
    }
}

// SAFETY: the value owned, if any, is traced (1, 2, 3).
unsafe impl<T: Trace> Trace for Option<T> {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE;
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        if let Some(value) = self {
            value.trace(tracer);
        }
    }
}

// SAFETY: whichever value is owned is traced (1, 2, 3).
unsafe impl<T: Trace, E: Trace> Trace for Result<T, E> {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE || E::NEEDS_TRACE;
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        match self {
            Ok(value) => value.trace(tracer),
            Err(error) => error.trace(tracer),
        }
    }
}

/// Sequences: trace every element unless the element type never needs it.
macro_rules! impl_sequence {
    ($(impl<$($param:ident $(: $bound:path)?),*> for $ty:ty;)*) => {$(
        // SAFETY: every element is traced, unless no element can hold a
        // managed pointer (1, 2, 3); the elements' drop glue is theirs (4).
        unsafe impl<T: Trace $(, $param $(: $bound)?)*> Trace for $ty {
            const NEEDS_TRACE: bool = T::NEEDS_TRACE;
            #[inline]
            fn trace(&self, tracer: &mut Tracer) {
                if T::NEEDS_TRACE {
                    for element in self.iter() {
                        element.trace(tracer);
                    }
                }
            }
        }
    )*};
}

impl_sequence! {
    impl<> for [T];
    impl<> for Vec<T>;
    impl<> for VecDeque<T>;
    impl<> for BTreeSet<T>;
}

// SAFETY: as for the other sequences (1, 2, 3, 4).
unsafe impl<T: Trace, const N: usize> Trace for [T; N] {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE;
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        self.as_slice().trace(tracer);
    }
}

// SAFETY: as for the other sequences. The hasher state `S` is `'static`, so it
// holds no managed pointer (1, 3).
unsafe impl<T: Trace, S: Send + Sync + 'static> Trace for HashSet<T, S> {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE;
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        if T::NEEDS_TRACE {
            for element in self {
                element.trace(tracer);
            }
        }
    }
}

/// Traces the keys and the values of a map that need it.
#[inline]
fn trace_map<'a, K: Trace + 'a, V: Trace + 'a>(
    entries: impl IntoIterator<Item = (&'a K, &'a V)>,
    tracer: &mut Tracer,
) {
    if K::NEEDS_TRACE || V::NEEDS_TRACE {
        for (key, value) in entries {
            if K::NEEDS_TRACE {
                key.trace(tracer);
            }
            if V::NEEDS_TRACE {
                value.trace(tracer);
            }
        }
    }
}

// SAFETY: every key and value that can hold a managed pointer is traced (1, 2,
// 3); their drop glue is theirs (4). The hasher state `S` is `'static`, so it
// holds no managed pointer.
unsafe impl<K: Trace, V: Trace, S: Send + Sync + 'static> Trace for HashMap<K, V, S> {
    const NEEDS_TRACE: bool = K::NEEDS_TRACE || V::NEEDS_TRACE;
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        trace_map(self, tracer);
    }
}

// SAFETY: as for `HashMap`.
unsafe impl<K: Trace, V: Trace> Trace for BTreeMap<K, V> {
    const NEEDS_TRACE: bool = K::NEEDS_TRACE || V::NEEDS_TRACE;
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        trace_map(self, tracer);
    }
}

/// Tuples: trace each element; `NEEDS_TRACE` is the OR of theirs.
macro_rules! impl_tuple {
    ($($name:ident)+) => {
        // SAFETY: every element is traced (1, 2), and `NEEDS_TRACE` is `true`
        // if any element's is (3); the elements' drop glue is theirs (4).
        unsafe impl<$($name: Trace),+> Trace for ($($name,)+) {
            const NEEDS_TRACE: bool = false $(|| $name::NEEDS_TRACE)+;
            #[inline]
            #[allow(non_snake_case)] // the elements are named after their types
            fn trace(&self, tracer: &mut Tracer) {
                let ($($name,)+) = self;
                $($name.trace(tracer);)+
            }
        }
    };
}

impl_tuple!(A);
impl_tuple!(A B);
impl_tuple!(A B C);
impl_tuple!(A B C D);
impl_tuple!(A B C D E);
impl_tuple!(A B C D E F);
impl_tuple!(A B C D E F G);
impl_tuple!(A B C D E F G H);

// Not under loom: the derive's output names `Rebrand` and `Rootable`,
// which the loom build of the crate (its models alone) leaves out.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Trace;

    /// Stands in for `Gc<'gc, T>`: "points at" the object at its address.
    #[derive(PartialEq, Eq, PartialOrd, Ord, Hash)]
    struct Edge(usize);

    // SAFETY: reports its one pointer; NEEDS_TRACE keeps the default `true`.
    unsafe impl Trace for Edge {
        fn trace(&self, tracer: &mut Tracer) {
            tracer.visit_raw(self.0);
        }
    }

    fn edges<T: Trace + ?Sized>(value: &T) -> Vec<usize> {
        let mut tracer = Tracer::new();
        value.trace(&mut tracer);
        tracer.edges().to_vec()
    }

    /// `T::NEEDS_TRACE`, read at run time (an `assert!` on the constant
    /// itself is clippy's `assertions_on_constants`).
    fn needs_trace<T: Trace + ?Sized>() -> bool {
        T::NEEDS_TRACE
    }

    fn sorted(mut edges: Vec<usize>) -> Vec<usize> {
        edges.sort_unstable();
        edges
    }

    #[derive(Trace)]
    struct Leaf {
        id: u64,
        name: String,
        ratio: (f32, Option<char>),
        #[trace(skip)] // 'static, so it needs no `Trace` impl
        _created: std::time::Instant,
    }

    #[derive(Trace)]
    struct Inner {
        first: Edge,
        rest: Vec<Edge>,
    }

    #[derive(Trace)]
    struct Outer {
        inner: Inner,
        maybe: Option<Edge>,
        boxed: Box<Edge>,
        label: String,
    }

    #[test]
    fn derived_struct_reaches_every_field_in_order() {
        let outer = Outer {
            inner: Inner {
                first: Edge(1),
                rest: vec![Edge(2), Edge(3)],
            },
            maybe: Some(Edge(4)),
            boxed: Box::new(Edge(5)),
            label: "x".into(),
        };
        assert_eq!(edges(&outer), [1, 2, 3, 4, 5]);
        assert!(needs_trace::<Outer>());
    }

    #[derive(Trace)]
    enum Shape {
        Empty,
        One(Edge),
        Pair(Edge, u32, Edge),
        Named {
            left: Edge,
            #[trace(skip)]
            _note: &'static str,
            right: Option<Box<Edge>>,
        },
    }

    #[test]
    fn derived_enum_traces_the_active_variant() {
        assert_eq!(edges(&Shape::Empty), [] as [usize; 0]);
        assert_eq!(edges(&Shape::One(Edge(7))), [7]);
        assert_eq!(edges(&Shape::Pair(Edge(1), 9, Edge(2))), [1, 2]);
        let named = Shape::Named {
            left: Edge(3),
            _note: "n",
            right: Some(Box::new(Edge(4))),
        };
        assert_eq!(edges(&named), [3, 4]);
        assert!(needs_trace::<Shape>());
    }

    #[derive(Trace)]
    struct Tuple(Edge, u8, Edge);

    #[derive(Trace)]
    struct Unit;

    #[derive(Trace)]
    enum Never {}

    #[test]
    fn derived_tuple_and_unit_structs() {
        assert_eq!(edges(&Tuple(Edge(1), 0, Edge(2))), [1, 2]);
        assert_eq!(edges(&Unit), [] as [usize; 0]);
        assert!(!needs_trace::<Unit>());
        assert!(!needs_trace::<Never>());
    }

    #[derive(Trace)]
    struct Generic<'a, T, const N: usize>
    where
        T: Sync,
    {
        items: [T; N],
        by_key: HashMap<u32, T>,
        name: &'static str,
        _borrowed: PhantomData<&'a ()>,
    }

    #[test]
    fn derived_generic_follows_its_parameter() {
        let value = Generic {
            items: [Edge(1), Edge(2)],
            by_key: HashMap::from([(10, Edge(3))]),
            name: "g",
            _borrowed: PhantomData,
        };
        assert_eq!(edges(&value), [1, 2, 3]);
        assert!(needs_trace::<Generic<'_, Edge, 2>>());
        assert!(!needs_trace::<Generic<'_, u8, 2>>());
    }

    #[test]
    fn containers_reach_every_element() {
        let map: HashMap<u32, Edge> = (0..10).map(|i| (i, Edge(100 + i as usize))).collect();
        assert_eq!(sorted(edges(&map)), (100..110).collect::<Vec<_>>());

        let keyed = HashMap::from([(Edge(1), Edge(2))]);
        assert_eq!(edges(&keyed), [1, 2]);

        let tree = BTreeMap::from([(Edge(2), 20_u8), (Edge(1), 10)]);
        assert_eq!(edges(&tree), [1, 2]);
        let tree_of_values = BTreeMap::from([(2_u8, Edge(20)), (1, Edge(10))]);
        assert_eq!(edges(&tree_of_values), [10, 20]);

        let set: HashSet<Edge> = [Edge(1), Edge(2)].into_iter().collect();
        assert_eq!(sorted(edges(&set)), [1, 2]);
        assert_eq!(edges(&BTreeSet::from([Edge(4), Edge(3)])), [3, 4]);

        let deque: VecDeque<Option<Edge>> = VecDeque::from([Some(Edge(1)), None, Some(Edge(2))]);
        assert_eq!(edges(&deque), [1, 2]);

        let results: Vec<Result<Edge, Edge>> = vec![Ok(Edge(1)), Err(Edge(2))];
        assert_eq!(edges(&results), [1, 2]);

        let boxed: Box<[Edge]> = vec![Edge(5), Edge(6)].into_boxed_slice();
        assert_eq!(edges(&boxed), [5, 6]);

        let shared = Arc::new(Edge(8));
        assert_eq!(edges(&(Arc::clone(&shared), shared)), [8, 8]);

        let tuple = (Edge(1), 2_u8, Edge(3), 4_i64, Edge(5), (), 'c', Edge(8));
        assert_eq!(edges(&tuple), [1, 3, 5, 8]);
    }

    #[test]
    fn leaf_struct_reports_nothing() {
        let leaf = Leaf {
            id: 1,
            name: "leaf".into(),
            ratio: (0.5, Some('x')),
            _created: std::time::Instant::now(),
        };
        assert_eq!(edges(&leaf), [] as [usize; 0]);
        assert_eq!(edges(&vec![leaf]), [] as [usize; 0]);
    }

    #[test]
    fn needs_trace_propagates() {
        assert!(!needs_trace::<Leaf>(), "a struct of leaves needs no trace");
        assert!(!needs_trace::<Vec<Leaf>>());
        assert!(!needs_trace::<HashMap<String, Vec<Option<u64>>>>());
        assert!(!needs_trace::<(u8, String, Box<str>, Duration)>());
        assert!(!needs_trace::<Mutex<Vec<u8>>>());
        assert!(!needs_trace::<RwLock<String>>());
        assert!(!needs_trace::<(
            atomic::AtomicUsize,
            atomic::AtomicPtr<u8>,
            NonZeroU32,
            PhantomData<Edge>,
            &'static str,
        )>());
        assert!(needs_trace::<HashMap<String, Edge>>());
        assert!(needs_trace::<HashMap<Edge, u8>>());
        assert!(needs_trace::<Result<u8, Edge>>());
        assert!(needs_trace::<(u8, u8, u8, u8, u8, u8, u8, Edge)>());
        assert!(needs_trace::<[Option<Arc<Edge>>; 3]>());
    }

    /// A recursive type: `NEEDS_TRACE` would be a cycle if the derive ORed
    /// `Box<Self>`'s answer, so it counts such a field as `true`.
    #[derive(Trace)]
    enum Expr {
        Lit(i64),
        Add(Box<Expr>, Box<Self>),
        Ref(Edge),
    }

    #[test]
    fn recursive_types_compile_and_trace() {
        let expr = Expr::Add(Box::new(Expr::Ref(Edge(1))), Box::new(Expr::Lit(2)));
        assert_eq!(edges(&vec![expr]), [1]);
        assert!(needs_trace::<Expr>());
    }
}
