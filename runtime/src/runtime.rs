//! [`Runtime`] and [`RuntimeBuilder`]: one managed heap, its settings, its
//! mutator registry, its roots and its collector thread.

use crate::collector;
use crate::handshake::Handshake;
use crate::mutator::{Mutator, MutatorShared};
use crate::options::{Config, ConfigError};
use crate::root::RootTable;
use crate::stats::{CycleEvent, FinalStats, GcStats, StatsHandle};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::fmt;
use crossbeam_deque::Injector;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The per-cycle hook's type.
pub(crate) type Hook = Box<dyn Fn(&CycleEvent) + Send + Sync>;

/// Where the collector is in its cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No cycle running.
    Idle,
    /// A cycle's first stop: stopping the mutators, the snapshot, and the
    /// mark with them stopped.
    Stop,
    /// Ending a concurrent mark: stopping the mutators again and tracing
    /// what the barriers shaded (`cycle::Cycle::terminate`).
    MarkTermination,
    /// Marking with the mutators running (between the two pauses of a
    /// concurrent mark).
    Mark,
    /// Sweeping, with the mutators running.
    Sweep,
    /// Swept: the cycle's report and the `on_cycle` hook (user code, and
    /// stderr, which may block) are under way; the cycle counts as
    /// completed after them, so that whoever waits for it sees its event.
    /// A call waiting for the sweep at the heap limit goes on here.
    Report,
}

/// The collector's control block, under `Shared::control`.
#[derive(Debug)]
pub(crate) struct Control {
    pub(crate) requested: bool,
    pub(crate) forced: bool,
    /// The cycle requested was asked for by the large-object trigger
    /// alone: set by `request_for_large` when it asks first, cleared by
    /// every other request (`request`, `pace`, `collect`) and by the
    /// coordinator as the cycle begins (`collector.rs`), which puts it in
    /// the cycle's event.
    pub(crate) large: bool,
    pub(crate) phase: Phase,
    /// Cycles completed (swept).
    pub(crate) completed: u64,
    pub(crate) shutdown: bool,
    /// The mark epoch of the ragged cycle under way, from its start until
    /// it has swept (0 otherwise): a call that began in that mark after
    /// its window closed may wait for it (`wait_for_ragged_cycle`).
    pub(crate) ragged_epoch: u64,
    /// The sweep under way, while its GC threads are claiming pages: a
    /// mutator that pacing holds helps it (`Shared::help_sweep`).
    pub(crate) sweep: Option<Arc<crate::sweep::Work>>,
    /// Set while loam's heap holds memory in its process-wide caches, as
    /// of the last cycle or `Mutator::blocking` (segments its threads gave
    /// up as they went idle or exited, huge mappings freed): when the
    /// coordinator, idle, next gives back what has waited there long
    /// enough (`loam_heap::trim`), since a thread that waits runs no slow
    /// path that would. A deadline, not a flag, so that other wake-ups do
    /// not put it off. Memory cached after the last cycle by a thread's
    /// exit waits for a heap's purge or the next cycle.
    pub(crate) trim_at: Option<Instant>,
}

