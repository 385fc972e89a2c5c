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
//! variable, a channel) sleeps in the kernel, after at most a short spin,
//! and stays asleep until that thread wakes it; a thread that is running
//! or runnable is not waiting in any of those. One look is not enough: a
//! call blocks for a moment on an internal mutex, or faults a page in,
//! and reads as asleep if the look falls there (`tests/limit.rs` failed
//! once in a CI run so: the gate let the other mutator through pacing).
//! So a call is taken to wait only if its thread is asleep at two looks
//! in a row with no wake-up between them: its count of voluntary context
//! switches has not moved. While no call waited for is seen waiting, the
//! gate stays shut and no waiter is told to give up, for at most
//! [`RUNNING_PATIENCE`]: a call that spins for another thread's `mutate`
//! call, or polls for it with short sleeps, is let through after that, as
//! before. (A call may also sleep for its own reasons, long I/O say: the
//! gate then opens as it did without this.)
//!
//! # Where it is known
//! Linux reports each thread's state and its voluntary context switches in
//! `/proc/self/task/<tid>/status`. Elsewhere, under loom, or where the
//! file cannot be read, the state is unknown and the gate behaves as it
//! did without this: it opens after the patience.

use std::time::{Duration, Instant};

/// How long a wait may keep the gate shut because no call it waits for is
/// on a blocked thread. Long against a scheduler's slice under load (a
/// runnable thread gets the CPU within tens of milliseconds), short
/// against the hang it undoes: a call that spins (or naps), rather than
/// blocks, while it waits for another thread's `mutate` call.
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

