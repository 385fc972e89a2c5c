//! Mutators: [`Mutator`] (a thread attached to a runtime) and [`Mutation`]
//! (the context of one `mutate` call, through which objects are allocated
//! and rooted).

use crate::alloc_space::AllocSpace;
use crate::gc::{Gc, GcBox, Managed};
use crate::finalize::BrakeEnd;
use crate::handshake::Slot;
use crate::held::{Hold, MutatorHolds};
use crate::root::{GlobalRoot, Root, RootTable, Rootable};
use crate::runtime::{Handle, Shared};
use crate::trace::{Trace, Tracer};
use crossbeam_deque::{Steal, Stealer, Worker};
use parking_lot::Mutex;
use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Heap budget a mutator takes from its runtime at a time: pacing and the
/// heap limit are checked once per chunk, not per object.
pub(crate) const CHUNK: usize = 64 << 10;

/// Gone mutators the list may hold before an attach asks for a cycle to
/// forget them (`Mutator::attach`).
const GONE_BEFORE_CYCLE: usize = 64;

/// The longest a mutator marks for the collector at a time (`assist`):
/// each such slice is a pause as the mutator sees it.
const ASSIST_SLICE: Duration = Duration::from_micros(100);

/// Bytes of dead objects waiting for their destructors that never brake a
/// call (`Mutator::brake_for_drops`), however near the pace point the heap
/// is: a few pages' worth of drops always runs soon.
const BRAKE_MIN: usize = 1 << 20;

/// How often a brake before a call looks at the heap again while it waits
/// for the finalizer (which wakes it at every page it finishes).
const BRAKE_SLICE: Duration = Duration::from_millis(10);

/// The same inside a call at the heap limit, where a stop may be waiting
/// for the call: it gives up on one at once.
const LIMIT_BRAKE_SLICE: Duration = Duration::from_millis(1);

/// Marking owed that waits for the next chunk rather than start a slice for
/// so little.
const ASSIST_MIN: usize = 16 << 10;

/// How long an assist that found no work to take may last without
/// counting as a hold ([`counts_as_hold`]).
const IDLE_ASSIST: Duration = Duration::from_micros(10);

/// Whether an assist (`Mutator::assist`) that `took` this long is a hold:
/// every one that took work, an array's later chunks or objects traced
/// again included (they mark no object); and one that found none only if
/// it lasted past [`IDLE_ASSIST`]. An unhindered look that finds no work
/// (a lock, a failed steal) takes well under a microsecond, and counting
/// each would add thousands of such holds that flatter the quantiles; but
/// a look can be held for milliseconds (its lock's holder or a queue's
/// pusher preempted, the vCPU descheduled): at binary-trees depth 21 such
/// looks held a mutator 1 – 4 ms, and went unreported while only slices
/// that took work counted (`docs/perf-log.md`, "Assists that found no
/// work, counted").
fn counts_as_hold(worked: bool, took: Duration) -> bool {
    worked || took > IDLE_ASSIST
}

// "Twice the goal", here and below, is where pacing begins: under a heap
// limit it may be lower, seven eighths of the limit (`Shared::pace_at`).

/// The longest a mutator marks at a time once the heap has reached twice
/// its goal (`Mutator::pace`, `Mutator::assist`): it then owes the mark
/// every byte of its debt, but pays it in holds of at most this.
const PACED_SLICE: Duration = Duration::from_millis(1);

/// Marking owed per byte allocated, in 1/1024ths, once the heap has
/// reached twice its goal: the most a mark's own ratio can be
/// (`cycle.rs`, `mark_concurrently`). Every byte then buys this much of
/// the mark, so the heap grows past twice the goal by at most a
/// sixteenth of what the mark had left to trace.
const PACED_RATIO: usize = 16 << 10;

/// Heap budget a mutator takes at a time once the heap has reached twice
/// its goal: its debt is settled four times as often, in smaller holds.
const PACED_CHUNK: usize = CHUNK / 4;

/// Large objects made since the last mark ask for a cycle once they pass
/// this share of the pace goal (`Mutator::count_large`).
pub(crate) const LARGE_SHARE: usize = 8;

/// How long a call waits at most for a ragged start's window to close
/// when no other call is under way (`Mutator::wait_out_window`): the
/// collector has only to notice the last old call's end and read the
/// roots, well under this unless it is starved of a CPU. Under a
/// millisecond, the most a mutator should be held: on this VM an idle
/// vCPU's wake-up alone can take 0.3 ms, and at 1 ms the waits that met
/// the cap were holds of 1.000 ms, the longest of a run at one thread.
const WINDOW_WAIT: Duration = Duration::from_micros(750);

/// What the collector sees of a mutator.
#[derive(Debug)]
pub(crate) struct MutatorShared {
    pub(crate) slot: Slot,
    pub(crate) roots: RootTable,
    /// The `Mutator` is gone; its roots may live on.
    pub(crate) detached: AtomicBool,
    /// Objects the write barrier marked (young objects stored into barrier
    /// cells) and objects whose `GcLock`s were written, since the last
    /// cycle's start: the next minor cycle traces what they point to. Two
    /// lists, by the parity of the remember epoch the recording call began
    /// with: a ragged start takes the last epoch's list once every call
    /// that began in it has ended, while calls of the new epoch already
    /// record into the other (`remembered_in`).
    remembered: [Mutex<Vec<usize>>; 2],
    /// Every interval the collector held this mutator (`held.rs`).
    pub(crate) holds: MutatorHolds,
    /// The collector's end of the mutator's shade queue
    /// (`Mutator::shade_queue`): objects its barriers marked for the
    /// concurrent mark, not yet traced. It outlives the `Mutator`, and
    /// what it holds then is drained like the rest.
    shaded: Stealer<usize>,
}

impl MutatorShared {
    fn new(shaded: Stealer<usize>) -> Self {
        MutatorShared {
            slot: Slot::default(),
            roots: RootTable::default(),
            detached: AtomicBool::new(false),
            remembered: Default::default(),
            holds: MutatorHolds::default(),
            shaded,
        }
    }

    /// Moves what the mutator's barriers shaded into `out` (with the
    /// mutator running: a shade pushed before a release that the caller
    /// acquired is taken).
    pub(crate) fn take_shaded(&self, out: &mut Vec<usize>) {
        if self.shaded.is_empty() {
            return;
        }
        // In batches (about half of what is left each time): a `steal` per
        // object pinned the epoch per object, 9% of the collector's time.
        let batch = Worker::new_fifo();
        loop {
            match self.shaded.steal_batch_with_limit(&batch, usize::MAX) {
                Steal::Success(()) => {
                    while let Some(x) = batch.pop() {
                        out.push(x);
                    }
                }
                Steal::Retry => {}
                Steal::Empty => return,
            }
        }
    }

    /// Whether the shade queue is empty (as `take_shaded` would find it).
    pub(crate) fn shaded_is_empty(&self) -> bool {
        self.shaded.is_empty()
    }

    /// The remembered list of calls that began in remember epoch `epoch`.
    #[inline]
    pub(crate) fn remembered_in(&self, epoch: u64) -> &Mutex<Vec<usize>> {
        &self.remembered[(epoch & 1) as usize]
    }

    /// Moves both remembered lists into `out` (no call of this mutator
    /// runs, or none that began in either epoch).
    pub(crate) fn take_remembered(&self, out: &mut Vec<usize>) {
        for list in &self.remembered {
            out.append(&mut list.lock());
        }
    }
}

thread_local! {
    /// Ids of the runtimes this thread has a live `Mutator` of: a list on
    /// the heap, made by the first attach and freed by the last mutator's
    /// drop, behind a pointer that needs no destructor, so that it is
    /// there for as long as the thread is, its thread-local destructors
    /// included. (A `RefCell<Vec>` of its own was destroyed among them,
    /// and a later destructor's `attach` panicked there, which aborts the
    /// process.) Only `with_attached` and `attached_to` touch it.
    static ATTACHED: Cell<*mut Vec<u16>> = const { Cell::new(std::ptr::null_mut()) };
    /// For each runtime this thread holds `Root`s of, its id and how many:
    /// a `Root` outlives its `Mutator` (it keeps the runtime alive), and
    /// `StatsHandle::wait_final` on this thread would wait for ever for a
    /// root only this thread can drop. Kept as `ATTACHED` is (`with_list`),
    /// for roots dropped by thread-local destructors. The roots of one
    /// runtime are counted in `ROOTED_ONE` instead, and only those of
    /// others here (`count_root`).
    static ROOTED: Cell<*mut Vec<(u16, usize)>> = const { Cell::new(std::ptr::null_mut()) };
    /// One runtime's id (0: none; ids start at 1) and how many `Root`s of
    /// it this thread holds besides those in `ROOTED`: a thread that roots
    /// and drops values of one runtime one at a time counts them here,
    /// without the list's allocation and free each time (30 – 60 ns a
    /// root made and dropped, of about 200). No destructor, as `ROOTED`.
    static ROOTED_ONE: Cell<(u16, usize)> = const { Cell::new((0, 0)) };
    /// The mutator whose `mutate` call (or mark assist) this thread is
    /// inside (null: none).
    static INSIDE: Cell<*const Mutator> = const { Cell::new(std::ptr::null()) };
}

/// The address of the mutator whose `mutate` call (or mark assist) this
/// thread is in, 0 outside any: what a `GcLock` writer records.
pub(crate) fn caller() -> usize {
    INSIDE.with(Cell::get) as usize
}

/// Takes a lock the collector also takes for work that grows with what it
/// guards (a root table while it copies it, the weak list while it walks
/// it, the weak gate while it clears the weak cells): `try_take` first, and
/// only if that fails `take`, timed, the wait recorded as a hold of the
/// mutator whose `mutate` call this thread is in, if that call is of the
/// lock's runtime (`shared`). A wait outside calls, or in another
/// runtime's call, is not the collector's hold. `walked`: other mutators
/// take the lock too (the global table, the weak list), so a wait counts
/// only if the collector wanted or held it as the wait began (the flag its
/// walks raise, [`crate::runtime::Walk`]): counted whenever a mark was
/// under way, a mutator's wait behind another's push was a hold of well
/// under a microsecond, many of which pulled the holds' p50 and p99 down.
/// `None`: a mutator's own root table and the weak gate's read side,
/// which only the collector contends.
#[inline]
pub(crate) fn take_counting<G>(
    shared: &crate::runtime::Shared,
    walked: Option<&AtomicBool>,
    try_take: impl FnOnce() -> Option<G>,
    take: impl FnOnce() -> G,
) -> G {
    match try_take() {
        Some(g) => g,
        None => take_counted(shared, walked, take),
    }
}

#[cold]
#[inline(never)]
fn take_counted<G>(shared: &crate::runtime::Shared, walked: Option<&AtomicBool>, take: impl FnOnce() -> G) -> G {
    let collectors = walked.map_or(true, |w| w.load(Ordering::Relaxed));
    let start = Instant::now();
    let g = take();
    let d = start.elapsed();
    let m = INSIDE.with(Cell::get);
    if collectors && !m.is_null() {
        // `INSIDE` points to the mutator whose call (or assist) this thread
        // is in: that call borrows it for its whole length, and `Inside`'s
        // drop takes the pointer back before it returns; it is used on its
        // own thread only (`Mutator` is `!Send`).
        // SAFETY: as just said.
        let m = unsafe { &*m };
        if m.shared().id == shared.id {
            m.held(Hold::Safepoint, d);
        }
    }
    g
}

