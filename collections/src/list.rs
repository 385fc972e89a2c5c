//! [`GcList`]: a growable array in the managed heap.
//!
//! # What the collector sees
//! The backing array is a managed array of [`Slot`]s, which report nothing
//! themselves: the list object traces the slots in use, `0..len`, and
//! nothing past them. So a slot freed by a pop or a truncation needs no
//! overwriting to let its value go (its stale value is never traced), and
//! the spare slots of a grown array are left uninitialised, as `Vec`'s are:
//! growth copies the slots written so far (one `memcpy`: the elements in
//! use, and after pops the slots they left) and nothing else. Where the
//! array's block has room, growth lengthens the array in place instead
//! (`Mutation::try_grow_in_place`: slots need no tracing), with nothing
//! to copy; an array doubled past `ROOM_FROM` bytes is made with room.
//!
//! Cutting elements off the end is a change the snapshot barrier must see:
//! during a concurrent mark, a value reachable when the mark began must be
//! marked even if the list lets go of it before a marker reads the list (a
//! reader on another thread may have loaded it first and keep it). Values
//! overwritten in place go through the cell barrier; values cut off by a
//! shorter `len` are shaded while a mark is under way ([`shade_cut`],
//! `GcCell::cut`: unless allocated after the mark's stop, which this
//! cycle's sweep does not free), *before* the shorter
//! `len` is stored: a ragged mark's end waits for the barriers under way,
//! not for this call, so the shade must be done (or under way) by the
//! time a marker can read the shorter length (loam-runtime's `barrier.rs`,
//! "Ragged cycles", 3). Between marks a cut needs nothing: the list no
//! longer reaches them, and nothing else records them.
//!
//! Readers load `len` and then the array: every value a reader can see was
//! an element of the list at some time after it loaded `len`, or a value
//! an `extend` stored past the length before its iterator panicked (slots
//! below a published `len` were written before it; an array published
//! later holds copies of elements), so reachable during the reader's
//! `mutate` call, which no collection can end.
//!
//! # Uninitialised slots
//! Slots `filled..` of the current array are treated as never written
//! (an `extend` whose iterator panicked may have written some, which
//! nothing reads), where `filled` is the longest length the list had since
//! the array was installed (kept as `max(len, high)`: `high` is raised when
//! the length shrinks, so a push stores nothing more than the length).
//! Every slot a reader (or the collector's trace) touches is below
//! `filled`:
//! - An array is replaced (a push, an insert or an extend that needs room,
//!   or a `reserve`) by one that holds copies of its slots below `filled`,
//!   and the new array starts with that `filled`; or it is lengthened in
//!   place, which writes no slot below its length and keeps `filled`. So
//!   `filled` never shrinks from one array to the next, and an array, once
//!   replaced, keeps its slots below its last `filled` written. Capacities only
//!   grow.
//! - A reader that loaded length `l` got it from a store made while some
//!   array `A` was current, after the slots below `l` of `A` were written
//!   (release / acquire through the length cell), and then loads `A` or a
//!   later array (`A` was installed before that store). In `A`, `l` is at
//!   most what was filled when `l` was stored; in a later array, `l` is at
//!   most `A`'s `filled` when it was replaced, which the copied prefix of
//!   each array since covers.
//!
//! For a full array (`len == filled`) the copy is of the elements in use.
//! A `reserve` after pops has `len < filled`: a copy of the elements in
//! use alone would leave uninitialised, in the new array, slots that a
//! reader holding a length from before the pops may read (the loom
//! model's `ReserveInUse` variant).
//!
//! So the first store into a slot at `filled` has no reader: the writer
//! makes it a plain write of a whole cell. A slot below `filled` and past
//! `len` (left by a pop) may still be read by a reader holding an older
//! length: stores into it are atomic, through its cell. The loom models in
//! `list_model.rs` check both claims.

use crate::lock::WriterGuard;
use crate::lock::WriterLock;
use loam_runtime::{AllocError, CellValue, Gc, GcCards, GcCell, GcLog, Mutation, Trace, Tracer, MAX_TRACE_PARTS};
use std::ops::Range;
use std::cell::Cell;
use std::cmp::Ordering;
use std::fmt;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering as MemOrder};

/// One slot of a list's backing array: a barrier cell the array does not
/// trace (the list traces the slots in use), uninitialised until the list
/// first fills it (module docs).
#[repr(transparent)]
pub(crate) struct Slot<'gc, T: CellValue>(MaybeUninit<GcCell<'gc, T>>);

impl<'gc, T: CellValue + Trace + 'gc> Slot<'gc, T> {
    #[inline]
    fn uninit() -> Self {
        Slot(MaybeUninit::uninit())
    }

    /// The first store into this slot since its array was installed: a
    /// plain write of a whole cell, then, during a mark, the value stored
    /// again through the cell to shade it, as a push during a mark must.
    ///
    /// # Safety
    /// The slot is at its list's `filled` mark (never written, so no reader
    /// and no trace touches it until the length grows over it, module
    /// docs), the caller holds the writer lock, and the list's log was
    /// recorded in this `mutate` call if `T::NEEDS_TRACE` (a value that
    /// needs no tracing stores no pointer: `GcList::try_push`). The cell's
    /// bytes are inside its `UnsafeCell`, so writing through a pointer
    /// from the shared array is allowed.
    #[inline(always)]
    unsafe fn write_first(&self, mc: &Mutation<'gc>, value: T) {
        let cell = self.0.as_ptr().cast_mut();
        // SAFETY: as the caller vouches: nobody else reads or writes it.
        unsafe { cell.write(GcCell::new(value)) };
        if T::NEEDS_TRACE && mc.is_marking() {
            // SAFETY: the cell is written now and not yet reported; the
            // log was recorded (caller).
            unsafe { (*cell).fill_recorded(mc, value) };
        }
    }

    /// [`write_first`](Self::write_first) without the shade: for a push,
    /// whose caller stores the length over the slot and then hands the
    /// shade to [`shade_pushed`] (a list no marker has met needs none).
    ///
    /// # Safety
    /// As `write_first`; the caller calls `shade_pushed` for this slot
    /// once the length covers it, in this `mutate` call.
    #[inline(always)]
    unsafe fn write_first_unshaded(&self, value: T) {
        let cell = self.0.as_ptr().cast_mut();
        // SAFETY: as the caller vouches: nobody else reads or writes it.
        unsafe { cell.write(GcCell::new(value)) };
    }
}

/// After a push that wrote `slot` plainly (`Slot::write_first_unshaded`)
/// and then stored the length over it: during a concurrent mark, shades
/// the value unless no marker has met the list yet
/// (`GcLog::after_unreported_stores`: a young list's elements then stay
/// young, where shading them promoted them).
///
/// # Safety
/// The slot was written by `write_first_unshaded` in this `mutate` call,
/// under the writer lock, after `log` (the list's) was recorded, and the
/// length stored since covers it.
#[inline(always)]
unsafe fn shade_pushed<'gc, T: CellValue + Trace + 'gc>(mc: &Mutation<'gc>, log: &GcLog<'gc>, slot: &Slot<'gc, T>) {
    if T::NEEDS_TRACE {
        // The slot's first store, then the length over it, in this call
        // after the record (caller); nothing shaded it. The shade: the
        // cell is written (caller) and reported now (the length covers
        // it), and the log was recorded in this call.
        // SAFETY: as just said.
        unsafe {
            log.after_unreported_stores(mc, || {
                let cell = &*slot.0.as_ptr();
                cell.set_recorded(mc, cell.get());
            })
        };
    }
}

// SAFETY: reports nothing (3: `NEEDS_TRACE` false), so the array of slots
// is never scanned; the one list that owns the array reports the values of
// the slots in use (`ListObj`'s impl), which are all the list can reach:
// cells of another object reported by their owner, which item 1 allows
// because every store into them goes through `set_recorded` and its kin
// (never `GcCell::set`), and because no other list or object reaches the
// array. No `Drop` (4).
unsafe impl<T: CellValue + Trace> Trace for Slot<'_, T> {
    const NEEDS_TRACE: bool = false;
    /// A list's array grows in place where its block has room.
    const GROWS_IN_PLACE: bool = true;

    fn trace(&self, _: &mut Tracer) {}
}

