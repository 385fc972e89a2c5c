//! loam-threadpool: the work-stealing pool whose workers are the runtime's
//! mutators.
//!
//! A fixed set of worker threads, each with its own LIFO deque
//! (crossbeam-deque), a global injector for work arriving from outside, and
//! random-victim stealing. The API follows rayon-core: [`join()`], [`scope()`],
//! [`spawn()`], [`broadcast()`], [`ThreadPool::install`], [`current_thread_index`],
//! built by a [`ThreadPoolBuilder`]. Idle workers park (no spinning once
//! parked); the runtime hooks in between top-level tasks (its safepoint) and
//! around every park (a parked worker is a blocked mutator).
//!
//! # Glossary
//!
//! - [`ThreadPool`]: the owning handle; dropping it finishes queued work and
//!   joins the workers.
//! - `Registry` (`registry.rs`): what the workers share: stealers, the
//!   `Injector`, per-worker broadcast inboxes, `Sleep`, hooks.
//! - `WorkerThread` (`worker.rs`): one worker's deque (`Worker`), its index,
//!   the scheduling loop, `wait_until(latch)`.
//! - `JobRef`, `StackJob` (`job.rs`): the type-erased job in the queues; a
//!   job on its waiter's stack. A spawned job is its closure, carried inside
//!   the `JobRef` when it is at most two words, else boxed.
//! - Latches (`latch.rs`): `CoreLatch` (the state machine a worker parks on),
//!   `SpinLatch` (a join's second half), `CountLatch` (scopes, broadcasts),
//!   `CrossLatch` (a worker waiting on another pool), `LockLatch` (a thread
//!   outside any pool blocks on it).
//! - `Sleep` (`sleep.rs`): the sleeper count and per-worker park spots; a
//!   job injected from outside wakes two parked workers, one for its first
//!   fork (`Sleep::notify_injected`).
//! - `Spread` (`spread.rs`): the CPU of each awake worker; one woken onto
//!   another's CPU moves itself to a free one (Linux), so that a burst
//!   after an idle spell does not run on one core.
//!
//! # Fast path: `join(a, b)` on a worker
//!
//! 1. Put `b` in a `StackJob` on this stack and push it onto the own deque
//!    (`Sleep::notify_new_work`: a fence and one load; wakes a parked peer
//!    only if there is one).
//! 2. Run `a` (catching a panic).
//! 3. Pop the own deque: if `b` comes back, call it inline. Done: no lock,
//!    no allocation, no system call.
//!
//! # Slow path: `b` was stolen, or the caller is not a worker
//!
//! 1. A thief ran `b`, stored its result and set its latch.
//! 2. Meanwhile the waiter runs other jobs (own deque, inbox, a random peer,
//!    the injector; a peer whose deque holds 64 jobs or more, as a spawn loop
//!    leaves it, is robbed in a batch); after `idle_spins` fruitless rounds
//!    (32 by default, `ThreadPoolBuilder::idle_spins`) it parks on the
//!    latch, and the thief's `set` wakes it.
//! 3. From outside the pool (`install`, or `join`/`scope` with no current
//!    pool), the call is wrapped in a `StackJob`, injected, and the thread
//!    blocks on a thread-local `LockLatch`. From a worker of another pool, the
//!    job carries a `CrossLatch` instead and the worker keeps running its own
//!    pool's jobs while it waits, so pools may call into each other.
//!
//! # Who owns what across threads
//!
//! - A worker's deque is pushed and popped by its owner only; others steal.
//! - A `StackJob` lives on its waiter's stack; the executor writes its result,
//!   then sets its latch, then never touches it again; the waiter reads the
//!   result only after the latch.
//! - A spawned job's `JobRef` owns its closure (inline or boxed); running it
//!   consumes it. Scope jobs borrow the `Scope`, which waits (a `CountLatch`)
//!   until every job has finished.
//! - The `Registry` is shared through `Arc` by the handle and every worker, so
//!   it outlives any job a worker runs. `ThreadPool` alone owns the
//!   `JoinHandle`s.
//! - User closures never run under a lock of this crate.
//!
//! # Invariants
//!
//! Stated as `# Invariants` on `Registry`, `WorkerThread`, `JobRef`,
//! `StackJob`, `CoreLatch`, `CountLatch`, `Sleep` and `Scope`; checked by
//! `debug_assert!`s at the counters and by `assert_valid` (`Registry`,
//! `Sleep`), which aborts with a `pool:` message. Every atomic's doc names its
//! writers, readers and ordering; all atomics and locks come from `sync.rs`,
//! so the loom models (`RUSTFLAGS="--cfg loom" cargo test --release -p
//! loam-threadpool`) check the real sleep and latch code: no lost wake-up with
//! one pusher and one sleeper (the model fails if either fence is removed), a
//! private inbox push wakes its target, shutdown wakes every sleeper, a latch
//! always wakes its parked owner, a count latch fires exactly once. Under
//! `--cfg loom` only those primitives are compiled (and the doctests, wrapped
//! in a hidden `doctest!` macro, compile to nothing).
//!
//! # References
//!
//! rayon-core (`registry.rs`, `job.rs`, `latch.rs`, `sleep/`): the API, the
//! work-first `join` and the latch states are modelled on it; the sleep
//! protocol here is simpler (a sleeper count with a `SeqCst` fence handshake
//! instead of rayon's jobs-event counter) and also covers local pushes.
//! crossbeam-deque (Chase–Lev deques, the injector). Blumofe & Leiserson,
//! "Scheduling multithreaded computations by work stealing" (1999).

