//! [`GcDictionary`]: a hash map in the managed heap.
//!
//! Layout: dense entries plus an open-addressed index, as CPython's dict
//! and the `indexmap` crate have it. `entries` is a managed array of
//! `(hash, key, value)` cells, in insertion order, whose first `len` are in
//! use; `indices` is a managed array of one word per slot (a power of two of
//! them, at most three quarters full), each 0 (empty) or the entry's number
//! plus one beside the top 32 bits of its hash, probed linearly; a removal
//! shifts the probe run back, so there are no tombstones.
//!
//! Why this shape rather than .NET's buckets with chained entries: both
//! keep entries dense (iteration walks one array, and growth copies it with
//! no rehash of keys), but chains cost a dependent load per collision and a
//! free list whose holes iteration must skip; the index probes adjacent
//! words, and the stored hash bits reject almost every wrong slot without
//! loading its entry. Why not entries inline in an open-addressed table
//! (hashbrown's shape): every slot would then hold a key and a value, which
//! for an empty slot must still be valid managed values (a managed array's
//! elements are always initialised and traced), so a table at 3/4 load
//! would carry a quarter of dead entries for the collector to trace.
//!
//! Removal moves the last entry into the removed one's place (O(1)), so
//! iteration is in insertion order until the first removal.

use crate::lock::{WriterGuard, WriterLock};
use loam_runtime::{AllocError, CellValue, Gc, GcCards, GcCell, GcLog, Mutation, Trace, Tracer};
use std::ops::Range;
use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};

/// The default hasher: foldhash's fast hasher, seeded per dictionary.
pub type FastHash = foldhash::fast::RandomState;

/// SipHash 1-3, randomly seeded: std's `HashMap` default, for keys an
/// adversary chooses.
pub type SipHash = std::collections::hash_map::RandomState;

/// One entry: the key's full hash (for growth without rehashing), the key,
/// the value. The entries array does not trace its entries: the dictionary
/// traces those in use (as a list traces its slots, `list.rs`), so an entry
/// cut off the end needs no overwriting to let its key and value go.
pub(crate) struct Entry<'gc, K: CellValue + Trace + 'gc, V: CellValue + Trace + 'gc> {
    hash: GcCell<'gc, u64>,
    key: GcCell<'gc, K>,
    value: GcCell<'gc, V>,
}

// SAFETY: reports nothing (3: `NEEDS_TRACE` false), so an entries array
// is never scanned; the one dictionary that owns it reports the keys and
// values of the entries in use (`DictObj`'s impl): cells of another object
// reported by their owner, which item 1 allows because every store into
// them goes through `set_recorded` and its kin (never `GcCell::set`), and
// because no other object reaches the array. No `Drop` (4).
unsafe impl<'gc, K: CellValue + Trace + 'gc, V: CellValue + Trace + 'gc> Trace
    for Entry<'gc, K, V>
{
    const NEEDS_TRACE: bool = false;

    fn trace(&self, _: &mut Tracer) {}
}

impl<'gc, K: CellValue + Trace + 'gc, V: CellValue + Trace + 'gc> Entry<'gc, K, V> {
    /// During a concurrent mark, the deletion barrier for the key and the
    /// value: the entry is being cut off (see `list.rs`, `shade_cut`).
    fn shade_cut(&self, mc: &Mutation<'gc>) {
        if (K::NEEDS_TRACE || V::NEEDS_TRACE) && mc.is_marking() {
            self.key.cut(mc);
            self.value.cut(mc);
        }
    }

    fn new(hash: u64, key: K, value: V) -> Self {
        Entry {
            hash: GcCell::new(hash),
            key: GcCell::new(key),
            value: GcCell::new(value),
        }
    }
}