/// Who waits for the collector in [`Shared::wait_control`], which decides
/// what the wait does when the cycle is stuck on the calls under way.
enum Waiter<'a> {
    /// A mutator between its own calls: gives up when the gate opens.
    Gate(&'a crate::handshake::Slot),
    /// A mutator that pacing holds between its calls: gives up when the
    /// gate opens, and whenever the collector is stuck on a call. With its
    /// hold's slot in `held_cpus`, where it says how long each sleep lasts
    /// (`held_cpus.rs`).
    Pacing(&'a crate::handshake::Slot, &'a crate::held_cpus::HeldSlot<'a>),
    /// A call at the heap limit, whose `done` gives up on a stuck cycle.
    Call,
    /// A thread with no call of its own to go on with (the program's
    /// `collect`, `wait_for_cycle`, `wait_for_drops`, named): panics if
    /// the cycle stalls.
    Program(&'static str),
}

/// How often a program's wait for a cycle looks at the calls under way
/// for a stall.
const STALL_LOOKS: Duration = Duration::from_millis(100);

/// Everything the mutators, roots and collector share.
///
/// # Lock order
/// Its locks and how they nest with the cycle lock, the handshake and
/// the program's `GcLock`s are in `runtime/HACKING.md`, "Lock order":
/// `weak_gate`, then `mutators`, then a mutator's remembered lists, then
/// `weak`; `control`, then `assist`; `stats`, then the hold log.
pub(crate) struct Shared {
    pub(crate) id: u16,
    /// The process's fork count as the runtime was built: a child forked
    /// since has none of its threads (`forked.rs`).
    pub(crate) born: u64,
    /// The length of `mutators` at which an attach next counts the gone
    /// ones (`Mutator::attach`); read and written under its lock.
    pub(crate) gone_look_at: AtomicUsize,
    pub(crate) config: Config,
    pub(crate) handshake: Handshake,
    pub(crate) mutators: Mutex<Vec<Arc<MutatorShared>>>,
    /// Mutators attached and not yet detached: what a call's entry reads
    /// to learn whether it is the runtime's one mutator
    /// (`Mutator::wait_out_window`), without `mutators`' lock, which the
    /// collector holds while it drains the shade queues (a mutator that
    /// waited for it behind a collector thread off its CPU was held for a
    /// scheduler slice).
    pub(crate) live_mutators: AtomicUsize,
    /// The CPUs of the mutators the collector holds (assists, paced
    /// slices, sweep help, pacing's sleeps, the spin for a ragged start's
    /// window), and until when those asleep sleep: a GC thread on the CPU
    /// of one that is awake, or due, steps off it for a moment
    /// (`held_cpus.rs`). Speed only.
    pub(crate) held_cpus: crate::held_cpus::HeldCpus,
    pub(crate) globals: RootTable,
    /// The live weak cells.
    pub(crate) weak: Mutex<crate::weak::WeakCells>,
    /// Raised while the collector wants or holds `globals`, `weak` ([`Walk`]).
    pub(crate) globals_walked: AtomicBool,
    pub(crate) weak_walked: AtomicBool,
    /// Managed bytes handed out (in per-mutator chunks) and not yet freed.
    pub(crate) heap_used: AtomicUsize,
    /// Heap size at which the next cycle starts.
    pub(crate) next_goal: AtomicUsize,
    /// Bytes of large objects (past the heap's largest size class)
    /// allocated since the last mark ended: past a share of the goal they
    /// ask for a cycle of their own. Added to by `Mutator::count_large`,
    /// cleared at each mark's end (`Cycle::resume`). Relaxed: a threshold.
    pub(crate) large_since: AtomicUsize,
    /// Whether the last cycle's sweep freed large objects, at least half
    /// the large-object trigger's budget: the trigger asks for cycles only
    /// then (`Mutator::count_large`). Cleared at each mark's end, set (or
    /// not) when the cycle ends (`Cycle::event`): off during a sweep.
    /// Relaxed: a hint.
    pub(crate) large_armed: AtomicBool,
    /// The goal pacing counts from: the last full cycle's goal (which
    /// `next_goal`, the trigger, sits up to half the headroom below, and
    /// may pass while a sweep runs), raised while a mark finds live data
    /// past it (`saw_live`): a mutator that finds the heap where pacing begins for it
    /// (`pace_at`: twice it, or less under a heap limit) pays for what it
    /// allocates in marking, or waits for the cycle when there is no mark
    /// to help (`Mutator::pace`). Relaxed: a threshold.
    pub(crate) pace_goal: AtomicUsize,
    /// While a sweep runs: the bytes it has yet to free, at least (set
    /// once the mark is complete, from the heap as the world stopped less
    /// what the mark kept, and lowered by each claim of pages as the
    /// sweep takes it off the heap, `sweep_freed`); 0 otherwise. A paced
    /// mutator that this sweep will bring under the pace point goes on
    /// without waiting for it, one call a cycle, or after each slice of
    /// the sweep it took (`Mutator::pace`). Lowered before the heap is,
    /// and read after it (`sweep_brings_under_pace`).
    pub(crate) sweep_frees: AtomicUsize,
    /// Set from when a ragged mark has traced all its roots reach until
    /// it ends (`Cycle::mark_ragged`): what is left is the snapshot's walk,
    /// tracing what the barriers shade (offered to assists like any of the
    /// mark's work) and the end's waits for the calls that began in its
    /// window and for the barriers under way. A paced mutator can help with
    /// none of it but the shaded rounds, so paced mutators go on meanwhile,
    /// up to a quarter of the pace goal past the pace point
    /// (`outruns_mark_end`). Relaxed, a hint: read as a paced call begins
    /// and in its wait, which the collector wakes (under the control
    /// mutex) after setting it; cleared without a wake, so a stale read
    /// lets a call go on just after the end, within the room.
    pub(crate) marked_through: AtomicBool,
    /// While a mark counts what it finds as live data (`saw_live`): a full
    /// cycle's, or a minor one's that began with nothing remembered.
    /// Written by the coordinator only: as a cycle starts (with the world
    /// stopped, or in a ragged start with the mutators running, before the
    /// mark is offered to the GC threads and assists that report to
    /// `saw_live`) and as its mark ends (`Cycle::resume`). Relaxed: the
    /// reports come after the mark is offered (the assist slot's mutex,
    /// the pool's job), which orders the start's store before them.
    pub(crate) live_counting: AtomicBool,
    /// Bytes the mark under way has found, while `live_counting`.
    pub(crate) live_seen: AtomicUsize,
    /// Where pacing begins under a heap limit, below twice the goal:
    /// seven eighths of the limit, or the goal if that is higher (only when
    /// the live data is above seven eighths, `cycle::goal_under_limit`;
    /// `pace_at`). `usize::MAX` without a limit, or with the goal off
    /// (`gc_percent` at `u32::MAX`, which turns pacing off). Together with
    /// a goal kept under the limit (`cycle::goal_under_limit`) it lets the
    /// cycles run between calls before an allocation meets the limit.
    pub(crate) pace_cap: usize,
    /// Bumped whenever a root is dropped or moved, and whenever a barrier
    /// cell or a logged object is written while a mutator is at the heap
    /// limit (`at_limit`): what may have freed memory since the last limit
    /// collection (relaxed: a hint for the heap-limit retry,
    /// `Mutator::collect_for_limit`).
    pub(crate) roots_changed: AtomicU64,
    /// Mutators at the heap limit: their last allocation failed and none
    /// has succeeded since. While nonzero, `mutate` calls count their
    /// writes into `roots_changed` (`Mutation::note_write`).
    pub(crate) at_limit: AtomicUsize,
    pub(crate) control: Mutex<Control>,
    /// Signals changes of `control` (requests, phase ends) both ways.
    pub(crate) control_cv: Condvar,
    pub(crate) stats: Mutex<GcStats>,
    /// Every interval a mutator was held (`held.rs`).
    pub(crate) holds: crate::held::HoldLog,
    /// Set by the coordinator after the last cycle (`StatsHandle`).
    pub(crate) final_stats: Arc<FinalStats>,
    /// The thread dropping the last handle, which waits for the
    /// coordinator's end (`Handle::drop`): the coordinator's last act
    /// wakes it.
    pub(crate) dropper: Mutex<Option<std::thread::Thread>>,
    pub(crate) hook: Option<Hook>,
    pub(crate) started: Instant,
    /// A `GcLock` whose owning object is unknown (shared between objects,
    /// see `cell.rs`) was written since the last pause, or a mark failed:
    /// the next cycle must be a full one.
    pub(crate) lock_written: AtomicBool,
    /// What a `mutate` call reads as it begins: whether a concurrent mark
    /// runs, how its barriers behave, and the mark's epoch (`calls.rs`).
    pub(crate) calls: crate::calls::Calls,
    /// Weak upgrades that shade take it to read, a ragged cycle's end to
    /// write (`weak.rs`, `GcWeak::upgrade`).
    pub(crate) weak_gate: parking_lot::RwLock<()>,
    /// Objects shaded during a concurrent mark, for the markers to trace,
    /// by weak upgrades and assists, and the young objects a ragged end
    /// leaves for the next cycle (the barriers shade into their
    /// mutators' own queues, `Mutator::shade_queue`). The docs' `gray` is
    /// this queue and those together: [`drain_shaded`](Self::drain_shaded)
    /// takes both.
    pub(crate) gray: Injector<usize>,
    /// The concurrent mark under way offers its queues here to mutators
    /// that assist (`mark::Share`).
    pub(crate) assist: crate::mark::AssistSlot,
    /// Bytes a mutator marks per 1024 it allocates while a concurrent mark
    /// runs (0: no mark, no assists). Set by the coordinator as a mark
    /// begins or resumes, and zeroed as it ends; lowered meanwhile by the
    /// mark's reports of live data ([`retune_assists`](Self::retune_assists)).
    /// Relaxed: a rate.
    pub(crate) assist_ratio: std::sync::atomic::AtomicU32,
    /// The marking the mark under way expected as it set `assist_ratio`,
    /// in bytes: what [`retune_assists`](Self::retune_assists) sets the
    /// ratio again from. Relaxed, as the ratio.
    pub(crate) assist_expected: AtomicUsize,
    /// The goal the mark under way counted its headroom from as it set
    /// `assist_ratio` (`retune_assists` counts from no lower). Relaxed.
    pub(crate) assist_goal: AtomicUsize,
    /// Dead objects with drop glue, for the finalizer thread.
    pub(crate) finalizer: crate::finalize::Finalizer,
    /// Where the objects live (`space.rs`).
    pub(crate) space: crate::space::Space,
    /// Panics of `Trace` impls that this runtime's calls met shading a
    /// `GcLock`'s contents (`cell.rs`). Kept apart from
    /// [`panics::cycle_log`](crate::panics::cycle_log), which the cycle
    /// under way (of whatever runtime) reads: a call that a mark's end
    /// stopped waiting for may shade after it, and its panic belongs to
    /// this runtime's next cycle, not to another runtime's.
    pub(crate) shade_panics: crate::panics::PanicLog,
}

impl Shared {
    /// Whether a `Trace` impl panicked during this runtime's cycle under
    /// way, on the cycle's threads or in its calls' shading for its mark,
    /// of epoch `mark` (0: a mark no call ran in, which no shading is
    /// for): its marks cannot be trusted.
    pub(crate) fn trace_panicked(&self, mark: u64) -> bool {
        crate::panics::cycle_log().trace_panicked() || (mark != 0 && self.shade_panics.trace_panicked_for(mark))
    }

    /// Moves every shaded object not yet traced into `out`: `gray`, then
    /// each mutator's shade queue (detached mutators' included: a queue
    /// outlives its `Mutator`, and the registry keeps it until it is
    /// empty). A shade pushed before a release that the caller acquired
    /// (a call's end that a stop saw, a shading bracket's close that
    /// `Handshake::wait_for_shades` saw, a weak upgrade's gate) is taken.
    pub(crate) fn drain_shaded(&self, out: &mut Vec<usize>) {
        crate::mark::drain(&self.gray, out);
        // Under the registry's lock (steals never wait), not a copy of
        // the list: a copy's references would also make the gone
        // mutators' pruning, which counts them, skip a cycle.
        for m in self.mutators.lock().iter() {
            m.take_shaded(out);
        }
    }

    /// The statistics as of now (`Runtime::stats`).
    pub(crate) fn current_stats(&self) -> GcStats {
        let mut stats = self.stats.lock().clone();
        stats.user_panics += self.finalizer.panicked.load(Ordering::Relaxed);
        // The backlog first: the cycle counts dead objects into it before
        // it takes them off the heap's count (`Cycle::sweep`), so read
        // this way round a batch on its way may be missed for a moment,
        // but is never counted twice (`Mutator::refill` reads the other
        // way round, where missing one would let the heap pass its limit).
        stats.drops_pending = self.finalizer.pending();
        stats.heap_size = self.heap_used.load(Ordering::Relaxed);
        stats.next_goal = self.next_goal.load(Ordering::Relaxed);
        // The list copied, and the histograms merged outside its lock: a
        // termination's `drain_shaded` takes it, and a program polling
        // `stats()` with many mutators lengthened that pause. A mutator
        // that detaches meanwhile has its holds in the departed ones (moved
        // under that lock, which `all` holds while it merges).
        let live: Vec<Arc<MutatorShared>> = self.mutators.lock().clone();
        stats.mutator_pauses = self.holds.all(live.iter().map(|m| &m.holds));
        [
            stats.held_at_safepoint,
            stats.held_by_pacing,
            stats.held_for_memory,
            stats.held_assisting,
            stats.held_for_drops,
        ] = self.holds.by_kind();
        stats
    }

    /// The large objects made since the last mark that ask for a cycle: an
    /// eighth of the pace goal (`Mutator::count_large`).
    pub(crate) fn large_budget(&self) -> usize {
        self.pace_goal.load(Ordering::Relaxed) / crate::mutator::LARGE_SHARE
    }

    /// Asks for a cycle; `forced` ones run even below the pacing goal.
    pub(crate) fn request(&self, forced: bool) {
        self.request_as(forced, false);
    }

    /// Asks for a cycle for the large objects made since the last mark
    /// (`Mutator::count_large`), unless the trigger is off or a sweep runs.
    pub(crate) fn request_for_large(&self) {
        self.request_as(false, true);
    }

    fn request_as(&self, forced: bool, large: bool) {
        let mut c = self.control.lock();
        // Checked again under the lock: a mutator that read the trigger
        // armed before a mark's end cleared it (`Cycle::resume`) asks here
        // after the phase became `Sweep`, and would run a cycle the sweep
        // may find pointless; the sweep's end arms it again (`event`).
        if large && (c.phase == Phase::Sweep || !self.large_armed.load(Ordering::Relaxed)) {
            return;
        }
        if !forced && matches!(c.phase, Phase::Stop | Phase::Mark | Phase::MarkTermination) {
            // A cycle is stopping the world or marking: the end of its mark
            // sets the trigger anew, counting what was allocated until then.
            // (Asking again here ran a second cycle right after it: a
            // mutator goes on allocating past the goal until it leaves
            // `mutate`.)
            return;
        }
        if !c.requested {
            c.requested = true;
            c.large = large;
            self.control_cv.notify_all();
        } else if !large {
            c.large = false;
        }
        c.forced |= forced;
    }

    /// Waits for a sweep under way to finish. Never waits for a pause (the
    /// caller may be a mutator the pause waits for). Returns whether it
    /// waited.
    pub(crate) fn wait_for_sweep(&self) -> bool {
        let mut c = self.control.lock();
        let mut waited = false;
        while c.phase == Phase::Sweep {
            self.control_cv.wait(&mut c);
            waited = true;
        }
        waited
    }

    /// A call that began in the ragged mark of epoch `epoch`, after its
    /// window closed, met the heap limit: waits for that mark's cycle to
    /// sweep, which frees what it found dead. Neither the mark's end (it
    /// waits for window calls and for shading brackets, `ragged.rs`) nor
    /// its sweep waits for such a call; the next cycle's start does, so
    /// the wait is for this cycle only, and only while it is under way.
    /// Gives up, and the allocation fails as before:
    /// - if a stop is requested (a mark that did not converge, or verify
    ///   mode's check, stops the world, which waits for this call);
    /// - if the end has waited past its patience for a window call on a
    ///   thread that is blocked (`Handshake::stuck`,
    ///   `thread_state.rs`): that call may wait for this one, for a lock
    ///   it holds (a collection's writer lock, a `GcLock`), or be joining
    ///   it, whatever the order they attached in.
    ///
    /// `None` if that mark is over (nothing waited for), else whether the
    /// cycle swept.
    pub(crate) fn wait_for_ragged_cycle(&self, epoch: u64) -> Option<bool> {
        if self.control.lock().ragged_epoch != epoch {
            return None;
        }
        let mut swept = false;
        self.wait_control(Waiter::Call, |c| {
            swept = c.ragged_epoch != epoch;
            swept || c.shutdown || self.handshake.stop_requested() || self.handshake.stuck()
        });
        Some(swept)
    }

    /// Waits until `done` holds of the control block.
    ///
    /// A call at the heap limit (`Waiter::Call`) just waits: its `done`
    /// gives up when the collector is stuck (`wait_for_ragged_cycle`).
    ///
    /// A mutator waiting between its own calls (`Waiter::Gate`) gives up
    /// when the handshake's gate opens for it, and this returns false: the
    /// cycle waited for is stuck on a call that may be waiting for this
    /// very thread (a scoped thread's parent, or a call waiting for a
    /// worker's answer), which must go on (`handshake.rs`, "The gate").
    /// One that pacing holds (`Waiter::Pacing`) gives up as well once the
    /// collector has waited past its patience for any call on a blocked
    /// thread, or 250 ms for calls none of which it saw blocked
    /// (`Handshake::stuck`; in a stop, for running calls only while a
    /// mutator attached after the oldest call began waits), whenever it
    /// attached: pacing only bounds the heap, which a
    /// cycle that cannot go on does not shrink, and the call waited for
    /// may be spinning for this thread's next call. Either gives up, too,
    /// when another runtime's cycle holds the process's cycle lock and is
    /// stuck so (`collector::other_holder_stuck`): this runtime's cycle
    /// waits behind it, and a call of that runtime may be waiting for this
    /// thread (one it joins, attached to this runtime). A
    /// program's wait (`Waiter::Program`) has no calls of
    /// its own to go on with: it panics, naming itself, if the cycle (its
    /// own, or the stuck one of another runtime that its own waits behind)
    /// stays stuck on calls that wait for other threads while no thread of
    /// the process can wake another, for
    /// [`STALL_PATIENCE`](crate::thread_state::STALL_PATIENCE)
    /// (`thread_state::Stall`).
    fn wait_control(&self, waiter: Waiter<'_>, mut done: impl FnMut(&Control) -> bool) -> bool {
        // The cycle's sweep and finalizer may send page runs to this thread
        // meanwhile: it takes them back as it waits, so that it can reuse
        // the blocks (nothing waits for that: a page with runs out is swept
        // all the same).
        let reclaim = loam_heap::reclaim_runs;
        let what = match waiter {
            Waiter::Gate(slot) => return self.wait_at_gate(slot, None, done),
            Waiter::Pacing(slot, held) => return self.wait_at_gate(slot, Some(held), done),
            Waiter::Call => None,
            Waiter::Program(what) => Some(what),
        };
        let mut stall = crate::thread_state::Stall::new(crate::thread_state::STALL_PATIENCE);
        // This thread polls: out of every program wait's look at the
        // process, its own and others'.
        let _aside = what.map(|_| crate::thread_state::aside());
        let mut next_look = Instant::now() + STALL_LOOKS;
        let mut c = self.control.lock();
        while !done(&c) {
            drop(c);
            reclaim();
            if let Some(what) = what.filter(|_| Instant::now() >= next_look) {
                next_look = Instant::now() + STALL_LOOKS;
                self.panic_if_stalled(&mut stall, what);
            }
            c = self.control.lock();
            if done(&c) {
                break;
            }
            self.control_cv.wait_for(&mut c, Duration::from_millis(1));
        }
        true
    }

    /// `wait_control` for a mutator between its own calls; `pacing`, for
    /// one that pacing holds, with its hold's slot in `held_cpus`.
    fn wait_at_gate(
        &self,
        slot: &crate::handshake::Slot,
        pacing: Option<&crate::held_cpus::HeldSlot<'_>>,
        mut done: impl FnMut(&Control) -> bool,
    ) -> bool {
        let reclaim = loam_heap::reclaim_runs;
        self.handshake.begin_wait(slot);
        let r = {
            let mut c = self.control.lock();
            loop {
                if done(&c) {
                    break true;
                }
                drop(c);
                reclaim();
                c = self.control.lock();
                if done(&c) {
                    break true;
                }
                // Or another runtime's cycle, which this one's waits behind,
                // is stuck on its calls: one may be waiting for this thread.
                if self.handshake.gate_admits(slot)
                    || (pacing.is_some() && self.handshake.stuck())
                    || crate::collector::other_holder_stuck(self.id)
                {
                    break false;
                }
                let poll = std::time::Duration::from_millis(1);
                if let Some(held) = pacing {
                    held.sleeps(poll);
                }
                self.control_cv.wait_for(&mut c, poll);
                if let Some(held) = pacing {
                    held.running();
                }
            }
        };
        self.handshake.end_wait(slot);
        r
    }

    /// One look of a program's wait for a cycle at the calls under way
    /// (`wait_control`); panics if they have stalled the cycle for the
    /// patience.
    fn panic_if_stalled(&self, stall: &mut crate::thread_state::Stall, what: &str) {
        // The cycle that holds this wait up: this runtime's, or, while this
        // one's waits for the process's cycle lock (its phase is `Stop`
        // from before it asks for the lock), another runtime's that holds
        // the lock stuck on its calls (`collector::stuck_holder`).
        let queued = !self.handshake.awaits_calls() && self.control.lock().phase == Phase::Stop;
        let other = queued.then(|| crate::collector::stuck_holder(self.id)).flatten();
        let held_by = other.as_deref().unwrap_or(self);
        let threads: Vec<u32> = held_by
            .mutators
            .lock()
            .iter()
            .filter(|m| m.slot.is_inside())
            .map(|m| m.slot.thread())
            .collect();
        if stall.stalled(held_by.handshake.awaits_calls(), threads) {
            let whose = match &other {
                Some(h) => format!(
                    " (of runtime {}, whose cycle holds the process's cycle lock, \
                     which this runtime's cycle waits for)",
                    h.id
                ),
                None => String::new(),
            };
            panic!(
                "loam: {what} waited {} s for a cycle held up by mutate calls{whose} \
                 that wait for other threads, while every other thread of the \
                 process waited too and none woke: the calls can only be waiting \
                 for this thread (or for each other). A thread that a \
                 mutate call waits for (a scoped thread it joins, or a thread \
                 holding a lock it wants) must not call collect, wait_for_cycle \
                 or wait_for_drops, of that runtime or another.",
                crate::thread_state::STALL_PATIENCE.as_secs()
            );
        }
    }

    /// The mark under way found `bytes` more (its GC threads, its
    /// assists, its pauses): while it counts them as live data, pacing
    /// begins no lower than twice the goal for what it has found so far.
    ///
    /// # Why
    /// The goal comes from the last full cycle's live size. A program that
    /// builds a large structure in one `mutate` call (loading its data,
    /// binary-trees' long-lived tree) runs past twice that goal before any
    /// cycle can start, and then every allocation paid sixteen bytes of
    /// marking a byte until two cycles had marked the structure: at depth
    /// 21, 3,400 holds of up to 0.3 ms each, the p99 of the whole run. The
    /// mark itself shows that the data is live as it goes.
    ///
    /// # Why it keeps the bound
    /// Pacing bounds the heap by twice the goal of the live size, which a
    /// full cycle measures as the bytes its mark finds (objects reachable
    /// at its stop, and those its barrier shaded during the mark, which
    /// may have been cut off again since: the goal counts them too):
    /// counting the same bytes as they are found, the point only reaches
    /// early where the cycle's end puts it. A minor cycle finds the same
    /// kinds of objects among the young, plus those reachable from the
    /// remembered objects, which can be garbage from before the stop (a
    /// value stored into a cell and cut off again, marked by the
    /// barrier), so it counts only when nothing was remembered at its
    /// stop. Its raised point stands until the next full
    /// cycle sets the goal again, as the goal stands on a past measure.
    ///
    /// # Why relaxed is enough
    /// The pace goal is a threshold: a mutator that reads it late paces a
    /// little longer. In a stopped cycle `live_seen` and `live_counting`
    /// change only with the world stopped, and every report of a mark
    /// comes before the stop that begins the next one (GC threads before
    /// `mark::parallel` returns, assists inside a `mutate` call, which
    /// that stop waits for), so no report counts towards another cycle's
    /// mark. A ragged start sets them with the mutators running
    /// (`cycle/ragged.rs`): an assist of the last mark whose report comes
    /// after it left that mark's count, in a call still running at the
    /// start, may count towards the new mark, at most one assist's
    /// marking, and raise the pace goal (and lower the assists' ratio,
    /// `retune_assists`) by that much at most. A report that lands after
    /// its cycle ended raises the pace goal to at most what the cycle's
    /// end set it to, or to what its mark found live.
    pub(crate) fn saw_live(&self, bytes: usize) {
        if bytes == 0 || !self.live_counting.load(Ordering::Relaxed) {
            return;
        }
        let seen = self.live_seen.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let goal = self.credited(crate::cycle::goal_for(seen, &self.config));
        if self.pace_goal.fetch_max(goal, Ordering::Relaxed) < goal {
            self.retune_assists(goal);
        }
    }

    /// The pace goal rose to `goal` while a mark runs: the assists' ratio,
    /// set at the mark's start for the headroom below the pace point of
    /// then, follows the new point (`cycle::retuned_ratio`), downwards
    /// only. A mark that meets a large structure built since the last one
    /// (binary-trees' long-lived tree, built in one call) begins with the
    /// heap far past a pace point counted from a small live size, so at
    /// the highest ratio; as it finds the structure, the point rises past
    /// the heap, and the ratio set at the start kept the mutators marking
    /// for a headroom long gone (`docs/perf-log.md`, session 36). An
    /// atomic update that only lowers a nonzero ratio: a finished mark's
    /// zero stays (a late report finds it and leaves it), and of two
    /// reports racing the lower ratio stands. The heap bound does not rest
    /// on this ratio: past the pace point every allocation pays the paced
    /// ratio whenever a mark runs (`Mutator::refill`), and this one is
    /// never below a quarter.
    pub(crate) fn retune_assists(&self, goal: usize) {
        let goal = goal.max(self.assist_goal.load(Ordering::Relaxed));
        let (expected, pace_at) = (self.assist_expected.load(Ordering::Relaxed), self.pace_at(goal));
        let used = self.heap_used.load(Ordering::Relaxed);
        let _ = self.assist_ratio.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |ratio| {
            crate::cycle::retuned_ratio(ratio, expected, pace_at, used)
        });
    }

    /// The allocation credit the mutators may hold, which the heap counts
    /// as used: a chunk each (`mutator.rs`, `CHUNK`).
    pub(crate) fn credit_slack(&self) -> usize {
        self.live_mutators
            .load(Ordering::Relaxed)
            .saturating_mul(crate::mutator::CHUNK)
    }

    /// Heap goal `goal` as the triggers and pacing read it: with room for
    /// the mutators' allocation credit as they are now (`credit_slack`),
    /// which the heap counts as used, kept under the pace cap of a heap
    /// limit. Without it, a small goal with many mutators (a minimum heap
    /// of 256 KiB and 16 idle ones, or the default 32 MiB and some five
    /// hundred pool workers) was met by their unspent credit alone: every
    /// chunk a mutator took asked for a cycle (8,193 cycles for 8 MiB of
    /// garbage, a KiB a call), and past twice the goal every call waited
    /// for one, with nothing live. A minimum heap set with
    /// `__stress_min_heap` is kept as it is (the stress tests want cycles
    /// back to back), and so is a goal that is off (`usize::MAX`). The
    /// generations keep the goal without it (`Generations::full_due`).
    pub(crate) fn credited(&self, goal: usize) -> usize {
        if self.config.min_heap_exact || goal == usize::MAX {
            return goal;
        }
        goal.saturating_add(self.credit_slack()).min(self.pace_cap.max(goal))
    }

    /// Whether the heap has reached where pacing begins (`pace_at`): a
    /// mutator then helps the collector or waits before its next call
    /// (`Mutator::pace`).
    #[inline]
    pub(crate) fn over_pace(&self) -> bool {
        let goal = self.pace_goal.load(Ordering::Relaxed);
        self.heap_used.load(Ordering::Relaxed) >= self.pace_at(goal)
    }

    /// Wakes the mutators that pacing holds (`pace`): a mark has been
    /// offered to help with (`mark::parallel`), or a sweep has taken the
    /// heap under the pace point (`sweep_freed`). Under the
    /// control mutex, which a waiter holds from its check to its wait, so
    /// that none misses it (they would otherwise sleep out their 1 ms poll).
    pub(crate) fn wake_pacers(&self) {
        self.control_cv_notify(self.control.lock());
    }

    /// Wakes every wait on the control block, under its mutex (`c`), and
    /// tells the GC threads that the mutators pacing holds were woken: one
    /// on a GC thread's CPU may not run until that thread steps aside
    /// (`held_cpus.rs`). Every wake that can end a pacing wait goes
    /// through here; the others (a request, a trim) are for the collector
    /// thread's idle wait. Under the mutex, which a waiter holds as it
    /// publishes its next sleep (`wait_at_gate`), so the ends brought
    /// forward are those of sleeps this wake ends, not of the next ones.
    pub(crate) fn control_cv_notify(&self, c: MutexGuard<'_, Control>) {
        self.control_cv.notify_all();
        self.held_cpus.pacers_woken();
        drop(c);
    }

    /// Whether the sweep under way frees enough to take the heap under
    /// where pacing begins (`sweep_frees`: what it has yet to free, at
    /// least).
    pub(crate) fn sweep_brings_under_pace(&self) -> bool {
        // The heap first: a sweep takes its bytes off `sweep_frees` before
        // it takes them off the heap (`sweep_freed`), so a heap that has
        // lost them is read with a count of frees that has too (acquire,
        // release) and no byte counts twice.
        let used = self.heap_used.load(Ordering::Acquire);
        let frees = self.sweep_frees.load(Ordering::Relaxed);
        let goal = self.pace_goal.load(Ordering::Relaxed);
        frees > 0 && used.saturating_sub(frees) < self.pace_at(goal)
    }

    /// Whether a paced mutator goes on instead of waiting: a ragged mark
    /// has traced through and has only its end left (`marked_through`),
    /// and the heap is under a quarter of the pace goal past the pace point
    /// (under a heap limit, under the pace cap: no room past it). A call
    /// that begins now begins after the mark's window closed, so a ragged
    /// end does not wait for it (a stopped termination, past
    /// `RAGGED_TRIES`, does: the mutator is then held at the gate instead
    /// of by pacing). At binary-trees depth 21 with two threads, one run in
    /// four held both mutators here for 30 - 177 ms, the longest holds of
    /// those runs: waiting for the snapshot's walk (10 - 90 ms at a 380 MB
    /// heap, single-threaded), for the other mutator's window call, or for
    /// a barrier. The room keeps a bound on the heap however long the end
    /// takes: with half the pace goal, mutators that ran on took CPU from
    /// the walk, and two runs in ten peaked at 660 MiB against 430 - 540.
    pub(crate) fn outruns_mark_end(&self) -> bool {
        if !self.marked_through.load(Ordering::Relaxed) {
            return false;
        }
        let goal = self.pace_goal.load(Ordering::Relaxed);
        let at = self.pace_at(goal);
        let room = at.saturating_add(goal / 4).min(self.pace_cap.max(at));
        self.heap_used.load(Ordering::Relaxed) < room
    }

    /// Offers `work` to the mutators that pacing holds (`help_sweep`) and
    /// wakes them.
    pub(crate) fn offer_sweep(&self, work: &Arc<crate::sweep::Work>) {
        let mut c = self.control.lock();
        c.sweep = Some(work.clone());
        self.control_cv_notify(c);
    }

    /// Withdraws the sweep offered: no mutator registers as its helper
    /// from here on (`sweep::Work`, "Helpers").
    pub(crate) fn withdraw_sweep(&self) {
        self.control.lock().sweep = None;
    }

    /// loam's heap caches memory a thread gave up as it went idle, due to
    /// go back to the OS in `due` (`loam_heap::trim`): the coordinator
    /// gives it back then unless another thread takes it first
    /// (`Control::trim_at`).
    pub(crate) fn trim_later(&self, due: Option<Duration>) {
        if due.is_none() {
            return;
        }
        let mut c = self.control.lock();
        if crate::collector::trim_within(&mut c, due) {
            self.control_cv.notify_all();
        }
    }

    /// A mutator that pacing holds, with no mark to help: sweeps pages of
    /// the sweep under way, if any are left and no cycle has completed
    /// since `seen`, until `until` or until the heap is under the pace
    /// point; `beat` before each claim. Returns whether it swept any.
    ///
    /// The cycle waits for it to finish its claim of pages (at most
    /// `sweep::CLAIM`) before the sweep ends: the one wait of the
    /// collector for a mutator outside a call, as short as a claim unless
    /// the mutator's thread is descheduled meanwhile.
    pub(crate) fn help_sweep(&self, seen: u64, until: Instant, beat: &dyn Fn()) -> bool {
        let helper = {
            let c = self.control.lock();
            match &c.sweep {
                // Registered under the mutex, while offered (`sweep::Work`,
                // "Helpers").
                Some(w) if w.has_pages() && c.completed == seen => {
                    // SAFETY: under the control mutex, with `w` offered
                    // there.
                    unsafe { crate::sweep::Helper::register(w) }
                }
                _ => return false,
            }
        };
        // `beat` before each claim: the help still runs (`held_cpus.rs`).
        let enough = || {
            beat();
            !self.over_pace()
        };
        helper.help(until, &enough, &|bytes| self.sweep_freed(bytes))
    }

    /// The sweep freed `bytes` (a claim of pages, or a `GlobalAlloc`
    /// space's whole sweep): off `sweep_frees`, then off the heap. A page
    /// sweep reports each claim as it finishes it, so that a mutator that
    /// pacing holds until the heap is under the pace point goes on as soon
    /// as it is, woken here, not when the last page is swept: at
    /// binary-trees depth 16 with two threads, those waits for the end of
    /// a 1 – 8 ms sweep were every hold over a quarter of a millisecond.
    pub(crate) fn sweep_freed(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let less = |n: usize| Some(n.saturating_sub(bytes));
        let _ = self.sweep_frees.fetch_update(Ordering::Relaxed, Ordering::Relaxed, less);
        // Saturating, defensively: a miscount must not wrap (a reused
        // runtime id meets no object of an earlier runtime, `release_id`).
        // Release: see `sweep_brings_under_pace`.
        let before = self
            .heap_used
            .fetch_update(Ordering::Release, Ordering::Relaxed, less)
            .unwrap_or(0);
        let at = self.pace_at(self.pace_goal.load(Ordering::Relaxed));
        if before >= at && before.saturating_sub(bytes) < at {
            self.wake_pacers();
        }
    }

    /// Where pacing begins for a heap goal of `goal`: twice the goal, or
    /// under a limit seven eighths of it if that is lower, but never below
    /// the goal itself. (Only live data over seven eighths of the limit
    /// puts the goal above that, `cycle::goal_under_limit`: pacing there
    /// would hold every call for a cycle.)
    #[inline]
    pub(crate) fn pace_at(&self, goal: usize) -> usize {
        goal.saturating_mul(2).min(self.pace_cap.max(goal))
    }

    /// A mutator has allocated to where pacing begins (`pace_at`: twice the
    /// goal, or less under a limit): waits (outside `mutate`) until the
    /// next cycle has swept, or its sweep has brought the heap under that
    /// again, or a concurrent mark or a sweep offers work to help with, or
    /// the mark has only its end left (`outruns_mark_end`).
    /// Keeps a mutator that outruns the collector from growing the heap
    /// without bound. Returns true only in the last two cases: the caller
    /// helps or goes on, and may come back. Never more than one
    /// cycle: a heap that stays over that point (live data the goal has
    /// not caught up with) must not keep a mutator waiting for ever.
    /// `seen` is [`completed`](Self::completed) as the mutator's pacing
    /// began, so that a cycle that ends between two of its waits counts.
    ///
    /// With `may_pass`, the wait also ends once the cycle's mark is over
    /// and its sweep is set to take the heap under the pace point
    /// (`sweep_brings_under_pace`): the caller goes on without waiting for
    /// the sweep.
    pub(crate) fn pace(
        &self,
        slot: &crate::handshake::Slot,
        held: &crate::held_cpus::HeldSlot<'_>,
        seen: u64,
        may_pass: bool,
    ) -> bool {
        {
            let mut c = self.control.lock();
            if !c.requested && !matches!(c.phase, Phase::Stop | Phase::Mark | Phase::MarkTermination) {
                c.requested = true;
                self.control_cv.notify_all();
            }
            c.large = false;
        }
        let mut progress = false;
        let work = |c: &Control| {
            crate::mark::offered(&self.assist).is_some() || c.sweep.as_ref().is_some_and(|w| w.has_pages())
        };
        let mut help = false;
        self.wait_control(Waiter::Pacing(slot, held), |c| {
            progress = c.completed != seen
                || c.shutdown
                || !self.over_pace()
                || (may_pass && self.sweep_brings_under_pace());
            // Look again: the caller goes on (`outruns_mark_end`).
            help = work(c) || self.outruns_mark_end();
            progress || help
        });
        // Gave up (the gate opened, or the collector is stuck on a call),
        // or progress: the caller goes on.
        !progress && help
    }

    /// Cycles completed so far: what a pacing mutator counts "one cycle at
    /// most" from.
    pub(crate) fn completed(&self) -> u64 {
        self.control.lock().completed
    }

    /// A paced mutator's assist found nothing to take: the GC threads hold
    /// the rest of the mark of `share`. Waits until they may have handed
    /// some back (`d`), or have marked enough to pay `debt` (or a report's
    /// worth of it) as credit (`mark::Share`, "Background credit"), or
    /// another round of the mark is offered, or the mark is over, or a
    /// cycle has completed since
    /// `seen`, or the heap is under where pacing begins again, or the
    /// runtime shuts down; true in the last three cases (and when the gate
    /// opens or the collector is stuck on a call: the mutator must go on),
    /// false when it should try again.
    /// Go's assists park the same way until the background workers have
    /// done the work, not for the whole cycle.
    pub(crate) fn pace_briefly(
        &self,
        slot: &crate::handshake::Slot,
        held: &crate::held_cpus::HeldSlot<'_>,
        seen: u64,
        d: std::time::Duration,
        share: &crate::mark::Share,
        debt: usize,
    ) -> bool {
        let until = std::time::Instant::now() + d;
        let want = debt.min(crate::mark::PROGRESS_BYTES);
        let mut over = false;
        // Counted before the first read of the credit (`mark::Share`,
        // "Why a wake is never lost for long").
        share.wait_for_credit(true);
        let waited = self.wait_control(Waiter::Pacing(slot, held), |c| {
            over = c.completed != seen || c.shutdown || !self.over_pace();
            // A round ends when its work runs out, and the next one (what
            // the barriers shaded meanwhile) is offered anew: 1.3 ms later
            // at the start of a ragged mark, after the snapshot's walk. Or
            // the mark is over, and what it owed with it: the sweep that
            // follows may be the caller's to help (`help_sweep`). (Waiting
            // out the slice there was most holds over 0.4 ms left at
            // binary-trees depth 16 with two and three threads.)
            let next_round = || !crate::mark::offered(&self.assist).is_some_and(|s| std::ptr::eq(&*s, share));
            over || share.credit() >= want || next_round() || std::time::Instant::now() >= until
        });
        share.wait_for_credit(false);
        over || !waited
    }

    /// Waits for the cycle under way to finish (`Runtime::wait_for_cycle`).
    pub(crate) fn wait_for_cycle(&self) {
        self.refuse_waits("wait_for_cycle");
        let target = {
            let c = self.control.lock();
            if c.phase == Phase::Idle && !c.requested {
                return;
            }
            c.completed + 1
        };
        self.wait_control(Waiter::Program("wait_for_cycle"), |c| {
            c.completed >= target || c.shutdown
        });
    }

    /// Panics where waiting for a cycle would wait for itself, or for
    /// threads a forked child does not have.
    fn refuse_waits(&self, what: &str) {
        crate::forked::refuse_since(self.born, what);
        assert!(
            !crate::mutator::inside_mutate(),
            "loam: {what} called inside a mutate closure; it would wait for \
             that call to return. Call it after mutate returns."
        );
        assert!(
            !collector::in_cycle_thread(),
            "loam: {what} called on a GC thread (from a Trace impl the mark \
             ran): it would wait for the cycle that runs it"
        );
        assert!(
            !collector::is_coordinator_of(self.id),
            "loam: {what} called from this runtime's own on_cycle hook: it \
             would wait for the collector that runs the hook"
        );
        assert!(
            !collector::on_coordinator(),
            "loam: {what} called from another runtime's on_cycle hook: a \
             hook must not wait for any runtime's cycle (two runtimes whose \
             hooks wait for each other's cycles wait for ever); hand it to a \
             thread of your own"
        );
    }

    /// Runs a full cycle that starts after this call, and waits for its sweep
    /// to end. First lets a cycle under way finish. With `yield_to_gate` (the heap-limit retry of a mutator), gives up
    /// as [`wait_control`](Self::wait_control) says.
    pub(crate) fn collect(&self, yield_to_gate: Option<&crate::handshake::Slot>) {
        self.refuse_waits("collect");
        let waiter = || match yield_to_gate {
            Some(slot) => Waiter::Gate(slot),
            None => Waiter::Program("collect"),
        };
        if !self.wait_control(waiter(), |c| c.phase == Phase::Idle) {
            return;
        }
        // Blocks earlier sweeps sent this thread (or an exited thread's heap
        // whose segments it adopted) come back for reuse.
        loam_heap::drain_orphans();
        loam_heap::reclaim_runs();
        let target = {
            let mut c = self.control.lock();
            // A cycle already past its start may have missed what the
            // caller just dropped: wait for the one after it.
            let target = c.completed + if c.phase == Phase::Idle { 1 } else { 2 };
            c.requested = true;
            c.forced = true;
            c.large = false;
            self.control_cv.notify_all();
            target
        };
        self.wait_control(waiter(), |c| c.completed >= target || c.shutdown);
    }
}

/// The collector at a lock the mutators share (the global root table, the
/// weak list): the flag is raised from before it asks for the lock until
/// after it lets go (declare it before the guard), so that a mutator's
/// wait for the lock counts as a hold only when the collector is what it
/// waits for (`mutator::take_counting`).
pub(crate) struct Walk<'a>(&'a AtomicBool);

