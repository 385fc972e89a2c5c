//! The writer lock of a collection, biased towards the thread that writes
//! it: that thread takes it with plain stores, and any other thread with
//! a compare-and-swap once the bias is revoked.
//!
//! Readers never take it: every field a reader loads is a barrier cell, so a
//! read racing a write is atomic, word by word, and sees values that were
//! in the collection at some point of the reader's `mutate` call (see the
//! crate docs, "Reads and writes from several threads"). Writers take it so
//! that two threads' changes do not lose each other's.
//!
//! # Why biased
//! Nearly every collection is changed by one thread only. An unbiased lock
//! costs that thread a compare-and-swap per change: 80% of a `GcList::push`
//! loop (7 ns of 8 against `Vec::push`'s 0.6). The bias lets the first
//! thread that writes a collection (its *owner*) take the lock by storing
//! `busy` and checking that the bias still names it, with no
//! read-modify-write; a second thread that wants to write revokes the bias
//! once, and from then on every writer, the owner included, takes the
//! compare-and-swap lock. The JVM's biased locking was the model, with
//! one difference that makes revocation cheap: it revoked at a safepoint,
//! stopping every thread; here the revoker waits only for the owner's
//! operation under way, and finds out whether there is one with an
//! asymmetric fence (`membarrier`), which costs the revoker one system
//! call (9 µs on this 2-core VM) and the owner nothing.
//!
//! # The protocol
//! - `bias`: `UNBIASED` (no writer yet), an owner's token, or `REVOKED`
//!   (shared for good). It moves only forward: `UNBIASED` → token (the
//!   first writer's compare-and-swap) → `REVOKED` (a revoker holding
//!   `shared`).
//! - `busy`: written only by the owner: true from before its check of
//!   `bias` until its operation ends (a release store of false).
//! - `shared`: the compare-and-swap lock, holding the token of its holder.
//! - `owner`: the token that took the bias, kept after the revocation, so
//!   that the owner re-entering from inside its own operation panics
//!   instead of waiting for a revoker that waits for it.
//!
//! Owner: `busy = true`; light fence; if `bias == me` the lock is its own,
//! else `busy = false` and take `shared`. Revoker (holding `shared`):
//! `bias = REVOKED`; heavy fence; wait until `busy` is false (acquire).
//!
//! The owner's store to `busy` and load of `bias`, and the revoker's store
//! to `bias` and load of `busy`, are Dekker's pattern: with a full fence on
//! both sides one of them sees the other's store. The heavy fence
//! (`loam_runtime::fence::heavy`: `membarrier(PRIVATE_EXPEDITED)`) runs a
//! full fence on every thread of the process that is running, and the
//! light fence (a compiler fence)
//! keeps the owner's two accesses in program order, so the pair together
//! is a full fence between them wherever the owner was interrupted. Either
//! the owner sees `REVOKED` (and goes to `shared`, which the revoker
//! holds), or the revoker sees `busy` (and waits for the release store
//! that ends the owner's operation, whose writes it then sees). After the
//! revocation the owner's next check sees `REVOKED`: the revoker's store
//! was visible to every thread before the heavy fence returned.
//!
//! Where `membarrier` is not available (not Linux, an old kernel, or
//! refused), nothing is biased and every writer takes `shared`. A storm of
//! revocations (lists made on one thread and written by another, over and
//! over) turns biasing off for a second, so that the system calls stay a
//! small share of the time (`fences::heavy`); collections first written in
//! that second stay unbiased.
//!
//! The loom models (`tests`) check the protocol with both fences
//! as sequentially consistent fences, which is what the pair guarantees.
//!
//! # Re-entrance
//! A collection changed from inside one of its own callbacks (a `sort_by`
//! comparator, a `retain` predicate, a key's `Hash` impl) would wait for
//! itself; the owner's `busy`, and `shared`'s holder token, turn that into
//! a panic that says so. A writer holds the lock only for one operation
//! (or one `ListWriter`), which waits for the collector at most at the heap
//! limit, for a ragged cycle that gives up when its end is stuck on a call
//! (a call waiting for this lock, say: `loam-runtime`'s
//! `wait_for_ragged_cycle`). So waiting spins, then yields, then naps
//! (`backoff`); that end takes a napping waiter for a running one and
//! gives up on it after its running patience (250 ms), as for a spinning
//! one.

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// No thread has written the collection yet.
const UNBIASED: usize = 0;
/// The bias is gone: every writer takes `shared`.
const REVOKED: usize = 1;

/// A collection's writer lock.
#[derive(Debug)]
pub(crate) struct WriterLock {
    bias: AtomicUsize,
    /// The token that took the bias, kept after a revocation: read only by
    /// the thread it names, to tell re-entrance from contention.
    owner: AtomicUsize,
    busy: AtomicBool,
    shared: AtomicUsize,
}

impl Default for WriterLock {
    fn default() -> Self {
        WriterLock {
            bias: AtomicUsize::new(UNBIASED),
            owner: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            shared: AtomicUsize::new(0),
        }
    }
}

