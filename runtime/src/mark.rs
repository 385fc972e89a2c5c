//! Parallel marking on the GC threads, and verify mode's single-threaded
//! re-mark.
//!
//! The calling thread marks alone first, and hands what is left to the GC
//! threads only past a budget (a minor cycle's mark is often tiny), and
//! not in a pause whose deadline is near (waking them would outlast it).
//! Each GC thread that traces (all of them with the world stopped, a
//! quarter while the mutators run: `Limits::threads`) works from a stack
//! of its own ([`MarkStack`]), shares part of it on its LIFO deque
//! (crossbeam-deque) whenever that is empty, and steals from the roots'
//! injector and from the others' deques when it runs dry. The stacks and
//! deques are the mark stack: no recursion, so a ten-million-node list
//! marks in constant native stack. An object is pushed only by the thread
//! whose `fetch_or` set its mark bit, so each object is traced once.
//!
//! Termination: a thread that finds no work leaves the `active` count and
//! then watches the queues (and the remembered objects not yet taken, which
//! the threads take one at a time); it rejoins if any has work, and stops
//! once `active` is zero. Work is only ever pushed by an active thread, which
//! checks the queues again after it goes idle, so when `active` reads zero
//! every queue is empty for good. (In a concurrent mark the mutators'
//! barriers shade too, into their own shade queues, which are not among
//! these: the collector hands what they hold to later marks, with the
//! runtime's `gray` queue, `Shared::drain_shaded` and `cycle.rs`.)
//!
//! A mark may be given a deadline (the first pause's budget): past it,
//! every thread stops and hands back what its stack and deque still hold,
//! gray objects the concurrent phase goes on from.
//!
//! # Long arrays
//! A deadline, an assist's slice and a GC thread's look at its stop flag
//! are checked between objects, so one object traced whole is a step the
//! mark cannot cut: a rooted array of four million `Gc`s made a stopped
//! cycle's first pause 87 ms long and an assist hold its mutator for 25
//! ms, whatever the budgets said. An array of more than two chunks
//! ([`CHUNK_BYTES`] of elements each) is traced a chunk at a time, as Go
//! traces its oblets: a queue entry is an object's address, or an array's
//! address with a chunk number in its top bits ([`Entry`]). Chunk 0 is the
//! entry the mark bit queued, as for any object; it queues chunks 1 to 64,
//! chunk 64 the next 64, and so on ([`CHUNK_FANOUT`]), onto the tracing
//! thread's stack, whose sharing puts them where any thread can steal
//! them. Each chunk counts its elements' bytes (the first the header's
//! too) and the first counts the object. A chunk a writer's lock made the
//! tracer defer is traced again alone ([`AGAIN`]). An object whose type
//! traces in parts (`Trace::TRACE_IN_PARTS`: the collections, whose
//! elements lie in arrays that trace nothing themselves) is cut the same
//! way: part 0 is the entry its mark bit queued, and the object says how
//! many parts it has as each queuing part runs (`Trace`, rule 6). An entry is never more than a part of the gray set: chunks
//! are traced, left over and handed back like objects, within one mark,
//! and only [`scan`] and the remembered objects' take read them. Tracing
//! a marked array later, a chunk at a time, is what the snapshot barrier
//! allows of any gray object: what a mutator overwrites meanwhile was
//! shaded.
//!
//! Marking with the mutators running reads objects they may be using. That
//! is sound because an object changes after its allocation only through the
//! barrier cells, whose `Trace` reads them atomically (`GcCell`) or under
//! their lock (`GcLock`); every other field is immutable once the object is
//! published, and the markers reach a new object only through a cell or a
//! root table, both of which publish with release ordering.

use crate::gc::{array_len, header_of, is_freed, TypeDesc};
use crate::mark_stack::MarkStack;
use crate::space::Space;
use crate::trace::Tracer;
use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use loam_threadpool::ThreadPool;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Shades the object at `addr` for a concurrent mark: marks it and, if this
/// call set the mark, queues it in `gray` for the markers to trace (weak
/// upgrades, which have no `Mutation`; the barriers use [`shade_to`]).
///
/// # Safety
/// As [`Space::mark`].
#[inline]
pub(crate) unsafe fn shade(space: &Space, gray: &Injector<usize>, addr: usize) {
    // SAFETY: as the caller's.
    if unsafe { space.mark(addr) } {
        gray.push(addr);
    }
}

/// [`shade`] for a mutator's barrier: queues the object on the mutator's
/// own shade queue (`Mutator::shade_queue`), which the collector drains
/// with `gray` ([`Shared::drain_shaded`](crate::runtime::Shared::drain_shaded)).
/// A push there is a store and a release store on lines the mutator
/// alone writes; a push onto `gray`, shared by every mutator and stolen
/// from by the collector, took 27 – 29% of the mutators' time in the GC
/// speed tester's ragged cycles (`docs/handshakes.md`, the census).
///
/// # Safety
/// As [`Space::mark`].
#[inline]
pub(crate) unsafe fn shade_to(space: &Space, queue: &Worker<usize>, addr: usize) {
    // SAFETY: as the caller's.
    if unsafe { space.mark(addr) } {
        queue.push(addr);
    }
}

/// Scans (an object, or a chunk of a long array) the calling thread
/// traces alone before [`parallel`] wakes the GC threads, in a pause
/// whose deadline is not within [`WAKE_TIME`].
const SERIAL_BUDGET: usize = 4096;

/// How long waking the GC threads for a round may take: a pause with less
/// time than this left before its deadline traces on alone instead.
const WAKE_TIME: std::time::Duration = std::time::Duration::from_millis(1);