impl<'a> Walk<'a> {
    pub(crate) fn begin(flag: &'a AtomicBool) -> Walk<'a> {
        flag.store(true, Ordering::Relaxed);
        Walk(flag)
    }
}

impl Drop for Walk<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// How long the cycle lock's holder must have been stuck on a call before
/// the drop of another runtime's last handle stops waiting for its
/// collector (`Handle::drop`).
const GIVE_UP_DROP: Duration = Duration::from_secs(1);

/// Owns the collector thread; the last [`Runtime`], [`Mutator`] or root
/// handle to go drops it, which frees every object left.
pub(crate) struct Handle {
    pub(crate) shared: Arc<Shared>,
    coordinator: Option<JoinHandle<()>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // In a forked child there is no collector to stop or wait for, and
        // a lock another thread held at the fork is held for ever: leak.
        if crate::forked::since(self.shared.born) {
            return;
        }
        // The last cycle frees every object left (pages with runs out
        // included: their other blocks are swept, see `cycle.rs`).
        loam_heap::reclaim_runs();
        {
            let mut c = self.shared.control.lock();
            c.shutdown = true;
            self.shared.control_cv_notify(c);
        }
        // On a GC thread (a sweep ran the drop glue of an object holding the
        // last handle) joining could wait for ourselves, or, for another
        // runtime, for the cycle lock our own cycle holds: the collector
        // finishes on its own.
        // Inside a `mutate` call (of another runtime: this one's handles
        // outlive its calls) the same holds: the cycle that holds the lock
        // may be waiting for that very call to return.
        if collector::on_gc_thread() || crate::mutator::inside_mutate() {
            return;
        }
        let Some(t) = self.coordinator.take() else {
            return;
        };
        // Not joined outright: if another runtime's cycle holds the cycle
        // lock, waiting for a call that waits for this thread (a scoped
        // thread that the call joins drops the last handle), the last
        // cycle never gets the lock. Once that cycle's handshake has found
        // a call stuck on a blocked thread for a whole second (a verdict
        // of the process's cycle, which cannot name the thread the call
        // waits for: a second of it rules out the passing waits of calls
        // that wait for nothing here), this thread lets the collector
        // finish on its own, as on a GC thread.
        *self.shared.dropper.lock() = Some(std::thread::current());
        let mut stuck_since: Option<Instant> = None;
        // The coordinator takes the slot at its last act: then it is done
        // but for returning, and the join is short.
        while self.shared.dropper.lock().is_some() && !t.is_finished() {
            if !collector::other_holder_stuck(self.shared.id) {
                stuck_since = None;
            } else if stuck_since.get_or_insert_with(Instant::now).elapsed() >= GIVE_UP_DROP {
                self.shared.dropper.lock().take();
                return;
            }
            // Woken by the coordinator's end; the timeout is for the look
            // at the holder.
            std::thread::park_timeout(Duration::from_millis(10));
        }
        let _ = t.join();
        // What the last cycles' sweep and finalizer sent this thread.
        loam_heap::reclaim_runs();
    }
}