/// The calling thread's token: the address of one of its thread locals,
/// 8-aligned (never `UNBIASED` or `REVOKED`) and distinct between live
/// threads. A thread that starts after another exits may get the same
/// token, and so inherit its biases: the exited thread is in no
/// operation, and the release store of `busy` that ended its last one is
/// what the new thread's acquire load of `busy` reads.
#[inline]
fn token() -> usize {
    #[cfg(not(loom))]
    {
        thread_local!(static TOKEN: u64 = const { 0 });
        TOKEN.with(|t| t as *const u64 as usize)
    }
    #[cfg(loom)]
    {
        // loom threads share the OS thread: number them instead.
        loom::thread_local!(static TOKEN: usize = {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) * 8
        });
        TOKEN.with(|t| *t)
    }
}

#[cold]
#[inline(never)]
fn reentered(what: &'static str) -> ! {
    panic!(
        "loam-collections: a {what} was changed from inside one of its own \
         callbacks (a comparator, predicate, or Hash or Eq impl), or while this \
         thread holds its writer"
    );
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
        if self.bias.load(Ordering::Relaxed) == me {
            // Acquire: a thread that inherited this token (see `token`)
            // sees the last operation of the one that had it.
            if self.busy.load(Ordering::Acquire) {
                reentered(what);
            }
            self.busy.store(true, Ordering::Relaxed);
            fences::light();
            if self.bias.load(Ordering::Relaxed) == me {
                return WriterGuard {
                    lock: self,
                    biased: true,
                };
            }
            self.busy.store(false, Ordering::Release);
        }
        self.lock_slow(me, what)
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self, me: usize, what: &'static str) -> WriterGuard<'_> {
        loop {
            match self.bias.load(Ordering::Relaxed) {
                UNBIASED if fences::biasing() => {
                    if self
                        .bias
                        .compare_exchange(UNBIASED, me, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        self.owner.store(me, Ordering::Relaxed);
                        // Ours now; take it as its owner does (a revoker
                        // may already be at work).
                        return self.lock(what);
                    }
                }
                owner if owner == me => return self.lock(what),
                _ => break,
            }
        }
        // The owner inside one of its operations, after a revocation: it
        // would wait for `shared`, whose holder waits for it.
        if self.owner.load(Ordering::Relaxed) == me && self.busy.load(Ordering::Relaxed) {
            reentered(what);
        }
        self.lock_shared(me, what);
        // Revoke another thread's bias (or the chance of one, with biasing
        // off) while holding `shared`, so that no other revoker or shared
        // writer runs before the owner is out. A compare-and-swap: a first
        // writer may take the bias between the load and the store.
        let mut bias = self.bias.load(Ordering::Relaxed);
        while bias != REVOKED {
            match self
                .bias
                .compare_exchange(bias, REVOKED, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) if bias == UNBIASED => break, // there never was an owner
                Ok(_) => {
                    fences::heavy();
                    let mut spins = 0_u32;
                    while self.busy.load(Ordering::Acquire) {
                        backoff(&mut spins);
                    }
                    break;
                }
                Err(now) => bias = now,
            }
        }
        WriterGuard {
            lock: self,
            biased: false,
        }
    }

    /// Takes `shared`, with `backoff` between tries.
    fn lock_shared(&self, me: usize, what: &'static str) {
        let mut spins = 0_u32;
        loop {
            match self
                .shared
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(held) if held == me => reentered(what),
                Err(_) => backoff(&mut spins),
            }
        }
    }
}

/// Spins, then yields, then sleeps 50 µs at a time, which spares the CPU
/// a writer that is descheduled, or waits at the heap limit, needs.
fn backoff(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    if *spins <= 64 {
        std::hint::spin_loop();
    } else if *spins <= 128 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// Holds a [`WriterLock`]; releases it when dropped, a panic included.
pub(crate) struct WriterGuard<'a> {
    lock: &'a WriterLock,
    biased: bool,
}

impl<'a> WriterGuard<'a> {
    /// A copy of this guard, for a cold path that needs a guard of its own
    /// for a moment while this one holds the lock. Dropping the copy would
    /// release the lock under this guard, so the caller never drops it.
    ///
    /// # Safety
    /// This guard outlives the result, and the result is never dropped
    /// (forgotten, or kept in a `ManuallyDrop` that is never dropped).
    // Always inlined: a `ListWriter`'s push loop keeps its state in
    // registers only while no call takes the address of any of its parts.
    #[inline(always)]
    pub(crate) unsafe fn second(&self) -> Self {
        WriterGuard {
            lock: self.lock,
            biased: self.biased,
        }
    }
}

impl Drop for WriterGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.biased {
            self.lock.busy.store(false, Ordering::Release);
        } else {
            self.lock.shared.store(0, Ordering::Release);
        }
    }
}

/// The asymmetric fence pair (`loam_runtime::fence`), and whether biasing
/// is on.
mod fences {
    pub(super) use loam_runtime::fence::light;
    #[cfg(not(loom))]
    pub(super) use real::*;

