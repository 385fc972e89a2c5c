//! The collector: a coordinator thread that runs each cycle, and the GC
//! threads (a `loam-threadpool` pool) that mark and sweep in parallel.
//!
//! A cycle:
//! 1. *Stop*: raise the handshake's stop flag and wait for every mutator
//!    inside `mutate` to leave (mutators outside are blocked: they hold no
//!    pointer the collector cannot see).
//! 2. *Snapshot*: walk the heap's pages; for each with an allocated bit set,
//!    clear its marks (full cycles only) and copy its allocated bits for the
//!    sweep (objects allocated after the pause are then not the sweep's
//!    business). Minor cycles skip the pages the sweep flagged old, and
//!    every cycle those with a page run out.
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
//! 7. *Sweep* the snapshot pages in parallel, mutators running; pages
//!    whose dead objects have drop glue go to the finalizer thread
//!    (`finalize.rs`), which hands them back after the destructors ran.
//! 8. Outside the cycle lock: a forced cycle that skipped pages waiting for
//!    the finalizer runs again once it is done (the last cycle of a runtime
//!    also waits for runs out to the thread dropping it); then the
//!    `on_cycle` hook, once per cycle run, contained; then the cycle counts
//!    as complete.
//!
//! The side bitmaps belong to the heap's pages, which every runtime in the
//! process shares, so one cycle runs at a time process-wide (`CYCLE_LOCK`):
//! a cycle clears marks that another runtime's objects carry too.

use crate::mark;
use crate::space::Space;
use crate::mutator::MutatorShared;
use crate::runtime::{release_id, Phase, Shared};
use crate::stats::CycleEvent;
use crate::sweep;
use loam_threadpool::{ThreadPool, ThreadPoolBuilder};
use parking_lot::Mutex;
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One cycle at a time, process-wide (module docs).
static CYCLE_LOCK: Mutex<()> = Mutex::new(());

/// Runtimes alive whose objects live in loam's pages, changed only under
/// `CYCLE_LOCK`: while a cycle runs with it at 1, no other runtime has
/// objects in a page, so the sweep need not read headers to tell them
/// apart. (A runtime over a `GlobalAlloc` has none there: counting it made
/// every page sweep beside it read every header.)
static RUNTIMES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The runtime whose GC pool thread this is (0: none). A pool thread
    /// runs user code (destructors, `Trace` impls) only inside a cycle,
    /// with the process-wide cycle lock held by its coordinator.
    static GC_THREAD_OF: Cell<u16> = const { Cell::new(0) };
    /// The runtime whose coordinator this is (0: none). A coordinator runs
    /// user code (the `on_cycle` hook) only between cycles, with no lock.
    static COORDINATOR_OF: Cell<u16> = const { Cell::new(0) };
    /// The runtime whose finalizer thread this is (0: none). It runs
    /// destructors, holding no lock a cycle needs.
    static FINALIZER_OF: Cell<u16> = const { Cell::new(0) };
}

/// Whether the calling thread is a GC pool thread or a coordinator of any
/// runtime.
pub(crate) fn on_gc_thread() -> bool {
    GC_THREAD_OF.with(|c| c.get() != 0)
        || COORDINATOR_OF.with(|c| c.get() != 0)
        || FINALIZER_OF.with(|c| c.get() != 0)
}

/// Whether the calling thread is the finalizer of runtime `id`: waiting for
/// its drops would wait for itself.
pub(crate) fn is_finalizer_of(id: u16) -> bool {
    FINALIZER_OF.with(|c| c.get() == id)
}

/// Whether the calling thread is a GC pool thread of any runtime: it runs
/// inside a cycle, and anything that waits for a cycle (of any runtime:
/// they take turns under one lock) would wait for itself.
pub(crate) fn in_cycle_thread() -> bool {
    GC_THREAD_OF.with(|c| c.get() != 0)
}

/// Whether the calling thread is the coordinator of runtime `id`: waiting
/// for that runtime's next cycle would wait for itself.
pub(crate) fn is_coordinator_of(id: u16) -> bool {
    COORDINATOR_OF.with(|c| c.get() == id)
}

/// Aborts with a `loam:` message: the collector found the heap inconsistent.
#[cold]
pub(crate) fn fatal(msg: &str) -> ! {
    // Not `eprintln!`, which panics when stderr is gone.
    let _ = writeln!(std::io::stderr(), "loam: {msg}");
    std::process::abort()
}