type Entries<'gc, K, V> = Gc<'gc, [Entry<'gc, K, V>]>;
type Indices<'gc> = Gc<'gc, [GcCell<'gc, u64>]>;

/// The managed object behind a [`GcDictionary`].
///
/// # Invariants
/// - `len <= entries.len()` whenever the writer lock is free (readers clamp);
///   entries `0..len` are in use and reported by the trace, the rest hold
///   values nothing reports.
/// - `indices.len()` is 0 or a power of two, at most three quarters full:
///   each in-use entry `e` has exactly one slot, `slot(hash, e)`, on the
///   probe run from `hash & mask` with no empty slot between.
/// - `moves` is odd exactly while entries or slots are being moved.
/// - Every store happens under the writer lock, after `log.record`.
/// - `min_capacity` may pass `entries.len()` (`with_capacity`, `reserve`
///   on an empty dictionary): `capacity` counts it, and the next insert
///   into an empty dictionary, or into a full array, grows the array to
///   it at least (an array's spare entries are copies of an entry, which
///   an empty dictionary does not have to make one before).
pub(crate) struct DictObj<'gc, K, V, S>
where
    K: CellValue + Trace + 'gc,
    V: CellValue + Trace + 'gc,
    S: Send + Sync + 'static,
{
    /// Records the dictionary for the next minor cycle when it changes, so
    /// that stores into its arrays promote nothing (`write_lock`).
    log: GcLog<'gc>,
    /// Which entries changed since a marker last traced them, so that a
    /// minor cycle traces again only those parts of a large dictionary
    /// (`GcCards`): every store of a key or a value into an entry touches
    /// its card, in the store's call, before the store's shade
    /// (`DictObj::touch`).
    cards: GcCards,
    /// Counts the changes that move entries or empty index slots (removal,
    /// `retain`, `clear`): odd while one is under way. Lock-free lookups
    /// read it before and after, and look again if it moved (a seqlock on
    /// moves only: inserts and value updates never move an entry).
    moves: GcCell<'gc, u64>,
    len: GcCell<'gc, usize>,
    /// Entries past `len` hold values the dictionary no longer reaches.
    entries: GcCell<'gc, Entries<'gc, K, V>>,
    indices: GcCell<'gc, Indices<'gc>>,
    /// `'static`, so it holds no managed pointer.
    hasher: S,
    /// The entries the next array holds at least (`with_capacity`, and
    /// `reserve` on an empty dictionary): the array is made by an insert,
    /// whose entry fills its spare slots.
    min_capacity: GcCell<'gc, usize>,
    writer: WriterLock,
}

// SAFETY: reports both arrays and the keys and values of the entries in
// use (1), read through their cells (2) with `get` (acquire), which serves
// here as in `ListObj`'s impl (no store into them is a `GcCell::set`);
// always needs tracing (3); no
// `Drop` of its own, and the hasher's is `'static` code that cannot reach
// managed objects (4).
// (Written by hand: the derive would ask for `S: Trace`.)
unsafe impl<'gc, K, V, S> Trace for DictObj<'gc, K, V, S>
where
    K: CellValue + Trace + 'gc,
    V: CellValue + Trace + 'gc,
    S: Send + Sync + 'static,
{
    // In parts past two parts' worth of entries, as `ListObj` (`list.rs`):
    // part 0 the log (first), both arrays and, for a short dictionary,
    // every entry; part `k` the keys and values of a fixed range of
    // entries, read as the dictionary is then. A removal cuts what it
    // removes and moves the last entry into the hole under
    // `GcLog::moving`, which shades what it moved once a marker has met
    // the log.
    const TRACE_IN_PARTS: bool = K::NEEDS_TRACE || V::NEEDS_TRACE;

    fn trace_part(&self, part: usize, tracer: &mut Tracer) -> usize {
        if part == 0 {
            self.log.trace(tracer);
        }
        // `len` first, then the array, as readers do (`list.rs`).
        let len = self.len.get();
        let entries = self.entries.get();
        let in_use = &entries[..len.min(entries.len())];
        let parts = crate::list::parts_for(len);
        let traced = if part == 0 {
            entries.trace(tracer);
            self.indices.trace(tracer);
            if parts == 1 {
                in_use
            } else {
                // The cards changed since the last trace, for the later
                // parts (rule 7).
                self.cards.take(tracer);
                &[]
            }
        } else {
            let range = crate::list::part_range(in_use.len(), part);
            if self.cards.must_trace(tracer, range.clone()) {
                &in_use[range]
            } else {
                &[]
            }
        };
        for e in traced {
            e.key.get().trace(tracer);
            e.value.get().trace(tracer);
        }
        parts
    }

    fn trace(&self, tracer: &mut Tracer) {
        self.log.trace(tracer);
        // `len` first, then the array, as readers do (`list.rs`).
        let len = self.len.get();
        let entries = self.entries.get();
        entries.trace(tracer);
        self.indices.trace(tracer);
        if K::NEEDS_TRACE || V::NEEDS_TRACE {
            for e in &entries[..len.min(entries.len())] {
                e.key.get().trace(tracer);
                e.value.get().trace(tracer);
            }
        }
    }
}

impl<'gc, K, V, S> DictObj<'gc, K, V, S>
where
    K: CellValue + Trace + 'gc,
    V: CellValue + Trace + 'gc,
    S: Send + Sync + 'static,
{
    /// Marks entry `e`'s card changed (`GcCards`), for a dictionary whose
    /// keys or values can hold managed pointers (the others are traced
    /// whole). Every store of a key or a value into an entry does it, in
    /// the store's call.
    #[inline(always)]
    fn touch(&self, e: usize) {
        if K::NEEDS_TRACE || V::NEEDS_TRACE {
            self.cards.touch(e);
        }
    }

    /// [`touch`](Self::touch) for the entries of `range`.
    fn touch_range(&self, range: Range<usize>) {
        if K::NEEDS_TRACE || V::NEEDS_TRACE {
            self.cards.touch_range(range);
        }
    }
}

/// A hash map from `K` to `V` in the managed heap.
///
/// A handle (`Copy`, one word), rooted and stored like any `Gc`. Keys and
/// values are values that fit a cell: [`GcString`](crate::GcString),
/// `Gc<'gc, R>`, other collections' handles, primitives. Lookups take any
/// `Q` the key borrows as (`&str` for `GcString` keys). The hasher is
/// [`FastHash`] (foldhash) unless [`with_hasher`](Self::with_hasher) gives
/// another, such as [`SipHash`].
///
/// Iteration order is insertion order until the first removal; a removal
/// moves the last entry into the removed one's place.
///
/// # Examples
/// ```
/// use loam_collections::{GcDictionary, GcString};
///
/// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let ages = GcDictionary::new(mc);
///     ages.insert(mc, GcString::new(mc, "ada"), 36_u32);
///     ages.insert(mc, GcString::new(mc, "alan"), 41);
///     assert_eq!(ages.get("ada"), Some(36));
///     ages.entry(mc, GcString::new(mc, "alan")).and_modify(|v| v + 1).or_insert(0);
///     assert_eq!(ages.get("alan"), Some(42));
///     assert_eq!(ages.remove(mc, "ada"), Some(36));
///     assert_eq!(ages.len(), 1);
/// });
/// ```
#[repr(transparent)]
pub struct GcDictionary<'gc, K, V, S = FastHash>
where
    K: CellValue + Trace + 'gc,
    V: CellValue + Trace + 'gc,
    S: Send + Sync + 'static,
{
    obj: Gc<'gc, DictObj<'gc, K, V, S>>,
}

impl<'gc, K, V, S> Clone for GcDictionary<'gc, K, V, S>
where
    K: CellValue + Trace + 'gc,
    V: CellValue + Trace + 'gc,
    S: Send + Sync + 'static,
{
    fn clone(&self) -> Self {
        *self
    }
}

impl<'gc, K, V, S> Copy for GcDictionary<'gc, K, V, S>
where
    K: CellValue + Trace + 'gc,
    V: CellValue + Trace + 'gc,
    S: Send + Sync + 'static,
{
}

// SAFETY: one `Gc`, a single pointer word with no padding.
unsafe impl<'gc, K, V, S> CellValue for GcDictionary<'gc, K, V, S>
where
    K: CellValue + Trace + 'gc,
    V: CellValue + Trace + 'gc,
    S: Send + Sync + 'static,
{
}

// SAFETY: `Unbranded` is `GcDictionary` with its one lifetime, the brand,
// bound by the `Rootable` parameter, and its `'static` key, value and
// hasher types as they are: its `Root` at `'gc` is `Self`. (Keys or values
// that carry the brand, such as `GcString`, need the `Rootable!` type
// written out.)
unsafe impl<'gc, K, V, S> loam_runtime::Rebrand<'gc> for GcDictionary<'gc, K, V, S>
where
    K: CellValue + Trace + 'static,
    V: CellValue + Trace + 'static,
    S: Send + Sync + 'static,
{
    type Unbranded = dyn for<'a> loam_runtime::Rootable<'a, Root = GcDictionary<'a, K, V, S>>;
}

// SAFETY: reports the one managed pointer it holds (1, 2, 3); no `Drop` (4).
unsafe impl<'gc, K, V, S> Trace for GcDictionary<'gc, K, V, S>
where
    K: CellValue + Trace + 'gc,
    V: CellValue + Trace + 'gc,
    S: Send + Sync + 'static,
{
    fn trace(&self, tracer: &mut Tracer) {
        self.obj.trace(tracer)
    }
}

/// The most entries a dictionary holds: an index slot names its entry in
/// its low 32 bits, as `e + 1` (0 is an empty slot).
const MAX_ENTRIES: usize = u32::MAX as usize - 1;

/// An index slot for entry `e` of hash `h`.
#[inline]
fn slot(h: u64, e: usize) -> u64 {
    (h & !0xffff_ffff) | (e as u64 + 1)
}

/// The entry an index slot names.
#[inline]
fn slot_entry(s: u64) -> usize {
    (s & 0xffff_ffff) as usize - 1
}

/// Whether slot `s` may hold hash `h` (its top 32 bits match).
#[inline]
fn slot_matches(s: u64, h: u64) -> bool {
    (s ^ h) >> 32 == 0
}

/// Index slots for `n` entries: a power of two, at most 3/4 full.
fn index_size(n: usize) -> usize {
    (n.saturating_mul(4) / 3 + 1).next_power_of_two().max(8)
}

#[cold]
#[inline(never)]
fn too_many_entries() -> ! {
    panic!("loam-collections: GcDictionary: capacity overflow (at most {MAX_ENTRIES} entries)")
}

#[cold]
#[inline(never)]
fn alloc_failed(what: &str, e: AllocError<()>) -> ! {
    panic!("loam-collections: GcDictionary::{what}: {e}")
}

impl<'gc, K, V> GcDictionary<'gc, K, V, FastHash>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
{
    /// An empty dictionary with the default hasher.
    pub fn new(mc: &Mutation<'gc>) -> Self {
        Self::with_hasher(mc, FastHash::default())
    }

    /// An empty dictionary with room for `capacity` entries before it
    /// grows: its index is made now, its entries on the first insert.
    ///
    /// # Examples
    /// ```
    /// # use loam_collections::GcDictionary;
    /// # let rt = loam_runtime::Runtime::new();
    /// # let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let d: GcDictionary<u64, u64> = GcDictionary::with_capacity(mc, 1000);
    ///     assert!(d.capacity() >= 1000);
    /// });
    /// ```
    pub fn with_capacity(mc: &Mutation<'gc>, capacity: usize) -> Self {
        Self::with_capacity_and_hasher(mc, capacity, FastHash::default())
    }

    /// A dictionary of the pairs of `iter`, with the default hasher (see
    /// [`extend`](Self::extend)).
    pub fn from_iter(mc: &Mutation<'gc>, iter: impl IntoIterator<Item = (K, V)>) -> Self {
        let d = Self::new(mc);
        d.extend(mc, iter);
        d
    }
}

impl<'gc, K, V, S> GcDictionary<'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    /// An empty dictionary hashing with `hasher`.
    pub fn with_hasher(mc: &Mutation<'gc>, hasher: S) -> Self {
        Self::with_capacity_and_hasher(mc, 0, hasher)
    }

    /// An empty dictionary hashing with `hasher`, with room for `capacity`
    /// entries before it grows (see [`with_capacity`]).
    ///
    /// [`with_capacity`]: GcDictionary::with_capacity
    pub fn with_capacity_and_hasher(mc: &Mutation<'gc>, capacity: usize, hasher: S) -> Self {
        let entry = std::mem::size_of::<Entry<'gc, K, V>>().max(1);
        assert!(
            capacity <= MAX_ENTRIES && capacity <= (isize::MAX as usize - 64) / entry,
            "loam-collections: GcDictionary::with_capacity({capacity}): capacity overflow"
        );
        let d = GcDictionary {
            obj: mc.alloc(DictObj {
                log: GcLog::new(),
                cards: GcCards::new(),
                moves: GcCell::new(0),
                len: GcCell::new(0),
                entries: GcCell::new(mc.alloc_from_iter(std::iter::empty())),
                indices: GcCell::new(mc.alloc_from_iter(std::iter::empty())),
                hasher,
                min_capacity: GcCell::new(capacity),
                writer: WriterLock::default(),
            }),
        };
        if capacity > 0 {
            let _w = d.write_lock(mc);
            let indices = mc.alloc_slice_fill(index_size(capacity), GcCell::new(0));
            // SAFETY: the log recorded (`write_lock`); the cell is reported.
            unsafe { d.obj.indices.set_recorded(mc, indices) };
        }
        d
    }

    /// How many entries it holds before it allocates again (its entries
    /// array or its index grows), as `HashMap::capacity`. The index grows
    /// once it is three quarters full, which comes first after an entries
    /// array doubled: counting the entries array alone said 8 where the
    /// seventh insert grew the index.
    pub fn capacity(&self) -> usize {
        let entries = self.obj.entries.get().len().max(self.obj.min_capacity.get());
        entries.min(self.obj.indices.get().len() * 3 / 4)
    }

    /// Makes room for `additional` more entries at least, so that
    /// inserting them allocates nothing, as `HashMap::reserve` (it may make
    /// more, to keep growth amortised). Except on an empty dictionary:
    /// there it makes the index now, and the first insert makes the
    /// entries array, as big as reserved, and may meet the heap limit (a
    /// managed array is initialised throughout, and its spare entries are
    /// copies of an entry, which an empty dictionary does not have).
    ///
    /// # Panics
    /// At the heap limit (the dictionary unchanged; see
    /// [`try_reserve`](Self::try_reserve)), or past 4,294,967,294 entries
    /// (capacity overflow).
    ///
    /// # Examples
    /// ```
    /// use loam_collections::GcDictionary;
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let d = GcDictionary::from_iter(mc, [(0_u64, 0_u64)]);
    ///     d.reserve(mc, 1000);
    ///     assert!(d.capacity() >= 1001);
    ///     let before = d.capacity();
    ///     d.extend(mc, (1..=1000).map(|i| (i, i * i)));
    ///     assert_eq!(d.capacity(), before, "no growth");
    /// });
    /// ```
    pub fn reserve(&self, mc: &Mutation<'gc>, additional: usize) {
        self.try_reserve(mc, additional)
            .unwrap_or_else(|e| alloc_failed("reserve", e));
    }

    /// [`reserve`](Self::reserve), or the heap-limit `Err` (or a
    /// capacity-overflow one, past 4,294,967,294 entries) with the
    /// dictionary unchanged, its capacity included. On a dictionary with
    /// entries, an `Ok` means that the next `additional` inserts allocate
    /// nothing, so none of them meets the heap limit.
    ///
    /// # Examples
    /// ```
    /// use loam_collections::GcDictionary;
    /// let rt = loam_runtime::Runtime::builder().heap_limit(64 << 20).gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let d = GcDictionary::from_iter(mc, [(0_u64, 0_u64)]);
    ///     d.try_reserve(mc, 10_000).expect("fits");
    ///     assert!(d.try_reserve(mc, 100 << 20).is_err(), "too large for the limit");
    ///     assert!(d.try_reserve(mc, usize::MAX).is_err(), "capacity overflow");
    ///     assert!(d.capacity() >= 10_001 && d.capacity() < 100 << 20);
    /// });
    /// ```
    pub fn try_reserve(&self, mc: &Mutation<'gc>, additional: usize) -> Result<(), AllocError<()>> {
        let _w = self.write_lock(mc);
        let len = self.obj.len.get();
        let Some(need) = len.checked_add(additional).filter(|&n| n <= MAX_ENTRIES) else {
            return Err(AllocError::capacity_overflow(()));
        };
        let entries = self.obj.entries.get();
        // Both arrays are made before either is installed, as in
        // `push_entry`.
        let grown = match entries.first() {
            Some(first) if len > 0 && need > entries.len() => {
                let cap = need.max(entries.len().saturating_mul(2)).min(MAX_ENTRIES);
                // Spare entries hold copies of the first.
                let spare = (first.hash.get(), first.key.get(), first.value.get());
                Some(Self::grown_entries(mc, entries, len, cap, spare)?)
            }
            _ => None,
        };
        let indices = self.obj.indices.get();
        // `need` past three quarters of the slots (exact: 0 or a power of
        // two of at least 8; no product to overflow).
        let fresh = if need > indices.len() / 4 * 3 {
            Some(Self::fresh_index(mc, entries, len, index_size(need))?)
        } else {
            None
        };
        // The lock and the log (`write_lock`, above); the arrays made just
        // above from the entries in use, as `install` asks.
        // SAFETY: as just said.
        unsafe { self.install(mc, grown, fresh) };
        if len == 0 && need > self.obj.min_capacity.get() {
            self.obj.min_capacity.set(mc, need);
        }
        Ok(())
    }

    /// Takes the writer lock and records the dictionary's log in this call:
    /// what lets the stores below use `GcCell::set_recorded` (the next
    /// minor cycle traces the dictionary again, so nothing it stores is
    /// promoted).
    fn write_lock<'a>(&'a self, mc: &Mutation<'gc>) -> WriterGuard<'a> {
        let guard = self.obj.writer.lock("GcDictionary");
        self.obj.log.record(mc);
        guard
    }

    /// Whether `a` and `b` are the same dictionary.
    pub fn ptr_eq(a: Self, b: Self) -> bool {
        Gc::ptr_eq(a.obj, b.obj)
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        let len = self.obj.len.get();
        len.min(self.obj.entries.get().len())
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, q: &Q) -> u64 {
        self.obj.hasher.hash_one(q)
    }

    /// The index slot, number and entry of `q` (hash `h`), if present.
    // Always inlined: called out of line from `get_key_value`'s retry loop
    // it spilled the arrays to the stack around the key comparison, and a
    // million look-ups ran slower (fewer of their cache misses in flight
    // at once, as far as a profile can tell). Look-ups alone
    // (`benches/collections.rs`, `dict_get`, builds alternated, three runs
    // each): 1.61x - 1.79x foldhash's `HashMap` before, 1.46x - 1.48x
    // after; `dict` unchanged.
    #[inline(always)]
    fn find<Q>(&self, q: &Q, h: u64) -> Option<(usize, usize, &'gc Entry<'gc, K, V>)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // `len`, then the arrays (`list.rs`, module docs).
        let len = self.obj.len.get();
        let entries = self.obj.entries.get();
        let indices = self.obj.indices.get();
        let len = len.min(entries.len());
        let n = indices.len();
        if n == 0 {
            return None;
        }
        let mask = n - 1;
        let mut pos = h as usize & mask;
        // At most once round: the table is never full, but a reader racing
        // a writer's shifts must still stop.
        for _ in 0..n {
            let s = indices[pos].get();
            if s == 0 {
                return None;
            }
            if slot_matches(s, h) {
                let e = slot_entry(s);
                if e < len {
                    let entry = &Gc::get(entries)[e];
                    if entry.key.get().borrow() == q {
                        return Some((pos, e, entry));
                    }
                }
            }
            pos = (pos + 1) & mask;
        }
        None
    }

    /// The value for `key`.
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_key_value(key).map(|(_, v)| v)
    }

    /// The stored key and the value for `key`.
    pub fn get_key_value<Q>(&self, key: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let h = self.hash(key);
        let mut spins = 0_u32;
        loop {
            let before = self.obj.moves.get();
            if before % 2 == 1 {
                // A removal on another thread is moving entries: brief,
                // but it may be descheduled, so back off to a yield.
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            let found = self
                .find(key, h)
                .map(|(_, _, entry)| (entry.key.get(), entry.value.get()));
            // No entry moved meanwhile (each load acquires, so these reads
            // happen before this one): what `find` saw was whole.
            if self.obj.moves.get() == before {
                return found;
            }
        }
    }

    /// Whether `key` is present.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_key_value(key).is_some()
    }

    /// Inserts `key` → `value`; returns the value it replaced (the stored
    /// key is kept, as std's `HashMap` does).
    ///
    /// # Panics
    /// At the heap limit (the dictionary unchanged; see [`try_insert`](Self::try_insert)),
    /// or with 4,294,967,294 entries already (capacity overflow; so does
    /// `try_insert`).
    pub fn insert(&self, mc: &Mutation<'gc>, key: K, value: V) -> Option<V> {
        self.try_insert(mc, key, value)
            .unwrap_or_else(|e| alloc_failed("insert", e.map(|_| ())))
    }

    /// Inserts every pair of `iter`, in order: a later pair's value
    /// replaces an earlier one's for the same key, as with
    /// `HashMap::extend`.
    ///
    /// # Panics
    /// At the heap limit, or if `iter` panics: the pairs inserted so far
    /// stay.
    ///
    /// # Examples
    /// ```
    /// use loam_collections::GcDictionary;
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let squares = GcDictionary::from_iter(mc, (1..=3_u64).map(|i| (i, i * i)));
    ///     squares.extend(mc, [(2, 0), (4, 16)]);
    ///     assert_eq!(squares.len(), 4);
    ///     assert_eq!(squares.get(&2), Some(0));
    /// });
    /// ```
    pub fn extend(&self, mc: &Mutation<'gc>, iter: impl IntoIterator<Item = (K, V)>) {
        for (key, value) in iter {
            self.insert(mc, key, value);
        }
    }

    /// [`insert`](Self::insert), or the heap-limit `Err` (holding the key
    /// and value) with the dictionary unchanged.
    pub fn try_insert(
        &self,
        mc: &Mutation<'gc>,
        key: K,
        value: V,
    ) -> Result<Option<V>, AllocError<(K, V)>> {
        let _w = self.write_lock(mc);
        let h = self.hash(&key);
        if let Some((_, e, entry)) = self.find(&key, h) {
            let old = entry.value.get();
            self.obj.touch(e);
            // SAFETY: the log recorded (`write_lock`); an entry in use,
            // which the dictionary's trace reports.
            unsafe { entry.value.set_recorded(mc, value) };
            return Ok(Some(old));
        }
        // Under the lock taken above, with the log recorded; the key was
        // not found.
        // SAFETY: as just said.
        unsafe { self.push_entry(mc, h, key, value) }.map_err(|e| e.map(|()| (key, value)))?;
        Ok(None)
    }

    /// Appends a new entry (the key is absent). Everything that can fail
    /// (the two allocations) comes first, before either array is
    /// installed: a heap-limit `Err` leaves the dictionary as it was, its
    /// capacity included.
    ///
    /// # Safety
    /// The writer lock is held and the log recorded in this call
    /// (`write_lock`), since the key was looked for (it is absent).
    unsafe fn push_entry(
        &self,
        mc: &Mutation<'gc>,
        h: u64,
        key: K,
        value: V,
    ) -> Result<(), AllocError<()>> {
        let len = self.obj.len.get();
        let entries = self.obj.entries.get();
        // A full array grows; so does a smaller one than reserved, when
        // empty (the `min_capacity` invariant; read only then).
        let grown = if len == entries.len() || (len == 0 && self.obj.min_capacity.get() > entries.len()) {
            // Arrays never pass `MAX_ENTRIES`, so only a full one at it
            // refuses (no check on an insert that does not grow).
            if len >= MAX_ENTRIES {
                too_many_entries();
            }
            let cap = (len * 2).max(4).max(self.obj.min_capacity.get()).min(MAX_ENTRIES);
            // Spare entries hold the new one.
            Some(Self::grown_entries(mc, entries, len, cap, (h, key, value))?)
        } else {
            None
        };
        let indices = self.obj.indices.get();
        let fresh = if (len + 1) * 4 > indices.len() * 3 {
            let size = index_size(len + 1).max(indices.len() * 2);
            Some(Self::fresh_index(mc, entries, len, size)?)
        } else {
            None
        };
        let (entries, indices) = if grown.is_some() || fresh.is_some() {
            // The lock and the log (the caller's, `write_lock`); the
            // arrays made just above, as `install` asks.
            // SAFETY: as just said.
            unsafe { self.install(mc, grown, fresh) };
            (self.obj.entries.get(), self.obj.indices.get())
        } else {
            (entries, indices)
        };
        let e = &entries[len];
        // SAFETY: the log recorded (`write_lock`); entry `len` is past the
        // length, which the dictionary's trace does not report, and the
        // length grows over it only below, under the writer lock; the key
        // and the value are shaded below, once it has.
        unsafe {
            e.hash.fill_recorded(mc, h);
            e.key.fill_unshaded(key);
            e.value.fill_unshaded(value);
        }
        self.obj.touch(len);
        Self::place(mc, indices, h, len);
        self.obj.len.set(mc, len + 1);
        if K::NEEDS_TRACE || V::NEEDS_TRACE {
            // During a concurrent mark, the key and the value are shaded
            // unless no marker has met the dictionary yet (its trace reads
            // them then): a young dictionary's entries stay young.
            // Stored above by `fill_unshaded`, in this call after the
            // record, and the length covers them now.
            // SAFETY: as just said.
            unsafe {
                self.obj.log.after_unreported_stores(mc, || {
                    // SAFETY: reported now (the length covers them), the
                    // log recorded in this call.
                    e.key.set_recorded(mc, e.key.get());
                    e.value.set_recorded(mc, e.value.get());
                })
            };
        }
        Ok(())
    }

    /// A new entries array of `cap` entries: copies of the first `len` of
    /// `entries`, in their places, and copies of `spare` after them (a
    /// managed array is initialised throughout; the spares are never
    /// traced, `Entry`'s impl). For `install`.
    fn grown_entries(
        mc: &Mutation<'gc>,
        entries: Entries<'gc, K, V>,
        len: usize,
        cap: usize,
        spare: (u64, K, V),
    ) -> Result<Entries<'gc, K, V>, AllocError<()>> {
        mc.try_alloc_from_iter((0..cap).map(|i| match entries.get(i).filter(|_| i < len) {
            Some(e) => Entry::new(e.hash.get(), e.key.get(), e.value.get()),
            None => Entry::new(spare.0, spare.1, spare.2),
        }))
    }

    /// A new index of `size` slots (a power of two, more than `len` * 4 /
    /// 3) placing the first `len` of `entries`, whose hashes every entries
    /// array of this dictionary holds alike. For `install`.
    fn fresh_index(
        mc: &Mutation<'gc>,
        entries: Entries<'gc, K, V>,
        len: usize,
        size: usize,
    ) -> Result<Indices<'gc>, AllocError<()>> {
        let fresh = mc
            .try_alloc_slice_fill(size, GcCell::new(0))
            .map_err(|e| e.map(drop))?;
        for (i, e) in entries[..len].iter().enumerate() {
            Self::place(mc, fresh, e.hash.get(), i);
        }
        Ok(fresh)
    }

    /// Installs a grown entries array and a fresh index, either or both
    /// (`push_entry`, `try_reserve`, which made them, every allocation
    /// first). Every entry keeps its index, and the fresh index places the
    /// entries in use.
    ///
    /// # Safety
    /// The writer lock is held and the log recorded in this call
    /// (`write_lock`); `grown` holds copies of the entries in use, in
    /// their places, and `fresh` places each of them.
    unsafe fn install(&self, mc: &Mutation<'gc>, grown: Option<Entries<'gc, K, V>>, fresh: Option<Indices<'gc>>) {
        if let Some(grown) = grown {
            let cell = &self.obj.entries;
            // The log recorded (`write_lock`, which the caller holds); the
            // cell is reported by the dictionary's trace, after its log;
            // the new array is shaded just below unless no marker has met
            // the dictionary.
            // SAFETY: as just said.
            unsafe { cell.set_unshaded(mc, grown) };
            // SAFETY: the store just above.
            unsafe { self.obj.log.after_unreported_stores(mc, || cell.set_recorded(mc, cell.get())) };
            // Every entry keeps its index; the cards' scale follows the
            // capacity (`GcCards::rescale`).
            if K::NEEDS_TRACE || V::NEEDS_TRACE {
                self.obj.cards.rescale(grown.len());
            }
        }
        if let Some(fresh) = fresh {
            let cell = &self.obj.indices;
            // SAFETY: as for the entries above.
            unsafe { cell.set_unshaded(mc, fresh) };
            // SAFETY: the store just above.
            unsafe { self.obj.log.after_unreported_stores(mc, || cell.set_recorded(mc, cell.get())) };
        }
    }

    /// Puts entry `e` of hash `h` in the first free slot of its probe run.
    fn place(mc: &Mutation<'gc>, indices: Indices<'gc>, h: u64, e: usize) {
        let mask = indices.len() - 1;
        let mut pos = h as usize & mask;
        while indices[pos].get() != 0 {
            pos = (pos + 1) & mask;
        }
        indices[pos].set(mc, slot(h, e));
    }

    /// Removes `key`; returns its value.
    pub fn remove<Q>(&self, mc: &Mutation<'gc>, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let _w = self.write_lock(mc);
        let (pos, e, _) = self.find(key, self.hash(key))?;
        Some(self.remove_at(mc, pos, e).1)
    }

    /// Removes `key`; returns the stored key and its value.
    pub fn remove_entry<Q>(&self, mc: &Mutation<'gc>, key: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let _w = self.write_lock(mc);
        let (pos, e, _) = self.find(key, self.hash(key))?;
        Some(self.remove_at(mc, pos, e))
    }

    /// Removes entry `e`, named by index slot `pos`; the writer lock is
    /// held.
    fn remove_at(&self, mc: &Mutation<'gc>, pos: usize, e: usize) -> (K, V) {
        let indices = self.obj.indices.get();
        let entries = self.obj.entries.get();
        let len = self.obj.len.get();
        let removed = (entries[e].key.get(), entries[e].value.get());
        // The removed key and value go: the deletion barrier (which passes
        // over young ones). First, before anything changes: it runs their
        // `Trace`, and a panic there (a `Trace` impl that breaks its
        // contract) left the index shifted and the length not yet
        // lowered, and a later removal's search for the last entry's slot
        // spun for ever.
        entries[e].shade_cut(mc);
        let _moving = Moving::start(self, mc);
        // Free the slot, and shift back the rest of its probe run: each
        // later slot moves into the hole unless its entry's home lies
        // (cyclically) after the hole.
        let mask = indices.len() - 1;
        let mut hole = pos;
        let mut i = (pos + 1) & mask;
        loop {
            let s = indices[i].get();
            if s == 0 {
                break;
            }
            let home = entries[slot_entry(s)].hash.get() as usize & mask;
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                indices[hole].set(mc, s);
                hole = i;
            }
            i = (i + 1) & mask;
        }
        indices[hole].set(mc, 0);
        // Move the last entry into the removed one's place; the length is
        // lowered after, however the move's shade ends (`Finally`).
        let last = len - 1;
        let _lower = Finally(|| self.obj.len.set(mc, last));
        if e != last {
            let (h, k, v) = {
                let l = &entries[last];
                (l.hash.get(), l.key.get(), l.value.get())
            };
            let mut p = h as usize & mask;
            while indices[p].get() != slot(h, last) {
                p = (p + 1) & mask;
            }
            indices[p].set(mc, slot(h, e));
            // The removed key and value were cut (above). The last entry's
            // move into `e` is then a move within the dictionary, which
            // shades nothing while no marker has met it (`GcLog::moving`):
            // its key and value were reported before (entry `last`, below
            // the length) and are after (entry `e`).
            let to = &entries[e];
            // The log was recorded (`write_lock`, which the caller holds);
            // the stores are into entry `e`, below the length, whose key
            // and value only the dictionary's trace reports (after its
            // log; the entries array's `Entry`s report nothing), and store
            // the values of entry `last`, also reported, which keeps them
            // until the length drops below it; the values they overwrite
            // were cut before the move began; atomic stores, which neither unwind nor
            // allocate, and `shade` only stores entry `e`'s values again
            // through the barrier; the writer lock is held.
            // SAFETY: as just said.
            unsafe {
                self.obj.log.moving(
                    mc,
                    || {
                        to.hash.set_moved(h);
                        to.key.set_moved(k);
                        to.value.set_moved(v);
                        self.obj.touch(e);
                    },
                    || {
                        to.key.set_recorded(mc, to.key.get());
                        to.value.set_recorded(mc, to.value.get());
                    },
                )
            };
        }
        removed
    }

    /// Replaces the value of `key` with `f(old)` (the `get_mut` of a managed
    /// map: the store goes through the barrier); returns the new value.
    ///
    /// # Panics
    /// If `f` changes this dictionary.
    pub fn update<Q>(&self, mc: &Mutation<'gc>, key: &Q, f: impl FnOnce(V) -> V) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let _w = self.write_lock(mc);
        let (_, e, entry) = self.find(key, self.hash(key))?;
        let cell = &entry.value;
        let new = f(cell.get());
        self.obj.touch(e);
        // SAFETY: the log recorded (`write_lock`); an entry in use.
        unsafe { cell.set_recorded(mc, new) };
        Some(new)
    }

    /// The entry of `key`, to read, insert or change in place. The
    /// dictionary's writer lock is held until the entry is dropped.
    pub fn entry<'a>(&'a self, mc: &'a Mutation<'gc>, key: K) -> DictEntry<'a, 'gc, K, V, S> {
        let guard = self.write_lock(mc);
        let hash = self.hash(&key);
        match self.find(&key, hash) {
            Some((pos, index, _)) => DictEntry::Occupied(OccupiedEntry {
                dict: self,
                mc,
                _guard: guard,
                pos,
                index,
            }),
            None => DictEntry::Vacant(VacantEntry {
                dict: self,
                mc,
                _guard: guard,
                hash,
                key,
            }),
        }
    }

    /// Removes every entry.
    pub fn clear(&self, mc: &Mutation<'gc>) {
        let _w = self.write_lock(mc);
        let _moving = Moving::start(self, mc);
        let len = self.obj.len.get();
        let entries = self.obj.entries.get();
        // Shaded before the cut (`list.rs`, module docs).
        for e in &entries[..len.min(entries.len())] {
            e.shade_cut(mc);
        }
        self.obj.len.set(mc, 0);
        for s in self.obj.indices.get().iter() {
            s.set(mc, 0);
        }
    }

    /// Keeps the entries for which `keep` is true, in their order. Like
    /// `HashMap::retain` it allocates nothing in the managed heap: the
    /// kept entries move down in place.
    ///
    /// # Panics
    /// If `keep` changes this dictionary (it may read it). If `keep`
    /// panics, the dictionary is unchanged.
    pub fn retain(&self, mc: &Mutation<'gc>, mut keep: impl FnMut(K, V) -> bool) {
        let _w = self.write_lock(mc);
        let entries = self.obj.entries.get();
        let len = self.obj.len.get().min(entries.len());
        // Every answer first, in a bitmap: `keep` may read the dictionary,
        // and lookups spin while a move is under way.
        let mut kept_bits = vec![0_u64; len.div_ceil(64)];
        let mut kept = 0;
        for (i, e) in entries[..len].iter().enumerate() {
            if keep(e.key.get(), e.value.get()) {
                kept_bits[i / 64] |= 1 << (i % 64);
                kept += 1;
            } else {
                // The deletion barrier (which passes over young ones),
                // before any move. If a later `keep` panics, the entry
                // stays, shaded: that only keeps it through this mark.
                e.shade_cut(mc);
            }
        }
        if kept == len {
            return;
        }
        let is_kept = |i: usize| kept_bits[i / 64] & (1 << (i % 64)) != 0;
        let _moving = Moving::start(self, mc);
        // After the moves, however their shade ends (`Finally`): the
        // shorter length and the index rebuilt for it.
        let _finish = Finally(|| {
            self.obj.len.set(mc, kept);
            let indices = self.obj.indices.get();
            for s in indices.iter() {
                s.set(mc, 0);
            }
            for (i, e) in entries[..kept].iter().enumerate() {
                Self::place(mc, indices, e.hash.get(), i);
            }
        });
        // The log was recorded (`write_lock`, which we hold); the stores
        // are into entries below the old length, whose keys and values
        // only the dictionary's trace reports (after its log; the entries
        // array's `Entry`s report nothing); each stores the values of a
        // kept entry further up, also reported, which keep them until the
        // length drops; each value they overwrite is a removed entry's,
        // cut just above, or a kept one's already moved further down (a
        // compaction writes slot `to` only after reading every slot up to
        // it); atomic stores and in-range indexing (`i < len <=
        // entries.len()`), which neither unwind nor allocate, and `shade`
        // only stores the kept entries' values again through the barrier;
        // the writer lock is held.
        // SAFETY: as just said.
        unsafe {
            self.obj.log.moving(
                mc,
                || {
                    let mut to = 0;
                    for (i, from) in entries[..len].iter().enumerate() {
                        if !is_kept(i) {
                            continue;
                        }
                        if to != i {
                            let t = &entries[to];
                            t.hash.set_moved(from.hash.get());
                            t.key.set_moved(from.key.get());
                            t.value.set_moved(from.value.get());
                        }
                        to += 1;
                    }
                    self.obj.touch_range(0..to);
                },
                || {
                    for t in &entries[..kept] {
                        t.key.set_recorded(mc, t.key.get());
                        t.value.set_recorded(mc, t.value.get());
                    }
                },
            )
        };
    }

    /// Checks the dictionary's invariants (see `DictObj`), panicking with
    /// the broken one: for tests. Take no writer elsewhere meanwhile.
    pub fn assert_valid(&self) {
        let len = self.obj.len.get();
        let entries = self.obj.entries.get();
        let indices = self.obj.indices.get();
        assert!(
            len <= entries.len(),
            "loam-collections: GcDictionary length {len} past its entries"
        );
        assert!(
            self.obj.moves.get() % 2 == 0,
            "loam-collections: GcDictionary move left open"
        );
        let n = indices.len();
        assert!(
            n == 0 || n.is_power_of_two(),
            "loam-collections: index size {n}"
        );
        assert!(
            len * 4 <= n * 3 || len == 0,
            "loam-collections: index over 3/4 full"
        );
        let used = indices.iter().filter(|s| s.get() != 0).count();
        assert_eq!(
            used, len,
            "loam-collections: index slots in use against entries"
        );
        for (e, entry) in entries[..len].iter().enumerate() {
            let h = entry.hash.get();
            assert_eq!(
                h,
                self.hash(&entry.key.get()),
                "loam-collections: entry {e}'s stored hash"
            );
            // Its slot lies on its probe run, with no empty slot before it.
            let mask = n - 1;
            let mut pos = h as usize & mask;
            loop {
                let s = indices[pos].get();
                assert!(
                    s != 0,
                    "loam-collections: entry {e} is not on its probe run"
                );
                if s == slot(h, e) {
                    break;
                }
                pos = (pos + 1) & mask;
            }
        }
    }

    /// The entries, in order (see the type's docs), as they are now. A
    /// removal during the iteration (on this thread, or on another) moves
    /// the last entry into the removed one's place, so the iteration may
    /// yield it twice or not at all; never unsound.
    pub fn iter(&self) -> Iter<'gc, K, V> {
        // `len` first, then the array (`list.rs`, module docs).
        let len = self.obj.len.get();
        let entries = self.obj.entries.get();
        let len = len.min(entries.len());
        Iter {
            entries,
            next: 0,
            end: len,
        }
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = K> + 'gc {
        self.iter().map(|(k, _)| k)
    }

    /// The values, in order.
    pub fn values(&self) -> impl Iterator<Item = V> + 'gc {
        self.iter().map(|(_, v)| v)
    }
}