type Items<'gc, T> = Gc<'gc, [Slot<'gc, T>]>;

/// The bytes from which a list's array, doubled, is made with room to
/// grow in place ([`ROOM_FACTOR`] times its slots), and the factor.
///
/// Growth by copying moves every element once per doubling: a million
/// pushes copied 8 MB, a fifth of the time of the push loop (0.46 ms of
/// 2.2; `benches/collections.rs`, `push_iter`). In place (`Mutation::
/// try_grow_in_place`) it moves nothing, three doublings in four. The
/// room is address space until the list fills it, but a huge block's
/// mapping may come back from the heap's cache resident, and with
/// transparent huge pages a block is resident 2 MiB at a time where it
/// is touched: so only from 1 MiB, where that is at most twice the array.
const ROOM_FROM: usize = 1 << 20;
const ROOM_FACTOR: usize = 8;

/// How far ahead of a push into a fresh slot the slot to come is
/// prefetched, in bytes (`prefetch_ahead`).
const PREFETCH_AHEAD: usize = 2048;

/// Asks the CPU for the line of the slot `PREFETCH_AHEAD` bytes past slot
/// `len` of the array at `items`. A push loop fills a fresh array one slot
/// at a time, and its stores wait for their lines: the hardware's
/// prefetchers do not cross a 4 KiB page. `Vec`'s push, a handful of
/// instructions, seems to hide that with more stores in flight; a list's
/// push, with its lock, does not. Measured with `benches/collections.rs`
/// (builds alternated, runs of 31 rounds, each the median of per-round
/// ratios to `Vec`): `push_iter` 1.45x - 1.62x without, 1.33x - 1.42x
/// with 512 bytes ahead, 1.26x - 1.36x with 1 KiB (four runs each),
/// 1.23x - 1.30x with 2 KiB (three); this form against the build before,
/// four pairs: 1.44x - 1.60x before, 1.28x - 1.50x after (pinned, three
/// pairs: 1.41x - 1.56x, 1.30x - 1.51x); `writer_push` 1.10x - 1.20x
/// before, 1.05x - 1.20x after (`docs/perf-log.md`, session 54). Not for
/// a push into a slot written before: the same prefetch there moved
/// `refill` within the noise (1.57x - 1.82x against 1.67x - 1.78x, three
/// runs). A prefetch changes nothing a program can observe.
///
/// Past the array's end too (its last 2 KiB of pushes), rather than test
/// for it: a prefetch is a hint that never faults, whatever the address,
/// and the test was a tenth of a push loop's time (1.44 – 1.46 ms a
/// million against 1.54 – 1.57, three alternations of a scratch loop).
#[inline(always)]
fn prefetch_ahead<T: CellValue>(items: *const Slot<'_, T>, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let size = std::mem::size_of::<Slot<'_, T>>();
        if size == 0 {
            return;
        }
        // No overflow: a list of sized slots holds under `isize::MAX`
        // bytes of them. `wrapping_add`: the address may be past the
        // array, and is never dereferenced.
        let line = items.wrapping_add(len + PREFETCH_AHEAD / size).cast();
        // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 target has;
        // a prefetch reads nothing the program sees and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, len);
}

/// The first `len` slots of `items`, as the cells they are.
///
/// # Safety
/// Those slots are initialised: `len` is at most the list's `filled` mark
/// for `items`, or a length read before `items` was (module docs).
#[inline]
unsafe fn in_use<'gc, T: CellValue + Trace + 'gc>(items: Items<'gc, T>, len: usize) -> &'gc [GcCell<'gc, T>] {
    let slots = &Gc::get(items)[..len];
    // SAFETY: `Slot` is a transparent `MaybeUninit<GcCell>`, so a slot has
    // the layout of its cell; the caller vouches that these are written.
    unsafe { std::slice::from_raw_parts(slots.as_ptr().cast::<GcCell<'gc, T>>(), len) }
}

/// The managed object behind a [`GcList`].
///
/// # Invariants
/// - `len <= items.len()` and `high <= items.len()`: a length is stored
///   only over an array that holds it, and an array is replaced only by a
///   larger one or lengthened in place (its length stored, release, before
///   any list length over it), so a length read before the array (acquire, over the
///   release that stored it) is at most the array's length, whatever was
///   stored since: `GcList::cell` reads an element on that alone. (The
///   traces clamp with `min` all the same: there, a broken invariant would
///   be a panic inside the collector.)
/// - With `filled = max(len, high)`: slots `0..len` hold the elements,
///   which the list's trace reports; slots `len..filled` hold values
///   nothing reports (stale, possibly freed), slots `filled..` were never
///   written; both are written only by `ListWriter::fill` /
///   `ListWriter::fill_run` and the fast pushes (`push_at_filled`,
///   `push_at_written`) before `len` grows over them, and by the copy
///   that fills a new array's slots `0..filled` before it is installed
///   (`GcList::grow_for`).
/// - Every array but `items` is initialised below the `filled` it had
///   when it was replaced, which the next array's `filled` starts at
///   (module docs).
/// - Every store happens under the writer lock, after `log.record` in the
///   same `mutate` call (`ListWriter`); a push that does not grow a list
///   whose elements need no tracing skips the record (`GcList::try_push`:
///   it stores no managed pointer).
pub(crate) struct ListObj<'gc, T: CellValue + Trace + 'gc> {
    /// Records the list for the next minor cycle when it changes, so that
    /// stores into its arrays promote nothing (`Writing`).
    log: GcLog<'gc>,
    /// Which elements changed since a marker last traced them, so that a
    /// minor cycle traces again only those parts of a long list
    /// (`GcCards`): every store into a slot (in use or spare) touches its
    /// card, in the store's call, before any shade of it that could unwind
    /// (`ListObj::touch`).
    cards: GcCards,
    /// Elements in use, a prefix of `items`.
    len: GcCell<'gc, usize>,
    /// The backing array.
    items: GcCell<'gc, Items<'gc, T>>,
    /// The longest length the list had before a shrink since `items` was
    /// installed, or the `filled` it was installed with (the slots copied
    /// from the array before): slots below `max(len, high)` are
    /// initialised. Read and written under the writer lock only, which
    /// orders it; acquire / release besides, since a stale mark would
    /// make a plain write race with a reader.
    high: AtomicUsize,
    /// The capacity the first array gets at least.
    min_capacity: usize,
    writer: WriterLock,
}

// SAFETY: reports the backing array and the values of the slots in use
// (1), read through their cells (2) with `get` (acquire), not the cells'
// own `trace` (a sequentially consistent read): that read serves
// `GcCell::set`'s store into a young object's cell, and no store into these
// cells is one (`set_recorded` and its kin, under the log's fence pair);
// always needs tracing (3); no `Drop` (4). Slots past `len` hold values
// the list no longer reaches (module docs).
//
// In parts (rule 6) once it is longer than two parts: part 0 is the log
// (first), the array and, for a short list, every value; part `k` the
// values of a fixed range of slots (`part_range`), read as the list is when
// the part runs, the length after the log (as `trace` reads it). Every change of the list
// goes through its log and its cells once a marker has met the log: a
// store shades what it overwrites, a cut what it cuts, a shift or a sort
// stores each value it moves through the barrier (`put`, `set_recorded`,
// or `GcLog::moving`'s shade), and growth (into a new array, or in place) keeps every
// value at its index.
unsafe impl<'gc, T: CellValue + Trace + 'gc> Trace for ListObj<'gc, T> {
    const TRACE_IN_PARTS: bool = T::NEEDS_TRACE;

    fn trace_part(&self, part: usize, tracer: &mut Tracer) -> usize {
        if part == 0 {
            self.log.trace(tracer);
        }
        let len = self.len.get();
        let items = self.items.get();
        // SAFETY: the length was read before the array (module docs).
        let cells = unsafe { in_use(items, len.min(items.len())) };
        let parts = parts_for(len);
        if part == 0 {
            items.trace(tracer);
            if parts == 1 {
                for cell in cells {
                    cell.get().trace(tracer);
                }
            } else {
                // The cards changed since the last trace, for the later
                // parts (rule 7).
                self.cards.take(tracer);
            }
        } else {
            let range = part_range(cells.len(), part);
            if self.cards.must_trace(tracer, range.clone()) {
                for cell in &cells[range] {
                    cell.get().trace(tracer);
                }
            }
        }
        parts
    }

    fn trace(&self, tracer: &mut Tracer) {
        self.log.trace(tracer);
        let len = self.len.get();
        let items = self.items.get();
        items.trace(tracer);
        if T::NEEDS_TRACE {
            // SAFETY: the length was read before the array (module docs).
            for cell in unsafe { in_use(items, len.min(items.len())) } {
                cell.get().trace(tracer);
            }
        }
    }
}

/// Elements a part of a collection's trace covers (`Trace::trace_part`)
/// at first: 2 KiB of 8-byte values, as the mark's chunks of an array.
pub(crate) const PART: usize = 256;

/// Parts of each size: the first [`GROUP`] parts cover [`PART`] elements
/// each, the next `GROUP` twice that, and so on, so that the most parts
/// the mark takes ([`MAX_TRACE_PARTS`], eight groups) cover 267 million
/// elements in steps of at most 32,768 of them; past that, the last part
/// holds the rest. Each part's range is fixed, whatever the length
/// (`Trace`, rule 6).
const GROUP: usize = MAX_TRACE_PARTS / 8;

/// The first element of part `part` (1 or more).
fn part_start(part: usize) -> usize {
    let (g, r) = ((part - 1) / GROUP, (part - 1) % GROUP);
    // Groups 0 .. g hold PART * GROUP * (2^g - 1) elements.
    (PART * GROUP) * ((1 << g) - 1) + r * (PART << g)
}

/// Parts of the trace of a collection of `len` elements: whole up to two
/// parts' worth (1); else part 0 (the collection's own fields) and as many
/// as cover `len` elements, at most [`MAX_TRACE_PARTS`] in all.
pub(crate) fn parts_for(len: usize) -> usize {
    if len <= 2 * PART {
        return 1;
    }
    // The first part that starts at or past `len`: the count. Every part
    // asks (each returns it), so not a search: group `g` starts at
    // `PART * GROUP * (2^g - 1)`, the last group that starts below `len`
    // holds its end, and its parts of `PART << g` elements count up to it.
    let per_group = PART * GROUP;
    let g = ((len - 1) / per_group + 1).ilog2().min(7) as usize;
    let into = len - per_group * ((1 << g) - 1);
    (1 + g * GROUP + into.div_ceil(PART << g)).min(MAX_TRACE_PARTS)
}

/// The elements of `all` that part `part` (1 or more) covers: a fixed
/// range whatever the length (`Trace`, rule 6), empty past the end; the
/// last part the mark takes, all the rest.
#[cfg(test)]
pub(crate) fn part_of<E>(all: &[E], part: usize) -> &[E] {
    &all[part_range(all.len(), part)]
}

/// The indices part `part` (1 or more) covers in a collection of `len`
/// elements: a fixed range whatever the length (`Trace`, rule 6).
pub(crate) fn part_range(len: usize, part: usize) -> Range<usize> {
    let start = part_start(part.min(MAX_TRACE_PARTS - 1));
    let end = if part >= MAX_TRACE_PARTS - 1 {
        len
    } else {
        part_start(part + 1)
    };
    start.min(len)..end.min(len)
}

impl<'gc, T: CellValue + Trace + 'gc> ListObj<'gc, T> {
    /// Marks slot `i`'s card changed (`GcCards`), for a list whose
    /// elements can hold managed pointers (the others are traced whole).
    /// Every store of a value into a slot does it, in the store's call.
    #[inline(always)]
    fn touch(&self, i: usize) {
        if T::NEEDS_TRACE {
            self.cards.touch(i);
        }
    }

    /// [`touch`](Self::touch) for the slots of `range`.
    #[inline]
    fn touch_range(&self, range: Range<usize>) {
        if T::NEEDS_TRACE {
            self.cards.touch_range(range);
        }
    }

    /// A push into slot `len`, the list's length, which is at `filled`:
    /// the slot written plainly, the length stored over it, then the
    /// shade, skipped while no marker has met the list (`shade_pushed`).
    /// One of the two fast pushes (with `push_at_written`) that both
    /// `GcList::try_push` and `ListWriter::try_push` make.
    ///
    /// # Safety
    /// `len` is the list's length, `len < items.len()` and `len >=
    /// high` (so slot `len` is at `filled`), `items` is the list's array,
    /// the caller holds the writer lock, and the log was recorded in this
    /// `mutate` call if `T::NEEDS_TRACE` (elements that need no tracing
    /// store no managed pointer: nothing to record, `GcList::try_push`).
    #[inline(always)]
    unsafe fn push_at_filled(&self, mc: &Mutation<'gc>, items: Items<'gc, T>, len: usize, value: T) {
        // In bounds: `len < items.len()` (caller). A raw pointer, not
        // `get_unchecked`: through the slice the writer's push loop ran
        // about 15% slower (1.5 - 1.6 ms against 1.4 ms a million pushes).
        // And `Gc::as_ptr`, not the slice's: building the slice loads the
        // length again, an acquire load of a growable array's length that
        // the compiler keeps even unused.
        // SAFETY: as just said.
        let slot = unsafe { &*Gc::as_ptr(items).add(len) };
        prefetch_ahead(Gc::as_ptr(items), len);
        // At `filled`, under the lock, after the record (caller); shaded
        // below once the length covers it.
        // SAFETY: as just said.
        unsafe { slot.write_first_unshaded(value) };
        self.touch(len);
        // A length is a number: `set_recorded` asks nothing of it.
        // SAFETY: as just said.
        unsafe { self.len.set_recorded(mc, len + 1) };
        // Written just above, under the lock, after the record; the length
        // covers it now.
        // SAFETY: as just said.
        unsafe { shade_pushed(mc, &self.log, slot) };
    }

    /// A push into slot `len`, below `filled` (left by a pop, a truncation
    /// or a clear): a reader holding an older length may read the slot, so
    /// the store goes through its cell and is shaded at once during a mark
    /// (as `ListWriter::fill`), and the length is stored over it. Inline,
    /// as `push_at_filled`: a list refilled after `clear` took the cold
    /// path for every push, 7.6 ms a million against 0.5 ms for `Vec`.
    ///
    /// # Safety
    /// `len` is the list's length, `len < high` (so slot `len` is below
    /// `filled` and `high <= items.len()`), `items` is the list's array,
    /// the caller holds the writer lock, and the log was recorded in this
    /// `mutate` call if `T::NEEDS_TRACE` (as `push_at_filled`).
    #[inline(always)]
    unsafe fn push_at_written(&self, mc: &Mutation<'gc>, items: Items<'gc, T>, len: usize, value: T) {
        // In bounds: `len < high <= items.len()` (caller). `Gc::as_ptr`
        // reads no length (`push_at_filled`).
        // SAFETY: as just said.
        let slot = unsafe { &*Gc::as_ptr(items).add(len) };
        // Touched before the store's shade, as every store is: a panic in
        // it (a `Trace` impl breaking its rule 5) leaves the card changed.
        self.touch(len);
        // Below `filled`, so written before; past the length, so the
        // list's trace does not report it until the length grows over it,
        // after this store, under the lock, after the record (caller).
        // SAFETY: as just said.
        unsafe { (*slot.0.as_ptr()).fill_recorded(mc, value) };
        // A length is a number: `set_recorded` asks nothing of it.
        // SAFETY: as just said.
        unsafe { self.len.set_recorded(mc, len + 1) };
    }
}

/// A `ListWriter`'s own copy of the list's length, array and `high`, as
/// its cold path takes and hands it back.
struct WriterState<'gc, T: CellValue + Trace + 'gc> {
    len: usize,
    items: Items<'gc, T>,
    high: usize,
}

/// During a concurrent mark, the deletion barrier for the values of
/// `cells`, cut off the end of a list (module docs; `GcCell::cut`).
fn shade_cut<'gc, T: CellValue + Trace + 'gc>(mc: &Mutation<'gc>, cells: &[GcCell<'gc, T>]) {
    if T::NEEDS_TRACE && mc.is_marking() {
        for c in cells {
            c.cut(mc);
        }
    }
}

/// Exclusive access to a [`GcList`] for a run of changes: the list's writer
/// lock held (taken once, not per change) and its log recorded in this
/// `mutate` call, which is what lets its stores skip the generational
/// barrier (`GcCell::set_recorded`: the next minor cycle traces the list
/// again, so nothing a store puts in the list is promoted). From
/// [`GcList::writer`]; every single-change method of `GcList` makes one.
///
/// While it lives, other threads' changes to the list wait, and this
/// thread's own `GcList` methods that change the list panic (reads are
/// fine). Like a `MutexGuard`, it must be dropped, not forgotten: a
/// writer passed to `std::mem::forget` holds the lock for good, and every
/// other thread's change then waits inside its `mutate` call, which holds
/// up the runtime's cycles too.
///
/// # Examples
/// ```
/// use loam_collections::GcList;
///
/// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let list = GcList::new(mc);
///     let w = list.writer(mc);
///     for i in 0..1000_u64 {
///         w.push(i);
///     }
///     assert_eq!(w.pop(), Some(999));
///     drop(w);
///     assert_eq!(list.len(), 999);
/// });
/// ```
pub struct ListWriter<'a, 'gc, T: CellValue + Trace + 'gc> {
    list: &'a GcList<'gc, T>,
    mc: &'a Mutation<'gc>,
    /// The list's length and array as this writer last set them: while it
    /// holds the lock nobody else changes them, so it reads its own copy.
    /// Reading the list's cells instead made a push wait for the store of
    /// the previous push's length (a dependency through memory, about
    /// 1 ns a push); these are written to the cells as well, for readers
    /// and the collector.
    len: Cell<usize>,
    items: Cell<Items<'gc, T>>,
    /// The list's `high`, likewise.
    high: Cell<usize>,
    _guard: WriterGuard<'a>,
}

