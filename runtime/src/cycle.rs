//! One collection cycle, a function per phase.
//!
//! A cycle:
//! 0. *Clear the marks* (a full cycle in loam's pages), with the mutators
//!    running: every page's mark bits and `sweep::OLD` flag. The stop
//!    clears the marks the barrier set meanwhile (each is on a remembered
//!    list); the argument is in `barrier.rs`.
//! 1. *Stop*: raise the handshake's stop flag and wait for every mutator
//!    inside `mutate` to leave (mutators outside are blocked: they hold no
//!    pointer the collector cannot see); raise the heap's seal epoch: from
//!    then on each allocation seals its page (copies its allocated bits)
//!    before it sets a bit there (`loam_heap::SealEpoch`).
//! 2. *Snapshot*: walk the heap's pages; for each with an object allocated
//!    before the stop, copy its allocated bits as of the stop for the
//!    sweep (objects allocated after the stop are then not the sweep's
//!    business; the blocks of page runs still out, and of runs the
//!    finalizer holds, are left out). Minor cycles skip the pages the sweep
//!    flagged old. The copy is taken with the mutators running, after the
//!    first pause (the page owners' seals keep what they allocate out of
//!    it), except in a full cycle that did not clear its marks in phase 0
//!    (it turned full at its stop, or its space is a `GlobalAlloc`): that
//!    one clears each page's marks as it copies, in the first pause.
//! 3. *Mark* from the mutators' and the global root tables (and, in a minor
//!    cycle, the barrier's remembered objects): the coordinator alone while
//!    the work is small, then in parallel, until done or until the pause
//!    budget is spent. In the second case:
//!    - *Concurrent mark*: set `marking`, resume the mutators (they now
//!      shade through the barriers and allocate white, see `lib.rs`), and
//!      trace on from the gray objects the pause left, and from what the
//!      barriers shade, until no work is left;
//!    - *Stop again* and trace what the barriers shaded since; clear
//!      `marking`.
//! 4. Verify mode: re-mark single-threaded from the roots as they are now
//!    and abort if a reachable object is unmarked (after a mark with the
//!    world stopped throughout, also if the marks cover more).
//! 5. *Weak*: clear weak cells whose target is unmarked.
//! 6. *Resume*: lower the stop flag. From the last stop to here is a pause.
//!    A cycle whose mark ended in the first pause takes its snapshot now
//!    (unless that pause took it).
//! 7. *Sweep* the snapshot pages in parallel, mutators running; a page's
//!    dead objects with drop glue among them are held as a page run and go
//!    to the finalizer thread (`finalize.rs`), which sends the run after the
//!    destructors ran.
//! 8. Outside the cycle lock: the `on_cycle` hook, contained; then the
//!    cycle counts as complete.
//!
//! The stops, the snapshot, the mark in the pause and the termination
//! are `Cycle`'s methods (a snapshot with the mutators running runs after
//! the concurrent mark's rounds and before the pauses that end it, or after
//! the last resume if the mark ended in the first pause, or in that pause
//! in verify mode, which reads it there); `cycle` runs them and
//! reports the cycle's event. The barrier they rely on, and what holds before the
//! first object is traced, are in `barrier.rs`.

use crate::calls::CallState;
use crate::collector::fatal;
use crate::mark;
use crate::mutator::MutatorShared;
use crate::runtime::{Phase, Shared};
use crate::space::Space;
use crate::stats::CycleEvent;
use crate::sweep;
use loam_threadpool::ThreadPool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod ragged;

/// What the coordinator keeps between cycles to choose minor or full ones.
///
/// A minor cycle keeps the marks earlier cycles set (sticky mark bits): the
/// objects that survived a cycle are old and stay marked, so marking from
/// the roots stops at them and traces only young objects; the barrier
/// (`Mutation::barrier_store`) marks and remembers young objects stored into
/// barrier cells, which may be in old objects. The sweep is the same: it
/// frees allocated unmarked objects, which are young and unreachable. Old
/// garbage stays until a full cycle, which clears the marks first.
///
/// # Invariants
/// - Once `started`, `goal >= live`, and `goal >= min_heap` unless a heap
///   limit holds it at most halfway from `live` to the limit (`rebase`).
/// - `old` only grows between full cycles (minor cycles promote; the
///   sweep's correction counts what the stopped heap kept), and a full
///   cycle sets it to `live`, as does a minor cycle that began with it at
///   zero (`Cycle::resume`: it marked everything reachable).
#[derive(Debug, Default)]
pub(crate) struct Generations {
    /// Bytes of old (marked) objects: the live size after a full cycle, plus
    /// what minor cycles promoted since.
    old: usize,
    /// Live bytes the last full cycle (or minor one over an empty old
    /// generation, `Cycle::resume`) found.
    live: usize,
    /// The heap goal set with `live`.
    goal: usize,
    /// Whether a full cycle ever ran (the first cycle is full).
    started: bool,
    /// How far the heap grows past the trigger before a cycle's mark ends
    /// (`note_runway`): what the mutators allocate while the cycle waits
    /// for the calls under way and marks. The trigger is set that much
    /// below the goal (`trigger_lead`).
    runway: usize,
    /// The last cycle's measure of it (`note_runway`).
    last_grown: usize,
}

impl Generations {
    /// Takes `live` bytes for the live size: the heap goal grows from it by
    /// the gc percent (at least the minimum heap), and the old generation is
    /// that much.
    fn rebase(&mut self, live: usize, config: &crate::options::Config) {
        self.goal = goal_for(live, config);
        self.live = live;
        self.old = live;
    }

    /// Whether the next cycle must be a full one: old objects (the garbage
    /// among them included) took more than half the headroom the last full
    /// cycle left between the live size and the goal.
    fn full_due(&self) -> bool {
        !self.started || self.old > self.live + (self.goal.saturating_sub(self.live)) / 2
    }

    /// A cycle ended its mark with the heap `grown` bytes past the
    /// trigger. The runway is the smaller of the last two such measures:
    /// a call that builds a large structure once (a program's setup, a
    /// tree built and dropped) makes one long one, which then lowers no
    /// trigger, while calls that keep doing so make them in a row. (A
    /// runway taken at once and halved after would hold the trigger at its
    /// floor for several cycles after one such call, cycles that then run
    /// twice as often: `docs/perf-log.md`, session 55.)
    fn note_runway(&mut self, grown: usize) {
        self.runway = grown.min(self.last_grown);
        self.last_grown = grown;
    }

    /// How far below the goal the next cycle is asked for: the runway, so
    /// that the heap peaks near the goal rather than a runway past it (the
    /// goal is the peak aimed at, as Go's pacer sets its trigger). The
    /// trigger stays at least halfway from the live size to the goal, so
    /// the cycles stay as rare as half the headroom allows, and at least
    /// the minimum heap: a goal there is its own trigger, which keeps a
    /// small program's cycles as few as the minimum heap promises. 0 with
    /// the goal off.
    ///
    /// Why: a cycle asked for during a call begins tracing only once the
    /// call has ended, and frees nothing before, so the heap grows past
    /// the trigger by what the calls under way allocate meanwhile (a
    /// program that builds a large structure per call, binary-trees at
    /// depth 21, most; `docs/perf-log.md`, session 55).
    fn trigger_lead(&self, config: &crate::options::Config) -> usize {
        if self.goal == usize::MAX {
            return 0;
        }
        let halfway = self.live + self.goal.saturating_sub(self.live) / 2;
        let floor = halfway.max(config.min_heap).min(self.goal);
        self.runway.min(self.goal - floor)
    }
}

/// The heap goal for `live` bytes of live data: the gc percent over it, at
/// least the minimum heap, kept under the heap limit (`goal_under_limit`);
/// `usize::MAX` with the goal off. Never lower for more live data. The
/// triggers and pacing add the mutators' credit to it (`Shared::credited`).
pub(crate) fn goal_for(live: usize, config: &crate::options::Config) -> usize {
    let percent = config.gc_percent;
    if percent == u32::MAX {
        return usize::MAX;
    }
    let grow = usize::try_from(live as u128 * percent as u128 / 100).unwrap_or(usize::MAX);
    goal_under_limit((live.saturating_add(grow)).max(config.min_heap), live, config)
}

