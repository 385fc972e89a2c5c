//! Keeping woken workers off each other's CPU.
//!
//! A worker woken while every CPU looks busy (its waker's, and the one the
//! thread that injected the job is about to leave) is queued by the kernel
//! behind another worker of the pool, on that worker's CPU, and waits
//! there for the load balancer, which leaves a thread that ran a moment
//! ago where it is for a tick or more: on two cores a fresh pool's first
//! burst then runs on one core (`benches/threadpool.rs`, `burst`). So each
//! awake worker records the CPU it runs on, and one that wakes up on a CPU
//! another awake worker holds moves itself to an allowed CPU no awake
//! worker holds: it narrows its affinity to that CPU (the kernel migrates
//! it at once) and restores its affinity as it was. Two system calls, only
//! when a wake-up landed on a busy worker's CPU; nothing elsewhere than
//! Linux (or under Miri, which has no `sched_getcpu`).
//!
//! The records are hints: a CPU recorded at wake-up goes stale as the
//! kernel moves threads, so a worker may move once when it did not need
//! to, or two that woke at the same moment may both stay; neither is
//! worse than the kernel's own placement.

use crate::sync::{AtomicUsize, Ordering};

/// No CPU: the worker is parked (or its CPU is unknown).
const NONE: usize = usize::MAX;

/// The CPU each worker runs on while awake.
pub(crate) struct Spread {
    cpus: Box<[AtomicUsize]>,
    /// Whether woken workers move at all
    /// (`ThreadPoolBuilder::spread_on_wake`).
    moves: bool,
}

impl Spread {
    pub(crate) fn new(workers: usize, moves: bool) -> Spread {
        Spread {
            cpus: (0..workers).map(|_| AtomicUsize::new(NONE)).collect(),
            moves,
        }
    }

    /// Worker `index` is about to park.
    pub(crate) fn parked(&self, index: usize) {
        self.cpus[index].store(NONE, Ordering::SeqCst);
    }

    /// Worker `index` is awake (started, or back from parking): records
    /// its CPU, and moves it if another awake worker holds that CPU. (Also
    /// after short parks inside a burst: a worker that ran out of work for
    /// a moment is woken onto its waker's CPU as readily. Measured on
    /// `tree_sum`, with and without the move, interleaved: no difference.)
    pub(crate) fn awake(&self, index: usize) {
        if !self.moves {
            return;
        }
        let Some(mut cpu) = current_cpu() else {
            return;
        };
        // Recorded first, then checked (both sequentially consistent): of
        // two workers waking on one CPU at once, at least one sees the other.
        self.cpus[index].store(cpu, Ordering::SeqCst);
        let held_by_another = |c: usize| {
            self.cpus
                .iter()
                .enumerate()
                .any(|(i, w)| i != index && w.load(Ordering::SeqCst) == c)
        };
        if held_by_another(cpu) {
            if let Some(moved) = move_off(cpu, |c| !held_by_another(c)) {
                cpu = moved;
                self.cpus[index].store(cpu, Ordering::SeqCst);
            }
        }
    }
}

impl Spread {
    /// Worker `index` did not block after all (work came as it parked):
    /// it is still where it was.
    pub(crate) fn awake_again(&self, index: usize) {
        if !self.moves {
            return;
        }
        if let Some(cpu) = current_cpu() {
            self.cpus[index].store(cpu, Ordering::SeqCst);
        }
    }
}

impl std::fmt::Debug for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spread")
            .field("workers", &self.cpus.len())
            .finish()
    }
}

/// The CPU this thread runs on.
#[cfg(all(target_os = "linux", not(miri)))]
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: `sched_getcpu` has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

#[cfg(not(all(target_os = "linux", not(miri))))]
pub(crate) fn current_cpu() -> Option<usize> {
    None
}

/// Moves this thread from `from` to an allowed CPU for which `free` holds,
/// leaving its affinity as it was; returns that CPU.
#[cfg(all(target_os = "linux", not(miri)))]
fn move_off(from: usize, free: impl Fn(usize) -> bool) -> Option<usize> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: a zeroed `cpu_set_t` is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `allowed` is a `cpu_set_t` of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
        return None;
    }
    let max = libc::CPU_SETSIZE as usize;
    let is_allowed = |c: usize| {
        // SAFETY: `c < CPU_SETSIZE`, inside the set.
        unsafe { libc::CPU_ISSET(c, &allowed) }
    };
    let to = (0..max).find(|&c| c != from && is_allowed(c) && free(c))?;
    // SAFETY: as above.
    let mut only: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `to < CPU_SETSIZE`.
    unsafe { libc::CPU_SET(to, &mut only) };
    // SAFETY: both sets are `cpu_set_t`s of `size` bytes; narrowing to one
    // allowed CPU migrates this thread there, and restoring the set leaves
    // it there.
    let moved = unsafe { libc::sched_setaffinity(0, size, &only) } == 0;
    // SAFETY: as above.
    unsafe { libc::sched_setaffinity(0, size, &allowed) };
    moved.then_some(to)
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn move_off(_from: usize, _free: impl Fn(usize) -> bool) -> Option<usize> {
    None
}

#[cfg(all(test, target_os = "linux", not(miri)))]
mod tests {
    use super::{current_cpu, Spread};
    use std::sync::atomic::Ordering;

    fn affinity() -> Vec<usize> {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: a zeroed `cpu_set_t` is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a `cpu_set_t` of `size` bytes.
        assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut set) }, 0);
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `c < CPU_SETSIZE`.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    }

    /// Worker 1 of a two-worker `Spread` woken on the CPU worker 0 holds:
    /// the spread, the affinity before, and that CPU.
    fn woken_on_a_held_cpu(moves: bool) -> (Spread, Vec<usize>, usize) {
        let before = affinity();
        let here = current_cpu().expect("sched_getcpu works on Linux");
        let spread = Spread::new(2, moves);
        spread.cpus[0].store(here, Ordering::SeqCst);
        spread.awake(1);
        (spread, before, here)
    }

    /// A worker that wakes on the CPU another awake worker holds records
    /// another allowed CPU, and its affinity is left as it was.
    #[test]
    fn a_worker_woken_on_a_held_cpu_moves_and_keeps_its_affinity() {
        let (spread, before, here) = woken_on_a_held_cpu(true);
        let recorded = spread.cpus[1].load(Ordering::SeqCst);
        if before.len() > 1 {
            assert_ne!(recorded, here, "it stayed on the held CPU");
            assert!(before.contains(&recorded), "it moved off its affinity");
        } else {
            assert_eq!(
                recorded, here,
                "with one CPU allowed there is nowhere to go"
            );
        }
        assert_eq!(affinity(), before, "the affinity was not restored");
        spread.parked(1);
        assert_eq!(spread.cpus[1].load(Ordering::SeqCst), super::NONE);
    }

    /// With moves off (`ThreadPoolBuilder::spread_on_wake(false)`) a worker
    /// woken on a held CPU stays where it is, and nothing is recorded.
    #[test]
    fn without_moves_a_worker_stays_where_it_woke() {
        let (spread, before, _) = woken_on_a_held_cpu(false);
        spread.awake_again(1);
        // (Where the thread runs now is the kernel's to change: only the
        // record and the affinity say what `awake` did.)
        assert_eq!(spread.cpus[1].load(Ordering::SeqCst), super::NONE);
        assert_eq!(affinity(), before);
    }
}