/// The same, in a concurrent mark's round. A round on the GC threads
/// (`ThreadPool::broadcast`) ends only once every one of them has run,
/// and with the mutators holding the CPUs a woken GC thread waits for a
/// scheduler slice: on the 2-core VM with two mutators, a ragged minor
/// mark's rounds took 5 – 9 ms each whatever they traced (218 objects in
/// 8.7 ms), the marks 13 – 30 ms, and the heap passed its pace point
/// meanwhile (the GC speed tester's workers were held 440 – 630 ms of a
/// 3 s run, all of it pacing). The coordinator now traces a round alone
/// for up to 64 Ki scans or [`CONCURRENT_SERIAL_TIME`], whichever comes
/// first, and only what is left goes to the GC threads; not while the
/// heap is at the pace point, when the mutators pay by assisting. Speed tester,
/// ragged: held 0.3 – 3.5 ms in all, 23,100 – 24,100 ops/s against
/// 16,800 – 18,000 (`docs/perf-log.md`, session 18).
const CONCURRENT_SERIAL_BUDGET: usize = 64 << 10;

/// How long the coordinator traces a concurrent round alone at most: the
/// round is offered to assists only once it goes to the GC threads, and a
/// paced mutator waits until then (a mark of objects slow to trace held
/// one for the whole mark, `tests/pacing.rs`). Checked every 64 units of
/// work ([`Looks`]).
const CONCURRENT_SERIAL_TIME: std::time::Duration = std::time::Duration::from_millis(1);

/// What marking found.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Marked {
    /// Bytes of the objects marked: live data.
    pub(crate) bytes: usize,
    pub(crate) objects: u64,
    /// The work done, in bytes: `bytes`, and a word an edge for the parts
    /// of objects traced in parts past their first (which mark no object
    /// of their own: the elements' array was counted as the object it
    /// is). What pays an assist's debt and earns the GC threads' credit:
    /// by `bytes` alone, an assist that traced parts paid nothing and ran
    /// to its slice's end again and again.
    pub(crate) work: usize,
}

impl Marked {
    /// Adds what another part of the same mark found.
    pub(crate) fn add(&mut self, other: Marked) {
        self.bytes += other.bytes;
        self.objects += other.objects;
        self.work += other.work;
    }
}

/// Bytes of elements an array's chunk covers (256 pointers): about what a
/// few small objects take to trace, the step between two looks at a
/// deadline.
const CHUNK_BYTES: usize = 2 << 10;

/// The chunk number's place in an [`Entry`]: above every address of the
/// 48-bit user space, where every object is (loam's pages are, and
/// `AllocSpace::alloc` refuses memory above; a header word makes the same
/// assumption of its descriptor's address).
pub(crate) const CHUNK_SHIFT: u32 = 48;

/// Set in an entry traced again because a writer held a lock inside it
/// (`Tracer::defer_current`): its object and bytes were counted the first
/// time, and a chunk queues no others the second.
const AGAIN: usize = 1 << 63;

/// A mark queue's entry: an object's address, or, with a chunk number `k`
/// in bits 48 – 62, chunk `k` of a long array's elements ("Long arrays"
/// above); [`AGAIN`] in bit 63.
struct Entry(usize);

impl Entry {
    /// The object the entry is of.
    #[inline(always)]
    fn object(&self) -> usize {
        self.0 & ((1 << CHUNK_SHIFT) - 1)
    }

    /// The chunk: 0 for a whole object, an array's first chunk or an
    /// object's first part (`Trace::trace_part`); else the chunk or part.
    #[inline(always)]
    fn chunk(&self) -> usize {
        (self.0 & !AGAIN) >> CHUNK_SHIFT
    }

    /// Whether the entry is traced again ([`AGAIN`]).
    #[inline(always)]
    fn again(&self) -> bool {
        self.0 & AGAIN != 0
    }
}

/// Chunks a chunk queues at most: chunk 0 queues chunks 1 to 64, chunk 64
/// the next 64, and so on, so that no one step queues the thousands of a
/// long array's chunks (15,625 for four million pointers) and thieves
/// still find work.
const CHUNK_FANOUT: usize = 64;

/// The elements chunk `k` of the array at `addr` covers, if it is long
/// enough to be traced in chunks (else `None`, and `k` is 0). Chunk `k`
/// queues chunks `k + 1 ..= k + CHUNK_FANOUT` with `push` if `k` is a
/// multiple of [`CHUNK_FANOUT`], so each chunk is queued once. Chunks are
/// [`CHUNK_BYTES`] of elements, or more where that would take more than
/// the 15 bits' worth of chunks.
///
/// # Safety
/// `addr` is an allocated array of `desc`.
#[inline]
unsafe fn chunk(desc: &TypeDesc, addr: usize, k: usize, push: &mut impl FnMut(usize)) -> Option<Range<usize>> {
    // An array (caller) of traced elements (`trace_elems`), whose length
    // never changes once it is published (only arrays of untraced
    // elements are lengthened, `try_grow_in_place`): every chunk of it
    // finds the same geometry.
    // SAFETY: as just said.
    let len = unsafe { array_len(addr) };
    // Most arrays are short: they are told apart with a multiplication,
    // before the divisions below (the mark scans every array through
    // here). Consistent for every chunk of an array: each asks the same.
    if len.saturating_mul(desc.elem_size) <= 2 * CHUNK_BYTES {
        debug_assert_eq!(k, 0, "mark: a chunk of an array too short for chunks");
        return None;
    }
    let per = (CHUNK_BYTES / desc.elem_size.max(1))
        .max(1)
        .max(len.div_ceil(i16::MAX as usize));
    if len <= 2 * per {
        debug_assert_eq!(k, 0, "mark: a chunk of an array too short for chunks");
        return None;
    }
    if k % CHUNK_FANOUT == 0 {
        for j in k + 1..len.div_ceil(per).min(k + CHUNK_FANOUT + 1) {
            push(addr | j << CHUNK_SHIFT);
        }
    }
    let start = k * per;
    Some(start..(start + per).min(len))
}

