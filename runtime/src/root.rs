//! Roots: [`Root`] (a slot in one mutator's table) and [`GlobalRoot`] (a
//! slot in the runtime's, `Send + Sync`), named through [`Rootable`].

use crate::gc::{Gc, Managed};
use crate::mutator::{Mutation, Mutator, MutatorShared};
use crate::runtime::Handle;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The lock of root table `table` of runtime `shared`, which hands slots
/// out and takes them back; a wait for it (the collector holds it as it
/// copies the table in its cycles' starts) counted as a hold of the
/// caller's mutator.
fn counted<'t>(shared: &crate::runtime::Shared, table: &'t RootTable) -> parking_lot::MutexGuard<'t, Alloc> {
    // The global table is every mutator's; a mutator's own, the collector's
    // besides.
    let walked = std::ptr::eq(table, &shared.globals).then_some(&shared.globals_walked);
    crate::mutator::take_counting(shared, walked, || table.alloc.try_lock(), || table.alloc.lock())
}

/// Names a managed type with its brand abstracted: `Root` is the type for a
/// given `'a`. Write it with the [`Rootable!`](crate::Rootable!) macro.
pub trait Rootable<'a> {
    /// The type branded `'a`.
    type Root: ?Sized + 'a;
}

/// The type `dyn for<'gc> Rootable<'gc, Root = T>`: a [`Rootable`] for
/// `T`, whose brand is the lifetime named before `=>`.
///
/// ```
/// use loam_runtime::{Gc, Rootable, Trace};
///
/// #[derive(Trace)]
/// struct Node<'gc> {
///     next: Option<Gc<'gc, Node<'gc>>>,
/// }
/// type NodeRoot = Rootable!['gc => Node<'gc>];
/// type CountRoot = Rootable![u64]; // no brand to name: `Rootable!['gc => u64]`
/// ```
#[macro_export]
macro_rules! Rootable {
    ($gc:lifetime => $root:ty) => {
        dyn for<$gc> $crate::Rootable<$gc, Root = $root>
    };
    ($root:ty) => {
        dyn for<'__unbranded> $crate::Rootable<'__unbranded, Root = $root>
    };
}

/// A managed type whose brand the compiler can abstract by itself, so that
/// [`Root::of`] and [`GlobalRoot::of`] root a `Gc` without the
/// [`Rootable!`](crate::Rootable!) type written out: `Unbranded` is `Self`
/// with its brand `'gc` made a parameter again.
///
/// `#[derive(Trace)]` implements it for a type with at most one lifetime
/// (its brand) whose type parameters are `'static`; the runtime for
/// `'static` leaf types (numbers, `bool`, `char`, `String`, `Box`, `Vec`,
/// `Option` of `'static` types, and managed arrays `[T]` and `str`); the
/// collections for theirs where the element types allow it.
///
/// ```
/// use loam_runtime::{Gc, Root, Runtime, Trace};
///
/// #[derive(Trace)]
/// struct Node<'gc> {
///     value: u32,
///     next: Option<Gc<'gc, Node<'gc>>>,
/// }
///
/// let rt = Runtime::new();
/// let mut m = rt.attach();
/// let head = m.mutate(|mc| {
///     let tail = mc.alloc(Node { value: 2, next: None });
///     Root::of(mc, mc.alloc(Node { value: 1, next: Some(tail) }))
/// });
/// let count = m.mutate(|mc| *Root::of(mc, mc.alloc(7_u64)).get(mc));
/// assert_eq!(count, 7);
/// assert_eq!(m.mutate(|mc| head.get(mc).next.unwrap().value), 2);
/// ```
/// # Safety
/// `<Self::Unbranded as Rootable<'gc>>::Root` is `Self`: a root made from
/// a `Gc<'gc, Self>` hands the object back as that type.
pub unsafe trait Rebrand<'gc> {
    /// `Self` with its brand abstracted.
    type Unbranded: ?Sized + for<'a> Rootable<'a>;
}

/// `Rebrand` for `'static` types: nothing to abstract.
macro_rules! rebrand_static {
    ($($ty:ty),* $(,)?) => {
        // SAFETY: `Root = $ty` at every brand.
        $(unsafe impl<'gc> Rebrand<'gc> for $ty {
            type Unbranded = dyn for<'a> Rootable<'a, Root = $ty>;
        })*
    };
}

rebrand_static!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64, bool, char, (),
    String, str
);

