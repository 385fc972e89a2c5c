//! The managed pool: a `loam-threadpool` pool whose workers are mutators of
//! one runtime ([`ManagedPool`]), and the fork-join calls a task makes with
//! its worker's [`Mutator`] ([`join`], [`scope`], [`spawn`], [`with_mutator`]).
//!
//! # One mutator per worker, lent down the stack
//! Each worker attaches when it starts (the pool's start hook) and keeps its
//! `Mutator` in a thread-local for its whole life; the exit hook detaches
//! it. A task borrows it for its run: [`with_mutator`] takes the pointer out
//! of the thread-local (leaving null) and puts it back when the task returns
//! or unwinds, so at most one `&mut Mutator` of a worker exists at a time.
//!
//! A task that forks must not keep that borrow while its worker waits: the
//! waiting worker runs other tasks (a join's stolen half coming back, a
//! scope's jobs, a broadcast's share), and each needs the mutator. So the
//! waiting calls take the task's `&mut Mutator` as an argument and *lend* it:
//! [`join`] runs its first half with it, then puts (a reborrow of) it back in
//! the thread-local for the tasks the worker runs while it waits, and takes
//! it out again before returning. The lending follows the stack: every task
//! run while waiting returns before the wait ends, so the reborrow is never
//! used after the caller's borrow resumes. Any other wait while a task holds
//! the mutator is refused at the wait ([`loam_threadpool::forbid_waits`]):
//! left to happen, it made whichever task the worker ran meanwhile panic in
//! its stead.
//!
//! # Waiting inside `mutate`
//! A worker inside `mutate` holds `Gc` pointers the collector cannot see, so
//! a stop-the-world pause waits for it to return. If it waited there for a
//! job that another worker runs, and that worker waited at `mutate`'s entry
//! for the pause, neither would move. The borrow checker rules out the
//! managed calls (they need the `&mut Mutator` that `mutate` holds), and
//! `mutate` forbids every other pool wait on its thread
//! ([`loam_threadpool::forbid_waits`]): fork between `mutate` calls, never
//! inside one.
//!
//! # Collections never wait for idle workers
//! A worker outside `mutate` is blocked by construction (it holds no
//! unrooted pointer), so a parked worker, or one running a task between its
//! `mutate` calls, never holds a collection up: there is no safepoint to
//! reach. Objects a worker allocated go back to its heap when the GC threads
//! free them (page runs it takes back at its next `mutate`); a worker that
//! exits leaves its pages for another thread to adopt.

use crate::mutator::Mutator;
use crate::runtime::Runtime;
use loam_threadpool::{BroadcastContext, Scope, ThreadPool, ThreadPoolBuildError, ThreadPoolBuilder};
use loam_threadpool::WaitsForbidden;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::ptr;

thread_local! {
    /// This worker's own mutator (a leaked `Box`, freed by the exit hook);
    /// null on threads that are no managed pool's workers.
    static OWN: Cell<*mut Mutator> = const { Cell::new(ptr::null_mut()) };
    /// `OWN` while no task on this thread is using it; null while one is.
    static AVAILABLE: Cell<*mut Mutator> = const { Cell::new(ptr::null_mut()) };
    /// A ban on pool waits for each task on this worker's stack that holds
    /// its mutator, innermost last ([`hold`]); its capacity is kept, so it
    /// allocates only as the deepest nesting grows.
    static BANS: RefCell<Vec<WaitsForbidden>> = const { RefCell::new(Vec::new()) };
}

/// Why a task that holds its worker's mutator may not wait on a pool.
const BANNED: &str = "a managed task holds its worker's Mutator, and the tasks the worker \
     would run while it waited need it: wait through loam_runtime::join or \
     loam_runtime::scope with the task's &mut Mutator (they lend it), or fork \
     from ManagedPool::install_plain";

/// A task takes the worker's mutator: from now until [`release`], waiting
/// on a pool (the plain `loam-threadpool` calls included) is refused at
/// the wait. A worker that waited would run other tasks meanwhile, and
/// those that need the mutator found it held and panicked in its stead
/// (tasks of other callers, a `spawn` that then never ran).
fn hold() {
    BANS.with(|b| b.borrow_mut().push(loam_threadpool::forbid_waits(BANNED)));
}