/// Traces the object of `entry` (already marked), or the chunk of an array
/// or the part of an object it names, marking and pushing what it points
/// to; returns how many edges it traced.
///
/// # Safety
/// The entry's object is an allocated, marked managed object; no sweep
/// runs.
#[inline]
unsafe fn scan(
    space: &Space,
    entry: usize,
    tracer: &mut Tracer,
    out: &mut Marked,
    mut push: impl FnMut(usize),
) -> usize {
    let (addr, k, again) = {
        let e = Entry(entry);
        (e.object(), e.chunk(), e.again())
    };
    // SAFETY: allocated (caller).
    let (desc, _) = unsafe { header_of(addr) };
    if is_freed(desc) {
        crate::collector::fatal(&format!(
            "verify: the reachable object at {addr:#x} was already freed"
        ));
    }
    // (`trace_elems` is set only where `trace` is.)
    let chunked = match desc.trace_elems {
        // SAFETY: allocated, of this descriptor (caller).
        Some(trace_elems) => unsafe { chunk(desc, addr, k, &mut |c| if !again { push(c) }) }
            .map(|r| (r, trace_elems)),
        None => None,
    };
    // A chunk counts its elements' bytes, the first its header's too: the
    // chunks of an array add up to its size. An object traced in parts
    // counts at its first. What is traced again was counted the first
    // time.
    if !again {
        let bytes = match &chunked {
            Some((elems, _)) => elems.len() * desc.elem_size + if k == 0 { desc.size } else { 0 },
            None if k > 0 => 0,
            // SAFETY: allocated, of this descriptor (caller).
            None => unsafe { desc.object_size(addr) },
        };
        out.bytes += bytes;
        out.work += bytes;
        if k == 0 {
            out.objects += 1;
        }
    }
    let Some(trace) = desc.trace else {
        return 0;
    };
    let later_part = k > 0 && chunked.is_none();
    // Caught here without `panics::contain` (which quiets the panic hook
    // through a thread local, twice per object: 20 ms more mark time on
    // binary-trees): the hook prints a panicking `Trace` impl's message as
    // usual, and the cycle reports it once more. The locks and logs inside
    // learn that they live in `addr` (`log.rs`); the tracer is a marker's
    // alone, and every scan sets it anew, so it is not reset after.
    tracer.set_current(addr, entry | AGAIN);
    // A live object of the descriptor's type (with the chunk's
    // elements in it; a parted object's descriptor is a sized one's, so
    // `chunked` is `None` there). Mutators running meanwhile change it only
    // through barrier cells, which trace without a data race (module docs).
    // SAFETY: as just said.
    let traced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        match (chunked, desc.trace_part) {
            (Some((elems, trace_elems)), _) => trace_elems(addr as *const u8, elems, tracer),
            // An object traced in parts: part 0 is the entry its mark bit
            // queued; it and every 64th part queue the next 64 parts, as
            // many as the object says it has when each runs (its parts'
            // shares do not depend on the count: `Trace`, rule 6).
            // Traced again because a writer held a lock inside: whole, as
            // the first trace may have been (one part) when the object has
            // more parts now, whose queuing this entry must not repeat.
            (None, Some(_)) if again => trace(addr as *const u8, tracer),
            (None, Some(trace_part)) => {
                let n = trace_part(addr as *const u8, k, tracer).min(crate::MAX_TRACE_PARTS);
                if k % CHUNK_FANOUT == 0 {
                    for j in k + 1..n.min(k + CHUNK_FANOUT + 1) {
                        push(addr | j << CHUNK_SHIFT);
                    }
                }
            }
            (None, None) => trace(addr as *const u8, tracer),
        }
    }));
    if let Err(payload) = traced {
        // A user's `Trace` impl panicked: what it reported may be
        // partial, so this cycle's marks cannot be trusted. The
        // collector frees nothing this cycle (see `cycle::cycle`);
        // mark on, so that the mark still ends.
        let msg = crate::panics::dispose(payload);
        crate::panics::cycle_log().record(crate::panics::Kind::Trace, (desc.name)(), msg);
        tracer.clear();
        return 0;
    }
    let edges = tracer.edges().len();
    if later_part {
        // A later part of an object traced in parts: its work (`Marked`).
        out.work += std::mem::size_of_val(tracer.edges());
    }
    // An edge of a live object is an allocated object (Trace's contract
    // 1: everything reachable was reported, so nothing reachable was
    // freed).
    // SAFETY: as just said.
    unsafe { space.mark_all(tracer.edges(), push) };
    tracer.clear();
    edges
}

/// When a marking loop looks at its clock (and its other reasons to stop):
/// every 64 units of work, a unit being an object traced or 16 edges of
/// one, so that a long array's chunk counts as the objects it costs. (A
/// count of objects alone let an assist trace 64 chunks of 256 edges
/// between looks, 0.5 ms where its slice is 100 µs.)
#[derive(Default)]
struct Looks {
    work: usize,
    next: usize,
}

impl Looks {
    /// Counts a scan that traced `edges` edges.
    #[inline]
    fn add(&mut self, edges: usize) {
        self.work += 1 + edges / 16;
    }

    /// Whether it is time to look; the first call says yes.
    #[inline]
    fn due(&mut self) -> bool {
        if self.work < self.next {
            return false;
        }
        self.next = self.work + 64;
        true
    }
}