/// Runtime ids in use; an id is free again after its runtime's last cycle,
/// which frees every object of the runtime (the blocks other runtimes'
/// finalizers hold are left out of its snapshot, not their pages) and
/// whose destructors have all run when the id is released: no object
/// carries the id when a later runtime takes it. (The last cycle's page
/// runs may still be out, their blocks' allocated bits set; every
/// snapshot leaves pending blocks out, so no sweep meets them: not by
/// their headers, nor by a page tagged with the id, `sweep.rs`.)
static IDS: Mutex<(u16, Vec<u16>)> = Mutex::new((1, Vec::new()));

/// Runtime ids in use (taken and not given back): a hint for a stop,
/// which looks for another runtime's queued cycle only when there can be
/// one (`collector::several_runtimes`). Relaxed.
pub(crate) static IDS_IN_USE: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn take_id() -> u16 {
    let mut ids = IDS.lock();
    let id = match ids.1.pop() {
        Some(id) => id,
        None => {
            let id = ids.0;
            // Not `u16::MAX`, which the heap's page tags keep for "mixed"
            // (`loam_heap::TAG_MIXED`, `sweep.rs`). Before the count: a
            // build refused here holds no id.
            assert!(id != loam_heap::TAG_MIXED, "loam: more than 65534 runtimes alive at once");
            ids.0 += 1;
            id
        }
    };
    IDS_IN_USE.fetch_add(1, Ordering::Relaxed);
    id
}

