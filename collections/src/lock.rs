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
//!   `shared`), except that the owner, inside an operation that runs its
//!   caller's code, sets `CALLING_OUT` beside its token and clears it
//!   before the operation ends, both by compare-and-swap (see
//!   "Re-entrance"); a revoker replaces either value.
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
//! a panic that says so. The owner's `lock` loads `busy` to find out;
//! `GcList::push`, the one operation a program calls millions of times in
//! a row, skips that load (`try_lock_leaf`), which is sound because only
//! code a caller passes can re-enter (only it holds a `Mutation`), and the
//! list's operations that run such code mark the bias while they do
//! (`lock_for_callbacks`): a push from inside them misses the fast path
//! and panics in `lock_slow`. Other collections have no such operation,
//! and check in `lock` always.
//!
//! A writer holds the lock only for one operation
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
/// Set in `bias` beside the owner's token while the owner runs its
/// caller's code under the lock (`lock_for_callbacks`): the owner's own
/// fast paths then fail, and an operation re-entered from that code finds
/// the lock its own in `lock_slow`.
const CALLING_OUT: usize = 2;

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
/// 8-aligned (never `UNBIASED` or `REVOKED`, nor with `CALLING_OUT` set)
/// and distinct between live threads. Computed from the thread pointer
/// and a constant, so a push loop keeps it in a register: a token loaded
/// from a thread local (a counter's, unique for good) made a million
/// pushes 0.1 ms slower, as much as the check `try_lock_leaf` saves.
///
/// A thread that starts after another exits may get the same token, and
/// so inherit its biases and take them on its fast path, with no acquire
/// of its own. It sees the exited thread's operations all the same:
/// memory is reused only after its last user is done with it, whoever
/// hands it out (the thread library's stack cache for a thread's static
/// TLS, the allocator for a dynamic block), or ordinary code that writes
/// reused memory would race its previous user's writes. The exited
/// thread's last operation came before it gave up its thread locals (its
/// exit, or a thread that saw it end frees them), and the new thread's
/// first after they were handed out again.
#[inline]
fn token() -> usize {
    #[cfg(not(loom))]
    {
        /// 8-aligned on every target (a `u64` is 4-aligned on some).
        #[repr(align(8))]
        struct Token(#[allow(dead_code)] u8);
        thread_local!(static TOKEN: Token = const { Token(0) });
        TOKEN.with(|t| t as *const Token as usize)
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
            if self.busy.load(Ordering::Relaxed) {
                reentered(what);
            }
            if let Some(guard) = self.lock_biased(me) {
                return guard;
            }
        }
        self.lock_slow(me, what)
    }

    /// The owner's fast path of [`lock`](Self::lock), for an operation
    /// that runs none of its caller's code while it holds the lock (a
    /// `GcList::push`), without `lock`'s check that the owner is not inside
    /// an operation already (a load, a test and a branch: 0.1 ms of a
    /// million pushes' 1.7). `None` if the caller does not hold the bias,
    /// or a revoker took it: the caller then takes the lock with `lock`.
    /// The guard is always the owner's, so the caller's release is known
    /// at compile time (a test and a branch fewer a push).
    ///
    /// Only code its caller passed (a callback, an iterator, their drop
    /// glue, or the code between the making and the dropping of a writer)
    /// can re-enter an operation, as only that code can hold the
    /// `Mutation` every change takes (`mutate` calls do not nest, and no
    /// managed object can hold a `&Mutation`, so no `Drop` or `Trace` impl
    /// the collector runs can reach one). The operations of this lock's
    /// collection that run such code take the lock with
    /// [`lock_for_callbacks`](Self::lock_for_callbacks), so that an
    /// operation entered from it finds the bias marked, misses this fast
    /// path, and panics in `lock_slow`.
    ///
    /// # Safety
    /// Every operation on this lock's collection that runs its caller's
    /// code (or its drop glue) while it holds the lock took it with
    /// `lock_for_callbacks`, and the caller's operation runs none.
    /// Otherwise a leaf operation entered from that code would take the
    /// lock while the outer one holds it, and let `busy` go under it.
    #[inline(always)]
    pub(crate) unsafe fn try_lock_leaf(&self) -> Option<WriterGuard<'_>> {
        let me = token();
        if self.bias.load(Ordering::Relaxed) == me {
            debug_assert!(
                !self.busy.load(Ordering::Relaxed),
                "a leaf operation entered from inside an operation on its \
                 collection that did not mark the bias"
            );
            return self.lock_biased(me);
        }
        None
    }

    /// [`lock`](Self::lock) for an operation that runs its caller's code
    /// while it holds the lock: a comparator, a predicate, an iterator, or
    /// whatever runs while a `ListWriter` lives. A biased owner sets
    /// `CALLING_OUT` in `bias` until the guard is dropped, so that every
    /// operation on this lock entered from that code misses the fast
    /// paths (`try_lock_leaf`'s included) and panics in `lock_slow`.
    ///
    /// # Panics
    /// As [`lock`](Self::lock).
    #[inline(always)]
    pub(crate) fn lock_for_callbacks(&self, what: &'static str) -> WriterGuard<'_> {
        let mut guard = self.lock(what);
        if guard.held == Held::Biased {
            let me = token();
            // Relaxed: the operations are ordered by `busy` and the
            // fences, as ever; this only changes which path the owner's
            // own later loads of `bias` take (its program order), or fails
            // because a revoker set `REVOKED`, which misses the fast paths
            // as well. A revoker's compare-and-swap may find either value.
            if self
                .bias
                .compare_exchange(me, me | CALLING_OUT, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                guard.held = Held::CallingOut;
            }
        }
        guard
    }

    /// A guard's release but the biased owner's plain one: `shared`'s, or
    /// the owner's after `lock_for_callbacks`, which first clears the
    /// mark (unless a revoker took the bias meanwhile: then its store
    /// stays).
    #[inline(never)]
    fn release_other(&self, held: Held) {
        if held == Held::CallingOut {
            let me = token();
            let _ = self.bias.compare_exchange(
                me | CALLING_OUT,
                me,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            self.busy.store(false, Ordering::Release);
        } else {
            self.shared.store(0, Ordering::Release);
        }
    }

    /// The owner's take of its biased lock: `busy`, the light fence, and
    /// the check that the bias is still `me`; `None` (and `busy` let go)
    /// if a revoker took it.
    #[inline(always)]
    fn lock_biased(&self, me: usize) -> Option<WriterGuard<'_>> {
        self.busy.store(true, Ordering::Relaxed);
        fences::light();
        if self.bias.load(Ordering::Relaxed) == me {
            return Some(WriterGuard {
                lock: self,
                held: Held::Biased,
            });
        }
        self.busy.store(false, Ordering::Release);
        None
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
        // The owner inside one of its operations: one that calls out
        // (`CALLING_OUT`), or any after a revocation. It would wait for
        // `shared`, whose holder waits for it.
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
            held: Held::Shared,
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
    held: Held,
}

/// How a [`WriterGuard`] holds its lock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Through `shared`.
    Shared,
    /// By the owner, through `busy`.
    Biased,
    /// By the owner, through `busy`, with `CALLING_OUT` set in `bias`
    /// (`lock_for_callbacks`): cleared before `busy` is let go, so an
    /// owner out of its operations never leaves the mark.
    CallingOut,
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
            held: self.held,
        }
    }
}