/// The innermost holding task lets the mutator go (its end, or [`lend`]).
fn release() {
    BANS.with(|b| drop(b.borrow_mut().pop()));
}

/// A raw mutator pointer carried into a closure that runs on the thread it
/// came from (the first half of a join, a scope's body).
struct OnThisThread(*mut Mutator);

// SAFETY: only ever dereferenced on the thread that made it: `join` and
// `scope` call their closure inline on the calling worker (the pool runs a
// join's first half and a scope's body on the caller), and they check that
// the caller is a worker first.
unsafe impl Send for OnThisThread {}

/// Puts the mutator back in `AVAILABLE` when a task's borrow ends (its
/// return or its unwinding), or, in a lending call, when the part that runs
/// with it ends and the wait begins; its wait ban goes with it.
struct PutBack(*mut Mutator);

impl Drop for PutBack {
    fn drop(&mut self) {
        release();
        AVAILABLE.with(|a| a.set(self.0));
    }
}

/// Takes the lent mutator back out of `AVAILABLE` when a lending call
/// returns or unwinds: from then on the caller's borrow is the only one,
/// and its wait ban is back (the lending call lifted it for its own wait,
/// [`Lending::begin`]).
struct TakeBack(*mut Mutator);

impl Drop for TakeBack {
    fn drop(&mut self) {
        let was = AVAILABLE.with(|a| a.replace(ptr::null_mut()));
        // Null if the lending never began (a panic before the first half
        // ended); otherwise every task run meanwhile has put it back.
        debug_assert!(was.is_null() || was == self.0, "loam: a lent mutator did not come back");
        hold();
    }
}

/// A lending call's ban: lifted for the call's own wait (the pool checks
/// at the call's entry), held again while the part that runs with the
/// mutator runs (a join's first half, a scope's body: their own waits
/// are refused), lifted as it lends the mutator, back when the call ends.
struct Lending;

impl Lending {
    /// At the call's entry: the caller's ban lifted until the returned
    /// guard drops.
    fn begin(m: *mut Mutator) -> TakeBack {
        release();
        TakeBack(m)
    }

    /// At the start of the part that runs with the mutator: its ban, until
    /// the returned guard drops and lends the mutator.
    fn run_with(m: *mut Mutator) -> PutBack {
        hold();
        PutBack(m)
    }
}

const HELD: &str = "loam: this worker's Mutator is held by a task further up its stack: \
     a task that waits (join, scope, broadcast, install) must lend it, through \
     loam_runtime::join / loam_runtime::scope with the task's &mut Mutator";

/// Runs `f` with the current worker's mutator, borrowed for the call.
///
/// This is how a task started through the plain `loam-threadpool` API
/// (`loam_threadpool::join`, `spawn`, ...) on a managed pool's worker gets
/// at its mutator; the managed calls ([`ManagedPool::spawn`], [`join`], ...)
/// do it for you.
///
/// While `f` runs, a pool call on this thread that would wait (the plain
/// `join`, `scope`, `broadcast`, `install`, of any pool) panics: the
/// worker would run other tasks meanwhile, and those need the mutator `f`
/// holds. Fork with [`join`] or [`scope`], which lend it.
///
/// # Panics
/// Off a managed pool's worker; or if a task further up this worker's
/// stack holds the mutator.
///
/// # Examples
/// ```
/// use loam_runtime::{ManagedPool, Runtime};
///
/// let rt = Runtime::new();
/// let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
/// let (a, b) = pool.install_plain(|| {
///     loam_threadpool::join(
///         || loam_runtime::with_mutator(|m| m.mutate(|mc| *mc.alloc(1_u32))),
///         || loam_runtime::with_mutator(|m| m.mutate(|mc| *mc.alloc(2_u32))),
///     )
/// });
/// assert_eq!(a + b, 3);
/// ```
pub fn with_mutator<R>(f: impl FnOnce(&mut Mutator) -> R) -> R {
    let p = AVAILABLE.with(|a| a.replace(ptr::null_mut()));
    if p.is_null() {
        if OWN.with(Cell::get).is_null() {
            panic!("loam: with_mutator outside a managed pool's worker (use ManagedPool::install)");
        }
        panic!("{HELD}");
    }
    hold();
    let _back = PutBack(p);
    // Taken out of `AVAILABLE`, it is borrowed only here until `_back` puts
    // it back: a nested `with_mutator` finds null, and the lending calls
    // lend only a reborrow of this one and take it back before returning.
    // SAFETY: `p` is this thread's own mutator (`OWN`), alive until the
    // exit hook (after every task), and borrowed only here (above).
    f(unsafe { &mut *p })
}