pub(crate) fn release_id(id: u16) {
    IDS.lock().1.push(id);
    IDS_IN_USE.fetch_sub(1, Ordering::Relaxed);
}

/// A managed heap with its collector: a handle, cheap to clone and `Send +
/// Sync`.
///
/// Threads [`attach`](Runtime::attach) to it to become mutators. The
/// collector runs on dedicated threads. When the last handle (runtime,
/// mutator, global root or managed pool) goes away, every object left is
/// dropped and freed.
///
/// # Dropping the last handle
/// The drop waits for that: the cycle under way, a last cycle, and every
/// destructor left, run on the runtime's finalizer thread (except where
/// waiting could wait for itself: on a GC thread or the finalizer, inside
/// another runtime's `mutate` call, and in a forked child, the drop
/// returns and the collector finishes on its own; so it does once another
/// runtime's cycle, which this one's waits behind, has found a call stuck
/// on a blocked thread for a second: the call may be waiting for this
/// thread; use [`StatsHandle::wait_final`] where the end must have come).
/// A destructor
/// that waits for something the dropping thread holds (a lock) therefore
/// deadlocks it, as with [`wait_for_drops`](Runtime::wait_for_drops);
/// drop the last handle with nothing held that destructors need.
///
/// A handle kept inside the runtime's own heap (a `Runtime`, `GlobalRoot`
/// or `ManagedPool` in a managed object, through a `Mutex` or a
/// `#[trace(skip)]` field, or captured by its [`on_cycle`] hook) is never
/// the last one: the runtime, its threads and its objects stay for the
/// life of the process, as an `Rc` cycle does. Keep handles outside the
/// heap they serve.
///
/// [`on_cycle`]: RuntimeBuilder::on_cycle
///
/// # Examples
/// ```
/// use loam_runtime::{Gc, GcCell, Runtime, Trace};
///
/// #[derive(Trace)]
/// struct Node<'gc> {
///     value: u64,
///     next: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
/// }
///
/// let rt = Runtime::builder().gc_threads(2).build();
/// let mut m = rt.attach();
/// let total = m.mutate(|mc| {
///     let mut head = None;
///     for value in 0..1000 {
///         head = Some(mc.alloc(Node { value, next: GcCell::new(head) }));
///     }
///     let mut sum = 0;
///     let mut cur = head;
///     while let Some(n) = cur {
///         sum += n.value;
///         cur = n.next.get();
///     }
///     sum
/// });
/// assert_eq!(total, 499_500);
/// rt.collect(); // nothing is rooted: everything is freed
/// assert_eq!(rt.stats().live_size, 0);
/// ```
#[derive(Clone)]
pub struct Runtime {
    pub(crate) handle: Arc<Handle>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("id", &self.handle.shared.id)
            .field(
                "heap_size",
                &self.handle.shared.heap_used.load(Ordering::Relaxed),
            )
            .finish()
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::new()
    }
}