/// Runs its closure as it drops, unwinding included: the end of a change
/// that must come however the change's shade ends. A `Trace` impl that
/// breaks its rule 5 (no panic) and panics in the shade of a removal's
/// move left the length unlowered and the last entry twice in the array,
/// one of them in no index slot, and the next removal's search for it
/// spun for ever (as a panic in `shade_cut` did, before it ran first).
struct Finally<F: FnMut()>(F);

impl<F: FnMut()> Drop for Finally<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Brackets a change that moves entries: `moves` is odd from `start` until
/// the guard drops (a panic included), under the writer lock.
struct Moving<'a, 'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    dict: &'a GcDictionary<'gc, K, V, S>,
    mc: &'a Mutation<'gc>,
}

impl<'a, 'gc, K, V, S> Moving<'a, 'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    fn start(dict: &'a GcDictionary<'gc, K, V, S>, mc: &'a Mutation<'gc>) -> Self {
        let m = &dict.obj.moves;
        m.set(mc, m.get() + 1);
        Moving { dict, mc }
    }
}

impl<'gc, K, V, S> Drop for Moving<'_, 'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    fn drop(&mut self) {
        let m = &self.dict.obj.moves;
        m.set(self.mc, m.get() + 1);
    }
}

/// The entries of a [`GcDictionary`], by value.
pub struct Iter<'gc, K: CellValue + Trace + 'gc, V: CellValue + Trace + 'gc> {
    entries: Entries<'gc, K, V>,
    next: usize,
    end: usize,
}