impl<'a, 'gc, T: CellValue + Trace + 'gc> ListWriter<'a, 'gc, T> {
    /// A writer whose lock is taken with `WriterLock::lock`, for an
    /// operation of this crate's own.
    ///
    /// # Safety
    /// The operation runs none of its caller's code while the writer lives
    /// (no callback or iterator of the caller's, nor the drop glue of one;
    /// the elements, `CellValue`s, are `Copy`), and hands the writer to no
    /// caller: `WriterLock::try_lock_leaf` counts on it. A `push` from such
    /// code would take the owner's fast path while this writer holds the
    /// lock, and let `busy` go under it. An operation that runs its
    /// caller's code makes its writer with `for_callbacks`.
    // Always inlined: a single-change method of `GcList` is a writer made
    // and dropped around one store, and a call here costs more than the
    // store (the facade crate's inliner left it out of line).
    #[inline(always)]
    unsafe fn new(list: &'a GcList<'gc, T>, mc: &'a Mutation<'gc>) -> Self {
        Self::with_guard(list, mc, list.obj.writer.lock("GcList"))
    }

    /// A writer for an operation that runs its caller's code while it
    /// lives (a callback, an iterator, or the caller's own code around a
    /// writer it asked for): its lock is taken with
    /// `WriterLock::lock_for_callbacks`, so that the list changed from
    /// that code panics, a `push` included. Always inlined, as `new`
    /// (see `GcList::writer`).
    #[inline(always)]
    fn for_callbacks(list: &'a GcList<'gc, T>, mc: &'a Mutation<'gc>) -> Self {
        Self::with_guard(list, mc, list.obj.writer.lock_for_callbacks("GcList"))
    }

    #[inline(always)]
    fn with_guard(list: &'a GcList<'gc, T>, mc: &'a Mutation<'gc>, _guard: WriterGuard<'a>) -> Self {
        list.obj.log.record(mc);
        let (items, used) = list.view();
        ListWriter {
            list,
            mc,
            len: Cell::new(used.len()),
            items: Cell::new(items),
            high: Cell::new(list.obj.high.load(MemOrder::Acquire)),
            _guard,
        }
    }

    /// The array and the slots in use, from this writer's copy.
    #[inline]
    fn view(&self) -> (Items<'gc, T>, &'gc [GcCell<'gc, T>]) {
        let items = self.items.get();
        // SAFETY: `len <= filled` for our array while we hold the lock.
        (items, unsafe { in_use(items, self.len.get()) })
    }

    /// Slots of our array written at some time: those below are
    /// initialised.
    #[inline]
    fn filled(&self) -> usize {
        self.len.get().max(self.high.get())
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len.get()
    }

    /// Whether the list has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `index`, or `None` past the end.
    pub fn get(&self, index: usize) -> Option<T> {
        self.view().1.get(index).map(GcCell::get)
    }

    /// Makes room for `additional` more elements at least, as
    /// [`GcList::reserve`].
    ///
    /// # Panics
    /// At the heap limit (the list unchanged; see
    /// [`try_reserve`](Self::try_reserve)).
    pub fn reserve(&self, additional: usize) {
        if let Err(e) = self.try_reserve(additional) {
            alloc_failed("GcList::reserve", e);
        }
    }

    /// As [`GcList::try_reserve`]: the heap-limit `Err` leaves the list
    /// unchanged.
    pub fn try_reserve(&self, additional: usize) -> Result<(), AllocError<()>> {
        // Saturated, the allocation refuses it as a capacity overflow.
        let need = self.len().saturating_add(additional);
        self.list.grow_for(self, need).map(drop)
    }

    /// Appends `value`.
    ///
    /// # Panics
    /// At the heap limit (the list unchanged; see [`try_push`](Self::try_push)).
    #[inline]
    pub fn push(&self, value: T) {
        if let Err(e) = self.try_push(value) {
            alloc_failed("GcList::push", e.map(drop));
        }
    }

    /// Appends `value`, or gives it back in `Err` at the heap limit, with
    /// the list unchanged.
    #[inline]
    pub fn try_push(&self, value: T) -> Result<(), AllocError<T>> {
        let (items, len, high) = (self.items.get(), self.len.get(), self.high.get());
        if len >= items.len() {
            return self.push_cold(value);
        }
        if len < high {
            // `fill`'s store into a slot written before, without its
            // checks: `len < high` (just checked); the lock is held and
            // the log recorded (`with_guard`).
            // SAFETY: as just said.
            unsafe { self.list.obj.push_at_written(self.mc, items, len, value) };
        } else {
            // `fill`'s first store into a slot, without its checks.
            // Slot `len` is in bounds and at `filled` (`len < items.len()`,
            // `len >= high`, just checked); the lock is held and the log
            // recorded (`with_guard`).
            // SAFETY: as just said.
            unsafe { self.list.obj.push_at_filled(self.mc, items, len, value) };
        }
        self.len.set(len + 1);
        Ok(())
    }

    /// `push_slow` on a copy of this writer's state, handed back when it
    /// returns: the copy's address, not this writer's, is what the
    /// out-of-line call receives. A writer whose address no call takes
    /// is split into registers, so a push loop keeps its length in one;
    /// `self.push_slow` from here kept the length, the array and `high` in
    /// memory, reloaded after every push's release store of the length
    /// (a million pushes took 1.3 ms against 0.9 – 1.0 ms now, `Vec` 0.6).
    #[inline(always)]
    fn push_cold(&self, value: T) -> Result<(), AllocError<T>> {
        let state = WriterState {
            len: self.len.get(),
            items: self.items.get(),
            high: self.high.get(),
        };
        // Our guard holds the lock until this writer is dropped, after
        // the call returns; the copy lives in a `ManuallyDrop` there.
        // SAFETY: as just said.
        let guard = unsafe { self._guard.second() };
        let (r, state) = Self::push_slow_on(self.list, self.mc, guard, state, value);
        self.len.set(state.len);
        self.items.set(state.items);
        self.high.set(state.high);
        match r {
            Ok(r) => r,
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }

    /// `push_slow` on a writer made of `state` and `guard` (a copy of the
    /// caller's, never dropped); returns the state as it left it, an
    /// unwind included: a panic after the growth installed a new array
    /// must not leave the caller's writer on the old one, where a caller
    /// that caught the panic would write on (nothing in the slow path
    /// unwinds today but a broken invariant's assertion).
    #[cold]
    #[inline(never)]
    fn push_slow_on(
        list: &'a GcList<'gc, T>,
        mc: &'a Mutation<'gc>,
        guard: WriterGuard<'a>,
        state: WriterState<'gc, T>,
        value: T,
    ) -> (std::thread::Result<Result<(), AllocError<T>>>, WriterState<'gc, T>) {
        let w = std::mem::ManuallyDrop::new(ListWriter {
            list,
            mc,
            len: Cell::new(state.len),
            items: Cell::new(state.items),
            high: Cell::new(state.high),
            _guard: guard,
        });
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.push_slow(value)));
        let state = WriterState {
            len: w.len.get(),
            items: w.items.get(),
            high: w.high.get(),
        };
        (r, state)
    }

    /// A push that grows the array first (`try_push` takes it only when
    /// the array is full).
    #[inline]
    fn push_slow(&self, value: T) -> Result<(), AllocError<T>> {
        let len = self.len.get();
        let new_len = one_more(len, "push");
        self.list
            .grow_for(self, new_len)
            .map_err(|e| e.map(|()| value))?;
        self.fill(len, value);
        self.set_len(new_len);
        Ok(())
    }

    /// Removes and returns the last element.
    #[inline]
    pub fn pop(&self) -> Option<T> {
        let (_, used) = self.view();
        let value = used.last()?.get();
        // Shaded before the cut (module docs).
        shade_cut(self.mc, &used[used.len() - 1..]);
        self.set_len(used.len() - 1);
        Some(value)
    }

    /// Keeps the first `len` elements (nothing happens if there are fewer).
    fn cut_to(&self, len: usize) {
        let (_, used) = self.view();
        if len >= used.len() {
            return;
        }
        // Shaded before the cut (module docs).
        shade_cut(self.mc, &used[len..]);
        self.set_len(len);
    }

    /// Replaces element `index` with `value`; returns the old one.
    ///
    /// # Panics
    /// If `index >= len()`.
    #[inline]
    pub fn set(&self, index: usize, value: T) -> T {
        let (_, used) = self.view();
        let Some(cell) = used.get(index) else {
            out_of_range("GcList::set", index, used.len());
        };
        let old = cell.get();
        self.put(index, value);
        old
    }

    /// Stores into slot `i`, in use (below the length).
    #[inline]
    fn put(&self, i: usize, value: T) {
        let (_, used) = self.view();
        let Some(cell) = used.get(i) else {
            panic!("loam-collections: slot {i} is not in use (len {})", used.len());
        };
        self.list.obj.touch(i);
        // SAFETY: the list's log was recorded in this call (`with_guard`), and
        // slot `i` is in use, so the list's trace reports it, now and
        // after (we hold the writer lock).
        unsafe { cell.set_recorded(self.mc, value) };
    }

    /// Stores into spare slot `i` (at or past the length, at most
    /// `filled`), which the length is then grown over.
    #[inline]
    fn fill(&self, i: usize, value: T) {
        let (items, len, filled) = (self.items.get(), self.len.get(), self.filled());
        assert!(
            len <= i && i <= filled && i < items.len(),
            "loam-collections: slot {i} is not the next spare one (len {len}, filled {filled})"
        );
        let slot = &Gc::get(items)[i];
        self.list.obj.touch(i);
        if i < filled {
            // SAFETY: below `filled`, so written before. The log was
            // recorded (`with_guard`); slot `i` is past the length, so the list's
            // trace does not report it, and the length grows over it only
            // after this store, under the writer lock.
            unsafe { (*slot.0.as_ptr()).fill_recorded(self.mc, value) };
            return;
        }
        // The first store into slot `filled`, which no reader and no trace
        // touches until the length grows over it (module docs).
        // SAFETY: at `filled`, under the lock, the log recorded (`with_guard`).
        unsafe { slot.write_first(self.mc, value) };
    }

    /// Stores the items of `values` into the spare slots from the length
    /// on, as many as there are slots, and sets `*n` to how many it stored,
    /// also when `values` panics (the panic is resumed after); the length
    /// is the caller's to grow over them, and the
    /// shade of what it stored from `filled` on (slots no reader can reach
    /// before that length) its to hand to `GcLog::after_unreported_stores`
    /// after that (`shade_run`): both are [`Run`]'s drop.
    fn fill_run(&self, values: impl Iterator<Item = T>, n: &mut usize) {
        let (items, len, filled) = (self.items.get(), self.len.get(), self.filled());
        let spare = &Gc::get(items)[len..];
        let base = spare.as_ptr();
        let written = filled - len; // spare slots written before
        // Ended at its first `None`: an iterator that yields again after
        // one must not reach the plain writes below with slots below
        // `filled` left (a reader holding an older length may read those).
        let mut values = Ended::new(values.take(spare.len()));
        // The count lives in this frame, not behind `n`: counted through
        // the pointer, every item was a store to it and the plain writes
        // no longer vectorised (an `extend` of a million `u64` 1.0 -> 1.2
        // ms). A panic of `values` is caught to hand the count over, and
        // resumed.
        let mut count = 0;
        let stored = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for x in values.by_ref().take(written) {
                // `count < written <= spare.len()`: a spare slot below
                // `filled`, as in `fill`. Shaded at once, not by
                // `shade_run`: a reader holding an older length may read
                // it before the length grows over it, or never if the
                // iterator panics first.
                // SAFETY: as just said.
                unsafe { (*(*base.add(count)).0.as_ptr()).fill_recorded(self.mc, x) };
                count += 1;
            }
            // `for_each`: a chain of iterators runs each part as its own
            // loop, and a run of plain writes vectorises.
            values.for_each(|x| {
                // `count < spare.len()` (the `take`), at or past `filled`:
                // the first store into the slot, as in `fill`.
                // SAFETY: as just said.
                unsafe { (*base.add(count)).0.as_ptr().cast_mut().write(GcCell::new(x)) };
                count += 1;
            });
        }));
        *n = count;
        self.list.obj.touch_range(len..len + count);
        if let Err(panic) = stored {
            std::panic::resume_unwind(panic);
        }
    }

    /// The end of a `fill_run`, on every path: the length grown over the
    /// slots it stored, and their shade. Run by a drop, so that an
    /// iterator that panics mid-run leaves the items it gave so far in the
    /// list, as `Vec::extend` does (they were lost: written, but left past
    /// the length).
    #[must_use]
    fn run_end(&self, len: usize, filled: usize) -> Run<'_, 'a, 'gc, T> {
        Run {
            w: self,
            len,
            filled,
            n: 0,
        }
    }

    /// After a `fill_run` and the length grown over its slots: the shade of
    /// the `n` from `from`, which were at or past `filled` (never written
    /// before, so no reader reached them before that length), skipped while
    /// no marker has met the list (`GcLog::after_unreported_stores`, as a
    /// push's `shade_pushed`).
    fn shade_run(&self, from: usize, n: usize) {
        if !T::NEEDS_TRACE || n == 0 {
            return;
        }
        let items = self.items.get();
        // The slots were written first by `fill_run` in this call, after
        // the record (`with_guard`), unreachable until the length just grown over
        // them, and nothing shaded them; the shade reads each (below the
        // length, so written) and stores it again through the barrier;
        // the list's trace reads its log first.
        // SAFETY: as just said.
        unsafe {
            self.list.obj.log.after_unreported_stores(self.mc, || {
                for slot in &Gc::get(items)[from..from + n] {
                    let cell = &*slot.0.as_ptr();
                    cell.set_recorded(self.mc, cell.get());
                }
            })
        };
    }

    /// Installs a new backing array whose first `filled` slots are copies
    /// of the current one's (the elements in use and the slots pops left),
    /// and nothing else is written.
    fn set_items(&self, array: Items<'gc, T>, filled: usize) {
        self.set_high(filled);
        let cell = &self.list.obj.items;
        // The log was recorded (`with_guard`); the array cell is reported by the
        // list's trace, after its log; the writer lock is held; and the
        // new array is shaded below unless no marker has met the list (a
        // young list's grown arrays are not promoted).
        // SAFETY: as just said.
        unsafe { cell.set_unshaded(self.mc, array) };
        self.items.set(array);
        // Every value keeps its index; the cards' scale follows the
        // capacity (`GcCards::rescale`).
        if T::NEEDS_TRACE {
            self.list.obj.cards.rescale(Gc::get(array).len());
        }
        // The store just above, with `set_unshaded`, in this call after
        // the record; the list's trace reads its log first.
        // SAFETY: as just said.
        unsafe { self.list.obj.log.after_unreported_stores(self.mc, || cell.set_recorded(self.mc, cell.get())) };
    }

    #[inline]
    fn set_high(&self, high: usize) {
        self.list.obj.high.store(high, MemOrder::Release);
        self.high.set(high);
    }

    #[inline]
    fn set_len(&self, len: usize) {
        let old = self.len.get();
        if len < old && old > self.high.get() {
            self.set_high(old); // slots up to `old` stay written
        }
        self.list.obj.len.set(self.mc, len);
        self.len.set(len);
    }
}

