//! The write barrier: what a store into a barrier cell does for the
//! collector, and why that is enough. The cells themselves (`GcCell`,
//! `GcLock`) are in `cell.rs`; the markers in `mark.rs`; the cycle that
//! turns the barrier on and off in `cycle.rs`.
//!
//! # The invariants
//! Objects are white (unmarked), gray (marked, not yet traced: in a mark
//! queue, a marker's own mark stack, the runtime's `gray` queue, a
//! remembered list or an assist's deque) or black (marked and traced). A barrier's shade goes onto its
//! mutator's own shade queue (`Mutator::shade_queue`), which the
//! collector takes with the runtime's queue wherever it takes `gray`
//! (`Shared::drain_shaded`): below, "`gray`" means the two together, and
//! a push onto it a push onto the mutator's queue.
//! - *Between cycles* (minor cycles' sticky marks): every object a marked
//!   object points to is marked, or remembered, or the marked object is
//!   recorded (a `GcLock`'s or a `GcLog`'s owner, which the next minor
//!   cycle traces again). Minor cycles start from the roots and the
//!   remembered and recorded objects, and stop at marked ones.
//! - *During a concurrent mark* (snapshot at the beginning): every object
//!   reachable at the first pause is marked by the end of the mark, and
//!   every object a black object points to is marked or gray (the weak
//!   tri-colour invariant, with the snapshot's objects as its reach).
//!
//! # The barrier, in pseudocode
//! ```text
//! store(cell, new):                       // GcCell::set / replace
//!     old = cell.load()
//!     cell.store(new)
//!     if call.marking:  shade(old)
//!                       fence; if call.window or not young(object holding cell):
//!                           shade(new)
//!     elif call.remembers and not young(object holding cell):
//!                       for e in edges(new): if mark(e): remember(e)
//! write(lock, f):                         // GcLock::write
//!     take the write lock
//!     if call.marking and lock.shaded != epoch: shade(contents); lock.shaded = epoch
//!     record(lock's object)               // once per lock and cycle, before f:
//!     f(contents)                         //   a panic in f cannot skip it
//! shade(v): for e in edges(v): if mark(e): gray.push(e)
//! ```
//! `call.marking` is read once, as the `mutate` call begins, and the call
//! keeps what it read to its end: a stopped cycle changes the flag with
//! the world stopped, a ragged one waits for the calls that read the old
//! value (below). So is `call.remembers`: generations on, and no full
//! cycle's phase 0 begun ("Clearing the marks with the mutators running",
//! 5).
//!
//! # One argument per shade
//! 1. *The old value* (Yuasa's deletion barrier): an object reachable at the
//!    snapshot stays marked-to-be even if its last path is cut before a
//!    marker reads it, because the cut goes through a barrier store, which
//!    shades what it overwrites. At a safepoint no mutator holds an
//!    unrooted pointer, so the roots the first pause read are the whole of
//!    what the snapshot reaches: there are no stacks to rescan. An old
//!    value allocated after the mark's stop is not in the snapshot, and
//!    not in the sweep's copy either: calls that began after the stop's
//!    raise skip its shade (`Mutation::shade_old`, "allocated since" the
//!    page's seal, `loam_heap::PageRef::allocated_since`).
//! 2. *The new value* (Dijkstra's insertion barrier): it may be white
//!    (allocated during the mark) and stored into an object already black,
//!    which may be old. Objects allocated during the mark are not in the
//!    sweep's copy of the allocated bits, so this cycle never frees them;
//!    the shade is for the next minor cycle, whose invariant says a marked
//!    object points only to marked or remembered ones. So a store into a
//!    young object's cell skips it (below, 4), except in a window call. A
//!    store into a
//!    cell that an object with a `GcLog` no marker has met did not report
//!    yet (a push into a young collection) skips it, unless the call began
//!    in a ragged start's window: the marker that first meets the log
//!    fences before it reads the cells, the store fences before it reads
//!    the log's owner, so the marker reads the store or the store sees
//!    the owner and shades (`GcLog::after_unreported_stores`). So does a
//!    grown array stored over the old one (`GcCell::set_unshaded`, the old
//!    one shaded as in 1), and stores that only move values within such an
//!    object (`GcLog::moving`, which also skips 1 for the values moved).
//! 3. *A lock's old contents*, once per mark: a write may change any number
//!    of pointers, and the first write of a mark saw the contents as they
//!    were at the snapshot (writes of one lock are serial). A marker never
//!    waits for a lock (`cell.rs`, "A marker never waits").
//! 4. *A weak upgrade's target* (`weak.rs`): the upgrade creates a strong
//!    path the snapshot may not have had; shading the target covers it.
//! 5. *Between marks*, a store marks and remembers what it stores (the
//!    generational barrier): an old object may now point to a young one.
//!    Not a store into a young object's cell (below).
//!
//! # A young object's cells
//! A store between marks into a cell of an unmarked object `Y` of this
//! runtime in loam's pages (`Mutation::in_young_object`) marks and
//! remembers nothing: the value stays young, and dies in the next minor
//! cycle if `Y` does (marking it promoted every node of a structure built
//! with `GcCell::set`, to wait for a full cycle). Why nothing is lost:
//! 1. *No cycle traces during the call.* The call read `marking == 0`, so
//!    the next trace begins after it has ended: a stopped cycle stops the
//!    world, a ragged one waits for the calls that began before its raise
//!    (T, "Ragged cycles"). So the trace reads `Y` as it is after the
//!    store.
//! 2. *`Y` is traced by that cycle if it is reachable then.* The minor
//!    cycles' invariant (every object a marked object points to is marked
//!    or remembered) has no premise about unmarked objects, so it holds
//!    after the store. If `Y` is unmarked when the cycle begins, the cycle
//!    traces it wherever it reaches it (a full cycle traces every reachable
//!    object; a minor one every reachable unmarked object). If `Y` was
//!    marked after our look, whoever marked it pushed it where the next
//!    cycle traces it whole: a `remember` onto its remembered list, the
//!    shade of a call that read `marking` set (a window call, or one that
//!    began before a mark's end and runs on) onto `gray`, which the next
//!    cycle takes ("Ragged cycles", 3). Those are the only marks set while
//!    a call with `marking == 0` runs: no marker runs, by 1; phase 0 and
//!    the stop only clear marks, which 3 of "Clearing the marks" allows.
//!    (A minor cycle reaches every reachable unmarked object: a path to
//!    it from the roots, the remembered objects and the recorded ones
//!    runs through unmarked objects only, by the invariant.) Either way
//!    the trace reads the value stored, and the invariant holds for `Y`
//!    from then on.
//! 3. *The look itself.* The allocated bit, set only for managed objects
//!    and cleared by the owner before a block is handed out again, tells a
//!    managed object from a `malloc` block of the same page (a cell in a
//!    `Vec` inside an old object's `GcLock` must still remember); the
//!    header's runtime id tells this runtime's. A bit read stale (not yet
//!    seen set, an object another thread made) answers no, and the store
//!    remembers as before; so does a cell the heap cannot place.
//!    `minor_cycles_free_structures_built_with_set` and
//!    `young_chains_stored_into_an_old_holder_survive` in
//!    `runtime/tests/cases/collector.rs` are the tests (the first fails
//!    without the skip, the second with a skip that ignores the mark).
//! 4. *During a concurrent mark* (a call that read `marking` set, not a
//!    window call: `Mutation::shade_stored`), a store into `Y`'s cell
//!    shades the overwritten value as ever (the snapshot), and skips the
//!    stored value's shade if a look at `Y` after the store finds it
//!    young as in 3. That shade only ever served the next minor cycle (2
//!    of "One argument per shade": what a call that is not a window call
//!    holds was reachable at the snapshot, or allocated after it and not
//!    swept). The danger is a marker that traces `Y` between the store and
//!    the look, reads the old value and marks `Y`: `Y` would end old,
//!    pointing to an unmarked value nobody remembered. So the store
//!    fences (`SeqCst`) before the look, and a marker sets a mark with a
//!    sequentially consistent `fetch_or` (`loam_heap::mark_block`, or
//!    `mark_blocks` for the edges of an object it traced) and reads cells
//!    with sequentially consistent loads (`GcCell::trace`).
//!    Either the fence precedes the `fetch_or` in the total order, and
//!    the marker's later load (later in that order: it follows the
//!    `fetch_or` in its thread, or through the mark queues' release and
//!    acquire) reads the store or a later value; or the `fetch_or`
//!    precedes the fence, and the look reads the bit set, and shades. A
//!    later trace of `Y` by anyone who marks it after the look (a shade,
//!    a `remember`, the next cycle) reads the store the same way; if
//!    nobody marks `Y` this cycle, `Y` is young or garbage, and the next
//!    cycle begins after the call has ended (1, 2: a stopped cycle stops
//!    the world, a ragged one waits for the calls that read `marking` of
//!    the mark before). Some traces read an object whose bit another
//!    thread set, learnt otherwise than from that thread's queue: the
//!    remembered objects a minor cycle traces whether or not its own mark
//!    sets their bit, what a ragged start keeps because it reads the bit
//!    set, a lock's or a log's owner recorded without a mark. Such a trace
//!    may not follow the `fetch_or` in that order, and may read the cell
//!    stale; but every `fetch_or` that sets a bit (of a root, a marker's
//!    scan, a shade, a `remember`, a lock's owner) also pushes the object,
//!    or its thread traces it itself, so a trace that does follow it comes
//!    too: in this cycle, or in the next, which begins after the call has
//!    ended. The look relies on `Y`'s own `Trace` reporting the cell
//!    through `GcCell`'s `trace` (`Trace`'s contract, 1): a marker tracing
//!    another object that reads `Y`'s cells would not mark `Y` first. A collection whose
//!    object reports its array's slots stores into them with
//!    `GcCell::set_recorded`, which shades as before. The loom model is
//!    `young_store_model.rs`; `stores_during_marks_into_young_holders_…`
//!    in `runtime/tests/cases/collector.rs` the test.
//!
//! # What has to hold before the first object is traced
//! Every `mutate` call under way began with `marking` set, or there is
//! none. A call that began before could move the only pointer to a white
//! object into a black one and cut the other path, unshaded. A stopped
//! cycle's first pause stops the world, so every call after it reads the
//! flag; a ragged cycle waits for each call that began before the flag to
//! end (below).
//!
//! # Ragged cycles
//! A ragged cycle (`cycle/ragged.rs`) sets `marking` with the mutators
//! running, and waits for the calls under way to end once
//! (`Handshake::wait_for_calls`: each either is seen inside after the
//! collector's fence, or reads the flag after its own). Calls that begin
//! in that *window* run beside *old* calls whose barrier is off. The point
//! *T* at which the last old call has ended is the snapshot's: the roots
//! are read after it (the window closes then), the remembered lists of
//! the old epoch taken at it.
//! Why every object reachable at the end is marked:
//! 1. *Objects reachable at T from the heap or the roots.* Every call
//!    running after T shades what it overwrites (1 above), so the
//!    snapshot argument holds from T, with one difference: a root table
//!    read after T may have changed since. A root made or pointed
//!    elsewhere during a mark shades its object (`barrier_root`), and a
//!    root dropped or overwritten only loses an object that is then
//!    reachable otherwise, or held by a call, or garbage.
//! 2. *Objects only a window call holds.* Such a call may have read a
//!    pointer that an old call then overwrote unshaded, so the object may
//!    be unreachable at T. A call's stack is never scanned, so everything
//!    it hands out is shaded while `marking` is set: the new value of every
//!    cell store (2 above), roots (`barrier_root`), weak cells and their
//!    targets (`GcWeak::new`), a window call's lock writes shade the
//!    contents after `f` as well (`GcLock::write`), its pushes into
//!    collections shade whatever their owner
//!    (`GcLog::after_unreported_stores`). Not what it makes a fresh
//!    object with: the fresh object reaches beyond the call only inside
//!    something the call hands out, which is shaded, and the markers
//!    trace from there once the end has found it (at the latest the
//!    first look finds it, and what that look finds is traced whole),
//!    through young objects too, while every cut of the way is shaded
//!    (6). Arrays whose
//!    elements report nothing (a list's slots, a dictionary's entries)
//!    are covered by their owner: the collection's object is made after
//!    its array is filled, and its `Trace` reports the elements, so its
//!    shade reaches them; later stores into them shade as above.
//! 3. *The end.* The markers drain everything shaded; the collector then
//!    waits and looks again. The calls that began in the window are
//!    listed as it closes, once the roots are read: a call that read the
//!    window open says so in its slot and reads it again
//!    (`Handshake::confirm_window`, Dekker with `calls_under_way`), and
//!    runs as a later call if it has closed meanwhile (it has read nothing
//!    yet). The end's first wait outlasts each listed call: what each
//!    handed out was shaded before it ended, so the first look must find
//!    nothing at all, and what it found is traced whole before the next.
//!    Every other call under way began after the window closed, and is
//!    not waited for: it holds only objects read from the roots or the
//!    heap after T, or allocated after T (young: this cycle does not sweep
//!    them). Every wait, the first included, waits for the *shading
//!    brackets* under way instead (`Mutation::shading`,
//!    `Handshake::wait_for_shades`): a barrier opens one, with a fence
//!    (the light side of an asymmetric pair whose heavy side is the
//!    wait's, where `membarrier` is there: `fence.rs`; the two are a
//!    sequentially consistent pair, which is all this argument uses),
//!    before it reads the value it overwrites (a `GcLog`'s record, before
//!    it reads the owner), and closes it once what it shaded is in `gray`.
//!    (A window call's barriers open none: the first wait outlasts the
//!    whole call, so its shades are all in `gray` before the first look,
//!    and no later wait has a window call to wait for.)
//!    A cut that is not a store over the value (a collection's shorter
//!    length) shades the values first, through the cells' barrier, and
//!    cuts after. Why that is enough: take an object X of the snapshot
//!    that some call can reach at the look. X was reachable at T; follow
//!    a path to it from what the mark began with. If every edge of it was
//!    still there when the markers read its source, the markers marked X
//!    (and they had run dry before the wait's first fence). Otherwise take
//!    the first edge cut before the markers read it: the barrier that cut
//!    it read X (the first store over a value of T reads it: a later
//!    call's load follows T, a window call swaps, a lock's writer shades
//!    its contents first, a collection shades what it cuts) and shaded it.
//!    If its bracket opened after the wait's first fence, its read
//!    followed that fence in the fences' total order, so the markers, which
//!    read the source before it, read the edge itself: a contradiction. So
//!    it opened before, and the wait's first round saw it and waited for
//!    it to close. Its shade either set X's mark bit and pushed X, or
//!    found the bit set: by a marker (X traced), by an earlier cycle (in a
//!    minor cycle an old object's mark stays: what it points to is marked
//!    or remembered, the minor cycles' invariant), or by another bracket,
//!    which pushes X but may not have yet. That bracket set the bit before
//!    the first one's failed mark, which the first round waited for, so
//!    its fence precedes the second round's, and the second round sees it
//!    open and waits, or sees it closed, its push done. So every such X is
//!    marked and traced once a look after the two rounds finds in `gray`
//!    nothing but young objects without the window's flag (6). Those
//!    objects, which calls shade meanwhile, are not traced by this cycle:
//!    they stay in `gray`,
//!    marked, and so do the shades of calls that began before `marking`
//!    was lowered and run on after it. The next cycle traces them (its
//!    stop takes them as remembered, its ragged start traces them), which
//!    keeps the minor cycles' invariant. A call that begins while the
//!    window is open and no other call is under way waits (briefly) for it
//!    to close (`Mutator::wait_out_window`), so that a single long call
//!    does not hold the end.
//! 4. *Weak references.* An upgrade hands out an object no path may reach
//!    (4 above). It shades under the weak gate's read lock while `marking`
//!    is set; the end looks for shaded objects, clears the weak cells and
//!    lowers `marking` under its write lock. So an upgrade shades before
//!    the look (seen), or reads the cell after the clearing (`weak.rs`).
//! 5. *The remembered lists.* A call records into the list of the
//!    remember epoch it began in (`MutatorShared::remembered_in`), read in
//!    one word with `marking` (`Shared::calls`): the old calls' lists are
//!    complete at T, and what window calls record is the next cycle's.
//! 6. *The sweep's snapshot, and what window calls make.* The seal epoch
//!    rises at T, with no old call left: everything old calls allocated
//!    is in the sweep's copy, so an object missing from it (young) was
//!    allocated by a call with the barrier on. Window calls may allocate
//!    on either side of the raise, and shade nothing as they make an
//!    object (the shade of what each fresh object was made with marked,
//!    and promoted, most of every tree a window call built partly before
//!    T: `docs/perf-log.md`, session 24). Instead, every object a window
//!    call makes carries `gc::WINDOW_MADE` in its header. Why that is
//!    enough: take an object X of the copy that a call or the heap reaches
//!    at the end but that nothing reached at T (so 1 does not cover it).
//!    Only window calls held it at T (old calls have ended; later calls
//!    read only what the roots and the heap reach), so it reached the heap
//!    through something a window call W handed out after T: a value S that
//!    W shaded (2), with a chain of objects from S to X that W made or
//!    read. S is traced once the end finds it (at the first look at the
//!    latest: W has ended by then, and what that look finds is traced
//!    whole), and the markers follow
//!    the chain from it, young objects included, unless an edge of it is
//!    cut first, or an object on it is marked by a shade that does not
//!    trace it. Every object on the chain is in the copy, or young and
//!    made by W (anything else W read from the heap or a root after T,
//!    where 1 applies). A cut shades what it cuts: window calls pass over
//!    nothing (`shade_old`), and other calls pass over only young objects
//!    without the flag. A shade marks an object and queues it, and the
//!    end traces what it finds queued unless it is young and without the
//!    flag: at the first look everything, after it (3) the copy's objects
//!    and the flagged ones. So every object on the chain is marked and
//!    traced, and X is marked. A young object without the flag that is
//!    left untraced after the first look was made by a call that began
//!    after the window closed, with what it read from the heap or a root
//!    (where what W made is flagged and traced when shaded) or made. The
//!    objects W made before T are covered the same way, whether or not
//!    the walk's copy holds them (if it does not, this cycle does not free
//!    them). The flagged objects are a fixed set once the window calls
//!    have ended, before the first look, so the looks converge as before.
//!    Checked by `ragged_model.rs`, 7, and
//!    `a_young_nodes_contents_survive_a_later_calls_cut` in
//!    `runtime/tests/ragged.rs`, which fails at every run if later calls
//!    pass over flagged objects.
//! 7. *`GcLock`s.* A lock records the mark whose old contents it shaded
//!    (`shaded`), and skips the shade on later writes of that mark. A
//!    window call shades without recording it: an old call may still write
//!    the lock, unshaded, after it.
//!
//! A minor cycle that a `GcLock` write of unknown owner (`lock_written`)
//! makes full by T stops the world after all: an old call's write was not
//! shaded, and only a stopped cycle clears the marks. The loom models are
//! `handshake_model` (the wait) and `ragged_model.rs` (the end's waits for
//! window calls and for brackets, the weak gate, a window call's swap
//! against an old call's store, and its `GcLock` write leaving `shaded`
//! alone); the lost-object race
//! and a mark that ends while a later call runs are `runtime/tests/ragged.rs`.
//!
//! # Clearing the marks with the mutators running (full cycles)
//! A full cycle in loam's pages clears every page's marks *before* its
//! stop, with the mutators running (`cycle.rs`, phase 0), so that the
//! pause does no work proportional to the heap. What the mark needs as it
//! begins is that no object of this runtime is marked: a marked object is
//! not traced, so a white object reachable only through it would be
//! swept. Why that holds at the first pause:
//! 1. *No collector writes marks meanwhile.* Phase 0 runs under the
//!    process-wide cycle lock, after the last cycle's sweep: no mark and no
//!    sweep of any runtime runs. Calls of this runtime read
//!    `marking == 0`, except those that began before a ragged mark ended
//!    (`Ragged cycles`, below), which still shade.
//! 2. *Between marks only the barrier sets marks* (`remember`, and the
//!    shades of those calls), and each bit it sets (`mark` returning true:
//!    its `fetch_or` found the bit clear) it pushes onto its mutator's
//!    remembered list, or `gray`; the stop takes both, detached mutators'
//!    lists included. Take any object's bit at the
//!    stop, and the last write that changed it. If that was phase 0's
//!    store of a zero word, the bit is clear. Otherwise it was a
//!    `fetch_or` that found it clear, and the `remember` that made it
//!    pushed the object. (A `remember` that finds the bit set changes and
//!    pushes nothing; a bit set before phase 0 reached its word and not
//!    changed since was cleared by phase 0, which reads each word and
//!    stores zero over it unless it read zero: a word read as zero had no
//!    bit set at that read, and any set since was set by a `fetch_or`
//!    that found it clear.) The stop clears the mark of
//!    every remembered object, one bit with a `fetch_and`, since other
//!    runtimes' mutators may be setting bits in the same word; the
//!    handshake orders this runtime's `fetch_or`s before it. Then none is
//!    marked. The loom model is `preclear_model.rs`.
//! 3. *Clearing a mark between cycles is always harmless*: the minor
//!    cycles' invariant (a marked object points only to marked or
//!    remembered ones) only gets weaker premises when fewer objects are
//!    marked, and the sweep frees only what a mark left clear, after that
//!    mark. So it does not matter that phase 0 also clears marks of other
//!    runtimes' objects (they become young, as a full cycle in the pause
//!    always did to them), nor of a page released and set up again while
//!    phase 0 read it.
//! 4. *A ragged start keeps the marks instead.* It cannot clear a bit
//!    after T: a window call's shade may have found it set and left the
//!    object to whoever set it. So it traces the remembered objects whose
//!    bit it reads set, as remembered (traced though marked), and drops
//!    the others; so too with what it drains from `gray` (shades from
//!    before phase 0, the last ragged cycle's young objects left for this
//!    one, beside the window calls' shades). A clear bit is one nobody
//!    set since phase 0 (or never set: a lock's or a log's owner is
//!    recorded without a mark), so nobody relies on it, and any shade
//!    that sets it later pushes the object. A bit read set stays set: the
//!    process-wide cycle lock, held from phase 0 to the sweep, keeps out
//!    every other clearing (another runtime's phase 0 or pause). Traced
//!    whole, the others kept every structure stored into a cell since the
//!    last cycle, however soon cut off again, and counted it as live
//!    (`runtime/tests/misuse.rs`). The loom model is `preclear_model.rs`.
//! 5. *Calls that begin once phase 0 has begun do not `remember`*
//!    (`calls::CLEARING`, cleared by the cycle's start): the cycle is
//!    full, so the minor cycles' invariant is not needed before its end,
//!    and a mark set now would keep what it marks. (They still record a
//!    lock's or a log's owner, unmarked: 2 and 4 hold for those as for
//!    any entry.) Calls that began before still remember, and 2 and 4
//!    cover them; calls that read the flag have all ended at the stop or
//!    at T, before the mark begins.
//!
//! A cycle that turns full only at its stop (a `GcLock` write since phase
//! 0 decided, `full_ahead`) clears the marks in the pause, as every full
//! cycle did before; so do `GlobalAlloc` spaces.
//!
//! # The end of a mark
//! The stops that end a concurrent mark drain `gray` with the world
//! stopped, so no shade is halfway (mark bit set, not yet queued): a shade
//! runs inside a `mutate` call, and the stop waits for it. Each such stop
//! traces for at most the pause budget; what is left goes back to the
//! rounds with the mutators running, the barrier still on (`marking` does
//! not change), and the last of a bounded number of tries traces to the
//! end. Mutators' assists (`mark::assist`) take work from the mark's queues
//! and hand what they leave back to them, inside a `mutate` call too.
//!
//! # Memory ordering
//! The mark bit is set with `fetch_or` (the heap's page bitmaps), so two
//! shades of one object queue it once, and whoever queues it has set the
//! bit. A `GcCell` is a `crossbeam_utils::atomic::AtomicCell` (an atomic
//! word, at least release/acquire; see `cell.rs` for the larger types):
//! a marker that loads a pointer from a cell sees the object it points to
//! as published, since the object's fields were written before the `Gc`
//! existed and the store into the cell releases them. A marker's read of
//! a cell, in `GcCell`'s `trace`, is sequentially consistent, and so is
//! the `fetch_or` that sets a mark: with the fence a store during a mark
//! makes before it looks at its holder's mark, either the marker reads the
//! store or the store sees the mark ("A young object's cells", 4). A
//! `GcLock`'s contents are read under its read lock. `marking` lives in `Shared::calls`, which the collector
//! stores with release (after the mark epoch, and in a ragged cycle with
//! the mutators running) and a call loads with acquire after its entry
//! fence; the fences pair with the collector's (Dekker), so a call either
//! reads the new value or is waited for.

