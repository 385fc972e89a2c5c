//! The collector: a coordinator thread that runs each cycle, and the GC
//! threads (a `loam-threadpool` pool) that mark and sweep in parallel.
//!
//! A cycle's phases are in `cycle.rs`. The coordinator runs them on
//! demand (the trigger reached, `collect`, the heap limit), then, outside the
//! cycle lock, the `on_cycle` hook.
//!
//! The side bitmaps belong to the heap's pages, which every runtime in the
//! process shares, so one cycle runs at a time process-wide (`CycleState`):
//! a cycle clears marks that another runtime's objects carry too.

use crate::cycle::{cycle, Generations, Snapshot};
use crate::runtime::{release_id, Control, Phase, Shared};
use crate::runtime_count::RuntimeCount;
use loam_threadpool::{ThreadPool, ThreadPoolBuilder};
use parking_lot::{Mutex, MutexGuard};
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The process-wide cycle state, one for each fork generation of the
/// process: the lock that lets one cycle run at a time (module docs), and
/// what other runtimes' cycles read of the one holding it. A child forked
/// while a cycle held the lock has a copy held by a thread it does not
/// have: a runtime built in the child waited on it for ever. The child's
/// first use makes a fresh one (`forked::PerFork`; the parent's runtimes
/// refuse their waits in the child, `forked.rs`, and take no lock).
pub(crate) struct CycleState {
    /// One cycle at a time, process-wide.
    lock: Mutex<()>,
    /// The runtime whose cycle holds `lock` (0: none), set by [`Holder`],
    /// shifted left by one; and in bit 0, whether that cycle is stuck: its
    /// handshake has waited past its patience for a call on a blocked
    /// thread (mirrored from `Handshake::stuck` by [`set_stuck`], for the
    /// holder's handshake only). One word, so that a reader never pairs
    /// one holder with another's verdict. Another runtime's mutators (and
    /// its program waits, `Shared::panic_if_stalled`) read
    /// it as they wait for their own cycle, which cannot begin meanwhile: a
    /// call of the holder's may be waiting for one of them (a scoped
    /// thread attached to the other runtime, which pacing or the heap
    /// limit holds), and they give up their wait as a mutator of the
    /// holder's own would (`Shared::wait_at_gate`). Relaxed: polled.
    holder: AtomicU32,
    /// Cycles waiting for `lock` (`cycle::cycle`): a stop held up by calls
    /// judges them as it judges its own mutators waiting at its gate
    /// (`Handshake::stop_world`).
    queued: AtomicUsize,
    /// The runtime `holder` names, set and cleared with it: another
    /// runtime's program wait, whose cycle waits behind this one, looks at
    /// its calls ([`stuck_holder`]). A leaf lock, held for a downgrade or
    /// an upgrade.
    holder_runtime: Mutex<Weak<Shared>>,
}

static CYCLE: crate::forked::PerFork<CycleState> = crate::forked::PerFork::new(|| CycleState {
    lock: Mutex::new(()),
    holder: AtomicU32::new(0),
    queued: AtomicUsize::new(0),
    holder_runtime: Mutex::new(Weak::new()),
});

/// This process's cycle state (see [`CycleState`]).
pub(crate) fn cycle_state() -> &'static CycleState {
    CYCLE.get()
}

/// Names the runtime whose cycle holds the cycle lock, until dropped (before
/// the lock guard: declare it after).
pub(crate) struct Holder;

impl Holder {
    pub(crate) fn set(shared: &Arc<Shared>) -> Holder {
        let state = cycle_state();
        *state.holder_runtime.lock() = Arc::downgrade(shared);
        state.holder.store(u32::from(shared.id) << 1, Ordering::Relaxed);
        Holder
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let state = cycle_state();
        state.holder.store(0, Ordering::Relaxed);
        *state.holder_runtime.lock() = Weak::new();
    }
}

/// Records whether the cycle of runtime `id` is stuck, if that runtime's
/// cycle holds the cycle lock (any other handshake's verdict, a unit test's
/// or a runtime's between its cycles, changes nothing).
pub(crate) fn set_stuck(id: u16, stuck: bool) {
    // Only the holder's thread writes `holder` (`Holder`, and its cycle's
    // waits here): a load and a store, no race to lose.
    let holder = &cycle_state().holder;
    if id != 0 && holder.load(Ordering::Relaxed) >> 1 == u32::from(id) {
        holder.store((u32::from(id) << 1) | u32::from(stuck), Ordering::Relaxed);
    }
}