/// How a [`parallel`] mark runs, and when it must stop.
#[derive(Clone, Copy, Default)]
pub(crate) struct Limits<'a> {
    /// The mutators run: the calling thread traces alone for at most
    /// `CONCURRENT_SERIAL_BUDGET` scans or `CONCURRENT_SERIAL_TIME`, and
    /// the rest goes to the GC threads (whose wake waits for the mutators'
    /// CPUs).
    pub(crate) concurrent: bool,
    /// Stop here, leaving the rest in `leftover`.
    pub(crate) deadline: Option<Instant>,
    /// Where to offer the mark's queues to mutators that assist
    /// ([`assist`]); only with `concurrent`.
    pub(crate) assists: Option<&'a AssistSlot>,
    /// How many of the pool's threads trace (at least one, at most all; 0,
    /// the default, reads as one): fewer than the CPUs while the mutators
    /// run (`Config::concurrent_gc_threads`).
    pub(crate) threads: usize,
    /// Where the GC threads report what they mark as they go, every
    /// [`PROGRESS_BYTES`] or so, and the calling thread what it marked
    /// alone, once (`Shared::saw_live`: pacing follows it); and whose
    /// paced mutators are woken when the mark is offered to assists
    /// (`Shared::wake_pacers`).
    pub(crate) progress: Option<&'a crate::runtime::Shared>,
}

/// Bytes a GC thread marks between two reports to `Limits::progress` and
/// to the assists' credit ([`Share`], "Background credit"): a few shared
/// atomic operations per 256 KiB (about 0.1 ms of marking) cost nothing
/// against the mark; the pace point lags what was found, and a paced
/// mutator waiting for credit lags the GC threads' work, by at most that
/// much per thread.
pub(crate) const PROGRESS_BYTES: usize = 256 << 10;

/// The queues of a concurrent [`parallel`] mark, offered to assisting
/// mutators.
///
/// # The protocol with the GC threads' termination
/// A mark ends when `active` reads zero (see [`idle`]): every queue is
/// empty for good, because work is only pushed by an active thread, which
/// looks at the queues again after it leaves the count. An assist keeps
/// that true without being one of the threads:
/// 1. it joins by raising `active` from a nonzero value (a CAS): once the
///    count has been zero the mark is over (every queue empty for good),
///    and a late assist leaves it alone;
/// 2. while counted, it steals from the mark's queues into a deque of its
///    own, and what its scans find goes on a stack of its own; no GC
///    thread sees either;
/// 3. before it leaves the count, it pushes whatever it has not traced back
///    to the mark's injector. A GC thread watching the queues may read them
///    empty just before that push and `active` zero just after it, and end
///    the mark with the push still queued; so [`parallel`] drains the
///    injector once the GC threads are done, and returns what it finds as
///    left over, for the collector's next round (or the last pause) to
///    trace. Usually a GC thread is still active and takes it at once.
///    The objects it found locked by a writer go to the runtime's `gray`
///    queue, to be traced again later (`cell.rs`).
///
/// The assist runs inside a `mutate` call, so a stopped mark's last pause,
/// which empties `gray` and every leftover, waits for it. A ragged mark's
/// end waits for no call: there the count covers it, since an assist that
/// joined hands back before it leaves, [`parallel`] returns only once the
/// count has been zero, and a later assist cannot join (1), so no assist
/// runs during the end's waits and looks. `assist_model.rs` checks the
/// protocol with loom (it fails if the hand-back follows the leave).
///
/// # Background credit
/// Past twice the goal a mutator owes the mark sixteen bytes of marking
/// for each byte it allocates (`Mutator::pace`). When the GC threads hold
/// all the mark's work, it has nothing to trace and waits; while it waits,
/// the GC threads' marking pays its debt: a GC thread that finds a paced
/// mutator waiting at one of its reports (every [`PROGRESS_BYTES`])
/// credits what it marked since its last report to `credit`, and the
/// waiter wakes and takes what it owes. Without it the waiter slept out
/// a whole slice (1 ms) whatever the GC threads did. Go's parked assists
/// are paid the same way (`bgScanCredit`). So a waiter may be paid for
/// marking done just before it began to wait, and what one waiter leaves
/// of a report is there for the next, in the same round; each byte is
/// still taken once. A thread's last part of a round, under a report's
/// worth, is never credited: the waiter then waits for the next round or
/// the end of its slice.
///
/// Only waiters are paid so. Crediting all the GC threads' marking to
/// every assist (as Go does) was measured and not kept: at binary-trees
/// depth 21, one mutator, the held time fell from 1.5% to 1.1%, but the
/// mutator, marking less, allocated more during each mark, so pacing held
/// it more often and longer (longest hold 1.8 ms against 0.2 - 0.4 ms,
/// p99 0.17 against 0.06 ms) and the peak RSS rose by 11%.
///
/// # Why the bound holds
/// Each byte the GC threads mark is credited at most once, and taken at
/// most once (`take_credit` is one atomic update), and pays for what a
/// byte of the waiter's own marking would have. So past twice the goal
/// each allocated byte is still matched by sixteen bytes of the mark's
/// progress, and the heap passes that point by at most a sixteenth of
/// what the mark traces (`lib.rs`, "Pacing past the heap limit"), as
/// before.
///
/// # Why a wake is never lost for long
/// A paced mutator with nothing to trace waits for credit
/// (`Shared::pace_briefly`): it counts itself in `credit_waiters`, then
/// reads `credit` under the control mutex, and waits on the control
/// condition variable from that same hold of the mutex. A GC thread, at
/// each report, reads `credit_waiters`, and if any, adds to `credit` and
/// notifies under that mutex: a waiter it saw either reads the credit or
/// is woken. One that it did not see (its count came after the read) is
/// paid at the next report, a quarter MiB of marking later, or its wait
/// ends with the slice. `assist_model.rs` checks the wake with loom (it
/// fails if the GC thread notifies without the mutex).
#[derive(Debug)]
pub(crate) struct Share {
    injector: Injector<usize>,
    stealers: Vec<Stealer<usize>>,
    /// GC threads (and assists) marking; zero: the mark is over.
    active: AtomicUsize,
    /// What assists marked, added to the mark's result.
    assisted_bytes: AtomicUsize,
    assisted_objects: AtomicU64,
    /// Marking the GC threads did while paced mutators waited, that none of
    /// them has taken yet, in bytes ("Background credit").
    credit: AtomicUsize,
    /// Paced mutators waiting for `credit` (`Shared::pace_briefly`): a GC
    /// thread that adds to it wakes them.
    credit_waiters: AtomicUsize,
}