use crate::mutator::Mutation;
use crate::trace::Trace;
use std::sync::atomic::{AtomicU64, Ordering};

impl<'gc> Mutation<'gc> {
    /// The write barrier of a barrier cell storing `new` over `old` (see
    /// `cell.rs`).
    ///
    /// Outside a concurrent mark it keeps "every object a marked object
    /// points to is marked, or remembered" true between cycles, which minor
    /// cycles rely on: each unmarked object `new` points to is marked and
    /// remembered, so the next minor cycle traces what it points to. An
    /// object is remembered only by the store that marks it: once per
    /// cycle, or twice when a full cycle's phase 0 clears its mark in
    /// between (module docs), so the buffer never outgrows twice the heap.
    ///
    /// During a concurrent mark it shades both values (Go's hybrid barrier,
    /// without stacks to scan: there are none at a safepoint here). The old
    /// one keeps the snapshot whole: every object reachable as the mark
    /// began is marked, even if its last pointer is overwritten before a
    /// marker reads it. The new one may be white (allocated during the
    /// mark) and stored into an object the markers already traced, which
    /// may be old: shading it keeps the minor cycles' invariant (every
    /// object a marked object points to is marked); into a young object,
    /// whose trace will read it, the new one is not shaded
    /// ([`shade_stored`](Self::shade_stored)). Shaded objects go to the
    /// markers. The caller has stored `new` into the cell already.
    ///
    /// `cell` is the address of the cell written, which tells `remember`
    /// whether the object holding it is young (`in_young_object`).
    #[inline]
    pub(crate) fn barrier_store<T: Trace + ?Sized>(&self, cell: *const u8, old: &T, new: &T) {
        self.note_write();
        if !T::NEEDS_TRACE {
            return;
        }
        if self.marking != 0 {
            self.shade_old(old);
            self.shade_stored(cell, new);
        } else if self.remembers {
            self.remember(Some(cell), new);
        }
    }

