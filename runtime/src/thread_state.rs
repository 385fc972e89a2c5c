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
//! What a blocked call sleeps in tells more ([`Verdict`]). A futex wait
//! (a join, a lock, a condition variable, a channel) ends only when
//! another thread of the process wakes it, and that thread may be any
//! mutator, a worker attached long before the call began included: the
//! gate then opens to every waiter. A call asleep in I/O or a sleep ends
//! by itself, so the gate opens only to the mutators attached after the
//! call began, as for a call that runs past the running patience:
//! admitting older ones would only make the stop wait for their calls too.
//!
//! The same looks tell a program's wait for a cycle that can never come
//! from one that is only long ([`Stall`]): a thread that a `mutate` call
//! joins and that calls `collect` would otherwise wait forever.
//!
//! # Where it is known
//! Linux reports each thread's state and its voluntary context switches in
//! `/proc/self/task/<tid>/status`, what a sleeping thread sleeps in
//! (`/proc/self/task/<tid>/syscall`), and the process's threads
//! (`/proc/self/task`). Elsewhere, under loom, or where the files cannot
//! be read, the state is unknown: the gate behaves as it did without
//! this (it opens after the patience, to the younger waiters; under loom
//! as the model says), and no stall is found. Where `status` can be read
//! and `syscall` cannot (a `ptrace` policy, some sandboxes), a blocked
//! call opens the gate to the younger waiters only.

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

/// Whether this process's `/proc/self/task` may be read (see the module
/// docs).
fn tasks_known() -> bool {
    !cfg!(loom) && cfg!(target_os = "linux")
}

/// The text of `/proc/self/task/<tid>/<name>`; `None` where unknown (see
/// the module docs).
fn task_file(tid: u32, name: &str) -> Option<String> {
    if tid == 0 || !tasks_known() {
        return None;
    }
    std::fs::read_to_string(format!("/proc/self/task/{tid}/{name}")).ok()
}

/// Thread `tid`'s state as one look finds it: whether it is asleep in an
/// interruptible wait (`S`: a join, a futex, a condition variable; not
/// `D`, a disk read or a page fault, which no other thread ends), and how
/// many times it has given up the CPU to wait (its voluntary context
/// switches). `None` where that is not known (see the module docs).
fn look(tid: u32) -> Option<(bool, u64)> {
    let status = task_file(tid, "status")?;
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

/// What a look at the calls a wait waits for tells the gate
/// (`handshake.rs`, "The gate").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Stay as it is: no call is seen waiting, and the wait has not yet
    /// held the gate shut for that longer than its running patience.
    Shut,
    /// Open to the mutators attached after the oldest call began, which
    /// may be its scoped threads: a call waits, though not on another
    /// thread (in I/O or a sleep, which end by themselves), or the running
    /// patience is over (a call that spins for another thread), or there
    /// is no call, or a call's thread state is unknown (not Linux, or
    /// `/proc` unreadable: a call that waits for an older mutator then
    /// still deadlocks a stop, as it did before the looks read what a
    /// thread sleeps in).
    Younger,
    /// Open to every waiter, whenever it attached: a call waits on another
    /// thread of the process, and any mutator may be that thread (a pool
    /// worker that keeps its `Mutator`, answering the call over a
    /// channel). Under loom, where states are unknown, the models choose
    /// between this, the widest gate, and `Younger`
    /// (`Handshake::unknown_verdict`).
    Anyone,
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
    /// The verdict where a thread's state is unknown ([`Verdict`]).
    unknown: Verdict,
}

impl Running {
    /// A judgement with `patience` for calls that run, and `unknown` for
    /// its verdict where thread states are unknown: `Younger` (the gate
    /// as it was without the looks), or under loom whichever gate a model
    /// checks.
    pub(crate) fn new(patience: Duration, unknown: Verdict) -> Self {
        Running {
            patience,
            since: None,
            asleep: Vec::new(),
            unknown,
        }
    }

    /// Forgets what it has seen: the next look is a first one.
    pub(crate) fn restart(&mut self) {
        self.since = None;
        self.asleep.clear();
    }

