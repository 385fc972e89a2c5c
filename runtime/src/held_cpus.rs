//! Where the collector's held mutators run: a GC thread steps off their
//! CPUs.
//!
//! A mutator that assists the mark, pays a paced slice, helps the sweep,
//! sleeps for pacing or spins for a ragged start's window is held by the
//! collector: every moment it spends off its CPU meanwhile is part of the
//! hold. With more runnable threads than CPUs (two mutators and a GC
//! thread on two cores, binary-trees at depth 21 with two threads), the OS
//! time-slices a CPU between them, and a held mutator that loses its CPU
//! waits out another thread's turn: the longest holds there were 4 and 8
//! ms, a scheduler tick or two (`docs/perf-log.md`, "Runtime: the longest
//! holds at depth 21 are the OS's"). A yield does not hand the CPU back:
//! under EEVDF (Linux 6.6 on) it only moves the yielder's deadline, and a
//! mutator that has spent its share is not eligible to run (the GC threads
//! yielding every 100 µs of marking changed nothing: "Assists that found no
//! work, counted; GC threads that park at once"). Sleeping does.
//!
//! What `perf sched timehist` showed, at depth 21 with two threads (and,
//! for the window, pinned at depth 16 with one):
//! - *A GC thread preempted the held mutator on its CPU*, in an assist, or
//!   holding the lock of the mark's offer (the other mutator, asleep on
//!   that lock, was held as long), or in the collector thread's walks of
//!   every page with the mutators running (a full heap's snapshot takes
//!   7 ms). Pinned to one CPU, the collector thread that closes a ragged
//!   start's window ran on because the runtime's one mutator, waiting for
//!   the close, had yielded it the CPU (0.3 – 0.9 ms a time, for a close
//!   that takes 0.04 ms).
//! - *A held mutator woke and could not preempt the GC thread.* Pacing
//!   holds a mutator in sleeps of up to a millisecond, waiting for the GC
//!   threads' marking (`Shared::pace_briefly`) or a cycle's progress
//!   (`Shared::pace`). Its CPU then runs a GC thread, and when the sleep
//!   ends (or a GC thread wakes it) the scheduler lets the GC thread run
//!   on to the next tick: sleeps of 1 ms took 3.7 – 5.3 ms.
//! - *The other mutator preempted it*, the two mutators sharing one CPU in
//!   4 ms turns while a GC thread ran alone on the other. A GC thread that
//!   napped there (tried: napping for any held mutator past the end of its
//!   slice, wherever it ran) left its CPU idle for 60 ms in turns of 0.1
//!   ms, and the scheduler never moved the waiting mutator over (its idle
//!   balancing skips a CPU whose idle spells average under half a
//!   millisecond).
//!
//! So a held mutator publishes its CPU for as long as the hold lasts
//! ([`HeldCpus::hold`]), and says when it goes to sleep and for how long
//! ([`HeldSlot::sleeps`]). A GC thread, between units of its own work (a
//! concurrent mark's progress report, a sweep's claim of pages, a few
//! hundred pages of a walk, a ragged window's close) and as it waits for
//! the mark's last work (`mark::idle`: the work may be an assist it
//! preempted), looks
//! ([`HeldCpus::step_aside`]) and naps for a moment, a few times at most,
//! while a held mutator on its own CPU is either awake (then it is not
//! running, since this thread is) or past the end of its sleep (then it
//! is runnable and waits behind this thread). Whoever wakes the sleepers
//! brings their ends forward ([`HeldCpus::pacers_woken`], from
//! `Shared::control_cv_notify`); the
//! window's close does so for the mutator that spins for it
//! ([`HeldCpus::window_closed`]). A sleeper not yet due is left alone:
//! this thread's work is what it waits for. The GC threads' work pauses
//! for the nap; the held mutator does its own share of it meanwhile, or
//! the other GC threads' (a nap of the collector thread, in its serial
//! mark or its walks, delays that step by as much).
//!
//! For the third kind the look also *moves* a held mutator that has
//! waited on another CPU for [`OVERRUN`] onto its own CPU, and naps for it
//! there. A held mutator that works (a slice of an assist or of the
//! sweep) beats as it goes ([`HeldSlot::beat`]: at each look at its
//! deadline, each claim of pages), so "waited" means awake with no beat
//! for that long, or asleep and that long past its sleep's end. Beats, not
//! the hold's length: the kernel's clock of a running thread moves only at
//! its ticks, so from outside a long slice that runs looks like a wait,
//! and moving a mutator that runs a paced slice (up to a millisecond) naps
//! the GC thread whose marking that slice waits for. The move narrows the
//! mutator's affinity to this CPU and restores it at once, as a woken pool
//! worker moves itself (`loam_threadpool`'s `spread.rs`): the kernel
//! migrates a thread at the narrowing, and the restored mask leaves it
//! where it is. Only onto a CPU the mutator's own mask allows, never a
//! mutator allowed only one CPU, and with its mask put back as it was
//! read (a mask another thread sets on the mutator in the few
//! microseconds between the calls is lost, and since Linux 6.2 the kernel
//! keeps the mask put back as the one the thread asked for: a cpuset
//! widened later no longer widens it). Only a thread that waits for a
//! CPU (state R in `/proc`; one blocked on a lock or a wake would wait as
//! long on this CPU), never onto a CPU where a held mutator is awake (the
//! two would take turns there while the CPU left idled), and not while
//! mutators share slots. Without those two checks, moves held mutators 8 –
//! 46 ms in three runs of six at depth 21 with two threads
//! (`docs/perf-log.md`, "A GC thread moves a held mutator that waits for a
//! CPU onto its own").
//!
//! Speed only: the slots decide naps and moves and nothing else. A slot
//! read stale (a mutator that moved to another CPU) or shared (past 64
//! live mutators) costs a GC thread needless naps, [`MAX_NAPS`] a look at
//! most, or a mutator a needless move, never a missed object. The JVM's
//! safepoint log counts time-to-safepoint for the same reason this exists:
//! a thread the OS does not run is still held.