/// `goal` for `live` bytes of live data, kept under the heap limit: at most
/// halfway from the live size to the limit, and no higher than seven
/// eighths of the limit while the live data is below that (never below
/// the live size). A cycle then starts while the mutators still have room
/// to allocate during it, and pacing (`Shared::pace_at`, at most seven
/// eighths of the limit) holds them between calls before an allocation
/// meets the limit. Without a limit, or with the goal off (`gc_percent` at
/// `u32::MAX`), `goal`.
pub(crate) fn goal_under_limit(goal: usize, live: usize, config: &crate::options::Config) -> usize {
    match config.heap_limit {
        Some(limit) if config.gc_percent != u32::MAX => {
            let cap = config.pace_cap();
            let goal = goal.min(live + limit.saturating_sub(live) / 2);
            let goal = if live <= cap { goal.min(cap) } else { goal };
            goal.max(live)
        }
        _ => goal,
    }
}

/// What the pause records of the heap for the sweep.
///
/// # Invariants
/// After `snapshot_pages`: `pages` and `ranges` have one entry per page,
/// in the order the walk met them; the ranges split `bits` into
/// consecutive runs, each the page's bitmap words (less the blocks of page
/// runs out, held ones included), and each has a nonzero word.
/// The sweep consumes it; `objects` is set instead in a `GlobalAlloc`
/// space.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// Start addresses of the pages to sweep: those holding an allocated
    /// object.
    pages: Vec<usize>,
    /// For each page in order, the range of its allocated words in `bits`.
    ranges: Vec<(usize, usize)>,
    /// The pages' allocated words as of the stop, less the blocks of page
    /// runs still out. The sweep frees `bits & !marked`: objects allocated
    /// after the stop are not in it, so mutators allocate white and need
    /// no atomic mark write.
    bits: Vec<u64>,
    /// What a `GlobalAlloc` space's pause took instead of pages.
    objects: Option<crate::alloc_space::Snapshot>,
}

impl Snapshot {
    /// The pages' starts, sorted, each with where its words begin in
    /// `bits`: to ask [`holds`](Self::holds) of objects.
    fn index(&self) -> Vec<(usize, usize)> {
        let mut index: Vec<(usize, usize)> = self
            .pages
            .iter()
            .zip(&self.ranges)
            .map(|(&p, &(from, _))| (p, from))
            .collect();
        index.sort_unstable();
        index
    }

    /// Whether the object at `addr` is one this cycle's sweep looks at
    /// (allocated before the stop, on a page of the copy); `index` is
    /// [`index`](Self::index).
    ///
    /// # Safety
    /// `addr` is an allocated object of loam's pages (its page is live).
    unsafe fn holds(&self, index: &[(usize, usize)], addr: usize) -> bool {
        // SAFETY: allocated, so its page is live (caller).
        let page = unsafe { loam_heap::PageRef::of(addr as *const u8) };
        let Ok(i) = index.binary_search_by_key(&(page.start() as usize), |&(p, _)| p) else {
            return false;
        };
        let b = page.block_index(addr as *const u8);
        self.bits[index[i].1 + b / 64] >> (b % 64) & 1 != 0
    }
}

/// Records every page holding an object allocated before the stop that
/// raised `seal`: for a minor cycle, less the pages the sweep flagged old;
/// with `clear_marks` (a full cycle whose marks phase 0 did not clear), it
/// clears each page's marks as well. Called with the mutators running
/// (after the first pause, or before the sweep), or in the first pause
/// when it clears marks, which must happen before anything is marked.
///
/// Each page's copy is `loam_heap::PageRef::sealed_words`: its allocated
/// bits as of the stop, less the blocks of page runs still out (and of
/// runs the finalizer holds), taken either by the page's owner before its
/// first allocation after the stop (every allocation seals its page for
/// the latest epoch first, and every `mutate` call after the stop began
/// after the raise) or by this walk, which claims the pages no owner
/// sealed. A page gets no new run before the sweep
/// (only sweeps count runs out, one at a time; a finalizer sends only runs
/// a sweep held, whose blocks are pending from the hold on), so the blocks
/// in the copy are in use until this runtime's sweep (or another
/// runtime's, never at the same time) frees them: they keep the page live
/// and its geometry fixed. A copy that is all zero means nothing to
/// sweep. Pages with runs out are swept like any other (their further
/// garbage goes out as a further run), so a run its owner is slow to take
/// back (a thread that sits idle, or serves another runtime), or a
/// finalizer's slow destructor, holds back nothing but its own blocks.
/// With the mutators running (`aside`), every [`ASIDE_PAGES`] pages the
/// walk steps off a CPU that a held mutator waits for (`held_cpus.rs`: a
/// full heap's walk takes milliseconds).
fn snapshot_pages(
    snap: &mut Snapshot,
    full: bool,
    clear_marks: bool,
    seal: loam_heap::SealEpoch,
    aside: Option<&crate::held_cpus::HeldCpus>,
) {
    if clear_marks {
        MARK_CLEARS.fetch_add(1, Ordering::Relaxed);
    }
    snap.pages.clear();
    snap.ranges.clear();
    snap.bits.clear();
    let Snapshot {
        pages,
        ranges,
        bits,
        objects: _,
    } = &mut *snap;
    // Pages whose owner was writing its image as the walk came by
    // (`try_sealed_words`): a second walk comes back to them, and only
    // then waits for the owner. Waiting at once was waiting for as long
    // as the OS kept a preempted owner off its CPU, with this thread
    // spinning on the other one.
    let mut busy: Vec<usize> = Vec::new();
    let mut visited = 0usize;
    let mut visit = |p: loam_heap::PageRef<'_>, busy: &mut Vec<usize>, again: bool| {
        visited += 1;
        if let Some(aside) = aside.filter(|_| visited % ASIDE_PAGES == 0) {
            aside.step_aside();
        }
        if p.used() == 0 || (again && busy.binary_search(&(p.start() as usize)).is_err()) {
            return;
        }
        let flags = p.flags();
        if flags & sweep::OLD != 0 {
            if !full {
                // Every block marked until a full cycle: nothing for
                // a minor cycle to sweep (see `sweep::OLD`).
                return;
            }
            p.clear_flags(sweep::OLD);
        }
        let from = bits.len();
        let copied = if again {
            p.sealed_words(seal, bits)
        } else {
            match p.try_sealed_words(seal, bits) {
                Some(copied) => copied,
                None => {
                    busy.push(p.start() as usize);
                    return;
                }
            }
        };
        if !copied {
            // Released and set up again meanwhile: nothing of the
            // stop's is in it.
            return;
        }
        if bits[from..].iter().all(|&w| w == 0) {
            bits.truncate(from);
            return;
        }
        if clear_marks {
            p.clear_marks();
        }
        pages.push(p.start() as usize);
        ranges.push((from, bits.len()));
    };
    // The closure may allocate (the vectors grow): the walk holds no lock.
    // The closure keeps no PageRef (only the starts of the busy pages, which
    // the second walk meets again as pages of its own); it reads only
    // atomics (`sealed_words` is built for a walk beside running mutators),
    // and the geometry of pages whose blocks in the copy keep them live
    // (above). A page met again at a busy page's start may have been
    // released and set up again in between: its copy says so, as in the
    // first walk.
    // SAFETY: as just said.
    unsafe { loam_heap::for_each_page(|p| visit(p, &mut busy, false)) };
    if !busy.is_empty() {
        // Pushed in the walk's order, which is not sorted by address.
        busy.sort_unstable();
        // SAFETY: as for the first walk.
        unsafe { loam_heap::for_each_page(|p| visit(p, &mut busy, true)) };
    }
}

/// Whether the cycle about to stop the world will be full, as `Cycle::stop`
/// decides it (a `GcLock` write may still make a cycle full after this
/// said no: its marks are then cleared in the pause).
fn full_ahead(shared: &Shared, forced: bool, gen: &Generations) -> bool {
    forced
        || !shared.config.generational
        || shared.lock_written.load(Ordering::Relaxed)
        || gen.full_due()
}

/// Full cycles that cleared the marks of loam's pages (in phase 0 or in a
/// pause), every runtime's objects' included, and full snapshots of a
/// `GlobalAlloc` space (whose marks a new epoch clears): counted under
/// the cycle lock before the cycle's mark begins, read by a runtime's weak
/// processing under it, which must look at its old weak cells again after
/// any (`weak::WeakCells`), and by card takes while a cycle holds it
/// (`cards.rs`, 4).
static MARK_CLEARS: AtomicU64 = AtomicU64::new(0);