    /// What the gate should do about the calls on `threads` (those a wait
    /// still waits for, as [`current`] gave them). A thread waits if this
    /// look and the last both found it asleep, and it has not woken in
    /// between; it waits *on another thread* if it sleeps in a futex wait
    /// as well (a join, a lock, a condition variable, a channel), which
    /// only another thread of the process ends. Reads one or two small
    /// files per thread (tens of microseconds), with the gate's mutex let
    /// go (`handshake.rs: unlocked`): it is asked only past a patience,
    /// and again after 1, 2, 4 ... ms while the gate stays as it is, so a
    /// few times in a wait.
    pub(crate) fn judge(&mut self, threads: impl IntoIterator<Item = u32>) -> Verdict {
        let mut asleep = Vec::new();
        let (mut waits, mut on_thread, mut any) = (false, false, false);
        for tid in threads {
            any = true;
            let Some((asleep_now, switches)) = look(tid) else {
                return self.unknown;
            };
            if asleep_now {
                if self.asleep.contains(&(tid, switches)) {
                    waits = true;
                    on_thread |= matches!(sleep_of(tid), Some(Sleep::Futex | Sleep::TimedFutex));
                }
                asleep.push((tid, switches));
            }
        }
        self.asleep = asleep;
        if on_thread {
            return Verdict::Anyone;
        }
        if waits || !any {
            return Verdict::Younger;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.patience {
            Verdict::Shut
        } else {
            Verdict::Younger
        }
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

/// What a sleeping thread sleeps in, from `/proc/self/task/<tid>/syscall`
/// ("202 0x... 0x80 0x2 0x0 ...": the call's number, then its arguments,
/// the fourth a futex wait's timeout). `None` where unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sleep {
    /// A futex wait with no timeout: a join, a lock, a condition
    /// variable, a channel; only another thread ends it.
    Futex,
    /// A futex wait with a timeout, which ends by itself (if it has not
    /// within a stall's patience, its timeout is longer).
    TimedFutex,
    /// Anything else: I/O, a sleep, a child process, which end from
    /// outside the process or by themselves.
    Other,
}

fn sleep_of(tid: u32) -> Option<Sleep> {
    let call = task_file(tid, "syscall")?;
    let mut words = call.split_whitespace();
    // "running", or "-1 sp pc" outside a system call: not asleep in one.
    let nr: i64 = words.next()?.parse().ok()?;
    let timeout = words.nth(3)?;
    Some(if !is_futex(nr) {
        Sleep::Other
    } else if timeout == "0x0" {
        Sleep::Futex
    } else {
        Sleep::TimedFutex
    })
}

/// Whether system call `nr` is a futex wait (`futex`, or `futex_time64`
/// where `futex` takes a 32-bit time).
fn is_futex(nr: i64) -> bool {
    // `c_long`, so `i32` on 32-bit targets.
    #[cfg(target_os = "linux")]
    #[allow(clippy::useless_conversion)]
    {
        nr == i64::from(libc::SYS_futex) || (cfg!(target_pointer_width = "32") && nr == 422)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = nr;
        false
    }
}

/// Threads a [`Stall`] leaves out of its look at the process: each
/// program wait's own (it polls) and each collector's coordinator (it
/// looks at the calls it waits for now and then).
/// One per fork generation: a child forked while a thread of the parent
/// held it (a program wait's poll, a coordinator's look) had its own
/// runtimes' waits and looks wait for it for ever.
fn aside_list() -> &'static std::sync::Mutex<Vec<u32>> {
    #[cfg(not(loom))]
    {
        static ASIDE: crate::forked::PerFork<std::sync::Mutex<Vec<u32>>> =
            crate::forked::PerFork::new(|| std::sync::Mutex::new(Vec::new()));
        ASIDE.get()
    }
    // The models do not fork.
    #[cfg(loom)]
    {
        static ASIDE: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
        &ASIDE
    }
}

/// The calling thread left out of stall looks until this is dropped.
pub(crate) struct Aside(u32);

/// Leaves the calling thread out of stall looks while the result lives.
pub(crate) fn aside() -> Aside {
    let tid = current();
    aside_list()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(tid);
    Aside(tid)
}

impl Drop for Aside {
    fn drop(&mut self) {
        let mut aside = aside_list().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = aside.iter().position(|&t| t == self.0) {
            aside.swap_remove(i);
        }
    }
}

/// A program's wait for a cycle, watching for the one wait that cannot
/// end: the cycle waits for every `mutate` call under way (its stop, or a
/// ragged mark's start or end), and a call under way waits for the thread
/// that waits for the cycle (a scoped thread it joins, or a lock the
/// waiting thread holds). Nothing can undo that, and a hang tells the
/// program nothing, so the wait panics with the reason instead.
///
/// # When it is taken to be that
/// As Go's runtime finds a deadlock (every goroutine blocked, none on a
/// timer or I/O): for [`patience`](Self::new) on end, at looks a while
/// apart, all of:
/// - the collector waits for calls under way (`Handshake::awaits_calls`):
///   the program wait's own, or, while its own cycle waits for the
///   process's cycle lock, the collector whose stuck cycle holds it
///   (`Shared::panic_if_stalled`);
/// - each call under way is on a thread asleep in a futex wait with no
///   timeout (what a join, a lock, a condition variable or a channel
///   waits in), which only another thread can end;
/// - every other thread of the process, but the program waits' own and
///   the collectors' coordinators ([`aside`]), is asleep in a futex wait
///   too (with a timeout longer than the stretch so far): none runs, none
///   sleeps on I/O, a timer or a child process, which could end from
///   outside and wake the rest;
/// - no thread has woken since the first look (its voluntary context
///   switches have not moved), and the threads are the same.
///
/// So no thread can wake another, and only a timed wait ending (after
/// the patience) or another process could change that: a timed wait
/// that then ends what the calls wait for is the one program this takes
/// for a stall wrongly. (Two program waits held up so, one of them on the
/// thread the calls wait for, may panic in either order: the other's
/// wait would have ended once that one's panic let the calls go on.)
/// Where thread states are unknown (not Linux, loom) nothing is taken for
/// a stall, and the wait hangs as before.
#[derive(Debug)]
pub(crate) struct Stall {
    patience: Duration,
    /// The first look of the current stretch: when, and what it saw.
    first: Option<(Instant, Sight)>,
}

/// What one look of a [`Stall`] saw: every thread looked at, with its
/// voluntary context switches, sorted.
#[derive(Debug, PartialEq, Eq)]
struct Sight(Vec<(u32, u64)>);

impl Stall {
    pub(crate) fn new(patience: Duration) -> Self {
        Stall {
            patience,
            first: None,
        }
    }

