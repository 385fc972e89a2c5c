//! Remote frees, the owner's side: its [`Inbox`] of multi-producer,
//! single-consumer queues (chains of blocks in [`RemoteQueue`] lanes, a
//! sweeper's page runs in a [`RunQueue`], and the freed runs of
//! `freed_run.rs`), and the routing rules that apply what arrives or
//! forward it to a segment's new owner ([`route_chains`], [`route_runs`]).
//! The senders' batching is `remote_cache.rs`.
//!
//! The queue is a Treiber stack whose consumer only ever takes everything at
//! once (`swap` to null). Producers push a whole pre-linked chain with one CAS;
//! there is no single-element pop, so the ABA problem of lock-free stacks
//! cannot arise: a block is re-pushed only after the consumer has taken it,
//! which moved `head` through null. Order does not matter for frees.

use crate::block::{self, Block};
use crate::freed_run::FreedQueue;
use crate::sync::{AtomicPtr, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::ptr;

/// A lock-free MPSC queue of free blocks addressed to one heap.
///
/// # Invariants
/// Every block reachable from `head` through the blocks' link words was
/// freed exactly once and is owned by the queue until `take_all` returns it.
pub(crate) struct RemoteQueue {
    /// Writers: producers (`push`: Release CAS) and the consumer
    /// (`take_all`: Acquire swap). The CASes form a release sequence, so the
    /// consumer's Acquire swap sees every link written before any push it takes.
    head: CachePadded<AtomicPtr<Block>>,
}

impl RemoteQueue {
    pub(crate) fn new() -> Self {
        Self {
            head: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
        }
    }

    /// Pushes the chain `first ..= last` (linked through the blocks' link words).
    ///
    /// # Safety
    /// The chain is well formed, the caller owns its blocks, and each is a
    /// free block addressed to this queue's heap.
    pub(crate) unsafe fn push(&self, first: *mut Block, last: *mut Block) {
        // SAFETY: `last` is ours until the push publishes it (caller).
        unsafe { push_linked(&self.head, first, |head| block::set_next(last, head)) }
    }

    /// Takes every queued block, as a chain (null when empty). One relaxed
    /// load when empty; one atomic swap otherwise.
    pub(crate) fn take_all(&self) -> *mut Block {
        take_all(&self.head)
    }
}

/// The Treiber push both queues share: `link(head)` writes the current head
/// into the pushed item's link word (which word is the queue's business),
/// then one Release CAS publishes `first`; retried on contention.
///
/// # Safety
/// `link` writes only into blocks the caller owns until the CAS succeeds.
pub(crate) unsafe fn push_linked(
    head: &AtomicPtr<Block>,
    first: *mut Block,
    link: impl Fn(*mut Block),
) {
    let mut h = head.load(Ordering::Relaxed);
    loop {
        link(h);
        match head.compare_exchange_weak(h, first, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => h = now,
        }
    }
}

/// Takes a whole Treiber stack (null when empty): one relaxed load when
/// empty, one Acquire swap otherwise, which sees every link written before
/// the pushes it takes (the CASes form a release sequence).
pub(crate) fn take_all(head: &AtomicPtr<Block>) -> *mut Block {
    if head.load(Ordering::Relaxed).is_null() {
        return ptr::null_mut();
    }
    head.swap(ptr::null_mut(), Ordering::Acquire)
}

/// A heap's incoming *page runs*: each run is a chain of dead blocks of one
/// page, sent whole by a sweeper with one atomic operation, so that the owner
/// can reset a page that the run empties in O(1) instead of walking it.
///
/// Layout: every block's word 0 links to the next block of its run. The
/// first block's word 1 links to the next run, its low bits tagged with the
/// run's [`RunKind`]: one block; or a whole page, every block of a page that
/// had all of them in use, sent without links (the owner resets the page,
/// so it never walks them); or else a linked run whose length is the second
/// block's word 1. Runs therefore need blocks of [`MIN_RUN_BLOCK`] bytes.
/// The stack is a Treiber stack taken whole, as [`RemoteQueue`], with the
/// same argument against ABA.
pub(crate) struct RunQueue {
    head: CachePadded<AtomicPtr<Block>>,
}

/// What a run is, tagged in its first block's word 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunKind {
    /// Linked, length in the second block.
    Linked = 0,
    /// One block.
    Single = 1,
    /// Every block of its page, unlinked.
    WholePage = 2,
}