/// Cycles begun, of every runtime: counted as each takes the cycle lock.
/// Its low bits tag a cycle's card takes (`cards.rs`, 1).
static CYCLES: AtomicU64 = AtomicU64::new(0);

/// For card takes (`cards.rs`): the cycle under way and the count of mark
/// clears. Read by markers (GC threads and mutators' assists), which run
/// only inside a cycle, while its coordinator holds the cycle lock: both
/// are stable while they read them.
#[inline]
pub(crate) fn card_epoch() -> (u64, u64) {
    (CYCLES.load(Ordering::Relaxed), MARK_CLEARS.load(Ordering::Relaxed))
}

/// Pages a walk of every page visits between two looks at whether a held
/// mutator waits for its CPU (`held_cpus.rs`): a few dozen microseconds.
const ASIDE_PAGES: usize = 256;

/// Phase 0 of a full cycle in loam's pages: clears every page's marks and
/// `sweep::OLD` flag with the mutators running, so that no pause does work
/// proportional to the heap. The argument that this is sound is in
/// `barrier.rs` ("Clearing the marks with the mutators running"); the stop
/// then clears the marks the barrier set meanwhile. Steps off a CPU that a
/// held mutator waits for every [`ASIDE_PAGES`] pages. Returns how long it
/// took.
fn clear_marks_running(aside: &crate::held_cpus::HeldCpus) -> Duration {
    let start = Instant::now();
    let mut visited = 0usize;
    MARK_CLEARS.fetch_add(1, Ordering::Relaxed);
    // A page released and set up again meanwhile has its marks cleared
    // too, which is harmless: clearing a mark between cycles only makes an
    // object young again (`barrier.rs`).
    // SAFETY: the closure keeps no PageRef and touches only atomics (`used`,
    // the flags, the mark words, whose count comes from the atomic capacity
    // and stays within the slice's bitmap whatever the page's geometry);
    // its naps hold no lock (`for_each_page` holds none either).
    unsafe {
        loam_heap::for_each_page(|p| {
            visited += 1;
            if visited % ASIDE_PAGES == 0 {
                aside.step_aside();
            }
            if p.used() == 0 {
                return;
            }
            p.clear_flags(sweep::OLD);
            p.clear_marks();
        })
    };
    start.elapsed()
}

/// Sets the mutators' assist ratio for a concurrent mark that expects to
/// trace `expected` more bytes (`Mutator::assist`): that work over the
/// headroom left to where pacing begins now (the pace goal, which a mark
/// that found live data past the goal has raised, `Shared::saw_live`), in
/// 1/1024ths, from a quarter to sixteen. Returns it. As the mark finds
/// live data past the pace goal, the goal rises, and the ratio follows it
/// down (`Shared::retune_assists`).
fn set_assist_ratio(shared: &Shared, gen: &Generations, expected: usize) -> u32 {
    // What `Shared::retune_assists` counts from. The mark's reports begin
    // after the mark is offered to its GC threads and assists (a pool job
    // published, the assist slot's mutex), which follows these stores, so
    // they read these; the ratio is zero until the store below.
    shared.assist_expected.store(expected, Ordering::Relaxed);
    shared.assist_goal.store(gen.goal, Ordering::Relaxed);
    let ratio = assist_ratio_for(
        expected,
        shared.pace_at(gen.goal.max(shared.pace_goal.load(Ordering::Relaxed))),
        shared.heap_used.load(Ordering::Relaxed),
    );
    shared.assist_ratio.store(ratio, Ordering::Relaxed);
    ratio
}

/// The assists' ratio for `expected` bytes of marking with the heap at
/// `used` and pacing beginning at `pace_at`: the marking over the headroom
/// (at least 1 MiB), in 1/1024ths, from a quarter to sixteen.
pub(crate) fn assist_ratio_for(expected: usize, pace_at: usize, used: usize) -> u32 {
    let headroom = pace_at.saturating_sub(used).max(1 << 20);
    (expected as u128 * 1024 / headroom as u128).clamp(256, 16 << 10) as u32
}

/// `Shared::retune_assists`' decision for a mark whose assists pay
/// `ratio`: the ratio for `expected` bytes of marking below a pace point
/// risen to `pace_at`, if it is lower. None for a ratio of zero (no mark,
/// or one that has ended), and never higher.
pub(crate) fn retuned_ratio(ratio: u32, expected: usize, pace_at: usize, used: usize) -> Option<u32> {
    let new = assist_ratio_for(expected, pace_at, used);
    (ratio != 0 && new < ratio).then_some(new)
}

/// Rounds of marking what the barriers shaded, with the mutators running,
/// before the last pause takes the rest.
const SHADED_ROUNDS: usize = 4;

/// Shaded objects few enough for the last pause to trace at once.
const SHADED_IN_PAUSE: usize = 64;

/// Pauses a mark's termination may take, each bounded by the pause budget
/// (or [`TERMINATION_MIN`], if longer), before the last one traces to the
/// end.
const TERMINATION_TRIES: u32 = 8;

/// What a termination pause may trace for at least, whatever the pause
/// budget: with a budget of zero (or a few µs) each stop's deadline had
/// passed before its first scan, and it handed everything back, so a
/// mark that ended in stops took seven that traced nothing before the
/// unbounded last one.
const TERMINATION_MIN: Duration = Duration::from_micros(50);

/// Raises the stop flag and waits for every mutator inside `mutate` to
/// leave; returns the mutators. With `gone`, first forgets the mutators
/// that are gone (detached, no root left), taking their remembered objects
/// and what their shade queues hold into it.
fn stop_world(shared: &Shared, mut gone: Option<&mut Vec<usize>>) -> Vec<Arc<MutatorShared>> {
    shared.handshake.stop_world(|| {
        let mut list = shared.mutators.lock();
        if let Some(remembered) = gone.as_deref_mut() {
            list.retain(|m| {
                let gone = m.detached.load(Ordering::Acquire) && Arc::strong_count(m) == 1;
                if gone {
                    m.take_remembered(remembered);
                    // Shaded after a ragged mark ended, as `gray` is taken
                    // at the start below.
                    m.take_shaded(remembered);
                }
                !gone
            });
        }
        list.clone()
    })
}

/// The roots as of now (world stopped, or after a ragged start's T, when
/// roots made since shade): every mutator's table and the
/// global one.
fn roots_of(shared: &Shared, mutators: &[Arc<MutatorShared>]) -> Vec<usize> {
    let mut roots = Vec::new();
    for m in mutators {
        m.roots.live_into(&mut roots);
    }
    let _walk = crate::runtime::Walk::begin(&shared.globals_walked);
    shared.globals.live_into(&mut roots);
    roots
}

/// A cycle under way: what its phases share, and what they measured for
/// the cycle's event.
struct Cycle<'a> {
    shared: &'a Shared,
    pool: &'a ThreadPool,
    forced: bool,
    /// Full (marks cleared, every page swept) or minor.
    full: bool,
    /// A minor cycle that measured the live size as a full one does
    /// (`resume`): the generations are rebased on it.
    measured: bool,
    /// The marks were cleared before the stop (phase 0), not in the pause.
    marks_cleared: bool,
    /// Time phase 0 took.
    mark_clear: Duration,
    /// When the first stop was asked for.
    start: Instant,
    heap_before: usize,
    /// The heap's seal epoch this cycle's stop raised (a `Pages` space),
    /// which the snapshot's copy is as of.
    seal: loam_heap::SealEpoch,
    /// Whether the snapshot is taken, and whether in a pause.
    snapped: bool,
    snap_in_pause: bool,
    /// What the heap held as the world stopped: the sweep frees from this,
    /// while the mutators allocate on top of it.
    heap_at_stop: usize,
    /// Weak cells registered as the mark began (those the cycle clears).
    weak_at_stop: usize,
    marked: mark::Marked,
    /// Whether the mark went on concurrently after the first pause.
    concurrent: bool,
    /// Whether the mark began without a stop (`ragged.rs`).
    ragged: bool,
    /// Waiting for mutators to leave `mutate`, over every stop.
    stop_time: Duration,
    snap_time: Duration,
    mark_time: Duration,
    /// The first pause (from the last mutator's leaving to the resume).
    mark_start_pause: Duration,
    /// The pauses that ended the mark, together, and each.
    mark_end_pause: Duration,
    end_pauses: Vec<Duration>,
    concurrent_mark: Duration,
    sweep_time: Duration,
    /// What mutators swept of it (`sweep::Helper::help`).
    swept_by_mutators: usize,
}