impl<'gc, K: CellValue + Trace + 'gc, V: CellValue + Trace + 'gc> Iterator for Iter<'gc, K, V> {
    type Item = (K, V);

    #[inline]
    fn next(&mut self) -> Option<(K, V)> {
        if self.next < self.end {
            let e = &Gc::get(self.entries)[self.next];
            self.next += 1;
            Some((e.key.get(), e.value.get()))
        } else {
            None
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl<'gc, K: CellValue + Trace + 'gc, V: CellValue + Trace + 'gc> ExactSizeIterator
    for Iter<'gc, K, V>
{
}

impl<'gc, K: CellValue + Trace + 'gc, V: CellValue + Trace + 'gc> fmt::Debug for Iter<'gc, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter")
            .field("next", &self.next)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

/// An entry of a [`GcDictionary`], from [`GcDictionary::entry`].
pub enum DictEntry<'a, 'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    /// The key is present.
    Occupied(OccupiedEntry<'a, 'gc, K, V, S>),
    /// The key is absent.
    Vacant(VacantEntry<'a, 'gc, K, V, S>),
}

/// A present key's entry.
pub struct OccupiedEntry<'a, 'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    dict: &'a GcDictionary<'gc, K, V, S>,
    mc: &'a Mutation<'gc>,
    _guard: WriterGuard<'a>,
    pos: usize,
    index: usize,
}

/// An absent key's entry.
pub struct VacantEntry<'a, 'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    dict: &'a GcDictionary<'gc, K, V, S>,
    mc: &'a Mutation<'gc>,
    _guard: WriterGuard<'a>,
    hash: u64,
    key: K,
}

