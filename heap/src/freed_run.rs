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
        // The caller's run; its header words are as `seal` and
        // `FreedQueue::push` wrote them.
        // SAFETY: as just said.
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

    /// Whether the header is one its sender could have written for
    /// `page`: every block it names a block start of the page, and a length
    /// from two to the page's blocks in use. Checked builds check it
    /// before the splice writes through it.
    #[cfg(not(loom))]
    pub(crate) fn fits(&self, page: &crate::page::Page) -> bool {
        let start = |b: *mut Block| page.is_block_start(b.cast());
        (2..=page.used() as usize).contains(&self.len)
            && start(self.first)
            && start(self.second)
            && start(self.tail)
            && (self.third.is_null() || start(self.third))
    }

    /// Turns the header back into links: the run is then a plain chain
    /// `first ..= tail`, the tail's link null.
    ///
    /// # Safety
    /// The run is the caller's, read by [`FreedRun::read`].
    pub(crate) unsafe fn unseal(&self) {
        // The caller's blocks. (In a run of two, `second` is the
        // tail and `third` null.)
        // SAFETY: as just said.
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A span of 8-byte blocks, aligned as a slice is.
    #[repr(C, align(65536))]
    struct Span([u64; RUN_SPAN / 8]);

    /// Links the blocks at `indices` of `span` into a chain, in order, the
    /// last one's link null, as a sender's slot does.
    fn chain(span: &mut Span, indices: &[usize]) -> Vec<*mut Block> {
        let base = span.0.as_mut_ptr();
        let blocks: Vec<*mut Block> = indices
            .iter()
            .map(|&i| base.wrapping_add(i).cast())
            .collect();
        for (k, &b) in blocks.iter().enumerate() {
            let next = blocks.get(k + 1).copied().unwrap_or(ptr::null_mut());
            // SAFETY: words of `span`, ours.
            unsafe { block::set_next(b, next) };
        }
        blocks
    }

    /// Seals, pushes, takes, reads and unseals runs of 2, 3 and 128 blocks,
    /// from the span's first word to its last: the header names the run's
    /// blocks and length, the queue links the runs, and unsealed, each run
    /// is its chain again, in order, the tail's link null.
    #[test]
    fn a_run_reads_back_as_sealed_and_unseals_into_its_chain() {
        let last = RUN_SPAN / 8 - 1;
        let layouts: [Vec<usize>; 3] = [
            vec![0, last],
            vec![last, 0, 17],
            (0..128)
                .map(|k| if k == 127 { last } else { k * 60 })
                .collect(),
        ];
        let mut spans: Vec<Box<Span>> = (0..3).map(|_| Box::new(Span([0; RUN_SPAN / 8]))).collect();
        let queue = FreedQueue::new();
        let mut chains = Vec::new();
        for (span, indices) in spans.iter_mut().zip(&layouts) {
            let blocks = chain(span, indices);
            let (first, tail) = (blocks[0], *blocks.last().unwrap());
            assert!(can_head(first));
            // SAFETY: a chain of ours, in one span.
            let run = unsafe { FreedRun::seal(first, tail, blocks.len()) };
            // SAFETY: sealed and ours; `can_head` holds.
            unsafe { queue.push(&run) };
            chains.push(blocks);
        }
        // Taken newest first.
        let mut run = queue.take_all();
        for blocks in chains.iter().rev() {
            // SAFETY: taken from the queue.
            let (read, next) = unsafe { FreedRun::read(run) };
            assert_eq!(read.first, blocks[0]);
            assert_eq!(read.tail, *blocks.last().unwrap());
            assert_eq!(read.len, blocks.len());
            // SAFETY: ours, read.
            unsafe { read.unseal() };
            let mut walked = vec![read.first];
            while *walked.last().unwrap() != read.tail {
                // SAFETY: the unsealed chain's blocks are ours.
                walked.push(unsafe { block::next(*walked.last().unwrap()) });
                assert!(walked.len() <= blocks.len(), "the chain runs past its tail");
            }
            assert_eq!(&walked, blocks, "the run unseals into its chain");
            // SAFETY: as above.
            let after_tail = unsafe { block::next(read.tail) };
            assert!(after_tail.is_null(), "the tail ends it");
            run = next;
        }
        assert!(run.is_null(), "three runs, then the end of the stack");
    }
}