impl Share {
    /// Takes up to `want` bytes of the GC threads' untaken marking
    /// ("Background credit" above); returns how much it took.
    pub(crate) fn take_credit(&self, want: usize) -> usize {
        let mut got = 0;
        let _ = self
            .credit
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                got = c.min(want);
                Some(c - got)
            });
        got
    }

    /// The GC threads' untaken marking, as a waiter reads it ("Why a wake
    /// is never lost for long" above).
    pub(crate) fn credit(&self) -> usize {
        self.credit.load(Ordering::SeqCst)
    }

    /// A paced mutator starts (`true`) or stops waiting for credit.
    pub(crate) fn wait_for_credit(&self, waiting: bool) {
        if waiting {
            self.credit_waiters.fetch_add(1, Ordering::SeqCst);
        } else {
            self.credit_waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A GC thread marked `bytes` more: credits them to the paced mutators
    /// waiting for credit, if any, and wakes them ("Background credit"
    /// above).
    fn add_credit(&self, bytes: usize, shared: &crate::runtime::Shared) {
        if self.credit_waiters.load(Ordering::SeqCst) > 0 {
            self.credit.fetch_add(bytes, Ordering::SeqCst);
            shared.wake_pacers();
        }
    }
}

/// Where the concurrent mark under way offers its [`Share`] (none between
/// marks).
pub(crate) type AssistSlot = Mutex<Option<Arc<Share>>>;

/// The mark offered in `slot`, if one is under way.
pub(crate) fn offered(slot: &AssistSlot) -> Option<Arc<Share>> {
    slot.lock().clone()
}

/// A mutator helps the concurrent mark of `share`: traces up to
/// `budget` bytes of objects, or until `deadline`, or until the mark's
/// queues are empty; returns what it marked (also added to the mark's
/// result) and whether it took any work: a slice that traced only later
/// chunks of arrays, or objects again, marks no new object and may count
/// no bytes, yet held the mutator. See [`Share`] for why this cannot end
/// the mark early. `beat` hears at each look at the deadline that the
/// slice still runs (`held_cpus.rs`: a held mutator that has not beat for
/// a while may be moved to another CPU).
///
/// # Safety
/// Called inside a `mutate` call of the runtime whose mark `share` is, with
/// `gray` that runtime's gray queue: no sweep runs until the call returns,
/// and the mark's last pause waits for it.
pub(crate) unsafe fn assist(
    space: &Space,
    share: &Share,
    gray: &Injector<usize>,
    budget: usize,
    deadline: Instant,
    beat: &dyn Fn(Instant),
) -> (Marked, bool) {
    let mut out = Marked::default();
    // 1. Join while the mark is not over.
    let mut a = share.active.load(Ordering::SeqCst);
    loop {
        if a == 0 {
            return (out, false);
        }
        match share
            .active
            .compare_exchange_weak(a, a + 1, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => break,
            Err(now) => a = now,
        }
    }
    // Counted in `active` until 3: the GC threads wait for the count to
    // fall (`idle`). (A user's `Trace` panic is contained in `scan`.)
    let unwinding = crate::collector::StopIfUnwinding("a mutator's mark assist");
    // 2. Steal and trace: stolen batches land in `local`, what the scans
    // find goes on `stack` (no GC thread sees either, so the stack keeps
    // all of it: nobody could steal a share).
    let local = Worker::new_lifo();
    let mut stack = MarkStack::default();
    let mut tracer = Tracer::new();
    let mut looks = Looks::default();
    let mut took = false;
    while out.work < budget {
        if looks.due() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            beat(now);
        }
        let next = stack
            .pop_own()
            .or_else(|| local.pop())
            .or_else(|| steal(&local, &share.injector, &share.stealers, None));
        let Some(addr) = next else {
            break;
        };
        took = true;
        // Queued objects are marked and allocated; no sweep runs
        // (caller).
        // SAFETY: as just said.
        looks.add(unsafe { scan(space, addr, &mut tracer, &mut out, |e| stack.push(e)) });
    }
    // 3. Hand back, then leave.
    stack.drain_into(&local, |x| share.injector.push(x));
    let mut deferred = Vec::new();
    tracer.take_deferred(&mut deferred);
    for x in deferred {
        // `gray` takes objects only (the ragged end reads their headers):
        // a chunk deferred here is traced again whole, a part from part 0
        // (all its parts queued again: traced twice, which is harmless).
        gray.push(Entry(x).object());
    }
    share.assisted_bytes.fetch_add(out.bytes, Ordering::Relaxed);
    share.assisted_objects.fetch_add(out.objects, Ordering::Relaxed);
    share.active.fetch_sub(1, Ordering::SeqCst);
    drop(unwinding);
    (out, took)
}