    /// [`barrier_store`](Self::barrier_store) during a concurrent mark,
    /// for a cell that an object other than the one it lies in may report
    /// (`GcCell::set_recorded`): both values are shaded, whatever holds
    /// the cell.
    #[inline]
    pub(crate) fn barrier_store_reported_elsewhere<T: Trace + ?Sized>(&self, old: &T, new: &T) {
        debug_assert!(self.marking != 0);
        self.note_write();
        if T::NEEDS_TRACE {
            self.shade_old(old);
            self.shade(new);
        }
    }

    /// [`barrier_store`](Self::barrier_store) outside a concurrent mark,
    /// which needs only the stored value.
    #[inline]
    pub(crate) fn barrier_store_new<T: Trace + ?Sized>(&self, cell: *const u8, new: &T) {
        debug_assert!(!T::NEEDS_TRACE || self.marking == 0);
        self.note_write();
        if T::NEEDS_TRACE && self.remembers {
            self.remember(Some(cell), new);
        }
    }

    /// The barrier for a store whose old value is not the collector's
    /// business (`GcCell::set_unreported`): during a mark, the new value is
    /// shaded (it may be white and land in a traced object); between marks,
    /// remembered.
    #[inline]
    pub(crate) fn barrier_new<T: Trace + ?Sized>(&self, new: &T) {
        self.note_write();
        if !T::NEEDS_TRACE {
            return;
        }
        if self.marking != 0 {
            self.shade(new);
        } else if self.remembers {
            // The cell is not reported yet: what holds it says nothing.
            self.remember(None, new);
        }
    }

