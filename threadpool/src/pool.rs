//! `ThreadPool`: the owning handle of a pool; entry points that target this
//! particular pool, and shutdown (finish queued work, join the threads).

use std::thread::JoinHandle;

use crate::broadcast::{self, BroadcastContext};
use crate::join;
use crate::registry::Registry;
use crate::scope::{self, Scope};
use crate::spawn;
use crate::sync::Arc;

/// A work-stealing pool of worker threads. Build one with
/// [`ThreadPoolBuilder`](crate::ThreadPoolBuilder).
///
/// # Shutdown
///
/// Dropping the pool lets its workers finish every job already queued
/// (including jobs those jobs spawn), then joins the worker threads, so when
/// `drop` returns no worker is running. If the last handle is dropped on a
/// worker of any pool (from inside a task), the workers are told to exit but
/// not waited for: that thread cannot join itself, and one of this pool's
/// workers may be waiting for the other pool's task that drops it. The same
/// where waits are forbidden ([`forbid_waits`](crate::forbid_waits): inside
/// a runtime's `mutate` call).
///
/// # Examples
///
/// ```
/// # loam_threadpool::doctest! {
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
///
/// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// let done = Arc::new(AtomicUsize::new(0));
/// for _ in 0..100 {
///     let done = done.clone();
///     pool.spawn(move || {
///         done.fetch_add(1, Ordering::Relaxed);
///     });
/// }
/// drop(pool); // finishes the 100 tasks, joins the threads
/// assert_eq!(done.load(Ordering::Relaxed), 100);
/// # }
/// ```
pub struct ThreadPool {
    registry: Arc<Registry>,
    /// The worker threads, joined on drop. Owned by the handle alone.
    threads: Vec<JoinHandle<()>>,
}

impl ThreadPool {
    /// Wraps a started registry and its threads.
    pub(crate) fn from_parts(registry: Arc<Registry>, threads: Vec<JoinHandle<()>>) -> Self {
        ThreadPool { registry, threads }
    }

    /// The pool's registry.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Runs `op` on a worker of this pool and returns its result. Inside
    /// `op`, [`join`](crate::join()), [`scope`](crate::scope()) and
    /// [`spawn`](crate::spawn()) use this pool.
    ///
    /// Called from one of this pool's workers, `op` runs inline. Called from
    /// a worker of another pool, that worker keeps running its own pool's jobs
    /// until `op` is done (so pools may call into each other). Called from any
    /// other thread, the caller blocks until `op` is done.
    ///
    /// # Panics
    ///
    /// A panic in `op` is resumed here; the pool keeps serving.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// let index = pool.install(|| loam_threadpool::current_thread_index());
    /// assert!(index.unwrap() < 2);
    /// # }
    /// ```
    pub fn install<OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce() -> R + Send,
        R: Send,
    {
        self.registry.in_worker(|_| op())
    }

    /// Spawns a `'static` fire-and-forget task on this pool; see
    /// [`spawn`](crate::spawn()).
    ///
    /// # Panics
    ///
    /// Panics of the task go to the pool's panic handler, never here.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// let (sender, receiver) = std::sync::mpsc::channel();
    /// pool.spawn(move || sender.send("hello").unwrap());
    /// assert_eq!(receiver.recv().unwrap(), "hello");
    /// # }
    /// ```
    pub fn spawn<F>(&self, func: F)
    where
        F: FnOnce() + Send + 'static,
    {
        spawn::spawn_in(&self.registry, func);
    }

    /// Runs [`scope`](crate::scope()) on this pool.
    ///
    /// # Panics
    ///
    /// Resumes the first panic of `op` or of a task spawned in the scope.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// let mut v = vec![1, 2, 3];
    /// pool.scope(|s| {
    ///     for x in v.iter_mut() {
    ///         s.spawn(move |_| *x *= 10);
    ///     }
    /// });
    /// assert_eq!(v, [10, 20, 30]);
    /// # }
    /// ```
    pub fn scope<'scope, OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce(&Scope<'scope>) -> R + Send,
        R: Send,
    {
        self.registry
            .in_worker(|worker| scope::scope_in_worker(worker, op))
    }

    /// Runs [`join`](crate::join()) on this pool.
    ///
    /// # Panics
    ///
    /// Resumes a panic of `a` or `b` once both are done.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// assert_eq!(pool.join(|| 1, || "two"), (1, "two"));
    /// # }
    /// ```
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        self.registry
            .in_worker(|worker| join::join_in_worker(worker, a, b))
    }

    /// Runs `op` once on every worker of this pool; see
    /// [`broadcast`](crate::broadcast()).
    ///
    /// # Panics
    ///
    /// Resumes a panic of any call once all are done.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    /// let n = pool.broadcast(|ctx| ctx.num_threads());
    /// assert_eq!(n, vec![4; 4]);
    /// # }
    /// ```
    pub fn broadcast<OP, R>(&self, op: OP) -> Vec<R>
    where
        OP: Fn(BroadcastContext) -> R + Sync,
        R: Send,
    {
        self.registry
            .in_worker(|worker| broadcast::broadcast_in_worker(worker, &op))
    }

    /// The number of worker threads.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    /// assert_eq!(pool.current_num_threads(), 3);
    /// # }
    /// ```
    pub fn current_num_threads(&self) -> usize {
        self.registry.num_threads()
    }

    /// The index of the current thread if it is one of this pool's workers.
    ///
    /// # Examples
    ///
    /// ```
    /// # loam_threadpool::doctest! {
    /// let pool = loam_threadpool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// assert_eq!(pool.current_thread_index(), None);
    /// assert!(pool.install(|| pool.current_thread_index()).is_some());
    /// # }
    /// ```
    pub fn current_thread_index(&self) -> Option<usize> {
        self.registry.current_worker().map(|worker| worker.index())
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        if crate::forked::since(self.registry.born) {
            // A forked child: no worker to stop or join (`forked.rs`).
            return;
        }
        self.registry.terminate();
        if !crate::worker::WorkerThread::current().is_null() || crate::no_wait::waits_forbidden() {
            // Joining our own thread would deadlock. So may joining from a
            // worker of another pool (one of our workers may be waiting in
            // an `install` for the very job that drops us), and waiting
            // where waits are forbidden (inside a runtime's `mutate`, the
            // workers may be waiting for a pause that waits for us). The
            // workers finish the queue and exit anyway; rayon's drop never
            // waits for them.
            return;
        }
        for thread in self.threads.drain(..) {
            // A worker that panicked (in a hook) has nothing left to report.
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}
