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

/// How long a program's wait for a cycle (`collect`, `wait_for_cycle`,
/// `wait_for_drops`) watches a stall before it panics ([`Stall`]).
pub(crate) const STALL_PATIENCE: Duration = Duration::from_secs(10);

/// Whether thread `tid` sleeps in a futex wait with no timeout (a join, a
/// lock, a condition variable, a channel: what one thread waits in for
/// another), from `/proc/self/task/<tid>/syscall` ("202 0x... 0x80 0x2
/// 0x0 ...": the call's number, then its arguments, the fourth the
/// timeout). `None` where unknown.
fn waits_for_a_thread(tid: u32) -> Option<bool> {
    if tid == 0 || cfg!(loom) || !cfg!(target_os = "linux") {
        return None;
    }
    let call = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
    let mut words = call.split_whitespace();
    let nr: i64 = words.next()?.parse().ok()?;
    let timeout = words.nth(3)?;
    #[cfg(target_os = "linux")]
    let futex = nr == libc::SYS_futex;
    #[cfg(not(target_os = "linux"))]
    let futex = false;
    Some(futex && timeout == "0x0")
}

/// CPU time (clock ticks) the process's other threads have used: the
/// process's user and system time less the calling thread's. `None` where
/// unknown.
fn others_cpu() -> Option<u64> {
    if cfg!(loom) || !cfg!(target_os = "linux") {
        return None;
    }
    // "pid (comm) state ppid ... utime stime ...": fields 14 and 15, the
    // 12th and 13th after the name (which may hold spaces).
    let ticks = |path: &str| -> Option<u64> {
        let stat = std::fs::read_to_string(path).ok()?;
        let mut after = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
        let utime: u64 = after.nth(11)?.parse().ok()?;
        let stime: u64 = after.next()?.parse().ok()?;
        Some(utime + stime)
    };
    Some(ticks("/proc/self/stat")?.saturating_sub(ticks("/proc/thread-self/stat")?))
}

/// A program's wait for a cycle, watching for the one wait that cannot
/// end: the cycle waits for every `mutate` call under way (its stop, or a
/// ragged mark's start or end), and a call under way waits for the thread
/// that waits for the cycle (a scoped thread it joins, or a lock the
/// waiting thread holds). Nothing can undo that, and a hang tells the
/// program nothing, so the wait panics with the reason instead.
///
/// # When it is taken to be that
/// For [`patience`](Self::new) on end, at looks a while apart, all of:
/// - the collector waits for calls under way (`Handshake::awaits_calls`);
/// - the same calls are under way on the same threads, each asleep in a
///   futex wait with no timeout (what a join, a lock, a condition variable
///   or a channel waits in; not I/O, not a sleep, which end by
///   themselves), and none has woken since the first look (its voluntary
///   context switches have not moved): every call under way, not only
///   those awaited, since a call that runs may yet end what the others
///   wait for;
/// - the process's other threads together have used under 1% of a CPU
///   meanwhile: a call that joins a thread which computes (and would end)
///   is not a stall.
///
/// What is left is a program whose every call under way waits for another
/// thread, while no thread of the process computes: the calls wait for
/// this one, or for threads that wait for I/O (a channel whose sender
/// reads a socket) longer than the patience, which such a wait then
/// takes for a stall too. Where thread states are unknown (not Linux,
/// loom) nothing is taken for a stall, and the wait hangs as before.
#[derive(Debug)]
pub(crate) struct Stall {
    patience: Duration,
    /// The first look of the current stretch: when, and what it saw.
    first: Option<(Instant, Sight)>,
}

/// What one look of a [`Stall`] saw: the threads of the calls under way
/// with their voluntary context switches (sorted), and the CPU time of
/// the process's other threads.
#[derive(Debug)]
struct Sight {
    threads: Vec<(u32, u64)>,
    cpu: u64,
}