    /// [`barrier_store_new`](Self::barrier_store_new) of a value that is
    /// one pointer, to object `e` (0: none), which a trace would report
    /// alone (`CellValue::__edge`): no walk of the value.
    #[inline]
    pub(crate) fn barrier_store_edge(&self, cell: *const u8, e: usize) {
        debug_assert!(self.marking == 0);
        self.note_write();
        if e != 0 && self.remembers {
            self.remember_edge(cell, e);
        }
    }

    /// A write that may free memory (it may overwrite the last pointer to
    /// an object): while a mutator is at the heap limit, it makes that
    /// mutator's next call collect before it retries
    /// (`Mutator::collect_for_limit`), as a dropped root does. One test of
    /// a per-call flag otherwise.
    #[inline]
    pub(crate) fn note_write(&self) {
        if self.at_limit {
            self.note_write_at_limit();
        }
    }

    #[cold]
    #[inline(never)]
    fn note_write_at_limit(&self) {
        self.shared().roots_changed.fetch_add(1, Ordering::Relaxed);
    }

    /// The barrier of a root made, or pointed, at `addr`: during a
    /// concurrent mark it shades the object. A root table may have been
    /// read already when the root goes in, and the object may be one only
    /// this call holds (module docs, "Ragged cycles": a window call's, or
    /// a root overwritten since its table was read).
    #[inline]
    pub(crate) fn barrier_root(&self, addr: usize) {
        if self.marking != 0 {
            self.shade_addr(addr);
        }
    }