    /// One look: `awaited` (the collector waits for calls under way) and
    /// `calls` (the threads of the calls under way, as [`current`] gave
    /// them). True once a stretch of looks that saw the same stalled
    /// process has lasted the patience.
    pub(crate) fn stalled(&mut self, awaited: bool, calls: impl IntoIterator<Item = u32>) -> bool {
        let now = if awaited {
            Self::look(calls, process_threads)
        } else {
            None
        };
        self.judge(Instant::now(), now)
    }

    /// [`stalled`](Self::stalled) on what a look saw at `at` (the tests
    /// give their own times).
    fn judge(&mut self, at: Instant, now: Option<Sight>) -> bool {
        match (&self.first, now) {
            (Some((since, first)), Some(now)) if *first == now => {
                at.saturating_duration_since(*since) >= self.patience
            }
            (_, now) => {
                self.first = now.map(|now| (at, now));
                false
            }
        }
    }

    /// What a look sees, if every call's thread sleeps in a futex wait
    /// with no timeout and every other thread (`others`, less those
    /// aside) in a futex wait; `None` otherwise (or with no call).
    fn look(
        calls: impl IntoIterator<Item = u32>,
        others: impl FnOnce() -> Option<Vec<u32>>,
    ) -> Option<Sight> {
        let mut seen = Vec::new();
        for tid in calls {
            match look(tid)? {
                (true, switches) if sleep_of(tid)? == Sleep::Futex => seen.push((tid, switches)),
                _ => return None,
            }
        }
        if seen.is_empty() {
            return None;
        }
        let aside = aside_list()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let me = current();
        for tid in others()? {
            if tid == me || aside.contains(&tid) || seen.iter().any(|&(t, _)| t == tid) {
                continue;
            }
            match look(tid) {
                Some((true, switches)) if sleep_of(tid)? != Sleep::Other => {
                    seen.push((tid, switches))
                }
                // Gone since the listing: the next look sees the change.
                None if !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists() => {}
                _ => return None,
            }
        }
        seen.sort_unstable();
        Some(Sight(seen))
    }
}

/// The kernel ids of the process's threads (`/proc/self/task`).
fn process_threads() -> Option<Vec<u32>> {
    if !tasks_known() {
        return None;
    }
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::{mpsc, Arc};

    /// A thread that spins is not waiting; one blocked on a channel waits
    /// on another thread, from the second look that finds it asleep; one
    /// that sleeps in short naps (waking between looks) is not waiting;
    /// one in a long sleep waits, but not on another thread; and a
    /// judgement that found none waiting runs out after its patience. (An
    /// hour's patience where the patience must not be what decides.)
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
                // speaks again, then sleeps long.
                rx.recv().unwrap();
                while let Err(mpsc::TryRecvError::Empty) = rx.try_recv() {
                    std::thread::sleep(Duration::from_micros(200));
                }
                std::thread::sleep(Duration::from_millis(500));
            })
        };
        let tid = loop {
            match tid.load(Ordering::Acquire) {
                0 => std::thread::yield_now(),
                tid => break tid,
            }
        };
        let mut judged = Running::new(HOUR, Verdict::Younger);
        assert_eq!(
            judged.judge([tid, current()]),
            Verdict::Shut,
            "a spinning thread does not wait"
        );
        judged.since = Some(Instant::now() - HOUR);
        assert_eq!(
            judged.judge([tid]),
            Verdict::Younger,
            "past the patience, the gate opens to the younger waiters"
        );
        stop.store(true, Ordering::Release);
        // Blocked on the channel once two looks a moment apart say so.
        let mut judged = Running::new(HOUR, Verdict::Younger);
        let blocked = (0..10_000).any(|_| {
            std::thread::sleep(Duration::from_millis(1));
            judged.judge([tid]) == Verdict::Anyone
        });
        assert!(
            blocked,
            "a thread blocked on a channel never read as waiting on another"
        );
        // Napping: awake between looks, so not waiting. Nearly always: a
        // 200 µs nap that the VM's scheduler stretches past a millisecond
        // (no wake-up between two looks) reads as a sleep (on the 2-core
        // VM, four runs of ten in a row once met one, each failing here).
        tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let mut judged = Running::new(HOUR, Verdict::Younger);
        let verdicts: Vec<Verdict> = (0..20)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(1));
                judged.judge([tid])
            })
            .collect();
        let waiting = verdicts.iter().filter(|&&v| v != Verdict::Shut).count();
        assert!(
            waiting <= 3 && !verdicts.contains(&Verdict::Anyone),
            "a thread that naps read as waiting: {verdicts:?}"
        );
        // A long sleep: waiting, but for no other thread. (It may end
        // before two looks fall in it on a busy machine: then the looks
        // find the thread gone, which reads as unknown.)
        tx.send(()).unwrap();
        let mut judged = Running::new(HOUR, Verdict::Younger);
        let mut verdicts = Vec::new();
        while verdicts.last() != Some(&Verdict::Younger) && !t.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
            verdicts.push(judged.judge([tid]));
        }
        assert!(
            !verdicts.contains(&Verdict::Anyone),
            "a sleeping thread read as waiting on another: {verdicts:?}"
        );
        t.join().unwrap();
        assert_eq!(look(0), None);
        assert_eq!(
            Running::new(HOUR, Verdict::Younger).judge([]),
            Verdict::Younger
        );
    }

    /// A thread that runs `f` once it has sent its kernel id, until told
    /// to stop; `f` is given the stop channel to wait on (or poll).
    fn helper(
        f: impl FnOnce(mpsc::Receiver<()>) + Send + 'static,
    ) -> (u32, mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (tid_tx, tid_rx) = mpsc::channel();
        let t = std::thread::spawn(move || {
            tid_tx.send(current()).unwrap();
            f(stop_rx)
        });
        (tid_rx.recv().unwrap(), stop_tx, t)
    }

    /// A look sees a stall's makings only where a call's thread waits for
    /// another thread (a futex wait with no timeout) and every other
    /// thread looked at waits in a futex too: a call in a timed wait, a
    /// sleep or running, another thread asleep on a timer or running, or
    /// no call at all, is no stall. Threads aside, this one and threads
    /// gone are passed over.
    #[test]
    fn a_look_sees_calls_waiting_for_threads_none_of_which_can_wake_them() {
        let (blocked, b_stop, b) = helper(|rx| while rx.recv().is_ok() {});
        let (timed, t_stop, t) = helper(|rx| {
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                rx.recv_timeout(Duration::from_secs(3600))
            {}
        });
        let (sleeper, s_stop, s) = helper(|rx| {
            while rx.try_recv().is_err() {
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let (spinner, p_stop, p) = helper(|rx| while rx.try_recv().is_err() {});
        let (aside_spinner, a_stop, a) = helper(|rx| {
            let _aside = aside();
            while rx.try_recv().is_err() {}
        });
        let gone = helper(|_| {}).0;
        let none = || Some(Vec::new());
        // Until the helpers are asleep where they are going (counted
        // looks, not a time: a busy machine only takes more of them).
        let asleep = (0..10_000).any(|_| {
            std::thread::sleep(Duration::from_millis(1));
            Stall::look([blocked], || Some(vec![timed, aside_spinner, gone])).is_some()
        });
        assert!(asleep, "a call blocked on a channel was never seen");
        let seen = Stall::look([blocked], || {
            Some(vec![timed, current(), aside_spinner, gone])
        })
        .expect("a blocked call, with a timed wait beside it");
        let tids: Vec<u32> = seen.0.iter().map(|&(t, _)| t).collect();
        let mut want = vec![blocked, timed];
        want.sort_unstable();
        assert_eq!(tids, want);
        assert!(Stall::look([], none).is_none(), "no call");
        for _ in 0..20 {
            assert!(
                Stall::look([timed], none).is_none(),
                "a call in a timed wait"
            );
            assert!(
                Stall::look([sleeper], none).is_none(),
                "a call asleep on a timer"
            );
            assert!(Stall::look([spinner], none).is_none(), "a call that runs");
            assert!(
                Stall::look([blocked], || Some(vec![sleeper])).is_none(),
                "a thread asleep on a timer beside the call"
            );
            assert!(
                Stall::look([blocked], || Some(vec![spinner])).is_none(),
                "a thread that runs beside the call"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        for (stop, t) in [
            (b_stop, b),
            (t_stop, t),
            (s_stop, s),
            (p_stop, p),
            (a_stop, a),
        ] {
            let _ = stop.send(());
            drop(stop);
            t.join().unwrap();
        }
    }

    /// A stall is the same sight (the same threads, none woken) for the
    /// whole patience: a wake-up, a thread more or a look that saw
    /// nothing starts the stretch afresh. Times are given, not waited.
    #[test]
    fn a_stall_is_the_same_sight_for_the_patience() {
        const PATIENCE: Duration = Duration::from_secs(10);
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        let sight = |threads: &[(u32, u64)]| Some(Sight(threads.to_vec()));
        let mut st = Stall::new(PATIENCE);
        assert!(!st.judge(at(0), sight(&[(7, 3)])));
        assert!(!st.judge(at(9), sight(&[(7, 3)])), "before the patience");
        assert!(st.judge(at(10), sight(&[(7, 3)])));
        // A look that saw nothing, then the stretch anew.
        assert!(!st.judge(at(11), None));
        assert!(!st.judge(at(12), sight(&[(7, 3)])));
        assert!(!st.judge(at(21), sight(&[(7, 3)])));
        // Woken (switches moved), or a thread more: anew each time.
        assert!(!st.judge(at(23), sight(&[(7, 4)])));
        assert!(!st.judge(at(30), sight(&[(7, 4), (9, 1)])));
        assert!(!st.judge(at(39), sight(&[(7, 4), (9, 1)])));
        assert!(st.judge(at(40), sight(&[(7, 4), (9, 1)])));
    }
}
