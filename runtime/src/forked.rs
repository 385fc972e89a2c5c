//! A runtime does not survive `fork`: the child has only the thread that
//! called it. Its coordinator, GC threads and finalizer are gone, and
//! every wait for a cycle (`collect`, pacing, a stop the gate keeps a call
//! out for, the join of the coordinator when the last handle drops) waited
//! for ever in the child.
//!
//! A `pthread_atfork` child handler counts the forks of the process (the
//! pool's, `loam_threadpool`), and each runtime notes the count when it is
//! built. In a later child the count differs: `mutate`, `attach`,
//! `collect`, `wait_for_cycle` and `wait_for_drops` panic with a message
//! saying so, before they take any of the runtime's locks (another thread
//! may have held one at the fork, for ever in the child), and dropping the
//! runtime's last handle, a mutator, a `Root` or a `GlobalRoot` leaks what
//! they own instead of waiting for the collector or taking a lock. Other
//! calls that take the runtime's locks (`Runtime::stats`) may still wait
//! in the child, if the fork caught another thread holding one. The heap
//! itself stays usable in the child (`loam_heap`'s own handlers): a child
//! may build a runtime of its own. The process-wide state a cycle holds
//! (the cycle lock, its panic log, the stall detector's list) is one per
//! fork generation ([`PerFork`]), so a fork that catches a cycle under way
//! no longer leaves the child's first cycle waiting for a lock held by a
//! thread the child does not have. Not dependable yet: the runtime's locks
//! and condition variables are `parking_lot`'s, which keeps a process-wide
//! table of waiting threads, and a fork that catches another thread
//! parking or waking one (a timed wait's poll does, every few
//! milliseconds) leaves the table locked or half-written in the child: a
//! child that built a runtime and collected, forked while the parent's
//! cycle ran, hung or aborted in about 1 run in 8 on a busy 2-core
//! machine. So does a fork that catches another thread building or ending
//! a runtime (the runtime ids' lock). `exec` is the dependable way;
//! locks without process-wide state (std's) would make it dependable. The JVM and Go do not carry
//! their collectors across `fork` either; `exec` is the way out.

/// The fork count, for a runtime being built (the pool's counter: one
/// `pthread_atfork` handler serves both, `loam_threadpool`'s `forked.rs`).
pub(crate) fn generation() -> u64 {
    loam_threadpool::__fork::generation()
}

/// Whether this process is a child forked after the runtime whose count
/// was `born` was built.
#[inline]
pub(crate) fn since(born: u64) -> bool {
    loam_threadpool::__fork::since(born)
}

/// Panics, naming `what`, in a child forked after the runtime whose count
/// was `born` was built.
#[inline]
pub(crate) fn refuse_since(born: u64, what: &str) {
    if since(born) {
        refuse(what);
    }
}

#[cold]
#[inline(never)]
fn refuse(what: &str) -> ! {
    panic!(
        "loam: {what} in a child process forked after the runtime was built: \
         the child has none of the runtime's collector threads (fork copies \
         only the thread that called it), so it would wait for ever for a \
         cycle. Build a new runtime in the child, or exec."
    )
}

/// A process-wide value that each fork generation of the process gets
/// fresh (made by `init` at the generation's first use, then leaked): a
/// lock a forked child's copy of which may be held by a thread the child
/// does not have, and what it guards. The parent keeps its generation
/// for ever; a child's first use makes its own.
pub(crate) struct PerFork<T: 'static> {
    current: std::sync::atomic::AtomicPtr<(u64, T)>,
    init: fn() -> T,
}

impl<T: Send + Sync + 'static> PerFork<T> {
    pub(crate) const fn new(init: fn() -> T) -> PerFork<T> {
        PerFork {
            current: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
            init,
        }
    }

    /// This fork generation's value. Used only after a runtime was built,
    /// whose build registered the fork handler (`generation`).
    #[inline]
    pub(crate) fn get(&self) -> &'static T {
        use std::sync::atomic::Ordering;
        let generation = loam_threadpool::__fork::current();
        loop {
            let p = self.current.load(Ordering::Acquire);
            // Values are leaked, never freed.
            // SAFETY: as just said.
            if let Some((g, value)) = unsafe { p.as_ref() } {
                if *g == generation {
                    return value;
                }
            }
            let fresh = Box::into_raw(Box::new((generation, (self.init)())));
            match self
                .current
                .compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // Published, never freed.
                // SAFETY: as just said.
                Ok(_) => return unsafe { &(*fresh).1 },
                // Another thread of this generation published one first:
                // read it on the next turn.
                // SAFETY: `fresh` was never published.
                Err(_) => drop(unsafe { Box::from_raw(fresh) }),
            }
        }
    }
}