    /// Shades the one object at `addr`, which this call reached.
    #[inline(never)]
    pub(crate) fn shade_addr(&self, addr: usize) {
        let _bracket = self.shading();
        let shared = self.shared();
        // `addr` is reachable by this call, so allocated, and the
        // sweep frees no object a call can reach; the mark bit is atomic
        // and the markers expect it set by others (`mark::shade`).
        // SAFETY: as just said.
        unsafe { crate::mark::shade_to(&shared.space, &self.mutator().shade_queue, addr) };
    }

    /// The epoch of the concurrent mark under way (0: none).
    #[inline]
    pub(crate) fn mark_epoch(&self) -> u64 {
        self.marking
    }

    /// Calls `f` with each managed object `value` points to (the barriers'
    /// walk of a stored or overwritten value), through the mutator's edge
    /// buffer.
    fn each_edge<T: Trace + ?Sized>(&self, value: &T, mut f: impl FnMut(usize)) {
        let mut edges = self.mutator().barrier_edges.borrow_mut();
        // Not left from a `trace` that panicked: those edges may be stale.
        edges.clear();
        value.trace(&mut edges);
        for &e in edges.edges() {
            f(e);
        }
        edges.clear();
    }

    /// Marks every unmarked object `value` points to and hands it to the
    /// markers of the concurrent mark under way.
    #[inline(never)]
    pub(crate) fn shade<T: Trace + ?Sized>(&self, value: &T) {
        self.shade_edges(value, None);
    }