/// Holds met on a call's way in, by cause.
#[derive(Clone, Copy, Default)]
struct Stall {
    total: Duration,
    parts: [Duration; 5],
}

/// A call's way in, from `mutate`'s entry to the handshake that begins
/// it: every hold met there (a collection at the limit, pacing and
/// assists, the wait out of a ragged window, a stop) is one interval in
/// which the thread waited to run its call, and is recorded as one hold,
/// split by cause only in the totals, as the JVM counts one safepoint's
/// wait as one pause, whatever it waited for. Recorded one by one, a
/// stall of 2 ms made of a 1.2 ms pace and a 0.8 ms stop read as two
/// holds, neither over a millisecond. Records on drop,
/// so that a panic on the way in loses nothing and leaves no stall open.
/// On the entry of every call: a flag stored at each end and, on the
/// fast path (no hold met), one compare; the stall itself is written only
/// by a hold.
struct EntryStall<'a>(&'a Mutator);

impl<'a> EntryStall<'a> {
    fn begin(m: &'a Mutator) -> Self {
        m.entering.set(true);
        EntryStall(m)
    }
}

impl Drop for EntryStall<'_> {
    fn drop(&mut self) {
        let m = self.0;
        m.entering.set(false);
        if m.entry_stall.get().total > Duration::ZERO {
            let stall = m.entry_stall.take();
            let parts = [Hold::Safepoint, Hold::Pacing, Hold::Memory, Hold::Assist, Hold::Drops]
                .map(|why| (why, stall.parts[why as usize]));
            m.shared().holds.record_parts(&m.me.holds, stall.total, &parts);
        }
    }
}

/// Whether this thread has a live `Mutator` of runtime `id`.
pub(crate) fn attached_to(id: u16) -> bool {
    let list = ATTACHED.with(Cell::get);
    // `ATTACHED`'s list, if any, is this thread's own, freed only by
    // `with_attached` on this thread, which is not running (no callback
    // runs inside it).
    // SAFETY: as just said.
    !list.is_null() && unsafe { (*list).contains(&id) }
}

/// Runs `f` on this thread's list of attached runtimes (`ATTACHED`),
/// made if there is none, and freed after if `f` left it empty.
fn with_attached<R>(f: impl FnOnce(&mut Vec<u16>) -> R) -> R {
    with_list(&ATTACHED, f)
}

/// Counts a `Root` of runtime `id` made (`made`) or dropped on this
/// thread (`ROOTED`).
pub(crate) fn count_root(id: u16, made: bool) {
    // A runtime's count may be split between the slot and the list (its
    // roots made while the slot held another runtime's): a drop takes from
    // the slot when it names the runtime, else from the list, which then
    // holds all of that runtime's count.
    let (one, n) = ROOTED_ONE.with(Cell::get);
    match (made, one == id && n > 0) {
        (true, true) => return ROOTED_ONE.with(|c| c.set((id, n + 1))),
        (true, false) if n == 0 => return ROOTED_ONE.with(|c| c.set((id, 1))),
        (false, true) => return ROOTED_ONE.with(|c| c.set(if n == 1 { (0, 0) } else { (id, n - 1) })),
        _ => {}
    }
    with_list(&ROOTED, |list| match list.iter().position(|&(x, _)| x == id) {
        Some(i) if made => list[i].1 += 1,
        Some(i) => {
            list[i].1 -= 1;
            if list[i].1 == 0 {
                list.swap_remove(i);
            }
        }
        None => {
            debug_assert!(made, "loam: a root dropped that was never counted");
            list.push((id, 1));
        }
    });
}

/// Whether this thread holds a `Root` of runtime `id`.
pub(crate) fn holds_roots_of(id: u16) -> bool {
    let (one, n) = ROOTED_ONE.with(Cell::get);
    if one == id && n > 0 {
        return true;
    }
    let list = ROOTED.with(Cell::get);
    // As `attached_to`: the list is this thread's own, freed only by
    // `with_list` on this thread, which is not running.
    // SAFETY: as just said.
    !list.is_null() && unsafe { (*list).iter().any(|&(x, _)| x == id) }
}

/// Runs `f` on this thread's list in `key` (`ATTACHED`, `ROOTED`), made if
/// there is none, and freed after if `f` left it empty.
fn with_list<T, R>(
    key: &'static std::thread::LocalKey<Cell<*mut Vec<T>>>,
    f: impl FnOnce(&mut Vec<T>) -> R,
) -> R {
    key.with(|a| {
        if a.get().is_null() {
            a.set(Box::into_raw(Box::default()));
        }
        let list = a.get();
        // The list is this thread's own: made just above or by an earlier
        // call on this thread, freed only below; `f` is one of this
        // module's closures, which do not call back in here, so this is
        // the only reference.
        // SAFETY: as just said.
        let r = f(unsafe { &mut *list });
        // SAFETY: as just said; nothing refers to it after.
        if unsafe { (*list).is_empty() } {
            a.set(std::ptr::null_mut());
            // SAFETY: made by `Box::into_raw` above, and unset just now.
            drop(unsafe { Box::from_raw(list) });
        }
        r
    })
}

/// Whether this thread is inside a `mutate` call (of any runtime).
pub(crate) fn inside_mutate() -> bool {
    INSIDE.with(|c| !c.get().is_null())
}

/// A thread attached to a [`Runtime`](crate::Runtime): the only way to
/// reach its heap.
///
/// A mutator is *running* inside [`mutate`](Mutator::mutate) and *blocked*
/// everywhere else: between `mutate` calls it holds no pointer the collector
/// cannot see (its `Gc`s cannot outlive the call, its [`Root`]s are in a
/// table the collector reads), so the collector never waits for it.
/// Collections happen only at those boundaries; a long computation is a
/// loop of short `mutate` calls that carries its state in roots. Dropping
/// the `Mutator` detaches the thread.
///
/// `!Send`: it stays on the thread that attached. It may live in a
/// `thread_local!`, whose destructor detaches it at the thread's exit. A
/// managed allocation from a thread-local destructor that runs after the
/// heap's own (glibc runs them in the reverse order of first use) fails:
/// `try_alloc` gives an [`AllocError`] that says so, `alloc` panics, which
/// inside a thread-local destructor aborts the process.
///
/// # Examples
/// A loop that allocates for as long as it likes without ever stalling a
/// collection, keeping its result in a root:
/// ```
/// use loam_runtime::{Gc, GcCell, Root, Rootable, Runtime, Trace};
///
/// #[derive(Trace)]
/// struct Acc<'gc> {
///     last: GcCell<'gc, Option<Gc<'gc, u64>>>,
/// }
///
/// let rt = Runtime::builder().gc_threads(1).min_heap(1 << 20).build();
/// let mut m = rt.attach();
/// let acc: Root<Rootable!['gc => Acc<'gc>]> =
///     m.mutate(|mc| mc.root(mc.alloc(Acc { last: GcCell::new(None) })));
/// for i in 0..20_000_u64 {
///     m.mutate(|mc| {
///         let acc = acc.get(mc);
///         acc.last.set(mc, Some(mc.alloc(i)));
///         let _garbage = mc.alloc([i; 16]);
///     });
/// }
/// let last = m.mutate(|mc| *acc.get(mc).last.get().unwrap());
/// assert_eq!(last, 19_999);
/// // The last cycle may still be sweeping (a mutator that helped its sweep
/// // goes on before the sweep ends): wait for it.
/// rt.wait_for_cycle();
/// assert!(rt.stats().cycles > 0);
/// ```
pub struct Mutator {
    pub(crate) handle: Arc<Handle>,
    pub(crate) me: Arc<MutatorShared>,
    /// Heap budget taken from the runtime and not yet allocated.
    credit: Cell<usize>,
    /// The write barrier's buffer for a stored value's edges.
    pub(crate) barrier_edges: RefCell<Tracer>,
    /// Objects this mutator's barriers shaded, for the collector to take
    /// (`mark::shade_to`; the other end is `MutatorShared::shaded`).
    pub(crate) shade_queue: Worker<usize>,
    /// An allocation failed at the heap limit during the last `mutate`: run
    /// a forced collection before the next.
    limit_hit: Cell<bool>,
    /// Since the last such collection no allocation took a new chunk: the
    /// program is at its limit, and the value is the runtime's
    /// `roots_changed` as that collection began. A root dropped or moved
    /// since, or a write while at the limit (`Mutation::note_write`), may
    /// have freed memory, so the next `mutate` collects again (a read-only
    /// call in between must not use up the retry).
    limit_roots: Cell<Option<u64>>,
    /// Bytes of marking this mutator owes the concurrent mark under way for
    /// what it allocated during it (`assist`).
    assist_debt: Cell<usize>,
    /// The mark (`Calls::mark_epoch`) `assist_debt` is owed to: debt is
    /// never carried into another mark (`owed`).
    assist_mark: Cell<u64>,
    /// This mutator's slot in `Shared::held_cpus`, set while the collector
    /// holds it (`held_cpus.rs`); given back as it is dropped.
    cpu_slot: crate::held_cpus::SlotIndex,
    /// The cycles completed (`Shared::completed`) when this mutator last
    /// went on past the pace point without waiting for a sweep that frees
    /// enough (`pace`): once a cycle.
    sweep_pass: Cell<u64>,
    /// Whether a call is on its way in (`mutate`, up to the handshake).
    entering: Cell<bool>,
    /// The holds met on the way in so far, recorded as one when the call
    /// begins (`EntryStall`); zero otherwise.
    entry_stall: Cell<Stall>,
    /// Shading brackets open on this thread (`Mutation::shading`): only
    /// the outermost touches the slot.
    shading_depth: Cell<u32>,
    /// The mark epoch of the call under way if it began in a mark after
    /// the mark's window closed (0 otherwise): at the heap limit it may
    /// wait for that mark's cycle, if ragged (`refill`).
    call_mark: Cell<u64>,
    /// This mutator's registry chunk, in a `GlobalAlloc` space.
    pub(crate) space_local: crate::alloc_space::Local,
    /// The runtime's `GlobalAlloc` space, or `None` for the pages: read
    /// here, one load on every allocation, not through the runtime.
    alloc_space: Option<std::ptr::NonNull<AllocSpace>>,
    _not_send: PhantomData<*mut ()>,
}

impl fmt::Debug for Mutator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutator")
            .field("runtime", &self.handle.shared.id)
            .field("credit", &self.credit.get())
            .finish()
    }
}

/// Leaves the handshake when a `mutate` closure returns or unwinds.
struct Inside<'a> {
    shared: &'a Shared,
    slot: &'a Slot,
    prev: *const Mutator,
    /// A pool call that waits would deadlock here: a pause waits for this
    /// call to return, and the workers it would wait for may be waiting for
    /// the pause (see `pool.rs`, "Waiting inside `mutate`").
    _no_waits: loam_threadpool::WaitsForbidden,
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(self.prev));
        self.shared.handshake.leave(self.slot);
    }
}

impl AsRef<Slot> for Arc<MutatorShared> {
    fn as_ref(&self) -> &Slot {
        &self.slot
    }
}