/// An iterator that ends for good at the first `None` of `inner`.
/// `Iterator::fuse` does not promise it: it trusts `FusedIterator`, a safe
/// trait that an iterator may implement and still yield after a `None`
/// (`fill_run`'s second loop then went on writing into slots below
/// `filled` that a reader may load).
struct Ended<I> {
    inner: I,
    done: bool,
}

impl<I> Ended<I> {
    fn new(inner: I) -> Self {
        Ended { inner, done: false }
    }
}

impl<I: Iterator> Iterator for Ended<I> {
    type Item = I::Item;

    #[inline]
    fn next(&mut self) -> Option<I::Item> {
        if self.done {
            return None;
        }
        let item = self.inner.next();
        self.done = item.is_none();
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            self.inner.size_hint()
        }
    }

    /// The inner iterator's own loop (a chain's parts each run as a loop
    /// of their own, and a run of plain writes vectorises), which ends at
    /// its first `None`: nothing is asked of it afterwards, the adapter
    /// being consumed.
    #[inline]
    fn fold<B, F: FnMut(B, I::Item) -> B>(self, init: B, f: F) -> B {
        if self.done {
            init
        } else {
            self.inner.fold(init, f)
        }
    }
}

/// [`ListWriter::run_end`]: publishes a `fill_run`'s items when dropped.
struct Run<'w, 'a, 'gc, T: CellValue + Trace + 'gc> {
    w: &'w ListWriter<'a, 'gc, T>,
    len: usize,
    filled: usize,
    /// Items stored, set by `fill_run` (on a panic of its iterator too).
    n: usize,
}