impl Runtime {
    /// A runtime with the default settings (and the `LOAM_*` environment
    /// overrides).
    pub fn new() -> Runtime {
        RuntimeBuilder::new().build()
    }

    /// A builder for a runtime with chosen settings.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::new()
    }

    /// Makes the calling thread a mutator of this runtime.
    ///
    /// # Panics
    /// If the thread already has a live [`Mutator`] of this runtime; on a
    /// GC thread or in this runtime's `on_cycle` hook (its calls would wait
    /// for the cycle running it); in a child process forked after the
    /// runtime was built.
    pub fn attach(&self) -> Mutator {
        Mutator::attach(self.handle.clone())
    }

    /// Runs a full collection and waits for its sweep to finish. Call it from
    /// any thread, but not from inside a `mutate` closure (that mutator would
    /// never stop, or, for another runtime, hold up the cycle this one waits
    /// for: this panics instead).
    ///
    /// # Panics
    /// Inside a `mutate` call of any runtime, on a GC thread, or in an
    /// `on_cycle` hook of any runtime. On a thread that a `mutate`
    /// call of this runtime waits for (a scoped thread it joins, or a
    /// thread holding a lock it wants), whose cycle would wait for that
    /// call, or a call of another runtime whose cycle holds the process's
    /// cycle lock while it waits for that call (this runtime's cycle waits
    /// for the lock), rather than hang: on Linux, once the collector has
    /// waited 10 s for calls that wait for other threads (a join, a lock, a
    /// channel) while every other thread of the process waits in the
    /// same way or on a timeout longer than that, and none wakes. (A
    /// program whose long timed wait would have ended it reads the same.)
    pub fn collect(&self) {
        self.handle.shared.collect(None);
    }

    /// Waits until the destructors of every object the collector has found
    /// dead so far have run (a cycle under way first finishes its sweep).
    /// [`collect`](Self::collect) does not wait for destructors, which run
    /// on the runtime's finalizer thread: a destructor may block, and a
    /// collection waiting for it could deadlock with it.
    ///
    /// # Examples
    /// ```
    /// use loam_runtime::{Runtime, Trace};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// static DROPS: AtomicUsize = AtomicUsize::new(0);
    /// struct Counted;
    /// impl Drop for Counted {
    ///     fn drop(&mut self) {
    ///         DROPS.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// }
    /// #[derive(Trace)]
    /// struct Obj {
    ///     #[trace(skip)]
    ///     _c: Counted,
    /// }
    ///
    /// let rt = Runtime::builder().gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     mc.alloc(Obj { _c: Counted });
    /// });
    /// rt.collect(); // found dead, its destructor queued
    /// rt.wait_for_drops(); // and run
    /// assert_eq!(DROPS.load(Ordering::Relaxed), 1);
    /// ```
    ///
    /// # Panics
    /// Inside a `mutate` call (a cycle under way may be waiting for it), in
    /// a destructor the collector runs or in an `on_cycle` hook, of any
    /// runtime (it would wait for itself, or two runtimes' destructors or
    /// hooks for each other); on a
    /// thread that a `mutate` call waits for, as
    /// [`collect`](Self::collect). The wait for the destructors themselves
    /// has no such check: one blocked on something the caller holds (a
    /// lock) waits with it for ever.
    pub fn wait_for_drops(&self) {
        let shared = &*self.handle.shared;
        // The waits `collect` refuses, and a destructor's besides.
        shared.refuse_waits("wait_for_drops");
        assert!(
            !collector::is_finalizer(),
            "loam: wait_for_drops called from a destructor run by the collector: \
             it would wait for itself, or for another runtime's destructor that \
             waits for this one"
        );
        shared.wait_control(Waiter::Program("wait_for_drops"), |c| {
            c.phase == Phase::Idle || c.shutdown
        });
        shared.finalizer.wait_idle();
    }

    /// The object space: `"loam pages"`, or the type name of the
    /// `GlobalAlloc` given to [`RuntimeBuilder::global_alloc`].
    pub fn object_space(&self) -> &'static str {
        self.handle.shared.space.name()
    }

    /// The collector's statistics so far.
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::new();
    /// rt.collect();
    /// let s = rt.stats();
    /// assert!(s.cycles >= 1);
    /// println!(
    ///     "{} cycles, longest pause a mutator saw {:?}, p99 {:?}",
    ///     s.cycles,
    ///     s.mutator_pauses.max(),
    ///     s.mutator_pauses.p99()
    /// );
    /// ```
    pub fn stats(&self) -> GcStats {
        self.handle.shared.current_stats()
    }

    /// A handle on this runtime's statistics that outlives it: once the
    /// runtime is dropped and its last cycle has run, it holds the final
    /// figures (see [`StatsHandle`]).
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle {
            cell: self.handle.shared.final_stats.clone(),
            live: Arc::downgrade(&self.handle.shared),
            id: self.handle.shared.id,
            born: self.handle.shared.born,
        }
    }

    /// Waits for the cycle under way, or one asked for and not yet begun,
    /// to finish its sweep, without asking for another (unlike
    /// [`collect`](Self::collect)); returns at once when none runs or is
    /// due.
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::new();
    /// let before = rt.stats().cycles;
    /// rt.wait_for_cycle(); // nothing under way: no cycle forced
    /// assert_eq!(rt.stats().cycles, before);
    /// ```
    ///
    /// # Panics
    /// As [`collect`](Self::collect): inside a `mutate` call, on a GC
    /// thread, in an `on_cycle` hook of any runtime, or on a thread that a
    /// `mutate` call waits for.
    pub fn wait_for_cycle(&self) {
        self.handle.shared.wait_for_cycle();
    }

    /// Whether two handles name the same runtime.
    pub fn ptr_eq(a: &Runtime, b: &Runtime) -> bool {
        Arc::ptr_eq(&a.handle, &b.handle)
    }
}