// SAFETY: `Root` is the same `'static` type at every brand.
unsafe impl<'gc, T: 'static> Rebrand<'gc> for [T] {
    type Unbranded = dyn for<'a> Rootable<'a, Root = [T]>;
}

// SAFETY: `Root` is the same `'static` type at every brand.
unsafe impl<'gc, T: 'static, const N: usize> Rebrand<'gc> for [T; N] {
    type Unbranded = dyn for<'a> Rootable<'a, Root = [T; N]>;
}

// SAFETY: `Root` is the same `'static` type at every brand.
unsafe impl<'gc, T: ?Sized + 'static> Rebrand<'gc> for Box<T> {
    type Unbranded = dyn for<'a> Rootable<'a, Root = Box<T>>;
}

// SAFETY: `Root` is the same `'static` type at every brand.
unsafe impl<'gc, T: 'static> Rebrand<'gc> for Vec<T> {
    type Unbranded = dyn for<'a> Rootable<'a, Root = Vec<T>>;
}

// SAFETY: `Root` is the same `'static` type at every brand.
unsafe impl<'gc, T: 'static> Rebrand<'gc> for Option<T> {
    type Unbranded = dyn for<'a> Rootable<'a, Root = Option<T>>;
}

/// A slab of object addresses (0 = free slot). A root's `get` and `set`
/// are one atomic access to its slot, with no lock (`root_slots.rs`); the
/// lock is for handing slots out and taking them back, and for the
/// collector's copy of the whole table.
pub(crate) struct RootTable {
    slots: crate::root_slots::Slots,
    pub(crate) alloc: parking_lot::Mutex<Alloc>,
}

/// A root table's slots handed out, and the free ones among them.
#[derive(Default)]
pub(crate) struct Alloc {
    len: usize,
    free: Vec<u32>,
}

impl Default for RootTable {
    fn default() -> Self {
        RootTable {
            slots: crate::root_slots::Slots::new(),
            alloc: parking_lot::Mutex::new(Alloc::default()),
        }
    }
}

impl fmt::Debug for RootTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RootTable").finish_non_exhaustive()
    }
}

impl RootTable {
    /// A slot holding `addr`, handed out under the lock `a` (this table's:
    /// its caller holds it, so that `GlobalRoot::clone` reads the slot it
    /// copies and inserts the copy in one step, which no copy of the table
    /// by the collector can fall between).
    fn insert(&self, a: &mut Alloc, addr: usize) -> u32 {
        debug_assert!(addr != 0);
        if let Some(i) = a.free.pop() {
            self.slots.set(i as usize, addr);
            return i;
        }
        let i = u32::try_from(a.len).expect("loam: more than 2^32 roots");
        self.slots.grow_to(a.len);
        self.slots.set(a.len, addr);
        a.len += 1;
        // Room for every slot in `free`, taken here, where a root is made:
        // dropping a root (`remove`) then never allocates, so it cannot
        // fail for want of memory in a destructor.
        a.free.reserve(a.len - a.free.len());
        i
    }

    fn get(&self, i: u32) -> usize {
        self.slots.get(i as usize)
    }

    fn set(&self, i: u32, addr: usize) {
        self.slots.set(i as usize, addr);
    }

    /// Frees slot `i`, under the lock `a` (this table's).
    fn remove(&self, a: &mut Alloc, i: u32) {
        self.slots.set(i as usize, 0);
        a.free.push(i);
    }

    /// Appends the rooted addresses to `out`, copied under the table's
    /// lock (no slot is handed out or taken back meanwhile, and a clone's
    /// read and insert are one step; a `set` during a mark shades what it
    /// stores).
    pub(crate) fn live_into(&self, out: &mut Vec<usize>) {
        let a = self.alloc.lock();
        out.extend((0..a.len).map(|i| self.slots.get(i)).filter(|&x| x != 0));
    }
}

fn check_runtime(rooted: &Handle, mc: &Mutation<'_>) {
    assert!(
        std::ptr::eq(&*rooted.shared, mc.shared()),
        "loam: a root of one runtime was read through a mutator of another"
    );
}