/// Whether `m` is the current thread's worker mutator.
fn is_own(m: &Mutator) -> bool {
    ptr::eq(OWN.with(Cell::get), m)
}

#[track_caller]
fn assert_own(m: &Mutator, call: &str) {
    assert!(
        is_own(m),
        "loam: {call} takes the current managed worker's Mutator (the one its task was \
         given); from outside a managed pool use ManagedPool::{call}"
    );
}

/// Panics if this thread is a managed worker whose mutator is held: a call
/// that waits here could not lend it to the tasks the worker runs meanwhile.
#[track_caller]
fn assert_not_held(call: &str) {
    let own = OWN.with(Cell::get);
    if !own.is_null() && AVAILABLE.with(Cell::get).is_null() {
        panic!("loam: ManagedPool::{call} from a managed task whose worker's Mutator is in use. {HELD}");
    }
}

/// Runs `a` and `b`, potentially in parallel, each with the mutator of the
/// worker that runs it; returns both results. `m` is the calling task's
/// mutator: `a` runs with it on this worker, and while this worker waits
/// for a stolen `b` it lends `m` to the tasks it runs meanwhile.
///
/// Call it between `mutate` calls: the borrow checker keeps it out of
/// them. A panic in either half is resumed here after both are done.
///
/// # Panics
/// If `m` is not the current managed worker's mutator (call
/// [`ManagedPool::join`] from outside a pool).
///
/// # Examples
/// Fibonacci numbers, each leaf allocated on whichever worker ran it:
/// ```
/// use loam_runtime::{ManagedPool, Mutator, Runtime};
///
/// fn fib(m: &mut Mutator, n: u64) -> u64 {
///     if n < 10 {
///         return m.mutate(|mc| *mc.alloc(seq(n)));
///     }
///     let (a, b) = loam_runtime::join(m, |m| fib(m, n - 1), |m| fib(m, n - 2));
///     a + b
/// }
/// fn seq(n: u64) -> u64 {
///     if n < 2 { n } else { seq(n - 1) + seq(n - 2) }
/// }
///
/// let rt = Runtime::new();
/// let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
/// assert_eq!(pool.install(|m| fib(m, 25)), 75_025);
/// ```
pub fn join<A, B, RA, RB>(m: &mut Mutator, a: A, b: B) -> (RA, RB)
where
    A: FnOnce(&mut Mutator) -> RA + Send,
    B: FnOnce(&mut Mutator) -> RB + Send,
    RA: Send,
    RB: Send,
{
    assert_own(m, "join");
    let mine = OnThisThread(m);
    let _take_back = Lending::begin(mine.0);
    loam_threadpool::join(
        move || {
            let mine = mine;
            let _lend = Lending::run_with(mine.0);
            // SAFETY: the pool runs a join's first half inline on the
            // caller (a worker, checked above), so this is the caller's
            // reborrow of `m`, used while the caller is suspended in this
            // call; `_lend` lends it to the tasks this worker runs after.
            a(unsafe { &mut *mine.0 })
        },
        || with_mutator(b),
    )
}

