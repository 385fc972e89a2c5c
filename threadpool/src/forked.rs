//! A pool does not survive `fork`: the child has only the thread that
//! called it, and none of the pool's workers. A job handed to the pool
//! there was never run, and whoever waited for it (`install`, `join` and
//! `scope` from outside the pool, `broadcast`) waited for ever, as did
//! dropping the pool, which joins its workers.
//!
//! A `pthread_atfork` child handler counts the forks of the process; each
//! pool notes the count when it is built. In a later child, handing the
//! pool a job panics with a message saying so, and dropping the pool
//! leaks it instead of joining workers that do not exist. The runtime's
//! `forked.rs` reads the same count for its collector (hidden re-export,
//! `__fork`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Forks of this process so far, as the children count them.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// In the child, the one thread left: one atomic add (async-signal-safe,
/// as a child handler must be).
#[cfg(unix)]
extern "C" fn child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// The fork count, for a pool (or a runtime) being built; registers the
/// handler first, once per process.
pub fn generation() -> u64 {
    #[cfg(unix)]
    {
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            // SAFETY: `child` is an `extern "C" fn()` that touches one atomic.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(child)) };
            // It fails only without memory for the registration: a child
            // then hangs where it waits for the pool, as before.
            debug_assert_eq!(rc, 0, "pool: pthread_atfork failed");
        });
    }
    FORKS.load(Ordering::Relaxed)
}

/// The fork count now, without registering the handler: for callers that
/// run only after a [`generation`] (a built pool's or runtime's), on
/// their hot paths.
#[inline]
pub fn current() -> u64 {
    FORKS.load(Ordering::Relaxed)
}

/// Whether this process is a child forked after the pool (or runtime)
/// whose count was `born` was built.
#[inline]
pub fn since(born: u64) -> bool {
    FORKS.load(Ordering::Relaxed) != born
}

/// Panics in a child forked after the pool whose count was `born` was
/// built.
#[inline]
pub(crate) fn refuse_since(born: u64) {
    if since(born) {
        refuse();
    }
}

#[cold]
#[inline(never)]
fn refuse() -> ! {
    panic!(
        "loam-threadpool: a job handed to a pool in a child process forked after \
         the pool was built: the child has none of its workers (fork copies only \
         the thread that called it), so the job would never run. Build a new pool \
         in the child, or exec."
    )
}
