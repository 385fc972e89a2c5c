//! `ThreadPoolBuilder`: the pool's option table (thread count, names, stack
//! size, hooks, panic handler) and starting the worker threads.

use std::any::Any;
use std::fmt;
use std::thread;

use crossbeam_deque::Worker;

use crate::job::JobRef;
use crate::registry::{Hooks, Registry, GLOBAL_POOL};
use crate::sync::Arc;
use crate::worker::{WorkerThread, DEFAULT_IDLE_SPINS};
use crate::ThreadPool;

/// The environment variable that overrides the default thread count.
const NUM_THREADS_ENV: &str = "LOAM_NUM_THREADS";

/// The most threads a pool starts (rayon caps its pools near there too):
/// more are asked for only by mistake, and each costs a stack and a queue.
const MAX_THREADS: usize = 1 << 16;

/// Configures and starts a [`ThreadPool`].
///
/// | option | default | meaning |
/// |---|---|---|
/// | [`num_threads`](Self::num_threads) | `LOAM_NUM_THREADS`, else the number of CPUs | worker count |
/// | [`thread_name`](Self::thread_name) | `loam-worker-{index}` | OS thread names |
/// | [`stack_size`](Self::stack_size) | the platform default | worker stack size |
/// | [`spread_on_wake`](Self::spread_on_wake) | on (Linux) | a woken worker moves off a busy CPU |
/// | [`idle_spins`](Self::idle_spins) | 32 | yields of an idle worker before it parks |
/// | [`start_handler`](Self::start_handler) | none | runs first on each worker |
/// | [`exit_handler`](Self::exit_handler) | none | runs last on each worker |
/// | [`between_tasks`](Self::between_tasks) | none | after every task (safepoint) |
/// | [`before_park`](Self::before_park) / [`after_unpark`](Self::after_unpark) | none | around every park |
/// | [`panic_handler`](Self::panic_handler) | report on stderr, continue | panics of `spawn`ed tasks |
///
/// Hooks get the worker's index, run on that worker, and must not panic: a
/// panicking hook aborts the process (it may run while other workers point
/// into its worker's stack, so unwinding is not an option).
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// let pool = loam_threadpool::ThreadPoolBuilder::new()
///     .num_threads(2)
///     .thread_name(|index| format!("my-worker-{index}"))
///     .build()
///     .unwrap();
/// let name = pool.install(|| std::thread::current().name().map(String::from));
/// assert!(name.unwrap().starts_with("my-worker-"));
/// # }
/// ```
#[derive(Default)]
pub struct ThreadPoolBuilder {
    num_threads: usize,
    thread_name: Option<Box<dyn FnMut(usize) -> String>>,
    stack_size: Option<usize>,
    /// `spread_on_wake(false)` sets it.
    stay_on_wake: bool,
    /// `idle_spins`; `None`: [`DEFAULT_IDLE_SPINS`].
    idle_spins: Option<u32>,
    hooks: Hooks,
}

impl ThreadPoolBuilder {
    /// A builder with every option at its default.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().build().unwrap();
    /// assert!(pool.current_num_threads() >= 1);
    /// # }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the number of worker threads; 0 means the default
    /// (`LOAM_NUM_THREADS` if set to a positive number, else the CPU count).
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    /// assert_eq!(pool.current_num_threads(), 3);
    /// # }
    /// ```
    pub fn num_threads(mut self, num_threads: usize) -> Self {
        self.num_threads = num_threads;
        self
    }

    /// Names worker `index` with `name(index)`.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(1)
    ///     .thread_name(|index| format!("mutator-{index}"))
    ///     .build()
    ///     .unwrap();
    /// let name = pool.install(|| std::thread::current().name().unwrap().to_owned());
    /// assert_eq!(name, "mutator-0");
    /// # }
    /// ```
    pub fn thread_name<F>(mut self, name: F) -> Self
    where
        F: FnMut(usize) -> String + 'static,
    {
        self.thread_name = Some(Box::new(name));
        self
    }

