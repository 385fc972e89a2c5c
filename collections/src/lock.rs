//! The writer lock of a collection: one word, the token of the thread that
//! holds it (0: free).
//!
//! Readers never take it: every field a reader loads is a barrier cell, so a
//! read racing a write is atomic, word by word, and sees values that were
//! in the collection at some point of the reader's `mutate` call (see the
//! crate docs, "Reads and writes from several threads"). Writers take it so
//! that two threads' changes do not lose each other's.
//!
//! Why not `parking_lot::Mutex`: its unlock is a compare-and-swap, a second
//! atomic read-modify-write on every push; this one releases with a plain
//! store. Why a thread token rather than a flag: a collection changed from
//! inside one of its own callbacks (a `sort_by` comparator, a `retain`
//! predicate, a key's `Hash` impl) would wait for itself; the token turns
//! that into a panic that says so. A writer holds the lock only for one
//! operation, which never waits for the collector, so waiting spins, then
//! yields.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A collection's writer lock.
#[derive(Debug, Default)]
pub(crate) struct WriterLock {
    owner: AtomicUsize,
}

/// The calling thread's token: the address of one of its thread locals,
/// never 0 and distinct between live threads.
#[inline]
fn token() -> usize {
    thread_local!(static TOKEN: u8 = const { 0 });
    TOKEN.with(|t| t as *const u8 as usize)
}

impl WriterLock {
    /// Takes the lock for the calling thread.
    ///
    /// # Panics
    /// If the calling thread holds it already: `what` (the collection's
    /// name) is being changed from inside one of its own callbacks.
    #[inline]
    pub(crate) fn lock(&self, what: &'static str) -> WriterGuard<'_> {
        let me = token();
        if let Err(held) = self
            .owner
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        {
            self.lock_slow(me, held, what);
        }
        WriterGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self, me: usize, mut held: usize, what: &'static str) {
        let mut spins = 0_u32;
        loop {
            if held == me {
                panic!(
                    "loam-collections: a {what} was changed from inside one of its own \
                     callbacks (a comparator, predicate, or Hash or Eq impl), or while this \
                     thread holds its writer"
                );
            }
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            spins = spins.saturating_add(1);
            match self
                .owner
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => held = h,
            }
        }
    }
}

/// Holds a [`WriterLock`]; releases it when dropped, a panic included.
pub(crate) struct WriterGuard<'a> {
    lock: &'a WriterLock,
}

impl Drop for WriterGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.lock.owner.store(0, Ordering::Release);
    }
}