impl Mutator {
    pub(crate) fn attach(handle: Arc<Handle>) -> Mutator {
        crate::forked::refuse_since(handle.shared.born, "attach");
        let id = handle.shared.id;
        // A mutator there would wait, at its first pace or stop, for the
        // cycle that is running its caller.
        assert!(
            !crate::collector::in_cycle_thread(),
            "loam: attach called on a GC thread (from a Trace impl the mark \
             ran): its calls would wait for the cycle that runs it"
        );
        assert!(
            !crate::collector::is_coordinator_of(id),
            "loam: attach called from this runtime's own on_cycle hook: its \
             calls would wait for the collector that runs the hook"
        );
        let twice = with_attached(|a| {
            let twice = a.contains(&id);
            if !twice {
                a.push(id);
            }
            twice
        });
        assert!(
            !twice,
            "loam: this thread already has a Mutator of this runtime; use that one"
        );
        // Before any of its allocations: a runtime started during a cycle
        // (`runtime_count.rs`, 2).
        crate::runtime_count::before_first_allocation();
        let shade_queue = Worker::new_fifo();
        let me = Arc::new(MutatorShared::new(shade_queue.stealer()));
        let alloc_space = handle.shared.space.alloc_space().map(std::ptr::NonNull::from);
        handle.shared.handshake.attach(&me.slot);
        handle.shared.live_mutators.fetch_add(1, Ordering::Relaxed);
        {
            let mut list = handle.shared.mutators.lock();
            list.push(me.clone());
            // Mutators that are gone (detached, no root left) leave the
            // list at a cycle's start, and only allocation starts cycles:
            // threads that come and go without allocating (lookups through
            // global roots) piled up entries of about 3 KiB each for ever.
            // Once the gone ones are many and at least half the list, a
            // cycle is asked for; it forgets them (in a ragged cycle, those
            // whose lists are empty: one or two cycles), so the next ask
            // waits for as many again. Not with pacing off (a gc percent
            // of "never"): that program starts its cycles itself.
            // Counted once per `GONE_BEFORE_CYCLE` attaches, not at each:
            // a walk of the list under the lock the collector takes too,
            // with many threads alive, was work for every attach. (After a
            // cycle shortened the list, the next count is that many
            // attaches from its new length.)
            let shared = &handle.shared;
            let len = list.len();
            let mut look_at = shared
                .gone_look_at
                .load(Ordering::Relaxed)
                .min(len + GONE_BEFORE_CYCLE);
            let mut ask = false;
            if len >= look_at {
                look_at = len + GONE_BEFORE_CYCLE;
                let gone = list
                    .iter()
                    .filter(|m| m.detached.load(Ordering::Relaxed) && Arc::strong_count(m) == 1)
                    .count();
                ask = gone >= GONE_BEFORE_CYCLE && gone * 2 >= len && shared.config.gc_percent != u32::MAX;
            }
            shared.gone_look_at.store(look_at, Ordering::Relaxed);
            drop(list);
            if ask {
                shared.request(false);
            }
        }
        let cpu_slot = handle.shared.held_cpus.claim();
        Mutator {
            handle,
            me,
            credit: Cell::new(0),
            barrier_edges: RefCell::new(Tracer::new()),
            shade_queue,
            limit_hit: Cell::new(false),
            limit_roots: Cell::new(None),
            assist_debt: Cell::new(0),
            assist_mark: Cell::new(0),
            cpu_slot,
            sweep_pass: Cell::new(u64::MAX),
            entering: Cell::new(false),
            entry_stall: Cell::new(Stall::default()),
            shading_depth: Cell::new(0),
            call_mark: Cell::new(0),
            space_local: Default::default(),
            alloc_space,
            _not_send: PhantomData,
        }
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// The runtime's `GlobalAlloc` space, or `None` for loam's pages.
    #[inline(always)]
    pub(crate) fn alloc_space(&self) -> Option<&AllocSpace> {
        // SAFETY: the space lives in the runtime's `Shared`, which our
        // `handle` keeps alive as long as `self`.
        self.alloc_space.map(|p| unsafe { p.as_ref() })
    }

    /// Runs `f` with a fresh brand `'gc`: inside, allocate with
    /// [`Mutation::alloc`] and read objects through `Gc<'gc, _>`. Nothing
    /// branded `'gc` can leave `f` (its result `R` cannot name `'gc`); keep
    /// objects for later in [`Root`]s or [`GlobalRoot`]s.
    ///
    /// Entering is the safepoint: if a collection is stopping the world, the
    /// call waits for the pause to end first. A collection's pauses wait for
    /// every `mutate` call under way to return (its marking between them
    /// does not), so keep each call short.
    ///
    /// Inside, no pool call may wait (`join`, `scope`, `install`,
    /// `broadcast` of any `loam-threadpool` pool panic): a pause waits for
    /// this call, and the pool's workers may be waiting for the pause. Fork
    /// between `mutate` calls ([`ManagedPool`](crate::ManagedPool)).
    ///
    /// # Panics
    /// Inside a `mutate` call of another runtime.
    ///
    /// # Examples
    /// ```
    /// use loam_runtime::{Root, Rootable, Runtime};
    ///
    /// let rt = Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// // What a call returns is plain data; a `Root` keeps an object for later calls.
    /// let kept: Root<Rootable!['gc => u64]> = m.mutate(|mc| mc.root(mc.alloc(42)));
    /// m.collect();
    /// assert_eq!(m.mutate(|mc| *kept.get(mc)), 42);
    /// ```
    pub fn mutate<R>(&mut self, f: impl for<'gc> FnOnce(&Mutation<'gc>) -> R) -> R {
        // A `Gc` of the outer call could be written through the inner
        // call's `Mutation`, whose barrier serves the other runtime: the
        // outer runtime's snapshot and remembered set would miss the write.
        assert!(
            INSIDE.with(Cell::get).is_null(),
            "loam: mutate calls of two runtimes cannot nest (the write barrier \
             of one would miss the other's objects); finish one call first"
        );
        crate::forked::refuse_since(self.handle.shared.born, "mutate");
        let stall = EntryStall::begin(self);
        // Take back the blocks our sweeper freed: they are ready for reuse.
        loam_heap::reclaim_runs();
        self.collect_for_limit();
        let shared = &*self.handle.shared;
        // Twice the goal itself, not the trigger: while a sweep runs the
        // trigger counts from the heap as the mark ended, garbage and all,
        // and a mutator of a starved collector grew the heap to 5x the goal
        // before it waited.
        // Not on a coordinator (an `on_cycle` hook's call into another
        // runtime): pacing may wait for that runtime's next cycle, and two
        // hooks allocating in each other's runtime waited for each other
        // for ever. Pacing is no part of soundness; a hook's allocations
        // are its runtime's to keep small.
        if shared.over_pace() && !crate::collector::on_coordinator() {
            // Outrunning the collector: let it catch up before growing on.
            self.pace();
        }
        // Outrunning the destructors (`finalize.rs`, "The brake").
        if shared.finalizer.pending() != 0 {
            self.brake_for_drops();
        }
        if shared.calls.now().window {
            self.wait_out_window();
        }
        if let Some(waited) = shared.handshake.enter(&self.me.slot) {
            self.held(Hold::Safepoint, waited);
        }
        drop(stall);
        let _inside = Inside {
            shared,
            slot: &self.me.slot,
            prev: INSIDE.with(|c| c.replace(self as *const Mutator)),
            _no_waits: loam_threadpool::forbid_waits(
                "inside `mutate` (a collection's pause waits for this call, and the pool's \
                 workers may be waiting for the pause); fork and join between `mutate` calls",
            ),
        };
        // Constant for the whole call, read once as it begins, after the
        // entry fence (`Shared::calls`): a cycle changes it either with
        // the world stopped, or raggedly, and then waits for every call
        // that began before the change (`handshake.rs`, `wait_for_calls`).
        // The mark epoch beside it, of the same cycle (`calls.rs`).
        let (calls, marking) = shared.calls.enter();
        // A call that read the window open tells the mark's end to wait
        // for it, unless the window has closed since (it has read nothing
        // yet, so it then runs as a call that began after the window).
        let window = calls.window && shared.handshake.confirm_window(&self.me.slot, || shared.calls.now() == calls);
        // A runtime without generations records nothing, and `u64::MAX`
        // is what a log that never recorded holds (`log.rs`).
        let remember = if shared.config.generational {
            calls.remember
        } else {
            u64::MAX
        };
        self.call_mark.set(if window { 0 } else { marking });
        let mc = Mutation {
            mutator: self as *const Mutator,
            marking,
            window,
            brackets: marking != 0 && shared.config.ragged && !window,
            remember,
            // A full cycle's phase 0 has begun: that cycle traces
            // everything from the roots (`calls::CLEARING`).
            remembers: shared.config.generational && !calls.clearing,
            at_limit: shared.at_limit.load(Ordering::Relaxed) != 0,
            _brand: PhantomData,
        };
        f(&mc)
    }

    /// Passes a safepoint: waits if a collection is stopping the world. A
    /// mutator outside `mutate` never holds the collector up, so this is only
    /// needed to let a pending pause go first (a mutator that allocates much
    /// can call it to pace itself).
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// for i in 0..100_u64 {
    ///     m.mutate(|mc| {
    ///         mc.alloc(i);
    ///     });
    ///     // Between calls: a pause waiting to begin goes first.
    ///     m.safepoint();
    /// }
    /// ```
    pub fn safepoint(&mut self) {
        // A stop under way at the fork would never end in the child.
        crate::forked::refuse_since(self.handle.shared.born, "Mutator::safepoint");
        let shared = self.shared();
        if let Some(waited) = shared.handshake.enter(&self.me.slot) {
            self.held(Hold::Safepoint, waited);
        }
        shared.handshake.leave(&self.me.slot);
    }

    /// Every interval the collector held this mutator so far: waiting at a
    /// safepoint for a stop to end (the time other mutators' calls took to
    /// return included), for a cycle when it outran the collector or doing
    /// a share of its mark (assists), and for memory at the heap limit.
    /// [`GcStats::mutator_pauses`] adds up all
    /// mutators'.
    ///
    /// [`GcStats::mutator_pauses`]: crate::GcStats::mutator_pauses
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::new();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     mc.alloc(1_u32);
    /// });
    /// let held = m.pauses();
    /// assert!(held.max() >= held.p99());
    /// ```
    pub fn pauses(&self) -> crate::PauseHistogram {
        self.me.holds.histogram()
    }

    /// Before a call, with dead objects waiting for their destructors:
    /// waits for the finalizer while they hold more than the room the heap
    /// leaves below where pacing begins (twice the goal, or seven eighths
    /// of the limit), and more than [`BRAKE_MIN`], plus the most left of
    /// one sweep's batch for the finalizer (memory the heap held anyway as
    /// those objects died; under a limit, no further than seven eighths
    /// of it), for as long as the finalizer makes progress
    /// (`Finalizer::brake`). So the backlog passes the pace point by a
    /// batch at most, however slow the destructors, and a program that
    /// drops a large structure goes on while they run. With the gc
    /// percent off there is no pace point, and only the heap limit brakes
    /// (`Mutator::refill`). Not on a GC thread, a coordinator or a
    /// finalizer (one of any runtime: it would wait for itself, or for a
    /// finalizer waiting for it).
    #[cold]
    #[inline(never)]
    fn brake_for_drops(&self) {
        let shared = self.shared();
        let over = || {
            let at = shared.pace_at(shared.pace_goal.load(Ordering::Relaxed));
            // The heap before the backlog (`refill`).
            let room = at.saturating_sub(shared.heap_used.load(Ordering::Acquire));
            let pending = shared.finalizer.pending();
            let floor = room.max(BRAKE_MIN);
            // The allowance last: its line is the finalizer thread's.
            pending > floor
                && pending - floor > shared.finalizer.allowance().min(shared.pace_cap.saturating_sub(at))
        };
        if !over() || crate::collector::on_gc_thread() {
            return;
        }
        // Outside any call: nothing waits for this thread but its own
        // program, so a slice only re-reads the heap (a sweep may make
        // room meanwhile).
        if let (_, Some(waited)) = shared.finalizer.brake(over, BRAKE_SLICE, |_| false) {
            self.held(Hold::Drops, waited);
        }
    }