/// Settings for a [`Runtime`]. Each has a default; the environment
/// variables override the builder: `LOAM_GC_PERCENT`, `LOAM_HEAP_LIMIT`
/// (`512M`, `2GiB`, `16MB`, `0` for none), `LOAM_MIN_HEAP`,
/// `LOAM_GC_THREADS`, `LOAM_GC_CONCURRENT_THREADS`, `LOAM_GCTRACE`,
/// `LOAM_GCVERIFY`, `LOAM_GC_GENERATIONAL`, `LOAM_GC_CONCURRENT`,
/// `LOAM_GC_RAGGED` and `LOAM_GC_PAUSE_BUDGET_US`. Sizes and flags read as
/// [`loam_heap::parse_size`] and [`loam_heap::parse_flag`] say. A bad value
/// is reported on stderr and ignored, except a heap limit, which is an
/// error ([`try_build`](Self::try_build)).
///
/// # Examples
/// ```
/// let rt = loam_runtime::Runtime::builder()
///     .gc_threads(2)
///     .gc_percent(200)
///     .heap_limit(256 << 20)
///     .min_heap(8 << 20)
///     .on_cycle(|e| assert!(e.bytes_freed <= e.heap_before))
///     .build();
/// rt.collect();
/// assert_eq!(rt.stats().cycles, 1);
/// ```
pub struct RuntimeBuilder {
    config: Config,
    hook: Option<Hook>,
    env: bool,
    space: Option<crate::space::Space>,
}

impl fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("config", &self.config)
            .field("hook", &self.hook.is_some())
            .field("space", &self.space.as_ref().map_or("loam pages", |s| s.name()))
            .finish()
    }
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder::new()
    }
}

impl RuntimeBuilder {
    /// The defaults: one GC thread per CPU, gc percent 100, no heap limit, a
    /// 32 MiB minimum heap, no trace, no verify.
    pub fn new() -> Self {
        RuntimeBuilder {
            config: Config::default(),
            hook: None,
            env: true,
            space: None,
        }
    }

    /// GC threads that mark and sweep (at least 1, at most four per CPU:
    /// more is capped, with a warning).
    pub fn gc_threads(mut self, n: usize) -> Self {
        self.config.gc_threads = n.max(1);
        self
    }

    /// How many of the GC threads trace while the mutators run, in a
    /// concurrent mark (at least 1, at most [`gc_threads`](Self::gc_threads)).
    /// The default is a quarter of the GC threads, at least one, as Go's
    /// collector takes a quarter of the CPUs: the rest stay with the
    /// mutators, which pay for what they allocate during the mark with
    /// marking of their own (assists). The pauses and the sweep use every
    /// GC thread.
    ///
    /// ```
    /// let rt = loam_runtime::Runtime::builder()
    ///     .gc_threads(4)
    ///     .concurrent_gc_threads(2)
    ///     .build();
    /// # drop(rt);
    /// ```
    pub fn concurrent_gc_threads(mut self, n: usize) -> Self {
        self.config.concurrent_gc_threads = Some(n.max(1));
        self
    }

    /// Start a cycle when the heap has grown by this percentage over the live
    /// size of the last one (Go's GOGC). `u32::MAX` turns pacing off: cycles
    /// then run only when the program asks ([`Runtime::collect`]) or an
    /// allocation meets the heap limit, and what they clear up waits for
    /// them, the records of threads that attached and went (a few KiB
    /// each) included.
    pub fn gc_percent(mut self, percent: u32) -> Self {
        self.config.gc_percent = percent;
        self
    }

    /// Refuse allocations that would take the managed heap past `bytes`
    /// (after a collection could not free enough): `try_alloc` returns
    /// `Err`, `alloc` panics. The heap goal is then kept at most halfway
    /// from the live size to the limit (and under seven eighths of it while
    /// the live data is), and pacing holds mutators between their calls
    /// from seven eighths of it at the latest, so that cycles, which run
    /// between calls, free garbage before an allocation meets the limit.
    /// With [`gc_percent`](Self::gc_percent) at `u32::MAX` neither applies.
    /// Zero means no limit, as `LOAM_HEAP_LIMIT=0` does.
    pub fn heap_limit(mut self, bytes: usize) -> Self {
        self.config.heap_limit = (bytes != 0).then_some(bytes);
        self
    }

    /// Never start a paced cycle below this heap size, unless a heap limit
    /// needs one sooner (the goal stays at most halfway from the live size
    /// to the limit, see [`heap_limit`](Self::heap_limit)) or large objects
    /// do (past 128 KiB: those made since the last mark ask for a cycle
    /// once they pass an eighth of the goal, while the last cycle found
    /// large objects dead). At least
    /// 256 KiB: a smaller value is raised to it, with a warning (the heap
    /// counts each mutator's unspent allocation credit, 64 KiB, and
    /// under a few of those every call would wait for a cycle).
    pub fn min_heap(mut self, bytes: usize) -> Self {
        self.config.min_heap = bytes;
        self.config.min_heap_exact = false;
        self
    }

    /// Not public API: a minimum heap below the floor, as given, for
    /// stress tests that want a cycle at nearly every allocation chunk.
    #[doc(hidden)]
    pub fn __stress_min_heap(mut self, bytes: usize) -> Self {
        self.config.min_heap = bytes;
        self.config.min_heap_exact = true;
        self
    }

    /// Print one line per cycle on stderr (as `LOAM_GCTRACE=1`).
    pub fn gc_trace(mut self, on: bool) -> Self {
        self.config.trace = on;
        self
    }

    /// After each mark, re-mark single-threaded and abort if the marks
    /// differ; poison freed objects (as `LOAM_GCVERIFY=1`). Slow.
    pub fn verify(mut self, on: bool) -> Self {
        self.config.verify = on;
        self
    }

    /// Minor cycles (default on; `LOAM_GC_GENERATIONAL=0` turns them off):
    /// between full cycles, a cycle keeps the marks of objects that survived
    /// earlier ones (sticky mark bits) and traces only what was allocated
    /// since, from the roots and from the objects the barrier cells recorded.
    /// Off, every cycle marks the whole live heap.
    pub fn generational(mut self, on: bool) -> Self {
        self.config.generational = on;
        self
    }

    /// Concurrent marking (default on; `LOAM_GC_CONCURRENT=0` turns it
    /// off). A cycle marks in its first pause for up to the
    /// [`mark_pause_budget`](Self::mark_pause_budget); if the mark is not
    /// done by then, the mutators resume and the GC threads mark on behind
    /// the barrier cells' snapshot barrier, and a second, short pause ends
    /// the mark. Off, the whole mark is one pause, however long.
    pub fn concurrent(mut self, on: bool) -> Self {
        self.config.concurrent = on;
        self
    }