/// Thread `tid`'s state as one look finds it: whether it is asleep in an
/// interruptible wait (`S`: a join, a futex, a condition variable; not
/// `D`, a disk read or a page fault, which no other thread ends), and how
/// many times it has given up the CPU to wait (its voluntary context
/// switches). `None` where that is not known (see the module docs).
fn look(tid: u32) -> Option<(bool, u64)> {
    if tid == 0 || cfg!(loom) || !cfg!(target_os = "linux") {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    // "State:\tS (sleeping)", "voluntary_ctxt_switches:\t12".
    let asleep = field("State:")?.starts_with('S');
    let switches = field("voluntary_ctxt_switches:")?.parse().ok()?;
    Some((asleep, switches))
}

/// One wait's judgement of the calls it waits for, kept across its looks.
#[derive(Debug)]
pub(crate) struct Running {
    /// How long it may find no call waiting before it gives up
    /// ([`RUNNING_PATIENCE`] but in tests).
    patience: Duration,
    /// When the wait first found no call waiting.
    since: Option<Instant>,
    /// The threads the last look found asleep, with their voluntary
    /// context switches then.
    asleep: Vec<(u32, u64)>,
}

impl Running {
    pub(crate) fn new(patience: Duration) -> Self {
        Running {
            patience,
            since: None,
            asleep: Vec::new(),
        }
    }

    /// Whether no thread of `threads` (those of the calls a wait still
    /// waits for, as [`current`] gave them) is waiting, and this wait has
    /// not yet held the gate shut for that longer than
    /// its patience: then the wait goes on without opening the
    /// gate. A thread waits if this look and the last both found it
    /// asleep, and it has not woken in between. False if any thread's
    /// state is unknown, or if there is none. Reads one small file per
    /// thread (tens of microseconds), under the gate's mutex: it is asked
    /// only past a patience, and again after 1, 2, 4 ... ms while none
    /// waits, so a few times in a wait.
    pub(crate) fn none_waits(&mut self, threads: impl IntoIterator<Item = u32>) -> bool {
        let mut asleep = Vec::new();
        let mut waits = false;
        let mut any = false;
        for tid in threads {
            any = true;
            let Some((asleep_now, switches)) = look(tid) else {
                return false;
            };
            if asleep_now {
                waits |= self.asleep.contains(&(tid, switches));
                asleep.push((tid, switches));
            }
        }
        self.asleep = asleep;
        if waits || !any {
            return false;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        since.elapsed() < self.patience
    }

    /// When this judgement's patience runs out, if it has found no call
    /// waiting.
    pub(crate) fn until(&self) -> Option<Instant> {
        self.since.map(|since| since + self.patience)
    }
}

/// How long a program's wait for a cycle (`collect`, `wait_for_cycle`)
/// watches the cycle held up by calls that all sleep without waking before
/// it panics ([`Stall`]).
pub(crate) const STALL_PATIENCE: Duration = Duration::from_secs(10);

/// A program's wait for a cycle, watching for the one wait that cannot
/// end: the cycle waits for every `mutate` call under way (its stop, or a
/// ragged mark's start or end), and a call under way waits for the thread
/// that waits for the cycle (a scoped thread it joins, or a lock the
/// waiting thread holds). Nothing can undo that, and a hang tells the
/// program nothing, so the wait panics with the reason instead.
///
/// # When it is taken to be that
/// For [`patience`](Self::new) on end, at looks a while apart: the
/// collector waits for calls under way (a stop, or a ragged mark's start
/// or end: `Handshake::awaits_calls`), the same calls are under way on the
/// same threads, and each of those threads is asleep and has not woken
/// since the first look (its voluntary context switches have not moved).
/// Every call under way, not only those the collector waits for: a call
/// that runs may yet end what the others wait for. A call that
/// waits for anything else (I/O, a lock that another thread will release,
/// a sleep) wakes within that time in any program that runs at all, and
/// one that keeps the collector waiting that long holds up every
/// allocation past pacing as it is (README, "Known problems"). Where
/// thread states are unknown (not Linux, loom) nothing is taken for a
/// stall, and the wait hangs as before.
#[derive(Debug)]
pub(crate) struct Stall {
    patience: Duration,
    /// The first look of the current stretch: when, and the threads of the
    /// calls under way with their voluntary context switches then.
    first: Option<(Instant, Vec<(u32, u64)>)>,
}

impl Stall {
    pub(crate) fn new(patience: Duration) -> Self {
        Stall {
            patience,
            first: None,
        }
    }

    /// One look: `awaited` (the collector waits for calls under way) and
    /// `threads` (the threads of the calls under way, as [`current`] gave
    /// them). True once the stretch of looks that found the same threads
    /// asleep, none woken, the collector waiting, has lasted the patience.
    pub(crate) fn stalled(
        &mut self,
        awaited: bool,
        threads: impl IntoIterator<Item = u32>,
    ) -> bool {
        let now = self.look(awaited, threads);
        match (&self.first, now) {
            (Some((since, first)), Some(now)) if *first == now => since.elapsed() >= self.patience,
            (_, now) => {
                self.first = now.map(|now| (Instant::now(), now));
                false
            }
        }
    }

    /// The threads with their switches, sorted, if the collector waits
    /// and every one is asleep; `None` otherwise (or if there is none).
    fn look(
        &self,
        awaited: bool,
        threads: impl IntoIterator<Item = u32>,
    ) -> Option<Vec<(u32, u64)>> {
        if !awaited {
            return None;
        }
        let mut seen = Vec::new();
        for tid in threads {
            match look(tid)? {
                (true, switches) => seen.push((tid, switches)),
                (false, _) => return None,
            }
        }
        seen.sort_unstable();
        (!seen.is_empty()).then_some(seen)
    }
}

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::{mpsc, Arc};

    /// A thread that spins is not waiting; one blocked on a channel is,
    /// from the second look that finds it asleep; one that sleeps in short
    /// naps (waking between looks) is not; and a judgement that found none
    /// waiting runs out after its patience. (An hour's patience where the
    /// patience must not be what decides.)
    #[test]
    fn a_blocked_thread_waits_and_a_spinning_or_napping_one_does_not() {
        const HOUR: Duration = Duration::from_secs(3600);
        assert!(
            matches!(look(current()), Some((false, _))),
            "the calling thread is not asleep"
        );
        let tid = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<()>();
        let t = {
            let (tid, stop) = (tid.clone(), stop.clone());
            std::thread::spawn(move || {
                tid.store(current(), Ordering::Release);
                while !stop.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                // Blocked until the channel speaks, then naps until it
                // speaks again (or is gone).
                if rx.recv().is_ok() {
                    while let Err(mpsc::TryRecvError::Empty) = rx.try_recv() {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            })
        };
        let tid = loop {
            match tid.load(Ordering::Acquire) {
                0 => std::thread::yield_now(),
                tid => break tid,
            }
        };
        let mut judged = Running::new(HOUR);
        assert!(
            judged.none_waits([tid, current()]),
            "a spinning thread does not wait"
        );
        judged.since = Some(Instant::now() - HOUR);
        assert!(
            !judged.none_waits([tid]),
            "past the patience, the gate opens"
        );
        stop.store(true, Ordering::Release);
        // Blocked on the channel once two looks a moment apart say so.
        let mut judged = Running::new(HOUR);
        let blocked = (0..10_000).any(|_| {
            std::thread::sleep(Duration::from_millis(1));
            !judged.none_waits([tid])
        });
        assert!(
            blocked,
            "a thread blocked on a channel never read as waiting"
        );
        // Napping: awake between looks, so not waiting.
        tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let mut judged = Running::new(HOUR);
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(1));
            assert!(
                judged.none_waits([tid]),
                "a thread that naps read as waiting"
            );
        }
        tx.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(look(0), None);
        assert!(!Running::new(HOUR).none_waits([]));
    }

    /// A program's wait takes a stall only while the collector waits and
    /// the same threads sleep, none waking, for the whole patience: the
    /// collector no longer waiting, a thread that wakes, or one that runs
    /// starts the stretch afresh.
    #[test]
    fn a_stall_is_the_same_threads_asleep_and_unwoken_for_the_patience() {
        const PATIENCE: Duration = Duration::from_millis(50);
        let (tx, rx) = mpsc::channel::<()>();
        let (tid_tx, tid_rx) = mpsc::channel();
        let t = std::thread::spawn(move || {
            tid_tx.send(current()).unwrap();
            while rx.recv().is_ok() {}
        });
        let tid = tid_rx.recv().unwrap();
        let stalled_within = |st: &mut Stall, threads: &[u32]| {
            let start = Instant::now();
            while !st.stalled(true, threads.iter().copied()) {
                if start.elapsed() > Duration::from_secs(10) {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Some(start.elapsed())
        };
        let mut st = Stall::new(PATIENCE);
        assert!(!st.stalled(false, [tid]), "the collector does not wait");
        let took = stalled_within(&mut st, &[tid]).expect("a blocked thread never stalled");
        assert!(took >= PATIENCE, "stalled after {took:?}");
        // The collector no longer waits: the next stretch starts afresh.
        assert!(!st.stalled(false, [tid]));
        assert!(!st.stalled(true, [tid]));
        // The thread wakes (and sleeps again): afresh as well.
        std::thread::sleep(PATIENCE);
        tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            !st.stalled(true, [tid]),
            "a thread that woke counted as stalled"
        );
        assert!(stalled_within(&mut st, &[tid]).is_some());
        // A running thread (this one) is never part of a stall, nor are no
        // threads at all.
        let me = current();
        let mut st = Stall::new(Duration::ZERO);
        for _ in 0..20 {
            assert!(
                !st.stalled(true, [tid, me]),
                "a running thread counted as stalled"
            );
        }
        assert!(!Stall::new(Duration::ZERO).stalled(true, []));
        drop(tx);
        t.join().unwrap();
    }
}
