//! [`GcLog`]: the object-recording write barrier, as a field.
//!
//! A minor cycle traces what the barrier recorded since the last one. The
//! barrier cells record the values they store (`GcCell::set` marks and
//! remembers each stored object), which is O(1) per store but promotes
//! every stored object, even one stored into an object made a moment ago.
//! A `GcLog` records the *object it lives in* instead, once per cycle, for
//! the next minor cycle to trace again whole: any number of stores into
//! that object's cells cost one record, and a store into a young object
//! costs nothing (the object is traced anyway if it is reachable). That is
//! what a `GcLock` write does (`cell.rs`, "Recording the object written"),
//! and what a managed collection does for its backing arrays.
//!
//! The log learns its object from the markers: a marker tracing object `o`
//! calls the log's `trace`, which sets `owner = o` (or [`SHARED_OWNER`] if
//! another object holds the same log, through an `Arc`). A record then
//! follows the cases of `cell.rs`: `owner == 0`, no marker met the log
//! since its object was made, so the object is young, waits in a
//! remembered list, or is queued for the mark under way, and is traced
//! whole anyway; `owner == o`, `o` is recorded (and shaded during a mark,
//! so that this cycle's sweep keeps it until the next one traces it);
//! `SHARED_OWNER`, the next cycle is full.
//!
//! What a record covers: stores made through
//! [`GcCell::set_recorded`](crate::GcCell::set_recorded) and
//! [`GcCell::fill_recorded`](crate::GcCell::fill_recorded) into cells that
//! the object's `Trace` reports, in the same `mutate` call, after the
//! record. During a concurrent mark those stores shade as `set` does (the
//! mark's snapshot needs the values they overwrite whatever the owner
//! is); stores into cells the object did not report before
//! ([`GcCell::fill_unshaded`](crate::GcCell::fill_unshaded)), and stores
//! whose overwritten value had the deletion barrier alone
//! ([`GcCell::set_unshaded`](crate::GcCell::set_unshaded), a grown array
//! installed), may leave the stored value's shade to
//! [`GcLog::after_unreported_stores`], which skips it while no marker has
//! met the object; stores that only move values among the
//! reported cells (a sort) may skip both shades inside
//! [`GcLog::moving`], on the same condition. Between marks they do nothing more,
//! because the record (or the object's youth) makes the next minor cycle
//! trace the object, and so what the cells hold then.

use crate::log_owner::{LogOwner, SHARED_OWNER};
use crate::mutator::Mutation;
use crate::trace::{Trace, Tracer};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// The object-recording write barrier: a field that lets its object be
/// recorded for the next minor cycle in O(1) (see the module docs), and the
/// right to use [`GcCell::set_recorded`](crate::GcCell::set_recorded) on
/// the object's cells.
///
/// # Examples
/// A managed vector of cells whose stores promote nothing:
/// ```
/// use loam_runtime::{Gc, GcCell, GcLog, Mutation, Trace};
///
/// #[derive(Trace)]
/// struct Pair<'gc> {
///     log: GcLog<'gc>,
///     a: GcCell<'gc, Option<Gc<'gc, u64>>>,
///     b: GcCell<'gc, Option<Gc<'gc, u64>>>,
/// }
///
/// fn swap_in<'gc>(mc: &Mutation<'gc>, p: Gc<'gc, Pair<'gc>>, x: Gc<'gc, u64>) {
///     p.log.record(mc);
///     // SAFETY: `p`'s log was recorded in this call, and `a` and `b` are
///     // cells `Pair`'s trace reports, holding reported values.
///     unsafe {
///         p.b.set_recorded(mc, p.a.get());
///         p.a.set_recorded(mc, Some(x));
///     }
/// }
///
/// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let p = mc.alloc(Pair { log: GcLog::new(), a: GcCell::new(None), b: GcCell::new(None) });
///     swap_in(mc, p, mc.alloc(1));
///     swap_in(mc, p, mc.alloc(2));
///     assert_eq!((p.a.get().map(|g| *g), p.b.get().map(|g| *g)), (Some(2), Some(1)));
/// });
/// ```
///
/// # Invariants
/// `owner` is 0 until a marker traces the object holding the log, then
/// that object (marked by the mark that set it, so allocated until a later
/// mark has traced the log again), or `SHARED_OWNER` for good. `logged` is
/// the `remember_epoch` of the last record: at most one record a cycle.
pub struct GcLog<'gc> {
    /// The object the markers last found this log in (0: never traced;
    /// `SHARED_OWNER`: found in two). Set by markers, read by writers.
    owner: LogOwner,
    /// The `remember_epoch` in which `owner` was last recorded.
    logged: AtomicU64,
    /// Invariant in `'gc`, like the barrier cells.
    _brand: PhantomData<fn(&'gc ()) -> &'gc ()>,
}