impl<'gc, T: CellValue + Trace + 'gc> Drop for Run<'_, '_, 'gc, T> {
    fn drop(&mut self) {
        let end = self.len + self.n;
        self.w.set_len(end);
        // The slots `fill_run` wrote first, from `filled` on (it shaded
        // those below as it wrote them).
        self.w.shade_run(self.filled, end.saturating_sub(self.filled));
    }
}

/// A growable array of `T` in the managed heap: a small object that points,
/// through a barrier cell, to a managed array of cells.
///
/// `GcList` is a handle (`Copy`, one word), rooted and stored like any `Gc`
/// (it is a [`CellValue`], so a `GcCell` or another collection can hold
/// it). Elements are values that fit a cell: managed pointers (`Gc<'gc, R>`
/// for records of any size), `GcString`s, other collections' handles, and
/// primitives. Growth allocates a new array of twice the capacity and leaves
/// the old one to the collector, or, where the array's block has room (an
/// array doubled past 1 MiB is made with room for eight times its slots),
/// lengthens it in place.
///
/// Every change takes the list's `Mutation`: a store is one barrier of O(1)
/// work, so a large old list changed in place keeps the collector's cycles
/// minor. Reads take no lock (see the crate docs on threads).
///
/// Index out of range panics with the index and the length, as `Vec` does
/// (the words are the list's own: `GcList::remove index (is 3) should be <
/// len (is 3)`).
///
/// # Examples
/// ```
/// use loam_collections::GcList;
/// use loam_runtime::Runtime;
///
/// let rt = Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let list = GcList::new(mc);
///     for x in [5_u64, 3, 8, 1] {
///         list.push(mc, x);
///     }
///     list.sort(mc);
///     assert_eq!(list.to_vec(), [1, 3, 5, 8]);
///     assert_eq!(list.remove(mc, 0), 1);
///     assert_eq!(list.iter().sum::<u64>(), 16);
/// });
/// ```
///
/// A list cannot outlive its `mutate` call unrooted (root it, or store it in
/// a rooted object):
/// ```compile_fail
/// # let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
/// # let mut m = rt.attach();
/// let mut kept = None;
/// m.mutate(|mc| kept = Some(loam_collections::GcList::<u64>::new(mc)));
/// ```
/// nor be changed through another runtime's `Mutation`:
/// ```compile_fail
/// # use loam_runtime::Runtime;
/// let (a, b) = (Runtime::new(), Runtime::new());
/// let mut ma = a.attach();
/// ma.mutate(|mc| {
///     let list = loam_collections::GcList::new(mc);
///     std::thread::scope(|s| {
///         s.spawn(|| b.attach().mutate(|mcb| list.push(mcb, 1_u64)));
///     });
/// });
/// ```
#[repr(transparent)]
pub struct GcList<'gc, T: CellValue + Trace + 'gc> {
    obj: Gc<'gc, ListObj<'gc, T>>,
}

impl<'gc, T: CellValue + Trace + 'gc> Clone for GcList<'gc, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<'gc, T: CellValue + Trace + 'gc> Copy for GcList<'gc, T> {}

// SAFETY: one `Gc`, a single pointer word with no padding.
unsafe impl<'gc, T: CellValue + Trace + 'gc> CellValue for GcList<'gc, T> {}

// SAFETY: `Unbranded` is `GcList` with its one lifetime, the brand, bound
// by the `Rootable` parameter, and its `'static` element type as it is:
// its `Root` at `'gc` is `Self`. (Elements that carry the brand, such as
// `GcString`, need the `Rootable!` type written out.)
unsafe impl<'gc, T: CellValue + Trace + 'static> loam_runtime::Rebrand<'gc> for GcList<'gc, T> {
    type Unbranded = dyn for<'a> loam_runtime::Rootable<'a, Root = GcList<'a, T>>;
}

// SAFETY: reports the one managed pointer it holds (1, 2, 3); no `Drop` (4).
unsafe impl<'gc, T: CellValue + Trace + 'gc> Trace for GcList<'gc, T> {
    fn trace(&self, tracer: &mut Tracer) {
        self.obj.trace(tracer)
    }
}

/// The panic of a method that allocates, at the heap limit: out of line,
/// so that the formatting stays out of the method's inlined fast path.
#[cold]
#[inline(never)]
fn alloc_failed(what: &str, e: AllocError<()>) -> ! {
    panic!("loam-collections: {what}: {e}")
}

/// `len + 1` for an element more: only a list of a zero-sized type can
/// hold `usize::MAX` elements, and one more is a capacity overflow (as
/// for `Vec`), not a wrapped length.
#[inline]
fn one_more(len: usize, what: &str) -> usize {
    len.checked_add(1)
        .unwrap_or_else(|| panic!("loam-collections: GcList::{what}: capacity overflow"))
}

#[cold]
#[inline(never)]
fn out_of_range(what: &str, index: usize, len: usize) -> ! {
    panic!("{what} index (is {index}) should be < len (is {len})")
}