/// One object from the injector or a GC thread's deque, a batch of them
/// moving to `local`: every deque, or with `me` every other one, from
/// the next thread on (GC thread `me` looking for work).
fn steal(
    local: &Worker<usize>,
    injector: &Injector<usize>,
    stealers: &[Stealer<usize>],
    me: Option<usize>,
) -> Option<usize> {
    let n = stealers.len();
    let (from, count) = me.map_or((0, n), |me| (me + 1, n.saturating_sub(1)));
    loop {
        let mut retry = false;
        let deques = (0..count).map(|k| &stealers[(from + k) % n]);
        for got in std::iter::once(injector.steal_batch_and_pop(local))
            .chain(deques.map(|s| s.steal_batch_and_pop(local)))
        {
            match got {
                Steal::Success(x) => return Some(x),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
        }
        if !retry {
            return None;
        }
    }
}

/// Marks everything reachable from `roots` on the threads of `pool`, and
/// traces what the `remembered` objects point to (marking them too, should
/// another runtime's full cycle have cleared their marks). Past
/// `limits.deadline`, stops and appends the gray objects still untraced to
/// `leftover` (they are marked; pass them back as `remembered`). With the
/// mutators running, `leftover` also receives the objects traced while a
/// writer held a `GcLock` inside them, to be traced again (`cell.rs`).
///
/// # Safety
/// No sweep runs; `roots` and `remembered` are allocated objects of this
/// runtime; every object a marked object of this runtime points to is
/// marked or remembered (in a full cycle: no object is marked). If the
/// mutators run, they run behind the snapshot barrier.
pub(crate) unsafe fn parallel(
    space: &Space,
    pool: &ThreadPool,
    roots: &[usize],
    remembered: &[usize],
    limits: Limits,
    leftover: &mut Vec<usize>,
) -> Marked {
    let mut gray = Vec::new();
    // SAFETY: roots are allocated (caller).
    unsafe { space.mark_all(roots, |r| gray.push(r)) };
    // The remembered objects are taken one at a time as the gray ones run
    // out, not queued first: a minor cycle after a burst of stores may have
    // hundreds of thousands, and queueing them all before the first look at
    // the deadline made pauses of tens of milliseconds. Each is marked when
    // taken (traced whether or not that marks it: the barrier marked it
    // without tracing it); those not taken by the deadline are left over.
    let pending = AtomicUsize::new(0);
    let take_remembered = || {
        let i = pending.fetch_add(1, Ordering::Relaxed);
        let r = *remembered.get(i)?;
        // (A chunk of an array left over by a deadline is passed back
        // here too; it is the array that is marked.)
        // SAFETY: allocated (caller).
        unsafe { space.mark(Entry(r).object()) };
        Some(r)
    };
    let leave_remembered = |out: &mut Vec<usize>| {
        // Swapped to the end, not past it: a later take finds nothing
        // (a `fetch_add` past `usize::MAX` would wrap to the start).
        let i = pending.swap(remembered.len(), Ordering::Relaxed);
        out.extend_from_slice(remembered.get(i..).unwrap_or(&[]));
    };
    // A minor cycle often finds little to trace (the roots are old): the
    // calling thread starts alone, and wakes the GC threads only if the work
    // outgrows its budget. (Waking them for nothing took about 0.1 ms a
    // pause: binary-trees' pause p50 went from 0.26 to 0.15 ms; with the
    // mutators running, a round's wake took milliseconds,
    // `CONCURRENT_SERIAL_BUDGET`.)
    let mut out = Marked::default();
    let mut tracer = Tracer::new();
    let expired = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
    // Not while the heap is at the pace point (twice the goal, or less
    // under a heap limit), checked before the round and with the clock:
    // the mutators then pay for what they allocate by assisting, which
    // needs the round offered, and a round traced alone let them allocate
    // unchecked for its millisecond (a 16 MiB limit was met in one run in
    // ten, `tests/limit.rs`).
    let paced = || limits.progress.is_some_and(|shared| shared.over_pace());
    let mut budget = if !limits.concurrent {
        SERIAL_BUDGET
    } else if paced() {
        0
    } else {
        CONCURRENT_SERIAL_BUDGET
    };
    // What the calling thread marks alone is reported as the GC threads
    // report theirs (a concurrent mark's live data counts as it is found,
    // `Shared::saw_live`).
    let report = |out: &Marked| {
        if let Some(shared) = limits.progress {
            shared.saw_live(out.bytes);
        }
    };
    let serial_until = limits
        .concurrent
        .then(|| Instant::now() + CONCURRENT_SERIAL_TIME);
    let mut looks = Looks::default();
    let mut scans = 0;
    let mut serial_looks = 0u32;
    loop {
        if scans == budget {
            // A pause whose deadline is near traces alone to it: waking
            // the GC threads and waiting for each to check in took the
            // first pause 0.4 – 0.5 ms past its 150 µs deadline on the
            // 2-core VM, when its first 4,096 objects were done early.
            let near = |d: Instant| d.saturating_duration_since(Instant::now()) < WAKE_TIME;
            if !limits.deadline.is_some_and(near) {
                break;
            }
            budget = usize::MAX;
        }
        scans += 1;
        if looks.due() {
            if expired(serial_until) || (limits.concurrent && paced()) {
                break;
            }
            // With the mutators running, every sixteenth look: a held
            // mutator may wait for this thread's CPU (`held_cpus.rs`).
            serial_looks += 1;
            if limits.concurrent && serial_looks % 16 == 0 {
                if let Some(shared) = limits.progress {
                    shared.held_cpus.step_aside();
                }
            }
            if expired(limits.deadline) {
                leftover.append(&mut gray);
                leave_remembered(leftover);
                tracer.take_deferred(leftover);
                report(&out);
                return out;
            }
        }
        let Some(addr) = gray.pop().or_else(take_remembered) else {
            tracer.take_deferred(leftover);
            report(&out);
            return out;
        };
        // Gray objects are marked and allocated; no sweep runs
        // (caller).
        // SAFETY: as just said.
        looks.add(unsafe { scan(space, addr, &mut tracer, &mut out, |e| gray.push(e)) });
    }
    report(&out);
    tracer.take_deferred(leftover);
    if expired(limits.deadline) {
        leftover.append(&mut gray);
        leave_remembered(leftover);
        return out;
    }
    // The threads that trace; the pool's others return at once.
    let n = limits.threads.clamp(1, pool.current_num_threads());
    let workers: Vec<Worker<usize>> = (0..n).map(|_| Worker::new_lifo()).collect();
    let share = Arc::new(Share {
        injector: Injector::new(),
        stealers: workers.iter().map(Worker::stealer).collect(),
        active: AtomicUsize::new(n),
        assisted_bytes: AtomicUsize::new(0),
        assisted_objects: AtomicU64::new(0),
        credit: AtomicUsize::new(0),
        credit_waiters: AtomicUsize::new(0),
    });
    for r in gray {
        share.injector.push(r);
    }
    let Share {
        injector,
        stealers,
        active,
        ..
    } = &*share;
    let slots: Vec<Mutex<Option<Worker<usize>>>> =
        workers.into_iter().map(|w| Mutex::new(Some(w))).collect();
    let stop = AtomicBool::new(false);
    // Only a mark without a deadline ends with `active` at zero (a
    // deadline stops the threads with the count up), which is what keeps
    // an assist from handing work back after the drain below (`Share`).
    debug_assert!(
        limits.assists.is_none() || limits.deadline.is_none(),
        "a mark offered to assists must not have a deadline"
    );
    let assists = limits
        .assists
        .filter(|_| limits.concurrent && limits.deadline.is_none());
    if let Some(slot) = assists {
        *slot.lock() = Some(share.clone());
        // A paced mutator waiting for a mark to help with starts now.
        if let Some(shared) = limits.progress {
            shared.wake_pacers();
        }
    }
    let left = Mutex::new(std::mem::take(leftover));
    let results = pool.broadcast(|ctx| {
        let me = ctx.index();
        if me >= n {
            return Marked::default();
        }
        // Counted in `active` from the start: the others wait for the
        // count to fall (`idle`).
        let _unwinding = crate::collector::StopIfUnwinding("a GC thread's mark");
        // A test's panic where another GC thread would wait for this one:
        // two or more of them, and no deadline to stop their wait.
        #[cfg(all(test, not(loom), unix))]
        if n >= 2
            && limits.deadline.is_none()
            && crate::collector::tests::PANIC_IN_NEXT_MARK.swap(false, Ordering::Relaxed)
        {
            panic!("a test's panic in a GC thread's mark");
        }
        let local = slots[me].lock().take().expect("one worker per GC thread");
        let mut stack = MarkStack::default();
        let mut tracer = Tracer::new();
        let mut out = Marked::default();
        let mut looks = Looks::default();
        let (mut reported, mut credited) = (0, 0);
        loop {
            if let Some(shared) = limits.progress {
                if out.work - credited >= PROGRESS_BYTES {
                    shared.saw_live(out.bytes - reported);
                    if assists.is_some() {
                        share.add_credit(out.work - credited, shared);
                    }
                    (reported, credited) = (out.bytes, out.work);
                    // A mutator assisting on this thread's CPU is held
                    // while this thread runs (`held_cpus.rs`).
                    if limits.concurrent {
                        shared.held_cpus.step_aside();
                    }
                }
            }
            if limits.deadline.is_some()
                && (stop.load(Ordering::Relaxed) || (looks.due() && expired(limits.deadline)))
            {
                stop.store(true, Ordering::Relaxed);
                break;
            }
            let next = stack
                .pop(&local)
                .or_else(|| local.pop())
                .or_else(|| steal(&local, injector, stealers, Some(me)))
                .or_else(take_remembered);
            match next {
                // Queued and taken remembered objects are marked
                // and allocated; no sweep runs (caller).
                // SAFETY: as just said.
                Some(addr) => looks.add(unsafe { scan(space, addr, &mut tracer, &mut out, |e| stack.push(e)) }),
                None => {
                    let more = || pending.load(Ordering::Relaxed) < remembered.len();
                    let aside = || {
                        if let (true, Some(shared)) = (limits.concurrent, limits.progress) {
                            shared.held_cpus.step_aside();
                        }
                    };
                    if idle(active, injector, stealers, &stop, more, &aside) {
                        break;
                    }
                }
            }
        }
        // Empty unless the deadline stopped us: gray objects for later;
        // and the objects to trace again.
        // The lock taken once, at the first entry.
        let mut into = None;
        stack.drain_into(&local, |x| into.get_or_insert_with(|| left.lock()).push(x));
        drop(into);
        let mut deferred = Vec::new();
        tracer.take_deferred(&mut deferred);
        if !deferred.is_empty() {
            left.lock().append(&mut deferred);
        }
        if let Some(shared) = limits.progress {
            shared.saw_live(out.bytes - reported);
        }
        out
    });
    if let Some(slot) = assists {
        // Every assist that joined has left (`active` is zero), its part
        // counted below; later ones find the count at zero.
        *slot.lock() = None;
    }
    *leftover = left.into_inner();
    // Not empty if the deadline stopped the mark, or an assist handed work
    // back as the GC threads finished (`Share`, 3).
    drain(injector, leftover);
    leave_remembered(leftover);
    out.bytes += share.assisted_bytes.load(Ordering::Relaxed);
    out.objects += share.assisted_objects.load(Ordering::Relaxed);
    results.into_iter().fold(out, |mut a, b| {
        a.add(b);
        a
    })
}

/// Moves everything `queue` holds into `out`.
pub(crate) fn drain(queue: &Injector<usize>, out: &mut Vec<usize>) {
    loop {
        match queue.steal() {
            Steal::Success(x) => out.push(x),
            Steal::Retry => {}
            Steal::Empty => return,
        }
    }
}

/// Leaves the active set; returns true when marking is over (or stopped at
/// its deadline), false when there is work again (the caller is active
/// again).
///
/// While it waits, every eighth yield calls `aside` (with the mutators
/// running, `HeldCpus::step_aside`). The work it waits for may be a
/// mutator's assist, which counts in `active` until it hands back what it
/// took: a mutator that this thread preempted on its own CPU, and that the
/// yields do not give the CPU back to (under EEVDF a yield only moves the
/// yielder's deadline). At binary-trees depth 21 with two threads that was
/// a hold of a scheduler tick, 4 ms, for an assist of 18 µs.
fn idle(
    active: &AtomicUsize,
    injector: &Injector<usize>,
    stealers: &[Stealer<usize>],
    stop: &AtomicBool,
    remembered_left: impl Fn() -> bool,
    aside: &dyn Fn(),
) -> bool {
    active.fetch_sub(1, Ordering::SeqCst);
    let mut spins = 0u32;
    loop {
        if !injector.is_empty() || stealers.iter().any(|s| !s.is_empty()) || remembered_left() {
            active.fetch_add(1, Ordering::SeqCst);
            return false;
        }
        if active.load(Ordering::SeqCst) == 0 || stop.load(Ordering::Relaxed) {
            return true;
        }
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            if spins % 8 == 0 {
                aside();
            }
            std::thread::yield_now();
        }
    }
}