/// Starts the coordinator thread (which owns the GC threads).
pub(crate) fn start(shared: Arc<Shared>) -> JoinHandle<()> {
    let id = shared.id;
    {
        // Not while a cycle runs: it may be sweeping without reading headers.
        let _cycle = CYCLE_LOCK.lock();
        if shared.space.alloc_space().is_none() {
            RUNTIMES.fetch_add(1, Ordering::Relaxed);
        }
    }
    let pool = ThreadPoolBuilder::new()
        .num_threads(shared.config.gc_threads)
        .thread_name(move |i| format!("loam-gc-{id}-{i}"))
        .start_handler(move |_| GC_THREAD_OF.with(|c| c.set(id)))
        .build()
        .expect("loam: could not start the GC threads");
    let finalizer = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("loam-finalizer-{id}"))
            .spawn(move || {
                FINALIZER_OF.with(|c| c.set(id));
                // SAFETY: the sweep queues only this runtime's dead objects,
                // found by complete marks, in pages flagged FINALIZING.
                unsafe { shared.finalizer.run(id, shared.config.verify, &shared.space) };
            })
            .expect("loam: could not start the finalizer thread")
    };
    std::thread::Builder::new()
        .name(format!("loam-gc-{id}"))
        .spawn(move || {
            COORDINATOR_OF.with(|c| c.set(id));
            coordinator(&shared, &pool);
            // The last cycle has swept: the finalizer runs what is left.
            shared.finalizer.close();
            let _ = finalizer.join();
            // Every mutator is gone and every destructor has run.
            shared.final_stats.set(shared.current_stats());
            drop(pool);
            if shared.space.alloc_space().is_none() {
                RUNTIMES.fetch_sub(1, Ordering::Relaxed);
            }
            release_id(id);
        })
        .expect("loam: could not start the collector thread")
}

fn coordinator(shared: &Shared, pool: &ThreadPool) {
    let mut prev_start: Option<Instant> = None;
    let mut gen = Generations::default();
    // Kept from cycle to cycle: a fresh one allocated half a MiB each pause,
    // walked the heap again after each growth, and faulted the memory in
    // (some pauses took 3 to 7 ms in the snapshot alone at 500 pages).
    let mut snap = Snapshot::default();
    loop {
        let (forced, last, from_finalizer) = {
            let mut c = shared.control.lock();
            while !c.requested && !c.shutdown {
                shared.control_cv.wait(&mut c);
            }
            let forced = c.forced;
            let from_finalizer = std::mem::take(&mut c.from_finalizer);
            c.requested = false;
            c.forced = false;
            c.phase = Phase::Pause;
            (forced, c.shutdown, from_finalizer)
        };
        // The last cycle runs with no handle left: nothing is rooted, so it
        // frees every object of this runtime.
        let start = Instant::now();
        if let Some(prev) = prev_start.replace(start) {
            hold_freed_memory(start - prev);
        }
        // A `collect` expects the garbage made before it freed, some of it
        // in pages whose earlier dead objects the finalizer still holds or
        // has just sent back: let the finalizer finish (a second at most,
        // as below) and the caller take back those runs before the
        // snapshot, which skips pages with a run out.
        if forced && !from_finalizer && !last && shared.finalizer.wait_idle_for(Duration::from_secs(1)) {
            take_back_collector_runs(shared);
        }
        let mut events = vec![cycle(shared, pool, forced || last, &mut gen, &mut snap)];
        // A forced cycle (`collect`, the heap limit) must reach the pages
        // it skipped because earlier garbage there waited for the
        // finalizer: once the finalizer is done, run it again, as long as
        // that reaches more. It waits for the finalizer a second at most (a
        // destructor may be blocked on a lock the thread in `collect`
        // holds: then `collect` returns, and those pages wait for the next
        // cycle). The last cycle must also reach pages with a run out (the
        // finalizer sends runs, and the thread dropping the runtime takes
        // back its own while it waits, see `Handle::drop`), and waits for
        // the finalizer however long it takes: every destructor runs.
        // (The finalizer sends the runs it frees to the pages' owners; a
        // thread waiting in `collect` takes back its own as it waits. A
        // `collect` made by a destructor does not wait for the finalizer,
        // which is running that destructor.)
        let mut skipped = usize::MAX;
        loop {
            let again = if last {
                snap.skipped > 0
            } else {
                forced && !from_finalizer && snap.finalizing > 0
            };
            if !again || snap.skipped >= skipped {
                break;
            }
            skipped = snap.skipped;
            if last {
                shared.finalizer.wait_idle();
                take_back_dropper_runs(shared);
            } else if !shared.finalizer.wait_idle_for(Duration::from_secs(1)) {
                break;
            } else {
                // The finalizer sent the runs of the pages it held to their
                // owners: the thread in `collect` takes its own back, and
                // the snapshot below must come after (under load a fixed
                // millisecond was not enough, and drops came up short).
                take_back_collector_runs(shared);
            }
            loam_heap::drain_orphans();
            // A cycle again: threads at the heap limit wait while a sweep
            // runs (`Shared::wait_for_sweep`), and the stop waits for them.
            {
                let mut c = shared.control.lock();
                c.phase = Phase::Pause;
                shared.control_cv.notify_all();
            }
            events.push(cycle(shared, pool, true, &mut gen, &mut snap));
        }
        // After the cycle released the cycle lock, before it counts as
        // complete (so that whoever waited for it sees its event): a hook
        // may collect another runtime, or panic, without stopping this one.
        if let Some(hook) = &shared.hook {
            for event in &events {
                if let Err(msg) = crate::panics::contain(|| hook(event)) {
                    shared.stats.lock().user_panics += 1;
                    let _ = writeln!(
                        std::io::stderr(),
                        "loam: cycle {}: the on_cycle hook panicked (the collector goes on): {msg}",
                        event.cycle
                    );
                }
            }
        }
        let mut c = shared.control.lock();
        c.phase = Phase::Idle;
        c.completed += 1;
        shared.control_cv.notify_all();
        if last {
            c.shutdown = true;
            return;
        }
    }
}