impl Drop for WriterGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // The owner's plain release inline, the rest out of line: every
        // push ends here.
        if self.held == Held::Biased {
            self.lock.busy.store(false, Ordering::Release);
        } else {
            self.lock.release_other(self.held);
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

        /// One operation that runs no caller's code, as `GcList::push`
        /// takes it: the owner's leaf fast path, else `lock`.
        fn bump_leaf(&self) {
            // SAFETY: the model's operations that call out take
            // `lock_for_callbacks`.
            let _g = match unsafe { self.0 .0.try_lock_leaf() } {
                Some(g) => g,
                None => self.0 .0.lock("model"),
            };
            // SAFETY: as in `bump`.
            self.0 .1.with_mut(|c| unsafe { *c += 1 });
        }

        /// One operation that calls out (`lock_for_callbacks`), whose
        /// "callback" tries the leaf fast path: it must not get the lock.
        fn bump_calling_out(&self) {
            let _g = self.0 .0.lock_for_callbacks("model");
            assert!(
                // SAFETY: as in `bump_leaf`; this is the re-entrance the
                // mark must refuse.
                unsafe { self.0 .0.try_lock_leaf() }.is_none(),
                "a leaf operation re-entered from a callback took the lock"
            );
            // SAFETY: as in `bump`.
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

    /// The owner's leaf operations (no re-entrance check) against a
    /// revoker: every operation runs alone and none is lost.
    #[test]
    fn model_leaf() {
        loom::model(|| {
            let g = Guarded::new();
            g.bump_leaf(); // takes the bias (through `lock`)
            let other = {
                let g = g.clone();
                loom::thread::spawn(move || g.bump_leaf())
            };
            g.bump_leaf();
            g.bump_leaf();
            other.join().unwrap();
            assert_eq!(g.count(), 4);
            assert_eq!(g.0 .0.bias.load(Ordering::Relaxed), REVOKED);
        });
    }

    /// The owner's operation that calls out, marking its bias, against a
    /// revoker that may come before the mark, between the mark and its
    /// clearing, or after: the owner's leaf path never takes the lock
    /// inside it, operations never overlap, and the revoker's `REVOKED`
    /// survives the clearing of the mark.
    #[test]
    fn model_calling_out() {
        loom::model(|| {
            let g = Guarded::new();
            g.bump(); // takes the bias
            let other = {
                let g = g.clone();
                loom::thread::spawn(move || g.bump())
            };
            g.bump_calling_out();
            g.bump_leaf();
            other.join().unwrap();
            assert_eq!(g.count(), 4);
            assert_eq!(g.0 .0.bias.load(Ordering::Relaxed), REVOKED);
        });
    }

    /// A leaf operation inside an operation that calls out, with no other
    /// thread: the owner's fast path is shut while the mark is set, and
    /// open again once it is cleared.
    #[test]
    fn model_calling_out_alone() {
        loom::model(|| {
            let g = Guarded::new();
            g.bump();
            g.bump_calling_out();
            let lock = &g.0 .0;
            assert_eq!(
                lock.bias.load(Ordering::Relaxed) & CALLING_OUT,
                0,
                "the mark is cleared"
            );
            // SAFETY: as in `bump_leaf`.
            let open = unsafe { lock.try_lock_leaf() }.is_some();
            assert!(open, "the fast path is open again");
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
