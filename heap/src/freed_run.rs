//! Freed runs: blocks of one page that another thread freed, sent to the
//! page's owner as one message ([`FreedQueue`], in its inbox), which the
//! owner splices onto the page's free list in O(1) without reading the
//! blocks between: each read would be a cache miss on memory the sender
//! wrote last. (Walking every returned block was 21% of a single-producer
//! xmalloc run, 88% of that on the link load.) snmalloc's message per slab
//! is the model. The sender's side is `remote_cache.rs`.
//!
//! # Layout
//! A run is a chain `first → second → … → tail` of two blocks or more,
//! all starting in one [`RUN_SPAN`] (a slice, which belongs to one page),
//! that uses only the blocks' word 0, so a block of any size, 8 bytes
//! included, can be in one, and the freed tag that checked builds keep
//! in word 1 stays where it is:
//! - `first`'s word 0: the next run on the queue (a raw address below
//!   2^48) and, above bit 48, the index of `second` in the span;
//! - `second`'s word 0: the indices of the third block (`NONE` for a run
//!   of two) and of the tail, and above bit 32 the run's length;
//! - the third block on: linked as free lists are; the tail's link null.
//!
//! An index is a block's offset in its span in 8-byte units (every block is
//! 8-byte aligned), 13 bits for a 64 KiB span. The owner rewrites the two
//! header words as links when it splices the run.
//!
//! The queue is a Treiber stack taken whole, as `RemoteQueue`, with the
//! same argument against ABA.

use crate::block::{self, Block};
use crate::sync::AtomicPtr;
use crossbeam_utils::CachePadded;
use std::ptr;

/// Every block of a run starts in one span of this size, aligned to it: a
/// slice of a segment.
pub(crate) const RUN_SPAN: usize = 1 << 16;

#[cfg(not(loom))]
const _: () = assert!(RUN_SPAN == crate::segment::SLICE_SIZE);
const _: () = assert!(usize::BITS == 64, "a run's header packs 64-bit words");

/// Index bits: a span's 8-byte units.
const INDEX_MASK: usize = 0xFFFF;
const _: () = assert!(RUN_SPAN / 8 <= INDEX_MASK);
/// The third block's index in a run of two.
const NONE: usize = INDEX_MASK;
const ADDRESS_BITS: u32 = 48;
const ADDRESS_MASK: usize = (1 << ADDRESS_BITS) - 1;

/// `p`'s index in its span.
#[inline(always)]
fn index_of(p: *mut Block) -> usize {
    (p as usize & (RUN_SPAN - 1)) >> 3
}

/// The block at index `i` of the span holding `p`.
#[inline(always)]
fn at(p: *mut Block, i: usize) -> *mut Block {
    ((p as usize & !(RUN_SPAN - 1)) + (i << 3)) as *mut Block
}

/// Whether a run can start at `first`: its address must fit the header's
/// link field (every user-space address on the platforms served does).
#[inline(always)]
pub(crate) fn can_head(first: *mut Block) -> bool {
    (first as usize) >> ADDRESS_BITS == 0
}

/// A run as its header describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreedRun {
    pub(crate) first: *mut Block,
    second: *mut Block,
    /// Null in a run of two.
    third: *mut Block,
    pub(crate) tail: *mut Block,
    pub(crate) len: usize,
}

impl FreedRun {
    /// Writes the header into the chain `first ..= tail` of `len >= 2`
    /// blocks (linked as free lists are) and returns the run, ready to
    /// push.
    ///
    /// # Safety
    /// The chain is well formed and the caller's; its blocks start in one
    /// [`RUN_SPAN`]; `len < 2^32`.
    pub(crate) unsafe fn seal(first: *mut Block, tail: *mut Block, len: usize) -> FreedRun {
        debug_assert!(len >= 2 && can_head(first));
        // SAFETY: the caller's chain of `len >= 2` blocks.
        unsafe {
            let second = block::next(first);
            let third = if len == 2 {
                ptr::null_mut()
            } else {
                block::next(second)
            };
            let third_index = if third.is_null() {
                NONE
            } else {
                index_of(third)
            };
            block::set_word(second, 0, third_index | index_of(tail) << 16 | len << 32);
            FreedRun {
                first,
                second,
                third,
                tail,
                len,
            }
        }
    }

    /// Reads run `first`'s header: the run, and the next run on its queue.
    ///
    /// # Safety
    /// `first` heads a run the caller took from a [`FreedQueue`].
    pub(crate) unsafe fn read(first: *mut Block) -> (FreedRun, *mut Block) {
        // SAFETY: the caller's run; its header words are as `seal` and
        // `FreedQueue::push` wrote them.
        unsafe {
            let w = block::word(first, 0);
            let second = at(first, w >> ADDRESS_BITS);
            let h = block::word(second, 0);
            let third = match h & INDEX_MASK {
                NONE => ptr::null_mut(),
                i => at(first, i),
            };
            let run = FreedRun {
                first,
                second,
                third,
                tail: at(first, (h >> 16) & INDEX_MASK),
                len: h >> 32,
            };
            (run, (w & ADDRESS_MASK) as *mut Block)
        }
    }

    /// Turns the header back into links: the run is then a plain chain
    /// `first ..= tail`, the tail's link null.
    ///
    /// # Safety
    /// The run is the caller's, read by [`FreedRun::read`].
    pub(crate) unsafe fn unseal(&self) {
        // SAFETY: the caller's blocks. (In a run of two, `second` is the
        // tail and `third` null.)
        unsafe {
            block::set_next(self.first, self.second);
            block::set_next(self.second, self.third);
        }
    }
}

/// A heap's incoming freed runs: a lock-free MPSC stack of runs, taken
/// whole.
///
/// # Invariants
/// Every run reachable from `head` is a sealed run of blocks freed exactly
/// once, owned by the queue until `take_all` returns it.
pub(crate) struct FreedQueue {
    /// Writers: senders (`push`: Release CAS) and the owner (`take_all`:
    /// Acquire swap), as `RemoteQueue`'s.
    head: CachePadded<AtomicPtr<Block>>,
}

impl FreedQueue {
    pub(crate) fn new() -> Self {
        Self {
            head: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
        }
    }

    /// Pushes `run`.
    ///
    /// # Safety
    /// The run is sealed and the caller's, its blocks addressed to this
    /// queue's heap; [`can_head`] holds for its first block.
    pub(crate) unsafe fn push(&self, run: &FreedRun) {
        let second = index_of(run.second) << ADDRESS_BITS;
        // SAFETY: the first block is ours until the push publishes it.
        unsafe {
            crate::remote::push_linked(&self.head, run.first, |head| {
                block::set_word(run.first, 0, head as usize | second)
            })
        }
    }

    /// Takes every queued run, as the first block of the first (null when
    /// none).
    pub(crate) fn take_all(&self) -> *mut Block {
        crate::remote::take_all(&self.head)
    }
}