/// At shutdown: asks the thread dropping the runtime's last handle (if it
/// waits for the collector) to take back the page runs sent to it, and
/// waits for it to answer (a second at most).
fn take_back_dropper_runs(shared: &Shared) {
    if !shared.reclaimer.load(Ordering::Acquire) {
        return;
    }
    let asked = shared.reclaim_asked.fetch_add(1, Ordering::AcqRel) + 1;
    let deadline = Instant::now() + Duration::from_secs(1);
    while shared.reclaim_done.load(Ordering::Acquire) < asked && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Asks the threads waiting in `collect` to take back the page runs sent
/// to them, and waits for one to answer (a second at most).
fn take_back_collector_runs(shared: &Shared) {
    if shared.collect_waiters.load(Ordering::Acquire) == 0 {
        return;
    }
    let asked = shared.reclaim_asked.fetch_add(1, Ordering::AcqRel) + 1;
    // They wait on the control condvar, a millisecond at a time.
    shared.control_cv.notify_all();
    let deadline = Instant::now() + Duration::from_secs(1);
    while shared.reclaim_done.load(Ordering::Acquire) < asked && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Asks the heap to keep what a sweep frees resident until the mutators
/// reuse it: twice the interval between cycles, up to a second. The heap's
/// purge delay (10 ms by default) is shorter than a cycle interval, and
/// binary-trees with threads started per depth faulted 100,000 pages in again
/// per five runs (a fifth of its time) before this. With several runtimes,
/// the one that collected last sets it.
fn hold_freed_memory(interval: Duration) {
    loam_heap::hold_freed_memory((interval * 2).min(Duration::from_secs(1)));
}

/// What the coordinator keeps between cycles to choose minor or full ones.
///
/// A minor cycle keeps the marks earlier cycles set (sticky mark bits): the
/// objects that survived a cycle are old and stay marked, so marking from
/// the roots stops at them and traces only young objects; the barrier
/// (`Mutation::barrier_store`) marks and remembers young objects stored into
/// barrier cells, which may be in old objects. The sweep is the same: it
/// frees allocated unmarked objects, which are young and unreachable. Old
/// garbage stays until a full cycle, which clears the marks first.
#[derive(Debug, Default)]
struct Generations {
    /// Bytes of old (marked) objects: the live size after a full cycle, plus
    /// what minor cycles promoted since.
    old: usize,
    /// Live bytes the last full cycle found.
    live: usize,
    /// The heap goal the last full cycle set.
    goal: usize,
    /// Whether a full cycle ever ran (the first cycle is full).
    started: bool,
}

impl Generations {
    /// Takes `live` bytes for the live size: the heap goal grows from it by
    /// the gc percent (at least the minimum heap), and the old generation is
    /// that much.
    fn rebase(&mut self, live: usize, config: &crate::options::Config) {
        let percent = config.gc_percent;
        self.goal = if percent == u32::MAX {
            usize::MAX
        } else {
            let grow = (live as u128 * percent as u128 / 100) as usize;
            (live.saturating_add(grow)).max(config.min_heap)
        };
        self.live = live;
        self.old = live;
    }

    /// Whether the next cycle must be a full one: old objects (the garbage
    /// among them included) took more than half the headroom the last full
    /// cycle left between the live size and the goal.
    fn full_due(&self) -> bool {
        !self.started || self.old > self.live + (self.goal.saturating_sub(self.live)) / 2
    }
}

/// What the pause records of the heap for the sweep.
#[derive(Default)]
struct Snapshot {
    /// Start addresses of the pages to sweep: those holding an allocated
    /// object and no page run out (a page with one may be freed and even
    /// released by its owner meanwhile, so the sweep must not touch it).
    pages: Vec<usize>,
    /// For each page in order, the range of its allocated words in `bits`.
    ranges: Vec<(usize, usize)>,
    /// The pages' allocated words as of the pause. The sweep
    /// frees `bits & !marked`: objects allocated after the pause are not in
    /// it, so mutators allocate white and need no atomic mark write.
    bits: Vec<u64>,
    /// Pages left out because their dead objects wait for the finalizer,
    /// or a page run is out (the runtime's last cycle runs again while
    /// their number falls).
    skipped: usize,
    /// Of those, the pages waiting for the finalizer (a forced cycle runs
    /// again once it is done).
    finalizing: usize,
    /// What a `GlobalAlloc` space's pause took instead of pages.
    objects: Option<crate::alloc_space::Snapshot>,
}

/// Records every page holding an allocated object, clearing its marks for a
/// full cycle.
/// Called with the world stopped.
///
/// The order of the reads matters: threads outside `mutate` (and other
/// runtimes' mutators) keep running, and an owner may take back a page run
/// at any moment, clearing the run's allocated bits and then `RUN_PENDING`.
/// So the flags are read first: a page without a run out cannot get one
/// before the sweep (only sweeps send runs, one at a time), so its
/// allocated bits can only grow, and the copy taken after is a set of blocks
/// in use that only this runtime's sweep (or another runtime's, never at the
/// same time) frees, which keeps the page live and its geometry fixed. A
/// copy that is all zero means nothing to sweep (the run was taken back
/// between the walk's reads).
fn snapshot_pages(snap: &mut Snapshot, clear_marks: bool) {
    loop {
        snap.pages.clear();
        snap.ranges.clear();
        snap.bits.clear();
        snap.skipped = 0;
        snap.finalizing = 0;
        let mut overflow = false;
        // Past an overflow, what the rest of the walk would need: the next
        // walk reserves it all at once (doubling instead walked a fresh
        // heap of 270 MB four times in one pause).
        let (mut need_pages, mut need_words) = (0usize, 0usize);
        let Snapshot {
            pages,
            ranges,
            bits,
            skipped,
            finalizing,
            objects: _,
        } = &mut *snap;
        // SAFETY: the closure neither allocates nor frees (it pushes only
        // within the reserved capacities), and reads only atomics, and the
        // geometry of pages whose allocated blocks keep them live (see
        // above); the registry lock keeps every segment mapped meanwhile.
        unsafe {
            loam_heap::for_each_page(|p| {
                if p.used() == 0 {
                    return;
                }
                let flags = p.flags();
                if flags & sweep::OLD != 0 {
                    if !clear_marks {
                        // Every block marked until a full cycle: nothing for
                        // a minor cycle to sweep (see `sweep::OLD`).
                        return;
                    }
                    p.clear_flags(sweep::OLD);
                }
                let pending = flags & loam_heap::RUN_PENDING != 0;
                let words = p.bitmap_words();
                if overflow
                    || pages.len() == pages.capacity()
                    || ranges.len() == ranges.capacity()
                    || bits.capacity() - bits.len() < words
                {
                    overflow = true;
                    need_pages += 1;
                    need_words += words;
                    return;
                }
                let waits = flags & crate::finalize::FINALIZING != 0;
                if pending || waits {
                    *skipped += 1;
                    *finalizing += usize::from(waits && !pending);
                    // Not swept this cycle (a run out, or dead objects
                    // waiting for the finalizer), but marked: a full cycle
                    // clears its marks like any other page's.
                    if clear_marks && p.allocated_words().any(|w| w != 0) {
                        p.clear_marks();
                    }
                    return;
                }
                let from = bits.len();
                bits.extend(p.allocated_words());
                if bits[from..].iter().all(|&w| w == 0) {
                    bits.truncate(from);
                    return;
                }
                if clear_marks {
                    p.clear_marks();
                }
                pages.push(p.start() as usize);
                ranges.push((from, from + words));
            })
        };
        if !overflow {
            return;
        }
        // With a quarter to spare for what the mutators allocate next.
        let want_pages = snap.pages.len() + need_pages;
        let want_pages = (want_pages + want_pages / 4).max(1024);
        let want_words = snap.bits.len() + need_words;
        let want_words = (want_words + want_words / 4).max(64 << 10);
        snap.pages.clear();
        snap.ranges.clear();
        snap.bits.clear();
        snap.pages.reserve(want_pages);
        snap.ranges.reserve(want_pages);
        snap.bits.reserve(want_words);
    }
}

/// Rounds of marking what the barriers shaded, with the mutators running,
/// before the last pause takes the rest.
const SHADED_ROUNDS: usize = 4;

/// Shaded objects few enough for the last pause to trace at once.
const SHADED_IN_PAUSE: usize = 64;

/// Pauses a mark's termination may take, each bounded by the pause budget,
/// before the last one traces to the end.
const TERMINATION_TRIES: u32 = 8;

/// Raises the stop flag and waits for every mutator inside `mutate` to
/// leave; returns the mutators. With `gone`, first forgets the mutators
/// that are gone (detached, no root left), taking their remembered objects
/// into it.
fn stop_world(shared: &Shared, mut gone: Option<&mut Vec<usize>>) -> Vec<Arc<MutatorShared>> {
    shared.handshake.stop_world(|| {
        let mut list = shared.mutators.lock();
        if let Some(remembered) = gone.as_deref_mut() {
            list.retain(|m| {
                let gone = m.detached.load(Ordering::Acquire) && Arc::strong_count(m) == 1;
                if gone {
                    remembered.append(&mut m.remembered.lock());
                }
                !gone
            });
        }
        list.clone()
    })
}

/// The roots as of now (world stopped): every mutator's table and the
/// global one.
fn roots_of(shared: &Shared, mutators: &[Arc<MutatorShared>]) -> Vec<usize> {
    let mut roots = Vec::new();
    for m in mutators {
        roots.extend(m.roots.lock().live());
    }
    roots.extend(shared.globals.lock().live());
    roots
}

fn cycle(
    shared: &Shared,
    pool: &ThreadPool,
    forced: bool,
    gen: &mut Generations,
    snap: &mut Snapshot,
) -> CycleEvent {
    let _one_at_a_time = CYCLE_LOCK.lock();
    // Exited threads' heaps take back the runs earlier sweeps sent them, so
    // that their pages can be swept again (live threads do it themselves,
    // at each `mutate`).
    loam_heap::drain_orphans();
    let heap_before = shared.heap_used.load(Ordering::Relaxed);
    let start = Instant::now();

    // 1. Stop.
    let mut remembered = Vec::new();
    let mutators = stop_world(shared, Some(&mut remembered));
    let mut stop_time = start.elapsed();
    // Only now: until every mutator left, the barrier could add to these.
    for m in &mutators {
        remembered.append(&mut m.remembered.lock());
    }
    // What locks record from here on is the next cycle's (`cell.rs`).
    shared.remember_epoch.fetch_add(1, Ordering::Relaxed);
    // Full or minor: a `GcLock` write since the last pause forces a full
    // cycle (see `cell.rs`), and so do `collect` and the heap limit.
    let lock_written = shared.lock_written.swap(false, Ordering::Relaxed);
    let full = forced || !shared.config.generational || lock_written || gen.full_due();
    if full {
        remembered.clear();
    }
    // What the heap holds as the world stops: the sweep below frees from
    // this, while the mutators allocate on top of it.
    let heap_at_stop = shared.heap_used.load(Ordering::Relaxed);
    let weak_at_stop = shared.weak.lock().len();

    // 2. Snapshot.
    let snap_start = Instant::now();
    match &shared.space {
        Space::Pages => snapshot_pages(snap, full),
        Space::Alloc(space) => snap.objects = Some(space.snapshot(full)),
    }
    let snap_time = snap_start.elapsed();

    // 3. Mark, in the pause up to its budget.
    let mut roots = roots_of(shared, &mutators);
    let mark_start = Instant::now();
    // The budget counts from the stop: a large heap's snapshot takes
    // milliseconds of it (4 to 7 ms at binary-trees depth 21).
    let deadline = shared
        .config
        .concurrent
        .then(|| (start + stop_time).checked_add(shared.config.mark_pause_budget))
        .flatten();
    let mut gray = Vec::new();
    // In a full cycle the snapshot cleared the marks of every page with an
    // object; in a minor one every object a marked object points to is
    // marked or in `remembered` (the barrier and the last cycle saw to it).
    // Remembered objects were reachable after the last pause, and only this
    // cycle's sweep frees again, so they are allocated.
    // SAFETY: world stopped; the marks invariant above; roots and
    // remembered objects are allocated objects of this runtime.
    let mut marked = unsafe {
        mark::parallel(
            &shared.space,
            pool,
            &roots,
            &remembered,
            mark::Limits {
                concurrent: false,
                deadline,
                assists: None,
            },
            &mut gray,
        )
    };
    let mut mark_time = mark_start.elapsed();
    // Both pauses are timed below, just before a resume.
    let mut mark_start_pause = Duration::ZERO;
    let mut mark_end_pause = Duration::ZERO;
    let mut end_start = None;
    // The pauses after the first, each (a bounded termination may take
    // several), and the marking done in them.
    let mut stats_pauses = Vec::new();
    let mut pause_mark = Duration::ZERO;
    let mut concurrent_mark = Duration::ZERO;
    let concurrent = !gray.is_empty();
    if concurrent {
        // 3b. Mark on with the mutators running. From the resume on, every
        // `mutate` call shades what its barriers overwrite and store, and
        // what its weak upgrades hand out; the markers trace those too.
        // 64 bits: a `GcLock` shaded one epoch ago must never look shaded now.
        let epoch = shared.mark_epoch.load(Ordering::Relaxed) + 1;
        shared.mark_epoch.store(epoch, Ordering::Relaxed);
        shared.marking.store(true, Ordering::Relaxed);
        shared.control.lock().phase = Phase::Mark;
        // Read the clock before resuming (here and below): the woken
        // mutators may take both cores before this thread reads it again
        // (a scheduler slice, 4 ms, counted as pause before this).
        mark_start_pause = start.elapsed() - stop_time;
        shared.handshake.resume();
        let conc_start = Instant::now();
        let mut rest = Vec::new();
        let concurrently = mark::Limits {
            concurrent: true,
            deadline: None,
            assists: Some(&shared.assist),
        };
        // Mutators that allocate during the mark pay for it in marking
        // work (`Mutator::assist`), so that the mark ends before the heap
        // reaches twice its goal even when the GC threads get little CPU:
        // the work expected (the live size, less what the pause marked)
        // over the headroom left, in 1/1024ths.
        let expected = if full {
            gen.live.saturating_sub(marked.bytes)
        } else {
            marked.bytes
        }
        .max(1 << 20);
        let headroom = gen
            .goal
            .saturating_mul(2)
            .saturating_sub(shared.heap_used.load(Ordering::Relaxed))
            .max(1 << 20);
        let ratio = (expected as u128 * 1024 / headroom as u128).clamp(256, 16 << 10) as u32;
        shared.assist_ratio.store(ratio, Ordering::Relaxed);
        // `parallel`'s marks invariant holds in its concurrent form: every
        // object a marked object points to is marked, queued here, or shaded
        // into `shared.gray`, which later rounds and the last pause trace.
        // SAFETY: `gray` holds marked, allocated objects the pause did not
        // trace; no sweep runs until this cycle's; mutators run behind the
        // snapshot barrier; the invariant as just said.
        let m = unsafe { mark::parallel(&shared.space, pool, &[], &gray, concurrently, &mut rest) };
        marked.add(m);
        // Then what the barriers shaded meanwhile, in rounds, each a batch
        // taken whole: the rounds end however fast the mutators shade (one
        // mark that also drained the queue as it went could be kept busy
        // for ever), and a pause takes what the last one left.
        //
        // 3c. Termination, bounded: stop, and trace what is left for at
        // most the pause budget. What a batch of shaded objects leads to
        // can be anything up to the whole young heap, so a pause that
        // traced it to the end had no bound. If the budget runs out, the
        // rest goes back to `gray`, the mutators resume (the barriers are
        // still on: `marking` has not changed) and the rounds go on; the
        // mutators that keep shading pay for it in assists. After
        // `TERMINATION_TRIES` pauses the last one traces to the end, so
        // the mark always ends.
        let mut shaded = Vec::new();
        let mut tries = 0;
        let mutators = loop {
            for _ in 0..SHADED_ROUNDS {
                mark::drain(&shared.gray, &mut shaded);
                // Objects whose lock a writer held as a marker met it:
                // traced again, as the writer may store what its owner was
                // never recorded for (`cell.rs`, "Recording the object
                // written").
                shaded.append(&mut rest);
                if shaded.len() <= SHADED_IN_PAUSE {
                    break;
                }
                let batch = std::mem::take(&mut shaded);
                // SAFETY: shaded objects are marked and allocated (reachable
                // when shaded, and no sweep runs); the invariant as above.
                let m = unsafe { mark::parallel(&shared.space, pool, &[], &batch, concurrently, &mut rest) };
                marked.add(m);
            }
            let stop2 = Instant::now();
            shared.assist_ratio.store(0, Ordering::Relaxed);
            shared.control.lock().phase = Phase::Pause;
            let mutators = stop_world(shared, None);
            stop_time += stop2.elapsed();
            let end = Instant::now();
            mark::drain(&shared.gray, &mut shaded);
            shaded.append(&mut rest);
            tries += 1;
            let deadline = (tries < TERMINATION_TRIES)
                .then(|| end.checked_add(shared.config.mark_pause_budget))
                .flatten();
            let m2_start = Instant::now();
            let batch = std::mem::take(&mut shaded);
            // SAFETY: world stopped; shaded objects are marked and
            // allocated; the invariant as above.
            let m = unsafe {
                mark::parallel(
                    &shared.space,
                    pool,
                    &[],
                    &batch,
                    mark::Limits {
                        concurrent: false,
                        deadline,
                        assists: None,
                    },
                    &mut rest,
                )
            };
            marked.add(m);
            pause_mark += m2_start.elapsed();
            if rest.is_empty() {
                end_start = Some(end);
                shared.marking.store(false, Ordering::Relaxed);
                break mutators;
            }
            // Not done within the budget: resume and mark on (`rest` holds
            // the gray objects the pause left, marked and untraced).
            drop(mutators);
            shared.assist_ratio.store(ratio, Ordering::Relaxed);
            shared.control.lock().phase = Phase::Mark;
            let d = end.elapsed();
            mark_end_pause += d;
            stats_pauses.push(d);
            shared.handshake.resume();
        };
        concurrent_mark = conc_start.elapsed().saturating_sub(pause_mark);
        mark_time += concurrent_mark + pause_mark;
        // The roots verify mode checks against: those of the world as it
        // stands now.
        if shared.config.verify {
            roots = roots_of(shared, &mutators);
        }
    }

    // A user's `Trace` impl panicked on a GC thread: the marks may miss
    // what it did not report, so nothing may be freed or cleared on their
    // word. This cycle sweeps nothing and clears no weak reference; the
    // next one is full (its snapshot clears the marks and starts over).
    let mark_failed = crate::panics::CYCLE_LOG.trace_panicked();
    if mark_failed {
        shared.lock_written.store(true, Ordering::Relaxed);
    }

    // 4. Verify.
    if shared.config.verify && !mark_failed {
        verify(&shared.space, shared.id, snap, &roots, marked.objects, full, concurrent);
    }

    // 5. Weak references.
    if !mark_failed {
        mark_weak(shared, weak_at_stop);
    }

    // 6. Resume.
    if mark_failed {
        // The generations as they were: the next, full cycle measures.
    } else if full {
        gen.rebase(marked.bytes, &shared.config);
        gen.started = true;
    } else {
        // The sweep corrects this (below); the trigger needs it now. What a
        // minor cycle marks is not all live: the barrier marked every young
        // object stored into a cell, and a later store may have cut it off
        // again. So promoted bytes only ever bring the next full cycle
        // closer (`full_due`); they never re-base the goal, or a program
        // that stores a fresh structure over the last one in every call
        // would double its heap every cycle on promoted garbage.
        gen.old = gen.old.saturating_add(marked.bytes);
    }
    let goal = gen.goal;
    // Until the sweep has taken its garbage off `heap_used`, the trigger
    // counts from the heap as the mark ended: the next cycle starts when
    // `goal - live` bytes were allocated since, as it will after the sweep.
    // (Setting `goal` itself here started a second cycle at once whenever
    // mutators allocated during the sweep: half the cycles on binary-trees
    // were such.)
    let heap_at_end = shared.heap_used.load(Ordering::Relaxed);
    shared.next_goal.store(
        heap_at_end.saturating_add(goal.saturating_sub(gen.old)),
        Ordering::Relaxed,
    );
    shared.pace_goal.store(goal, Ordering::Relaxed);
    shared.control.lock().phase = Phase::Sweep;
    // A pause is a stopped world: from the last mutator's leaving to the
    // resume. Waiting for the mutators to leave is reported apart, as
    // `stop`: they run meanwhile, and a mutator that enters during it waits
    // that long at most.
    match end_start {
        Some(end) => {
            let d = end.elapsed();
            mark_end_pause += d;
            stats_pauses.push(d);
        }
        None => mark_start_pause = start.elapsed() - stop_time,
    }
    shared.handshake.resume();
    let pause = mark_start_pause + mark_end_pause;
    // 7. Sweep.
    let sweep_start = Instant::now();
    let alone = RUNTIMES.load(Ordering::Relaxed) == 1;
    if mark_failed {
        snap.pages.clear();
        snap.ranges.clear();
    }
    let (swept, finalizing) = match (&shared.space, snap.objects.take()) {
        (Space::Alloc(space), Some(objects)) if mark_failed => {
            space.restore(objects);
            (sweep::Swept::default(), Vec::new())
        }
        // SAFETY: this cycle's snapshot, marks complete, under the cycle
        // lock.
        (Space::Alloc(space), Some(objects)) => unsafe {
            space.sweep(pool, objects, shared.id, shared.config.verify)
        },
        // SAFETY: the snapshot's pages (none with a run out), with their
        // allocated words as of the pause; marks complete; under the cycle
        // lock (which also keeps `alone` true throughout, see `RUNTIMES`).
        _ => unsafe {
            sweep::parallel(
                pool,
                &snap.pages,
                &snap.ranges,
                &snap.bits,
                shared.id,
                alone,
                shared.config.verify,
            )
        },
    };
    let sweep_time = sweep_start.elapsed();
    shared.finalizer.submit(finalizing);
    // Saturating: a reused runtime id can make this sweep free objects an
    // earlier runtime left behind (see `release_id`), never counted here.
    let heap_after = shared
        .heap_used
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
            Some(u.saturating_sub(swept.bytes))
        })
        .unwrap_or(0)
        .saturating_sub(swept.bytes);
    // The garbage is off `heap_used` now (first, so that the lower trigger
    // never meets the unswept count): the trigger is the goal itself.
    shared.next_goal.store(goal, Ordering::Relaxed);
    // Everything the stopped heap held and the sweep left is marked: old.
    // (Less what a concurrent mark left unreachable on pages it did not
    // sweep, and plus the objects allocated during it that it reached:
    // both small. `heap_used` counts whole allocation chunks, so this is
    // high by the mutators' unused credit, at most 64 KiB each.)
    if !full {
        gen.old = heap_at_stop.saturating_sub(swept.bytes);
    }

    // Under the cycle lock still: the panics logged are this cycle's.
    let panics = crate::panics::CYCLE_LOG.report(&format!("cycle {}", shared.stats.lock().cycles + 1));
    let event = {
        let mut stats = shared.stats.lock();
        stats.user_panics += panics;
        stats.cycles += 1;
        stats.minor_cycles += u64::from(!full);
        stats.pauses.record(mark_start_pause);
        if concurrent {
            for &d in &stats_pauses {
                stats.pauses.record(d);
            }
            stats.concurrent_cycles += 1;
        }
        stats.mark_time += mark_time;
        stats.sweep_time += sweep_time;
        stats.bytes_marked += marked.bytes as u64;
        stats.bytes_freed += swept.bytes as u64;
        stats.objects_freed += swept.objects;
        stats.live_size = gen.live;
        stats.next_goal = goal;
        let held = shared.holds.take_since_event();
        let event = CycleEvent {
            cycle: stats.cycles,
            at: start.duration_since(shared.started),
            forced,
            minor: !full,
            concurrent,
            pause,
            mark_start_pause,
            mark_end_pause,
            stop: stop_time,
            snapshot: snap_time,
            mark: mark_time,
            concurrent_mark,
            sweep: sweep_time,
            heap_before,
            heap_after,
            bytes_marked: marked.bytes,
            objects_marked: marked.objects,
            bytes_freed: swept.bytes,
            objects_freed: swept.objects,
            next_goal: goal,
            old_bytes: gen.old,
            gc_threads: pool.current_num_threads(),
            mutator_pauses: held.count,
            mutator_pause_max: held.max,
            mutator_pause_total: held.total,
        };
        stats.last = Some(event.clone());
        event
    };
    if shared.config.trace {
        eprintln!("{event}");
    }
    event
}