    /// Before a call, with the heap at twice its goal: pays the marking
    /// debt the last call left (at least one assist's worth) to the
    /// concurrent mark under way, in slices of [`PACED_SLICE`], and lets
    /// the call go, which pays for what it allocates as it goes
    /// ([`assist`](Self::assist), paced). With no mark to help but a sweep
    /// under way, sweeps its pages a slice at a time (`Shared::help_sweep`)
    /// until the heap is under twice the goal or the rest of the sweep
    /// will take it there; with neither (the cycle has not begun, or
    /// the GC threads hold every page of the sweep), waits for the cycle
    /// to end or for a mark or a sweep to help; with none of the mark's
    /// work left to take (the GC threads hold the rest, until the mark
    /// ends), waits a slice and tries again, unless it
    /// owes only the minimum (nothing allocated during this mark). Never
    /// past the end of one cycle, and not through a sweep that will take
    /// the heap back under the pace point (`Shared::sweep_frees`): the
    /// mutator goes on without it, once a cycle for free, and otherwise
    /// after a slice of sweeping (sweeping does not change what the sweep
    /// will leave, so a later call in the cycle pays that slice as a
    /// toll). Nor while a ragged mark that has traced through ends, within
    /// a room past the pace point (`Shared::outruns_mark_end`): the mutator
    /// goes on. One hold, whatever its parts.
    ///
    /// It used to help the mark until the heap came under twice the goal
    /// again, which is a whole cycle when the live data has outgrown the
    /// goal: binary-trees at depth 21 held its one mutator 70 – 80 ms so,
    /// right after it built its long-lived tree. Now every byte allocated
    /// past twice the goal is paid for at the paced ratio, before the next
    /// call at the latest, which bounds the heap as the wait did.
    #[cold]
    #[inline(never)]
    fn pace(&self) {
        let shared = self.shared();
        let start = Instant::now();
        let mut assisting = Duration::ZERO;
        // Waits for a stop under way as a slice began: a safepoint's, not
        // pacing's.
        let mut stopped = Duration::ZERO;
        let mut held = false;
        // The debt, computed once a mark (what is left after a slice is
        // owed exactly, not rounded up to an assist's worth again), and the
        // cycles completed as pacing began (one cycle at most).
        // Whether it is only the minimum (below) is kept with it: a
        // minimum partly paid is still forgiven when there is no work.
        let mut owing: Option<(u64, usize, bool)> = None;
        // Published for the whole hold, what it does as it goes
        // (`held_cpus.rs`).
        let on_cpu = shared.held_cpus.hold(self.cpu_slot);
        let seen = shared.completed();
        // Whether this hold has swept a slice of pages (below).
        let mut swept = false;
        while shared.over_pace() {
            // Where it runs now (the OS may have moved it).
            on_cpu.running();
            let offered = crate::mark::offered(&shared.assist);
            // The mark is over and its sweep will take the heap under the
            // pace point: the next call need not wait for it, once a cycle
            // (the call's allocation is the most this lets the heap pass
            // the point by; README, "Pacing"). A sweep of a heap that a
            // long call filled with garbage took 5 - 15 ms at binary-trees
            // depth 21, the longest hold of the run. Or after a slice of
            // sweeping, however often: the call has paid for what it will
            // allocate in the sweep's work, as Go's allocations pay in
            // sweeping, and the sweep's pages run out (holds of several
            // slices in a row were the longest left at depth 16 with two
            // threads, 4 ms).
            let pass_left = self.sweep_pass.get() != seen;
            let may_pass = pass_left || swept;
            if offered.is_none() && may_pass && shared.sweep_brings_under_pace() {
                if pass_left {
                    self.sweep_pass.set(seen);
                }
                break;
            }
            // The mark has traced through, and nothing left of it is work
            // this mutator could help with (`Shared::outruns_mark_end`).
            if offered.is_none() && shared.outruns_mark_end() {
                break;
            }
            held = true;
            let Some(share) = offered else {
                // No concurrent mark to help. The cycle may be sweeping:
                // then sweep a slice of its pages (what this mutator would
                // wait for), and go on if the heap is under the pace point
                // or the rest of the sweep will take it there (above).
                // (Waiting for the sweep to end was every hold over a
                // quarter of a millisecond at binary-trees depth 16 with
                // two and three threads, up to 5 ms.)
                let t = Instant::now();
                if shared.help_sweep(seen, t + PACED_SLICE, &|| on_cpu.beat(Instant::now())) {
                    assisting += t.elapsed();
                    swept = true;
                    continue;
                }
                // Otherwise (the cycle has not begun, or every page of the
                // sweep is taken): wait for the cycle, or for a mark or a
                // sweep to help, or (as above) a sweep that frees enough.
                if shared.pace(&self.me.slot, &on_cpu, seen, may_pass) {
                    continue;
                }
                // Whatever ended the wait, this cycle's pass is used: the
                // sweep's condition may have ended it and be false again
                // by now (a cycle that completed changes `seen` anyway).
                // Not a pass that only a slice of sweeping gave.
                if pass_left {
                    self.sweep_pass.set(seen);
                }
                self.assist_debt.set(0);
                break;
            };
            let mark = shared.calls.mark_epoch();
            // `minimum`: this mutator owes nothing for what it allocated
            // during this mark, only the least a paced call pays.
            let (debt, minimum) = match owing {
                Some((m, d, minimum)) if m == mark => (d, minimum),
                _ => {
                    let owed = self.owed();
                    (owed.max(ASSIST_MIN), owed == 0)
                }
            };
            // Inside, as a `mutate` call: the mark's last pause waits for
            // the slice, and no sweep can start meanwhile. (A wait here is
            // part of this hold.) And marked inside as a call is, so that a
            // `Trace` impl that calls `collect` or a pool wait panics with
            // the message `mutate` gives, instead of waiting for a cycle
            // that waits for this slot.
            // A wait for a stop here is no GC thread's to step aside for
            // (`held_cpus.rs`).
            on_cpu.unseen();
            if let Some(waited) = shared.handshake.enter(&self.me.slot) {
                stopped += waited;
            }
            on_cpu.running();
            let slice = Instant::now();
            let (m, took) = {
                let _inside = Inside {
                    shared,
                    slot: &self.me.slot,
                    prev: INSIDE.with(|c| c.replace(self as *const Mutator)),
                    _no_waits: loam_threadpool::forbid_waits(
                        "in a mark assist (a collection's pause waits for it)",
                    ),
                };
                let end = slice + PACED_SLICE;
                // Inside (above), for the runtime whose mark
                // `share` is, with its gray queue.
                // SAFETY: as just said.
                let (m, took) =
                    unsafe { crate::mark::assist(&shared.space, &share, &shared.gray, debt, end, &|now| on_cpu.beat(now)) };
                // While still inside: the stop that begins the next mark
                // waits for this report (`Shared::saw_live`).
                shared.saw_live(m.bytes);
                (m, took)
            };
            assisting += slice.elapsed();
            if !took {
                // Nothing to take: the GC threads hold the rest of the
                // mark (or the mark is between its rounds, or has just
                // begun with all of it in their stacks and deques).
                if minimum {
                    // Only the minimum a paced call pays, nothing this
                    // mutator allocated during this mark (a debt from an
                    // earlier mark is not carried): go on. What the call
                    // allocates owes its share as it goes (`assist`), and
                    // whatever it leaves owing, the next call pays or
                    // waits for, below; so the heap passes the pace point
                    // by what two calls allocate at most, as before. (At
                    // binary-trees depth 21 the slice's wait below, at the
                    // start of a mark, was the longest hold of the run.)
                    self.assist_debt.set(0);
                    break;
                }
                // Wait a slice's length for them to hand some back, or for
                // them to mark what this mutator owes, then try again; the
                // debt is off if the cycle ends meanwhile. (Waiting for the
                // whole cycle here held both mutators of binary-trees at
                // depth 21 for 200 ms; waiting out the slice whatever the
                // GC threads did, 1.4 ms at the start of a ragged mark
                // that found the long-lived tree, the longest hold of the
                // run.)
                if shared.pace_briefly(&self.me.slot, &on_cpu, seen, PACED_SLICE, &share, debt) {
                    self.assist_debt.set(0);
                    break;
                }
                // What they marked meanwhile pays first (`mark::Share`,
                // "Background credit").
                let debt = debt - share.take_credit(debt);
                self.assist_debt.set(debt);
                if debt == 0 {
                    break;
                }
                owing = Some((mark, debt, minimum));
                continue;
            }
            let left = debt.saturating_sub(m.work);
            self.assist_debt.set(left);
            if left == 0 {
                break;
            }
            owing = Some((mark, left, minimum));
        }
        if !held {
            // The heap came under twice the goal before the first look.
            return;
        }
        let total = start.elapsed();
        self.held_parts(
            total,
            &[
                (Hold::Assist, assisting),
                (Hold::Safepoint, stopped),
                (Hold::Pacing, total.saturating_sub(assisting + stopped)),
            ],
        );
    }

    /// Before a call, with a ragged start's window open: the mark waits
    /// for the calls that began before it, and a call that begins now is a
    /// window call, whose end the mark's end must wait for as well
    /// ([`Mutation::began_in_window`]). For the runtime's one mutator, the
    /// old calls have all ended (its own was the last) and the window
    /// closes as soon as the collector has read the roots: this waits for
    /// that, for [`WINDOW_WAIT`] at most (a hold), so that a long call that
    /// begins now does not hold the mark's end. (Binary-trees at depth 21,
    /// one thread: the call that builds the long-lived tree began in the
    /// window of the mark that waited for the stretch tree's call, and the
    /// heap grew by both trees before that mark could end.) With other
    /// mutators attached it goes on. Whether it waits changes nothing but
    /// speed.
    #[cold]
    #[inline(never)]
    fn wait_out_window(&self) {
        let shared = self.shared();
        // Only as the runtime's one mutator: with others attached, the
        // wait also met the collector waking up on a busy CPU, and held
        // two and three threads of binary-trees at depth 16 for 10 - 28 ms
        // in all (against none), more than the window calls it spared.
        // Counted, not read off the mutators' list: its lock is the
        // collector's too, held while it drains the shade queues, and a
        // collector thread off its CPU with it held three threads on two
        // cores for up to 4 ms. (A count read stale only changes whether
        // this waits, which is speed, not soundness.)
        if shared.live_mutators.load(Ordering::Relaxed) > 1 || !shared.calls.now().window {
            return;
        }
        let start = Instant::now();
        // Published as a sleep that the close ends (`held_cpus.rs`): until
        // then this thread waits for the collector, whose threads must not
        // step aside for it; then the collector thread that closed the
        // window steps off this CPU if it runs on it. (This thread yields
        // it the CPU, and under EEVDF the thread that woke with credit
        // runs on: pinned to one CPU, binary-trees at depth 16 was held
        // 0.3 - 0.9 ms a time for a close that takes 0.04 ms.)
        let on_cpu = shared.held_cpus.hold(self.cpu_slot);
        on_cpu.spins_for_window(WINDOW_WAIT);
        while shared.calls.now().window && start.elapsed() < WINDOW_WAIT {
            std::thread::yield_now();
        }
        drop(on_cpu);
        self.held(Hold::Safepoint, start.elapsed());
    }