impl<'gc> GcLog<'gc> {
    /// A log whose object no marker has met yet.
    pub const fn new() -> Self {
        GcLog {
            owner: LogOwner::new(),
            logged: AtomicU64::new(u64::MAX),
            _brand: PhantomData,
        }
    }

    /// Records the object holding this log for the next minor cycle: once
    /// per cycle, O(1). Call it before the stores it covers, in the same
    /// `mutate` call.
    // Always inlined: a collection records its log once per change (a
    // `GcList::push`), and the common case, a log recorded already this
    // cycle and no mark under way, is two loads and two compares.
    #[inline(always)]
    pub fn record(&self, mc: &Mutation<'gc>) {
        // The stores it covers may free memory (a collection's writes skip
        // the cell barriers).
        mc.note_write();
        if mc.marking != 0 {
            self.record_marking(mc);
            return;
        }
        let owner = self.owner.get();
        // `owner == 0`: young, nothing to record. Recorded this cycle (the
        // epoch cannot move during the call): nothing more to do
        // (`mc.remember` is `u64::MAX` without generations, which
        // `logged` then always holds).
        if owner == 0 || (owner != SHARED_OWNER && self.logged.load(Ordering::Relaxed) == mc.remember) {
            return;
        }
        self.record_slow(mc, owner);
    }

