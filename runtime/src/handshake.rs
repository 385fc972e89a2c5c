//! The stop/resume handshake between the collector and the mutators.
//!
//! A mutator is *inside* while it runs a `mutate` closure (it may hold
//! pointers the collector cannot see) and *outside* otherwise (between
//! calls, or blocked in code that cannot touch the heap). To stop the world
//! the collector raises `stop` and waits until no slot is inside; a mutator
//! entering while `stop` is up steps back out and waits at the *gate*.
//!
//! The fast path is Dekker's: each side stores its own flag, issues a
//! sequentially consistent fence, then loads the other's flag, so at least
//! one of them sees the other. (Fences rather than `SeqCst` accesses: the
//! fences are what the C++ model, and loom, guarantee a total order for.)
//! Either the collector sees the mutator inside (and waits for it to
//! leave), or the mutator sees `stop` (and backs out): never both missed.
//! The mutator's fast path is one store and one load; the waits use a mutex
//! and condvars, and every wake-up is issued under the mutex after the flag
//! it announces is set, so none is lost.
//!
//! # The gate: a stop never deadlocks with a call that waits for another
//! A `mutate` call may wait for another thread's call: scoped threads that
//! attach and enter `mutate` themselves while the spawning call joins them,
//! or a worker that keeps its `Mutator` and answers the call's requests
//! from calls of its own. If entering simply waited for the stop, the stop
//! would wait for the waiting call, which waits for the other thread, which
//! waits for the stop. So a stop that has waited `patience` for calls under
//! way, while mutators wait to enter (or another runtime's cycle waits for
//! the process's cycle lock, whose mutators may be the threads waited
//! for: `collector::other_holder_stuck`; any queued cycle counts, so with
//! several runtimes a call blocked past the patience lets every runtime's
//! waiters go for the rest of the stop), takes a look at the calls'
//! threads (`thread_state.rs`) and *opens the gate*:
//! - to every waiter, if a call's thread waits on another thread (asleep
//!   in a futex wait, a join, a lock, a condition variable, a channel, at
//!   two looks with no wake-up between): any mutator may be the one it
//!   waits for;
//! - to the waiters attached after the oldest call still inside began, if
//!   a call's thread is blocked otherwise (I/O, a sleep), or none has been
//!   seen blocked for a long while (it may spin for the other thread): a
//!   scoped thread's `Mutator` is made inside the call that spawned it (a
//!   `Mutator` cannot be moved to another thread).
//!
//! They enter while the calls the stop waits for are still inside, and the
//! gate closes again once those have left; then the stop waits for the
//! admitted ones, with twice the patience. Why this is sound and ends:
//! 1. The world is stopped only when, with the gate closed, every slot reads
//!    outside after a fence: the same Dekker argument as without a gate. An
//!    admitted mutator marks itself inside *under the gate's mutex*, while
//!    it reads the gate open; the collector closes the gate under that
//!    mutex before it looks at the slots, so it sees the admission, or the
//!    mutator sees the gate closed and waits. Who is admitted plays no part.
//! 2. A mutator is admitted only while a call the stop waits for is still
//!    inside, so admitting it delays nothing that was not delayed already,
//!    and the patience doubles each time (up to a second). Long calls of
//!    independent threads that only run or sleep do not keep the gate
//!    swinging: threads attached before every call under way began are
//!    admitted only past a call waiting on another thread. Calls that
//!    each wait on other threads for long at a time, over and over
//!    (workers whose calls block waiting for work), could keep a stop
//!    from ending, each admitted mutator's call one more to wait for: the
//!    price of never deadlocking with a call that waits for a mutator.
//! 3. A call that waits for another mutator's call stays inside until that
//!    call ends; if it blocks for it (a join, a channel, a lock), the gate
//!    opens for every waiter after the patience, however deep the nesting
//!    and whenever the other attached. A call that *spins* (or naps) for a
//!    mutator attached before it began is not seen waiting, and the gate
//!    opens only for younger mutators after `RUNNING_PATIENCE`: that still
//!    deadlocks a stop (README, known problems).
//!
//! A mutator that waits for the collector between its calls (pacing, the
//! heap-limit retry) counts as waiting at the gate too, and gives up its
//! wait when the gate opens for it. One that pacing holds gives up also
//! when the collector is [`stuck`](Handshake::stuck), whenever it
//! attached: pacing is no part of soundness, and giving up lets a ragged
//! cycle's wait for a call end when that call spins for this thread.
//! `loom` checks the handshake
//! (`handshake_model`).

use crate::sync::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use crate::thread_state::{Running, Verdict};
#[cfg(loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long a stop waits for the calls under way, while mutators wait to
/// enter, before it first opens the gate (it doubles each time after).
const PATIENCE: Duration = Duration::from_millis(1);

/// `Handshake::state`: a stop is requested (entering mutators wait).
const STOP: u32 = 1;
/// `Handshake::state`: the collector waits for calls under way to end
/// (`wait_for_calls`); leaving mutators whose call it waits for wake it
/// (`Slot::watched`). Entering ones go on.
const WATCH: u32 = 2;

/// One mutator's side of the handshake.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// Written by the mutator only (or for it, under the gate's mutex, see
    /// `enter_slow`): odd inside a `mutate` call, even outside, one more
    /// at every entry and every exit, so that the collector can tell a
    /// call that is still inside from a later one (`wait_for_calls`). Read
    /// by the collector after its fence (Dekker), or under the gate's mutex.
    seq: AtomicU64,
    /// The mutator's place in the order of attachment (1, 2, ...), set once
    /// by [`Handshake::attach`]. 0: never attached, never admitted.
    attached: AtomicU64,
    /// The runtime's attach count as the current (or last) call began:
    /// mutators attached after it may be that call's scoped threads.
    /// Written by the mutator at entry (relaxed: a stale, smaller value
    /// only admits more, which is always sound).
    call_began: AtomicU64,
    /// Written by the mutator only: odd while it shades for a concurrent
    /// mark (a barrier's read of the value it overwrites, the mark bit and
    /// the push onto its shade queue), one more at each bracket's start and
    /// end.
    /// A ragged mark's end waits for the brackets under way instead of
    /// the calls (`wait_for_shades`).
    shading: AtomicU64,
    /// Written by the mutator only: the sequence of its call under way if
    /// that call began in a ragged start's window (`confirm_window`), so
    /// the mark's end waits for it; anything else otherwise.
    window_seq: AtomicU64,
    /// Written by the collector only: it waits for this slot's call
    /// (`wait_for_listed`), so the call's leave, or its confirmation of
    /// the window, wakes it. Set before the wait's fence and read after
    /// the mutator's (Dekker): either the mutator sees it, or the
    /// collector sees the slot's new sequence. Cleared as the wait ends;
    /// set for a later call than the one waited for, it only costs that
    /// call's leave a wake.
    watched: AtomicBool,
    /// The kernel id of the mutator's thread, set once by
    /// [`Handshake::attach`] (a `Mutator` never leaves its thread): a wait
    /// past its patience looks up whether the call it waits for is running
    /// before it opens the gate (`thread_state.rs`). 0: unknown. A std
    /// atomic under loom too: the models have no threads to look up.
    thread: std::sync::atomic::AtomicU32,
}

