//! A runtime does not survive `fork`: the child has only the thread that
//! called it. Its coordinator, GC threads and finalizer are gone, and
//! every wait for a cycle (`collect`, pacing, a stop the gate keeps a call
//! out for, the join of the coordinator when the last handle drops) waited
//! for ever in the child.
//!
//! A `pthread_atfork` child handler counts the forks of the process; each
//! runtime notes the count when it is built. In a later child the count
//! differs: `mutate`, `attach`, `collect`, `wait_for_cycle` and
//! `wait_for_drops` panic with a message saying so, before they take any
//! of the runtime's locks (another thread may have held one at the fork,
//! for ever in the child), and dropping the runtime's last handle or a
//! mutator leaks what they own instead of waiting for the collector. The
//! heap itself stays usable in the child (`loam_heap`'s own handlers): a
//! child may build a runtime of its own. The JVM and Go do not carry
//! their collectors across `fork` either; `exec` is the way out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Forks of this process so far, as the children count them: a process
/// sees the count of its own lineage.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// In the child, the one thread left: no lock, one atomic add
/// (async-signal-safe, as a child handler must be).
extern "C" fn child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// The fork count, for a runtime being built; registers the handler first,
/// once per process.
pub(crate) fn generation() -> u64 {
    static INSTALLED: Once = Once::new();
    #[cfg(unix)]
    INSTALLED.call_once(|| {
        // SAFETY: `child` is an `extern "C" fn()` that touches one atomic.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(child)) };
        // It fails only without memory for the registration: a child then
        // hangs where it waits for a cycle, as before.
        debug_assert_eq!(rc, 0, "loam: pthread_atfork failed");
    });
    FORKS.load(Ordering::Relaxed)
}

/// Whether this process is a child forked after the runtime whose count
/// was `born` was built.
#[inline]
pub(crate) fn since(born: u64) -> bool {
    FORKS.load(Ordering::Relaxed) != born
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