    /// [`shade`](Self::shade), passing over the objects allocated after the
    /// stop that raised `since` (if given) by calls other than its window's.
    fn shade_edges<T: Trace + ?Sized>(&self, value: &T, since: Option<loam_heap::SealEpoch>) {
        let _bracket = self.shading();
        self.each_edge(value, |e| self.shade_one(since, e));
    }

    /// `shade_edges`' work for object `e`, in the caller's bracket.
    #[inline(always)]
    fn shade_one(&self, since: Option<loam_heap::SealEpoch>, e: usize) {
        let shared = self.shared();
        // `e` is reachable by this call, so allocated (its page live),
        // and no sweep frees what a call can reach (a call that shades
        // after a ragged mark ended reaches only marked or young
        // objects: "Ragged cycles", 3); the mark bit is atomic and the
        // markers expect it set by others (`mark::shade`).
        // SAFETY: as just said.
        if since.is_some_and(|seal| unsafe {
            shared.space.allocated_since(e, seal) && !crate::gc::made_in_window(e)
        }) {
            return;
        }
        // SAFETY: as above.
        unsafe { crate::mark::shade_to(&shared.space, &self.mutator().shade_queue, e) };
    }

    /// The insertion barrier's shade of `value`, just stored during a
    /// concurrent mark into the cell at `cell`, which the object holding
    /// it reports: [`shade`](Self::shade), less the unmarked objects when
    /// that object is a young (unmarked) object of this runtime, looked at
    /// after a fence ("A young object's cells", 4). Not in a window call
    /// (everything it hands out is shaded: "Ragged cycles", 2), nor in a
    /// `GlobalAlloc` space, which cannot tell what holds a cell.
    #[inline(never)]
    fn shade_stored<T: Trace + ?Sized>(&self, cell: *const u8, value: &T) {
        if !self.stores_look_at_holders() {
            return self.shade(value);
        }
        let _bracket = self.shading();
        let mut young = None;
        self.each_edge(value, |e| self.shade_stored_one(cell, &mut young, e));
    }

    /// Whether a store during this call's mark may leave its value
    /// unshaded when it lies in a young object (`shade_stored`): not in a
    /// window call, nor in a `GlobalAlloc` space (see there).
    #[inline]
    fn stores_look_at_holders(&self) -> bool {
        !self.window && matches!(self.shared().space, crate::space::Space::Pages)
    }

    /// The seal epoch past which `shade_old` leaves an overwritten object
    /// unshaded: none in a window call (see there).
    #[inline]
    fn old_shade_since(&self) -> Option<loam_heap::SealEpoch> {
        (!self.window).then(loam_heap::SealEpoch::current)
    }

