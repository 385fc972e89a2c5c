//! Barrier cells: [`GcCell`] and [`GcLock`], the only way to store a managed
//! pointer into an object after it was allocated.
//!
//! Every write takes the `&Mutation<'gc>` of the call, which is where the
//! write barrier lives, and no write can go around it (an object is only
//! ever reached through `&T`, and `Cell`, `RefCell` and locks of
//! non-`'static` data are not `Trace`). Between marks the barrier serves
//! minor cycles: a [`GcCell`] store marks the objects it stores and
//! remembers the newly marked ones (an old object may now point to them); a
//! [`GcLock`] write makes the next cycle a full one. During a concurrent
//! mark it keeps the snapshot: a [`GcCell`] store shades the old value and
//! the new one, a [`GcLock`] write shades the old contents (once per mark)
//! before it writes. Both cells are also what makes a concurrent mark free
//! of data races: a marker reads a `GcCell` atomically and a `GcLock` under
//! its lock.

use crate::mutator::Mutation;
use crate::trace::{Trace, Tracer};
use crossbeam_utils::atomic::AtomicCell;
use parking_lot::{RwLock, RwLockReadGuard};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The barrier of a store of `new` over `old` into a barrier cell: see
/// [`Mutation::barrier_store`].
#[inline(always)]
fn barrier<T: Trace + ?Sized>(mc: &Mutation<'_>, old: &T, new: &T) {
    mc.barrier_store(old, new);
}

/// A `Copy` value an object can change in place, such as
/// `Option<Gc<'gc, T>>`: lock-free for word-sized values.
///
/// # Examples
/// ```
/// use loam_runtime::{Gc, GcCell, Runtime, Trace};
///
/// #[derive(Trace)]
/// struct Slot<'gc> {
///     item: GcCell<Option<Gc<'gc, u32>>>,
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
pub struct GcCell<T: Copy> {
    value: AtomicCell<T>,
}

impl<T: Copy> GcCell<T> {
    /// A cell holding `value` (no barrier: the cell is not in the heap yet).
    pub const fn new(value: T) -> Self {
        GcCell {
            value: AtomicCell::new(value),
        }
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> T {
        self.value.load()
    }
}

impl<T: Copy + Trace> GcCell<T> {
    /// Stores `value`, through the write barrier.
    #[inline]
    pub fn set(&self, mc: &Mutation<'_>, value: T) {
        let old = self.value.swap(value);
        barrier(mc, &old, &value);
    }

    /// Stores `value` and returns the old one, through the write barrier.
    #[inline]
    pub fn replace(&self, mc: &Mutation<'_>, value: T) -> T {
        let old = self.value.swap(value);
        barrier(mc, &old, &value);
        old
    }
}

impl<T: Copy + fmt::Debug> fmt::Debug for GcCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("GcCell").field(&self.get()).finish()
    }
}

impl<T: Copy + Default> Default for GcCell<T> {
    fn default() -> Self {
        GcCell::new(T::default())
    }
}

// SAFETY: traces the value the cell holds now (1); loading is pure (2); needs
// tracing when `T` does (3); no `Drop` of its own (4).
unsafe impl<T: Copy + Trace> Trace for GcCell<T> {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE;

    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        self.get().trace(tracer)
    }
}

/// Any value an object can change in place (a `Vec` of pointers, a map):
/// readers share, a writer goes through [`write`](GcLock::write), which
/// takes the `Mutation` (the barrier).
///
/// # Examples
/// ```
/// use loam_runtime::{Gc, GcLock, Runtime, Trace};
///
/// #[derive(Trace)]
/// struct Bag<'gc> {
///     items: GcLock<Vec<Gc<'gc, String>>>,
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
pub struct GcLock<T> {
    value: RwLock<T>,
    /// The concurrent mark whose snapshot this lock's contents were last
    /// shaded for (0: none yet): a write shades them once per mark, not
    /// once per write (a list's pushes would each cost its length).
    shaded: AtomicU64,
}

impl<T> GcLock<T> {
    /// A lock holding `value`.
    pub const fn new(value: T) -> Self {
        GcLock {
            value: RwLock::new(value),
            shaded: AtomicU64::new(0),
        }
    }

    /// Shared access; blocks while a writer holds the lock.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.value.read()
    }

    /// Consumes the lock, returning the value.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: Trace> GcLock<T> {
    /// Runs `f` with exclusive access, through the write barrier (which
    /// makes the next cycle a full one: see the comment inside).
    pub fn write<R>(&self, mc: &Mutation<'_>, f: impl FnOnce(&mut T) -> R) -> R {
        let mut g = self.value.write();
        let epoch = mc.marking();
        // A concurrent mark is under way: the snapshot needs whatever the
        // contents point to now, before `f` may drop it. Under the write
        // lock, so no other writer slips in between; a marker reads the
        // contents under the read lock, so it sees them before or after.
        if T::NEEDS_TRACE && epoch != 0 && self.shaded.load(Ordering::Relaxed) != epoch {
            mc.shade(&*g);
            self.shaded.store(epoch, Ordering::Relaxed);
        }
        let r = f(&mut g);
        // Marking what `f` stored would take a walk of the whole contents
        // per write (a list's push would cost its length), and the lock's
        // address cannot be recorded instead: it may be a local of the
        // `mutate` call, gone by the next pause. So a write makes the next
        // cycle a full one. (A per-object barrier, gc-arena's `Gc::write`,
        // would lift this; concurrent marking needs one anyway.)
        mc.barrier_lock::<T>();
        r
    }

    /// Replaces the value, through the write barrier.
    pub fn set(&self, mc: &Mutation<'_>, value: T) -> T {
        self.write(mc, |v| std::mem::replace(v, value))
    }
}

impl<T: fmt::Debug> fmt::Debug for GcLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("GcLock").field(&*self.read()).finish()
    }
}

impl<T: Default> Default for GcLock<T> {
    fn default() -> Self {
        GcLock::new(T::default())
    }
}

// SAFETY: traces the current contents under a read lock (1, 2): a writer
// holding the lock makes a concurrent marker wait, never race. (A writer
// cannot wait for the marker in turn: nothing inside `mutate` waits for a
// mark to end.) Needs tracing when `T` does (3); no `Drop` of its own (4).
unsafe impl<T: Trace> Trace for GcLock<T> {
    const NEEDS_TRACE: bool = T::NEEDS_TRACE;

    fn trace(&self, tracer: &mut Tracer) {
        self.value.read().trace(tracer)
    }
}