/// Runs `op` with a scope in which tasks may be spawned that borrow from
/// the caller's stack; returns when all of them are done. `op` runs on this
/// worker with `m`; while the scope then waits, `m` is lent to the tasks
/// this worker runs. A panic in any task is resumed here.
///
/// # Panics
/// If `m` is not the current managed worker's mutator (call
/// [`ManagedPool::scope`] from outside a pool).
///
/// # Examples
/// ```
/// use loam_runtime::{ManagedPool, Runtime};
///
/// let rt = Runtime::new();
/// let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
/// let mut sums = [0_u64; 4];
/// pool.install(|m| {
///     loam_runtime::scope(m, |s, _m| {
///         for (i, sum) in sums.iter_mut().enumerate() {
///             s.spawn(move |_, m| *sum = m.mutate(|mc| *mc.alloc(i as u64 * 10)));
///         }
///     })
/// });
/// assert_eq!(sums, [0, 10, 20, 30]);
/// ```
pub fn scope<'scope, OP, R>(m: &mut Mutator, op: OP) -> R
where
    OP: FnOnce(&ManagedScope<'scope>, &mut Mutator) -> R + Send,
    R: Send,
{
    assert_own(m, "scope");
    let mine = OnThisThread(m);
    let _take_back = Lending::begin(mine.0);
    loam_threadpool::scope(move |s| {
        let mine = mine;
        let _lend = Lending::run_with(mine.0);
        // SAFETY: as in `join`: the pool runs a scope's body inline on its
        // caller, a worker (checked above); `_lend` lends the reborrow
        // while the scope waits for its tasks.
        op(ManagedScope::wrap(s), unsafe { &mut *mine.0 })
    })
}

/// Spawns a `'static` task on the current managed pool; it runs with the
/// mutator of the worker that takes it. Returns at once. A panic in the
/// task goes to the pool's panic handler; the pool keeps running.
///
/// # Panics
/// Off a managed pool's worker (use [`ManagedPool::spawn`]).
///
/// # Examples
/// ```
/// use loam_runtime::{ManagedPool, Runtime};
/// use std::sync::mpsc;
///
/// let rt = Runtime::new();
/// let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
/// let (tx, rx) = mpsc::channel();
/// pool.spawn(move |_m| {
///     loam_runtime::spawn(move |m| tx.send(m.mutate(|mc| *mc.alloc(5_u8))).unwrap());
/// });
/// assert_eq!(rx.recv().unwrap(), 5);
/// ```
pub fn spawn<F>(f: F)
where
    F: FnOnce(&mut Mutator) + Send + 'static,
{
    assert!(
        !OWN.with(Cell::get).is_null(),
        "loam: loam_runtime::spawn outside a managed pool's worker (use ManagedPool::spawn)"
    );
    loam_threadpool::spawn(move || with_mutator(f));
}

/// A scope of [`scope`] or [`ManagedPool::scope`]: spawns tasks that may
/// borrow from the stack around it, each run with its worker's mutator.
#[repr(transparent)]
pub struct ManagedScope<'scope> {
    inner: Scope<'scope>,
}

impl<'scope> ManagedScope<'scope> {
    fn wrap<'a>(inner: &'a Scope<'scope>) -> &'a ManagedScope<'scope> {
        // SAFETY: `ManagedScope` is a `repr(transparent)` wrapper of
        // `Scope`, so the two references have the same layout and validity.
        unsafe { &*(inner as *const Scope<'scope> as *const ManagedScope<'scope>) }
    }

    /// Spawns `body` into the scope; the scope waits for it. It runs with
    /// the scope and the mutator of the worker that takes it.
    pub fn spawn<BODY>(&self, body: BODY)
    where
        BODY: FnOnce(&ManagedScope<'scope>, &mut Mutator) + Send + 'scope,
    {
        self.inner
            .spawn(move |s| with_mutator(|m| body(ManagedScope::wrap(s), m)));
    }
}

impl fmt::Debug for ManagedScope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedScope").finish_non_exhaustive()
    }
}