/// Keeps one object alive across `mutate` calls: a slot in the mutator's
/// root table, freed when the `Root` drops. `!Send` (it belongs to its
/// thread's mutator); share objects between threads with [`GlobalRoot`].
///
/// # Examples
/// ```
/// use loam_runtime::{Root, Rootable, Runtime};
///
/// let rt = Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// let r: Root<Rootable!['gc => String]> = m.mutate(|mc| mc.root(mc.alloc("kept".to_string())));
/// m.collect();
/// m.mutate(|mc| assert_eq!(*r.get(mc), "kept"));
/// ```
///
/// It cannot go to another thread:
/// ```compile_fail
/// # use loam_runtime::{Root, Rootable, Runtime};
/// # let rt = Runtime::builder().gc_threads(1).build();
/// # let mut m = rt.attach();
/// let r: Root<Rootable!['gc => u8]> = m.mutate(|mc| mc.root(mc.alloc(1)));
/// std::thread::spawn(move || drop(r));
/// ```
pub struct Root<R: ?Sized + for<'a> Rootable<'a>> {
    owner: Arc<MutatorShared>,
    handle: Arc<Handle>,
    index: u32,
    /// Invariant in `R` (and `!Send`): `get` hands the object back as
    /// `R`'s `Root`, an associated type, which two types related by
    /// subtyping may name differently (`Rootable` is a safe trait, and
    /// rustc accepts impls for `for<'x> fn(&'x ())` and `fn(&'static ())`
    /// side by side). Covariant, a root made under one was read under the
    /// other: an integer handed back as a `Gc`.
    _type: PhantomData<*mut R>,
}

impl<R: ?Sized + for<'a> Rootable<'a>> Root<R> {
    /// Roots `gc` in this mutator's table, as [`Mutation::root`], with the
    /// root's type inferred from the object's ([`Rebrand`]):
    /// `let head = Root::of(mc, tree);`.
    pub fn of<'gc, T>(mc: &Mutation<'gc>, gc: Gc<'gc, T>) -> Root<R>
    where
        T: ?Sized + Rebrand<'gc, Unbranded = R> + Managed,
    {
        // `R::Root` at `'gc` is `T` (`Rebrand`'s contract), so `get` hands
        // back the object as the type it was rooted as.
        mc.barrier_root(gc.addr());
        Root::new(mc.mutator(), gc.addr())
    }

    pub(crate) fn new(m: &Mutator, addr: usize) -> Self {
        let index = m.me.roots.insert(&mut counted(m.shared(), &m.me.roots), addr);
        crate::mutator::count_root(m.shared().id, true);
        Root {
            owner: m.me.clone(),
            handle: m.handle.clone(),
            index,
            _type: PhantomData,
        }
    }

    /// The rooted object, for this `mutate` call.
    ///
    /// # Panics
    /// If `mc` belongs to another runtime.
    pub fn get<'gc>(&self, mc: &Mutation<'gc>) -> Gc<'gc, <R as Rootable<'gc>>::Root>
    where
        <R as Rootable<'gc>>::Root: Managed,
    {
        check_runtime(&self.handle, mc);
        let addr = self.owner.roots.get(self.index);
        // SAFETY: the slot holds a rooted object of this runtime (checked
        // above) of type `R::Root` under some brand; brands do not change
        // layout. The root kept it alive until now, and from here this call
        // holds it, which keeps it alive past `'gc` even if the root is
        // dropped or set meanwhile (no cycle frees what a call holds before
        // the call returns, `barrier.rs`).
        unsafe { Gc::from_addr(addr) }
    }

    /// Points the root at another object.
    ///
    /// # Panics
    /// If `mc` belongs to another runtime.
    pub fn set<'gc>(&self, mc: &Mutation<'gc>, gc: Gc<'gc, <R as Rootable<'gc>>::Root>)
    where
        <R as Rootable<'gc>>::Root: Managed,
    {
        check_runtime(&self.handle, mc);
        mc.barrier_root(gc.addr());
        self.owner.roots.set(self.index, gc.addr());
        self.handle.shared.roots_changed.fetch_add(1, Ordering::Relaxed);
    }
}

impl<R: ?Sized + for<'a> Rootable<'a>> Drop for Root<R> {
    fn drop(&mut self) {
        // A forked child leaks (`forked.rs`): the collector may have held
        // the table's lock at the fork.
        if crate::forked::since(self.handle.shared.born) {
            return;
        }
        let roots = &self.owner.roots;
        roots.remove(&mut counted(&self.handle.shared, roots), self.index);
        self.handle.shared.roots_changed.fetch_add(1, Ordering::Relaxed);
        crate::mutator::count_root(self.handle.shared.id, false);
    }
}

impl<R: ?Sized + for<'a> Rootable<'a>> fmt::Debug for Root<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Root").field("index", &self.index).finish()
    }
}