impl<'gc, T: CellValue + Trace + 'gc> GcList<'gc, T> {
    /// An empty list (it allocates its array on the first push).
    ///
    /// # Panics
    /// At the heap limit (see [`try_new`](Self::try_new)).
    pub fn new(mc: &Mutation<'gc>) -> Self {
        Self::try_new(mc).unwrap_or_else(|e| alloc_failed("GcList::new", e))
    }

    /// [`new`](Self::new), or the heap-limit `Err`.
    pub fn try_new(mc: &Mutation<'gc>) -> Result<Self, AllocError<()>> {
        Self::try_empty(mc, 0)
    }

    /// An empty list whose first array, allocated on the first push, holds
    /// `capacity` elements at least. (To allocate the array now, with the
    /// heap-limit `Err` if it does not fit: [`try_new`](Self::try_new),
    /// then [`try_reserve`](Self::try_reserve) of `capacity`.)
    ///
    /// # Panics
    /// If `capacity` elements cannot fit in the address space ("capacity
    /// overflow", as `Vec::with_capacity`): here, not at the first push,
    /// whose `try_` form would then return a capacity-overflow `Err`. At
    /// the heap limit.
    pub fn with_capacity(mc: &Mutation<'gc>, capacity: usize) -> Self {
        let slot = std::mem::size_of::<Slot<'gc, T>>().max(1);
        // The array's header words too (a few words; 64 bytes is more).
        assert!(
            capacity <= (isize::MAX as usize - 64) / slot,
            "loam-collections: GcList::with_capacity({capacity}): capacity overflow"
        );
        Self::try_empty(mc, capacity).unwrap_or_else(|e| alloc_failed("GcList::with_capacity", e))
    }

    /// A list holding copies of `items`, in one array of exactly that size.
    ///
    /// # Panics
    /// At the heap limit (see [`try_from_slice`](Self::try_from_slice)).
    pub fn from_slice(mc: &Mutation<'gc>, items: &[T]) -> Self {
        Self::try_from_slice(mc, items).unwrap_or_else(|e| alloc_failed("GcList::from_slice", e))
    }

    /// [`from_slice`](Self::from_slice), or the heap-limit `Err`.
    pub fn try_from_slice(mc: &Mutation<'gc>, items: &[T]) -> Result<Self, AllocError<()>> {
        let array =
            mc.try_alloc_from_iter(items.iter().map(|&x| Slot(MaybeUninit::new(GcCell::new(x)))))?;
        Self::try_make(mc, array, items.len(), 0)
    }

    /// A list holding the items of `iter`, in order.
    ///
    /// # Panics
    /// At the heap limit (see [`try_from_iter`](Self::try_from_iter)), or
    /// if `iter` panics.
    pub fn from_iter(mc: &Mutation<'gc>, iter: impl IntoIterator<Item = T>) -> Self {
        Self::try_from_iter(mc, iter).unwrap_or_else(|e| alloc_failed("GcList::from_iter", e))
    }

    /// [`from_iter`](Self::from_iter), or the heap-limit `Err` (see
    /// [`try_extend`](Self::try_extend) for what it takes from `iter`).
    ///
    /// # Panics
    /// If `iter` panics.
    pub fn try_from_iter(mc: &Mutation<'gc>, iter: impl IntoIterator<Item = T>) -> Result<Self, AllocError<()>> {
        let mut iter = Ended::new(iter.into_iter());
        let list = Self::try_new(mc)?;
        // A writer that does not call out, though `iter` runs under it: a
        // fresh list's `try_extend` would cost a split (`GcString::split`)
        // two more compare-and-swaps. `iter` was made before the list, and
        // no code reaches a list but through the value this returns.
        // SAFETY: as just said.
        list.try_extend_by(unsafe { list.writer_of_fresh(mc) }, &mut iter)?;
        Ok(list)
    }

    /// An empty list over an empty array, whose first push allocates an
    /// array of `min_capacity` at least.
    fn try_empty(mc: &Mutation<'gc>, min_capacity: usize) -> Result<Self, AllocError<()>> {
        let items = mc.try_alloc_from_iter(std::iter::empty())?;
        Self::try_make(mc, items, 0, min_capacity)
    }

    /// The list object over `items`, whose first `len` slots are written.
    fn try_make(
        mc: &Mutation<'gc>,
        items: Items<'gc, T>,
        len: usize,
        min_capacity: usize,
    ) -> Result<Self, AllocError<()>> {
        let obj = mc.try_alloc(ListObj {
            log: GcLog::new(),
            cards: GcCards::with_slots(len.max(min_capacity)),
            len: GcCell::new(len),
            items: GcCell::new(items),
            high: AtomicUsize::new(0),
            min_capacity,
            writer: WriterLock::default(),
        });
        Ok(GcList { obj: obj.map_err(|e| e.map(drop))? })
    }

    /// Whether `a` and `b` are the same list.
    pub fn ptr_eq(a: Self, b: Self) -> bool {
        Gc::ptr_eq(a.obj, b.obj)
    }

    /// The array and the slots in use, from the length and the array read
    /// in that order (module docs).
    #[inline]
    fn view(&self) -> (Items<'gc, T>, &'gc [GcCell<'gc, T>]) {
        let len = self.obj.len.get();
        let items = self.obj.items.get();
        // The length was read before the array, so it is at most the
        // array's length and its slots below it are written (module docs);
        // `in_use` checks the first.
        // SAFETY: as just said.
        (items, unsafe { in_use(items, len) })
    }

    /// The cell of element `index`, or the length if `index` is past it:
    /// [`view`](Self::view) without the array's own length, for the
    /// element reads, which then load two words of the list's and the
    /// element, with one bounds check (the array's length is a load that
    /// waits for the array's; `docs/perf-log.md`, session 49).
    #[inline(always)]
    fn cell(&self, index: usize) -> Result<&'gc GcCell<'gc, T>, usize> {
        let len = self.obj.len.get();
        if index >= len {
            return Err(len);
        }
        let items = self.obj.items.get();
        debug_assert!(len <= items.len(), "a list's length past its array");
        // `index < len`, and a length read before the array is at most the
        // array's length, with every slot below it written (module docs,
        // "Uninitialised slots": capacities only grow, and a length is
        // stored only over an array that holds it); a slot is laid out as
        // its cell.
        // SAFETY: as just said.
        Ok(unsafe { &*Gc::get(items).as_ptr().add(index).cast::<GcCell<'gc, T>>() })
    }

    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.obj.len.get()
    }

    /// Whether the list has no element.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements the list holds before it grows again: the current array's
    /// length, or for a list made by [`with_capacity`](Self::with_capacity)
    /// and not pushed to yet, that capacity (its first push allocates an
    /// array of that many, as `Vec::with_capacity` did at once; it said 0).
    pub fn capacity(&self) -> usize {
        self.obj.items.get().len().max(self.obj.min_capacity)
    }

    /// Element `index`, or `None` past the end.
    #[inline]
    pub fn get(&self, index: usize) -> Option<T> {
        self.cell(index).ok().map(GcCell::get)
    }

    /// Element `index`.
    ///
    /// # Panics
    /// If `index >= len()`, with both in the message.
    #[inline]
    pub fn at(&self, index: usize) -> T {
        match self.cell(index) {
            Ok(cell) => cell.get(),
            Err(len) => out_of_range("GcList::at", index, len),
        }
    }

    /// The first element.
    pub fn first(&self) -> Option<T> {
        self.get(0)
    }

    /// The last element.
    pub fn last(&self) -> Option<T> {
        self.view().1.last().map(GcCell::get)
    }

    /// Replaces element `index` with `value`, through the barrier, and
    /// returns the old one.
    ///
    /// # Panics
    /// If `index >= len()`.
    // Always inlined, as `try_push`: a writer made and dropped around one
    // store is split into registers only where it is inlined.
    #[inline(always)]
    pub fn set(&self, mc: &Mutation<'gc>, index: usize, value: T) -> T {
        // SAFETY: a set runs no caller code.
        unsafe { ListWriter::new(self, mc) }.set(index, value)
    }

    /// Exclusive access for a run of changes, the writer lock taken once
    /// (see [`ListWriter`]).
    ///
    /// # Panics
    /// If this thread holds the list's writer already.
    // Always inlined: a writer returned from an out-of-line call is made
    // at an address, and its push loop kept its length in memory (1.6 ms a
    // million pushes against 1.3 – 1.4).
    #[inline(always)]
    pub fn writer<'a>(&'a self, mc: &'a Mutation<'gc>) -> ListWriter<'a, 'gc, T> {
        ListWriter::for_callbacks(self, mc)
    }

    /// [`writer`](Self::writer) for a list made by the caller and not yet
    /// handed to any code, which the caller's code run while the writer
    /// lives therefore cannot reach: its lock does not mark the bias
    /// (`WriterLock::lock_for_callbacks`), which saves two
    /// compare-and-swaps.
    ///
    /// # Safety
    /// No code run while the writer lives changes this list but through
    /// the writer (a `push` that did would take `WriterLock::try_lock_leaf`'s
    /// fast path while the writer holds the lock).
    unsafe fn writer_of_fresh<'a>(&'a self, mc: &'a Mutation<'gc>) -> ListWriter<'a, 'gc, T> {
        // SAFETY: no code the writer's holder runs reaches this list (the
        // caller vouches), so none of it can re-enter.
        unsafe { ListWriter::new(self, mc) }
    }

    /// The capacity of the array that replaces one of `cap` slots when
    /// `need` are wanted: twice as large at least.
    fn grown_capacity(&self, cap: usize, need: usize) -> usize {
        need.max(cap.saturating_mul(2))
            .max(self.obj.min_capacity)
            .max(4)
    }

    /// Makes room for `need` elements when the array holds fewer: twice as
    /// many slots (at least), in place if its block has room, else in a new
    /// array; the spare slots are left uninitialised. A heap-limit `Err`
    /// leaves the list as it was.
    fn grow_for(
        &self,
        w: &ListWriter<'_, 'gc, T>,
        need: usize,
    ) -> Result<Items<'gc, T>, AllocError<()>> {
        let (items, filled) = (w.items.get(), w.filled());
        if need <= items.len() {
            return Ok(items);
        }
        let cap = self.grown_capacity(items.len(), need);
        // In place where the array's block has room (it was made with
        // some, below): no copy, and no old array for the collector. Its
        // slots past `filled` stay uninitialised, as a new array's would,
        // and every value keeps its index.
        // (Only an array of `ROOM_FROM` bytes or more can have room for
        // twice its slots: a smaller one's block holds at most a slice's
        // slack, so it is not asked, which saves its growth a claim and a
        // look at its block.)
        let large = items.len().saturating_mul(size_of::<Slot<'gc, T>>()) >= ROOM_FROM;
        if large && w.mc.try_grow_in_place(items, cap, Slot::uninit)? {
            if T::NEEDS_TRACE {
                self.obj.cards.rescale(Gc::get(items).len());
            }
            return Ok(items);
        }
        // Writes nothing: the slots are `MaybeUninit`. A list that doubles
        // its way past `ROOM_FROM` bytes gets room to double three more
        // times in place.
        let slots = (0..cap).map(|_| Slot::uninit());
        let array = if cap == items.len().saturating_mul(2) && cap.saturating_mul(size_of::<Slot<'gc, T>>()) >= ROOM_FROM {
            w.mc
                .try_alloc_from_iter_with_room(slots, cap.saturating_mul(ROOM_FACTOR))?
        } else {
            w.mc.try_alloc_from_iter(slots)?
        };
        let dst = Gc::get(array).as_ptr().cast::<GcCell<'gc, T>>().cast_mut();
        // Every slot written so far is copied, not only those in use, and
        // the new array starts with that `filled` (module docs,
        // "Uninitialised slots"). `array` is fresh (no other thread can
        // reach it before `set_items` publishes it), its slots laid out as
        // cells whose bytes are inside the cells' `UnsafeCell`s. The source slots, below `filled`, are
        // written, and only read here: every other writer of them waits
        // for our lock, and the collector never writes. A bitwise copy of a
        // cell of a `Copy` value is a copy of it (a stale one past the
        // length is never read as more than a value a reader could have
        // read in the old array, nor traced).
        // SAFETY: as just said; `cap > items.len() >= filled` slots to
        // write.
        unsafe {
            let src = Gc::get(items).as_ptr().cast::<GcCell<'gc, T>>();
            std::ptr::copy_nonoverlapping(src, dst, filled);
        }
        w.set_items(array, filled);
        Ok(array)
    }

    /// Appends `value`.
    ///
    /// # Panics
    /// At the heap limit (the list is unchanged; see [`try_push`](Self::try_push)).
    #[inline]
    pub fn push(&self, mc: &Mutation<'gc>, value: T) {
        if let Err(e) = self.try_push(mc, value) {
            alloc_failed("GcList::push", e.map(drop));
        }
    }

    /// Appends `value`, or gives it back in `Err` at the heap limit, with
    /// the list unchanged.
    // Always inlined: with `#[inline]` LLVM called it from a caller's push
    // loop (the lock's and the log's checks make it large), and a million
    // pushes took 2.7 ms where inlined they take 1.3 ms (into a cleared
    // list; `benches/collections.rs`, `refill`).
    #[inline(always)]
    pub fn try_push(&self, mc: &Mutation<'gc>, value: T) -> Result<(), AllocError<T>> {
        // `ListWriter::try_push`'s fast case written out on the list's own
        // fields: a writer built for one push was kept in memory around the
        // call of its slow path, about 1.5 ns a push.
        let obj = &*self.obj;
        // A push runs none of its caller's code under the lock (growth
        // allocates, and the collector's assist runs no code that holds a
        // `Mutation`), so it skips `lock`'s re-entrance check. Any other
        // thread than the owner, and an owner inside an operation that
        // calls out, push through `push_cold`'s writer, whose `lock` checks.
        // SAFETY: a push runs no caller code, and every operation on the
        // list that does takes `lock_for_callbacks` (`ListWriter::new`'s
        // callers vouch for theirs; the rest use `for_callbacks`).
        let Some(guard) = (unsafe { obj.writer.try_lock_leaf() }) else {
            return Self::push_cold(self, mc, value);
        };
        // A push that does not grow stores an element and the length, no
        // managed pointer unless the element is one: for elements that
        // need no tracing (numbers, say) the log has nothing to record and
        // no store here can free memory (`GcLog::record`'s two reasons),
        // which saves a push three to five of its twelve loads and their
        // branches (`refill`, three alternations on a noisy VM: 1.71x -
        // 1.90x `Vec` before, 1.53x - 1.76x after; `docs/perf-log.md`,
        // session 45). Growth, in `push_cold`, lengthens the array or
        // installs a new one, and records as every writer.
        if T::NEEDS_TRACE {
            obj.log.record(mc);
        }
        let items = obj.items.get();
        let len = obj.len.get();
        if len < items.len() {
            if len >= obj.high.load(MemOrder::Acquire) {
                // Slot `len` is in bounds and at `filled` (`len <
                // items.len()`, `len >= high`, just checked); the lock is
                // held and the log recorded just above if it must be.
                // SAFETY: as just said.
                unsafe { obj.push_at_filled(mc, items, len, value) };
            } else {
                // `len < high` (just checked); the lock is held and the
                // log recorded just above if it must be.
                // SAFETY: as just said.
                unsafe { obj.push_at_written(mc, items, len, value) };
            }
            drop(guard);
            return Ok(());
        }
        drop(guard);
        Self::push_cold(self, mc, value)
    }

    /// A push that grows the array, or that did not find the list's lock
    /// biased to this thread.
    #[cold]
    #[inline(never)]
    fn push_cold(&self, mc: &Mutation<'gc>, value: T) -> Result<(), AllocError<T>> {
        // SAFETY: a push runs no caller code.
        unsafe { ListWriter::new(self, mc) }.try_push(value)
    }

    /// Removes and returns the last element.
    // Always inlined, as `set`.
    #[inline(always)]
    pub fn pop(&self, mc: &Mutation<'gc>) -> Option<T> {
        // SAFETY: a pop runs no caller code.
        unsafe { ListWriter::new(self, mc) }.pop()
    }

    /// Inserts `value` at `index`, shifting the elements after it.
    ///
    /// # Panics
    /// If `index > len()`, or at the heap limit (the list unchanged; see
    /// [`try_insert`](Self::try_insert)).
    pub fn insert(&self, mc: &Mutation<'gc>, index: usize, value: T) {
        if let Err(e) = self.try_insert(mc, index, value) {
            alloc_failed("GcList::insert", e.map(drop));
        }
    }

    /// Inserts `value` at `index`, shifting the elements after it, or gives
    /// it back in `Err` at the heap limit, with the list unchanged.
    ///
    /// # Panics
    /// If `index > len()`.
    ///
    /// # Examples
    /// ```
    /// use loam_collections::GcList;
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let l = GcList::from_slice(mc, &[1_u32, 3]);
    ///     l.try_insert(mc, 1, 2).expect("room for one more");
    ///     assert_eq!(l.to_vec(), [1, 2, 3]);
    /// });
    /// ```
    pub fn try_insert(&self, mc: &Mutation<'gc>, index: usize, value: T) -> Result<(), AllocError<T>> {
        // SAFETY: an insert runs no caller code.
        let w = unsafe { ListWriter::new(self, mc) };
        let len = w.len();
        if index > len {
            panic!("GcList::insert index (is {index}) should be <= len (is {len})");
        }
        let new_len = one_more(len, "insert");
        if let Err(e) = self.grow_for(&w, new_len) {
            return Err(e.map(|()| value));
        }
        let (_, used) = w.view();
        if index < len {
            w.fill(len, used[len - 1].get());
            for i in (index..len - 1).rev() {
                w.put(i + 1, used[i].get());
            }
            w.put(index, value);
        } else {
            w.fill(len, value);
        }
        w.set_len(new_len);
        Ok(())
    }

    /// Removes and returns element `index`, shifting the elements after it.
    ///
    /// # Panics
    /// If `index >= len()`.
    pub fn remove(&self, mc: &Mutation<'gc>, index: usize) -> T {
        // SAFETY: a removal runs no caller code.
        let w = unsafe { ListWriter::new(self, mc) };
        let (_, used) = w.view();
        let len = used.len();
        if index >= len {
            out_of_range("GcList::remove", index, len);
        }
        let value = used[index].get();
        for (i, cell) in used.iter().enumerate().skip(index + 1) {
            w.put(i - 1, cell.get());
        }
        if index == len - 1 {
            shade_cut(mc, &used[index..len]);
        }
        w.set_len(len - 1);
        value
    }

    /// Removes element `index` and puts the last element in its place: O(1).
    ///
    /// # Panics
    /// If `index >= len()`.
    pub fn swap_remove(&self, mc: &Mutation<'gc>, index: usize) -> T {
        // SAFETY: a removal runs no caller code.
        let w = unsafe { ListWriter::new(self, mc) };
        let (_, used) = w.view();
        let len = used.len();
        if index >= len {
            out_of_range("GcList::swap_remove", index, len);
        }
        let value = used[index].get();
        if index == len - 1 {
            shade_cut(mc, &used[index..len]);
        } else {
            w.put(index, used[len - 1].get());
        }
        w.set_len(len - 1);
        value
    }

    /// Removes every element.
    pub fn clear(&self, mc: &Mutation<'gc>) {
        self.truncate(mc, 0)
    }

    /// Keeps the first `len` elements (nothing happens if there are fewer).
    pub fn truncate(&self, mc: &Mutation<'gc>, len: usize) {
        // SAFETY: a truncation runs no caller code.
        unsafe { ListWriter::new(self, mc) }.cut_to(len);
    }

    /// Keeps the elements for which `keep` is true, in order.
    ///
    /// # Panics
    /// If `keep` changes this list. It may read it, and then sees it being
    /// compacted: the kept elements before the one asked about already
    /// moved down, the rest not yet (at the same length). If `keep`
    /// panics, the list keeps the elements it was not asked about yet, and
    /// the one it panicked on.
    pub fn retain(&self, mc: &Mutation<'gc>, mut keep: impl FnMut(T) -> bool) {
        /// Closes the gap on every exit: moves the elements not looked at
        /// yet down behind the kept ones, and sets the length.
        struct Compact<'w, 'a, 'gc, T: CellValue + Trace + 'gc> {
            w: &'w ListWriter<'a, 'gc, T>,
            used: &'gc [GcCell<'gc, T>],
            len: usize,
            next: usize,
            kept: usize,
        }
        impl<T: CellValue + Trace> Drop for Compact<'_, '_, '_, T> {
            fn drop(&mut self) {
                if self.kept < self.next {
                    for j in self.next..self.len {
                        self.w
                            .put(self.kept + (j - self.next), self.used[j].get());
                    }
                    self.w.set_len(self.kept + (self.len - self.next));
                }
            }
        }
        let w = ListWriter::for_callbacks(self, mc);
        let (_, used) = w.view();
        let len = used.len();
        let mut g = Compact {
            w: &w,
            used,
            len,
            next: 0,
            kept: 0,
        };
        while g.next < len {
            let x = used[g.next].get();
            if keep(x) {
                if g.kept != g.next {
                    w.put(g.kept, x);
                }
                g.kept += 1;
            } else {
                // Cut: later moves may not overwrite its slot.
                shade_cut(mc, &used[g.next..g.next + 1]);
            }
            g.next += 1;
        }
    }

    /// Appends every item of `iter`.
    ///
    /// # Panics
    /// At the heap limit, or if `iter` panics: the items appended so far
    /// stay, as with `Vec::extend`.
    pub fn extend(&self, mc: &Mutation<'gc>, iter: impl IntoIterator<Item = T>) {
        let mut iter = Ended::new(iter.into_iter());
        let w = ListWriter::for_callbacks(self, mc);
        if let Err(e) = self.extend_on(&w, &mut iter) {
            alloc_failed("GcList::extend", e);
        }
    }

    /// Appends every item of `iter`, or gives the heap-limit `Err` with the
    /// list as it was (its capacity may have grown).
    ///
    /// Room for as many items as `iter`'s `size_hint` promises at least is
    /// made before the first is taken: an iterator that knows its length
    /// (a slice's, a range's, a `map` of one) fails, if it does, with
    /// nothing taken from it. Items taken before a later growth failed are
    /// dropped. To keep the rest of an iterator after an `Err`, pass it
    /// `by_ref()`.
    ///
    /// # Panics
    /// If `iter` panics: the items appended so far stay, as with
    /// [`extend`](Self::extend).
    ///
    /// # Examples
    /// ```
    /// use loam_collections::GcList;
    /// let rt = loam_runtime::Runtime::builder().heap_limit(4 << 20).gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let l = GcList::from_slice(mc, &[1_u64, 2]);
    ///     l.try_extend(mc, 3..=4).expect("room for two more");
    ///     let mut big = 0..(1_u64 << 20); // 8 MiB of elements
    ///     assert!(l.try_extend(mc, big.by_ref()).is_err());
    ///     assert_eq!(l.to_vec(), [1, 2, 3, 4], "unchanged");
    ///     assert_eq!(big.next(), Some(0), "nothing taken");
    /// });
    /// ```
    pub fn try_extend(&self, mc: &Mutation<'gc>, iter: impl IntoIterator<Item = T>) -> Result<(), AllocError<()>> {
        // Made before the writer, so dropped after it: the iterator's drop
        // glue runs without the lock (it may push to this list, as after
        // `extend`).
        let mut iter = Ended::new(iter.into_iter());
        self.try_extend_by(ListWriter::for_callbacks(self, mc), &mut iter)
    }

    /// `try_extend` with the writer `w`.
    fn try_extend_by(&self, w: ListWriter<'_, 'gc, T>, iter: &mut Ended<impl Iterator<Item = T>>) -> Result<(), AllocError<()>> {
        let len = w.len();
        self.grow_for(&w, len.saturating_add(iter.size_hint().0))?;
        self.extend_on(&w, iter).inspect_err(|_| w.cut_to(len))
    }

    /// `extend` with the writer `w`, until `iter` ends or growth fails.
    fn extend_on(&self, w: &ListWriter<'_, 'gc, T>, iter: &mut Ended<impl Iterator<Item = T>>) -> Result<(), AllocError<()>> {
        // `extend` ends at the first `None`, as `Vec::extend` does, even
        // for an iterator that would yield again after it (`Ended`).
        while let Some(first) = iter.next() {
            let len = w.len();
            // Room for `first` and what the iterator promises at least, in
            // one growth.
            let need = len
                .saturating_add(iter.size_hint().0)
                .saturating_add(1);
            let items = if len == w.items.get().len() {
                // `first` is dropped with the `Err`: `try_extend` says so.
                self.grow_for(w, need)?
            } else {
                w.items.get()
            };
            // The spare slots are filled in one run, and the length
            // published once after it: a reader sees the list before the
            // run or after it.
            let room = items.len() - len;
            let mut run = w.run_end(len, w.filled());
            w.fill_run(
                std::iter::once(first).chain(iter.by_ref().take(room - 1)),
                &mut run.n,
            );
        }
        Ok(())
    }

    /// Makes room for `additional` more elements at least, so that pushing
    /// them allocates nothing (as `Vec::reserve`, it may make more, to keep
    /// growth amortised).
    ///
    /// # Panics
    /// At the heap limit (the list unchanged; see
    /// [`try_reserve`](Self::try_reserve)), or if the new capacity cannot
    /// fit in the address space.
    pub fn reserve(&self, mc: &Mutation<'gc>, additional: usize) {
        if let Err(e) = self.try_reserve(mc, additional) {
            alloc_failed("GcList::reserve", e);
        }
    }

    /// [`reserve`](Self::reserve), or the heap-limit `Err` (or a
    /// capacity-overflow one) with the list unchanged, its capacity
    /// included.
    ///
    /// A list made by [`with_capacity`](Self::with_capacity) and not
    /// pushed to yet has no array: a reserve of one element or more
    /// allocates it.
    ///
    /// # Examples
    /// ```
    /// use loam_collections::GcList;
    /// let rt = loam_runtime::Runtime::builder().heap_limit(4 << 20).gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let l: GcList<u64> = GcList::new(mc);
    ///     l.try_reserve(mc, 1000).expect("8 KB fit");
    ///     assert!(l.capacity() >= 1000);
    ///     assert!(l.try_reserve(mc, 1 << 20).is_err(), "8 MiB do not");
    ///     assert!(l.capacity() < 1 << 20);
    /// });
    /// ```
    pub fn try_reserve(&self, mc: &Mutation<'gc>, additional: usize) -> Result<(), AllocError<()>> {
        // SAFETY: a reserve runs no caller code.
        unsafe { ListWriter::new(self, mc) }.try_reserve(additional)
    }

    /// Sorts the list, stably, by `compare`.
    ///
    /// # Panics
    /// If `compare` changes this list (it may read it). A `compare` that
    /// panics leaves the list as it was.
    pub fn sort_by(&self, mc: &Mutation<'gc>, mut compare: impl FnMut(&T, &T) -> Ordering) {
        let w = ListWriter::for_callbacks(self, mc);
        let (_, used) = w.view();
        let mut v: Vec<T> = used.iter().map(GcCell::get).collect();
        // A panicking `compare` leaves the list as it was: nothing is
        // stored before the sort returns.
        v.sort_by(&mut compare);
        // The log was recorded (`ListWriter::new`). The stores move the
        // elements among the slots in use, which the list's trace reports
        // (after its log), and no other object's (the array's `Slot`s
        // report nothing); they are atomic stores, which neither unwind nor
        // allocate, and `shade` only stores each element again through the
        // barrier; the writer lock is held. A young list sorted during a
        // mark then promotes nothing (`GcLog::moving`). `set_moved` stores
        // the values `v` took from those slots.
        // SAFETY: as just said.
        unsafe {
            self.obj.log.moving(
                mc,
                || {
                    for (cell, x) in used.iter().zip(v) {
                        cell.set_moved(x);
                    }
                    self.obj.touch_range(0..used.len());
                },
                || {
                    for cell in used {
                        cell.set_recorded(mc, cell.get());
                    }
                },
            )
        };
    }

    /// Sorts the list, stably, by the key `f` gives each element.
    pub fn sort_by_key<K: Ord>(&self, mc: &Mutation<'gc>, mut f: impl FnMut(&T) -> K) {
        self.sort_by(mc, |a, b| f(a).cmp(&f(b)))
    }

    /// Sorts the list, stably.
    pub fn sort(&self, mc: &Mutation<'gc>)
    where
        T: Ord,
    {
        self.sort_by(mc, T::cmp)
    }

    /// Binary search in a list sorted by `compare`: `Ok` with the index of a
    /// match, or `Err` with where the value would go (as `slice::binary_search_by`).
    pub fn binary_search_by(
        &self,
        mut compare: impl FnMut(&T) -> Ordering,
    ) -> Result<usize, usize> {
        let (_, used) = self.view();
        let (mut lo, mut hi) = (0, used.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match compare(&used[mid].get()) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Binary search for `value` in a sorted list.
    pub fn binary_search(&self, value: &T) -> Result<usize, usize>
    where
        T: Ord,
    {
        self.binary_search_by(|x| x.cmp(value))
    }

    /// The index of the first element equal to `value`.
    pub fn index_of(&self, value: &T) -> Option<usize>
    where
        T: PartialEq,
    {
        self.iter().position(|x| x == *value)
    }

    /// Whether an element equals `value`.
    pub fn contains(&self, value: &T) -> bool
    where
        T: PartialEq,
    {
        self.index_of(value).is_some()
    }

    /// The elements, in order, from the array and length as they are now.
    /// A change to the list during the iteration (on this thread, or on
    /// another) is seen or not, and one that moves elements (`remove`,
    /// `insert`) may make it yield one twice or skip one; it is never
    /// unsound.
    pub fn iter(&self) -> Iter<'gc, T> {
        Iter {
            slots: self.view().1.iter(),
        }
    }

    /// Checks the list's invariants (see `ListObj`), panicking with the
    /// broken one: for tests. Take no writer elsewhere meanwhile.
    pub fn assert_valid(&self) {
        let len = self.obj.len.get();
        let items = self.obj.items.get();
        let high = self.obj.high.load(MemOrder::Relaxed);
        assert!(
            len <= items.len() && high <= items.len(),
            "loam-collections: GcList length {len}, high mark {high}, capacity {}",
            items.len()
        );
    }

    /// The elements, copied into a `Vec`.
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().collect()
    }
}