/// A work-stealing pool whose workers are mutators of one [`Runtime`]: the
/// seeds' framework, whose worker threads allocate managed objects while
/// the collector's threads free them.
///
/// Each worker attaches when it starts and detaches when it exits; a task
/// gets its worker's `&mut Mutator`. The entry points follow rayon's:
/// [`install`](Self::install), [`spawn`](Self::spawn),
/// [`scope`](Self::scope), [`join`](Self::join),
/// [`broadcast`](Self::broadcast); inside a task fork with
/// [`loam_runtime::join`](join) and [`loam_runtime::scope`](scope), which
/// lend the task's mutator while its worker waits. Parked workers and
/// workers between `mutate` calls never hold a collection up. Dropping the
/// pool finishes queued tasks and joins the workers (inside a `mutate`
/// call it does not wait for them: they may be waiting for a pause that
/// waits for that call; nor on a worker of any pool, as
/// [`ThreadPool`](loam_threadpool::ThreadPool)'s drop).
///
/// # Examples
/// ```
/// use loam_runtime::{ManagedPool, Root, Rootable, Runtime};
///
/// let rt = Runtime::new();
/// let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
/// let total: u64 = pool
///     .broadcast(|m, ctx| {
///         let kept: Root<Rootable![u64]> =
///             m.mutate(|mc| mc.root(mc.alloc(ctx.index() as u64 + 1)));
///         m.mutate(|mc| *kept.get(mc))
///     })
///     .iter()
///     .sum();
/// assert_eq!(total, 3);
/// ```
pub struct ManagedPool {
    // Dropped first: the workers detach before the runtime handle goes.
    pool: ThreadPool,
    runtime: Runtime,
}

impl fmt::Debug for ManagedPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedPool")
            .field("runtime", &self.runtime)
            .field("num_threads", &self.pool.current_num_threads())
            .finish()
    }
}

impl ManagedPool {
    /// A builder for a pool of mutators of `runtime`.
    pub fn builder(runtime: &Runtime) -> ManagedPoolBuilder {
        ManagedPoolBuilder {
            runtime: runtime.clone(),
            inner: ThreadPoolBuilder::new(),
            named: false,
        }
    }

    /// Runs `op` on a worker with its mutator and returns its result; the
    /// caller blocks until it is done. A panic in `op` is resumed here.
    ///
    /// # Panics
    /// Inside `mutate`, and from a task of a managed pool that holds its
    /// worker's mutator (fork there with [`join`] or [`scope`]).
    pub fn install<OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce(&mut Mutator) -> R + Send,
        R: Send,
    {
        assert_not_held("install");
        self.pool.install(|| with_mutator(op))
    }

    /// Runs `op` on a worker without borrowing its mutator, for code that
    /// forks with the plain `loam-threadpool` calls and takes the mutator
    /// where it needs it ([`with_mutator`]).
    ///
    /// # Panics
    /// As [`install`](Self::install).
    pub fn install_plain<OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce() -> R + Send,
        R: Send,
    {
        assert_not_held("install_plain");
        self.pool.install(op)
    }

    /// Spawns a `'static` task; it runs with the mutator of the worker that
    /// takes it. Returns at once; a panic in the task goes to the pool's
    /// panic handler and the worker carries on, still attached.
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce(&mut Mutator) + Send + 'static,
    {
        self.pool.spawn(move || with_mutator(f));
    }

    /// [`scope`] on one of this pool's workers.
    ///
    /// # Panics
    /// As [`install`](Self::install).
    pub fn scope<'scope, OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce(&ManagedScope<'scope>, &mut Mutator) -> R + Send,
        R: Send,
    {
        assert_not_held("scope");
        self.pool.install(|| with_mutator(|m| scope(m, op)))
    }

    /// [`join`] on one of this pool's workers.
    ///
    /// # Panics
    /// As [`install`](Self::install).
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce(&mut Mutator) -> RA + Send,
        B: FnOnce(&mut Mutator) -> RB + Send,
        RA: Send,
        RB: Send,
    {
        assert_not_held("join");
        self.pool.install(|| with_mutator(|m| join(m, a, b)))
    }

    /// Runs `op` once on every worker, each with its mutator, and returns
    /// the results by worker index. A worker busy with a long task takes its
    /// call when the task ends or waits.
    ///
    /// # Panics
    /// As [`install`](Self::install); if a call panics, after all are done.
    pub fn broadcast<OP, R>(&self, op: OP) -> Vec<R>
    where
        OP: Fn(&mut Mutator, BroadcastContext) -> R + Sync,
        R: Send,
    {
        assert_not_held("broadcast");
        self.pool
            .broadcast(|ctx| with_mutator(|m| op(m, ctx)))
    }

    /// The number of workers.
    pub fn num_threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// The index of the current thread in this pool, or `None` if it is not
    /// one of its workers.
    pub fn current_thread_index(&self) -> Option<usize> {
        self.pool.current_thread_index()
    }

    /// The runtime whose mutators the workers are.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }
}