/// Clears the weak cells of the first `upto` (those registered as the mark
/// began) whose target is unmarked (see `weak::process`).
fn mark_weak(shared: &Shared, upto: usize) {
    let mut cells = shared.weak.lock();
    // SAFETY: every registered cell, and every nonzero target, is an
    // allocated object of this runtime (cells are forgotten once unmarked,
    // targets cleared once unmarked); the world is stopped.
    crate::weak::process(&mut cells, upto, |addr| unsafe { shared.space.is_marked(addr) });
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
        let mut index: Vec<(usize, usize)> = snap
            .pages
            .iter()
            .zip(&snap.ranges)
            .map(|(&p, &(from, _))| (p, from))
            .collect();
        index.sort_unstable();
        for &addr in &reachable {
            // SAFETY: reachable, so allocated, and its page live.
            let page = unsafe { loam_heap::PageRef::of(addr as *const u8) };
            let Ok(i) = index.binary_search_by_key(&(page.start() as usize), |&(p, _)| p) else {
                continue;
            };
            let b = page.block_index(addr as *const u8);
            let swept = snap.bits[index[i].1 + b / 64] >> (b % 64) & 1 != 0;
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
    // In the pages: pages with a run out are left
    // out: blocked threads may take the run back and release the page even
    // now. The count above covers them.
    for &start in &snap.pages {
        // SAFETY: a snapshot page without a run out holds allocated objects
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