impl<'a, 'gc, K, V, S> OccupiedEntry<'a, 'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    fn cell(&self) -> &'gc Entry<'gc, K, V> {
        &Gc::get(self.dict.obj.entries.get())[self.index]
    }

    /// The stored key.
    pub fn key(&self) -> K {
        self.cell().key.get()
    }

    /// The value.
    pub fn get(&self) -> V {
        self.cell().value.get()
    }

    /// Replaces the value, through the barrier; returns the old one.
    pub fn insert(&self, value: V) -> V {
        let cell = &self.cell().value;
        let old = cell.get();
        self.dict.obj.touch(self.index);
        // SAFETY: the entry holds the writer lock, taken with the log
        // recorded (`write_lock`) in this call; an entry in use.
        unsafe { cell.set_recorded(self.mc, value) };
        old
    }

    /// Removes the entry; returns its key and value.
    pub fn remove(self) -> (K, V) {
        self.dict.remove_at(self.mc, self.pos, self.index)
    }
}

impl<'a, 'gc, K, V, S> VacantEntry<'a, 'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    /// The key that would be inserted.
    pub fn key(&self) -> K {
        self.key
    }

    /// Inserts the key with `value`; returns `value`.
    ///
    /// # Panics
    /// At the heap limit (the dictionary unchanged; see
    /// [`try_insert`](Self::try_insert)), or with 4,294,967,294 entries
    /// already (capacity overflow, as `GcDictionary::insert`).
    pub fn insert(self, value: V) -> V {
        self.try_insert(value)
            .unwrap_or_else(|e| alloc_failed("entry", e.map(drop)))
    }

    /// [`insert`](Self::insert), or the heap-limit `Err` with the value
    /// given back and the dictionary unchanged.
    ///
    /// # Panics
    /// With 4,294,967,294 entries already (capacity overflow, as
    /// `GcDictionary::try_insert`).
    pub fn try_insert(self, value: V) -> Result<V, AllocError<V>> {
        // A vacant entry holds the writer lock, taken (with the log
        // recorded) by `entry` in this call, which found the key absent.
        // SAFETY: as just said.
        match unsafe { self.dict.push_entry(self.mc, self.hash, self.key, value) } {
            Ok(()) => Ok(value),
            Err(e) => Err(e.map(|()| value)),
        }
    }
}