    /// Sets each worker's stack size in bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(1)
    ///     .stack_size(8 << 20)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(pool.install(|| 1 + 1), 2);
    /// # }
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Whether a worker that wakes on the CPU of another awake worker of
    /// the pool moves itself to an allowed CPU no awake worker holds
    /// (Linux only; on by default). The kernel queues a woken worker
    /// behind its waker when every CPU looks busy, and its load balancer
    /// moves it only a tick or more later: the move lets a fresh pool's
    /// first burst run on every CPU at once. It costs two system calls
    /// and a migration, which is more than a burst of a few tens of
    /// microseconds gains from it: loam's GC threads, whose small cycles
    /// are such bursts, turn it off (`loam-runtime`'s collector).
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .spread_on_wake(false)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(pool.install(|| loam_threadpool::join(|| 1, || 2)), (1, 2));
    /// # }
    /// ```
    pub fn spread_on_wake(mut self, spread: bool) -> Self {
        self.stay_on_wake = !spread;
        self
    }

    /// How many times a worker that finds no work looks again, yielding
    /// its CPU between looks, before it parks (32 by default). Parking
    /// and waking cost system calls, so a worker that runs dry between two
    /// bursts of a join tree stays awake across the gap. But a yielding
    /// worker is still a runnable thread: where other threads of the
    /// program want every CPU, each yield takes one of them for a switch
    /// and back. loam's GC threads, which run beside the mutators and go
    /// idle after every phase of a cycle, park at once (`0`).
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .idle_spins(0)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(pool.install(|| loam_threadpool::join(|| 1, || 2)), (1, 2));
    /// # }
    /// ```
    pub fn idle_spins(mut self, rounds: u32) -> Self {
        self.idle_spins = Some(rounds);
        self
    }