    #[cfg(loom)]
    pub(super) use loam_runtime::fence::heavy;

    #[cfg(loom)]
    loom::thread_local!(pub(super) static BIASING: std::cell::Cell<bool> = std::cell::Cell::new(true));

    /// Under loom, per thread, so that a model can have one thread find
    /// biasing off (a revocation storm) while another takes a bias.
    #[cfg(loom)]
    pub(super) fn biasing() -> bool {
        BIASING.with(|b| b.get())
    }

    #[cfg(not(loom))]
    mod real {
        use loam_runtime::fence;
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::time::Instant;

        /// Revocations in the current window, and when it began (ms since
        /// `now_ms`'s epoch); past `STORM` in one window, biasing is off
        /// until `OFF_UNTIL` (0: on). One word, so that no reader can pair
        /// a new "off" with an old deadline.
        static WINDOW_START: AtomicU64 = AtomicU64::new(0);
        static IN_WINDOW: AtomicU64 = AtomicU64::new(0);
        static OFF_UNTIL: AtomicU64 = AtomicU64::new(0);
        /// 100 revocations in 100 ms is about 1 ms of system calls: 1% of
        /// a CPU.
        const WINDOW_MS: u64 = 100;
        const STORM: u64 = 100;
        const OFF_MS: u64 = 1000;

        fn now_ms() -> u64 {
            static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
            EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
        }

        /// Every thread's full fence, before the revoker reads `busy`
        /// (`fence::available`: `biasing` checked it before any bias was
        /// set); counts the revocation towards a storm.
        pub(crate) fn heavy() {
            fence::heavy();
            let now = now_ms();
            let start = WINDOW_START.load(Ordering::Relaxed);
            if now.saturating_sub(start) >= WINDOW_MS {
                WINDOW_START.store(now, Ordering::Relaxed);
                IN_WINDOW.store(1, Ordering::Relaxed);
            } else if IN_WINDOW.fetch_add(1, Ordering::Relaxed) + 1 >= STORM {
                OFF_UNTIL.store(now + OFF_MS, Ordering::Relaxed);
            }
        }

        /// Whether a first writer may take the bias now.
        #[inline]
        pub(crate) fn biasing() -> bool {
            let until = OFF_UNTIL.load(Ordering::Relaxed);
            if until != 0 {
                if now_ms() < until {
                    return false;
                }
                // Back on, unless another storm set a new deadline since.
                let _ = OFF_UNTIL.compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
            fence::available()
        }
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// A lock and the counter it guards, shared by a model's threads.
    #[derive(Clone)]
    struct Guarded(Arc<(WriterLock, UnsafeCell<u32>)>);

    impl Guarded {
        fn new() -> Self {
            Guarded(Arc::new((WriterLock::default(), UnsafeCell::new(0))))
        }

        /// One operation under the lock.
        fn bump(&self) {
            let _g = self.0 .0.lock("model");
            // SAFETY: the lock is held; loom checks that no two accesses
            // overlap, which is what the models test.
            self.0 .1.with_mut(|c| unsafe { *c += 1 });
        }

        /// The count, once every other thread is joined.
        fn count(&self) -> u32 {
            // SAFETY: the model's other threads were joined (no access
            // overlaps; loom checks it).
            self.0 .1.with(|c| unsafe { *c })
        }
    }

    /// Two writers, one of them the owner: every operation runs alone and
    /// none is lost.
    #[test]
    fn model() {
        loom::model(|| {
            let g = Guarded::new();
            g.bump(); // the owner: takes the bias with its first write
            let other = {
                let g = g.clone();
                loom::thread::spawn(move || g.bump())
            };
            g.bump();
            g.bump();
            other.join().unwrap();
            assert_eq!(g.count(), 4);
            assert_eq!(g.0 .0.bias.load(Ordering::Relaxed), REVOKED);
        });
    }

    /// Two first writers race for the bias: one takes it, the other
    /// revokes it (the compare-and-swap that revokes must not overwrite a
    /// bias taken after its load), and operations still never overlap.
    #[test]
    fn model_first_writers() {
        loom::model(|| {
            let g = Guarded::new();
            let other = {
                let g = g.clone();
                loom::thread::spawn(move || {
                    g.bump();
                    g.bump();
                })
            };
            g.bump();
            g.bump();
            other.join().unwrap();
            assert_eq!(g.count(), 4);
        });
    }

    /// One writer finds biasing off (it goes to `shared` and marks the lock
    /// revoked) while another takes the bias in between.
    #[test]
    fn model_biasing_off_on_one_thread() {
        loom::model(|| {
            let g = Guarded::new();
            let other = {
                let g = g.clone();
                loom::thread::spawn(move || {
                    fences::BIASING.with(|b| b.set(false));
                    g.bump();
                })
            };
            g.bump();
            g.bump();
            other.join().unwrap();
            assert_eq!(g.count(), 3);
        });
    }
}