    /// Records that the collector held this mutator for `d`.
    #[cold]
    fn held(&self, why: Hold, d: Duration) {
        self.held_parts(d, &[(why, d)]);
    }

    /// Records that the collector held this mutator once, for `total`,
    /// made of `parts`; on a call's way in, adds it to the call's one hold
    /// (`EntryStall`).
    #[cold]
    fn held_parts(&self, total: Duration, parts: &[(Hold, Duration)]) {
        if self.entering.get() {
            let mut stall = self.entry_stall.get();
            stall.total += total;
            for &(why, d) in parts {
                stall.parts[why as usize] += d;
            }
            self.entry_stall.set(stall);
        } else {
            self.shared().holds.record_parts(&self.me.holds, total, parts);
        }
    }

    /// Runs `f`, which does not touch the managed heap (I/O, waiting on
    /// other threads), with the mutator blocked: the collector acts without
    /// waiting for it. Every mutator outside `mutate` is blocked; this names
    /// the state where it matters.
    ///
    /// Over loam's pages, it lends this thread's heap to the other threads
    /// while `f` runs ([`loam_heap::lend`]): the page runs the collector's
    /// sweeps send it, before and during `f`, and the pages they empty,
    /// which only this thread could otherwise take back, serve the threads
    /// `f` waits for, which take its wholly free segments, or else all its
    /// segments if they hold a megabyte free, before they map memory of
    /// their own (README, "Memory a sweep frees waits for the thread that
    /// allocated it"). Once the heap has been lent ten purge delays (at
    /// most a second, or one purge delay if that is longer), the collector
    /// drains it after each cycle and gives back to the OS what nobody
    /// takes after that long again. The heap is this thread's again when
    /// `f` returns. Inside `f`, each allocation of this thread takes the
    /// heap back for its time (a lock's turn, which may wait for a thread
    /// draining it) and each free goes to the heap's queue, as another
    /// thread's would: use it around waits, not around work. (What it
    /// saved binary-trees: `docs/perf-log.md`, "A waiting thread's heap
    /// lent to the threads that run".)
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::new();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     for i in 0..1000_u64 {
    ///         mc.alloc(i);
    ///     }
    /// });
    /// let answer = m.blocking(|| std::thread::spawn(|| 6 * 7).join().unwrap());
    /// assert_eq!(answer, 42);
    /// ```
    pub fn blocking<R>(&mut self, f: impl FnOnce() -> R) -> R {
        if self.shared().space.alloc_space().is_some() {
            return f();
        }
        loam_heap::lend(|| {
            self.shared().trim_later(loam_heap::trim());
            f()
        })
    }

    /// Runs a full collection now and waits for it (see
    /// [`Runtime::collect`](crate::Runtime::collect)).
    pub fn collect(&mut self) {
        self.shared().collect(None);
    }

    /// The runtime this mutator belongs to.
    pub fn runtime(&self) -> crate::Runtime {
        crate::Runtime {
            handle: self.handle.clone(),
        }
    }

    /// At the heap limit, before a `mutate` call: runs a full collection if
    /// the last call hit the limit, or if roots changed since the last such
    /// collection and no allocation has succeeded since.
    #[inline]
    fn collect_for_limit(&self) {
        let hit = self.limit_hit.replace(false);
        if !hit && self.limit_roots.get().is_none() {
            return;
        }
        let roots = self.shared().roots_changed.load(Ordering::Relaxed);
        if hit || self.limit_roots.get() != Some(roots) {
            // Before the collection, which waits for every call under way:
            // every call that begins after it counts its writes.
            if self.limit_roots.replace(Some(roots)).is_none() {
                self.shared().at_limit.fetch_add(1, Ordering::Relaxed);
            }
            let waiting = Instant::now();
            self.shared().collect(Some(&self.me.slot));
            self.held(Hold::Memory, waiting.elapsed());
        }
    }

    /// Takes `size` bytes of heap budget; false at the heap limit.
    #[inline]
    pub(crate) fn take_credit(&self, size: usize) -> bool {
        let c = self.credit.get();
        if c >= size {
            self.credit.set(c - size);
            return true;
        }
        self.refill(size)
    }

    #[cold]
    #[inline(never)]
    fn refill(&self, size: usize) -> bool {
        let shared = self.shared();
        // Over twice the goal the debt is settled in smaller steps.
        let paced = shared.over_pace();
        let mut chunk = size.max(if paced { PACED_CHUNK } else { CHUNK });
        let mut waited = false;
        // The in-call brake's wait so far, and whether it gave up.
        let mut braked = Duration::ZERO;
        let mut brake_spent = false;
        loop {
            // Under a limit the charge is made only if it fits (a
            // compare-and-swap): a charge made and taken back was seen by
            // another mutator's refill in between, which then failed an
            // object that fitted.
            // Without a limit, a plain add, unless the object is huge: two
            // requests near `isize::MAX` bytes at once (both to fail) must
            // not wrap the count round.
            // Under a limit, dead objects whose destructors have not run
            // count too: their blocks are not back yet (`finalize.rs`,
            // "The brake").
            let charged = match shared.config.heap_limit {
                None if chunk < 1 << 48 => Ok(shared.heap_used.fetch_add(chunk, Ordering::Relaxed)),
                // The backlog read after the heap, which the sweep takes
                // its objects off only once they are in the backlog (the
                // acquire pairs with `sweep_freed`'s release): a batch
                // moving from one to the other may count twice here,
                // never zero times.
                limit => {
                    let (limited, limit) = (limit.is_some(), limit.unwrap_or(usize::MAX));
                    shared.heap_used.fetch_update(Ordering::Relaxed, Ordering::Acquire, |u| {
                        let pending = if limited { shared.finalizer.pending() } else { 0 };
                        u.checked_add(chunk).filter(|&n| n.saturating_add(pending) <= limit)
                    })
                }
            };
            let used = match charged {
                Ok(before) => before + chunk,
                Err(_) => {
                    // Near the limit only what the object needs: a chunk
                    // of credit is a convenience, and charging one would
                    // refuse an object that fits (under a limit below a
                    // chunk, nothing ever fitted; with many mutators, the
                    // others' unspent credit counts against the limit).
                    if chunk > size {
                        chunk = size;
                        continue;
                    }
                    // Refused for dead objects whose destructors have not
                    // run: wait for the finalizer, and try again, for one
                    // patience in all for this allocation
                    // (`Finalizer::brake`; not on a GC thread or a
                    // finalizer, as `brake_for_drops`), and not while a
                    // stop waits for the call (every mutator with it):
                    // then, as for a refusal by the heap alone, on below.
                    // (A ragged start or end waiting for the call is let
                    // wait: it holds no mutator, and giving up refused
                    // 5,610 of 12,288 allocations that fitted in
                    // `tests/drops_brake.rs`.)
                    if let (Some(limit), false) = (shared.config.heap_limit, brake_spent) {
                        // The heap before the backlog, as the charge
                        // reads them.
                        let fits = |backlog: bool| {
                            let heap = shared.heap_used.load(Ordering::Acquire);
                            let pending = if backlog { shared.finalizer.pending() } else { 0 };
                            heap.saturating_add(chunk).saturating_add(pending) <= limit
                        };
                        if fits(true) {
                            // Refused for a heap or a backlog since cut.
                            continue;
                        }
                        if fits(false) && shared.finalizer.pending() != 0 && !crate::collector::on_gc_thread() {
                            let before = braked;
                            let give_up = |waited: Duration| {
                                before + waited >= crate::finalize::BRAKE_PATIENCE || shared.handshake.stop_requested()
                            };
                            let (end, waited) = shared.finalizer.brake(|| !fits(true), LIMIT_BRAKE_SLICE, give_up);
                            if let Some(waited) = waited {
                                braked += waited;
                                self.held(Hold::Drops, waited);
                            }
                            match end {
                                BrakeEnd::Enough | BrakeEnd::Drained => continue,
                                BrakeEnd::GaveUp | BrakeEnd::Stuck => brake_spent = true,
                            }
                        }
                    }
                    // A sweep under way may free enough; a pause cannot
                    // happen while we are inside `mutate`. Nor can a
                    // cycle begin; but a ragged mark that began before
                    // this call, and whose window had closed, ends and
                    // sweeps without waiting for it.
                    if !waited {
                        waited = true;
                        let waiting = Instant::now();
                        let epoch = self.call_mark.get();
                        let swept_now = shared.wait_for_sweep();
                        let ragged = if swept_now || epoch == 0 {
                            None
                        } else {
                            shared.wait_for_ragged_cycle(epoch)
                        };
                        // A wait that gave up held this thread too.
                        if swept_now || ragged.is_some() {
                            self.held(Hold::Memory, waiting.elapsed());
                        }
                        if swept_now || ragged == Some(true) {
                            continue;
                        }
                    }
                    shared.request(true);
                    self.limit_hit.set(true);
                    return false;
                }
            };
            if used >= shared.next_goal.load(Ordering::Relaxed) {
                shared.request(false);
            } else if size > loam_heap::SMALL_MAX {
                self.count_large(size);
            }
            self.credit.set(self.credit.get() + chunk - size);
            if self.limit_roots.take().is_some() {
                shared.at_limit.fetch_sub(1, Ordering::Relaxed);
            }
            let ratio = shared.assist_ratio.load(Ordering::Relaxed);
            if ratio != 0 {
                let ratio = if paced { PACED_RATIO } else { ratio as usize };
                self.assist(chunk.saturating_mul(ratio) / 1024, paced);
            }
            return true;
        }
    }

    /// Counts a large object (past the heap's largest size class), and asks
    /// for a cycle once those made since the last mark ended pass an eighth
    /// of the pace goal (4 MiB under the default minimum heap), if the last
    /// cycle found large garbage: large objects ask for cycles sooner than
    /// small ones.
    ///
    /// Why: a large object's memory is written whole when it is made (a
    /// list's or dictionary's array, a string builder's buffer), and the
    /// memory the sweep has just freed is the cheapest to write next, in
    /// the cache and resident, where a span freed cycles ago is cold.
    /// Counted with the small objects only, a program that makes and drops
    /// an 8 MB array a call (a list grown to a million numbers) had a cycle
    /// every four calls under the 32 MiB minimum heap, and each call wrote
    /// one of five arrays in turn, 40 MB, out of the cache: 2.1 to 2.5 ms a
    /// call against 0.7 to 0.8 ms for a `Vec`, which reuses one buffer.
    /// With a cycle every 4 MiB of large objects (one a call there), the
    /// array freed at one call's end is the next one's: 0.80 to 0.99 ms.
    /// Every 8 MiB gave 0.96 to 1.0 ms, every 16 MiB 1.9 to 2.0 ms
    /// (`docs/perf-log.md`, session 46).
    ///
    /// Only while the last cycle freed large objects (at least half this
    /// budget, `Shared::large_armed`): large objects that live gain nothing
    /// from a cycle. Without that condition a program that kept a thousand
    /// 200 KiB arrays, one made a call, ran 7 cycles against 5 and took
    /// 93 - 99 ms against 75 - 85 (the GC threads' marks and sweeps on the
    /// mutator's CPUs); with it, 3 - 5 cycles and 93 - 113 ms against 95 -
    /// 103 for the build without the trigger, in the same runs. A share
    /// of the goal, not a fixed size, so that a large heap (whose full
    /// cycles cost more) is not collected for every few large arrays.
    /// .NET's large object heap has an allocation budget of its own that
    /// starts collections the same way. The `GlobalAlloc` spaces' sweep
    /// does not count large objects, so there the trigger never arms.
    #[cold]
    #[inline(never)]
    fn count_large(&self, size: usize) {
        let shared = self.shared();
        let since = shared
            .large_since
            .fetch_add(size, Ordering::Relaxed)
            .saturating_add(size);
        if since >= shared.large_budget() && shared.large_armed.load(Ordering::Relaxed) {
            shared.request_for_large();
        }
    }

    /// Inside a `mutate` call, during a concurrent mark: adds `owed` bytes
    /// of marking to this mutator's debt and pays it, tracing from the
    /// mark's queues for at most [`ASSIST_SLICE`]. Debt the queues had no
    /// work for is forgiven (the GC threads are ahead); debt left when the
    /// slice ran out carries to the next chunk, up to a few slices' worth.
    /// The slice is a hold (`held.rs`, [`counts_as_hold`]): the mutator
    /// marks instead of running its own code, but never waits for the
    /// cycle to end.
    ///
    /// `paced` (the heap has reached twice its goal): the slice is
    /// [`PACED_SLICE`] and the whole debt carries, whether or not the
    /// queues had work, so that every byte allocated from here buys its
    /// share of the mark ([`PACED_RATIO`]); what a call leaves owing, its
    /// successor's pacing pays before it begins (`pace`).
    #[cold]
    #[inline(never)]
    fn assist(&self, owed: usize, paced: bool) {
        let debt = self.owed().saturating_add(owed);
        if debt < ASSIST_MIN {
            self.assist_debt.set(debt);
            return;
        }
        let shared = self.shared();
        // The look at the offer is part of the hold, and of the slice: its
        // lock's holder can lose its CPU, and a look held up that long
        // leaves the slice less time to trace (the rest carries).
        let start = Instant::now();
        let slice = if paced { PACED_SLICE } else { ASSIST_SLICE };
        // Published from the start of the hold: the look takes the offer's
        // lock, and a mutator preempted holding it held the other one,
        // asleep on the lock, as long (`held_cpus.rs`).
        let on_cpu = shared.held_cpus.hold(self.cpu_slot);
        // What the slice traced: `None` between the mark's rounds, or at
        // its end.
        let traced = crate::mark::offered(&shared.assist).map(|share| {
            // Inside a `mutate` call (allocation happens only there) of the
            // runtime whose mark `share` is, with its gray queue.
            // SAFETY: as just said.
            let (m, worked) = unsafe {
                crate::mark::assist(&shared.space, &share, &shared.gray, debt, start + slice, &|now| on_cpu.beat(now))
            };
            shared.saw_live(m.bytes);
            (m.work, worked)
        });
        let took = start.elapsed();
        drop(on_cpu);
        if counts_as_hold(traced.is_some_and(|(_, worked)| worked), took) {
            self.held(Hold::Assist, took);
        }
        self.assist_debt.set(match traced {
            // Paced debt is kept for the mark's next round, or this call's
            // successor (`pace`); a new mark starts from none (`owed`).
            None => {
                if paced {
                    debt
                } else {
                    0
                }
            }
            Some((work, _)) => {
                let left = debt.saturating_sub(work);
                if paced {
                    // Owed in full: the next chunk, or the next call's
                    // pacing, pays it (or waits for the cycle, if the GC
                    // threads hold the mark's rest).
                    left
                } else if took < slice {
                    0
                } else {
                    left.min(4 * CHUNK)
                }
            }
        });
    }

    /// The marking debt this mutator owes the mark under way: none if it
    /// was run up in an earlier mark. (A debt larger than what the mark has
    /// left is paid by tracing to the end of the mark's work, then waiting
    /// for the cycle: `pace`.)
    fn owed(&self) -> usize {
        let mark = self.shared().calls.mark_epoch();
        if self.assist_mark.replace(mark) != mark {
            self.assist_debt.set(0);
        }
        self.assist_debt.get()
    }

    /// The OS had no memory for a `size`-byte object or array
    /// ([`out_of_memory`]): its budget and the rest of the credit go back
    /// in one update, and with `collect_next` the next call collects first
    /// (not for a thread whose heap is gone, which no cycle helps).
    #[cold]
    pub(crate) fn refused_by_os(&self, size: usize, collect_next: bool) {
        let credit = self.credit.replace(0) + size;
        self.shared().heap_used.fetch_sub(credit, Ordering::Relaxed);
        if collect_next {
            self.limit_hit.set(true);
        }
    }

    pub(crate) fn give_back(&self, size: usize) {
        let credit = self.credit.get() + size;
        // A huge request that failed took a chunk of its own size: give
        // the excess back to the runtime, or `heap_used` would stay high
        // (every call pacing, every cycle full) until the mutator drops.
        if credit > CHUNK {
            self.shared()
                .heap_used
                .fetch_sub(credit - CHUNK, Ordering::Relaxed);
            self.credit.set(CHUNK);
        } else {
            self.credit.set(credit);
        }
    }
}

impl Drop for Mutator {
    fn drop(&mut self) {
        let shared = &self.handle.shared;
        // As `Handle::drop`: in a forked child, leak (`forked.rs`).
        if crate::forked::since(shared.born) {
            return;
        }
        shared
            .heap_used
            .fetch_sub(self.credit.replace(0), Ordering::Relaxed);
        shared.holds.detach(&self.me.holds);
        if self.limit_roots.take().is_some() {
            shared.at_limit.fetch_sub(1, Ordering::Relaxed);
        }
        self.me.detached.store(true, Ordering::Release);
        shared.live_mutators.fetch_sub(1, Ordering::Relaxed);
        shared.held_cpus.release(self.cpu_slot);
        let id = shared.id;
        with_attached(|a| a.retain(|&x| x != id));
    }
}

/// An allocation that failed, holding the value that was to be allocated;
/// [`kind`](AllocError::kind) says why: most often the heap limit (the
/// allocation did not fit even after waiting for the sweep under way),
/// else the OS's refusal, an array larger than any allocation can hold, or
/// a thread whose heap is gone.
///
/// Return from `mutate`: the next `mutate` call on this mutator first runs a
/// full collection, so a retry there succeeds if dropping roots made room.
/// (Not after a capacity overflow, which no collection helps.)
///
/// # Examples
/// ```
/// use loam_runtime::{AllocErrorKind, Runtime};
///
/// let rt = Runtime::builder().min_heap(512 << 10).heap_limit(1 << 20).gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let e = mc.try_alloc_from_iter(std::iter::repeat(0_u64).take(1 << 18)).unwrap_err();
///     assert_eq!(e.kind(), AllocErrorKind::HeapLimit { limit: 1 << 20 });
///     assert!(e.size() >= 2 << 20, "the array's bytes, as charged");
///     let e = mc.try_alloc_from_iter(std::iter::repeat(0_u64).take(usize::MAX / 4)).unwrap_err();
///     assert_eq!(e.kind(), AllocErrorKind::CapacityOverflow);
/// });
/// ```
pub struct AllocError<T> {
    value: T,
    size: usize,
    kind: AllocErrorKind,
}

/// Why an allocation failed ([`AllocError::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllocErrorKind {
    /// The runtime's heap limit (`RuntimeBuilder::heap_limit`): the object
    /// did not fit beside what was live after the sweep under way. A
    /// collection after the call, with fewer roots, may make room.
    HeapLimit {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The OS had no memory for it (or no address space; a runtime with
    /// no heap limit that asks for more than it can count gets this too).
    OutOfMemory,
    /// An array of more elements than fit in an allocation, past
    /// `isize::MAX` bytes (`Vec::try_reserve`'s capacity overflow), or
    /// more than a collection can index
    /// ([`AllocError::capacity_overflow`]): no collection helps.
    CapacityOverflow,
    /// The calling thread's heap is gone: an allocation from a
    /// thread-local destructor that ran after loam's heap's own.
    ThreadExited,
}

impl<T> AllocError<T> {
    pub(crate) fn new(value: T, size: usize, kind: AllocErrorKind) -> Self {
        AllocError { value, size, kind }
    }

    /// A capacity overflow holding `value`, for a managed collection whose
    /// own limit a request passes (an index of 32 bits, say) before any
    /// array is asked for: its `try_` methods report it as the runtime's
    /// arrays report theirs. Its [`size`](Self::size) is `usize::MAX`.
    ///
    /// # Examples
    /// ```
    /// use loam_runtime::{AllocError, AllocErrorKind};
    ///
    /// let e = AllocError::capacity_overflow(7_u32);
    /// assert_eq!(e.kind(), AllocErrorKind::CapacityOverflow);
    /// assert_eq!(e.into_inner(), 7);
    /// ```
    pub fn capacity_overflow(value: T) -> Self {
        AllocError::new(value, usize::MAX, AllocErrorKind::CapacityOverflow)
    }

    /// The same error holding `f(value)` (a collection's `try_` method
    /// turns the error of the array it failed to allocate into one holding
    /// the caller's value).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> AllocError<U> {
        AllocError {
            value: f(self.value),
            size: self.size,
            kind: self.kind,
        }
    }

    /// Why the allocation failed.
    pub fn kind(&self) -> AllocErrorKind {
        self.kind
    }

    /// The bytes the allocation asked for, as the heap accounts them (the
    /// object's block, header included; past `isize::MAX` for a capacity
    /// overflow).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The value that was not allocated.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T> fmt::Debug for AllocError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllocError")
            .field("kind", &self.kind)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for AllocError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            AllocErrorKind::CapacityOverflow => write!(
                f,
                "capacity overflow: a managed object larger than isize::MAX bytes, \
                 or more than its collection can index"
            ),
            AllocErrorKind::ThreadExited => write!(
                f,
                "a {}-byte managed object allocated on an exiting thread after \
                 loam's heap let it go (in a thread-local destructor that ran \
                 after the heap's): allocate before the thread exits",
                self.size
            ),
            AllocErrorKind::OutOfMemory => write!(
                f,
                "out of memory allocating a {}-byte managed object",
                self.size
            ),
            AllocErrorKind::HeapLimit { limit } => write!(
                f,
                "managed heap limit of {limit} bytes reached allocating a {}-byte object",
                self.size
            ),
        }
    }
}