    /// Whether cycles begin and end their marks with per-mutator
    /// handshakes instead of stopping the world (default on;
    /// `LOAM_GC_RAGGED=0` turns it off). A ragged cycle waits for each
    /// `mutate` call under way to end once, while every mutator keeps
    /// entering and leaving `mutate`: no mutator waits for another's call.
    /// Forced collections, verify mode's checks and `GlobalAlloc` spaces
    /// still stop the world. Off, every cycle stops the world to begin
    /// and end its mark, which waits for every call under way; its heap
    /// grows for one call's length where a ragged cycle's grows for two
    /// (see the README's known problems).
    pub fn ragged_handshakes(mut self, on: bool) -> Self {
        self.config.ragged = on;
        self
    }

    /// How long the first pause of a cycle may mark before the rest goes
    /// concurrent (default 150 µs; `LOAM_GC_PAUSE_BUDGET_US`). Zero sends
    /// every mark past its roots to the concurrent phase. The pauses that
    /// end a concurrent mark trace for this long too, but for 50 µs at
    /// least, so that each makes progress.
    pub fn mark_pause_budget(mut self, budget: std::time::Duration) -> Self {
        self.config.mark_pause_budget = budget;
        self
    }

    /// Puts the runtime's objects in `alloc`, any `GlobalAlloc` (the
    /// system's, mimalloc, jemalloc, snmalloc, ...), instead of loam's own
    /// pages: each object is allocated by its mutator through `alloc` and
    /// freed through it by the GC threads' sweep, the pattern the seeds
    /// measured memory managers under. Everything else holds as for the
    /// pages (marking, barriers, weak references, minor cycles, pacing, the
    /// heap limit, stats); each object costs 16 bytes of prefix and a word
    /// of registry more (`space.rs`).
    ///
    /// # Examples
    /// ```
    /// use loam_runtime::Runtime;
    ///
    /// let rt = Runtime::builder().global_alloc(std::alloc::System).build();
    /// let mut m = rt.attach();
    /// let n = m.mutate(|mc| *mc.alloc(41_u64) + 1);
    /// assert_eq!(n, 42);
    /// rt.collect();
    /// assert_eq!(rt.object_space(), "std::alloc::System");
    /// ```
    pub fn global_alloc<A: std::alloc::GlobalAlloc + Send + Sync + 'static>(mut self, alloc: A) -> Self {
        self.space = Some(crate::space::Space::Alloc(crate::alloc_space::AllocSpace::new(alloc)));
        self
    }

    /// Ignore the `LOAM_*` environment variables (for tests that must not
    /// depend on the caller's environment). The runtime's own: the heap's
    /// (`LOAM_PURGE_DELAY_MS`, `LOAM_HUGE_PAGES`, `LOAM_GUARD_PAGES`) are
    /// the process's, read once as the first heap is made.
    pub fn ignore_env(mut self) -> Self {
        self.env = false;
        self
    }

    /// Calls `hook` on the runtime's coordinator thread after each cycle's
    /// sweep. It must not
    /// block for long or touch this runtime's heap. Nor may it wait for
    /// anything a `mutate` call of this runtime may hold (a lock taken
    /// inside a call, a channel a call fills): the runtime's next cycle
    /// waits for the hook, and a call that meets the heap limit as it
    /// begins, or one that pacing holds, waits for that cycle, so the two
    /// would wait for each other for ever. (A call that meets the limit
    /// inside waits for the sweep only, which ends before the hook.) Hand
    /// such work to a thread of your own.
    ///
    /// # Panics (inside the hook, contained and counted)
    /// A wait for any runtime's cycle from the hook: `collect`,
    /// `wait_for_cycle`, `wait_for_drops`, `StatsHandle::wait_final`, and a
    /// `mutate` call of another runtime that meets its heap limit (it
    /// collects first). Two runtimes whose hooks collected each other
    /// waited for each other for ever. For the same reason pacing never
    /// holds a hook's calls into another runtime.
    pub fn on_cycle(mut self, hook: impl Fn(&CycleEvent) + Send + Sync + 'static) -> Self {
        self.hook = Some(Box::new(hook));
        self
    }

    /// Starts the runtime and its GC threads.
    ///
    /// # Panics
    /// If a `LOAM_*` variable the runtime must understand cannot be read
    /// (see [`try_build`](Self::try_build)), on a GC thread, or if the OS
    /// refuses to start the GC threads.
    pub fn build(self) -> Runtime {
        match self.try_build() {
            Ok(rt) => rt,
            Err(e) => panic!("loam: the runtime cannot start: {e}"),
        }
    }

    /// Starts the runtime and its GC threads, or says which setting it
    /// cannot start with: a `LOAM_HEAP_LIMIT` that cannot be read (a safety
    /// limit is never taken for "none"). Other bad `LOAM_*` values are
    /// reported on stderr and ignored.
    ///
    /// # Examples
    /// ```
    /// let rt = loam_runtime::Runtime::builder().gc_threads(1).try_build()?;
    /// # drop(rt);
    /// # Ok::<(), loam_runtime::ConfigError>(())
    /// ```
    ///
    /// A runtime may be built anywhere but on a GC thread: a start waits
    /// for no cycle (`runtime_count.rs`), so also inside a `mutate` call,
    /// or on a thread such a call waits for while a cycle waits for the
    /// call. Dropping its last handle inside a `mutate` call returns at
    /// once and leaves the last cycle to the collector; on a thread a call
    /// waits for, the drop waits for the last cycle, which waits for the
    /// cycle under way, and gives up the same way once that cycle has found
    /// the call stuck for a second.
    ///
    /// # Panics
    /// On a GC thread (in a `Trace` impl the mark ran), or if the OS
    /// refuses to start the GC threads.
    pub fn try_build(self) -> Result<Runtime, ConfigError> {
        // A `Trace` impl must never block (`trace.rs`), and a start spawns
        // threads; nor could the impl use the runtime (`attach` panics on
        // a GC thread). Not checked in a mutator's assists and barriers,
        // which run `Trace` impls too, under the same rule.
        assert!(
            !collector::in_cycle_thread(),
            "loam: a runtime cannot be built on a GC thread (in a Trace impl): \
             a Trace impl must not block, and could not attach to it"
        );
        crate::panics::install_quiet_hook();
        let mut config = self.config;
        if self.env {
            config.apply_env()?;
        }
        config.cap_gc_threads();
        config.floor_min_heap();
        if let Some(limit) = config.heap_limit {
            if limit < config.min_heap && config.gc_percent != u32::MAX {
                crate::collector::say(format_args!(
                    "loam: the heap limit ({limit} bytes) is below the minimum heap ({} bytes): \
                     cycles start before the minimum heap, halfway from the live size to the limit",
                    config.min_heap
                ));
            }
        }
        let id = take_id();
        // Off (`gc_percent` at `u32::MAX`): no goal from the start, as after
        // every cycle (`goal_for`), or the first would come at the minimum heap.
        let goal = crate::cycle::goal_for(0, &config);
        let pace_cap = config.pace_cap();
        // A managed heap on 2 MiB pages (`loam_heap::prefer_huge_pages`:
        // unless `LOAM_HUGE_PAGES` says otherwise; for the whole process,
        // from now on), when its objects are in loam's pages.
        if !matches!(self.space, Some(crate::space::Space::Alloc(_))) {
            loam_heap::prefer_huge_pages();
        }
        // Registers the asymmetric fence now, not in the first `GcList`
        // written by a second thread inside a call (a first registration
        // can wait out a kernel grace period).
        crate::fence::available();
        let shared = Arc::new(Shared {
            id,
            born: crate::forked::generation(),
            gone_look_at: AtomicUsize::new(0),
            live_mutators: AtomicUsize::new(0),
            held_cpus: crate::held_cpus::HeldCpus::new(),
            handshake: Handshake::for_runtime(id),
            mutators: Mutex::new(Vec::new()),
            globals: RootTable::default(),
            weak: Mutex::new(crate::weak::WeakCells::default()),
            globals_walked: AtomicBool::new(false),
            weak_walked: AtomicBool::new(false),
            heap_used: AtomicUsize::new(0),
            next_goal: AtomicUsize::new(goal),
            large_since: AtomicUsize::new(0),
            large_armed: AtomicBool::new(false),
            pace_goal: AtomicUsize::new(goal),
            sweep_frees: AtomicUsize::new(0),
            marked_through: AtomicBool::new(false),
            live_counting: AtomicBool::new(false),
            live_seen: AtomicUsize::new(0),
            pace_cap,
            roots_changed: AtomicU64::new(0),
            at_limit: AtomicUsize::new(0),
            control: Mutex::new(Control {
                requested: false,
                large: false,
                forced: false,
                phase: Phase::Idle,
                completed: 0,
                shutdown: false,
                ragged_epoch: 0,
                sweep: None,
                trim_at: None,
            }),
            control_cv: Condvar::new(),
            stats: Mutex::new(GcStats {
                next_goal: goal,
                goal,
                ..GcStats::default()
            }),
            holds: Default::default(),
            final_stats: Default::default(),
            dropper: Mutex::new(None),
            hook: self.hook,
            started: Instant::now(),
            lock_written: AtomicBool::new(false),
            calls: Default::default(),
            weak_gate: parking_lot::RwLock::new(()),
            shade_panics: crate::panics::PanicLog::default(),
            gray: Injector::new(),
            assist: Default::default(),
            assist_ratio: Default::default(),
            assist_expected: AtomicUsize::new(0),
            assist_goal: AtomicUsize::new(0),
            finalizer: Default::default(),
            space: self.space.unwrap_or(crate::space::Space::Pages),
            config,
        });
        let coordinator = collector::start(shared.clone());
        Ok(Runtime {
            handle: Arc::new(Handle {
                shared,
                coordinator: Some(coordinator),
            }),
        })
    }
}