    /// `shade_stored`'s work for object `e`, one of the stored value's, in
    /// the caller's bracket; `young` is the answer of `in_young_object`
    /// for `cell` once asked.
    #[inline(always)]
    fn shade_stored_one(&self, cell: *const u8, young: &mut Option<bool>, e: usize) {
        // `e` is reachable by this call, so allocated and not freed by
        // a sweep under way (as in `shade_one`), in loam's pages; the mark
        // bit is atomic and the markers expect it set by others
        // (`mark::shade`). The store is before the fence, the look at the
        // holder's mark after it: a marker that marks the holder later
        // reads the store (`GcCell::get_seq_cst`).
        // SAFETY: as just said.
        if unsafe { self.mark_unless_young(cell, young, e, true) } {
            self.mutator().shade_queue.push(e);
        }
    }

    /// What `remember_one` and `shade_stored_one` share: sets `e`'s mark
    /// bit, through the page in hand, unless it is set already or the cell
    /// at `cell` lies in a young object of this runtime
    /// ([`in_young_object`](Self::in_young_object), asked once: `young`
    /// keeps the answer; after a `SeqCst` fence if `fence_first`). True if
    /// this call set the bit: the caller hands `e` on.
    ///
    /// # Safety
    /// `e` is an object in loam's pages that stays allocated, its page
    /// live, while this runs, and setting its mark bit now is sound (the
    /// callers say why).
    #[inline(always)]
    unsafe fn mark_unless_young(
        &self,
        cell: *const u8,
        young: &mut Option<bool>,
        e: usize,
        fence_first: bool,
    ) -> bool {
        // SAFETY: `e`'s page is live (caller).
        let page = unsafe { loam_heap::PageRef::of(e as *const u8) };
        let i = page.block_index(e as *const u8);
        // A marked (old) object first: the common store asks no more.
        if page.is_marked(i)
            || *young.get_or_insert_with(|| {
                if fence_first {
                    std::sync::atomic::fence(Ordering::SeqCst);
                }
                self.in_young_object(cell, page)
            })
        {
            return false;
        }
        !page.set_mark(i)
    }

    /// [`barrier_store`](Self::barrier_store) of values that are one
    /// pointer each (`CellValue::__edge`): `old` and `new` the objects
    /// they point to (0: none), which their traces would report alone.
    #[inline]
    pub(crate) fn barrier_store_edges(&self, cell: *const u8, old: usize, new: usize) {
        self.note_write();
        if self.marking != 0 {
            self.shade_edges_stored(cell, old, new);
        } else if self.remembers && new != 0 {
            self.remember_edge(cell, new);
        }
    }

    /// The marking branch of [`barrier_store_edges`](Self::barrier_store_edges):
    /// `shade_old` of `old`, then `shade_stored` of `new`, each as those
    /// decide, with no walk of either value.
    #[inline(never)]
    fn shade_edges_stored(&self, cell: *const u8, old: usize, new: usize) {
        if old != 0 {
            let since = self.old_shade_since();
            let _bracket = self.shading();
            self.shade_one(since, old);
        }
        if new == 0 {
            return;
        }
        let _bracket = self.shading();
        if self.stores_look_at_holders() {
            self.shade_stored_one(cell, &mut None, new);
        } else {
            self.shade_one(None, new);
        }
    }

    /// The deletion barrier's shade of a value overwritten or cut during a
    /// concurrent mark: [`shade`](Self::shade), less the objects allocated
    /// after the mark's stop. The snapshot is of the objects reachable at
    /// the stop; one allocated since is not in it, and not in the sweep's
    /// copy either, so this cycle does not free it, marked or not; marking
    /// it only promoted it (with sticky marks) and made the markers trace
    /// it. (Its being reachable, if it is, is the insertion barrier's
    /// business: every store of it during the mark shades it, as before.)
    /// Not in a window call of a ragged start: such a call may have begun
    /// before the stop's epoch was raised, and overwritten the value before
    /// the stop, so the epoch it reads now need not be the one its store
    /// answers to (`barrier.rs`, "Ragged cycles"). Every other call of a
    /// mark began after its stop's raise (a stopped mark raises it in the
    /// pause; a ragged one before its window closes), and the epoch can
    /// only have risen since, which makes the question stricter: an object
    /// allocated after a later stop was allocated after this one.
    ///
    /// Nor over an object a window call made (`gc::WINDOW_MADE`): it may
    /// hold an object of the sweep's copy that only that call reached,
    /// inside one the call handed out that no marker has traced yet, and
    /// no one else shades what it holds ("Ragged cycles", 6).
    #[inline(never)]
    pub(crate) fn shade_old<T: Trace + ?Sized>(&self, old: &T) {
        self.shade_edges(old, self.old_shade_since());
    }

    /// The generational barrier of a store of `value` between marks (5 in
    /// the module docs): marks each unmarked object it points to and
    /// remembers it for the next minor cycle, unless the store is into a
    /// cell of a young object (`cell`, when known: see
    /// [`in_young_object`](Self::in_young_object)), which the next cycle
    /// traces anyway.
    #[inline(never)]
    fn remember<T: Trace + ?Sized>(&self, cell: Option<*const u8>, value: &T) {
        // Asked once, and only for a value not marked yet: a store of an
        // old object marks and remembers nothing either way. Never in a
        // `GlobalAlloc` space, which cannot tell (`in_young_object`).
        let cell = cell.filter(|_| matches!(self.shared().space, crate::space::Space::Pages));
        let mut young = None;
        self.each_edge(value, |e| self.remember_one(cell, &mut young, e));
    }