/// What the gate's mutex protects.
#[derive(Debug, Default)]
struct Gate {
    /// While open, waiting mutators attached after `admit_after` may enter
    /// although `stop` is up: 0 admits every one (module docs).
    open: bool,
    admit_after: u64,
    /// The attach numbers of the mutators waiting to enter (or waiting for
    /// the collector between calls).
    waiting: Vec<u64>,
}

impl Gate {
    /// Whether the gate is open to the mutator attached `n`-th.
    fn admits(&self, n: u64) -> bool {
        self.open && n > self.admit_after
    }
}

impl Slot {
    /// The kernel id of the mutator's thread (0: unknown).
    pub(crate) fn thread(&self) -> u32 {
        self.thread.load(Ordering::Relaxed)
    }

    /// Marks the slot inside (its owner only, outside).
    #[inline]
    fn set_inside(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "loam: a slot entered twice");
        self.seq.store(s | 1, Ordering::Relaxed);
    }

    /// Marks the slot outside (its owner only, inside). Release: the
    /// collector that sees the call ended sees every write made inside.
    #[inline]
    fn set_outside(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 1, "loam: a slot left twice");
        self.seq.store(s + 1, Ordering::Release);
    }

    /// Whether the slot is inside, as the collector reads it.
    pub(crate) fn is_inside(&self) -> bool {
        self.seq.load(Ordering::Acquire) & 1 == 1
    }

    /// Opens a shading bracket (its owner only): the fence pairs with the
    /// one in [`Handshake::wait_for_shades`] (Dekker), so either that wait
    /// sees the bracket, or everything this thread reads after the fence
    /// (the value a barrier overwrites) follows the wait's fence.
    ///
    /// Where the asymmetric pair is there (`crate::fence`), this side's
    /// fence is [`light`](crate::fence::light) and the wait's is
    /// [`heavy`](crate::fence::heavy): a bracket opens on every barrier
    /// of a ragged mark, where a locked increment and a full fence were
    /// most of a store's barrier (`docs/perf-log.md`, session 36), and a
    /// wait runs a few times per cycle. The
    /// opening is then a release store: a wait that reads it instead of
    /// the last bracket's close synchronises with it, which follows that
    /// close's pushes. Elsewhere a read-modify-write continues the release
    /// sequence of that close to the same effect, and a full fence follows.
    /// (loom continues a release sequence through its thread's later
    /// stores, as C++11 did, so its models cannot tell a relaxed opening
    /// from either; Rust's model, C++20's, does not.)
    #[inline]
    pub(crate) fn begin_shading(&self) {
        if crate::fence::available() {
            let s = self.shading.load(Ordering::Relaxed);
            debug_assert!(s & 1 == 0, "loam: a shading bracket opened twice");
            self.shading.store(s + 1, Ordering::Release);
            crate::fence::light();
        } else {
            let s = self.shading.fetch_add(1, Ordering::Relaxed);
            debug_assert!(s & 1 == 0, "loam: a shading bracket opened twice");
            fence(Ordering::SeqCst);
        }
    }

    /// Closes the bracket. Release: a wait that sees it closed sees the
    /// objects it pushed onto its mutator's shade queue
    /// (`Shared::drain_shaded` takes them).
    #[inline]
    pub(crate) fn end_shading(&self) {
        let s = self.shading.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 1, "loam: a shading bracket closed twice");
        self.shading.store(s + 1, Ordering::Release);
    }
}

/// The collector's side, shared by all mutators of a runtime.
#[derive(Debug)]
pub(crate) struct Handshake {
    /// `STOP` and `WATCH`, written by the collector only; `STOP` read by
    /// every entering and every leaving mutator after its fence (a leaving
    /// one reads its slot's `watched` too), `WATCH` by polls.
    state: AtomicU32,
    /// `Gate::open` and `Gate::admit_after`, readable without the mutex (a
    /// hint for threads that wait for the collector elsewhere, see
    /// [`Handshake::gate_admits`]): `u64::MAX` while the gate is closed.
    admit_hint: AtomicU64,
    /// Mutators attached so far (numbers [`Slot::attached`]).
    attaches: AtomicU64,
    lock: Mutex<Gate>,
    /// Mutators wait here for the world to resume, or the gate to open.
    resumed: Condvar,
    /// The collector waits here for inside mutators to leave, or for one to
    /// start waiting at the gate.
    left: Condvar,
    /// How long a wait keeps the gate shut while no call it waits for is
    /// blocked: [`RUNNING_PATIENCE`](crate::thread_state::RUNNING_PATIENCE)
    /// (tests make it long, to tell a blocked call's admission from the
    /// patience running out).
    running_patience: Duration,
    /// The runtime this handshake serves (0 in unit tests and models): its
    /// hint is mirrored process-wide only while that runtime's cycle holds
    /// the cycle lock (`collector::set_stuck`).
    runtime_id: u16,
    /// The gate's verdict where thread states are unknown (always, under
    /// loom): `Younger`, the gate as it was without the looks. Under loom
    /// `Anyone` by default, the widest gate: a `Younger` verdict while an
    /// older waiter is held looks again at the next deadline, which a
    /// model's timed wait reaches at once, so a model that holds one
    /// would spin; the scoped thread's model checks `Younger` too.
    unknown_verdict: Verdict,
}

#[cfg(not(loom))]
fn lock(m: &Mutex<Gate>) -> MutexGuard<'_, Gate> {
    m.lock()
}
#[cfg(loom)]
fn lock(m: &Mutex<Gate>) -> MutexGuard<'_, Gate> {
    m.lock().unwrap()
}
#[cfg(not(loom))]
fn wait<'a>(c: &Condvar, mut g: MutexGuard<'a, Gate>) -> MutexGuard<'a, Gate> {
    c.wait(&mut g);
    g
}
#[cfg(loom)]
fn wait<'a>(c: &Condvar, g: MutexGuard<'a, Gate>) -> MutexGuard<'a, Gate> {
    c.wait(g).unwrap()
}
/// Runs `f` with the gate's mutex let go and takes it again: the looks at
/// the thread files (`GateClock::admits`, `thread_state.rs`), which a
/// mutator leaving a call (`Handshake::leave`) would otherwise wait out.
/// What the caller read under the mutex may have changed when it has it
/// back: it acts on the look only if the oldest call it looked at is
/// still inside (module docs, 2); who waits may have changed, and whom
/// the gate admits plays no part in soundness (1).
fn unlocked<'a, R>(
    m: &'a Mutex<Gate>,
    g: MutexGuard<'a, Gate>,
    f: impl FnOnce() -> R,
) -> (MutexGuard<'a, Gate>, R) {
    drop(g);
    let r = f();
    (lock(m), r)
}
/// Whether another runtime's cycle waits for the process's cycle lock
/// (`collector::cycle_queued`; never in loom's models, which have no
/// collector).
fn cycle_queued() -> bool {
    #[cfg(not(loom))]
    return crate::collector::cycle_queued();
    #[cfg(loom)]
    false
}

/// Whether a stop with no waiter held must poll for a queued cycle: only
/// with another runtime about (never in loom's models).
fn poll_for_queued() -> bool {
    #[cfg(not(loom))]
    return crate::collector::several_runtimes();
    #[cfg(loom)]
    false
}

/// How often a stop with no waiter held looks for another runtime's cycle
/// queued behind it (`stop_world`).
const QUEUE_POLL: Duration = Duration::from_millis(10);