impl<'a, 'gc, K, V, S> DictEntry<'a, 'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    /// The value, inserting `default` first if the key is absent.
    ///
    /// # Panics
    /// As [`VacantEntry::insert`] if the key is absent: at the heap limit
    /// (the dictionary unchanged; see [`try_or_insert`](Self::try_or_insert)),
    /// or on a capacity overflow.
    pub fn or_insert(self, default: V) -> V {
        match self {
            DictEntry::Occupied(o) => o.get(),
            DictEntry::Vacant(v) => v.insert(default),
        }
    }

    /// The value, inserting `f()` first if the key is absent.
    ///
    /// # Panics
    /// As [`or_insert`](Self::or_insert).
    pub fn or_insert_with(self, f: impl FnOnce() -> V) -> V {
        match self {
            DictEntry::Occupied(o) => o.get(),
            DictEntry::Vacant(v) => v.insert(f()),
        }
    }

    /// [`or_insert`](Self::or_insert), or the heap-limit `Err` with
    /// `default` given back and the dictionary unchanged.
    ///
    /// # Panics
    /// On a capacity overflow, as [`VacantEntry::try_insert`].
    pub fn try_or_insert(self, default: V) -> Result<V, AllocError<V>> {
        match self {
            DictEntry::Occupied(o) => Ok(o.get()),
            DictEntry::Vacant(v) => v.try_insert(default),
        }
    }

    /// [`or_insert_with`](Self::or_insert_with), or the heap-limit `Err`
    /// with the value `f` made and the dictionary unchanged.
    ///
    /// # Panics
    /// On a capacity overflow, as [`VacantEntry::try_insert`].
    pub fn try_or_insert_with(self, f: impl FnOnce() -> V) -> Result<V, AllocError<V>> {
        match self {
            DictEntry::Occupied(o) => Ok(o.get()),
            DictEntry::Vacant(v) => v.try_insert(f()),
        }
    }

    /// The value, inserting `V::default()` first if the key is absent.
    ///
    /// # Panics
    /// As [`or_insert`](Self::or_insert).
    pub fn or_default(self) -> V
    where
        V: Default,
    {
        self.or_insert_with(V::default)
    }

    /// Replaces a present value with `f(value)`.
    pub fn and_modify(self, f: impl FnOnce(V) -> V) -> Self {
        if let DictEntry::Occupied(o) = &self {
            o.insert(f(o.get()));
        }
        self
    }

    /// The entry's key.
    pub fn key(&self) -> K {
        match self {
            DictEntry::Occupied(o) => o.key(),
            DictEntry::Vacant(v) => v.key(),
        }
    }
}