use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long one nap asks for (the timer's slack adds to it, about 50 µs
/// by default). The mutator's own slices are 100 µs (an assist) to 1 ms
/// (a paced slice or a sweep help).
const NAP: Duration = Duration::from_micros(50);

/// Naps at most per look: a held mutator's slot may be shared with another
/// mutator's, or name a CPU it has left, and the GC thread must not wait
/// that out. Ten cover an assist's slice many times over and most of a
/// paced one.
const MAX_NAPS: u32 = 10;

/// Slots in the table. A mutator owns one while it lives
/// ([`HeldCpus::claim`]); past this many live mutators they share.
const SLOTS: usize = 64;

/// How long after a wake a sleeper may take to run before a GC thread on
/// its CPU takes it to be waiting behind it.
const GRACE: Duration = Duration::from_micros(100);

/// How long a held mutator on another CPU may wait (awake with no beat, or
/// past its sleep's end) before a GC thread's look moves it onto its own
/// CPU. A working mutator beats every few dozen microseconds: three times
/// an assist's whole slice without one, it most likely waits behind
/// another thread, and a move then still ends the hold well under a
/// millisecond (a look comes about every 100 µs).
const OVERRUN: Duration = Duration::from_micros(300);

/// A slot's low bits: one more than the held mutator's CPU (0: none, or
/// unknown, which no GC thread's CPU matches; CPUs past 4,094 share
/// values, a needless nap now and then). Twelve leave the end 50 bits of
/// microseconds, 35 years of a runtime's life.
const CPU_BITS: u32 = 12;
/// A slot's flag: the held mutator sleeps (or spins) until the end in the
/// bits above; before it, no GC thread steps aside for it.
const ASLEEP: u64 = 1 << CPU_BITS;
/// A slot's flag, with [`ASLEEP`]: it spins for a ragged window's close,
/// which alone brings its end forward ([`HeldCpus::window_closed`]).
const WINDOW: u64 = ASLEEP << 1;
/// A slot's end of sleep (with [`ASLEEP`]), or the start of its awake
/// spell (without), in microseconds since `HeldCpus::base`.
const END_SHIFT: u32 = CPU_BITS + 2;
/// The bits below the end.
const LOW: u64 = (1 << END_SHIFT) - 1;

/// The mutators of a runtime that the collector holds: on which CPUs, and
/// which of them sleep until when (see the module's doc).
///
/// Every access is relaxed: a slot is a hint, read by GC threads and the
/// collector thread between units of their work, and nothing else depends
/// on what they read.
pub(crate) struct HeldCpus {
    /// What the ends of sleeps count from.
    base: Instant,
    /// Per mutator ([`claim`](Self::claim)): 0 when not held, else its CPU
    /// ([`CPU_BITS`]) and, while it sleeps, [`ASLEEP`] (and [`WINDOW`])
    /// with the end of its sleep ([`END_SHIFT`]), or while it is awake the
    /// start of that spell. Written by its mutator
    /// ([`HeldSlot`]) and, for sleepers, brought forward by whoever wakes
    /// them, and given a new CPU by whoever moves it (CASes that leave a
    /// slot written meanwhile alone). Padded: the
    /// mutators write their own at every assist.
    slots: Box<[CachePadded<AtomicU64>]>,
    /// Per slot, the thread id of the mutator that owns it, for a move
    /// (written by [`claim`](Self::claim) under `moving`).
    tids: Box<[AtomicI32]>,
    /// Held while a GC thread moves a mutator, and while a mutator claims
    /// or gives back its slot: so a move reads the thread id its slot's
    /// owner wrote, and a mutator's thread cannot end (and its id name
    /// another thread) during a move.
    moving: parking_lot::Mutex<()>,
    /// The slots live mutators own, one bit each: set by
    /// [`claim`](Self::claim) as a mutator attaches, cleared by
    /// [`release`](Self::release) as it is dropped (a mutator forgotten, or
    /// dropped in a forked child, keeps its bit). A look or a wake reads
    /// only these slots (all of them once mutators share). No count of
    /// holds under way: a hold writes its own slot and nothing shared, so
    /// that an assist costs the mutators no contended line.
    owned: AtomicU64,
    /// Mutators past [`SLOTS`] live share slots, handed out in turn by
    /// [`claim`](Self::claim).
    shared_next: AtomicUsize,
    /// How many live mutators share a slot (changed under `moving`): while
    /// any does, a slot's thread id may not be the thread that writes it,
    /// and no mutator is moved.
    sharers: AtomicUsize,
}

/// A mutator's slot in [`HeldCpus`] ([`HeldCpus::claim`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotIndex {
    index: usize,
    /// Whether the mutator owns it (given back at its end), or shares it.
    owned: bool,
}