/// Configures a [`ManagedPool`]: [`ManagedPool::builder`].
pub struct ManagedPoolBuilder {
    runtime: Runtime,
    inner: ThreadPoolBuilder,
    named: bool,
}

impl fmt::Debug for ManagedPoolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedPoolBuilder")
            .field("runtime", &self.runtime)
            .field("inner", &self.inner)
            .finish()
    }
}

impl ManagedPoolBuilder {
    /// The number of workers (0, the default: `LOAM_NUM_THREADS`, else one
    /// per CPU).
    pub fn num_threads(mut self, n: usize) -> Self {
        self.inner = self.inner.num_threads(n);
        self
    }

    /// Names the worker threads (default `loam-mutator-{index}`).
    pub fn thread_name<F>(mut self, name: F) -> Self
    where
        F: FnMut(usize) -> String + 'static,
    {
        self.inner = self.inner.thread_name(name);
        self.named = true;
        self
    }

    /// The workers' stack size in bytes.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.inner = self.inner.stack_size(bytes);
        self
    }

    /// Where panics of spawned tasks go (default: a line on stderr).
    pub fn panic_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(Box<dyn Any + Send>) + Send + Sync + 'static,
    {
        self.inner = self.inner.panic_handler(handler);
        self
    }

    /// Starts the workers; each attaches to the runtime before its first
    /// task.
    ///
    /// # Errors
    /// If a worker thread cannot be started.
    ///
    /// # Panics
    /// In a child process forked after the runtime was built (checked
    /// here: a worker's attach refusing it in the start handler, where a
    /// panic cannot unwind, aborted the process).
    pub fn build(self) -> Result<ManagedPool, ThreadPoolBuildError> {
        crate::forked::refuse_since(self.runtime.handle.shared.born, "ManagedPool::build");
        let mut inner = self.inner;
        if !self.named {
            inner = inner.thread_name(|i| format!("loam-mutator-{i}"));
        }
        let runtime = self.runtime.clone();
        // Over a `GlobalAlloc` space the objects are not in loam's pages,
        // and a parked worker lends nothing, as `Mutator::blocking` does.
        let lends = self.runtime.handle.shared.space.alloc_space().is_none();
        let pool = inner
            .start_handler(move |_| {
                let own = Box::into_raw(Box::new(runtime.attach()));
                OWN.with(|o| o.set(own));
                AVAILABLE.with(|a| a.set(own));
            })
            // Take back the page runs the GC threads freed into before
            // parking, so that the blocks are reused: a parked worker
            // reaches no `mutate` entry to take them. Then lend the heap
            // while parked: what the sweeps free into it meanwhile serves
            // the workers that run (or any thread), as a wait in
            // `Mutator::blocking` lends it. Every park is followed by
            // `after_unpark`, which takes it back before a task runs.
            // (In a park inside `blocking`, the heap is lent already and
            // both are no-ops.) Lent untidied, which costs a park nothing:
            // the first thread that borrows it releases the pages the
            // reclaimed runs emptied (`loam_heap::lend_idle`).
            .before_park(move |_| {
                loam_heap::reclaim_runs();
                if lends {
                    loam_heap::lend_idle();
                }
            })
            .after_unpark(move |_| {
                if lends {
                    loam_heap::take_back_idle();
                }
            })
            .exit_handler(|_| {
                let own = OWN.with(|o| o.replace(ptr::null_mut()));
                let available = AVAILABLE.with(|a| a.replace(ptr::null_mut()));
                debug_assert_eq!(own, available, "loam: a worker exited with its mutator lent");
                if !own.is_null() {
                    // SAFETY: `own` came from `Box::into_raw` in the start
                    // hook; no task runs after the exit hook, so nothing
                    // borrows it now.
                    drop(unsafe { Box::from_raw(own) });
                }
            })
            .build()?;
        Ok(ManagedPool {
            pool,
            runtime: self.runtime,
        })
    }
}