/// Waits at most `d`; true if it timed out (loom may say so at any time).
#[cfg(not(loom))]
fn wait_for<'a>(
    c: &Condvar,
    mut g: MutexGuard<'a, Gate>,
    d: Duration,
) -> (MutexGuard<'a, Gate>, bool) {
    let r = c.wait_for(&mut g, d);
    (g, r.timed_out())
}
/// Under loom a timeout is the earliest it can be: at once (loom's own
/// `wait_timeout` never times out, which would make every stop that needs
/// its gate a deadlock in the model). The gate then opens as soon as a
/// waiter is seen, and loom explores every interleaving around that.
#[cfg(loom)]
fn wait_for<'a>(_: &Condvar, g: MutexGuard<'a, Gate>, _: Duration) -> (MutexGuard<'a, Gate>, bool) {
    (g, true)
}

/// A wait's patience with the calls under way, and its judgement of them:
/// when to take a look at their threads, and whether that look opens the
/// gate (or sets the hint). One per stop or wait; both waits use it the
/// same way: [`wait`](Self::wait) until a look is due, then
/// [`admits`](Self::admits), which says whom the gate lets in now, if
/// anyone. The clock is the clock's, not a quiet timeout: a stop's timed
/// wait is woken by every mutator that leaves a call, so a timeout alone
/// never comes while other mutators come and go (a ragged wait is woken
/// only by the calls it listed, `Slot::watched`).
struct GateClock {
    /// How long a wait lasts before the first look: [`PATIENCE`],
    /// doubling each time the gate opens, up to a second.
    length: Duration,
    /// While no call waited for is seen blocked: how long until the next
    /// look, doubling after each.
    look: Duration,
    /// When the timed wait under way runs out. `None`: none is under way
    /// (no candidate waits, or the calls waited for changed); the clock
    /// starts at the next [`wait`](Self::wait).
    deadline: Option<std::time::Instant>,
    /// The oldest call (its `call_began`) the judgement is of.
    judged: Option<u64>,
    running: Running,
}

impl GateClock {
    fn new(running_patience: Duration, unknown: Verdict) -> Self {
        GateClock {
            length: PATIENCE,
            look: PATIENCE,
            deadline: None,
            judged: None,
            running: Running::new(running_patience, unknown),
        }
    }

    /// Starts afresh at the next wait: the clock and the judgement (the
    /// length carries over).
    fn restart(&mut self) {
        self.look = PATIENCE;
        self.deadline = None;
        self.judged = None;
        self.running.restart();
    }

    /// Waits on `c` for calls whose oldest began at `after`, until
    /// notified or a look is due (true; under loom at once: see
    /// `wait_for`). Calls of another oldest get a clock and a judgement
    /// of their own.
    fn wait<'a>(
        &mut self,
        after: u64,
        c: &Condvar,
        g: MutexGuard<'a, Gate>,
    ) -> (MutexGuard<'a, Gate>, bool) {
        if self.judged != Some(after) {
            self.restart();
            self.judged = Some(after);
        }
        let length = self.length;
        let deadline = *self
            .deadline
            .get_or_insert_with(|| std::time::Instant::now() + length);
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let (g, timed_out) = wait_for(c, g, left);
        (g, timed_out || std::time::Instant::now() >= deadline)
    }

    /// The look, at the calls on `threads`, whose oldest began at
    /// `after` (`thread_state.rs`): whom the gate lets in now, as the
    /// attach number they must be past (0: every waiter), or `None`. Every
    /// waiter once a call waits on another thread; the younger ones,
    /// where `younger` (some wait, and none has been let in yet), once a
    /// call is blocked otherwise or none has been for the running
    /// patience. If the gate opens (or widens), the next wait is twice as
    /// patient. If not, the next look comes after `look`, which doubles,
    /// and no later than the running patience's end if that is still to
    /// come. (Once it is past, a verdict that lets nobody new in, `Younger`
    /// with no younger waiter or with the younger ones let in already, is
    /// followed by the next look after `look`: one due at the patience's
    /// end would be due now, every time, and the wait would spin on the
    /// thread files.)
    fn admits(&mut self, threads: Vec<u32>, after: u64, younger: bool) -> Option<u64> {
        let admit = match self.running.judge(threads) {
            Verdict::Anyone => Some(0),
            Verdict::Younger if younger => Some(after),
            _ => None,
        };
        let now = std::time::Instant::now();
        if admit.is_some() {
            self.length = self.length.saturating_mul(2).min(Duration::from_secs(1));
            self.look = PATIENCE;
            self.deadline = None;
        } else {
            let mut next = now + self.look;
            if let Some(until) = self.running.until().filter(|&until| until > now) {
                next = next.min(until);
            }
            self.look = self.look.saturating_mul(2).min(Duration::from_secs(1));
            self.deadline = Some(next);
        }
        admit
    }
}

impl Default for Handshake {
    fn default() -> Self {
        Handshake {
            state: AtomicU32::new(0),
            admit_hint: AtomicU64::new(u64::MAX),
            attaches: AtomicU64::new(0),
            lock: Mutex::new(Gate::default()),
            resumed: Condvar::new(),
            left: Condvar::new(),
            running_patience: crate::thread_state::RUNNING_PATIENCE,
            runtime_id: 0,
            unknown_verdict: if cfg!(loom) {
                Verdict::Anyone
            } else {
                Verdict::Younger
            },
        }
    }
}

impl Handshake {
    /// The handshake of runtime `id`.
    pub(crate) fn for_runtime(id: u16) -> Self {
        Handshake {
            runtime_id: id,
            ..Handshake::default()
        }
    }

    /// Numbers a newly attached mutator's slot.
    pub(crate) fn attach(&self, slot: &Slot) {
        let n = self.attaches.fetch_add(1, Ordering::Relaxed) + 1;
        slot.attached.store(n, Ordering::Relaxed);
        slot.thread
            .store(crate::thread_state::current(), Ordering::Relaxed);
    }

    /// Marks `slot` inside, first waiting out any stop in progress (or
    /// entering through the open gate). Returns how long it waited, if it
    /// did (the clock is read on the slow path only).
    #[inline]
    pub(crate) fn enter(&self, slot: &Slot) -> Option<Duration> {
        slot.call_began
            .store(self.attaches.load(Ordering::Relaxed), Ordering::Relaxed);
        slot.set_inside();
        fence(Ordering::SeqCst);
        // The safepoint poll.
        if self.state.load(Ordering::Acquire) & STOP != 0 {
            let waiting = std::time::Instant::now();
            self.enter_slow(slot);
            return Some(waiting.elapsed());
        }
        None
    }

    #[cold]
    #[inline(never)]
    fn enter_slow(&self, slot: &Slot) {
        loop {
            self.leave(slot);
            let n = slot.attached.load(Ordering::Relaxed);
            let mut g = lock(&self.lock);
            g.waiting.push(n);
            // A stop past its patience opens the gate only for waiters.
            self.left.notify_all();
            while self.stopping() && !g.admits(n) {
                g = wait(&self.resumed, g);
            }
            unwait(&mut g, n);
            if g.admits(n) {
                // Admitted: inside while the gate is seen open, under its
                // mutex (module docs, 1).
                slot.set_inside();
                return;
            }
            drop(g);
            slot.set_inside();
            fence(Ordering::SeqCst);
            if !self.stopping() {
                return;
            }
        }
    }