impl<T> std::error::Error for AllocError<T> {}

/// The context of one [`Mutator::mutate`] call: allocates and roots objects
/// branded `'gc`. Only ever seen as `&Mutation<'gc>`; it cannot leave the
/// call or go to another thread.
pub struct Mutation<'gc> {
    /// The mutator running this call; it outlives the call.
    mutator: *const Mutator,
    /// The epoch of the concurrent mark under way as this call began (0:
    /// none). The call keeps it to its end, whatever the collector does
    /// meanwhile (`barrier.rs`).
    pub(crate) marking: u64,
    /// The call began in a ragged start's window: calls that began before
    /// the mark may still run unshaded beside it, so it shades everything
    /// it hands out of its own stack, not only what it overwrites
    /// (`barrier.rs`, "Ragged cycles"). Constant for the call.
    pub(crate) window: bool,
    /// The call's barriers open shading brackets (`shading`): a mark is
    /// under way and may be ragged, whose end waits for brackets, not for
    /// calls. (A stopped end waits for every call, and a ragged end's
    /// first wait for every call of its start's window, which is listed
    /// (`Handshake::confirm_window`) and whose shades are therefore all
    /// done before the first look: no bracket needed. A bracket's opening
    /// was a locked increment and a sequentially consistent fence, which
    /// made the shades of fresh objects in window calls a tenth of
    /// binary-trees' time at three threads; it is a store and a compiler
    /// fence where `membarrier` is there, `Slot::begin_shading`.)
    brackets: bool,
    /// The remember epoch as this call began (`u64::MAX` without
    /// generations): a `GcLog` whose `logged` equals it needs no record.
    /// Constant for the call, like `marking`.
    pub(crate) remember: u64,
    /// The generational barrier marks and remembers what it stores: the
    /// runtime has generations, and no full cycle's phase 0 had begun as
    /// the call began (`calls::CLEARING`). Constant for the call.
    pub(crate) remembers: bool,
    /// A mutator was at the heap limit as this call began: the call's
    /// writes count as memory perhaps freed (`note_write`).
    pub(crate) at_limit: bool,
    /// Invariant in `'gc`, and `!Sync` so that scoped threads cannot
    /// allocate through it.
    _brand: PhantomData<Cell<&'gc ()>>,
}