/// Verify mode: marks from `roots` again, single-threaded, into a set, and
/// returns it. Reports a freed object reached.
///
/// # Safety
/// As [`parallel`], after it (the marks it set are only read).
pub(crate) unsafe fn reachable(roots: &[usize]) -> HashSet<usize> {
    let mut seen: HashSet<usize> = HashSet::new();
    let mut stack: Vec<usize> = Vec::new();
    for &r in roots {
        if seen.insert(r) {
            stack.push(r);
        }
    }
    let mut tracer = Tracer::new();
    while let Some(addr) = stack.pop() {
        // SAFETY: reachable from the roots, hence allocated (Trace's
        // contract); the world is stopped.
        let (desc, _) = unsafe { header_of(addr) };
        if is_freed(desc) {
            crate::collector::fatal(&format!(
                "verify: the reachable object at {addr:#x} was already freed"
            ));
        }
        if let Some(trace) = desc.trace {
            // SAFETY: as above.
            let traced = crate::panics::contain(|| unsafe { trace(addr as *const u8, &mut tracer) });
            if let Err(msg) = traced {
                crate::panics::cycle_log().record(crate::panics::Kind::Trace, (desc.name)(), msg);
                tracer.clear();
                continue;
            }
            for &e in tracer.edges() {
                if seen.insert(e) {
                    stack.push(e);
                }
            }
            tracer.clear();
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::{ArrayDesc, Gc};

    /// The descriptor of `[Gc<u64>]` arrays: 8-byte elements, traced.
    fn desc() -> &'static TypeDesc {
        ArrayDesc::<Option<Gc<'static, u64>>>::desc()
    }

    /// The chunks `chunk` makes of an array of `len` elements of `desc`
    /// (its header and length word in a buffer: `chunk` reads nothing
    /// else), tracing each queued chunk in turn as a marker would; checked
    /// to queue each chunk once, at most [`CHUNK_FANOUT`] a step, and to
    /// cover every element once.
    fn chunks_of(desc: &TypeDesc, len: usize) -> Vec<Range<usize>> {
        let array = [0_usize, len];
        let addr = array.as_ptr() as usize;
        let mut queue = vec![addr];
        let mut all = Vec::new();
        while let Some(e) = queue.pop() {
            assert_eq!(Entry(e).object(), addr, "a chunk entry names its array");
            let mut queued = Vec::new();
            // `chunk` reads the length word only, which `array`
            // holds.
            // SAFETY: as just said.
            let r = unsafe { chunk(desc, addr, Entry(e).chunk(), &mut |q| queued.push(q)) };
            let Some(r) = r else {
                assert!(queued.is_empty() && all.is_empty(), "an array traced whole queues nothing");
                return std::iter::once(0..len).collect();
            };
            assert!(queued.len() <= CHUNK_FANOUT, "{} chunks queued at once", queued.len());
            all.push((Entry(e).chunk(), r));
            queue.extend(queued);
        }
        all.sort_by_key(|(k, _)| *k);
        for (i, (k, _)) in all.iter().enumerate() {
            assert_eq!(*k, i, "each chunk traced once: {:?}", all.iter().map(|(k, _)| k).collect::<Vec<_>>());
        }
        let all: Vec<Range<usize>> = all.into_iter().map(|(_, r)| r).collect();
        let mut next = 0;
        for r in &all {
            assert_eq!(r.start, next, "chunks of {len} elements");
            assert!(r.start < r.end, "an empty chunk of {len} elements");
            next = r.end;
        }
        assert_eq!(next, len, "chunks of {len} elements end at the array's end");
        all
    }

    #[test]
    fn long_arrays_are_traced_in_chunks_that_cover_each_element_once() {
        let per = CHUNK_BYTES / 8;
        // Up to two chunks' worth: whole.
        for len in [0, 1, per, 2 * per] {
            assert_eq!(chunks_of(desc(), len).len(), 1, "{len} elements");
        }
        // Longer: chunks of `per`, the last one shorter.
        assert_eq!(chunks_of(desc(), 2 * per + 1).len(), 3);
        let c = chunks_of(desc(), 4_000_000);
        assert_eq!(c.len(), 4_000_000_usize.div_ceil(per));
        assert!(c.iter().all(|r| r.len() <= per));
        // So long that chunks of `per` would not fit 15 bits: larger ones.
        let len = (u16::MAX as usize) * per * 3 + 5;
        let c = chunks_of(desc(), len);
        assert!(c.len() <= i16::MAX as usize, "{} chunks", c.len());
        // Elements larger than a chunk: one each.
        let wide = ArrayDesc::<[Option<Gc<'static, u64>>; 512]>::desc();
        assert_eq!(chunks_of(wide, 3).len(), 3);
    }
}