/// The elements of a [`GcList`], by value.
pub struct Iter<'gc, T: CellValue + Trace + 'gc> {
    slots: std::slice::Iter<'gc, GcCell<'gc, T>>,
}

impl<'gc, T: CellValue + Trace + 'gc> Iterator for Iter<'gc, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        self.slots.next().map(GcCell::get)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slots.size_hint()
    }
}

impl<'gc, T: CellValue + Trace + 'gc> DoubleEndedIterator for Iter<'gc, T> {
    fn next_back(&mut self) -> Option<T> {
        self.slots.next_back().map(GcCell::get)
    }
}

impl<'gc, T: CellValue + Trace + 'gc> ExactSizeIterator for Iter<'gc, T> {}

impl<'gc, T: CellValue + Trace + 'gc> IntoIterator for GcList<'gc, T> {
    type Item = T;
    type IntoIter = Iter<'gc, T>;

    fn into_iter(self) -> Iter<'gc, T> {
        self.iter()
    }
}

/// As for the list itself (a handle: `for x in &list` reads it).
impl<'gc, T: CellValue + Trace + 'gc> IntoIterator for &GcList<'gc, T> {
    type Item = T;
    type IntoIter = Iter<'gc, T>;

    fn into_iter(self) -> Iter<'gc, T> {
        self.iter()
    }
}