    /// [`remember`](Self::remember) of a value that is one pointer, to
    /// object `e`, stored into the cell at `cell`.
    #[inline(never)]
    fn remember_edge(&self, cell: *const u8, e: usize) {
        let cell = Some(cell).filter(|_| matches!(self.shared().space, crate::space::Space::Pages));
        self.remember_one(cell, &mut None, e);
    }

    /// `remember`'s work for object `e`, one of the stored value's;
    /// `young` is the answer of `in_young_object` for `cell` once asked.
    #[inline(always)]
    fn remember_one(&self, cell: Option<*const u8>, young: &mut Option<bool>, e: usize) {
        // `e` is an object this call reached: it was marked at the last
        // pause or allocated after it (roots and reachable objects are
        // marked, weak references to unmarked objects were cleared), so
        // the sweep under way, which frees only objects that pause left
        // unmarked, does not free it, and no other sweep runs before the
        // next pause. Setting its mark bit meanwhile changes nothing the
        // sweep decides: it frees only unmarked objects of its copy of
        // the allocated bits as of that pause's stop, and `e` is not one. (`mark` loads
        // the bit before it writes: an old object, the common store,
        // costs no atomic write.)
        // The brands keep other runtimes' objects out of this call.
        #[cfg(debug_assertions)]
        {
            // SAFETY: `e` is allocated (above).
            let (_, owner) = unsafe { crate::gc::header_of(e) };
            assert_eq!(
                owner,
                self.shared().id,
                "loam: a barrier of one runtime met an object of another"
            );
        }
        let remembered = || self.mutator().me.remembered_in(self.remember);
        let Some(cell) = cell else {
            // SAFETY: `e` is allocated and its page live (above); a mark
            // bit set outside the pause is sound (above).
            if unsafe { self.shared().space.mark(e) } {
                remembered().lock().push(e);
            }
            return;
        };
        // `e` is allocated and its page live (above); the space is
        // loam's pages (`cell` is only kept there); a mark bit set outside
        // the pause is sound (above). The page in hand sets the bit
        // (`mark` would find it again).
        // SAFETY: as just said.
        if unsafe { self.mark_unless_young(cell, young, e, false) } {
            remembered().lock().push(e);
        }
    }

    /// Whether the cell at `cell` lies in a young (unmarked) object of this
    /// runtime in loam's pages, so that a store into it between marks need
    /// not mark and remember what it stores, nor one during a mark (asked
    /// after a fence) shade it ("A young object's cells" in the module
    /// docs has the argument). Asked only of a runtime in loam's pages
    /// (`remember`, `shade_stored`: a `GlobalAlloc` space cannot tell). False
    /// whenever that cannot be told: a cell outside loam's segments (on the
    /// stack, in a `Box` of another allocator) or past a huge block's
    /// first slice, a block that is not a managed object (a `malloc`'s,
    /// when loam is the global allocator), another runtime's object.
    /// `near` is the page of the object stored, where the cell often lies
    /// too (a node, and the child made just after it): looked at first.
    #[inline(never)]
    fn in_young_object(&self, cell: *const u8, near: loam_heap::PageRef<'_>) -> bool {
        let shared = self.shared();
        debug_assert!(matches!(shared.space, crate::space::Space::Pages));
        // The cell is borrowed by this call, so the memory holding it stays
        // allocated while we look: a block of `near` if it lies among its
        // blocks, else a block of ours if it lies in one of our segments.
        let found = match near.index_of(cell) {
            Some(i) => Some((near, i)),
            // SAFETY: as just said.
            None => unsafe { loam_heap::PageRef::holding(cell) },
        };
        let Some((page, i)) = found else {
            return false;
        };
        // A live block with its allocated bit set holds a managed object
        // (only `alloc_object` sets the bit, and its owner clears it before
        // the block can be handed out again; the sweep relies on the same).
        // A bit not yet seen set (an object another thread made) reads as
        // "not an object", which only remembers as before.
        if !page.is_allocated_unmarked(i) {
            return false;
        }
        // The first word of a managed object is its header.
        // SAFETY: as just said.
        let (_, owner) = unsafe { crate::gc::header_of(page.block(i) as usize) };
        owner == shared.id
    }

    /// The write barrier of a `GcLock` found inside object `owner`, whose
    /// contents hold managed pointers: records `owner` once per cycle for
    /// the next minor cycle to trace again (`cell.rs`, "Recording the
    /// object written"), and during a concurrent mark shades it, so that
    /// this cycle's sweep cannot free it before then.
    #[inline]
    pub(crate) fn barrier_lock_owner(&self, owner: usize, logged: &AtomicU64) {
        let shared = self.shared();
        if !shared.config.generational {
            return;
        }
        if self.marking != 0 {
            let _bracket = self.shading();
            // `owner` is allocated (`cell.rs`: a lock's owner is an
            // object the last mark that met the lock marked, or a survivor
            // of it), and marked, so the sweep under way, if any (this call
            // began before a ragged mark ended), keeps it.
            // SAFETY: as just said.
            unsafe { crate::mark::shade_to(&shared.space, &self.mutator().shade_queue, owner) };
        }
        let epoch = self.remember;
        if logged.load(Ordering::Relaxed) != epoch {
            logged.store(epoch, Ordering::Relaxed);
            self.mutator().me.remembered_in(epoch).lock().push(owner);
        }
    }

    /// The write barrier of a `GcLock` whose owning object is unknown (it
    /// was found inside two): the next cycle marks the whole heap.
    #[cold]
    pub(crate) fn barrier_lock_unknown(&self) {
        let shared = self.shared();
        if shared.config.generational && !shared.lock_written.load(Ordering::Relaxed) {
            shared.lock_written.store(true, Ordering::Relaxed);
        }
    }

}
