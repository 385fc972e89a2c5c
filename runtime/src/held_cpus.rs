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
//!   4 ms turns while a GC thread ran alone on the other. Nothing here
//!   helps with that: a GC thread that napped there (tried: napping for
//!   any held mutator past the end of its slice, wherever it ran) left its
//!   CPU idle for 60 ms in turns of 0.1 ms, and the scheduler never moved
//!   the waiting mutator over (its idle balancing skips a CPU whose idle
//!   spells average under half a millisecond).
//!
//! So a held mutator publishes its CPU for as long as the hold lasts
//! ([`HeldCpus::hold`]), and says when it goes to sleep and for how long
//! ([`HeldSlot::sleeps`]). A GC thread, between units of its own work (a
//! concurrent mark's progress report, a sweep's claim of pages, a few
//! hundred pages of a walk, a ragged window's close), looks
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
//! Speed only: the slots decide naps and nothing else. A slot read stale
//! (a mutator that moved to another CPU) or shared (past 64 live
//! mutators) costs a GC thread needless naps, [`MAX_NAPS`] a look at most,
//! never a missed object. The JVM's safepoint log counts time-to-safepoint
//! for the same reason this exists: a thread the OS does not run is still
//! held.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
/// A slot's end of sleep, in microseconds since `HeldCpus::base`.
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
    /// with the end of its sleep ([`END_SHIFT`]). Written by its mutator
    /// ([`HeldSlot`]) and, for sleepers, brought forward by whoever wakes
    /// them (a CAS that leaves a slot written meanwhile alone). Padded: the
    /// mutators write their own at every assist.
    slots: Box<[CachePadded<AtomicU64>]>,
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
            owned: AtomicU64::new(0),
            shared_next: AtomicUsize::new(0),
        }
    }

    /// A slot for a new mutator: a free one, or (past [`SLOTS`] live
    /// mutators) one it shares.
    pub(crate) fn claim(&self) -> SlotIndex {
        let mut owned = self.owned.load(Ordering::Relaxed);
        while owned != u64::MAX {
            let index = (!owned).trailing_zeros() as usize;
            match self
                .owned
                .compare_exchange_weak(owned, owned | 1 << index, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return SlotIndex { index, owned: true },
                Err(now) => owned = now,
            }
        }
        SlotIndex {
            index: self.shared_next.fetch_add(1, Ordering::Relaxed) % SLOTS,
            owned: false,
        }
    }

    /// Gives back a mutator's slot as it goes (no hold of its own under
    /// way).
    pub(crate) fn release(&self, slot: SlotIndex) {
        if slot.owned {
            self.owned.fetch_and(!(1 << slot.index), Ordering::Relaxed);
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
        let owned = self.owned.load(Ordering::Relaxed);
        (0..SLOTS)
            .filter(move |&i| owned & 1 << i != 0)
            .map(|i| &*self.slots[i])
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
    /// with the mutators running: naps while a held mutator waits for this
    /// thread's CPU (at most [`MAX_NAPS`] times). Returns whether it
    /// napped.
    pub(crate) fn step_aside(&self) -> bool {
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

/// A held mutator's slot ([`HeldCpus::hold`]), cleared on drop.
pub(crate) struct HeldSlot<'a> {
    table: &'a HeldCpus,
    slot: &'a AtomicU64,
}

impl HeldSlot<'_> {
    /// The mutator runs (works for the collector), on this CPU.
    #[inline]
    pub(crate) fn running(&self) {
        self.slot
            .store(cpu_bits(loam_threadpool::current_cpu()), Ordering::Relaxed);
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
        self.slot.store(ASLEEP, Ordering::Relaxed);
    }

    fn publish_sleep(&self, d: Duration, flags: u64) {
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

    fn slot(table: &HeldCpus, s: SlotIndex) -> u64 {
        table.slots[s.index].load(Ordering::Relaxed)
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
        let table = HeldCpus::new();
        let all: Vec<SlotIndex> = (0..SLOTS).map(|_| table.claim()).collect();
        assert!(all.iter().all(|s| s.owned));
        let mut indices: Vec<usize> = all.iter().map(|s| s.index).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), SLOTS, "each live mutator owns its own");
        let extra = table.claim();
        assert!(!extra.owned, "past the table's size, mutators share");
        table.release(extra);
        table.release(all[5]);
        let again = table.claim();
        assert!(again.owned);
        assert_eq!(again.index, 5, "a slot given back is owned again");
    }
}