    /// `record` during a concurrent mark, which also shades the owner.
    /// From before the read of the owner until it is shaded, in a shading
    /// bracket (if the mark may be ragged): a marker may set the owner to
    /// `SHARED_OWNER` and the mark end meanwhile, and an owner read before
    /// an end's wait that missed the bracket would be shaded after the
    /// sweep freed it (`barrier.rs`, "Ragged cycles", 3).
    #[inline]
    fn record_marking(&self, mc: &Mutation<'gc>) {
        // A log no marker has met needs nothing, and a bracket that shades
        // nothing is nothing to a mark's end: the owner is read first
        // without one (a collection made in this call, the common case,
        // pays no fence). A marker that sets the owner after this read
        // finds the stores this record covers, or they shade (each covered
        // store re-reads the owner after a fence, or shades anyway).
        if self.owner.get() != 0 {
            self.record_met(mc);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_met(&self, mc: &Mutation<'gc>) {
        let _bracket = mc.shading();
        let owner = self.owner.get();
        if owner != 0 {
            self.record_slow(mc, owner);
        }
    }

    /// During a concurrent mark, after stores into cells that the
    /// object's `Trace` did not report before them (a collection's spare
    /// slots past its length, written plainly) and that it reports now (the
    /// length that covers them stored after them), or stores made with
    /// [`GcCell::set_unshaded`](crate::GcCell::set_unshaded) (the values
    /// they overwrote had the deletion barrier): runs `shade`, which must
    /// shade what those stores stored (storing each value into its cell
    /// again with [`GcCell::set_recorded`](crate::GcCell::set_recorded)
    /// does), unless no marker has met the object yet and the call did
    /// not begin in a ragged start's window. Then whichever marker traces
    /// the object reads the stores, and they need no shade, neither for
    /// this mark nor for the next minor cycle. Between marks it does
    /// nothing.
    ///
    /// # Why
    /// A store during a concurrent mark shades what it stores so that a
    /// marked object never points to an unmarked one the next minor cycle
    /// would miss (`barrier.rs`, 2). That marks what a young collection
    /// holds: its elements survive the cycle and, with sticky marks, are
    /// old, so minor cycles stop freeing the garbage of short-lived
    /// collections filled during marks (a ragged mark is concurrent from
    /// its first object: the GC speed tester lost 60% of its throughput).
    /// A collection no marker has met is young, unmarked or waiting to be
    /// traced, and its trace will read what it holds then.
    ///
    /// # Why the order makes it safe
    /// The stores, then a sequentially consistent fence, then the read of
    /// the owner; a marker sets the owner (`GcLog`'s `trace`, first of the
    /// object's trace), fences, then reads the object's cells. Of the two
    /// fences one comes first: if this one, the marker reads the stores;
    /// if the marker's, this read sees its owner and the values are
    /// shaded. A marker that finds the owner already set to its own object
    /// does not fence, but then the one that set it did, and traced the
    /// object after (`LogOwner::adopt`).
    /// Inside a shading bracket, so that a ragged mark's end waits for the
    /// shade (`barrier.rs`, "Ragged cycles", 3). What a call stores is
    /// then marked by this mark, or young (never swept by it), or
    /// reachable at the snapshot's point, which the deletion barrier keeps
    /// marked-to-be: except in a window call, which may hold an object
    /// unreachable at T (`barrier.rs`, "Ragged cycles", 2). A window call
    /// therefore always shades. Without that: a window
    /// call pushed such an object into a young list Y, Y into a young list
    /// Z, and stored Z into the heap; a later call stored Y elsewhere after
    /// the end's first look, which marks a young object and leaves it in
    /// `gray` for the next cycle untraced (`Cycle::terminate_ragged`); the
    /// markers tracing Z then found Y marked and did not trace it, and the
    /// sweep freed the object Y held.
    /// `log_owner_model.rs` and `collections/src/list_model.rs` check the
    /// pair with loom.
    ///
    /// # Safety
    /// The stores were made in this `mutate` call, after [`record`](Self::record),
    /// into cells of the object holding this log, which its `Trace` did
    /// not report before them and reports now, or with
    /// [`GcCell::set_unshaded`](crate::GcCell::set_unshaded) into cells
    /// it reports; nothing shaded them; and
    /// the object's `Trace` traces this log before it reads those cells
    /// or what reports them (a length): a marker's fence must come
    /// between (with `#[derive(Trace)]`, declare the log first).
    #[inline]
    pub unsafe fn after_unreported_stores(&self, mc: &Mutation<'gc>, shade: impl FnOnce()) {
        if mc.marking != 0 {
            self.after_unreported_stores_marking(mc, shade);
        }
    }

    #[inline]
    fn after_unreported_stores_marking(&self, mc: &Mutation<'gc>, shade: impl FnOnce()) {
        // The Dekker pair's fence, then the owner. Nothing to shade (no
        // marker has met the object, and the call began after the
        // window): no shading bracket either, since one that shades
        // nothing is nothing to a mark's end (a push into a young
        // collection, the common case, pays one fence, not a bracket's
        // opening besides).
        if self.owner.after_stores() == 0 && !mc.window {
            return;
        }
        self.after_unreported_stores_met(mc, shade);
    }

    #[cold]
    #[inline(never)]
    fn after_unreported_stores_met(&self, mc: &Mutation<'gc>, shade: impl FnOnce()) {
        // The bracket before the owner is read again: an owner read
        // outside one could be shaded after an end that missed it, and
        // the sweep freed it (`record_marking`'s docs).
        let _bracket = mc.shading();
        let owner = self.owner.get();
        if owner != 0 {
            self.record_slow(mc, owner);
        }
        shade();
    }

    /// Runs `moves`, stores that only move values among the cells the
    /// object's `Trace` reports (a sort, a swap), made without their
    /// shades ([`GcCell::set_moved`](crate::GcCell::set_moved)); then, during a
    /// concurrent mark, runs `shade`, which must shade every value those
    /// cells hold (storing each again with
    /// [`GcCell::set_recorded`](crate::GcCell::set_recorded) does), unless
    /// no marker has met the object and the call did not begin in a ragged
    /// start's window. Returns what `moves` returns.
    ///
    /// # Examples
    /// Swapping the two values of a pair, which promotes neither during a
    /// mark while no marker has met the pair:
    /// ```
    /// use loam_runtime::{Gc, GcCell, GcLog, Mutation, Trace};
    ///
    /// #[derive(Trace)]
    /// struct Pair<'gc> {
    ///     log: GcLog<'gc>,
    ///     a: GcCell<'gc, Gc<'gc, u64>>,
    ///     b: GcCell<'gc, Gc<'gc, u64>>,
    /// }
    ///
    /// /// # Safety
    /// /// No other thread writes `p` meanwhile (a real collection takes its
    /// /// writer lock here).
    /// unsafe fn swap<'gc>(mc: &Mutation<'gc>, p: Gc<'gc, Pair<'gc>>) {
    ///     p.log.record(mc);
    ///     let (a, b) = (p.a.get(), p.b.get());
    ///     // The log was recorded in this call (declared first, so traced
    ///     // before the cells); `a` and `b` are reported cells, and the
    ///     // moves store the values they held and cannot unwind; no other
    ///     // writer (the caller).
    ///     // SAFETY: as just said.
    ///     unsafe {
    ///         p.log.moving(
    ///             mc,
    ///             || {
    ///                 p.a.set_moved(b);
    ///                 p.b.set_moved(a);
    ///             },
    ///             || {
    ///                 p.a.set_recorded(mc, p.a.get());
    ///                 p.b.set_recorded(mc, p.b.get());
    ///             },
    ///         )
    ///     }
    /// }
    ///
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let p = mc.alloc(Pair { log: GcLog::new(), a: GcCell::new(mc.alloc(1)), b: GcCell::new(mc.alloc(2)) });
    ///     // SAFETY: `p` is this call's alone.
    ///     unsafe { swap(mc, p) };
    ///     assert_eq!((*p.a.get(), *p.b.get()), (2, 1));
    /// });
    /// ```
    ///
    /// # Why
    /// A store during a concurrent mark shades the value it overwrites (the
    /// snapshot's deletion barrier) and the one it stores (`barrier.rs`,
    /// 2). Sorting a young list during a mark therefore marked every
    /// element: all of them survived the cycle and, with sticky marks, were
    /// old (the GC speed tester's list test sorts its lists: in ragged
    /// cycles, concurrent from the first object, sorts were among the
    /// largest sources of what the minor cycles marked, `docs/handshakes.md`,
    /// the census). A move takes no value out of the
    /// object and puts none in, so the object's trace needs neither shade
    /// if it reads the cells after the moves.
    ///
    /// # Why the order makes it safe
    /// As in [`after_unreported_stores`](Self::after_unreported_stores):
    /// the moves, a sequentially consistent fence, the read of the owner,
    /// against a marker's owner store, fence, and reads of the cells. If
    /// the owner read is 0, the marker that traces the object (if any)
    /// reads the cells after every move, and finds every value the object
    /// held before them, less those cut before them (which had the deletion
    /// barrier then). Otherwise a marker may have read the cells in the
    /// middle of the moves and missed a value moved from a cell it had not
    /// read into one it had; `shade` then marks every value. Unlike a push,
    /// a value it missed can be one reachable at the snapshot's point that
    /// nothing else marks, so the mark must not end between the moves and
    /// the shade: the shading bracket is opened before the first move, and
    /// a ragged end waits for it (`barrier.rs`, "Ragged cycles", 3). A
    /// window call always shades, as for pushes.
    ///
    /// Unlike `after_unreported_stores` it does not record the owner it
    /// finds: [`record`](Self::record) did, if a marker had met the object
    /// by then; if one met it since, it marked the object, and `shade`
    /// marks every value the object holds, so no marked object points to
    /// an unmarked one.
    ///
    /// # Safety
    /// - [`record`](Self::record) was called in this `mutate` call.
    /// - The stores `moves` makes without a barrier are into cells that
    ///   the `Trace` of the object holding this log reports (they may lie
    ///   in another object, as a list's slots lie in its array, if no
    ///   other object's `Trace` reports them), each storing a value those
    ///   cells held before `moves` began. Each value they overwrite is
    ///   still held by one of those cells after `moves` (a permutation),
    ///   or had the deletion barrier before `moves` began
    ///   ([`GcCell::cut`](crate::GcCell::cut): a dictionary's removal
    ///   cuts the removed entry, then moves its last entry into its
    ///   place).
    /// - `moves` does not unwind (a permutation left half done may have
    ///   dropped a value without the deletion barrier), and neither it nor
    ///   `shade` allocates or waits for the collector: a shading bracket is
    ///   open meanwhile, and a ragged mark's end waits for it.
    /// - No other thread stores into those cells meanwhile (the caller's
    ///   writer lock).
    /// - The object's `Trace` traces this log before it reads those cells
    ///   (with `#[derive(Trace)]`, declare the log first).
    #[inline]
    pub unsafe fn moving<R>(&self, mc: &Mutation<'gc>, moves: impl FnOnce() -> R, shade: impl FnOnce()) -> R {
        if mc.marking == 0 {
            return moves();
        }
        self.moving_marking(mc, moves, shade)
    }

    #[cold]
    #[inline(never)]
    fn moving_marking<R>(&self, mc: &Mutation<'gc>, moves: impl FnOnce() -> R, shade: impl FnOnce()) -> R {
        // Before the first move: a mark that ended between a move and the
        // shade could free a value a marker missed (see `moving`).
        let _bracket = mc.shading();
        let out = moves();
        let owner = self.owner.after_stores();
        if owner != 0 || mc.window {
            shade();
        }
        out
    }

    #[cold]
    #[inline(never)]
    fn record_slow(&self, mc: &Mutation<'gc>, owner: usize) {
        if owner == SHARED_OWNER {
            mc.barrier_lock_unknown();
        } else {
            mc.barrier_lock_owner(owner, &self.logged);
        }
    }
}

impl Default for GcLog<'_> {
    fn default() -> Self {
        GcLog::new()
    }
}

impl fmt::Debug for GcLog<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GcLog").finish_non_exhaustive()
    }
}

// SAFETY: reports no managed pointer (1, 2: it learns its owner, which is
// the collector's own bookkeeping); needs tracing (3), so that every
// marker that traces its object calls this; no `Drop` (4).
unsafe impl Trace for GcLog<'_> {
    #[inline]
    fn trace(&self, tracer: &mut Tracer) {
        let obj = tracer.current();
        if obj != 0 {
            self.owner.adopt(obj);
        }
    }
}