    /// Runs `handler(index)` on each worker when it starts, before any task.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let started = Arc::new(AtomicUsize::new(0));
    /// let counter = started.clone();
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .start_handler(move |_| {
    ///         counter.fetch_add(1, Ordering::SeqCst);
    ///     })
    ///     .build()
    ///     .unwrap();
    /// drop(pool); // joins the workers, so both have started
    /// assert_eq!(started.load(Ordering::SeqCst), 2);
    /// # }
    /// ```
    pub fn start_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(usize) + Send + Sync + 'static,
    {
        self.hooks.start = Some(Box::new(handler));
        self
    }

    /// Runs `handler(index)` on each worker as it exits (on pool drop).
    ///
    /// Every worker has stopped taking work by then: a task the handler
    /// spawns on this pool would never run, and a wait on this pool
    /// (`join`, `scope`, `install`, `broadcast`) would wait for workers
    /// that are gone. A spawn on this pool panics, and so does a wait on
    /// *any* pool (the hook runs with pool waits forbidden, as a runtime's
    /// GC threads do): a panicking hook aborts (see above). Spawning onto
    /// another pool's handle is fine; hand work that must wait to a thread
    /// of your own.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let exited = Arc::new(AtomicUsize::new(0));
    /// let counter = exited.clone();
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .exit_handler(move |_| {
    ///         counter.fetch_add(1, Ordering::SeqCst);
    ///     })
    ///     .build()
    ///     .unwrap();
    /// drop(pool);
    /// assert_eq!(exited.load(Ordering::SeqCst), 2);
    /// # }
    /// ```
    pub fn exit_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(usize) + Send + Sync + 'static,
    {
        self.hooks.exit = Some(Box::new(handler));
        self
    }

    /// Runs `hook(index)` on a worker after every task it runs from its
    /// top-level scheduling loop, that is, whenever the worker holds no task
    /// state at all: the runtime's safepoint. Tasks a worker runs while it
    /// waits *inside* another task (a `join` or `scope` waiting for stolen
    /// work) do not fire it, since the outer task is still live on the stack;
    /// neither does a `join`'s second closure run inline (a plain call).
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let safepoints = Arc::new(AtomicUsize::new(0));
    /// let counter = safepoints.clone();
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .between_tasks(move |_| {
    ///         counter.fetch_add(1, Ordering::SeqCst);
    ///     })
    ///     .build()
    ///     .unwrap();
    /// pool.install(|| ());
    /// drop(pool);
    /// assert!(safepoints.load(Ordering::SeqCst) >= 1);
    /// # }
    /// ```
    pub fn between_tasks<H>(mut self, hook: H) -> Self
    where
        H: Fn(usize) + Send + Sync + 'static,
    {
        self.hooks.between_tasks = Some(Box::new(hook));
        self
    }

    /// Runs `hook(index)` on a worker just before it parks for lack of work,
    /// at top level or while waiting inside a task (a `join` whose other half
    /// was stolen): either way the worker will not run code until woken, so
    /// the runtime marks it blocked here and the collector never waits on
    /// it. Every call is followed by
    /// one to the [`after_unpark`](Self::after_unpark) hook (even if, at the
    /// last moment, work showed up and the worker did not block).
    ///
    /// Neither hook may queue work on this pool (`spawn`, a scope's
    /// `spawn`): in a pool being dropped a worker parks there after it
    /// counted itself out of work, and a job queued then may never run.
    /// Such a spawn panics, and a panicking hook stops the process.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let (sender, receiver) = std::sync::mpsc::channel();
    /// let sender = std::sync::Mutex::new(sender);
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(1)
    ///     .before_park(move |index| {
    ///         let _ = sender.lock().unwrap().send(index);
    ///     })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(receiver.recv().unwrap(), 0); // the idle worker parks
    /// # drop(pool);
    /// # }
    /// ```
    pub fn before_park<H>(mut self, hook: H) -> Self
    where
        H: Fn(usize) + Send + Sync + 'static,
    {
        self.hooks.before_park = Some(Box::new(hook));
        self
    }

    /// Runs `hook(index)` on a worker right after it unparks (see
    /// [`before_park`](Self::before_park)). The runtime marks the worker
    /// running again here, which may wait for the collector.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let parks = Arc::new(AtomicUsize::new(0));
    /// let unparks = Arc::new(AtomicUsize::new(0));
    /// let (p, u) = (parks.clone(), unparks.clone());
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .before_park(move |_| {
    ///         p.fetch_add(1, Ordering::SeqCst);
    ///     })
    ///     .after_unpark(move |_| {
    ///         u.fetch_add(1, Ordering::SeqCst);
    ///     })
    ///     .build()
    ///     .unwrap();
    /// drop(pool); // parked workers are woken to exit
    /// assert_eq!(parks.load(Ordering::SeqCst), unparks.load(Ordering::SeqCst));
    /// # }
    /// ```
    pub fn after_unpark<H>(mut self, hook: H) -> Self
    where
        H: Fn(usize) + Send + Sync + 'static,
    {
        self.hooks.after_unpark = Some(Box::new(hook));
        self
    }

    /// Sends the payload of a panic in a [`spawn`](crate::spawn())ed task to
    /// `handler` (on the worker that ran it); the pool carries on. Without
    /// one, the pool writes a line to stderr and carries on. A handler that
    /// panics aborts the process.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let (sender, receiver) = std::sync::mpsc::channel();
    /// let sender = std::sync::Mutex::new(sender);
    /// let pool = loam_threadpool::ThreadPoolBuilder::new()
    ///     .num_threads(1)
    ///     .panic_handler(move |payload| {
    ///         let message = payload.downcast_ref::<&str>().copied().unwrap_or("?");
    ///         sender.lock().unwrap().send(message.to_owned()).unwrap();
    ///     })
    ///     .build()
    ///     .unwrap();
    /// pool.spawn(|| panic!("boom"));
    /// assert_eq!(receiver.recv().unwrap(), "boom");
    /// assert_eq!(pool.install(|| 7), 7); // still serving
    /// # }
    /// ```
    pub fn panic_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(Box<dyn Any + Send>) + Send + Sync + 'static,
    {
        self.hooks.panic_handler = Some(Box::new(handler));
        self
    }

    /// The thread count this builder will use: at most [`MAX_THREADS`],
    /// with a warning (as rayon caps it), so that a count read from
    /// somewhere unchecked is not a capacity overflow or an out-of-memory
    /// abort in the per-thread queues made before any thread starts.
    fn resolved_num_threads(&self) -> usize {
        let asked = self.asked_num_threads();
        if asked > MAX_THREADS {
            crate::say(format_args!(
                "loam-threadpool: {asked} threads asked for; using {MAX_THREADS}"
            ));
            return MAX_THREADS;
        }
        asked
    }

    fn asked_num_threads(&self) -> usize {
        if self.num_threads > 0 {
            return self.num_threads;
        }
        // Lossily: a value that is not UTF-8 is refused like any bad one.
        if let Some(value) =
            std::env::var_os(NUM_THREADS_ENV).map(|v| v.to_string_lossy().into_owned())
        {
            match value.trim().parse::<usize>() {
                Ok(n) if n > 0 => return n,
                _ => crate::say(format_args!(
                    "loam-threadpool: ignoring {NUM_THREADS_ENV}={value:?} (want a positive integer)"
                )),
            }
        }
        num_cpus::get().max(1)
    }

    /// Starts the pool's threads.
    ///
    /// # Errors
    ///
    /// [`ThreadPoolBuildErrorKind::Spawn`] if the OS refuses a thread (the
    /// threads already started are stopped, and joined as a pool's drop
    /// joins them: not where waiting is forbidden, on a worker or inside
    /// `mutate`, where they exit on their own).
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// assert_eq!(pool.install(|| 2 + 2), 4);
    /// # }
    /// ```
    pub fn build(mut self) -> Result<ThreadPool, ThreadPoolBuildError> {
        let num_threads = self.resolved_num_threads();
        // Every name first: a `thread_name` that panics then unwinds out
        // of `build` with no thread started (with threads started, they
        // stayed parked for the process's life).
        let names: Vec<String> = (0..num_threads)
            .map(|index| match &mut self.thread_name {
                Some(name) => name(index),
                None => format!("loam-worker-{index}"),
            })
            .collect();
        // `thread::Builder::spawn` panics on such a name, with workers
        // started before it: refused here, before any.
        if let Some(index) = names.iter().position(|n| n.contains('\0')) {
            panic!("loam-threadpool: the name of worker {index} contains a NUL byte");
        }
        let deques: Vec<Worker<JobRef>> = (0..num_threads).map(|_| Worker::new_lifo()).collect();
        let stealers = deques.iter().map(Worker::stealer).collect();
        let hooks = std::mem::take(&mut self.hooks);
        let idle_spins = self.idle_spins.unwrap_or(DEFAULT_IDLE_SPINS);
        let registry = Arc::new(Registry::new(
            stealers,
            hooks,
            !self.stay_on_wake,
            idle_spins,
        ));
        let mut threads = Vec::with_capacity(num_threads);
        for ((index, deque), name) in deques.into_iter().enumerate().zip(names) {
            let mut builder = thread::Builder::new().name(name);
            if let Some(bytes) = self.stack_size {
                builder = builder.stack_size(bytes);
            }
            let thread_registry = Arc::clone(&registry);
            match builder.spawn(move || WorkerThread::run(thread_registry, index, deque)) {
                Ok(handle) => threads.push(handle),
                Err(error) => {
                    // Dropping the partial pool stops and joins what started:
                    // the workers that never will count as out of work.
                    if registry
                        .exit
                        .absent(num_threads - threads.len(), num_threads)
                    {
                        registry.sleep.wake_all();
                    }
                    drop(ThreadPool::from_parts(registry, threads));
                    return Err(ThreadPoolBuildError {
                        kind: ThreadPoolBuildErrorKind::Spawn,
                        source: Some(error),
                    });
                }
            }
        }
        Ok(ThreadPool::from_parts(registry, threads))
    }

    /// Starts the pool and makes it the global pool, which the free functions
    /// use outside any pool. Without this, the global pool starts on first use
    /// with default options.
    ///
    /// # Errors
    ///
    /// [`ThreadPoolBuildErrorKind::GlobalPoolAlreadyInitialized`] if the
    /// global pool exists already; [`ThreadPoolBuildErrorKind::Spawn`] as for
    /// [`build`](Self::build).
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build_global().unwrap();
    /// assert_eq!(loam_threadpool::current_num_threads(), 2);
    /// let again = loam_threadpool::ThreadPoolBuilder::new().build_global();
    /// assert_eq!(
    ///     again.unwrap_err().kind(),
    ///     loam_threadpool::ThreadPoolBuildErrorKind::GlobalPoolAlreadyInitialized
    /// );
    /// # }
    /// ```
    pub fn build_global(self) -> Result<(), ThreadPoolBuildError> {
        let already = || ThreadPoolBuildError {
            kind: ThreadPoolBuildErrorKind::GlobalPoolAlreadyInitialized,
            source: None,
        };
        if GLOBAL_POOL.get().is_some() {
            return Err(already());
        }
        let pool = self.build()?;
        // A racing initialiser wins; our pool is then dropped (and joined).
        GLOBAL_POOL.set(pool).map_err(|_| already())
    }
}

impl fmt::Debug for ThreadPoolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadPoolBuilder")
            .field("num_threads", &self.num_threads)
            .field("stack_size", &self.stack_size)
            .field("spread_on_wake", &!self.stay_on_wake)
            .field("idle_spins", &self.idle_spins.unwrap_or(DEFAULT_IDLE_SPINS))
            .finish_non_exhaustive()
    }
}

/// Why a pool could not be built; see [`ThreadPoolBuildError::kind`].
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// use loam_threadpool::ThreadPoolBuilder;
///
/// ThreadPoolBuilder::new().num_threads(1).build_global().unwrap();
/// let error = ThreadPoolBuilder::new().build_global().unwrap_err();
/// assert_eq!(error.to_string(), "the global thread pool has already been initialized");
/// # }
/// ```
#[derive(Debug)]
pub struct ThreadPoolBuildError {
    kind: ThreadPoolBuildErrorKind,
    source: Option<std::io::Error>,
}

/// The kinds of [`ThreadPoolBuildError`].
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// use loam_threadpool::{ThreadPoolBuildErrorKind, ThreadPoolBuilder};
///
/// match ThreadPoolBuilder::new().num_threads(2).build() {
///     Ok(pool) => assert_eq!(pool.current_num_threads(), 2),
///     Err(error) => assert_eq!(error.kind(), ThreadPoolBuildErrorKind::Spawn),
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ThreadPoolBuildErrorKind {
    /// The OS refused to start a worker thread.
    Spawn,
    /// `build_global` was called after the global pool was started.
    GlobalPoolAlreadyInitialized,
}

impl ThreadPoolBuildError {
    /// What went wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// use loam_threadpool::{ThreadPoolBuilder, ThreadPoolBuildErrorKind};
    ///
    /// let _ = loam_threadpool::current_num_threads(); // starts the global pool
    /// let error = ThreadPoolBuilder::new().build_global().unwrap_err();
    /// assert_eq!(error.kind(), ThreadPoolBuildErrorKind::GlobalPoolAlreadyInitialized);
    /// # }
    /// ```
    pub fn kind(&self) -> ThreadPoolBuildErrorKind {
        self.kind
    }
}

impl fmt::Display for ThreadPoolBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ThreadPoolBuildErrorKind::Spawn => f.write_str("could not spawn a worker thread"),
            ThreadPoolBuildErrorKind::GlobalPoolAlreadyInitialized => {
                f.write_str("the global thread pool has already been initialized")
            }
        }
    }
}

impl std::error::Error for ThreadPoolBuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|error| error as &(dyn std::error::Error + 'static))
    }
}