/// Clock ticks a second, as `/proc` counts CPU time (`USER_HZ`).
fn ticks_per_second() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `sysconf` reads a constant of the system; no memory of
        // ours is touched.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        u64::try_from(hz).ok().filter(|&hz| hz > 0).unwrap_or(100)
    }
    #[cfg(not(target_os = "linux"))]
    {
        100
    }
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
    /// them). True once a stretch of looks that found the same threads
    /// waiting for other threads, none woken, the collector waiting and
    /// the rest of the process idle, has lasted the patience.
    pub(crate) fn stalled(
        &mut self,
        awaited: bool,
        threads: impl IntoIterator<Item = u32>,
    ) -> bool {
        let now = Self::look(awaited, threads);
        self.judge(now)
    }

    /// [`stalled`](Self::stalled) on what a look saw.
    fn judge(&mut self, now: Option<Sight>) -> bool {
        match (&self.first, now) {
            (Some((since, first)), Some(now)) if first.threads == now.threads => {
                let elapsed = since.elapsed();
                // Under 1% of one CPU over the patience (or the stretch,
                // if longer) since the first look: `/proc` counts in
                // ticks, and charges a whole one to a thread that ran in
                // it for a moment, so not a share of the stretch so far.
                let window =
                    u64::try_from(elapsed.max(self.patience).as_millis()).unwrap_or(u64::MAX);
                let allowed = window.saturating_mul(ticks_per_second()) / 100_000;
                if now.cpu.saturating_sub(first.cpu) > allowed {
                    self.first = Some((Instant::now(), now));
                    return false;
                }
                elapsed >= self.patience
            }
            (_, now) => {
                self.first = now.map(|now| (Instant::now(), now));
                false
            }
        }
    }

    /// What a look sees, if the collector waits and every thread sleeps in
    /// a wait for another thread; `None` otherwise (or if there is none).
    fn look(awaited: bool, threads: impl IntoIterator<Item = u32>) -> Option<Sight> {
        if !awaited {
            return None;
        }
        let mut seen = Vec::new();
        for tid in threads {
            match look(tid)? {
                (true, switches) if waits_for_a_thread(tid)? => seen.push((tid, switches)),
                _ => return None,
            }
        }
        seen.sort_unstable();
        let cpu = others_cpu()?;
        (!seen.is_empty()).then_some(Sight { threads: seen, cpu })
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

    /// A look sees a stall's makings only while the collector waits and
    /// every thread given sleeps in a wait for another thread: one blocked
    /// on a channel does; one that sleeps (it ends by itself), one that
    /// runs, or none at all do not.
    #[test]
    fn a_look_sees_threads_that_wait_for_other_threads() {
        let (tx, rx) = mpsc::channel::<()>();
        let (tid_tx, tid_rx) = mpsc::channel();
        let blocked = std::thread::spawn(move || {
            tid_tx.send(current()).unwrap();
            while rx.recv().is_ok() {}
        });
        let tid = tid_rx.recv().unwrap();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (sleeper_tx, sleeper_rx) = mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            sleeper_tx.send(current()).unwrap();
            while stop_rx.try_recv().is_err() {
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        let sleeper_tid = sleeper_rx.recv().unwrap();
        let seen = (0..10_000).find_map(|_| {
            std::thread::sleep(Duration::from_millis(1));
            Stall::look(true, [tid])
        });
        let seen = seen.expect("a thread blocked on a channel was never seen waiting");
        assert_eq!(seen.threads.len(), 1);
        assert_eq!(seen.threads[0].0, tid);
        assert!(
            Stall::look(false, [tid]).is_none(),
            "the collector does not wait"
        );
        assert!(Stall::look(true, []).is_none());
        assert!(
            Stall::look(true, [tid, current()]).is_none(),
            "this thread runs"
        );
        for _ in 0..20 {
            assert!(
                Stall::look(true, [sleeper_tid]).is_none(),
                "a sleeping thread was taken for one waiting for another"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(tx);
        blocked.join().unwrap();
        stop_tx.send(()).unwrap();
        sleeper.join().unwrap();
    }

    /// A stall is the same threads, none woken, with the rest of the
    /// process idle, for the whole patience: a change of threads, a
    /// wake-up, another thread's CPU time or a look that saw nothing
    /// starts the stretch afresh.
    #[test]
    fn a_stall_is_the_same_sight_for_the_patience() {
        const PATIENCE: Duration = Duration::from_millis(30);
        let sight = |threads: &[(u32, u64)], cpu| {
            Some(Sight {
                threads: threads.to_vec(),
                cpu,
            })
        };
        let stalled_after = |st: &mut Stall, threads: &[(u32, u64)], cpu| {
            let start = Instant::now();
            while !st.judge(sight(threads, cpu)) {
                assert!(start.elapsed() < Duration::from_secs(10), "never stalled");
                std::thread::sleep(Duration::from_millis(2));
            }
            start.elapsed()
        };
        let mut st = Stall::new(PATIENCE);
        assert!(stalled_after(&mut st, &[(7, 3)], 100) >= PATIENCE);
        // A look that saw nothing, then the stretch anew.
        assert!(!st.judge(None));
        assert!(!st.judge(sight(&[(7, 3)], 100)));
        // Woken (switches moved), or another thread.
        for changed in [sight(&[(7, 4)], 100), sight(&[(7, 4), (9, 1)], 100)] {
            assert!(!st.judge(changed));
        }
        // Other threads' CPU time: ten seconds of it, far past 1% of any
        // stretch this test can take.
        std::thread::sleep(PATIENCE);
        let busy = 100 + 10 * ticks_per_second();
        assert!(
            !st.judge(sight(&[(7, 4), (9, 1)], busy)),
            "the process computed"
        );
        assert!(stalled_after(&mut st, &[(7, 4), (9, 1)], busy) >= PATIENCE);
    }
}