/// Takes the cycle lock, counted in `queued` while it waits.
pub(crate) fn lock_cycle() -> MutexGuard<'static, ()> {
    let state = cycle_state();
    state.queued.fetch_add(1, Ordering::Relaxed);
    let g = state.lock.lock();
    state.queued.fetch_sub(1, Ordering::Relaxed);
    g
}

/// Whether another runtime than the caller's exists, whose cycle could
/// queue for the cycle lock (relaxed: a hint).
pub(crate) fn several_runtimes() -> bool {
    crate::runtime::IDS_IN_USE.load(Ordering::Relaxed) > 1
}

/// Whether a cycle waits for the cycle lock (relaxed: polled).
pub(crate) fn cycle_queued() -> bool {
    cycle_state().queued.load(Ordering::Relaxed) != 0
}

/// Another runtime than `id` whose cycle holds the cycle lock and is stuck
/// on its calls ([`other_holder_stuck`]), if there is one.
pub(crate) fn stuck_holder(id: u16) -> Option<Arc<Shared>> {
    if !other_holder_stuck(id) {
        return None;
    }
    let holder = cycle_state().holder_runtime.lock().upgrade()?;
    // The holder may have changed since the word was read: the word, read
    // again, must name this one, stuck.
    let word = cycle_state().holder.load(Ordering::Relaxed);
    (holder.id != id && word >> 1 == u32::from(holder.id) && word & 1 == 1).then_some(holder)
}

/// Whether another runtime than `id` holds the cycle lock with a stuck
/// cycle (see [`CycleState::holder`]).
pub(crate) fn other_holder_stuck(id: u16) -> bool {
    let holder = cycle_state().holder.load(Ordering::Relaxed);
    holder >> 1 != 0 && holder >> 1 != u32::from(id) && holder & 1 == 1
}

/// The runtimes alive whose objects live in loam's pages, counted without
/// the cycle lock (`runtime_count.rs`).
pub(crate) static RUNTIMES: RuntimeCount = RuntimeCount::new();

thread_local! {
    /// The runtime whose GC pool thread this is (0: none). A pool thread
    /// runs user code (`Trace` impls) only inside a cycle,
    /// with the process-wide cycle lock held by its coordinator.
    static GC_THREAD_OF: Cell<u16> = const { Cell::new(0) };
    /// The runtime whose coordinator this is (0: none). A coordinator runs
    /// user code (the `on_cycle` hook) only between cycles, with no lock.
    static COORDINATOR_OF: Cell<u16> = const { Cell::new(0) };
    /// The runtime whose finalizer thread this is (0: none). It runs
    /// destructors, holding no lock a cycle needs.
    static FINALIZER_OF: Cell<u16> = const { Cell::new(0) };
}

/// Whether the calling thread is a GC pool thread or a coordinator of any
/// runtime.
pub(crate) fn on_gc_thread() -> bool {
    GC_THREAD_OF.with(|c| c.get() != 0)
        || COORDINATOR_OF.with(|c| c.get() != 0)
        || FINALIZER_OF.with(|c| c.get() != 0)
}

/// Whether the calling thread is the finalizer of any runtime: waiting
/// there for a runtime's drops or its last cycle may wait for itself, or
/// for another runtime's finalizer that waits for this one (each in a
/// destructor that waits for the other's runtime).
pub(crate) fn is_finalizer() -> bool {
    FINALIZER_OF.with(|c| c.get() != 0)
}

/// Whether the calling thread is a GC pool thread of any runtime: it runs
/// inside a cycle, and anything that waits for a cycle (of any runtime:
/// they take turns under one lock) would wait for itself.
pub(crate) fn in_cycle_thread() -> bool {
    GC_THREAD_OF.with(|c| c.get() != 0)
}

/// Whether the calling thread is the coordinator of any runtime (in its
/// `on_cycle` hook, the only user code it runs): a wait for any runtime's
/// cycle there may wait for itself, through another runtime's hook that
/// waits for this one's.
pub(crate) fn on_coordinator() -> bool {
    COORDINATOR_OF.with(|c| c.get() != 0)
}