impl fmt::Debug for Mutation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutation").finish_non_exhaustive()
    }
}

impl<'gc> Mutation<'gc> {
    pub(crate) fn shared(&self) -> &Shared {
        self.mutator().shared()
    }

    /// `gc::WINDOW_MADE` in a window call, else 0: or-ed into the header
    /// of every object the call makes.
    #[inline(always)]
    pub(crate) fn window_made(&self) -> usize {
        usize::from(self.window) * crate::gc::WINDOW_MADE
    }

    /// Allocates `value` in the managed heap.
    ///
    /// # Panics
    /// At the heap limit (see [`try_alloc`](Self::try_alloc)) or when the OS
    /// has no memory left.
    ///
    /// # Examples
    /// ```
    /// use loam_runtime::{Gc, GcCell, Trace};
    ///
    /// #[derive(Trace)]
    /// struct Node<'gc> {
    ///     value: u64,
    ///     next: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
    /// }
    ///
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let tail = mc.alloc(Node { value: 2, next: GcCell::new(None) });
    ///     let head = mc.alloc(Node { value: 1, next: GcCell::new(Some(tail)) });
    ///     assert_eq!(head.next.get().map(|n| n.value), Some(2));
    /// });
    /// ```
    #[inline(always)]
    pub fn alloc<T: Trace + 'gc>(&self, value: T) -> Gc<'gc, T> {
        match self.try_alloc(value) {
            Ok(gc) => gc,
            Err(e) => alloc_failed(e),
        }
    }

    /// Allocates `value`, or gives it back in `Err` when the heap is at its
    /// limit or the OS has no memory. At the limit it first waits for a
    /// sweep under way, and for a ragged mark that began before this call
    /// to end and sweep; a mark that stops the world cannot be waited for
    /// (its last pause waits for this call to return), so then it fails at
    /// once, even if the cycle under way would have freed enough.
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).heap_limit(1 << 20).build();
    /// let mut m = rt.attach();
    /// let err = m.mutate(|mc| {
    ///     let mut kept = Vec::new(); // alive until this call returns
    ///     loop {
    ///         match mc.try_alloc([7_u64; 8192]) {
    ///             Ok(block) => kept.push(block),
    ///             Err(e) => break e.to_string(),
    ///         }
    ///     }
    /// });
    /// assert!(err.contains("limit"), "{err}");
    /// // Nothing was rooted: the next call collects first, and has room.
    /// assert_eq!(m.mutate(|mc| mc.alloc([1_u64; 8192])[0]), 1);
    /// ```
    #[inline(always)]
    pub fn try_alloc<T: Trace + 'gc>(&self, value: T) -> Result<Gc<'gc, T>, AllocError<T>> {
        let m = self.mutator();
        if let Some(space) = m.alloc_space() {
            return self.try_alloc_in(space, value);
        }
        // Blocks of 16 bytes or more: the sweep returns them in page runs.
        // An object that fits a size class (the common case) has its class
        // found at compile time, and the heap's fast path inlined here.
        let (bytes, align, class) = const {
            let layout = Layout::new::<GcBox<T>>();
            let bytes = if layout.size() < 16 { 16 } else { layout.size() };
            (bytes, layout.align(), loam_heap::ObjectClass::of(bytes, layout.align()))
        };
        // Tells the sweep to read this page's headers, for drop glue.
        let flags = crate::array::drop_flags::<T>();
        if align > MAX_PAGE_ALIGN {
            over_aligned(align);
        }
        // Heap accounting is in blocks, so the sweep can count what it frees
        // without reading headers.
        let size = match class {
            Some(class) => class.size(),
            None => loam_heap::good_size(bytes, align),
        };
        if !m.take_credit(size) {
            return Err(over_limit(m, value, size));
        }
        // A class's block, the common case, with its bit not counted as out
        // (it is set below, before any code of the caller's can lend the
        // thread's heap); a span's, counted.
        let (p, bit) = match class {
            // SAFETY: set with `set_uncounted` below, and nothing between
            // here and there lends this thread's heap: no code of the
            // caller's runs in between.
            Some(class) => unsafe { loam_heap::alloc_object_in_unlendable(class, flags, m.shared().id) },
            None => loam_heap::alloc_object(bytes, align, flags, m.shared().id),
        };
        let Some(bit) = bit else {
            return Err(out_of_memory(m, value, size, true));
        };
        let shared = m.shared();
        // SAFETY: `p` is a fresh block of at least `size` bytes, aligned for
        // `GcBox<T>`, ours alone.
        unsafe {
            p.cast::<GcBox<T>>()
                .write(GcBox::new(GcBox::<T>::header(shared.id) | self.window_made(), value))
        };
        // The header is written before the (release) allocated bit. White,
        // even during a concurrent mark: a sweep works from its copy of the
        // bits as of its stop (the allocation sealed the page first, which
        // keeps this object out of it), so what is allocated after is not
        // its business.
        // (Black allocation would bound a mark by the heap it began with,
        // but counts all that a long mark sees allocated as old: at
        // binary-trees depth 21 every cycle after the first concurrent one
        // turned full, 334 cycles against 145, 0.96x Box against 0.73x.
        // How the mark ends however fast mutators shade: `cycle.rs`.)
        // Minor cycles take a marked object for old: a fresh block must not
        // carry a mark (freed blocks were unmarked when freed).
        check_fresh(p);
        if class.is_some() {
            bit.set_uncounted();
        } else {
            bit.set();
        }
        // A live `GcBox<T>`, live for `'gc`: no cycle frees what a `mutate`
        // call holds before the call returns (`barrier.rs`).
        // SAFETY: as just said.
        let gc = unsafe { Gc::from_addr(p as usize) };
        Ok(gc)
    }

    /// [`try_alloc`](Self::try_alloc) in a `GlobalAlloc` space.
    #[inline(never)]
    fn try_alloc_in<T: Trace + 'gc>(
        &self,
        space: &AllocSpace,
        value: T,
    ) -> Result<Gc<'gc, T>, AllocError<T>> {
        let m = self.mutator();
        let layout = Layout::new::<GcBox<T>>();
        let size = AllocSpace::charge(layout.size(), layout.align());
        if !m.take_credit(size) {
            return Err(over_limit(m, value, size));
        }
        let p = space.alloc(&m.space_local, layout.size(), layout.align());
        if p.is_null() {
            return Err(out_of_memory(m, value, size, false));
        }
        // SAFETY: `p` is a fresh allocation of `GcBox<T>`'s layout, ours
        // alone; registered, but swept only from a pause's snapshot, which
        // cannot be taken before this `mutate` call returns.
        unsafe {
            p.cast::<GcBox<T>>()
                .write(GcBox::new(GcBox::<T>::header(m.shared().id), value))
        };
        // SAFETY: a live `GcBox<T>`, live for `'gc` (as in `try_alloc`).
        Ok(unsafe { Gc::from_addr(p as usize) })
    }

    /// Roots `gc` in this mutator's root table: the returned [`Root`] keeps
    /// the object alive until it is dropped, across any number of `mutate`
    /// calls. `R` names the type with its brand abstracted, as
    /// `Rootable!['gc => Node<'gc>]`.
    pub fn root<R>(&self, gc: Gc<'gc, <R as Rootable<'gc>>::Root>) -> Root<R>
    where
        R: ?Sized + for<'a> Rootable<'a>,
        <R as Rootable<'gc>>::Root: Managed,
    {
        self.barrier_root(gc.addr());
        Root::new(self.mutator(), gc.addr())
    }

    /// Roots `gc` in the runtime's global table: the returned
    /// [`GlobalRoot`] is `Send + Sync`, so any thread attached to this
    /// runtime can reach the object through it.
    pub fn global_root<R>(&self, gc: Gc<'gc, <R as Rootable<'gc>>::Root>) -> GlobalRoot<R>
    where
        R: ?Sized + for<'a> Rootable<'a>,
        <R as Rootable<'gc>>::Root: Managed,
    {
        self.barrier_root(gc.addr());
        GlobalRoot::new(self.mutator().handle.clone(), gc.addr())
    }

    /// Whether a concurrent mark was under way as this `mutate` call began
    /// (and so throughout it): barrier cells then shade what they overwrite
    /// and store, and weak upgrades their target, so stores cost more.
    #[inline]
    pub fn is_marking(&self) -> bool {
        self.marking != 0
    }

    /// Whether this call began in a ragged mark's handshake window
    /// ([`RuntimeBuilder::ragged_handshakes`]): while calls that began
    /// before the mark still ran. Such a call shades everything it stores,
    /// and the mark cannot end before it returns. A call that began once
    /// the window closed holds no mark up: a ragged mark ends while it
    /// runs (a stopped one waits for every call).
    ///
    /// [`RuntimeBuilder::ragged_handshakes`]: crate::RuntimeBuilder::ragged_handshakes
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::builder().ragged_handshakes(true).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     // No mark was under way as this call began.
    ///     assert!(!mc.began_in_window());
    /// });
    /// ```
    #[inline]
    pub fn began_in_window(&self) -> bool {
        self.window
    }

    /// Whether the collector is waiting for the mutators to stop: a long
    /// `mutate` call may check it and return early to let the pause happen.
    #[inline]
    pub fn collection_pending(&self) -> bool {
        self.shared().handshake.stop_requested()
    }

    pub(crate) fn mutator(&self) -> &Mutator {
        // SAFETY: a `Mutation` exists only inside `Mutator::mutate`, which
        // borrows the mutator for the whole call.
        unsafe { &*self.mutator }
    }

    /// Opens a shading bracket for as long as the guard lives, if this
    /// call shades for a mark that may be ragged (`brackets`): a barrier opens it before it reads the
    /// value it overwrites, and it closes once what it shaded is in the
    /// mutator's shade queue. A ragged mark's end waits for open brackets, not for the
    /// calls under way (`barrier.rs`, "Ragged cycles", 3). Nested
    /// brackets (a barrier whose shade is bracketed too) touch the slot
    /// once.
    #[inline]
    pub(crate) fn shading(&self) -> Shading<'_> {
        if !self.brackets {
            return Shading { mutator: None };
        }
        let m = self.mutator();
        let depth = m.shading_depth.get();
        if depth == 0 {
            m.me.slot.begin_shading();
        }
        m.shading_depth.set(depth + 1);
        Shading { mutator: Some(m) }
    }
}

