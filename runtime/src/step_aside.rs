//! A GC thread steps off the CPU of a mutator that the collector holds.
//!
//! A mutator that assists the mark, pays a paced slice, helps the sweep,
//! waits for pacing or spins for a ragged start's window is held by the
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
//! What `perf sched timehist` showed, at depth 21 with two threads:
//! - *A GC thread preempted the held mutator on its CPU*, in an assist, or
//!   holding the lock of the mark's offer (the other mutator, asleep on
//!   that lock, was held as long), or in the collector thread's walks of
//!   every page with the mutators running (a full heap's snapshot takes
//!   7 ms). Pinned to one CPU, the collector thread that closes a ragged
//!   start's window ran on because the one mutator waiting for the close
//!   had yielded it the CPU (0.3 – 0.9 ms a time, for a close that takes
//!   0.04).
//! - *A held mutator woke and could not preempt the GC thread.* Pacing
//!   holds a mutator in sleeps of up to a millisecond, waiting for the GC
//!   threads' marking (`Shared::pace_briefly`) or a cycle's progress
//!   (`Shared::pace`). Its CPU then runs a GC thread, and when the sleep
//!   ends (or a GC thread wakes it) the scheduler lets the GC thread run
//!   on to the next tick: sleeps of 1 ms took 3.7 – 5.3 ms.
//! - *The other mutator preempted it*, the two mutators sharing one CPU in
//!   4 ms turns while a GC thread ran alone on the other. Nothing here
//!   helps with that: a GC thread that napped there (tried: napping for
//!   any mutator past the end of its slice) left its CPU idle for 60 ms
//!   in turns of 0.1 ms, too short for the scheduler's idle balancing
//!   (which skips CPUs idle for less than half a millisecond on average)
//!   to move the waiting mutator over.
//!
//! So a held mutator publishes its CPU for as long as the hold lasts
//! ([`WorkingMutators::held`]), and says when it goes to sleep and for how
//! long ([`Held::sleeps`]). A GC thread, between units of its own work (a
//! concurrent mark's progress report, a sweep's claim of pages, a few
//! hundred pages of a walk, a ragged window's close), looks ([`WorkingMutators::step_aside`]) and naps for a
//! moment, a few times at most, while a held mutator on its own CPU is
//! either not asleep (then it is not running, since this thread is) or
//! past the end of its sleep (then it is runnable and waits behind this
//! thread). The end is brought forward when a GC thread wakes the sleepers
//! ([`WorkingMutators::woken`], from `Shared::wake_pacers`). A sleeper not
//! yet due is left alone: this thread's work is what it waits for. (The
//! mutator that spins for a ragged window's close publishes a sleep, which
//! the close makes due at once.) The collector's work does not stop meanwhile: the held mutator is doing
//! it, or waiting for the other GC threads'.
//!
//! Speed only: the slots decide naps and nothing else, so a stale or
//! shared slot costs a GC thread a few naps, never a missed object. The
//! JVM's safepoint log counts time-to-safepoint for the same reason this
//! exists: a thread the OS does not run is still held.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
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

/// Slots in the table: mutators past it share slots (`index % SLOTS`),
/// which costs a GC thread a needless nap now and then, never more.
const SLOTS: usize = 64;

/// How long after its sleep's end (or its wake) a sleeper may take to run
/// before a GC thread on its CPU takes it to be waiting behind it.
pub(crate) const GRACE: Duration = Duration::from_micros(100);

/// A slot's low bits: one more than the held mutator's CPU (0: none, or
/// unknown, which no GC thread's CPU matches).
const CPU_BITS: u32 = 16;
/// A slot's flag: the held mutator sleeps until the end in the bits above.
const ASLEEP: u64 = 1 << CPU_BITS;
/// A slot's end of sleep, in microseconds since `WorkingMutators::base`.
const END_SHIFT: u32 = CPU_BITS + 1;

/// The mutators of a runtime that the collector holds, on which CPUs, and
/// which of them sleep until when (see the module's doc).
pub(crate) struct WorkingMutators {
    /// What the ends of sleeps in `slots` count from.
    base: Instant,
    /// Per mutator (by its index, `claim`): 0 when not held, else its CPU
    /// ([`CPU_BITS`]) and, if it sleeps, [`ASLEEP`] and the end of its
    /// sleep ([`END_SHIFT`]).
    slots: Box<[AtomicU64]>,
    /// How many mutators are held: the GC threads' look is one load while
    /// none is.
    held: AtomicU32,
    /// Slots handed out so far (`claim`).
    claimed: AtomicUsize,
}

/// A slot's CPU bits for `cpu`.
fn cpu_bits(cpu: Option<usize>) -> u64 {
    cpu.map_or(0, |c| (c as u64 + 1) & (ASLEEP - 1))
}

impl WorkingMutators {
    pub(crate) fn new() -> WorkingMutators {
        WorkingMutators {
            base: Instant::now(),
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            held: AtomicU32::new(0),
            claimed: AtomicUsize::new(0),
        }
    }

    /// A slot for a new mutator.
    pub(crate) fn claim(&self) -> usize {
        self.claimed.fetch_add(1, Ordering::Relaxed) % SLOTS
    }

    /// `at` in microseconds since `base`, as a slot's end bits.
    fn end_bits(&self, at: Instant) -> u64 {
        let micros =
            u64::try_from(at.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX);
        micros.min(u64::MAX >> END_SHIFT) << END_SHIFT
    }