    /// Whether a stop is up (acquire: a mutator that sees it lowered sees
    /// what the pause wrote).
    fn stopping(&self) -> bool {
        self.state.load(Ordering::Acquire) & STOP != 0
    }

    /// Marks `slot` outside, waking a collector that waits for it: a stop
    /// (which waits for every call), or a wait for calls under way that
    /// listed this one (`Slot::watched`). Only those: a ragged window's
    /// wait woken by every call that ended meanwhile was woken hundreds of
    /// times by the short calls of binary-trees at two threads, each wake
    /// a system call and a switch on a mutator's CPU (`docs/perf-log.md`,
    /// "... ragged waits woken by their own calls"). Returns whether it
    /// woke one.
    #[inline]
    pub(crate) fn leave(&self, slot: &Slot) -> bool {
        slot.set_outside();
        fence(Ordering::SeqCst);
        let wake =
            self.state.load(Ordering::Relaxed) & STOP != 0 || slot.watched.load(Ordering::Relaxed);
        if wake {
            let _g = lock(&self.lock);
            self.left.notify_all();
        }
        wake
    }

    /// The mutator of `slot` starts waiting for the collector outside
    /// `mutate` (for a cycle, when pacing): it counts as waiting at the
    /// gate, so that a stop stuck on a call that waits for this thread
    /// opens it.
    pub(crate) fn begin_wait(&self, slot: &Slot) {
        let mut g = lock(&self.lock);
        g.waiting.push(slot.attached.load(Ordering::Relaxed));
        self.left.notify_all();
    }

    /// The wait [`begin_wait`](Self::begin_wait) announced is over.
    pub(crate) fn end_wait(&self, slot: &Slot) {
        unwait(&mut lock(&self.lock), slot.attached.load(Ordering::Relaxed));
    }

    /// Sets the gate's hint ([`admit_hint`](Self::admit_hint)), and the
    /// process's copy of whether the cycle holding the cycle lock is stuck,
    /// if this handshake's runtime is the one holding it
    /// (`collector::set_stuck`; a unit test's handshake serves none).
    fn hint(&self, admit: u64) {
        self.admit_hint.store(admit, Ordering::Relaxed);
        // (loom's models have no collector, and one handshake.)
        #[cfg(not(loom))]
        crate::collector::set_stuck(self.runtime_id, admit != u64::MAX);
    }

    /// Whether the gate is open to the mutator of `slot`: a stop waits for
    /// a call under way that may be waiting for it, and it should give up
    /// any wait for the collector and enter.
    pub(crate) fn gate_admits(&self, slot: &Slot) -> bool {
        slot.attached.load(Ordering::Relaxed) > self.admit_hint.load(Ordering::Relaxed)
    }