/// Whether the calling thread is the coordinator of runtime `id`: waiting
/// for that runtime's next cycle would wait for itself.
pub(crate) fn is_coordinator_of(id: u16) -> bool {
    COORDINATOR_OF.with(|c| c.get() == id)
}

/// Writes one line on stderr, and goes on if stderr is gone. Not
/// `eprintln!`, which panics when it cannot write (a closed pipe: `prog
/// 2>&1 | head`): on the collector's own threads that panic took the
/// collector down, and the mutators then waited for ever for a cycle
/// (`LOAM_GCTRACE=1` piped into `head`).
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Aborts with a `loam:` message: the collector found the heap inconsistent.
#[cold]
pub(crate) fn fatal(msg: &str) -> ! {
    say(format_args!("loam: {msg}"));
    std::process::abort()
}

/// Stops the process if dropped while its thread unwinds: held across a
/// stretch of the collector's work that others wait on without a way out,
/// where a panic (a bug of the collector's: user code is contained where
/// it runs) would otherwise leave them waiting, or spinning, for ever. A
/// GC thread counted in a mark's `active` that panics leaves the others
/// in `mark::idle` until the count falls to zero, which it never does, and
/// the coordinator in the broadcast, so `or_stop` never hears of it.
pub(crate) struct StopIfUnwinding(pub(crate) &'static str);

impl Drop for StopIfUnwinding {
    fn drop(&mut self) {
        if std::thread::panicking() {
            fatal(&format!(
                "{} panicked; stopping the process: the collector would wait for it for ever",
                self.0
            ));
        }
    }
}

/// Runs `body`, the whole work of the collector's thread `thread`; stops
/// the process if it panics. User code the collector runs is contained
/// where it runs (`panics.rs`), so a panic that gets this far comes from
/// the collector itself, whose state (a cycle's phase, the world stopped,
/// marks half set) nothing can then vouch for. Without this the thread
/// ended quietly, and every mutator that waits for a cycle, paced or in
/// `collect`, waited for ever.
fn or_stop(thread: &str, body: impl FnOnce()) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        let msg = crate::panics::dispose(payload);
        fatal(&format!(
            "the collector's thread {thread} panicked ({msg}); stopping the process: \
             its mutators would wait for ever for a cycle"
        ));
    }
}