/// A slot's CPU bits for `cpu`.
fn cpu_bits(cpu: Option<usize>) -> u64 {
    cpu.map_or(0, |c| (c as u64 + 1) & (ASLEEP - 1))
}

impl HeldCpus {
    pub(crate) fn new() -> HeldCpus {
        HeldCpus {
            base: Instant::now(),
            slots: (0..SLOTS).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            tids: (0..SLOTS).map(|_| AtomicI32::new(0)).collect(),
            moving: parking_lot::Mutex::new(()),
            owned: AtomicU64::new(0),
            shared_next: AtomicUsize::new(0),
            sharers: AtomicUsize::new(0),
        }
    }

    /// A slot for a new mutator, on the mutator's own thread: a free one,
    /// or (past [`SLOTS`] live mutators) one it shares.
    pub(crate) fn claim(&self) -> SlotIndex {
        let _moving = self.moving.lock();
        let mut owned = self.owned.load(Ordering::Relaxed);
        while owned != u64::MAX {
            let index = (!owned).trailing_zeros() as usize;
            match self
                .owned
                .compare_exchange_weak(owned, owned | 1 << index, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.tids[index].store(this_thread_id(), Ordering::Relaxed);
                    return SlotIndex { index, owned: true };
                }
                Err(now) => owned = now,
            }
        }
        self.sharers.fetch_add(1, Ordering::Relaxed);
        SlotIndex {
            index: self.shared_next.fetch_add(1, Ordering::Relaxed) % SLOTS,
            owned: false,
        }
    }

    /// Gives back a mutator's slot as it goes (no hold of its own under
    /// way).
    pub(crate) fn release(&self, slot: SlotIndex) {
        let _moving = self.moving.lock();
        if slot.owned {
            self.owned.fetch_and(!(1 << slot.index), Ordering::Relaxed);
        } else {
            self.sharers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// `at` in microseconds since `base`, as a slot's end bits.
    fn end_bits(&self, at: Instant) -> u64 {
        let micros = u64::try_from(at.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX);
        micros.min(u64::MAX >> END_SHIFT) << END_SHIFT
    }

    /// Publishes, until the guard drops, that the collector holds the
    /// mutator of `slot`, which runs on this CPU. The holder says when it
    /// sleeps ([`HeldSlot::sleeps`]) and runs again ([`HeldSlot::running`]).
    #[inline]
    pub(crate) fn hold(&self, slot: SlotIndex) -> HeldSlot<'_> {
        let held = HeldSlot {
            table: self,
            slot: &self.slots[slot.index],
            awake_since: Cell::new(None),
        };
        held.running();
        held
    }

    /// The mutators that pacing holds were woken (`Shared::wake_pacers`):
    /// they should be running within [`GRACE`].
    pub(crate) fn pacers_woken(&self) {
        self.bring_forward(GRACE, false);
    }

    /// A ragged start's window has closed: the mutator that spins for it
    /// should be running now.
    pub(crate) fn window_closed(&self) {
        self.bring_forward(Duration::ZERO, true);
    }

    /// Brings the ends of the sleeps of one kind (window spins, or the
    /// others) forward to `grace` from now. A slot cleared or published
    /// anew meanwhile is left as it is.
    fn bring_forward(&self, grace: Duration, window: bool) {
        let end = self.end_bits(Instant::now() + grace);
        for s in self.live_slots() {
            let v = s.load(Ordering::Relaxed);
            let kind = if window { ASLEEP | WINDOW } else { ASLEEP };
            if v & (ASLEEP | WINDOW) == kind && v & !LOW > end {
                let _ = s.compare_exchange(v, end | (v & LOW), Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }

    /// The slots of live mutators (all of them once mutators share).
    fn live_slots(&self) -> impl Iterator<Item = &AtomicU64> {
        self.live_slots_indexed().map(|(_, s)| s)
    }

    /// [`live_slots`](Self::live_slots), with their indices.
    fn live_slots_indexed(&self) -> impl Iterator<Item = (usize, &AtomicU64)> {
        let owned = self.owned.load(Ordering::Relaxed);
        (0..SLOTS)
            .filter(move |&i| owned & 1 << i != 0)
            .map(|i| (i, &*self.slots[i]))
    }

    /// Whether a held mutator on `cpu` is awake, or past its sleep's end.
    fn waits_on(&self, cpu: Option<usize>) -> bool {
        let mine = cpu_bits(cpu);
        if mine == 0 {
            return false;
        }
        let now = self.end_bits(Instant::now());
        self.live_slots().any(|s| {
            let v = s.load(Ordering::Relaxed);
            v & (ASLEEP - 1) == mine && (v & ASLEEP == 0 || v & !LOW <= now)
        })
    }

    /// From a GC thread, or the collector thread, between units of its work
    /// with the mutators running: moves onto this thread's CPU a held
    /// mutator that has waited on another for [`OVERRUN`], then naps while a
    /// held mutator waits for this thread's CPU (at most [`MAX_NAPS`]
    /// times). Returns whether it napped.
    pub(crate) fn step_aside(&self) -> bool {
        self.move_overrun_here(loam_threadpool::current_cpu());
        let mut naps = 0;
        // The CPU read again after each nap: the thread may wake elsewhere.
        while naps < MAX_NAPS
            && self.waits_on(loam_threadpool::current_cpu())
        {
            std::thread::sleep(NAP);
            naps += 1;
        }
        naps > 0
    }
}

impl HeldCpus {
    /// Moves onto `here` (this thread's CPU) a held mutator that has
    /// waited on another CPU for [`OVERRUN`] (the first found whose
    /// affinity allows `here`); its slot then names `here`, so that this
    /// thread's look naps for it. Skipped while any mutators share slots
    /// (a slot's thread id is its owner's alone) and while another thread
    /// moves one.
    fn move_overrun_here(&self, here: Option<usize>) {
        let Some(here) = here else { return };
        let mine = cpu_bits(Some(here));
        if self.sharers.load(Ordering::Relaxed) != 0 {
            return;
        }
        let overrun = self.end_bits(Instant::now().checked_sub(OVERRUN).unwrap_or(self.base));
        let waited = |v: u64| {
            let cpu = v & (ASLEEP - 1);
            // Asleep: since its end; awake: since the spell's last start.
            cpu != 0 && cpu != mine && v & !LOW <= overrun && v & !LOW != 0
        };
        let mut waiting = self.live_slots_indexed().filter(|&(_, s)| waited(s.load(Ordering::Relaxed))).peekable();
        if waiting.peek().is_none() {
            return;
        }
        let Some(_moving) = self.moving.try_lock() else { return };
        // Under `moving`: no mutator shares a slot, and each slot still
        // owned has a thread that lives on until the lock is let go.
        if self.sharers.load(Ordering::Relaxed) != 0 {
            return;
        }
        let owned = self.owned.load(Ordering::Relaxed);
        // Not onto a CPU where a held mutator already runs (or waits):
        // two held mutators would take turns there.
        if self.live_slots().any(|s| s.load(Ordering::Relaxed) & (ASLEEP | (ASLEEP - 1)) == mine) {
            return;
        }
        // Each that still waits, in turn, until one moves (another's mask
        // may leave this CPU out).
        for (index, slot) in waiting {
            let v = slot.load(Ordering::Relaxed);
            if owned & 1 << index == 0 || !waited(v) {
                continue;
            }
            let tid = self.tids[index].load(Ordering::Relaxed);
            // Only a thread that waits for a CPU: one blocked on a lock
            // or a wake would wait as long here, while this thread naps.
            if !runnable(tid) {
                continue;
            }
            if move_thread(tid, here) {
                let _ = slot.compare_exchange(v, (v & !(ASLEEP - 1)) | mine, Ordering::Relaxed, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// Whether the thread `tid` of this process is running or waits for a
/// CPU (state `R` in `/proc`), rather than blocked; false where that
/// cannot be read.
fn runnable(tid: i32) -> bool {
    if !cfg!(target_os = "linux") || tid <= 0 {
        return false;
    }
    let Ok(stat) = std::fs::read(format!("/proc/self/task/{tid}/stat")) else {
        return false;
    };
    // `pid (comm) S ...`: the state follows the last `)`, as the name may
    // hold one.
    let state = stat.iter().rposition(|&b| b == b')').and_then(|i| stat.get(i + 2));
    state == Some(&b'R')
}

/// The calling thread's id, for [`move_thread`] (0 where there is none).
fn this_thread_id() -> i32 {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: `gettid` has no preconditions.
        unsafe { libc::gettid() }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        0
    }
}

/// Moves the thread `tid` (a live mutator's, [`HeldCpus::moving`]) onto
/// `cpu`, if its affinity allows that CPU and another: narrowed to `cpu`,
/// the kernel migrates it at once (a running thread through the CPU's
/// stopper, which the call waits for), and the mask put back leaves it
/// there. Returns whether it moved with its mask put back.
///
/// A mask of one CPU is left alone: the thread runs nowhere else anyway,
/// and it may be one that a thread narrows for a moment to move itself
/// (`loam_threadpool`'s `spread.rs`), which this would then put back
/// after that thread had restored its own, pinning it for good.
#[cfg(all(target_os = "linux", not(miri)))]
fn move_thread(tid: i32, cpu: usize) -> bool {
    if tid <= 0 || cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: a zeroed `cpu_set_t` is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `allowed` is a `cpu_set_t` of `size` bytes; the call writes
    // `tid`'s mask into it.
    if unsafe { libc::sched_getaffinity(tid, size, &mut allowed) } != 0 {
        return false;
    }
    // SAFETY: `cpu < CPU_SETSIZE`, inside the set; `CPU_COUNT` reads the
    // set only.
    if !unsafe { libc::CPU_ISSET(cpu, &allowed) } || unsafe { libc::CPU_COUNT(&allowed) } < 2 {
        return false;
    }
    // SAFETY: as above.
    let mut only: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu < CPU_SETSIZE`.
    unsafe { libc::CPU_SET(cpu, &mut only) };
    // SAFETY: both sets are `cpu_set_t`s of `size` bytes, and both allow a
    // CPU `tid` may run on (`cpu` is in its mask); the calls change only
    // that thread's affinity, and the second puts back what it was.
    let moved = unsafe { libc::sched_setaffinity(tid, size, &only) } == 0;
    // SAFETY: as above.
    if unsafe { libc::sched_setaffinity(tid, size, &allowed) } == 0 {
        return moved;
    }
    // The mask read is refused (the cpuset shrank meanwhile): every CPU
    // instead, which the kernel cuts to the cpuset's. A thread left pinned
    // to one CPU would be worse than any hold.
    // SAFETY: as above (every CPU below `CPU_SETSIZE`).
    unsafe {
        let mut all: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(c, &mut all);
        }
        libc::sched_setaffinity(tid, size, &all);
    }
    false
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn move_thread(_tid: i32, _cpu: usize) -> bool {
    false
}

/// A held mutator's slot ([`HeldCpus::hold`]), cleared on drop.
pub(crate) struct HeldSlot<'a> {
    table: &'a HeldCpus,
    slot: &'a AtomicU64,
    /// When the awake spell under way began, as end bits (`None` before
    /// the first, and after a sleep).
    awake_since: Cell<Option<u64>>,
}

impl HeldSlot<'_> {
    /// The mutator runs (works for the collector), on this CPU: since the
    /// hold began, or its last sleep ended.
    #[inline]
    pub(crate) fn running(&self) {
        let since = match self.awake_since.get() {
            Some(since) => since,
            None => {
                let now = self.table.end_bits(Instant::now());
                self.awake_since.set(Some(now));
                now
            }
        };
        self.slot
            .store(since | cpu_bits(loam_threadpool::current_cpu()), Ordering::Relaxed);
    }

    /// The mutator's work for the collector still runs (a look at its
    /// slice's deadline, a claim of sweep pages), at `now`: a new awake
    /// spell begins, on the CPU it runs on now. A mutator awake without a
    /// beat for [`OVERRUN`] is taken to wait for its CPU.
    #[inline]
    pub(crate) fn beat(&self, now: Instant) {
        let since = self.table.end_bits(now);
        self.awake_since.set(Some(since));
        self.slot
            .store(since | cpu_bits(loam_threadpool::current_cpu()), Ordering::Relaxed);
    }

    /// The mutator goes to sleep, on this CPU, for at most `d`, waiting for
    /// the collector: past `d` (and [`GRACE`]), or past a wake
    /// ([`HeldCpus::pacers_woken`]), it should be running.
    pub(crate) fn sleeps(&self, d: Duration) {
        self.publish_sleep(d, ASLEEP);
    }

    /// The mutator spins, on this CPU, for at most `d`, for a ragged
    /// window's close: as a sleep that only the close, or `d`, ends
    /// ([`HeldCpus::window_closed`]).
    pub(crate) fn spins_for_window(&self, d: Duration) {
        self.publish_sleep(d, ASLEEP | WINDOW);
    }

    /// The mutator waits for something no GC thread's nap helps (a stop
    /// of the world): no GC thread steps aside for it until it says it
    /// runs again.
    pub(crate) fn unseen(&self) {
        // Asleep, with no CPU that a GC thread's could match, and an end
        // that no wake brings forward.
        self.awake_since.set(None);
        self.slot.store(ASLEEP, Ordering::Relaxed);
    }

    fn publish_sleep(&self, d: Duration, flags: u64) {
        self.awake_since.set(None);
        let end = self.table.end_bits(Instant::now() + d + GRACE);
        let cpu = cpu_bits(loam_threadpool::current_cpu());
        self.slot.store(end | flags | cpu, Ordering::Relaxed);
    }
}

impl Drop for HeldSlot<'_> {
    #[inline]
    fn drop(&mut self) {
        self.slot.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn slot(table: &HeldCpus, s: SlotIndex) -> u64 {
        table.slots[s.index].load(Ordering::Relaxed)
    }

    /// A table whose clock began a second ago: an end or a beat at its
    /// start (`end_bits(base + NAP)`) is long past `OVERRUN`, however soon
    /// the test looks.
    fn aged_table() -> HeldCpus {
        let mut table = HeldCpus::new();
        table.base = table.base.checked_sub(Duration::from_secs(1)).expect("a clock a second old");
        table
    }

    #[test]
    fn a_gc_thread_waits_for_a_held_mutator_awake_on_its_cpu_or_due() {
        let table = HeldCpus::new();
        let (a, b) = (table.claim(), table.claim());
        assert_ne!(a.index, b.index);
        let here = Some(7);
        let set = |s: SlotIndex, v: u64| table.slots[s.index].store(v, Ordering::Relaxed);
        let later = table.end_bits(Instant::now() + Duration::from_secs(60));
        let earlier = table.end_bits(table.base);
        // Awake on another CPU, or of unknown CPU: it may be running.
        set(a, cpu_bits(Some(3)));
        assert!(!table.waits_on(here));
        set(a, 0);
        assert!(!table.waits_on(here));
        // Awake on this thread's CPU: not running while this thread is.
        set(b, cpu_bits(here));
        assert!(table.waits_on(here));
        // Asleep here until later: it waits for this thread's work.
        set(b, later | ASLEEP | cpu_bits(here));
        assert!(!table.waits_on(here));
        // Past its sleep's end, on this CPU: runnable, behind this thread.
        set(b, earlier | ASLEEP | cpu_bits(here));
        assert!(table.waits_on(here));
        // Past it, on another CPU: not this thread's to help.
        set(b, earlier | ASLEEP | cpu_bits(Some(3)));
        assert!(!table.waits_on(here));
        assert!(!table.waits_on(None), "a thread of unknown CPU never naps");
    }

    #[test]
    fn a_wake_brings_forward_only_the_sleeps_of_its_kind() {
        let table = HeldCpus::new();
        let (pacer, spinner, worker) = (table.claim(), table.claim(), table.claim());
        let (p, s, w) = (table.hold(pacer), table.hold(spinner), table.hold(worker));
        p.sleeps(Duration::from_secs(60));
        s.spins_for_window(Duration::from_secs(60));
        let (p0, s0, w0) = (slot(&table, pacer), slot(&table, spinner), slot(&table, worker));
        // Pacers woken: the pacer's end comes forward, its CPU and flags
        // kept; the spinner and the awake worker are left alone.
        table.pacers_woken();
        let p1 = slot(&table, pacer);
        assert!(p1 & !LOW < p0 & !LOW, "the pacer's end came forward");
        assert_eq!(p1 & LOW, p0 & LOW);
        assert_eq!(slot(&table, spinner), s0);
        assert_eq!(slot(&table, worker), w0);
        // An end already brought forward is not pushed back.
        table.pacers_woken();
        assert_eq!(slot(&table, pacer), p1);
        // The window's close: the spinner is due now, and a GC thread on
        // its CPU (if known) waits for it.
        table.window_closed();
        let s1 = slot(&table, spinner);
        assert!(s1 & !LOW < s0 & !LOW);
        assert_eq!(s1 & LOW, s0 & LOW);
        let spinner_cpu = (s1 & (ASLEEP - 1)).checked_sub(1).map(|c| c as usize);
        if spinner_cpu.is_some() {
            assert!(table.waits_on(spinner_cpu));
        }
        drop((p, s, w));
        assert!(table.slots.iter().all(|s| s.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_look_naps_for_a_held_mutator_awake_on_its_cpu_and_not_for_a_sleeper() {
        let table = HeldCpus::new();
        let me = table.claim();
        let held = table.hold(me);
        // Pinned to the CPU it runs on, so that the slot and the look name
        // the same one (where the CPU is known and affinity can be set).
        if pin_here() {
            held.running();
            assert!(table.step_aside(), "awake on this CPU: the look naps");
        }
        held.sleeps(Duration::from_secs(60));
        assert!(!table.step_aside(), "a sleeper not yet due is left alone");
        held.unseen();
        table.pacers_woken();
        table.window_closed();
        assert_eq!(slot(&table, me), ASLEEP, "no wake makes an unseen wait due");
        assert!(!table.step_aside());
        drop(held);
        assert_eq!(slot(&table, me), 0);
        assert!(!table.step_aside(), "no mutator is held any more");
    }

    /// The calling thread's affinity: the CPUs it may run on (empty where
    /// that cannot be read).
    fn allowed_cpus() -> Vec<usize> {
        #[cfg(all(target_os = "linux", not(miri)))]
        // SAFETY: a zeroed `cpu_set_t` is a valid empty set, which the call
        // fills with this thread's mask.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                return (0..libc::CPU_SETSIZE as usize)
                    .filter(|&c| libc::CPU_ISSET(c, &set))
                    .collect();
            }
        }
        Vec::new()
    }

    /// The calling thread's allowed CPUs and the first two of them, or
    /// `None` (said on stderr) where it is allowed only one: the tests of
    /// moves need somewhere to move from.
    fn two_cpus() -> Option<(Vec<usize>, usize, usize)> {
        let cpus = allowed_cpus();
        let [mine, other, ..] = cpus[..] else {
            eprintln!("skipped: one CPU allowed, nowhere to move from");
            return None;
        };
        Some((cpus, mine, other))
    }

    /// Spins until `flag` is set.
    fn spin_until(flag: &AtomicBool) {
        while !flag.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
    }

    /// Narrows the calling thread's affinity to `cpus`.
    fn allow_only(cpus: &[usize]) {
        #[cfg(all(target_os = "linux", not(miri)))]
        // SAFETY: a zeroed `cpu_set_t` is a valid empty set; every CPU set
        // is below `CPU_SETSIZE` (read from a mask); the call changes this
        // thread's affinity only.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                libc::CPU_SET(c, &mut set);
            }
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        let _ = cpus;
    }

    /// Runs `held` on a thread of its own (allowed only `held_only_on`, if
    /// given; looked at once blocked, if `held_blocks`, and unparked after
    /// the look) that owns a slot of `table`, published (by this test) as held awake on `other` since the table's
    /// start; this thread, pinned to `mine`, then looks. Returns the slot
    /// as the look left it (read by the held thread once `held`, which
    /// waits for the look, returns) and what `held` returned.
    fn look_at_one_held_on<T: Send>(
        table: &HeldCpus,
        mine: usize,
        other: usize,
        held_only_on: Option<usize>,
        held_blocks: bool,
        held: impl FnOnce(&AtomicBool) -> T + Send,
    ) -> (u64, T) {
        let looked = AtomicBool::new(false);
        let published = AtomicBool::new(false);
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                if let Some(cpu) = held_only_on {
                    allow_only(&[cpu]);
                }
                let me = table.claim();
                let _held = table.hold(me);
                // Awake on `other` since long before `OVERRUN`.
                table.slots[me.index].store(table.end_bits(table.base + NAP) | cpu_bits(Some(other)), Ordering::Relaxed);
                published.store(true, Ordering::Release);
                let out = held(&looked);
                // Read while still held: the guard clears it.
                (slot(table, me), out)
            });
            while !published.load(Ordering::Acquire) {
                assert!(!t.is_finished(), "the held thread ended before it published its hold");
                std::thread::yield_now();
            }
            // A held thread that blocks is looked at once it has.
            while held_blocks && runnable(table.tids[table.owned.load(Ordering::Relaxed).trailing_zeros() as usize].load(Ordering::Relaxed)) {
                std::thread::yield_now();
            }
            // Pinned only now: the held thread keeps the mask it was
            // spawned with.
            allow_only(&[mine]);
            table.step_aside();
            looked.store(true, Ordering::Release);
            t.thread().unpark();
            t.join().unwrap()
        })
    }

    #[test]
    fn a_look_moves_a_mutator_that_waited_on_another_cpu_onto_its_own_and_leaves_its_mask() {
        let Some((cpus, mine, other)) = two_cpus() else { return };
        let table = aged_table();
        // Where the moved thread then runs is the kernel's to say (on a
        // busy machine the balancer may take it back at once): the slot
        // names the looker's CPU only if both calls succeeded.
        let (after, mask_after) = look_at_one_held_on(&table, mine, other, None, false, |looked| {
            spin_until(looked);
            allowed_cpus()
        });
        assert_eq!(after & (ASLEEP - 1), cpu_bits(Some(mine)), "the slot names the CPU it was moved to");
        assert_eq!(mask_after, cpus, "the moved mutator's affinity is as it was");
        allow_only(&cpus);
    }

    #[test]
    fn a_look_moves_no_mutator_blocked_rather_than_waiting_for_a_cpu() {
        let Some((cpus, mine, other)) = two_cpus() else { return };
        let table = aged_table();
        let (after, ()) = look_at_one_held_on(&table, mine, other, None, true, |looked| {
            while !looked.load(Ordering::Acquire) {
                std::thread::park();
            }
        });
        assert_eq!(after & (ASLEEP - 1), cpu_bits(Some(other)), "blocked: not moved");
        assert!(runnable(this_thread_id()), "a running thread reads as runnable");
        allow_only(&cpus);
    }

    #[test]
    fn a_look_leaves_a_mutator_that_beat_lately_or_is_not_due_where_it_is() {
        let Some((cpus, mine, other)) = two_cpus() else { return };
        // This thread is the held mutator, allowed on both CPUs: a look
        // from `mine` would move it there (and say so in its slot) if it
        // took it to have waited on `other`.
        let table = aged_table();
        let me = table.claim();
        let held = table.hold(me);
        let on_other = |v: u64| (v & !(ASLEEP - 1)) | cpu_bits(Some(other));
        // Awake, with its last beat later than OVERRUN ago (a beat dated
        // ahead, so that no stall of this test's thread ages it).
        held.beat(Instant::now() + Duration::from_secs(60));
        let v = on_other(slot(&table, me));
        table.slots[me.index].store(v, Ordering::Relaxed);
        table.move_overrun_here(Some(mine));
        assert_eq!(slot(&table, me), v, "a beat within OVERRUN: not moved");
        // Asleep, not yet due.
        held.sleeps(Duration::from_secs(60));
        let v = on_other(slot(&table, me));
        table.slots[me.index].store(v, Ordering::Relaxed);
        table.move_overrun_here(Some(mine));
        assert_eq!(slot(&table, me), v, "a sleep not yet due: not moved");
        // The same slots aged past OVERRUN are moved (the look's CPU
        // named in the slot after).
        for flags in [0, ASLEEP] {
            let v = table.end_bits(table.base + NAP) | flags | cpu_bits(Some(other));
            table.slots[me.index].store(v, Ordering::Relaxed);
            table.move_overrun_here(Some(mine));
            assert_eq!(slot(&table, me), (v & !(ASLEEP - 1)) | cpu_bits(Some(mine)));
        }
        drop(held);
        allow_only(&cpus);
    }

    #[test]
    fn a_look_moves_no_mutator_whose_mask_leaves_out_its_cpu_or_has_one_cpu() {
        let Some((cpus, mine, other)) = two_cpus() else { return };
        // Allowed only the looker's CPU, its slot naming another (stale,
        // or that thread narrowing its own mask for a moment); or allowed
        // only the other: left alone either way, its mask as it was.
        for only in [mine, other] {
            let table = aged_table();
            let (after, mask_after) = look_at_one_held_on(&table, mine, other, Some(only), false, |looked| {
                spin_until(looked);
                allowed_cpus()
            });
            assert_eq!(after & (ASLEEP - 1), cpu_bits(Some(other)), "allowed only CPU {only}: not moved");
            assert_eq!(mask_after, [only]);
            allow_only(&cpus);
        }
    }

    /// Pins the calling thread to the CPU it runs on; false where that
    /// cannot be done.
    fn pin_here() -> bool {
        #[cfg(all(target_os = "linux", not(miri)))]
        if let Some(cpu) = loam_threadpool::current_cpu().filter(|&c| c < libc::CPU_SETSIZE as usize) {
            // SAFETY: a zeroed `cpu_set_t` is a valid empty set; the call
            // reads the set passed and changes this thread's affinity only.
            return unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
            };
        }
        false
    }

    #[test]
    fn slots_are_owned_while_they_are_free_and_shared_past_them() {
        let mut table = HeldCpus::new();
        let all: Vec<SlotIndex> = (0..SLOTS).map(|_| table.claim()).collect();
        assert!(all.iter().all(|s| s.owned));
        let mut indices: Vec<usize> = all.iter().map(|s| s.index).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), SLOTS, "each live mutator owns its own");
        let extra = table.claim();
        assert!(!extra.owned, "past the table's size, mutators share");
        // While one shares, no look moves a mutator (a slot's thread id
        // may not be the thread that writes it), even once a slot is free.
        table.release(all[9]);
        let v = table.end_bits(table.base) | cpu_bits(Some(1));
        table.slots[extra.index].store(v, Ordering::Relaxed);
        table.base = table.base.checked_sub(Duration::from_secs(1)).expect("a clock a second old");
        table.move_overrun_here(Some(0));
        assert_eq!(slot(&table, extra), v, "not moved while slots are shared");
        table.release(extra);
        assert_eq!(table.sharers.load(Ordering::Relaxed), 0);
        table.release(all[5]);
        let again = table.claim();
        assert!(again.owned);
        assert_eq!(again.index, 5, "a slot given back is owned again");
    }
}