/// The mark's state between its phases.
struct Marking {
    /// The mutators of the last stop (or of a ragged start's T).
    mutators: Vec<Arc<MutatorShared>>,
    roots: Vec<usize>,
    /// Marked objects the first pause did not trace (none: the mark ended
    /// in it).
    gray: Vec<usize>,
    /// When the pause that ended a concurrent mark began.
    end_start: Option<Instant>,
}

/// Limits of a mark with the world stopped, until `deadline` if any.
fn stopped(deadline: Option<Instant>) -> mark::Limits<'static> {
    mark::Limits {
        concurrent: false,
        deadline,
        assists: None,
        threads: usize::MAX,
        progress: None,
    }
}

/// Limits of a mark with the mutators running: no deadline, and the
/// mutators' assists let in.
fn concurrently(shared: &Shared) -> mark::Limits<'_> {
    mark::Limits {
        concurrent: true,
        deadline: None,
        assists: Some(&shared.assist),
        threads: shared.config.concurrent_gc_threads(),
        progress: Some(shared),
    }
}

/// A cycle begun: its state, its runtime's mutators, and the objects the
/// mark starts from besides the roots (the remembered ones).
type Started<'a> = (Cycle<'a>, Vec<Arc<MutatorShared>>, Vec<usize>);

/// When a cycle's start began, and the heap then: a ragged start that has
/// to stop the world after all (`Cycle::start_ragged`) hands them to
/// `Cycle::stop`, whose stop time and start then count its wait.
struct Begun {
    start: Instant,
    heap_before: usize,
}

impl Begun {
    fn now(shared: &Shared) -> Begun {
        Begun {
            heap_before: shared.heap_used.load(Ordering::Relaxed),
            start: Instant::now(),
        }
    }
}

/// Runs one cycle (module docs), one phase a function. Returns its event,
/// and the lines that report what user code panicked in it, which the
/// caller prints once the cycle lock is let go.
pub(crate) fn cycle(
    shared: &Arc<Shared>,
    pool: &ThreadPool,
    forced: bool,
    gen: &mut Generations,
    snap: &mut Snapshot,
) -> (CycleEvent, Vec<String>) {
    let _one_at_a_time = crate::collector::lock_cycle();
    CYCLES.fetch_add(1, Ordering::Relaxed);
    // Dropped first: named until the lock goes.
    let _holder = crate::collector::Holder::set(shared);
    // Exited threads' heaps take back the runs earlier sweeps sent them, so
    // that the blocks are reused (live threads do it themselves, at each
    // `mutate`).
    loam_heap::drain_orphans();
    // 0. A full cycle in loam's pages clears the marks before it stops the
    // world, with the mutators running (`barrier.rs`, "Clearing the marks
    // with the mutators running").
    // Calls that begin from here on remember nothing: this cycle is full
    // (`calls::CLEARING`).
    let mark_clear = (matches!(shared.space, Space::Pages) && full_ahead(shared, forced, gen)).then(|| {
        shared.calls.set(CallState {
            clearing: true,
            ..shared.calls.now()
        });
        clear_marks_running(&shared.held_cpus)
    });
    // 1 – 3, raggedly where it may (`ragged.rs`), or with the world
    // stopped at the mark's start and end.
    let ragged = if ragged::eligible(shared, forced) {
        Cycle::start_ragged(shared, pool, mark_clear)
    } else {
        Err(Begun::now(shared))
    };
    let (mut c, mut m) = match ragged {
        Ok((mut c, mutators, remembered)) => {
            let m = c.mark_ragged(gen, mutators, &remembered, snap);
            (c, m)
        }
        Err(begun) => {
            let (mut c, mutators, remembered) = Cycle::stop(shared, pool, forced, gen, mark_clear, begun);
            if c.snapshot_in_pause() {
                c.snapshot(snap, true);
            }
            let mut m = c.mark_in_pause(mutators, &remembered);
            if c.concurrent {
                c.mark_concurrently(gen, &mut m, snap);
            }
            (c, m)
        }
    };
    // A ragged mark that ended without a stop cleared the weak cells as it
    // ended (`Cycle::terminate_ragged`); every other ends with the world
    // stopped.
    let stopped = !c.ragged || m.end_start.is_some();
    // A user's `Trace` impl panicked on a GC thread: the marks may miss
    // what it did not report, so nothing may be freed or cleared on their
    // word. This cycle sweeps nothing and clears no weak reference; the
    // next one is full (it clears the marks and starts over).
    let mark_failed = shared.trace_panicked(c.mark_epoch());
    if mark_failed {
        shared.lock_written.store(true, Ordering::Relaxed);
    } else {
        // 4. Verify.
        if shared.config.verify {
            if !stopped {
                // Verify mode checks a ragged mark in a stopped world.
                // Its pause begins once the world has stopped: the wait for
                // calls to return is the stop's (it counted as pause).
                let stop = Instant::now();
                m.mutators = stop_world(shared, None);
                c.stop_time += stop.elapsed();
                m.end_start = Some(Instant::now());
            }
            if c.ragged {
                m.roots = roots_of(shared, &m.mutators);
            }
            // It reads the copy: taken now if the mark ended in the first
            // pause (in the pause, then).
            c.snapshot(snap, true);
            let (full, concurrent) = (c.full, c.concurrent);
            verify(&shared.space, shared.id, snap, &m.roots, c.marked.objects, full, concurrent);
        }
        // 5. Weak references.
        if stopped {
            mark_weak(shared, c.weak_at_stop, c.full);
        }
    }
    let goal = c.resume(gen, m, mark_failed);
    // A cycle whose mark ended in the first pause: after it (a no-op if a
    // pause took the snapshot).
    c.snapshot(snap, false);
    let (swept, heap_after) = c.sweep(snap, mark_failed);
    if !c.full && !c.measured {
        // Everything the stopped heap held and the sweep left is marked:
        // old. (Less what a concurrent mark left unreachable on pages it
        // did not sweep, and plus the objects allocated during it that it
        // reached: both small. `heap_used` counts whole allocation chunks,
        // so this is high by the mutators' unused credit, at most 64 KiB
        // each.)
        gen.old = c.heap_at_stop.saturating_sub(swept.bytes);
    }
    c.event(gen, goal, &swept, heap_after)
}