/// Starts the coordinator thread (which owns the GC threads).
///
/// # Panics
/// If a thread cannot start, after undoing what the start did (the
/// runtime's id and its count in `RUNTIMES`; the finalizer thread, if it
/// started): a program that retries a build under a thread limit leaked
/// one id per try, and `RUNTIMES` stayed counted for good.
pub(crate) fn start(shared: Arc<Shared>) -> JoinHandle<()> {
    /// The end of a runtime's collector, the coordinator's last act, or a
    /// start's that fails on the way (dropped then, with the coordinator's
    /// closure if its thread would not start): the finalizer told to stop
    /// and joined (once it started: its thread names the id, which is
    /// given back only after it), the runtime's count in `RUNTIMES` and
    /// its id given back.
    struct Undo(Arc<Shared>, Option<JoinHandle<()>>);
    impl Undo {
        /// Tells the finalizer to stop once its queue is empty, and waits
        /// for it (once it started).
        fn stop_finalizer(&mut self) {
            self.0.finalizer.close();
            if let Some(finalizer) = self.1.take() {
                let _ = finalizer.join();
            }
        }
    }
    impl Drop for Undo {
        fn drop(&mut self) {
            self.stop_finalizer();
            if self.0.space.alloc_space().is_none() {
                RUNTIMES.end();
            }
            release_id(self.0.id);
        }
    }
    let id = shared.id;
    // Not under the cycle lock (`runtime_count.rs`).
    if shared.space.alloc_space().is_none() {
        RUNTIMES.start();
    }
    let mut undo = Undo(shared.clone(), None);
    let pool = ThreadPoolBuilder::new()
        .num_threads(shared.config.gc_threads)
        .thread_name(move |i| format!("loam-gc-{id}-{i}"))
        // A woken GC thread stays where the kernel put it: a small cycle's
        // phases are bursts of tens of microseconds, shorter than the move
        // (the cycle after a million pushes kept its caller 0.21 ms with
        // the moves and 0.12 without, `docs/perf-log.md`, session 56).
        .spread_on_wake(false)
        // A GC thread parks as soon as it runs out of work, rather than
        // yielding its CPU 32 times first: the mutators want both CPUs of
        // the 2-core VM while the collector's threads go idle after every
        // phase, and each yield of a runnable GC thread was a switch away
        // from a mutator and back (binary-trees depth 16, two threads: 1.8
        // thousand yields in a run of three rounds; `docs/perf-log.md`,
        // "GC threads that park at once").
        .idle_spins(0)
        .start_handler(move |_| {
            GC_THREAD_OF.with(|c| c.set(id));
            crate::panics::install_quiet_hook();
            // For the thread's life: user code runs here only in `Trace`
            // impls the mark calls, and a pool wait there (a `broadcast`
            // into the other GC threads, spinning in the same mark; an
            // `install` into a managed pool whose `mutate` waits for this
            // pause) would wait for the cycle that is waiting for it.
            std::mem::forget(loam_threadpool::forbid_waits(
                "on a GC thread (in a Trace impl the mark ran): the cycle \
                 running it would wait for the wait",
            ));
        })
        .build()
        .expect("loam: could not start the GC threads");
    undo.1 = Some({
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("loam-finalizer-{id}"))
            .spawn(move || {
                FINALIZER_OF.with(|c| c.set(id));
                crate::panics::install_quiet_hook();
                or_stop(&format!("loam-finalizer-{id}"), || {
                    // The sweep queues only this runtime's dead
                    // objects, found by complete marks, held as page runs.
                    // SAFETY: as just said.
                    unsafe { shared.finalizer.run(id, shared.config.verify, &shared.space) }
                });
            })
            .expect("loam: could not start the finalizer thread")
    });
    std::thread::Builder::new()
        .name(format!("loam-gc-{id}"))
        .spawn(move || {
            COORDINATOR_OF.with(|c| c.set(id));
            crate::panics::install_quiet_hook();
            // It looks at the calls it waits for now and then (the gate's
            // clock): out of a program wait's look for a stall.
            let aside = crate::thread_state::aside();
            or_stop(&format!("loam-gc-{id}"), || coordinator(&shared, &pool));
            drop(aside);
            // The hold this runtime's cycles set is lifted with them: the
            // heap's purge delay is the program's again. (The hold is the
            // process's: another runtime still running goes without it
            // until its next cycle sets it anew.)
            loam_heap::hold_freed_memory(Duration::ZERO);
            // The last cycle has swept: the finalizer runs what is left.
            let mut undo = undo;
            undo.stop_finalizer();
            // Every mutator is gone and every destructor has run.
            shared.final_stats.set(shared.current_stats());
            drop(pool);
            drop(undo);
            // The last act: wakes the thread dropping the last handle,
            // which joins this one (`Handle::drop`). (A panic here ends
            // the process: `or_stop`.)
            if let Some(t) = shared.dropper.lock().take() {
                t.unpark();
            }
        })
        .unwrap_or_else(|e| panic!("loam: could not start the collector thread: {e}"))
}