impl<'gc, T: CellValue + Trace + fmt::Debug + 'gc> fmt::Debug for GcList<'gc, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: CellValue + Trace> fmt::Debug for ListWriter<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListWriter")
            .field("len", &self.list.len())
            .finish_non_exhaustive()
    }
}

impl<'gc, T: CellValue + Trace + fmt::Debug + 'gc> fmt::Debug for Iter<'gc, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter")
            .field("left", &self.slots.len())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{part_of, parts_for, PART};
    use loam_runtime::MAX_TRACE_PARTS;

    /// The parts of a collection's trace cover each element once, in
    /// order, whatever its length: up to two parts' worth whole (one
    /// part), parts growing by groups, and past the most parts the mark
    /// takes, the last holding the rest.
    #[test]
    fn the_parts_cover_every_element_once() {
        use super::part_start;
        let longest = part_start(MAX_TRACE_PARTS - 1) + 3 * PART + 17;
        let group = super::GROUP * PART;
        for len in [0, 1, 2 * PART, 2 * PART + 1, 1000, 4096, group, group + 1, 3 * group + 5, longest] {
            // Zero-sized elements: a slice of any length, for free; a part
            // is told by its length and where it starts (counted).
            let elems = vec![(); len];
            let n = parts_for(len);
            assert_eq!(n, parts_searched(len), "{len} elements");
            assert!((1..=MAX_TRACE_PARTS).contains(&n), "{n} parts for {len}");
            if n == 1 {
                assert!(len <= 2 * PART, "{len} elements traced whole");
                continue;
            }
            let mut next = 0;
            for k in 1..n {
                let part = part_of(&elems, k);
                assert_eq!(part_start(k).min(len), next, "part {k} of {len} starts where {} ended", k - 1);
                assert!(k == MAX_TRACE_PARTS - 1 || part.len() <= 128 * PART, "part {k} of {len}");
                next += part.len();
            }
            assert_eq!(next, len, "the parts of {len} elements cover them");
            // A part past the count (the collection shrank) is empty.
            assert!(n == MAX_TRACE_PARTS || part_of(&elems, n).is_empty());
        }
        // Around every part's start.
        for k in 1..MAX_TRACE_PARTS {
            let s = part_start(k);
            for len in [s.saturating_sub(1), s, s + 1] {
                assert_eq!(parts_for(len), parts_searched(len), "{len} elements");
            }
        }
    }

    /// `parts_for` by its definition: a binary search for the first part
    /// that starts at or past `len`.
    fn parts_searched(len: usize) -> usize {
        if len <= 2 * PART {
            return 1;
        }
        let (mut lo, mut hi) = (1, MAX_TRACE_PARTS);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if super::part_start(mid) >= len {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}