impl<'a> Cycle<'a> {
    /// Phase 1, *stop*: waits for every mutator to leave `mutate`, takes the
    /// barrier's remembered objects, and decides full or minor.
    ///
    /// `mark_clear` is the time phase 0 took clearing the marks, if it ran:
    /// the cycle is then full, and the bits the barrier set since are
    /// cleared here.
    fn stop(
        shared: &'a Shared,
        pool: &'a ThreadPool,
        forced: bool,
        gen: &Generations,
        mark_clear: Option<Duration>,
        Begun { start, heap_before }: Begun,
    ) -> Started<'a> {
        let mut remembered = Vec::new();
        let mutators = stop_world(shared, Some(&mut remembered));
        let stop_time = start.elapsed();
        // With every call of this runtime ended and none begun: from the
        // resume on, each allocation seals its page before it sets a bit
        // there, so the snapshot can be taken after the pause. (A
        // `GlobalAlloc` space has no pages and no seal.)
        let seal = match shared.space {
            // SAFETY: under the process-wide cycle lock, which this cycle
            // holds until its sweep, after its walk: no other walk runs.
            Space::Pages => unsafe { loam_heap::SealEpoch::raise() },
            Space::Alloc(_) => loam_heap::SealEpoch::current(),
        };
        // Only now: until every mutator left, the barrier could add to these.
        for m in &mutators {
            m.take_remembered(&mut remembered);
        }
        // And what calls shaded after a ragged cycle's mark had ended
        // (`Cycle::terminate_ragged`): marked, not yet traced.
        shared.drain_shaded(&mut remembered);
        // What locks record from here on is the next cycle's (`cell.rs`);
        // no mark runs until the pause says so.
        let calls = shared.calls.now();
        shared.calls.set(CallState {
            marking: false,
            window: false,
            clearing: false,
            remember: calls.remember + 1,
        });
        // Full or minor: a `GcLock` write since the last pause forces a
        // full cycle (see `cell.rs`), and so do `collect` and the heap limit.
        let lock_written = shared.lock_written.swap(false, Ordering::Relaxed);
        let full = mark_clear.is_some()
            || forced
            || !shared.config.generational
            || lock_written
            || gen.full_due();
        if mark_clear.is_some() {
            // Every mark bit the barrier set since phase 0 cleared the
            // page is on a remembered list (`barrier.rs`, "Clearing the
            // marks with the mutators running"): with these cleared, no
            // object of this runtime is marked.
            for &o in &remembered {
                // SAFETY: a remembered object is allocated (it was
                // reachable after the last pause, and only this cycle's
                // sweep frees again), so its page is live.
                unsafe {
                    let page = loam_heap::PageRef::of(o as *const u8);
                    page.clear_mark(page.block_index(o as *const u8));
                }
            }
        }
        // What this mark finds counts towards the pace goal as it goes
        // (`Shared::saw_live`): in a full cycle, or a minor one with
        // nothing remembered, whose mark then finds only live objects.
        shared.live_seen.store(0, Ordering::Relaxed);
        shared
            .live_counting
            .store(full || remembered.is_empty(), Ordering::Relaxed);
        if full {
            remembered.clear();
        }
        let cycle = Cycle {
            forced,
            full,
            marks_cleared: mark_clear.is_some(),
            heap_at_stop: shared.heap_used.load(Ordering::Relaxed),
            weak_at_stop: shared.weak.lock().registered(),
            ..Cycle::new(shared, pool, start, heap_before, seal, stop_time, mark_clear)
        };
        (cycle, mutators, remembered)
    }

    /// A cycle begun at `start`, its measures at zero: minor, not forced,
    /// stopped, with nothing recorded at its stop yet (callers set what
    /// differs).
    fn new(
        shared: &'a Shared,
        pool: &'a ThreadPool,
        start: Instant,
        heap_before: usize,
        seal: loam_heap::SealEpoch,
        stop_time: Duration,
        mark_clear: Option<Duration>,
    ) -> Self {
        Cycle {
            shared,
            pool,
            forced: false,
            full: false,
            measured: false,
            marks_cleared: false,
            mark_clear: mark_clear.unwrap_or_default(),
            start,
            heap_before,
            seal,
            snapped: false,
            snap_in_pause: false,
            heap_at_stop: 0,
            weak_at_stop: 0,
            marked: mark::Marked::default(),
            concurrent: false,
            ragged: false,
            stop_time,
            snap_time: Duration::ZERO,
            mark_time: Duration::ZERO,
            mark_start_pause: Duration::ZERO,
            mark_end_pause: Duration::ZERO,
            end_pauses: Vec::new(),
            concurrent_mark: Duration::ZERO,
            sweep_time: Duration::ZERO,
            swept_by_mutators: 0,
        }
    }

    /// Whether the snapshot must be taken in the first pause: a full
    /// cycle whose marks were not cleared before the stop clears them in
    /// it, and a `GlobalAlloc` space's registry has no seal.
    fn snapshot_in_pause(&self) -> bool {
        (self.full && !self.marks_cleared) || matches!(self.shared.space, Space::Alloc(_))
    }

    /// The clock readings a concurrent mark's time leaves out: what the
    /// cycle has spent waiting for calls and stopping the world
    /// (`stop_time`) and taking the snapshot (`snap_time`), each counted
    /// in a field of its own. Read as the mark begins, and given back to
    /// [`mark_time_since`](Self::mark_time_since) as it ends.
    fn not_marking(&self) -> Duration {
        self.stop_time + self.snap_time
    }

    /// The concurrent part of a mark begun at `start`, when the cycle had
    /// spent `not_marking` elsewhere (`Cycle::not_marking`), whose pauses
    /// marked for `pause_mark`: its time less those pauses' marking, the
    /// waits for calls and stops and the snapshot taken meanwhile.
    fn mark_time_since(&self, start: Instant, not_marking: Duration, pause_mark: Duration) -> Duration {
        start
            .elapsed()
            .saturating_sub(pause_mark)
            .saturating_sub(self.not_marking().saturating_sub(not_marking))
    }

    /// Phase 2, *snapshot*: what the sweep will look at, as of the stop.
    /// Taken once, in the first pause or after it (`in_pause` says which).
    fn snapshot(&mut self, snap: &mut Snapshot, in_pause: bool) {
        if self.snapped {
            return;
        }
        let snap_start = Instant::now();
        match &self.shared.space {
            Space::Pages => snapshot_pages(
                snap,
                self.full,
                self.full && !self.marks_cleared,
                self.seal,
                (!in_pause).then_some(&self.shared.held_cpus),
            ),
            Space::Alloc(space) => {
                if self.full {
                    // The snapshot clears the marks (a new epoch), in the
                    // pause, before the mark: counted for card takes.
                    MARK_CLEARS.fetch_add(1, Ordering::Relaxed);
                }
                snap.objects = Some(space.snapshot(self.full));
            }
        }
        self.snap_time = snap_start.elapsed();
        self.snapped = true;
        self.snap_in_pause = in_pause;
    }

    /// Phase 3, *mark* in the pause up to its budget; what is left gray goes on
    /// concurrently.
    fn mark_in_pause(&mut self, mutators: Vec<Arc<MutatorShared>>, remembered: &[usize]) -> Marking {
        let shared = self.shared;
        let roots = roots_of(shared, &mutators);
        let mark_start = Instant::now();
        // The budget counts from the stop: a large heap's snapshot takes
        // milliseconds of it.
        let deadline = shared
            .config
            .concurrent
            .then(|| (self.start + self.stop_time).checked_add(shared.config.mark_pause_budget))
            .flatten();
        let mut gray = Vec::new();
        // In a full cycle no object of this runtime is marked (phase 0 and
        // the stop cleared the marks, or the snapshot in this pause did);
        // in a minor one every object a marked object points to
        // is marked or in `remembered` (the barrier and the last cycle saw
        // to it). Remembered objects were reachable after the last pause,
        // and only this cycle's sweep frees again, so they are allocated.
        // SAFETY: world stopped; the marks invariant above; roots and
        // remembered objects are allocated objects of this runtime.
        self.marked = unsafe {
            mark::parallel(
                &shared.space,
                self.pool,
                &roots,
                remembered,
                stopped(deadline),
                &mut gray,
            )
        };
        self.mark_time = mark_start.elapsed();
        self.concurrent = !gray.is_empty();
        // Before the resume: a mutator over the old pace point then sees
        // what the pause found.
        shared.saw_live(self.marked.bytes);
        Marking {
            mutators,
            roots,
            gray,
            end_start: None,
        }
    }

    /// Phase 3b, *concurrent mark* with the mutators running, then 3c: end the mark in
    /// bounded pauses (`terminate`). Returns with the world stopped.
    fn mark_concurrently(&mut self, gen: &Generations, m: &mut Marking, snap: &mut Snapshot) {
        let shared = self.shared;
        // From the resume on, every `mutate` call shades what its barriers
        // overwrite and store, and what its weak upgrades hand out; the
        // markers trace those too. The epoch before the word
        // (`calls.rs`).
        shared.calls.next_epoch();
        shared.calls.set(CallState {
            marking: true,
            ..shared.calls.now()
        });
        shared.control.lock().phase = Phase::Mark;
        // Read the clock before resuming (here and below): the woken
        // mutators may take both cores before this thread reads it again
        // (a scheduler slice, 4 ms, counted as pause before this).
        self.mark_start_pause = self.start.elapsed() - self.stop_time;
        m.mutators.clear();
        shared.handshake.resume();
        let conc_start = Instant::now();
        let not_marking = self.not_marking();
        // Mutators that allocate during the mark pay for it in marking
        // work (`Mutator::assist`), so that the mark ends before the heap
        // reaches where pacing begins (twice its goal, or less under a
        // limit) even when the GC threads get little CPU: the work
        // expected (the live size, less what the pause marked) over the
        // headroom left, in 1/1024ths.
        let expected = if self.full {
            gen.live.saturating_sub(self.marked.bytes)
        } else {
            self.marked.bytes
        }
        .max(1 << 20);
        let ratio = set_assist_ratio(shared, gen, expected);
        let mut rest = Vec::new();
        // `parallel`'s marks invariant holds in its concurrent form: every
        // object a marked object points to is marked, queued here, or
        // shaded into `shared.gray` or a mutator's shade queue
        // (`Shared::drain_shaded`), which later rounds and the last pause
        // trace.
        // SAFETY: `gray` holds marked, allocated objects the pause did not
        // trace; no sweep runs until this cycle's; mutators run behind the
        // snapshot barrier; the invariant as just said.
        let marked = unsafe {
            mark::parallel(&shared.space, self.pool, &[], &m.gray, concurrently(shared), &mut rest)
        };
        self.marked.add(marked);
        // The snapshot, unless the pause took it, now that the mutators
        // run (they seal what they allocate in first): after the
        // concurrent rounds, so that a mutator paced at the resume finds
        // the mark to help with at once instead of waiting out a walk of
        // the pages (the young ones in a minor cycle; 1 – 2 ms of 300 MB in
        // a full one), and before the pauses that end the mark: verify
        // mode reads it there. The walk copies allocated bits and the mark
        // sets mark bits, so neither needs the other done.
        self.snapshot(snap, false);
        let pause_mark = self.terminate(ratio, rest, m);
        self.concurrent_mark = self.mark_time_since(conc_start, not_marking, pause_mark);
        self.mark_time += self.concurrent_mark + pause_mark;
        // The roots verify mode checks against: those of the world as it
        // stands now.
        if shared.config.verify {
            m.roots = roots_of(shared, &m.mutators);
        }
    }

    /// Phase 3c, *termination*, bounded: marks what the barriers shaded in
    /// concurrent rounds, each a batch taken whole (the rounds end however
    /// fast the mutators shade: one mark that also drained the queue as it
    /// went could be kept busy for ever), then stops and traces what is
    /// left for at most the pause budget. What a batch of shaded objects
    /// leads to can be anything up to the whole young heap, so a pause
    /// that traced it to the end had no bound. If the budget runs out, the
    /// rest goes back, the mutators resume (the barriers are still on:
    /// `marking` has not changed) and the rounds go on; the mutators that
    /// keep shading pay for it in assists. After `TERMINATION_TRIES`
    /// pauses the last one traces to the end, so the mark always ends.
    /// Returns the time the pauses marked, the world stopped and
    /// `marking` off.
    fn terminate(&mut self, ratio: u32, mut rest: Vec<usize>, m: &mut Marking) -> Duration {
        let shared = self.shared;
        let mut shaded = Vec::new();
        let mut pause_mark = Duration::ZERO;
        let mut tries = 0;
        loop {
            for _ in 0..SHADED_ROUNDS {
                shared.drain_shaded(&mut shaded);
                // Objects whose lock a writer held as a marker met it:
                // traced again, as the writer may store what its owner was
                // never recorded for (`cell.rs`, "Recording the object
                // written").
                shaded.append(&mut rest);
                if shaded.len() <= SHADED_IN_PAUSE {
                    break;
                }
                let batch = std::mem::take(&mut shaded);
                // SAFETY: shaded objects are marked and allocated
                // (reachable when shaded, and no sweep runs); the
                // invariant as in `mark_concurrently`.
                let marked = unsafe {
                    mark::parallel(&shared.space, self.pool, &[], &batch, concurrently(shared), &mut rest)
                };
                self.marked.add(marked);
            }
            let stop = Instant::now();
            shared.assist_ratio.store(0, Ordering::Relaxed);
            shared.control.lock().phase = Phase::MarkTermination;
            m.mutators = stop_world(shared, None);
            self.stop_time += stop.elapsed();
            let end = Instant::now();
            shared.drain_shaded(&mut shaded);
            shaded.append(&mut rest);
            tries += 1;
            let deadline = (tries < TERMINATION_TRIES)
                .then(|| end.checked_add(shared.config.mark_pause_budget.max(TERMINATION_MIN)))
                .flatten();
            let mark_start = Instant::now();
            let batch = std::mem::take(&mut shaded);
            // SAFETY: world stopped; shaded objects are marked and
            // allocated; the invariant as in `mark_concurrently`.
            let marked = unsafe {
                mark::parallel(
                    &shared.space,
                    self.pool,
                    &[],
                    &batch,
                    stopped(deadline),
                    &mut rest,
                )
            };
            self.marked.add(marked);
            shared.saw_live(marked.bytes);
            pause_mark += mark_start.elapsed();
            if rest.is_empty() {
                m.end_start = Some(end);
                shared.calls.set(CallState {
                    marking: false,
                    ..shared.calls.now()
                });
                return pause_mark;
            }
            // Not done within the budget: resume and mark on (`rest` holds
            // the gray objects the pause left, marked and untraced).
            m.mutators.clear();
            shared.assist_ratio.store(ratio, Ordering::Relaxed);
            // As it follows the pace goal (`Shared::retune_assists`).
            shared.retune_assists(shared.pace_goal.load(Ordering::Relaxed));
            shared.control.lock().phase = Phase::Mark;
            let d = end.elapsed();
            self.mark_end_pause += d;
            self.end_pauses.push(d);
            shared.handshake.resume();
        }
    }

    /// Phase 6, *resume*: the generations and the next goal from what the mark
    /// found, then the world goes on. Returns the goal.
    fn resume(&mut self, gen: &mut Generations, m: Marking, mark_failed: bool) -> usize {
        let shared = self.shared;
        if mark_failed {
            // The generations as they were: the next, full cycle measures.
        } else if self.full || (gen.started && gen.old == 0) {
            // A minor cycle over an empty old generation (the last full
            // cycle found nothing live, and nothing was promoted since)
            // began with no object marked: its mark traced everything
            // reachable, as a full cycle's does, and measures the live
            // size as well. Taken for a full one here, the full cycle
            // that its promotion would make due at once (old past half
            // the headroom of a goal set for nothing live) does not mark
            // the same objects again: at binary-trees depth 21 the
            // long-lived tree, 96 MB, which the program builds from the
            // minimum heap.
            self.measured = true;
            gen.rebase(self.marked.bytes, &shared.config);
            gen.started = true;
        } else {
            // The sweep corrects this (`cycle`); the trigger needs it now.
            // What a minor cycle marks is not all live: the barrier marked
            // every young object stored into a cell, and a later store may
            // have cut it off again. So promoted bytes only ever bring the
            // next full cycle closer (`full_due`); they never re-base the
            // goal, or a program that stores a fresh structure over the
            // last one in every call would double its heap every cycle on
            // promoted garbage.
            gen.old = gen.old.saturating_add(self.marked.bytes);
        }
        // With room for the mutators' credit (`Shared::credited`).
        let goal = shared.credited(gen.goal);
        // Until the sweep has taken its garbage off `heap_used`, the
        // trigger counts from the heap as the mark ended: the next cycle
        // is asked for once `goal - old` bytes were allocated since, about
        // as it would be after the sweep. (Setting `goal` itself here would ask
        // for a second cycle at once whenever mutators allocate during the
        // sweep.) The sweep takes its garbage off as it goes, claim by
        // claim (`Shared::sweep_freed`), so during the sweep this asks a
        // little later than that; no cycle can begin before the sweep
        // ends anyway, and then the trigger is set from the goal (`event`,
        // `Generations::trigger_lead`).
        let heap_at_end = shared.heap_used.load(Ordering::Relaxed);
        // The runway, from a cycle that ended its mark past the trigger:
        // a forced one, which can begin anywhere, measures nothing.
        let trigger = shared.next_goal.load(Ordering::Relaxed);
        if !self.forced && heap_at_end > trigger {
            gen.note_runway(heap_at_end - trigger);
        }
        // Large objects made since count towards the next large-object
        // trigger (`Mutator::count_large`), which stays off until this
        // cycle's sweep has said whether it found large ones dead (`event`):
        // armed by the last cycle's, it asked during this sweep for a cycle
        // that nothing withdrew once the sweep found none.
        shared.large_since.store(0, Ordering::Relaxed);
        shared.large_armed.store(false, Ordering::Relaxed);
        shared.next_goal.store(
            heap_at_end.saturating_add(goal.saturating_sub(gen.old)),
            Ordering::Relaxed,
        );
        // A full cycle's goal counts everything its mark found; a minor
        // one keeps what its mark (or an earlier minor one's) raised the
        // pace goal to (`Shared::saw_live`).
        shared.live_counting.store(false, Ordering::Relaxed);
        if self.full && !mark_failed {
            shared.pace_goal.store(goal, Ordering::Relaxed);
        } else {
            shared.pace_goal.fetch_max(goal, Ordering::Relaxed);
        }
        // What the sweep will free, at most: the heap as the world stopped
        // (in blocks) less the old generation, now counting what this mark
        // kept (a full cycle's is all it marked), counted twice: marks
        // count object sizes, and a live object's block is at most twice
        // its size (a 16-byte block for an 8-byte header with nothing
        // after it). Less the mutators' unspent credit, which the heap
        // counts and no object holds. So this never promises more than the
        // sweep frees. None if the mark failed, nor in a `GlobalAlloc`
        // space (an object's charge there includes a prefix the marks do
        // not count).
        let frees = if mark_failed || matches!(shared.space, Space::Alloc(_)) {
            0
        } else {
            self.heap_at_stop
                .saturating_sub(gen.old.saturating_mul(2))
                .saturating_sub(shared.credit_slack().max(crate::mutator::CHUNK))
        };
        shared.sweep_frees.store(frees, Ordering::Relaxed);
        // Under the mutex that sets the phase: the mutators that pacing
        // holds wake to a sweep that may let them go on (`Shared::pace`).
        {
            let mut c = shared.control.lock();
            c.phase = Phase::Sweep;
            shared.control_cv_notify(c);
        }
        // A pause is a stopped world: from the last mutator's leaving to
        // the resume. Waiting for the mutators to leave is reported apart,
        // as `stop`: they run meanwhile, and a mutator that enters during
        // it waits that long at most.
        match m.end_start {
            Some(end) => {
                let d = end.elapsed();
                self.mark_end_pause += d;
                self.end_pauses.push(d);
            }
            // A ragged mark that ended without a stop paused nothing.
            None if self.ragged => {}
            None => self.mark_start_pause = self.start.elapsed() - self.stop_time,
        }
        drop(m.mutators);
        shared.handshake.resume();
        goal
    }

    /// Phase 7, *sweep* the snapshot, the mutators running. Returns what it freed
    /// and the heap after.
    fn sweep(&mut self, snap: &mut Snapshot, mark_failed: bool) -> (sweep::Swept, usize) {
        let shared = self.shared;
        let sweep_start = Instant::now();
        if mark_failed {
            snap.pages.clear();
            snap.ranges.clear();
        }
        let (swept, finalizing) = match (&shared.space, snap.objects.take()) {
            (Space::Alloc(space), Some(objects)) if mark_failed => {
                space.restore(objects);
                (sweep::Swept::default(), Vec::new())
            }
            // SAFETY: this cycle's snapshot, marks complete, under the
            // cycle lock.
            (Space::Alloc(space), Some(objects)) => unsafe {
                space.sweep(self.pool, objects, shared.id, shared.config.verify)
            },
            _ => {
                // After the seal this cycle's start raised, on this thread.
                let alone = crate::collector::RUNTIMES.alone_since_seal();
                // SAFETY: the snapshot's pages, with their allocated words
                // as of the pause (less the runs out); marks complete;
                // under the cycle lock; `alone` read after the seal
                // (`runtime_count.rs`); swept only through `work`.
                let work = Arc::new(unsafe {
                    sweep::Work::new(
                        (
                            std::mem::take(&mut snap.pages),
                            std::mem::take(&mut snap.ranges),
                            std::mem::take(&mut snap.bits),
                        ),
                        shared.id,
                        alone,
                        shared.config.verify,
                    )
                });
                // Mutators that pacing holds sweep too (`Mutator::pace`).
                shared.offer_sweep(&work);
                let (mut swept, mut finalizing) = sweep::parallel(
                    self.pool,
                    &work,
                    &|bytes| shared.sweep_freed(bytes),
                    &|| {
                        shared.held_cpus.step_aside();
                    },
                );
                shared.withdraw_sweep();
                let (helped, mut helpers_finalizing, vecs) = work.wait_for_helpers();
                self.swept_by_mutators = helped.bytes;
                swept.add(helped);
                finalizing.append(&mut helpers_finalizing);
                if let Some((pages, ranges, bits)) = vecs {
                    (snap.pages, snap.ranges, snap.bits) = (pages, ranges, bits);
                }
                (swept, finalizing)
            }
        };
        self.sweep_time = sweep_start.elapsed();
        // The dead objects with destructors count in the finalizer's
        // backlog from here (`submit`), and only then come off the heap's
        // count, so that the two together never fall short of what the
        // heap holds: a mutator at the heap limit counts both, and took
        // the room of objects on their way to the finalizer (25 MB under
        // a 16 MiB limit in `tests/drops_brake.rs`). The pages' sweep took
        // the rest of what it freed off as it went; a `GlobalAlloc`
        // space's takes all of it off now.
        shared.finalizer.submit(finalizing);
        shared.sweep_freed(match shared.space {
            Space::Alloc(_) => swept.bytes,
            Space::Pages => swept.held,
        });
        shared.sweep_frees.store(0, Ordering::Relaxed);
        (swept, shared.heap_used.load(Ordering::Relaxed))
    }

    /// The epoch of this cycle's mark, if calls ran beside it (0 if
    /// not). Calls' shading panics count for the mark they were for: one
    /// of an earlier mark's calls, run on past that mark's end, is
    /// reported with this cycle but fails none (read as this mark's, it
    /// made the runtime's last cycle sweep nothing, and every object was
    /// left behind for good). Calls shade only in a mark that ran beside
    /// them, which raised the epoch (under the cycle lock: this cycle's).
    fn mark_epoch(&self) -> u64 {
        if self.ragged || self.concurrent {
            self.shared.calls.mark_epoch()
        } else {
            0
        }
    }

    /// The statistics and the event: under the cycle lock still, so that
    /// the panics logged are this cycle's. Their report's lines come back
    /// beside the event, for the coordinator to print once it holds no
    /// lock (stderr may block).
    fn event(
        self,
        gen: &Generations,
        goal: usize,
        swept: &sweep::Swept,
        heap_after: usize,
    ) -> (CycleEvent, Vec<String>) {
        let shared = self.shared;
        // The garbage is off `heap_used` now (first, so that the lower
        // trigger never meets the unswept count): the trigger is the
        // runway below the goal (`Generations::trigger_lead`), counted from
        // the goal with the mutators' credit as `resume` took it.
        let trigger = goal.saturating_sub(gen.trigger_lead(&shared.config));
        shared.next_goal.store(trigger, Ordering::Relaxed);
        // Large objects ask for cycles of their own while cycles find them
        // dead (`Mutator::count_large`).
        shared
            .large_armed
            .store(swept.large_bytes >= shared.large_budget() / 2, Ordering::Relaxed);
        let when = format!("cycle {}", shared.stats.lock().cycles + 1);
        let (mut panics, mut panic_lines) = crate::panics::cycle_log().take_report(&when);
        let (shades, shade_lines) = shared.shade_panics.take_report_for_mark(&when, self.mark_epoch());
        panics += shades;
        panic_lines.extend(shade_lines);
        let pause = self.mark_start_pause + self.mark_end_pause;
        let event = {
            let mut stats = shared.stats.lock();
            stats.user_panics += panics;
            stats.cycles += 1;
            stats.minor_cycles += u64::from(!self.full);
            if !self.ragged {
                stats.pauses.record(self.mark_start_pause);
            }
            if self.concurrent {
                for &d in &self.end_pauses {
                    stats.pauses.record(d);
                }
                stats.concurrent_cycles += 1;
            }
            if self.ragged {
                stats.ragged_cycles += 1;
            }
            stats.mark_time += self.mark_time;
            stats.sweep_time += self.sweep_time;
            stats.bytes_marked += self.marked.bytes as u64;
            stats.bytes_freed += swept.bytes as u64;
            stats.objects_freed += swept.objects;
            stats.bytes_swept_by_mutators += self.swept_by_mutators as u64;
            stats.live_size = gen.live;
            stats.next_goal = trigger;
            stats.goal = goal;
            let held = shared.holds.take_since_event();
            let event = CycleEvent {
                cycle: stats.cycles,
                at: self.start.duration_since(shared.started),
                forced: self.forced,
                // Set by the coordinator, which knows why it began.
                large_objects: false,
                minor: !self.full,
                concurrent: self.concurrent,
                ragged: self.ragged,
                pause,
                mark_start_pause: self.mark_start_pause,
                mark_end_pause: self.mark_end_pause,
                mark_clear: self.mark_clear,
                stop: self.stop_time,
                snapshot: self.snap_time,
                snapshot_concurrent: !self.snap_in_pause,
                mark: self.mark_time,
                concurrent_mark: self.concurrent_mark,
                sweep: self.sweep_time,
                heap_before: self.heap_before,
                heap_after,
                bytes_marked: self.marked.bytes,
                objects_marked: self.marked.objects,
                bytes_freed: swept.bytes,
                objects_freed: swept.objects,
                bytes_swept_by_mutators: self.swept_by_mutators,
                next_goal: trigger,
                goal,
                pace_goal: shared.pace_goal.load(Ordering::Relaxed),
                old_bytes: gen.old,
                gc_threads: self.pool.current_num_threads(),
                mutator_pauses: held.count,
                mutator_pause_max: held.max,
                mutator_pause_total: held.total,
            };
            stats.last = Some(event.clone());
            event
        };
        // The trace line is written by the coordinator once this cycle
        // has let go of the cycle lock (`collector.rs`), as are these.
        (event, panic_lines)
    }
}