/// Smallest block a page run can be made of (two words).
pub(crate) const MIN_RUN_BLOCK: usize = 16;

impl RunQueue {
    pub(crate) fn new() -> Self {
        Self {
            head: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
        }
    }

    /// Pushes the run that starts at `run` (its links and length written as
    /// `kind` requires).
    ///
    /// # Safety
    /// The caller owns the run's blocks, of at least [`MIN_RUN_BLOCK`] bytes,
    /// all dead blocks of one page addressed to this queue's heap.
    pub(crate) unsafe fn push(&self, run: *mut Block, kind: RunKind) {
        // SAFETY: `run` is ours until the push publishes it (caller).
        unsafe {
            push_linked(&self.head, run, |head| {
                block::set_word(run, 1, head as usize | kind as usize)
            })
        }
    }

    /// Takes every queued run (null when empty).
    pub(crate) fn take_all(&self) -> *mut Block {
        take_all(&self.head)
    }

    /// Reads run `run`'s link to the next run, its kind and its length (0
    /// for a whole-page run: its page's capacity).
    ///
    /// # Safety
    /// `run` was taken from a queue by the caller.
    pub(crate) unsafe fn header(run: *mut Block) -> (*mut Block, RunKind, usize) {
        // SAFETY: the run is the caller's; its words are as `push` wrote them.
        unsafe {
            let w = block::word(run, 1);
            let next = (w & !3) as *mut Block;
            match w & 3 {
                1 => (next, RunKind::Single, 1),
                // The length is the page's capacity: the caller knows it.
                2 => (next, RunKind::WholePage, 0),
                _ => (next, RunKind::Linked, block::word(block::next(run), 1)),
            }
        }
    }
}

/// Lanes in a heap's [`Inbox`]. Under loom, two keep the models small while
/// still routing across lanes.
#[cfg(not(loom))]
pub(crate) const LANES: usize = 8;
#[cfg(loom)]
pub(crate) const LANES: usize = 2;

/// A heap's incoming remote frees: a few independent [`RemoteQueue`] lanes
/// of block chains, the [`RunQueue`] of a sweeper's page runs, and the
/// [`FreedQueue`] of other threads' freed runs.
///
/// Why lanes: draining walks each queued chain through the blocks' link
/// words, and every link is a cache miss on memory another core last wrote.
/// One chain is a sequence of dependent misses; senders spread their batches
/// over the lanes, and the owner walks the lanes' chains interleaved, so that
/// several misses are in flight at once (measured: the drain was 40% of a
/// single-producer xmalloc run, 92% of it on the link load).
pub(crate) struct Inbox {
    lanes: [RemoteQueue; LANES],
    /// A sweeper's page runs (`FreeBatch::push_page_run`).
    pub(crate) runs: RunQueue,
    /// Other threads' freed runs (`remote_cache.rs`).
    pub(crate) freed: FreedQueue,
}

impl Inbox {
    pub(crate) fn new() -> Self {
        Self {
            lanes: std::array::from_fn(|_| RemoteQueue::new()),
            runs: RunQueue::new(),
            freed: FreedQueue::new(),
        }
    }

    /// Pushes the chain `first ..= last` onto lane `lane % LANES`.
    ///
    /// # Safety
    /// As [`RemoteQueue::push`].
    pub(crate) unsafe fn push(&self, lane: usize, first: *mut Block, last: *mut Block) {
        // SAFETY: forwarded from the caller.
        unsafe { self.lanes[lane % LANES].push(first, last) }
    }

    /// Takes every lane's chain (null where a lane is empty).
    pub(crate) fn take_all(&self) -> [*mut Block; LANES] {
        std::array::from_fn(|i| self.lanes[i].take_all())
    }
}