fn coordinator(shared: &Arc<Shared>, pool: &ThreadPool) {
    let mut prev_start: Option<Instant> = None;
    let mut gen = Generations::default();
    // Kept from cycle to cycle, so that a pause neither allocates the
    // snapshot's buffers nor faults them in (at hundreds of pages that was
    // milliseconds of a pause; figures in docs/perf-log.md).
    let mut snap = Snapshot::default();
    loop {
        // After each cycle (outside the control lock, and after the cycle
        // counts as complete for whoever waits for it): what the heap's
        // caches hold past their time goes back to the OS, and the rest
        // when it is due, unless a thread takes it first.
        let due = loam_heap::trim();
        let (forced, large, last) = {
            let mut c = shared.control.lock();
            trim_within(&mut c, due);
            while !c.requested && !c.shutdown {
                match c.trim_at {
                    None => shared.control_cv.wait(&mut c),
                    Some(at) if Instant::now() < at => {
                        shared.control_cv.wait_until(&mut c, at);
                    }
                    Some(_) => {
                        // Cleared first: a thread that caches memory while
                        // this trims sets it again.
                        c.trim_at = None;
                        let due = MutexGuard::unlocked(&mut c, loam_heap::trim);
                        trim_within(&mut c, due);
                    }
                }
            }
            let (forced, large) = (c.forced, c.large);
            c.requested = false;
            c.forced = false;
            c.large = false;
            c.phase = Phase::Stop;
            (forced, large, c.shutdown)
        };
        // The last cycle runs with no handle left: nothing is rooted, so it
        // frees every object of this runtime (the finalizer runs what it
        // holds before the runtime is gone, `start`).
        let start = Instant::now();
        if let Some(prev) = prev_start.replace(start) {
            hold_freed_memory(start - prev);
        }
        #[cfg(all(test, not(loom), unix))]
        if tests::PANIC_IN_NEXT_CYCLE.swap(false, Ordering::Relaxed) {
            panic!("a test's panic in the collector");
        }
        let (mut event, panic_lines) = cycle(shared, pool, forced || last, &mut gen, &mut snap);
        event.large_objects = large && !forced && !last;
        {
            // Swept: a call that waits for this cycle's sweep (or for
            // this ragged cycle) at the heap limit may go on, before the
            // report and the hook (user code, which might want what that
            // call holds, and stderr, which may block).
            let mut c = shared.control.lock();
            c.ragged_epoch = 0;
            c.phase = Phase::Report;
            shared.control_cv_notify(c);
        }
        // Here, with no lock held: stderr may block (a pipe nobody reads),
        // and the cycle lock held meanwhile would stop every runtime's
        // cycles, not only this one's.
        for line in panic_lines {
            say(format_args!("{line}"));
        }
        if shared.config.trace {
            say(format_args!("{event}"));
        }
        // After the cycle released the cycle lock, before it counts as
        // complete (so that whoever waited for it sees its event): a hook
        // may panic without stopping this one. It may not wait for any
        // runtime's cycle (`Shared::refuse_waits`): two runtimes whose
        // hooks collected each other waited for each other for ever, each
        // in its report until its hook returned. Nor for a pool (a
        // `ManagedPool`'s task paces, and pacing may wait for this very
        // cycle to count as complete; dropping a pool joins its workers):
        // pool waits panic in it, as inside `mutate`.
        if let Some(hook) = &shared.hook {
            let _no_waits = loam_threadpool::forbid_waits(
                "in an on_cycle hook (its cycle counts as complete only once it returns, and a pool's \
                 task may wait for that); hand pool work to a thread of your own",
            );
            if let Err(msg) = crate::panics::contain(|| hook(&event)) {
                shared.stats.lock().user_panics += 1;
                say(format_args!(
                    "loam: cycle {}: the on_cycle hook panicked (the collector goes on): {msg}",
                    event.cycle
                ));
            }
        }
        let mut c = shared.control.lock();
        c.phase = Phase::Idle;
        c.completed += 1;
        if last {
            c.shutdown = true;
        }
        shared.control_cv_notify(c);
        if last {
            return;
        }
    }
}

/// Makes the coordinator give back what loam's heap caches once `due`
/// has passed (`loam_heap::trim`'s answer: none if nothing is cached),
/// or sooner if an earlier deadline is set (`Control::trim_at`). Returns
/// whether the deadline moved.
pub(crate) fn trim_within(c: &mut Control, due: Option<Duration>) -> bool {
    let Some(due) = due else { return false };
    // At least a millisecond: what is due has just been given back, so
    // the next is at least that far off, but clocks round.
    // A purge delay too long to add to a clock: no deadline at all.
    let Some(at) = Instant::now().checked_add(due.max(Duration::from_millis(1))) else {
        return false;
    };
    if c.trim_at.is_some_and(|t| t <= at) {
        return false;
    }
    c.trim_at = Some(at);
    true
}