/// Clears the weak cells of the first `upto` young ones (those registered
/// as the mark began; every one, `usize::MAX`, in a ragged cycle, whose
/// marks shade the cells made during it), and of the old ones in a `full`
/// cycle, whose target is unmarked (see `weak::WeakCells`). With the world
/// stopped, or at a ragged mark's end under the weak gate's write lock
/// (`ragged.rs`).
fn mark_weak(shared: &Shared, upto: usize, full: bool) {
    let _walk = crate::runtime::Walk::begin(&shared.weak_walked);
    let mut cells = shared.weak.lock();
    // Every registered cell, and every nonzero target, is an allocated
    // object of this runtime (cells are forgotten once unmarked, targets
    // cleared once unmarked, both before the sweep that frees them; old
    // cells processed after any mark clear); the mark is complete; mark
    // bits are atomic, and no upgrade shades meanwhile (world stopped, or
    // the weak gate held).
    let clears = MARK_CLEARS.load(Ordering::Relaxed);
    // SAFETY: as just said.
    cells.process(upto, full, clears, |addr| unsafe { shared.space.is_marked(addr) });
}

/// Verify mode: the parallel marks must equal a single-threaded re-mark
/// (in a minor cycle, cover it: old garbage stays marked).
fn verify(
    space: &Space,
    id: u16,
    snap: &Snapshot,
    roots: &[usize],
    marked_objects: u64,
    full: bool,
    concurrent: bool,
) {
    // SAFETY: world stopped, mark complete.
    let reachable = unsafe { mark::reachable(roots) };
    // Reachable objects and snapshot objects are allocated (nothing is
    // freed before the sweep); the world is stopped.
    // SAFETY: as just said, for every `marked` below.
    let marked = |addr: usize| unsafe { space.is_marked(addr) };
    // Objects allocated during a concurrent mark may be unmarked (they are
    // not the sweep's), and garbage made during it may float marked: what
    // must hold is that the sweep frees nothing reachable, that is, that
    // every reachable object in its snapshot is marked.
    if concurrent {
        if let Some(objects) = &snap.objects {
            // A `GlobalAlloc` space: its registry snapshot.
            for addr in objects.addresses() {
                if reachable.contains(&addr) && !marked(addr) {
                    fatal(&format!(
                        "verify: reachable object {addr:#x} was not marked by the concurrent mark"
                    ));
                }
            }
            return;
        }
        // The pages: their copy of the allocated bits.
        let index = snap.index();
        for &addr in &reachable {
            // SAFETY: reachable, so allocated, and its page live.
            let swept = unsafe { snap.holds(&index, addr) };
            // SAFETY: as just said.
            let page = unsafe { loam_heap::PageRef::of(addr as *const u8) };
            let b = page.block_index(addr as *const u8);
            if swept && !page.is_marked(b) {
                fatal(&format!(
                    "verify: reachable object {addr:#x} was not marked by the concurrent mark"
                ));
            }
        }
        return;
    }
    for &addr in &reachable {
        if !marked(addr) {
            fatal(&format!("verify: reachable object {addr:#x} was not marked"));
        }
    }
    if !full {
        return;
    }
    if marked_objects != reachable.len() as u64 {
        fatal(&format!(
            "verify: the markers marked {marked_objects} objects, {} are reachable",
            reachable.len()
        ));
    }
    // Every marked object must be reachable: in a `GlobalAlloc` space, every
    // one of its snapshot.
    if let Some(objects) = &snap.objects {
        for addr in objects.addresses() {
            if marked(addr) && !reachable.contains(&addr) {
                fatal(&format!("verify: unreachable object {addr:#x} was marked"));
            }
        }
        return;
    }
    // In the snapshot's pages (a page whose every allocated block was in
    // a run out, a finalizer's held ones included, is not among them: its
    // owner may release it even now; the count above covers it).
    for &start in &snap.pages {
        // SAFETY: a snapshot page holds allocated objects, out of any run,
        // that only a sweep frees, so it is live.
        let page = unsafe { loam_heap::PageRef::of(start as *const u8) };
        let base = page.start() as usize;
        for w in 0..page.bitmap_words() {
            let mut live = page.allocated_word(w) & page.mark_word(w);
            while live != 0 {
                let b = live.trailing_zeros() as usize;
                live &= live - 1;
                let addr = base + (w * 64 + b) * page.block_size();
                // SAFETY: allocated.
                let (_, owner) = unsafe { crate::gc::header_of(addr) };
                if owner == id && !reachable.contains(&addr) {
                    fatal(&format!("verify: unreachable object {addr:#x} was marked"));
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A mark that expected 96 MiB of marking, begun with the heap at
    /// 117 MiB over the pace point of a 32 MiB goal (64 MiB), pays the
    /// highest ratio; once it has found 96 MiB live (a 192 MiB goal, 384
    /// MiB pace point) the headroom of 267 MiB asks about a third.
    #[test]
    fn the_assist_ratio_follows_the_pace_point_down_only() {
        let mib = 1 << 20;
        let start = assist_ratio_for(96 * mib, 64 * mib, 117 * mib);
        assert_eq!(start, 16 << 10);
        let now = retuned_ratio(start, 96 * mib, 384 * mib, 117 * mib).unwrap();
        assert_eq!(now, 368);
        // A heap that grew since asks for more, which is left to pacing.
        assert_eq!(retuned_ratio(now, 96 * mib, 384 * mib, 380 * mib), None);
        // A finished mark's zero stays; the floor is a quarter.
        assert_eq!(retuned_ratio(0, 96 * mib, 384 * mib, 117 * mib), None);
        assert_eq!(assist_ratio_for(mib, 1 << 40, 0), 256);
    }

    /// The trigger sits the runway below the goal, no lower than halfway
    /// from the live size, nor than the minimum heap; the runway is the
    /// smaller of the last two measures.
    #[test]
    fn the_trigger_leaves_the_runway_below_the_goal() {
        let mib = 1 << 20;
        let config = crate::options::Config {
            min_heap: 32 * mib,
            ..Default::default()
        };
        let mut gen = Generations::default();
        gen.rebase(96 * mib, &config);
        gen.started = true;
        assert_eq!(gen.goal, 192 * mib);
        let trigger = |gen: &Generations| gen.goal - gen.trigger_lead(&config);
        assert_eq!(trigger(&gen), 192 * mib, "no runway yet");
        gen.note_runway(30 * mib);
        assert_eq!(trigger(&gen), 192 * mib, "one long runway alone");
        gen.note_runway(30 * mib);
        assert_eq!(trigger(&gen), 162 * mib);
        gen.note_runway(10 * mib);
        assert_eq!(trigger(&gen), 182 * mib, "a shorter one at once");
        gen.note_runway(200 * mib);
        assert_eq!(trigger(&gen), 182 * mib);
        gen.note_runway(200 * mib);
        assert_eq!(trigger(&gen), 144 * mib, "halfway from the live size");
        // A goal at the minimum heap is its own trigger.
        gen.rebase(4 * mib, &config);
        assert_eq!(trigger(&gen), 32 * mib);
        // The goal off.
        let off = crate::options::Config {
            gc_percent: u32::MAX,
            ..config
        };
        gen.rebase(96 * mib, &off);
        assert_eq!(gen.trigger_lead(&off), 0);
    }
}