    /// Mutators waiting at the gate now (tests watch a wait begin).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.lock).waiting.len()
    }

    /// Whether the collector has waited past its patience for a call
    /// under way on a thread that is blocked, or for calls none of which
    /// was blocked for `RUNNING_PATIENCE` (the gate hint is out,
    /// `wait_for_listed`, `stop_world`): a call that waits for the
    /// collector must give up, since the call waited for may be waiting
    /// for it (relaxed: polled).
    pub(crate) fn stuck(&self) -> bool {
        self.admit_hint.load(Ordering::Relaxed) != u64::MAX
    }

    /// Whether the collector waits for calls under way: a stop, or a
    /// ragged mark's start or end (relaxed: polled by a program's wait
    /// for a cycle, `thread_state::Stall`).
    pub(crate) fn awaits_calls(&self) -> bool {
        self.state.load(Ordering::Relaxed) & (STOP | WATCH) != 0
    }

    /// Whether a stop is requested (relaxed: a hint for mutators that may
    /// want to return from `mutate` early).
    #[inline]
    pub(crate) fn stop_requested(&self) -> bool {
        self.state.load(Ordering::Relaxed) & STOP != 0
    }

    /// Waits until every `mutate` call under way has ended, without
    /// stopping anything: mutators enter and leave meanwhile as they like.
    /// The calls waited for are those inside after a fence that follows
    /// the caller's last store: each either began before that fence (and
    /// is waited for) or reads, after its own entry fence, what the caller
    /// stored before (Dekker, as for a stop). So a flag the collector sets
    /// before this call is seen by every call under way when it returns.
    /// Used by the ragged mark's start (`cycle/ragged.rs`,
    /// `docs/handshakes.md`).
    pub(crate) fn wait_for_calls<S: AsRef<Slot>>(&self, slots: &[S]) {
        let under_way = self.calls_under_way(slots, false);
        self.wait_for_listed(slots, &under_way, false);
    }

    /// A call that read a ragged start's window open as it began
    /// (`Mutation::window`) tells the mark's end to wait for it, then
    /// reads the window again (`still_open`): if it has closed meanwhile,
    /// the call has read nothing from the heap yet, so it takes back what
    /// it told and runs as a call that began after the window (false).
    /// `still_open` reads the whole word the call began with, not only
    /// the window bit: a call whose first read was of an earlier mark
    /// must not count as a window call of the next one.
    /// The fence pairs with the one in
    /// [`calls_under_way`](Self::calls_under_way) (Dekker): a call that
    /// the window's close does not list reads it closed here. A
    /// confirmation, or a take-back, wakes a wait that listed the call
    /// (`Slot::watched`): the start's, for which it is not an old call
    /// after all, or the end's, which need not wait for it.
    pub(crate) fn confirm_window(&self, slot: &Slot, still_open: impl FnOnce() -> bool) -> bool {
        let seq = slot.seq.load(Ordering::Relaxed);
        slot.window_seq.store(seq, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if still_open() {
            self.wake_if_watched(slot);
            return true;
        }
        self.take_back(slot);
        false
    }

    /// A window call takes back that it began in the window
    /// ([`confirm_window`](Self::confirm_window)), waking the mark's end
    /// if it listed the call. The fence pairs with the wait's
    /// ([`watch`](Self::watch)): either the wait reads the call taken back,
    /// or the call sees its slot watched. Returns whether it woke one.
    fn take_back(&self, slot: &Slot) -> bool {
        slot.window_seq.store(0, Ordering::Release);
        fence(Ordering::SeqCst);
        self.wake_if_watched(slot)
    }

    /// Wakes the wait that watches `slot`, if one does (after the caller's
    /// fence); returns whether it did.
    fn wake_if_watched(&self, slot: &Slot) -> bool {
        let watched = slot.watched.load(Ordering::Relaxed);
        if watched {
            let _g = lock(&self.lock);
            self.left.notify_all();
        }
        watched
    }

    /// The calls under way after a fence that follows the caller's last
    /// store, as `(index in slots, sequence)`: each call that began before
    /// the fence is listed, and every other one reads, after its own entry
    /// fence, what the caller stored before (Dekker). With `windowed`,
    /// only the calls that told they began in the window
    /// ([`confirm_window`](Self::confirm_window)): the ragged mark takes
    /// this list as it closes its window, and waits for them later
    /// (`wait_for_listed`). Without, the others: a call that told it
    /// began in the window of the mark under way began after `marking`
    /// was set, and a window call of an earlier mark has ended (that
    /// mark's end waited for it), so the ragged start need not wait for
    /// those.
    pub(crate) fn calls_under_way<S: AsRef<Slot>>(
        &self,
        slots: &[S],
        windowed: bool,
    ) -> Vec<(usize, u64)> {
        fence(Ordering::SeqCst);
        slots
            .iter()
            .map(AsRef::as_ref)
            .enumerate()
            .filter_map(|(i, s)| {
                let seq = s.seq.load(Ordering::Acquire);
                (seq & 1 == 1 && (s.window_seq.load(Ordering::Relaxed) == seq) == windowed)
                    .then_some((i, seq))
            })
            .collect()
    }

    /// Watches the slots of the calls of `listed` (`Slot::watched`), then
    /// returns those still under way (`still`) after a fence: a call that
    /// leaves, or confirms the window, after that read sees its slot
    /// watched and wakes the waiter under the gate's mutex; one that did
    /// before is not returned (Dekker; the loom model
    /// `a_watched_call_that_leaves_wakes_the_wait_or_is_seen`).
    fn watch<'s, S: AsRef<Slot>>(
        &self,
        slots: &'s [S],
        listed: &[(usize, u64)],
        still: impl Fn(&Slot, u64) -> bool,
    ) -> Vec<(&'s Slot, u64)> {
        for &(i, _) in listed {
            // One such wait at a time per handshake (the coordinator's, one
            // cycle after another): its end clears what it set.
            let was = slots[i].as_ref().watched.swap(true, Ordering::Relaxed);
            debug_assert!(!was, "loam: two waits watch one call");
        }
        self.state.fetch_or(WATCH, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        listed
            .iter()
            .map(|&(i, seq)| (slots[i].as_ref(), seq))
            .filter(|&(s, seq)| still(s, seq))
            .collect()
    }

    /// Waits until each call of `listed` (from
    /// [`calls_under_way`](Self::calls_under_way) over the same `slots`,
    /// with the same `windowed`) has ended, or with `windowed` has taken
    /// back that it began in the window, as
    /// [`wait_for_calls`](Self::wait_for_calls) does.
    pub(crate) fn wait_for_listed<S: AsRef<Slot>>(
        &self,
        slots: &[S],
        listed: &[(usize, u64)],
        windowed: bool,
    ) {
        // Still the listed call, and with `windowed` still a window call;
        // without, not a window call (one of this mark, the start's wait:
        // it began after `marking` was set).
        let listed_still = |s: &Slot, seq: u64| {
            s.seq.load(Ordering::Acquire) == seq
                && (s.window_seq.load(Ordering::Acquire) == seq) == windowed
        };
        let under_way = self.watch(slots, listed, listed_still);
        if !under_way.is_empty() {
            let mut g = lock(&self.lock);
            let mut clock = GateClock::new(self.running_patience, self.unknown_verdict);
            let still = || under_way.iter().filter(|&&(s, seq)| listed_still(s, seq));
            // Mutators attached after the oldest call still under way
            // began may be its scoped threads, waiting for the collector
            // between their calls (pacing, the heap limit): past the
            // patience they are told to stop waiting (`gate_admits`), as
            // a stop's gate does, or the call would wait for them and they
            // for this wait; every mutator is, once a call is seen waiting
            // on another thread. Nobody is held at entry here, so nothing
            // else is needed. Not while none of those calls is on a
            // blocked thread: a call that waits for another thread is
            // (`thread_state.rs`).
            let oldest = || {
                still()
                    .map(|&(s, _)| s.call_began.load(Ordering::Relaxed))
                    .min()
            };
            // What the hint says: for which oldest call, admitting whom.
            let mut told: Option<(u64, u64)> = None;
            // A leave stores its sequence, fences, sees its slot watched
            // and notifies under the mutex: after this check, or it is
            // seen.
            while let Some(after) = oldest() {
                match told {
                    // Every mutator told: wait for a leave.
                    Some((call, 0)) if call == after => {
                        g = wait(&self.left, g);
                        continue;
                    }
                    // Told for a call that has left since: taken back.
                    Some((call, _)) if call != after => {
                        self.hint(u64::MAX);
                        told = None;
                    }
                    // Untold, or only the younger mutators told: look on.
                    _ => {}
                }
                let (g2, due) = clock.wait(after, &self.left, g);
                g = g2;
                // One look after the wait: the oldest call, and the
                // threads of all.
                if !due || oldest() != Some(after) {
                    continue;
                }
                let threads = still().map(|&(s, _)| s.thread()).collect();
                let admit;
                (g, admit) = unlocked(&self.lock, g, || {
                    clock.admits(threads, after, told.is_none())
                });
                // `still` compares sequences: the same call.
                if let Some(admit) = admit.filter(|_| oldest() == Some(after)) {
                    self.hint(admit);
                    told = Some((after, admit));
                }
            }
            self.hint(u64::MAX);
        }
        for &(i, _) in listed {
            slots[i].as_ref().watched.store(false, Ordering::Relaxed);
        }
        self.state.fetch_and(!WATCH, Ordering::Relaxed);
    }

    /// Waits until every shading bracket under way after a fence that
    /// follows the caller's last read of the markers' results has closed
    /// ([`Slot::begin_shading`]), twice over. After the first round,
    /// whatever those brackets shaded is in their mutators' shade queues
    /// (`Shared::drain_shaded`), unless its mark bit
    /// had been set by a bracket that opened after the first fence and has
    /// not pushed yet (only the shade that sets a bit pushes): that
    /// bracket's fence precedes the second round's (its bit was set
    /// before the first-round bracket's failed mark, which the first round
    /// waited for), so the second round sees it. A bracket neither round
    /// saw read the value it overwrites after the first fence, so after
    /// every marker's read of that value (`barrier.rs`, "Ragged cycles",
    /// 3). A bracket lasts a barrier's shade (or a sort's moves and shade,
    /// `GcLog::moving`, which neither allocate nor wait), so this spins,
    /// then yields, then sleeps briefly.
    pub(crate) fn wait_for_shades<S: AsRef<Slot>>(&self, slots: &[S]) {
        for _round in 0..2 {
            // The brackets' side of the pair (`Slot::begin_shading`).
            if crate::fence::available() {
                crate::fence::heavy();
            } else {
                fence(Ordering::SeqCst);
            }
            let mut open: Vec<(&Slot, u64)> = slots
                .iter()
                .map(AsRef::as_ref)
                .filter_map(|s| {
                    let seq = s.shading.load(Ordering::Acquire);
                    (seq & 1 == 1).then_some((s, seq))
                })
                .collect();
            let mut tries = 0u32;
            loop {
                // Acquire: a closed bracket's pushes are seen by the drain
                // that follows.
                open.retain(|&(s, seq)| s.shading.load(Ordering::Acquire) == seq);
                if open.is_empty() {
                    break;
                }
                tries += 1;
                #[cfg(loom)]
                loom::thread::yield_now();
                #[cfg(not(loom))]
                if tries < 64 {
                    std::hint::spin_loop();
                } else if tries < 128 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }

    /// Stops the world: raises `stop` and returns once no mutator is inside,
    /// with the gate closed. `registry` lists the slots; it is read again
    /// after every closing of the gate, so a mutator registered since (and
    /// perhaps admitted) is waited for too. Returns the last list read.
    pub(crate) fn stop_world<S: AsRef<Slot>>(
        &self,
        mut registry: impl FnMut() -> Vec<S>,
    ) -> Vec<S> {
        self.state.fetch_or(STOP, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // The clock's length carries over from round to round.
        let mut clock = GateClock::new(self.running_patience, self.unknown_verdict);
        loop {
            // The gate is closed here (it is only open below).
            let slots = registry();
            let inside: Vec<&Slot> = slots
                .iter()
                .map(AsRef::as_ref)
                .filter(|s| s.is_inside())
                .collect();
            if inside.is_empty() {
                return slots;
            }
            let mut g = lock(&self.lock);
            clock.restart();
            let still = || inside.iter().copied().filter(|s| s.is_inside());
            // Mutators attached after the oldest call still inside began
            // may be its scoped threads; any mutator may be the thread a
            // call waits on (module docs).
            let oldest = || still().map(|s| s.call_began.load(Ordering::Relaxed)).min();
            // Waiters the gate holds: any while it is shut; the older ones
            // while it is open to the younger only. Or another runtime's
            // cycle, queued behind this one for the cycle lock: its
            // mutators wait for it, and one may be the thread a call here
            // waits on (they give up once this stop is judged stuck,
            // `collector::other_holder_stuck`).
            let held = |g: &Gate| g.waiting.iter().any(|&n| !g.admits(n)) || cycle_queued();
            while let Some(after) = oldest() {
                if !held(&g) {
                    // The clock and the judgement start afresh when a
                    // waiter is held again. A cycle that queues for the
                    // cycle lock wakes nobody here: polled (not in loom's
                    // models, which have one runtime).
                    clock.restart();
                    g = if poll_for_queued() {
                        wait_for(&self.left, g, QUEUE_POLL).0
                    } else {
                        wait(&self.left, g)
                    };
                    continue;
                }
                let (g2, due) = clock.wait(after, &self.left, g);
                g = g2;
                if !due || oldest() != Some(after) || !held(&g) {
                    continue;
                }
                let younger = !g.open && g.waiting.iter().any(|&n| n > after);
                let threads = still().map(Slot::thread).collect();
                // The oldest calls looked at, by their sequences: the look
                // counts only if one of them is still inside (`unlocked`).
                let looked: Vec<(&Slot, u64)> = still()
                    .map(|s| (s, s.seq.load(Ordering::Acquire)))
                    .filter(|&(s, _)| s.call_began.load(Ordering::Relaxed) == after)
                    .collect();
                let admit;
                (g, admit) = unlocked(&self.lock, g, || clock.admits(threads, after, younger));
                let same = looked
                    .iter()
                    .any(|&(s, seq)| s.seq.load(Ordering::Acquire) == seq);
                if let Some(admit) = admit.filter(|_| same && held(&g)) {
                    g.open = true;
                    g.admit_after = admit;
                    self.hint(admit);
                    self.resumed.notify_all();
                }
            }
            // Closed under the mutex: admissions before this are visible to
            // the reads of the next round (module docs, 1).
            g.open = false;
            self.hint(u64::MAX);
            drop(g);
            fence(Ordering::SeqCst);
        }
    }

    /// Lowers `stop` and wakes the mutators waiting to enter.
    pub(crate) fn resume(&self) {
        // Release: a mutator that sees it lowered sees what the pause
        // wrote.
        self.state.fetch_and(!STOP, Ordering::Release);
        let _g = lock(&self.lock);
        self.resumed.notify_all();
    }
}

/// Takes one waiter numbered `n` off the gate's list.
fn unwait(g: &mut Gate, n: u64) {
    if let Some(i) = g.waiting.iter().position(|&w| w == n) {
        g.waiting.swap_remove(i);
    }
}

impl AsRef<Slot> for Slot {
    fn as_ref(&self) -> &Slot {
        self
    }
}

#[cfg(all(test, loom))]
mod handshake_model {
    use super::*;
    use loom::sync::atomic::{AtomicBool, AtomicUsize};
    use loom::sync::Arc;

    /// A call under way (one that began in the window, with `window`) that
    /// `release` ends while the collector waits for it (`watch`, its
    /// sequence word read by `still`): the wait either sees it ended by its
    /// first read, or is woken by it: never neither.
    fn watched_release_wakes_the_wait_or_is_seen(
        window: bool,
        release: fn(&Handshake, &Slot) -> bool,
        still: fn(&Slot, u64) -> bool,
    ) {
        loom::model(move || {
            let hs = Arc::new(Handshake::default());
            let slots = Arc::new([Slot::default()]);
            hs.attach(&slots[0]);
            hs.enter(&slots[0]);
            if window {
                assert!(hs.confirm_window(&slots[0], || true));
            }
            let listed = hs.calls_under_way(&slots[..], window);
            assert_eq!(listed.len(), 1);
            let mutator = {
                let (hs, slots) = (hs.clone(), slots.clone());
                loom::thread::spawn(move || release(&hs, &slots[0]))
            };
            let seen = hs.watch(&slots[..], &listed, still).is_empty();
            let woke = mutator.join().unwrap();
            assert!(woke || seen, "a watched call ended unseen and woke nobody");
        });
    }

    /// A call the collector waits for either is seen to have left by the
    /// wait's first read (`watch`), or wakes the wait as it leaves: never
    /// neither, which would leave the wait to its clock (1 ms, then
    /// doubling). Storing the watch after the fence, or reading it before
    /// the leave's, makes this fail.
    #[test]
    fn a_watched_call_that_leaves_wakes_the_wait_or_is_seen() {
        watched_release_wakes_the_wait_or_is_seen(false, Handshake::leave, |s, seq| {
            s.seq.load(Ordering::Acquire) == seq
        });
    }

    /// The same for a window call that takes back that it began in the
    /// window while the mark's end watches it (`take_back`): the end sees
    /// it taken back, or is woken. Taking the fence out of `take_back`
    /// makes this fail.
    #[test]
    fn a_watched_take_back_wakes_the_wait_or_is_seen() {
        watched_release_wakes_the_wait_or_is_seen(true, Handshake::take_back, |s, seq| {
            s.window_seq.load(Ordering::Acquire) == seq
        });
    }

    /// A call that leaves while nothing waits for it wakes nobody.
    #[test]
    fn an_unwatched_call_wakes_nobody() {
        loom::model(|| {
            let hs = Handshake::default();
            let slot = Slot::default();
            hs.attach(&slot);
            hs.enter(&slot);
            assert!(!hs.leave(&slot));
        });
    }

    /// Two mutators enter and leave while the collector stops the world and
    /// resumes it: while stopped, no mutator is ever inside. (Dropping the
    /// fence in `enter`, or marking an admitted mutator inside after the
    /// gate's mutex is released, makes this fail.)
    #[test]
    fn stopped_world_has_no_mutator_inside() {
        loom::model(|| {
            let hs = Arc::new(Handshake::default());
            let slots = Arc::new([Slot::default(), Slot::default()]);
            hs.attach(&slots[0]);
            hs.attach(&slots[1]);
            // Mutators inside right now, counted by the mutators themselves.
            let running = Arc::new(AtomicUsize::new(0));
            let world_stopped = Arc::new(AtomicBool::new(false));
            let mut threads = Vec::new();
            for i in 0..2 {
                let (hs, slots, running, stopped) = (
                    hs.clone(),
                    slots.clone(),
                    running.clone(),
                    world_stopped.clone(),
                );
                threads.push(loom::thread::spawn(move || {
                    hs.enter(&slots[i]);
                    running.fetch_add(1, Ordering::SeqCst);
                    assert!(
                        !stopped.load(Ordering::SeqCst),
                        "ran while the world was stopped"
                    );
                    running.fetch_sub(1, Ordering::SeqCst);
                    hs.leave(&slots[i]);
                }));
            }
            hs.stop_world(|| vec![&slots[0], &slots[1]]);
            world_stopped.store(true, Ordering::SeqCst);
            assert_eq!(
                running.load(Ordering::SeqCst),
                0,
                "a mutator is inside a stopped world"
            );
            world_stopped.store(false, Ordering::SeqCst);
            hs.resume();
            for t in threads {
                t.join().unwrap();
            }
        });
    }

    /// A mutator inside waits for a second one to enter and leave (a scoped
    /// thread, attached inside the call; or with `waiter_first` a worker
    /// attached before it), while the collector stops the world: the gate
    /// lets the second in (the look's verdict, which thread states cannot
    /// give under loom, is `unknown_verdict`), so everything ends (loom
    /// reports a deadlock otherwise), and the stopped world still has
    /// nobody inside.
    fn a_call_that_waits_for_another_call(waiter_first: bool, unknown_verdict: Verdict) {
        loom::model(move || {
            let hs = Arc::new(Handshake {
                unknown_verdict,
                ..Handshake::default()
            });
            let slots = Arc::new([Slot::default(), Slot::default()]);
            let inner_done = Arc::new(AtomicBool::new(false));
            let world_stopped = Arc::new(AtomicBool::new(false));
            if waiter_first {
                hs.attach(&slots[1]);
            }
            hs.attach(&slots[0]);
            hs.enter(&slots[0]); // the outer call, on this thread
            if !waiter_first {
                // The scoped thread's mutator is made inside the outer call.
                hs.attach(&slots[1]);
            }
            let collector = {
                let (hs, slots, stopped) = (hs.clone(), slots.clone(), world_stopped.clone());
                loom::thread::spawn(move || {
                    hs.stop_world(|| vec![&slots[0], &slots[1]]);
                    stopped.store(true, Ordering::SeqCst);
                    assert!(!slots[0].is_inside());
                    assert!(!slots[1].is_inside());
                    stopped.store(false, Ordering::SeqCst);
                    hs.resume();
                })
            };
            let other = {
                let (hs, slots, done, stopped) = (
                    hs.clone(),
                    slots.clone(),
                    inner_done.clone(),
                    world_stopped.clone(),
                );
                loom::thread::spawn(move || {
                    hs.enter(&slots[1]);
                    assert!(!stopped.load(Ordering::SeqCst), "entered a stopped world");
                    hs.leave(&slots[1]);
                    done.store(true, Ordering::SeqCst);
                })
            };
            // The outer call waits for the other thread before it returns.
            other.join().unwrap();
            assert!(inner_done.load(Ordering::SeqCst));
            hs.leave(&slots[0]);
            collector.join().unwrap();
        });
    }

    #[test]
    fn a_call_that_waits_for_a_scoped_threads_call_does_not_deadlock_a_stop() {
        a_call_that_waits_for_another_call(false, Verdict::Younger);
        a_call_that_waits_for_another_call(false, Verdict::Anyone);
    }

    #[test]
    fn a_call_that_waits_for_an_older_mutators_call_does_not_deadlock_a_stop() {
        a_call_that_waits_for_another_call(true, Verdict::Anyone);
    }

    /// The ragged wait: the collector sets a flag (a mark's `marking`) and
    /// waits for the calls under way, while a mutator makes two calls,
    /// each reading the flag as it begins. Once the wait returns, no call
    /// that read the flag unset is still running: the collector's next
    /// store (tracing begins) is never seen by such a call. (Dropping the
    /// fence in `wait_for_calls`, or watching the slots after it, makes this
    /// fail: the first as a call the wait missed, the second as a lost
    /// wake-up, which loom reports as a deadlock.)
    #[test]
    fn no_call_that_began_before_the_flag_outlives_the_wait() {
        loom::model(|| {
            let hs = Arc::new(Handshake::default());
            let slots = Arc::new([Slot::default()]);
            hs.attach(&slots[0]);
            let flag = Arc::new(AtomicBool::new(false));
            let tracing = Arc::new(AtomicBool::new(false));
            let mutator = {
                let (hs, slots, flag, tracing) =
                    (hs.clone(), slots.clone(), flag.clone(), tracing.clone());
                loom::thread::spawn(move || {
                    for _ in 0..2 {
                        hs.enter(&slots[0]);
                        if !flag.load(Ordering::Relaxed) {
                            assert!(
                                !tracing.load(Ordering::Relaxed),
                                "a call that began before the flag runs while tracing"
                            );
                        }
                        hs.leave(&slots[0]);
                    }
                })
            };
            flag.store(true, Ordering::Relaxed);
            hs.wait_for_calls(&[&slots[0]]);
            tracing.store(true, Ordering::Relaxed);
            mutator.join().unwrap();
        });
    }
}

#[cfg(all(test, not(loom), target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    /// What the call a stop waits for does meanwhile.
    #[derive(Clone, Copy)]
    enum Call {
        /// Blocks on a channel the waiter signals once it is in (as a
        /// call joining it, or waiting for its answer, would).
        Blocks,
        /// Runs until it has seen the waiter in, for 20 ms at most.
        Spins,
        /// Sleeps 200 ms in one sleep (I/O would read the same): long
        /// for the looks, on a busy machine too.
        Sleeps,
    }

    /// A stop waits for a call while a mutator waits at the gate; the
    /// mutator attached after the call began (it could be the call's
    /// scoped thread), or before it (a worker that keeps its `Mutator`)
    /// with `waiter_first`. Returns whether the waiter entered before the
    /// call left. A sleeping call sleeps in one blocking read (no futex,
    /// and no wake-up between the stopping thread's looks, which must see
    /// it asleep and unswitched twice in a row, at doubling gaps) until
    /// the waiter is in: for 10 s at most where the gate should open
    /// (`expected`: on a busy machine the stopping thread may not look for
    /// a while), 200 ms where it should stay shut.
    fn waiter_admitted_before_the_call_left(
        call_does: Call,
        waiter_first: bool,
        expected: bool,
    ) -> bool {
        // An hour's running patience: only a call seen blocked lets the
        // waiter in before the call leaves.
        let hs = Handshake {
            running_patience: Duration::from_secs(3600),
            ..Handshake::default()
        };
        let (call, waiter) = (Slot::default(), Slot::default());
        let (entered, left, stopped) = (
            AtomicBool::new(false),
            AtomicBool::new(false),
            AtomicBool::new(false),
        );
        let mut admitted_early = false;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (attached_tx, attached_rx) = std::sync::mpsc::channel::<()>();
        // Without `waiter_first`, the waiter attaches once the call has
        // begun: younger than the call, whatever the scheduler does.
        let (begun_tx, begun_rx) = std::sync::mpsc::channel::<()>();
        // The sleeping call's read, and the waiter's byte that ends it.
        let (mut nap, mut wake) = std::os::unix::net::UnixStream::pair().unwrap();
        let patience = Duration::from_millis(if expected { 10_000 } else { 200 });
        nap.set_read_timeout(Some(patience)).unwrap();
        std::thread::scope(|s| {
            let (hs, call, waiter) = (&hs, &call, &waiter);
            let (entered, left, stopped) = (&entered, &left, &stopped);
            let w = s.spawn(move || {
                if !waiter_first {
                    begun_rx.recv().unwrap();
                }
                hs.attach(waiter);
                attached_tx.send(()).unwrap();
                while !hs.stop_requested() {
                    std::thread::yield_now();
                }
                hs.enter(waiter);
                let early = !left.load(Ordering::Acquire);
                entered.store(true, Ordering::Release);
                hs.leave(waiter);
                tx.send(()).unwrap();
                let _ = std::io::Write::write_all(&mut wake, &[1]);
                early
            });
            if waiter_first {
                attached_rx.recv().unwrap();
            }
            hs.attach(call);
            assert_eq!(hs.enter(call), None);
            if !waiter_first {
                begun_tx.send(()).unwrap();
                attached_rx.recv().unwrap();
            }
            let c = s.spawn(move || {
                hs.stop_world(|| vec![call, waiter]);
                stopped.store(true, Ordering::Release);
                hs.resume();
            });
            // The call, on this thread.
            while hs.waiting() == 0 {
                std::thread::yield_now();
            }
            match call_does {
                Call::Blocks => {
                    // Ten seconds at most: a waiter never let in fails the
                    // test instead of hanging it.
                    let _ = rx.recv_timeout(Duration::from_secs(10));
                }
                Call::Spins => {
                    let until = Instant::now() + Duration::from_millis(20);
                    while Instant::now() < until && !entered.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                }
                Call::Sleeps => {
                    // Until the waiter's byte, or the patience's end.
                    let _ = std::io::Read::read(&mut nap, &mut [0_u8]);
                }
            }
            left.store(true, Ordering::Release);
            hs.leave(call);
            admitted_early = w.join().unwrap();
            c.join().unwrap();
        });
        assert!(stopped.load(Ordering::Acquire));
        admitted_early
    }

    /// The gate opens for a call whose thread is blocked (it may be
    /// joining the waiter), and stays shut for one whose thread runs,
    /// which is only slow: the waiter is then held until the call has
    /// left, so a stop pending on a slow call lets nobody past pacing or
    /// the heap limit (`thread_state.rs`).
    #[test]
    fn the_gate_opens_for_a_blocked_call_and_not_for_a_running_one() {
        for (call, admitted, what) in [
            (
                Call::Blocks,
                true,
                "a call blocked until the waiter is in would never leave",
            ),
            (
                Call::Spins,
                false,
                "the gate opened while the call it waited for was running",
            ),
            (
                Call::Sleeps,
                true,
                "a call asleep kept a younger waiter out",
            ),
        ] {
            assert_eq!(
                waiter_admitted_before_the_call_left(call, false, admitted),
                admitted,
                "{what}"
            );
        }
    }

    /// A mutator attached before the call began (a worker that keeps its
    /// `Mutator`) is let in when the call waits on another thread, which
    /// may be that worker, and held while the call runs or sleeps, which
    /// end by themselves.
    #[test]
    fn the_gate_opens_to_an_older_mutator_only_for_a_call_waiting_on_another_thread() {
        for (call, admitted, what) in [
            (
                Call::Blocks,
                true,
                "a call blocked until an older waiter is in would never leave",
            ),
            (
                Call::Spins,
                false,
                "the gate opened to an older waiter while the call ran",
            ),
            (
                Call::Sleeps,
                false,
                "the gate opened to an older waiter while the call slept",
            ),
        ] {
            assert_eq!(
                waiter_admitted_before_the_call_left(call, true, admitted),
                admitted,
                "{what}"
            );
        }
    }

    /// This thread's CPU time so far.
    fn thread_cpu() -> Duration {
        // SAFETY: `getrusage` writes the struct it is given, which is
        // ours and large enough, and reads nothing else.
        let usage = unsafe {
            let mut u = std::mem::zeroed::<libc::rusage>();
            libc::getrusage(libc::RUSAGE_THREAD, &mut u);
            u
        };
        let t = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
        t(usage.ru_utime) + t(usage.ru_stime)
    }

    /// A stop waits 300 ms for a call that runs, past a running patience
    /// of 5 ms, while a mutator attached before the call began waits at
    /// the gate: the look's verdict (`Younger`, no younger waiter) changes
    /// nothing, and the stop looks again after a doubling pause, not at
    /// once (it spun on the thread files, the whole 300 ms, when the next
    /// look was due at the patience's end, long past).
    #[test]
    fn a_stop_does_not_spin_while_it_holds_an_older_waiter() {
        let hs = Handshake {
            running_patience: Duration::from_millis(5),
            ..Handshake::default()
        };
        let (call, waiter) = (Slot::default(), Slot::default());
        let left = AtomicBool::new(false);
        let mut cpu = Duration::ZERO;
        std::thread::scope(|s| {
            let (hs, call, waiter, left, cpu) = (&hs, &call, &waiter, &left, &mut cpu);
            hs.attach(waiter);
            hs.attach(call);
            assert_eq!(hs.enter(call), None);
            let w = s.spawn(move || {
                while !hs.stop_requested() {
                    std::thread::yield_now();
                }
                hs.enter(waiter);
                assert!(left.load(Ordering::Acquire), "an older waiter was let in");
                hs.leave(waiter);
            });
            let c = s.spawn(move || {
                let before = thread_cpu();
                hs.stop_world(|| vec![call, waiter]);
                *cpu = thread_cpu() - before;
                hs.resume();
            });
            while hs.waiting() == 0 {
                std::thread::yield_now();
            }
            let until = Instant::now() + Duration::from_millis(300);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            left.store(true, Ordering::Release);
            hs.leave(call);
            w.join().unwrap();
            c.join().unwrap();
        });
        assert!(
            cpu < Duration::from_millis(50),
            "the stop spent {cpu:?} of CPU waiting"
        );
    }

    /// The ragged wait the same way: past its running patience it tells
    /// the younger mutators to stop waiting (the hint), then looks on at a
    /// doubling pause for a call that may yet wait on another thread, not
    /// at once.
    #[test]
    fn a_ragged_wait_does_not_spin_on_a_running_call() {
        let hs = Handshake {
            running_patience: Duration::from_millis(5),
            ..Handshake::default()
        };
        let call = Slot::default();
        let mut cpu = Duration::ZERO;
        let mut hinted = false;
        std::thread::scope(|s| {
            let (hs, call, cpu) = (&hs, &call, &mut cpu);
            hs.attach(call);
            assert_eq!(hs.enter(call), None);
            let c = s.spawn(move || {
                let before = thread_cpu();
                hs.wait_for_calls(&[call]);
                *cpu = thread_cpu() - before;
            });
            // 300 ms at least, and until the hint, for a minute at most:
            // on a busy machine the waiting thread may not run for a while.
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(300)
                || (!hinted && start.elapsed() < Duration::from_secs(60))
            {
                hinted |= hs.stuck();
                std::hint::spin_loop();
            }
            hs.leave(call);
            c.join().unwrap();
        });
        assert!(hinted, "the wait never told the younger mutators to go on");
        assert!(
            cpu < Duration::from_millis(50),
            "the wait spent {cpu:?} of CPU"
        );
    }
}