/// Asks the heap to keep what a sweep frees resident until the mutators
/// reuse it: ten times the interval between cycles, up to a second. The
/// heap's purge delay (10 ms by default) is shorter than a cycle interval,
/// so without this the pages a sweep frees are given back and faulted in
/// again by the next allocations; and a program's memory often comes back
/// a phase later, several cycles on (a round of binary-trees reuses what
/// the last one's trees freed), which twice the interval did not cover
/// (docs/perf-log.md, "The hold on freed memory: ten cycle intervals").
/// With several runtimes, the one that collected last sets it; a runtime's
/// end lifts it.
fn hold_freed_memory(interval: Duration) {
    loam_heap::hold_freed_memory((interval * 10).min(Duration::from_secs(1)));
}

#[cfg(all(test, not(loom), unix))]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc::channel;

    /// Makes the next coordinator to begin a cycle panic there, as a bug
    /// of the collector's would. Set only in a child process of its own:
    /// every runtime of the process would meet it.
    pub(super) static PANIC_IN_NEXT_CYCLE: AtomicBool = AtomicBool::new(false);
    /// Makes the next GC thread to begin marking panic there (as above).
    pub(crate) static PANIC_IN_NEXT_MARK: AtomicBool = AtomicBool::new(false);

    const CHILD: &str = "LOAM_COLLECTOR_PANIC_CHILD";

    /// In a child process (this test binary, running test `name` alone
    /// with `CHILD` set): a runtime with two GC threads whose next forced
    /// cycle meets `flag`.
    fn child_collects_after(flag: &AtomicBool) {
        let rt = crate::Runtime::builder()
            .gc_threads(2)
            .concurrent_gc_threads(2)
            .ignore_env()
            .build();
        let mut m = rt.attach();
        type Kept = dyn for<'gc> crate::Rootable<'gc, Root = [crate::Gc<'gc, u64>]>;
        let _keep: crate::Root<Kept> =
            m.mutate(|mc| mc.root(mc.alloc_from_iter((0..1_000_000_u64).map(|i| mc.alloc(i)))));
        flag.store(true, Ordering::Relaxed);
        // A forced cycle's last try at its mark's end traces to the end
        // with every GC thread and no deadline.
        for _ in 0..10 {
            m.collect();
        }
        unreachable!("ten cycles ran, the flag's panic in none of them stopped the process");
    }

    /// A panic of the collector's own (not of user code it runs) stops
    /// the process with a message naming the thread and the panic. Before,
    /// the coordinator ended quietly and the `collect` below waited for
    /// ever.
    #[test]
    fn a_panic_of_the_collector_stops_the_process_with_a_message() {
        if std::env::var_os(CHILD).is_some() {
            child_collects_after(&PANIC_IN_NEXT_CYCLE);
        }
        let stderr = child_stops("collector::tests::a_panic_of_the_collector_stops_the_process_with_a_message");
        assert!(
            stderr.contains("loam: the collector's thread loam-gc-")
                && stderr.contains("panicked (a test's panic in the collector)"),
            "stderr:\n{stderr}"
        );
    }

    /// The same on a GC thread in a mark: the others waited in `mark::idle`
    /// for its count to fall, spinning for ever, and the coordinator in
    /// the broadcast, so the panic never reached `or_stop`.
    #[test]
    fn a_panic_in_a_gc_threads_mark_stops_the_process_with_a_message() {
        if std::env::var_os(CHILD).is_some() {
            child_collects_after(&PANIC_IN_NEXT_MARK);
        }
        let stderr = child_stops("collector::tests::a_panic_in_a_gc_threads_mark_stops_the_process_with_a_message");
        assert!(
            stderr.contains("loam: a GC thread's mark panicked") && stderr.contains("a test's panic in a GC thread's mark"),
            "stderr:\n{stderr}"
        );
    }

    /// Runs test `name` of this binary in a child process with `CHILD`
    /// set, and returns its stderr once it has stopped on `SIGABRT`; fails
    /// if it ends otherwise, or is still running after two minutes.
    fn child_stops(name: &str) -> String {
        let child = Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let Ok(out) = rx.recv_timeout(Duration::from_secs(120)) else {
            // `kill` takes no pointers. The child's waiter has not
            // seen it end, so `pid` is still its, unless it ended in this
            // very instant (then the signal finds no such process, or, in a
            // test, a reused pid: no memory is at stake either way).
            // SAFETY: as just said.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the child hung: the collector's panic left its mutator waiting");
        };
        let out = out.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "stderr:\n{stderr}");
        stderr
    }
}