    /// Publishes, until the guard drops, that the collector holds the
    /// mutator of `slot`, which runs on this CPU. The holder says when it
    /// sleeps ([`Held::sleeps`]) and runs again ([`Held::running`]).
    #[inline]
    pub(crate) fn held(&self, slot: usize) -> Held<'_> {
        let held = Held {
            table: self,
            slot: &self.slots[slot],
        };
        held.running();
        self.held.fetch_add(1, Ordering::Relaxed);
        held
    }

    /// The sleeping mutators were woken (`Shared::wake_pacers`, with
    /// [`GRACE`]), or what they spin for has happened (a ragged window's
    /// close, with none): they should be running within `grace`. (A slot
    /// cleared or published anew meanwhile is left as it is.)
    pub(crate) fn woken(&self, grace: Duration) {
        if self.held.load(Ordering::Relaxed) == 0 {
            return;
        }
        let end = self.end_bits(Instant::now() + grace);
        let claimed = self.claimed.load(Ordering::Relaxed).min(SLOTS);
        for s in &self.slots[..claimed] {
            let v = s.load(Ordering::Relaxed);
            if v & ASLEEP != 0 && v > end | ASLEEP | (ASLEEP - 1) {
                let due = end | ASLEEP | (v & (ASLEEP - 1));
                let _ = s.compare_exchange(v, due, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }

    /// Whether a held mutator on `cpu` is awake, or past its sleep's end.
    fn waits_on(&self, cpu: Option<usize>) -> bool {
        let mine = cpu_bits(cpu);
        if mine == 0 {
            return false;
        }
        let now = self.end_bits(Instant::now());
        let claimed = self.claimed.load(Ordering::Relaxed).min(SLOTS);
        self.slots[..claimed].iter().any(|s| {
            let v = s.load(Ordering::Relaxed);
            v & (ASLEEP - 1) == mine && (v & ASLEEP == 0 || v >> END_SHIFT << END_SHIFT <= now)
        })
    }

    /// From a GC thread between units of its work (with the mutators
    /// running): naps while a held mutator waits for this thread's CPU (at
    /// most [`MAX_NAPS`] times). Returns whether it napped.
    pub(crate) fn step_aside(&self) -> bool {
        let mut naps = 0;
        // The CPU read again after each nap: the thread may wake elsewhere.
        while naps < MAX_NAPS
            && self.held.load(Ordering::Relaxed) != 0
            && self.waits_on(loam_threadpool::current_cpu())
        {
            std::thread::sleep(NAP);
            naps += 1;
        }
        naps > 0
    }
}

/// A held mutator's slot ([`WorkingMutators::held`]), cleared on drop.
pub(crate) struct Held<'a> {
    table: &'a WorkingMutators,
    slot: &'a AtomicU64,
}

impl Held<'_> {
    /// The mutator runs (works or spins for the collector), on this CPU.
    #[inline]
    pub(crate) fn running(&self) {
        self.slot
            .store(cpu_bits(loam_threadpool::current_cpu()), Ordering::Relaxed);
    }

    /// The mutator goes to sleep, on this CPU, for at most `d`, waiting for
    /// the collector: past `d` (and [`GRACE`]), or past a wake
    /// ([`WorkingMutators::woken`]), it should be running.
    pub(crate) fn sleeps(&self, d: Duration) {
        let end = self.table.end_bits(Instant::now() + d + GRACE);
        let cpu = cpu_bits(loam_threadpool::current_cpu());
        self.slot.store(end | ASLEEP | cpu, Ordering::Relaxed);
    }
}

impl Drop for Held<'_> {
    #[inline]
    fn drop(&mut self) {
        self.slot.store(0, Ordering::Relaxed);
        self.table.held.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_gc_thread_naps_only_for_a_held_mutator_that_waits_for_its_cpu() {
        let table = WorkingMutators::new();
        let (a, b) = (table.claim(), table.claim());
        assert!(!table.step_aside(), "no mutator is held");
        let here = Some(7);
        let set = |slot: usize, v: u64| table.slots[slot].store(v, Ordering::Relaxed);
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
        // Woken: due within the grace, and then it waits for this CPU.
        table.held.store(1, Ordering::Relaxed);
        table.woken(GRACE);
        let v = table.slots[b].load(Ordering::Relaxed);
        assert_eq!(v & (ASLEEP | (ASLEEP - 1)), ASLEEP | cpu_bits(here));
        assert!(v < later, "the wake brought the end forward");
        // Past its sleep's end, on this CPU: runnable, behind this thread.
        set(b, earlier | ASLEEP | cpu_bits(here));
        assert!(table.waits_on(here));
        // Past it, on another CPU: not this thread's to help.
        set(b, earlier | ASLEEP | cpu_bits(Some(3)));
        assert!(!table.waits_on(here));
        assert!(!table.waits_on(None), "a thread of unknown CPU never naps");
    }

    #[test]
    fn a_held_mutator_keeps_its_slot_until_its_guard_drops() {
        let table = WorkingMutators::new();
        let slot = table.claim();
        let guard = table.held(slot);
        assert_eq!(table.held.load(Ordering::Relaxed), 1);
        let cpu = loam_threadpool::current_cpu();
        assert_eq!(table.slots[slot].load(Ordering::Relaxed), cpu_bits(cpu));
        guard.sleeps(Duration::from_secs(60));
        let v = table.slots[slot].load(Ordering::Relaxed);
        assert_eq!(v & (ASLEEP | (ASLEEP - 1)), ASLEEP | cpu_bits(cpu));
        guard.running();
        assert_eq!(table.slots[slot].load(Ordering::Relaxed), cpu_bits(cpu));
        drop(guard);
        assert_eq!(table.slots[slot].load(Ordering::Relaxed), 0);
        assert_eq!(table.held.load(Ordering::Relaxed), 0);
        assert!(!table.step_aside(), "no mutator is held any more");
    }
}