/// Its entries as `(key, value)` pairs, in the order [`iter`] gives them.
///
/// [`iter`]: GcDictionary::iter
impl<'gc, K, V, S> IntoIterator for GcDictionary<'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    type Item = (K, V);
    type IntoIter = Iter<'gc, K, V>;

    fn into_iter(self) -> Iter<'gc, K, V> {
        self.iter()
    }
}

/// As for the dictionary itself (a handle: `for (k, v) in &d` reads it).
impl<'gc, K, V, S> IntoIterator for &GcDictionary<'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + 'gc,
    V: CellValue + Trace + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    type Item = (K, V);
    type IntoIter = Iter<'gc, K, V>;

    fn into_iter(self) -> Iter<'gc, K, V> {
        self.iter()
    }
}

impl<'gc, K, V, S> fmt::Debug for GcDictionary<'gc, K, V, S>
where
    K: CellValue + Trace + Hash + Eq + fmt::Debug + 'gc,
    V: CellValue + Trace + fmt::Debug + 'gc,
    S: BuildHasher + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

macro_rules! entry_debug {
    ($($ty:ident),*) => {$(
        impl<'a, 'gc, K, V, S> fmt::Debug for $ty<'a, 'gc, K, V, S>
        where
            K: CellValue + Trace + Hash + Eq + fmt::Debug + 'gc,
            V: CellValue + Trace + 'gc,
            S: BuildHasher + Send + Sync + 'static,
        {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty)).field("key", &self.key()).finish_non_exhaustive()
            }
        }
    )*};
}

entry_debug!(OccupiedEntry, VacantEntry, DictEntry);