/// An open shading bracket ([`Mutation::shading`]); closes on drop, a
/// panic of a `Trace` impl included.
pub(crate) struct Shading<'a> {
    mutator: Option<&'a Mutator>,
}

impl Drop for Shading<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(m) = self.mutator {
            let depth = m.shading_depth.get() - 1;
            m.shading_depth.set(depth);
            if depth == 0 {
                m.me.slot.end_shading();
            }
        }
    }
}

/// Checks (debug builds) that the fresh block `p` carries neither a mark nor
/// an allocated bit.
#[inline(always)]
pub(crate) fn check_fresh(p: *mut u8) {
    #[cfg(debug_assertions)]
    {
        // SAFETY: `p` is a block of a live page of ours.
        let stale = unsafe { crate::space::Space::Pages.is_marked(p as usize) };
        assert!(!stale, "loam: a fresh block carries a stale mark");
        // SAFETY: as above.
        let page = unsafe { loam_heap::PageRef::of(p) };
        assert!(
            !page.is_allocated(page.block_index(p)),
            "loam: a fresh block carries a stale allocated bit"
        );
    }
    #[cfg(not(debug_assertions))]
    let _ = p;
}

/// The error for a `size`-byte object past the heap limit.
#[cold]
#[inline(never)]
fn over_limit<T>(m: &Mutator, value: T, size: usize) -> AllocError<T> {
    AllocError::new(value, size, limit_kind(m))
}

/// Why a charge that did not fit was refused: the heap limit, or, with no
/// limit, a count of bytes past what the runtime can count (memory no OS
/// gives).
#[cold]
pub(crate) fn limit_kind(m: &Mutator) -> AllocErrorKind {
    match m.shared().config.heap_limit {
        Some(limit) => AllocErrorKind::HeapLimit { limit },
        None => AllocErrorKind::OutOfMemory,
    }
}

/// The largest alignment loam's pages serve a managed object (the heap
/// serves larger ones to `GlobalAlloc` callers only).
pub(crate) const MAX_PAGE_ALIGN: usize = loam_heap::SEGMENT_SIZE / 2;

/// A managed object aligned past [`MAX_PAGE_ALIGN`]: refused with its own
/// message (the heap's null read as "out of memory").
#[cold]
#[inline(never)]
pub(crate) fn over_aligned(align: usize) -> ! {
    panic!(
        "loam: a managed object aligned to {align} bytes: loam's pages serve \
         alignments up to {MAX_PAGE_ALIGN} (a runtime over a GlobalAlloc, \
         RuntimeBuilder::global_alloc, serves more)"
    )
}

/// The error for a `size`-byte object the OS had no memory for; gives back
/// the budget taken for it, and has the mutator's next call run a full
/// cycle first, as the heap limit does (`collect_for_limit`): the garbage
/// a cycle frees is memory the OS need not give again. (Without it, a
/// program with no heap limit met the OS's refusal with no cycle to come,
/// however much of its heap was garbage.) The mutator's whole credit goes
/// back too, so that its next allocation refills, which ends the limit's
/// state once it succeeds (`limit_roots`): on credit, every later call
/// after a root change collected again until the credit ran out.
#[cold]
#[inline(never)]
fn out_of_memory<T>(m: &Mutator, value: T, size: usize, pages: bool) -> AllocError<T> {
    AllocError::new(value, size, refused_kind(m, size, pages))
}

/// [`out_of_memory`]'s accounting, for any allocation of `size` bytes the
/// heap refused (over loam's `pages`, or a `GlobalAlloc` space), and its
/// kind: over loam's pages a thread whose heap is gone gets null too.
#[cold]
pub(crate) fn refused_kind(m: &Mutator, size: usize, pages: bool) -> AllocErrorKind {
    let thread_exited = pages && loam_heap::thread_heap_exited();
    m.refused_by_os(size, !thread_exited);
    if thread_exited {
        AllocErrorKind::ThreadExited
    } else {
        AllocErrorKind::OutOfMemory
    }
}

#[cold]
#[inline(never)]
pub(crate) fn alloc_failed<T>(e: AllocError<T>) -> ! {
    panic!("loam: {e}; use Mutation::try_alloc to handle this")
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{EntryStall, Hold, ASSIST_MIN, GONE_BEFORE_CYCLE};
    use std::time::Duration;

    /// The holds of a call's way in are one hold, split by cause only in
    /// the totals; a hold after it is a hold of its own.
    #[test]
    fn the_holds_of_a_calls_way_in_are_one() {
        let rt = crate::Runtime::builder().gc_threads(1).ignore_env().build();
        let m = rt.attach();
        let ms = Duration::from_millis;
        {
            let _stall = EntryStall::begin(&m);
            m.held(Hold::Memory, ms(3));
            m.held_parts(ms(5), &[(Hold::Assist, ms(2)), (Hold::Pacing, ms(3))]);
            m.held(Hold::Safepoint, ms(1));
        }
        m.held(Hold::Safepoint, ms(4));
        let p = m.pauses();
        assert_eq!(p.count(), 2, "one hold for the way in, one after");
        assert!(p.max() >= ms(9) && p.max() < ms(10), "{:?}", p.max());
        let s = rt.stats();
        assert_eq!(s.held_for_memory, ms(3));
        assert_eq!(s.held_assisting, ms(2));
        assert_eq!(s.held_by_pacing, ms(3));
        assert_eq!(s.held_at_safepoint, ms(5));
    }

    /// Returns once thread `tid` of this process sleeps (`S` in its
    /// `/proc` stat): a test's lock holder waits for the mutator to block
    /// on the lock before it lets go.
    #[cfg(target_os = "linux")]
    fn until_asleep(tid: u32) {
        let stat = format!("/proc/self/task/{tid}/stat");
        while !std::fs::read_to_string(&stat)
            .unwrap()
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('S'))
        {
            std::thread::yield_now();
        }
    }

    /// A look for assist work that waited is a hold, though it found no
    /// mark to help: here it waits on the offer's lock, which the test
    /// holds until the mutator's thread sleeps on it, and 2 ms more.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_assist_held_up_without_work_is_a_hold() {
        let rt = crate::Runtime::builder().gc_threads(1).ignore_env().build();
        let m = rt.attach();
        let ms = Duration::from_millis;
        let before = m.pauses().count();
        let handle = rt.handle.clone();
        let tid = crate::thread_state::current();
        let (ready, go) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let offer = handle.shared.assist.lock();
            ready.send(()).unwrap();
            until_asleep(tid);
            std::thread::sleep(ms(2));
            drop(offer);
        });
        go.recv().unwrap();
        m.assist(ASSIST_MIN, false);
        holder.join().unwrap();
        assert_eq!(m.pauses().count(), before + 1, "the wait is one hold");
        assert!(rt.stats().held_assisting >= ms(2), "{:?}", rt.stats().held_assisting);
        // Unhindered, a look that finds no mark is no hold (one of a
        // hundred at least: the OS may preempt any one of them).
        let unhindered = (0..100).any(|_| {
            let held = m.pauses().count();
            m.assist(ASSIST_MIN, false);
            m.pauses().count() == held
        });
        assert!(unhindered, "every look without work was a hold");
    }

    /// A root made while its table is locked (the collector locks it while
    /// it copies it) records the wait as a hold. The table is held here by
    /// the test until the mutator's thread sleeps on it. (A root's `get`
    /// takes no lock.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_wait_for_a_root_table_is_a_hold() {
        let rt = crate::Runtime::builder().gc_threads(1).ignore_env().build();
        let mut m = rt.attach();
        let root = m.mutate(|mc| crate::Root::of(mc, mc.alloc(7_u64)));
        let before = m.pauses().count();
        let me = m.me.clone();
        let tid = crate::thread_state::current();
        let (ready, go) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let table = me.roots.alloc.lock();
            ready.send(()).unwrap();
            // Until the mutator's thread sleeps (on the table's lock).
            until_asleep(tid);
            drop(table);
        });
        go.recv().unwrap();
        let value = m.mutate(|mc| *crate::Root::of(mc, mc.alloc(*root.get(mc) + 1)).get(mc));
        holder.join().unwrap();
        assert_eq!(value, 8);
        assert_eq!(m.pauses().count(), before + 1, "the wait is one hold");
        assert!(rt.stats().held_at_safepoint > Duration::ZERO);
    }

    /// Threads that attach and go without allocating leave the runtime's
    /// list of mutators bounded: past `GONE_BEFORE_CYCLE` gone ones, an
    /// attach asks for the cycle that forgets them. Before, nothing
    /// started a cycle, and the list held every mutator ever attached.
    #[test]
    fn mutators_that_come_and_go_without_allocating_do_not_pile_up() {
        let rt = crate::Runtime::builder().gc_threads(1).ignore_env().build();
        let threads = 40 * GONE_BEFORE_CYCLE;
        for _ in 0..threads {
            let rt = rt.clone();
            std::thread::spawn(move || drop(rt.attach())).join().unwrap();
        }
        // The cycle the last attach may have asked for. What is left is
        // the gone ones since the last cycle's start, about the threshold,
        // or more if the coordinator lost its CPU while threads went on:
        // half the threads is far above that, and far below all of them.
        rt.wait_for_cycle();
        let listed = rt.handle.shared.mutators.lock().len();
        assert!(rt.stats().cycles > 0, "no cycle ran");
        assert!(
            listed <= threads / 2,
            "{listed} mutators listed after {threads} came and went"
        );
    }

    /// A thread's root counts, split between the one-runtime slot and the
    /// list (roots of a second runtime, then of the first again once the
    /// slot freed up): each runtime counts as rooted exactly while some of
    /// its roots are alive.
    #[test]
    fn root_counts_across_the_slot_and_the_list() {
        use super::{count_root, holds_roots_of};
        std::thread::spawn(|| {
            let (a, b) = (7, 9);
            count_root(a, true); // the slot
            count_root(b, true); // the list
            assert!(holds_roots_of(a) && holds_roots_of(b));
            count_root(a, false); // the slot empties
            assert!(!holds_roots_of(a) && holds_roots_of(b));
            count_root(b, true); // the slot, while the list holds one too
            count_root(b, false); // from the slot
            assert!(holds_roots_of(b));
            count_root(b, false); // from the list
            assert!(!holds_roots_of(a) && !holds_roots_of(b));
        })
        .join()
        .unwrap();
    }
}