/// Walks the chains taken from inbox `me`, interleaved (one block of each
/// chain in turn, so that their cache misses overlap): each block whose owner
/// (per `owner_of`) is still `me` goes to `local`; any other block belongs to
/// a segment that was adopted by another heap since it was sent, and goes
/// to `forward` with its new owner's inbox. Returns how many blocks it
/// walked, applied or forwarded. This is the one routing rule behind draining and adoption, and
/// the loom model of the handoff runs it.
///
/// # Safety
/// `chains` came from `me.take_all()` (so their blocks are ours), `owner_of`
/// returns inboxes that live forever, and `local` and `forward` take
/// ownership of a block.
pub(crate) unsafe fn route_chains(
    mut chains: [*mut Block; LANES],
    me: *const Inbox,
    owner_of: impl Fn(*mut Block) -> *const Inbox,
    mut local: impl FnMut(*mut Block),
    mut forward: impl FnMut(*const Inbox, *mut Block),
) -> u64 {
    let mut n = 0;
    loop {
        let mut live = false;
        for chain in chains.iter_mut() {
            let b = *chain;
            if b.is_null() {
                continue;
            }
            live = true;
            // SAFETY: the chain is ours (caller); read the link before the
            // block changes hands.
            *chain = unsafe { block::next(b) };
            let owner = owner_of(b);
            if owner == me {
                local(b);
            } else {
                forward(owner, b);
            }
            n += 1;
        }
        if !live {
            return n;
        }
    }
}

/// Walks a stack of runs taken from one of inbox `me`'s run queues, from
/// `run`: `read` gives a run's header and the next run (read before the run
/// changes hands). Each run whose page's owner (per `owner_of`, given the
/// run's first block) is still `me` goes to `local` with its header; any
/// other run's segment was adopted by another heap since the run was sent,
/// and the run goes on, untouched, to `forward` with the new owner's
/// inbox. The rule of [`route_chains`], for runs; the loom model of the
/// handoff runs it too. Returns how many runs it forwarded.
///
/// # Safety
/// `run` came from the queue `read` reads the headers of, `owner_of`
/// returns inboxes that live forever, and `local` and `forward` take
/// ownership of a run.
pub(crate) unsafe fn route_runs<H: Copy>(
    mut run: *mut Block,
    me: *const Inbox,
    read: impl Fn(*mut Block) -> (H, *mut Block),
    owner_of: impl Fn(*mut Block) -> *const Inbox,
    mut local: impl FnMut(*mut Block, H),
    mut forward: impl FnMut(*const Inbox, *mut Block, H),
) -> u64 {
    let mut forwarded = 0;
    while !run.is_null() {
        let (header, next) = read(run);
        let owner = owner_of(run);
        if owner == me {
            local(run, header);
        } else {
            forward(owner, run, header);
            forwarded += 1;
        }
        run = next;
    }
    forwarded
}

/// Global counters of remote traffic (one relaxed add per batch, not per block).
pub(crate) struct RemoteCounters {
    pub(crate) sent: CachePadded<AtomicU64>,
    pub(crate) drained: CachePadded<AtomicU64>,
    pub(crate) batches: CachePadded<AtomicU64>,
    /// Of `batches`, the freed runs.
    pub(crate) freed_runs: CachePadded<AtomicU64>,
}