#![cfg_attr(loom, allow(dead_code, unused_imports))]

/// Writes one line on stderr, and goes on if stderr is gone. Not
/// `eprintln!`, which panics when it cannot write (a closed pipe): a
/// report of a spawned task's panic then panicked again on the worker, out
/// of the job that was to keep the pool serving. (Here, not in `unwind`,
/// so that loom builds, which leave `unwind` out, have it too.)
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

mod exit;
mod latch;
mod no_wait;
mod sleep;
mod sync;
#[cfg(not(loom))]
mod unwind;

#[cfg(not(loom))]
mod broadcast;
#[cfg(not(loom))]
mod builder;
#[cfg(not(loom))]
mod forked;

/// Not public API: the fork count the runtime's collector reads too
/// (`forked.rs`).
#[cfg(not(loom))]
#[doc(hidden)]
pub mod __fork {
    pub use crate::forked::{current, generation, since};
}
#[cfg(not(loom))]
mod job;
#[cfg(not(loom))]
mod join;
#[cfg(not(loom))]
mod pool;
#[cfg(not(loom))]
mod registry;
#[cfg(not(loom))]
mod scope;
#[cfg(not(loom))]
mod spawn;
#[cfg(not(loom))]
mod spread;
#[cfg(not(loom))]
mod worker;

#[cfg(not(loom))]
pub use crate::{
    broadcast::{broadcast, BroadcastContext},
    builder::{ThreadPoolBuildError, ThreadPoolBuildErrorKind, ThreadPoolBuilder},
    join::join,
    no_wait::{forbid_waits, WaitsForbidden},
    pool::ThreadPool,
    scope::{scope, Scope},
    spawn::spawn,
};

/// The CPU the current thread runs on, as the OS last placed it, or
/// `None` where it cannot tell (other systems than Linux, Miri, or a
/// failed `sched_getcpu`). A hint: the
/// thread may move at any moment. The runtime reads it to learn whether
/// a thread it waits for shares its CPU.
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// let cpu = loam_threadpool::current_cpu();
/// if cfg!(target_os = "linux") {
///     assert!(cpu.is_some());
/// }
/// # }
/// ```
#[cfg(not(loom))]
pub fn current_cpu() -> Option<usize> {
    spread::current_cpu()
}

/// The index of the current thread in its pool (`0..num_threads`), or `None`
/// if it is not a worker of any pool.
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// assert_eq!(loam_threadpool::current_thread_index(), None);
/// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// let index = pool.install(loam_threadpool::current_thread_index);
/// assert!(matches!(index, Some(0 | 1)));
/// # }
/// ```
#[cfg(not(loom))]
pub fn current_thread_index() -> Option<usize> {
    let worker = worker::WorkerThread::current();
    // SAFETY: non-null `WORKER_THREAD` is this thread's live worker.
    (!worker.is_null()).then(|| unsafe { &*worker }.index())
}

/// The number of workers of the current pool, or of the global pool outside
/// any pool (starting it if needed).
///
/// # Panics
///
/// If the global pool has to be started and its threads cannot be.
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
/// assert_eq!(pool.install(loam_threadpool::current_num_threads), 3);
/// # }
/// ```
#[cfg(not(loom))]
pub fn current_num_threads() -> usize {
    registry::with_current_registry(|registry| registry.num_threads())
}

/// Wraps this crate's doctests: expands to its input normally and to nothing
/// under `--cfg loom`, where the pool itself is compiled out (rustdoc cannot
/// see that cfg, so the doctests cannot test for it themselves).
#[doc(hidden)]
#[macro_export]
#[cfg(not(loom))]
macro_rules! doctest {
    ($($body:tt)*) => { $($body)* };
}

/// Under `--cfg loom`: the doctests compile to nothing.
#[doc(hidden)]
#[macro_export]
#[cfg(loom)]
macro_rules! doctest {
    ($($body:tt)*) => {};
}
