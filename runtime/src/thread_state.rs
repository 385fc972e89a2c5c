//! Whether the thread of a call the collector waits for is running: what
//! tells the handshake's gate a call that is merely slow from one that may
//! be waiting for another thread.
//!
//! # Why
//! A stop (or a ragged mark's start or end) that has waited past its
//! patience for a `mutate` call opens the gate to the mutators that may be
//! that call's scoped threads, and tells the mutators that wait for the
//! collector between their calls (pacing, the heap limit) to give up their
//! wait (`handshake.rs`, "The gate"): the call may be waiting for one of
//! them. On a busy machine most calls that outlast a millisecond are only
//! descheduled, and the gate opened for them all the same: a mutator that
//! attached while another's first call ran was let in call after call
//! during one pending stop, past pacing, and allocated up to the heap
//! limit (`tests/limit.rs` failed 10 times in 110 beside two busy loops),
//! and a call at the limit gave up its wait for a ragged cycle because the
//! mark's end had waited past its patience for the same thread's previous
//! call.
//!
//! A call that waits for another thread (a join, a lock, a condition
//! variable, a channel, a collection's writer lock) sleeps in the kernel
//! after at most a short spin; a thread that is running or runnable is
//! not waiting in any of those. (A call may also sleep for its own
//! reasons, I/O say: the gate then opens as it did without this.)
//! So while every call waited for is on a thread the kernel reports as
//! running or runnable, the gate stays shut and no waiter is told to give
//! up, for at most [`RUNNING_PATIENCE`]: a call that spins for another
//! thread's `mutate` call is let through after that, as before.
//!
//! # Where it is known
//! Linux reports each thread's state in `/proc/self/task/<tid>/stat`
//! (`R`: running or runnable). Elsewhere, under loom, or where the file
//! cannot be read, the state is unknown and the gate behaves as it did
//! without this: it opens after the patience.

use std::time::{Duration, Instant};

/// How long a wait may keep the gate shut because every call it waits for
/// is on a running thread. Long against a scheduler's slice under load (a
/// runnable thread gets the CPU within tens of milliseconds), short
/// against the hang it undoes: a call that spins, rather than sleeps,
/// while it waits for another thread's `mutate` call.
pub(crate) const RUNNING_PATIENCE: Duration = Duration::from_millis(250);

/// The calling thread's kernel id, for [`Running`] to look up later; 0
/// where unknown.
pub(crate) fn current() -> u32 {
    #[cfg(all(target_os = "linux", not(loom)))]
    {
        // SAFETY: `gettid` takes no arguments, touches no memory of
        // ours, and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        u32::try_from(tid).unwrap_or(0)
    }
    #[cfg(not(all(target_os = "linux", not(loom))))]
    {
        0
    }
}

/// Whether thread `tid` of this process is running or runnable; `None`
/// where that is not known (see the module docs).
fn running(tid: u32) -> Option<bool> {
    if tid == 0 || cfg!(loom) || !cfg!(target_os = "linux") {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // "tid (name) S ...": the name may hold spaces and parentheses, the
    // state follows the last ')'.
    let state = stat[stat.rfind(')')? + 1..].trim_start().chars().next()?;
    Some(state == 'R')
}

/// One wait's judgement of the calls it waits for, kept across its
/// timeouts.
#[derive(Debug, Default)]
pub(crate) struct Running {
    /// When the wait first found every call it waits for running.
    since: Option<Instant>,
}

impl Running {
    /// Whether every thread of `threads` (those of the calls a wait still
    /// waits for, as [`current`] gave them) is running or runnable, and
    /// this wait has not yet held the gate shut for that longer than
    /// [`RUNNING_PATIENCE`]: then none of those calls is waiting for
    /// another thread, and the wait goes on without opening the gate.
    /// False if any thread's state is unknown or not running. Reads one
    /// small file per thread (tens of microseconds), under the gate's
    /// mutex: it is asked only past a patience, and again after 2, 4, 8
    /// ... ms while the threads run, so a few times in a wait.
    pub(crate) fn all(&mut self, threads: impl IntoIterator<Item = u32>) -> bool {
        let mut any = false;
        for tid in threads {
            any = true;
            if running(tid) != Some(true) {
                return false;
            }
        }
        if !any {
            return false;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        since.elapsed() < RUNNING_PATIENCE
    }

    /// When this judgement's [`RUNNING_PATIENCE`] runs out, if it has
    /// found every thread running.
    pub(crate) fn until(&self) -> Option<Instant> {
        self.since.map(|since| since + RUNNING_PATIENCE)
    }
}

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::{Arc, Barrier};

    /// A thread that spins reads as running; one that waits on a barrier
    /// (sleeping in the kernel) does not, and a judgement that found only
    /// running threads runs out after its patience.
    #[test]
    fn a_spinning_thread_runs_and_a_waiting_one_does_not() {
        assert_eq!(running(current()), Some(true), "the calling thread runs");
        let tid = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let barrier = Arc::new(Barrier::new(2));
        let t = {
            let (tid, stop, barrier) = (tid.clone(), stop.clone(), barrier.clone());
            std::thread::spawn(move || {
                tid.store(current(), Ordering::Release);
                while !stop.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                barrier.wait();
            })
        };
        let tid = loop {
            match tid.load(Ordering::Acquire) {
                0 => std::thread::yield_now(),
                tid => break tid,
            }
        };
        let mut judged = Running::default();
        assert!(judged.all([tid, current()]), "a spinning thread runs");
        judged.since = Some(Instant::now() - RUNNING_PATIENCE);
        assert!(!judged.all([tid]), "past the patience, the gate opens");
        stop.store(true, Ordering::Release);
        // Asleep in the barrier once its state says so (the spin it ends
        // with is short).
        let asleep = (0..10_000).any(|_| {
            std::thread::sleep(Duration::from_micros(100));
            running(tid) == Some(false)
        });
        assert!(asleep, "a thread waiting on a barrier reads as running");
        assert!(!Running::default().all([tid, current()]));
        barrier.wait();
        t.join().unwrap();
        assert_eq!(running(0), None);
        assert!(!Running::default().all([]));
    }
}