/// Keeps one object alive for as long as it exists, from any thread: a slot
/// in the runtime's global root table. `Send + Sync` and `Clone` (each clone
/// is a slot of its own).
///
/// # Examples
/// ```
/// use loam_runtime::{GlobalRoot, Rootable, Runtime};
///
/// let rt = Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// let shared: GlobalRoot<Rootable!['gc => Vec<u32>]> =
///     m.mutate(|mc| mc.global_root(mc.alloc(vec![1, 2, 3])));
/// let rt2 = rt.clone();
/// let sum = std::thread::spawn(move || {
///     let mut m = rt2.attach();
///     m.mutate(|mc| shared.get(mc).iter().sum::<u32>())
/// })
/// .join()
/// .unwrap();
/// assert_eq!(sum, 6);
/// ```
pub struct GlobalRoot<R: ?Sized + for<'a> Rootable<'a>> {
    handle: Arc<Handle>,
    index: u32,
    /// Invariant in `R`, as [`Root`]'s (`Send` and `Sync` are below).
    _type: PhantomData<fn(Box<R>) -> Box<R>>,
}

// SAFETY: the slot is in the runtime's locked table, and the object it
// names is `Send + Sync` (every `Trace` type is); reading it needs a
// `Mutation` of the same runtime, checked at run time.
unsafe impl<R: ?Sized + for<'a> Rootable<'a>> Send for GlobalRoot<R> {}
// SAFETY: as above.
unsafe impl<R: ?Sized + for<'a> Rootable<'a>> Sync for GlobalRoot<R> {}

impl<R: ?Sized + for<'a> Rootable<'a>> GlobalRoot<R> {
    /// Roots `gc` in the runtime's table, as [`Mutation::global_root`],
    /// with the root's type inferred from the object's ([`Rebrand`]).
    pub fn of<'gc, T>(mc: &Mutation<'gc>, gc: Gc<'gc, T>) -> GlobalRoot<R>
    where
        T: ?Sized + Rebrand<'gc, Unbranded = R> + Managed,
    {
        // As in `Root::of`.
        mc.barrier_root(gc.addr());
        GlobalRoot::new(mc.mutator().handle.clone(), gc.addr())
    }

    pub(crate) fn new(handle: Arc<Handle>, addr: usize) -> Self {
        let globals = &handle.shared.globals;
        let index = globals.insert(&mut counted(&handle.shared, globals), addr);
        GlobalRoot {
            handle,
            index,
            _type: PhantomData,
        }
    }

    /// The rooted object, for this `mutate` call.
    ///
    /// # Panics
    /// If `mc` belongs to another runtime.
    pub fn get<'gc>(&self, mc: &Mutation<'gc>) -> Gc<'gc, <R as Rootable<'gc>>::Root>
    where
        <R as Rootable<'gc>>::Root: Managed,
    {
        check_runtime(&self.handle, mc);
        let addr = self.handle.shared.globals.get(self.index);
        // SAFETY: as in `Root::get`.
        unsafe { Gc::from_addr(addr) }
    }

    /// Points the root at another object.
    ///
    /// # Panics
    /// If `mc` belongs to another runtime.
    pub fn set<'gc>(&self, mc: &Mutation<'gc>, gc: Gc<'gc, <R as Rootable<'gc>>::Root>)
    where
        <R as Rootable<'gc>>::Root: Managed,
    {
        check_runtime(&self.handle, mc);
        mc.barrier_root(gc.addr());
        self.handle.shared.globals.set(self.index, gc.addr());
        self.handle.shared.roots_changed.fetch_add(1, Ordering::Relaxed);
    }
}

impl<R: ?Sized + for<'a> Rootable<'a>> Clone for GlobalRoot<R> {
    fn clone(&self) -> Self {
        let globals = &self.handle.shared.globals;
        let mut a = counted(&self.handle.shared, globals);
        let index = globals.insert(&mut a, globals.get(self.index));
        drop(a);
        GlobalRoot {
            handle: self.handle.clone(),
            index,
            _type: PhantomData,
        }
    }
}

impl<R: ?Sized + for<'a> Rootable<'a>> Drop for GlobalRoot<R> {
    fn drop(&mut self) {
        // As `Root::drop`: a forked child leaks.
        if crate::forked::since(self.handle.shared.born) {
            return;
        }
        let globals = &self.handle.shared.globals;
        globals.remove(&mut counted(&self.handle.shared, globals), self.index);
        self.handle.shared.roots_changed.fetch_add(1, Ordering::Relaxed);
    }
}

impl<R: ?Sized + for<'a> Rootable<'a>> fmt::Debug for GlobalRoot<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalRoot")
            .field("index", &self.index)
            .finish()
    }
}