#[cfg(not(loom))]
pub(crate) static REMOTE: RemoteCounters = RemoteCounters {
    sent: CachePadded::new(AtomicU64::new(0)),
    drained: CachePadded::new(AtomicU64::new(0)),
    batches: CachePadded::new(AtomicU64::new(0)),
    freed_runs: CachePadded::new(AtomicU64::new(0)),
};

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::remote_cache::RemoteCache;
    use loom::sync::Arc;
    use loom::thread;

    /// Blocks for the model: boxed link words, leaked and reclaimed by hand.
    fn blocks(n: usize) -> Vec<usize> {
        (0..n)
            .map(|_| {
                Box::into_raw(Box::new(Block {
                    next: ptr::null_mut(),
                })) as usize
            })
            .collect()
    }

    fn drain_inbox(q: &Inbox, out: &mut Vec<usize>) {
        for mut b in q.take_all() {
            while !b.is_null() {
                out.push(b as usize);
                // SAFETY: the consumer owns what it took.
                b = unsafe { block::next(b) };
            }
        }
    }

    fn drain_into(q: &RemoteQueue, out: &mut Vec<usize>) {
        let mut b = q.take_all();
        while !b.is_null() {
            out.push(b as usize);
            // SAFETY: the consumer owns what it took.
            b = unsafe { block::next(b) };
        }
    }

    /// Two-word blocks for page runs.
    fn run_blocks(n: usize) -> Vec<usize> {
        (0..n)
            .map(|_| Box::into_raw(Box::new([0usize; 2])) as usize)
            .collect()
    }

    /// Takes every run from `q`: (first block, kind, length, blocks walked).
    fn drain_runs(q: &RunQueue, out: &mut Vec<(usize, RunKind, usize, usize)>) {
        let mut run = q.take_all();
        while !run.is_null() {
            // SAFETY: the consumer owns what it took; runs are as pushed.
            let (next, kind, len) = unsafe { RunQueue::header(run) };
            let mut walked = 0;
            let mut b = run;
            while !b.is_null() {
                walked += 1;
                // SAFETY: as above.
                b = unsafe { block::next(b) };
            }
            out.push((run as usize, kind, len, walked));
            run = next;
        }
    }

    /// Two producers push page runs (a linked run of two blocks, a single
    /// block) while the owner takes runs concurrently: every run arrives once,
    /// with its kind and length intact and its chain walkable.
    #[test]
    fn run_queue_delivers_each_run_once_intact() {
        crate::sync::model(|| {
            let q = Arc::new(RunQueue::new());
            let a = run_blocks(2);
            let b = run_blocks(1);
            let (a0, a1, b0) = (a[0], a[1], b[0]);
            let qa = q.clone();
            let ta = thread::spawn(move || {
                let (f, l) = (a0 as *mut Block, a1 as *mut Block);
                // SAFETY: the producer owns its fresh two-word blocks.
                unsafe {
                    block::set_next(f, l);
                    block::set_next(l, ptr::null_mut());
                    block::set_word(l, 1, 2);
                    qa.push(f, RunKind::Linked);
                }
            });
            let qb = q.clone();
            let tb = thread::spawn(move || {
                // SAFETY: as above.
                unsafe {
                    block::set_next(b0 as *mut Block, ptr::null_mut());
                    qb.push(b0 as *mut Block, RunKind::Single);
                }
            });
            let qc = q.clone();
            let consumer = thread::spawn(move || {
                let mut got = Vec::new();
                drain_runs(&qc, &mut got);
                got
            });
            ta.join().unwrap();
            tb.join().unwrap();
            let mut got = consumer.join().unwrap();
            drain_runs(&q, &mut got);
            got.sort_unstable_by_key(|r| r.0);
            let mut want = vec![(a0, RunKind::Linked, 2, 2), (b0, RunKind::Single, 1, 1)];
            want.sort_unstable_by_key(|r| r.0);
            assert_eq!(got, want, "each run delivered once, intact");
            for p in a.into_iter().chain(b) {
                // SAFETY: allocated above by `run_blocks`, freed once.
                drop(unsafe { Box::from_raw(p as *mut [usize; 2]) });
            }
        });
    }

    /// Two producers push batches (one of two blocks, one of one block) while
    /// a consumer thread drains concurrently; every block is drained exactly
    /// once.
    #[test]
    fn remote_queue_drains_each_block_exactly_once() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
        let seen_in_model = seen.clone();
        crate::sync::model(move || {
            let seen = &seen_in_model;
            let q = Arc::new(RemoteQueue::new());
            let a = blocks(2);
            let b = blocks(1);
            let mut expected: Vec<usize> = a.iter().chain(b.iter()).copied().collect();
            let qa = q.clone();
            let (a0, a1) = (a[0], a[1]);
            let ta = thread::spawn(move || {
                let (f, l) = (a0 as *mut Block, a1 as *mut Block);
                // SAFETY: the producer owns its fresh blocks.
                unsafe {
                    block::set_next(f, l);
                    qa.push(f, l);
                }
            });
            let qb = q.clone();
            let b0 = b[0];
            let tb = thread::spawn(move || {
                // SAFETY: the producer owns its fresh block.
                unsafe { qb.push(b0 as *mut Block, b0 as *mut Block) };
            });
            let qc = q.clone();
            let consumer = thread::spawn(move || {
                let mut got = Vec::new();
                drain_into(&qc, &mut got);
                got
            });
            ta.join().unwrap();
            tb.join().unwrap();
            let mut got = consumer.join().unwrap();
            seen.lock().unwrap().insert(got.len());
            drain_into(&q, &mut got);
            got.sort_unstable();
            expected.sort_unstable();
            assert_eq!(got, expected, "each block drained exactly once");
            for p in expected {
                // SAFETY: leaked by `blocks` above and drained, so ours again.
                drop(unsafe { Box::from_raw(p as *mut Block) });
            }
        });
        // The model must have explored the consumer taking none, one batch
        // and both batches, or it proved little.
        let seen = seen.lock().unwrap();
        assert!(seen.len() >= 3, "explored only {seen:?}");
    }

    /// A sender's cache batches blocks of pages it frees too few of for a run
    /// per destination (one page each here); a flush hands each
    /// batch over with one push, and the consumers see every block once.
    #[test]
    fn remote_cache_batches_per_owner() {
        // Two heaps' queues a page apart, as real heaps are, so they take
        // distinct cache slots in every run (the model must be deterministic).
        #[repr(C, align(4096))]
        struct PageAligned(Inbox);
        #[repr(C, align(8192))]
        struct TwoHeaps(PageAligned, PageAligned);
        crate::sync::model(|| {
            // Built in place on the heap: loom's thread stacks are too small
            // for an 8 KiB temporary.
            let raw = Box::into_raw(Box::<TwoHeaps>::new_uninit()).cast::<TwoHeaps>();
            // SAFETY: `raw` is a fresh allocation for a TwoHeaps; the two
            // queues are its only fields that need initializing.
            let heaps: &'static TwoHeaps = unsafe {
                std::ptr::addr_of_mut!((*raw).0 .0).write(Inbox::new());
                std::ptr::addr_of_mut!((*raw).1 .0).write(Inbox::new());
                &*raw
            };
            let q1 = &heaps.0 .0;
            let q2 = &heaps.1 .0;
            let bs = blocks(3);
            let (h1, h2) = (heaps, heaps);
            let sent = bs.clone();
            let t = thread::spawn(move || {
                let (c1, c2) = (&h1.0 .0, &h2.1 .0);
                let mut cache = RemoteCache::for_thread();
                // SAFETY: the sender owns its blocks; the queues outlive the model.
                unsafe {
                    cache.push(c1, 1, sent[0] as *mut u8, 8);
                    cache.push(c2, 2, sent[1] as *mut u8, 8);
                    cache.push(c1, 3, sent[2] as *mut u8, 8);
                }
                cache.flush();
            });
            let d = heaps;
            let consumer = thread::spawn(move || {
                let mut got = Vec::new();
                drain_inbox(&d.0 .0, &mut got);
                got
            });
            t.join().unwrap();
            let mut got1 = consumer.join().unwrap();
            drain_inbox(q1, &mut got1);
            let mut got2 = Vec::new();
            drain_inbox(q2, &mut got2);
            got1.sort_unstable();
            let mut want1 = vec![bs[0], bs[2]];
            want1.sort_unstable();
            assert_eq!(got1, want1);
            assert_eq!(got2, vec![bs[1]]);
            for p in bs {
                // SAFETY: leaked by `blocks` and drained.
                drop(unsafe { Box::from_raw(p as *mut Block) });
            }
            // SAFETY: every thread using `heaps` has been joined.
            drop(unsafe { Box::from_raw(raw.cast::<std::mem::MaybeUninit<TwoHeaps>>()) });
        });
    }
}
