//! Asymmetric fences: a full fence between two accesses of a hot path paid
//! for by the rare side.
//!
//! Dekker's pattern (each side stores its flag, then loads the other's)
//! needs a full fence on both sides, between the store and the load: with
//! either missing, both loads may miss both stores (the store buffer).
//! When one side runs millions of times a second (a collection's owner
//! taking its biased lock) and the other seldom (revoking the bias), the
//! hot side
//! can leave the hardware fence to the rare one:
//!
//! - [`light`] on the hot side is a compiler fence: it keeps the store and
//!   the load in program order, and costs nothing.
//! - [`heavy`] on the rare side is `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`:
//!   the kernel runs a full fence on every CPU running a thread of this
//!   process, and a thread that is not running passes one as it is
//!   switched in. Its own thread fences on entry and on return.
//!
//! Together they are a sequentially consistent fence pair: wherever the
//! hot thread was when the heavy fence reached it, either before its store
//! (then its load follows the heavy fence, and sees what the rare side
//! stored before it) or after (then its store precedes the heavy fence's
//! return, and the rare side's later loads see it). That is how the loom
//! models check the protocols that use them: both as `SeqCst` fences.
//!
//! The heavy fence needs Linux 4.14 and a registration, which [`available`]
//! makes once per process; where it is refused (another OS, an old kernel,
//! a seccomp filter), [`available`] is false, and the caller takes the
//! path that needs no asymmetric fence. `heavy` costs the caller one
//! system call (about 9 µs on a 2-core VM, most of it the other CPUs'
//! interrupts), so it belongs on paths that run at most a few hundred
//! times a second.
//!
//! # Examples
//! Dekker's pattern: at least one side sees the other's store.
//! ```
//! use loam_runtime::fence;
//! use std::sync::atomic::{AtomicBool, Ordering};
//!
//! static HOT: AtomicBool = AtomicBool::new(false);
//! static RARE: AtomicBool = AtomicBool::new(false);
//!
//! if fence::available() {
//!     let hot = std::thread::spawn(|| {
//!         HOT.store(true, Ordering::Relaxed);
//!         fence::light();
//!         RARE.load(Ordering::Relaxed)
//!     });
//!     RARE.store(true, Ordering::Relaxed);
//!     fence::heavy();
//!     let saw_hot = HOT.load(Ordering::Relaxed);
//!     let saw_rare = hot.join().unwrap();
//!     assert!(saw_hot || saw_rare);
//! }
//! ```

#[cfg(not(loom))]
pub use real::*;

/// Under loom: both fences are `SeqCst` fences, which is what the pair
/// guarantees together (module docs).
#[cfg(loom)]
pub fn light() {
    loom::sync::atomic::fence(loom::sync::atomic::Ordering::SeqCst);
}

/// Under loom: as [`light`].
#[cfg(loom)]
pub fn heavy() {
    loom::sync::atomic::fence(loom::sync::atomic::Ordering::SeqCst);
}

#[cfg(loom)]
std::thread_local! {
    /// Whether the models run with the pair (the default) or as a system
    /// without `membarrier` would (`without_pair`). A thread local of the
    /// test's thread, which loom's threads share.
    static PAIR: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Under loom the pair is there, unless a model runs [`without_pair`].
#[cfg(loom)]
pub fn available() -> bool {
    PAIR.with(|p| p.get())
}

/// Under loom: runs `f` (a model) with [`available`] false, so that the
/// protocols take their path for systems without the pair.
#[cfg(all(loom, test))]
pub(crate) fn without_pair<R>(f: impl FnOnce() -> R) -> R {
    struct Back;
    impl Drop for Back {
        fn drop(&mut self) {
            PAIR.with(|p| p.set(true));
        }
    }
    PAIR.with(|p| p.set(false));
    let _back = Back;
    f()
}

#[cfg(not(loom))]
mod real {
    use std::sync::atomic::{compiler_fence, AtomicU8, Ordering};

    /// The hot side: keeps the accesses before it before those after it in
    /// program order; a [`heavy`] fence on another thread supplies the
    /// hardware fence (module docs).
    #[inline(always)]
    pub fn light() {
        compiler_fence(Ordering::SeqCst);
    }

    /// The rare side: a full fence on every thread of the process (module
    /// docs), for a caller that saw [`available`] true.
    ///
    /// # Panics
    /// If the heavy fence is not [`available`]: a caller that went on
    /// would race the hot side unfenced.
    pub fn heavy() {
        assert!(
            available(),
            "loam: fence::heavy called where membarrier is not available (check fence::available first)"
        );
        #[cfg(target_os = "linux")]
        {
            // Registered, it fails only for want of the kernel's memory
            // for a CPU mask (`ENOMEM`, with off-stack CPU masks) or on a
            // signal: tried again, for up to ten seconds. Any other failure,
            // or memory that never comes back, and no hot side could be
            // trusted: stop the process rather than race.
            let start = std::time::Instant::now();
            loop {
                // `membarrier` takes no pointers; this process is
                // registered for it (`available`, just checked).
                // SAFETY: as just said.
                let r = unsafe {
                    libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0)
                };
                if r == 0 {
                    break;
                }
                let e = std::io::Error::last_os_error();
                let again = matches!(e.raw_os_error(), Some(libc::ENOMEM | libc::EINTR));
                if !again || start.elapsed() > std::time::Duration::from_secs(10) {
                    crate::collector::fatal(&format!("membarrier failed after registration: {e}"));
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }

    #[cfg(target_os = "linux")]
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    #[cfg(target_os = "linux")]
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    /// Whether [`heavy`] works in this process: asked (and registered) the
    /// first time, then the same answer for the life of the process, to
    /// every thread (the first answer stored wins: a protocol whose two
    /// sides ask separately must not hear two answers).
    pub fn available() -> bool {
        // 0 not asked, 1 yes, 2 no.
        static STATE: AtomicU8 = AtomicU8::new(0);
        match STATE.load(Ordering::Acquire) {
            1 => true,
            2 => false,
            _ => {
                #[cfg(target_os = "linux")]
                // SAFETY: as in `heavy`; registering twice (two threads
                // asking at once) is harmless.
                let ok = unsafe {
                    libc::syscall(
                        libc::SYS_membarrier,
                        MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                        0,
                        0,
                    )
                } == 0;
                #[cfg(not(target_os = "linux"))]
                let ok = false;
                let answer = if ok { 1 } else { 2 };
                match STATE.compare_exchange(0, answer, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => ok,
                    Err(first) => first == 1,
                }
            }
        }
    }
}
