//! The sender's side of remote frees: a [`RemoteCache`] gathers the blocks a
//! thread frees for other heaps and hands them over in as few messages, and
//! as cheap ones for their owners, as it can.
//!
//! # Two tiers
//! - **Page slots.** Blocks of one page gather in a slot of their own (keyed
//!   by the block's slice, which belongs to exactly one page). When the slot
//!   fills, is flushed, or is evicted by a block of another page, its blocks
//!   go as one *freed run* (`freed_run.rs`) onto the owner's queue of them,
//!   and the owner splices the run onto the page's free list in O(1),
//!   never reading the blocks between.
//! - **Owner slots.** A page slot evicted with fewer than [`MIN_RUN`] blocks
//!   (or whose newest block's address is beyond a run header's 48 bits, on
//!   no platform served today) joins its owner's slot instead, a chain of
//!   blocks of any of that heap's pages, sent to a lane of its [`Inbox`]
//!   and walked by the owner (`route_chains`): scattered frees, a few to a page, still cost one
//!   atomic operation a batch, not one a block. A run costs its owner three
//!   cache misses (its two header blocks and its tail) and a chain one a
//!   block, hence the threshold.
//!
//! # Invariants
//! Each slot's chain `head ..= tail` (linked through the blocks' link words,
//! the tail's link null) holds `count` blocks totalling `bytes`, all
//! addressed to `inbox`; a page slot's blocks are all of the one page its
//! `key` names, and its bit in `occupied` is set exactly when `count > 0`.
//! `bytes_total` is the sum over all slots.

use crate::block::{self, Block};
use crate::freed_run::{self, FreedRun};
use crate::remote::Inbox;
#[cfg(not(loom))]
use crate::remote::REMOTE;
#[cfg(not(loom))]
use crate::sync::Ordering;
use std::ptr;

/// Page slots: one per slice of a segment, so that the pages of one segment
/// never evict each other (a key's low six bits pick its slot).
const PAGE_SLOTS: usize = 64;
const OWNER_SLOTS: usize = 8;

/// Fewest blocks sent as a freed run; fewer join the owner slot. A run costs
/// its owner three cache misses and its sender one atomic operation; a
/// chain costs the owner one miss a block.
#[cfg(not(loom))]
pub(crate) const MIN_RUN: u32 = 4;
/// Under loom, two blocks make a run, so that the models stay small.
#[cfg(loom)]
pub(crate) const MIN_RUN: u32 = 2;

/// The key of `p`'s page slot: the number of its slice (the span all
/// blocks of a freed run start in).
#[inline(always)]
pub(crate) fn page_key(p: *const u8) -> usize {
    p as usize / freed_run::RUN_SPAN
}

#[derive(Clone, Copy)]
struct Slot {
    /// Page slots: the blocks' slice number; owner slots: unused.
    key: usize,
    inbox: *const Inbox,
    head: *mut Block,
    tail: *mut Block,
    count: u32,
    bytes: usize,
}

const EMPTY_SLOT: Slot = Slot {
    key: 0,
    inbox: ptr::null(),
    head: ptr::null_mut(),
    tail: ptr::null_mut(),
    count: 0,
    bytes: 0,
};

impl Slot {
    /// Links block `b` of `size` bytes on at the head.
    ///
    /// # Safety
    /// `b` is a free block of at least 8 bytes that the caller owns.
    #[inline(always)]
    unsafe fn push(&mut self, b: *mut Block, size: usize) {
        // SAFETY: the caller's.
        unsafe { block::set_next(b, self.head) };
        if self.head.is_null() {
            self.tail = b;
        }
        self.head = b;
        self.count += 1;
        self.bytes += size;
    }
}

/// A sender's batches of blocks bound for other heaps: see the module
/// documentation. Batches go when a slot reaches `max_count` blocks, when a
/// block of another page takes a page slot, when the cache reaches
/// `max_bytes`, and on [`RemoteCache::flush`].
pub(crate) struct RemoteCache {
    pages: [Slot; PAGE_SLOTS],
    owners: [Slot; OWNER_SLOTS],
    /// Bit `i` set: page slot `i` holds blocks.
    occupied: u64,
    bytes_total: usize,
    max_count: u32,
    max_bytes: usize,
    /// Batches (runs and chains) this cache has sent.
    pub(crate) batches_sent: u64,
}

impl RemoteCache {
    /// The cache a thread heap uses: small batches, so memory returns soon.
    pub(crate) const fn for_thread() -> Self {
        Self::new(128, 256 * 1024)
    }

    /// The cache a [`crate::FreeBatch`] uses: large batches, sent on flush.
    pub(crate) const fn for_sweeper() -> Self {
        Self::new(4096, 8 << 20)
    }

    const fn new(max_count: u32, max_bytes: usize) -> Self {
        Self {
            pages: [EMPTY_SLOT; PAGE_SLOTS],
            owners: [EMPTY_SLOT; OWNER_SLOTS],
            occupied: 0,
            bytes_total: 0,
            max_count,
            max_bytes,
            batches_sent: 0,
        }
    }

    #[inline(always)]
    fn page_slot_of(key: usize) -> usize {
        // The low bits number the slices of a segment (one slot each); the
        // bits above tell segments apart.
        (key ^ (key >> 6)) % PAGE_SLOTS
    }

    #[inline(always)]
    fn owner_slot_of(inbox: *const Inbox) -> usize {
        // Heaps are page-aligned mappings: the bits above the page offset differ.
        ((inbox as usize >> 12) ^ (inbox as usize >> 18)) % OWNER_SLOTS
    }

    /// Adds free block `b` of `size` bytes, bound for `inbox`; `key` is
    /// [`page_key`] of `b` (under loom, any number that the blocks of one
    /// model page share). A slot keeps the owner its first block named: a
    /// segment adopted since goes to the old owner, which forwards it.
    ///
    /// Every free of another heap's block passes here, on a collector's
    /// thread for each of them: the common case (the block's page slot
    /// already open) is a few instructions inline, and everything else is
    /// out of line.
    ///
    /// # Safety
    /// `b` is a free block the caller owns, addressed to `inbox`'s heap, of
    /// a page that stays live while the block is in flight (it counts the
    /// block as used); `inbox` lives forever (heaps are never unmapped).
    #[inline(always)]
    pub(crate) unsafe fn push(&mut self, inbox: *const Inbox, key: usize, b: *mut u8, size: usize) {
        let b = b.cast::<Block>();
        self.bytes_total += size;
        let i = Self::page_slot_of(key);
        let s = &mut self.pages[i];
        if s.key == key && s.count > 0 {
            // SAFETY: the caller's block, of `key`'s page like the slot's.
            unsafe { s.push(b, size) };
            if s.count >= self.max_count {
                self.evict(i);
            }
        } else {
            // SAFETY: the caller's block.
            unsafe { self.open_page_slot(i, inbox, key, b, size) };
        }
        if self.bytes_total >= self.max_bytes {
            self.flush();
        }
    }

    /// Starts page slot `i` over with block `b` of page `key`, evicting the
    /// page it held.
    ///
    /// # Safety
    /// As [`RemoteCache::push`].
    // Not cold: scattered frees (larson's) come here on most blocks.
    #[inline(never)]
    unsafe fn open_page_slot(
        &mut self,
        i: usize,
        inbox: *const Inbox,
        key: usize,
        b: *mut Block,
        size: usize,
    ) {
        self.evict(i);
        self.occupied |= 1 << i;
        let s = &mut self.pages[i];
        s.key = key;
        s.inbox = inbox;
        // SAFETY: the caller's block.
        unsafe { s.push(b, size) };
    }

    /// Empties page slot `i`: as a freed run if it has [`MIN_RUN`] blocks,
    /// else into its owner's slot.
    #[inline(never)]
    fn evict(&mut self, i: usize) {
        let s = std::mem::replace(&mut self.pages[i], EMPTY_SLOT);
        self.occupied &= !(1 << i);
        if s.count == 0 {
            return;
        }
        if s.count >= MIN_RUN && freed_run::can_head(s.head) {
            self.bytes_total -= s.bytes;
            // A well-formed chain of `count >= 2` blocks that start
            // in one slice (the slot's key), of one live page, ours (slot
            // invariant); the inbox lives forever (`push`'s contract).
            // SAFETY: as just said.
            unsafe {
                let run = FreedRun::seal(s.head, s.tail, s.count as usize);
                (*s.inbox).freed.push(&run);
            }
            self.sent(s.count);
            #[cfg(not(loom))]
            REMOTE.freed_runs.fetch_add(1, Ordering::Relaxed);
        } else {
            // SAFETY: as above.
            unsafe { self.join_owner(s.inbox, s.head, s.tail, s.count, s.bytes) };
        }
    }

    /// Adds the chain `head ..= tail` of `count` blocks, `bytes` in all
    /// (already in `bytes_total`), to `inbox`'s owner slot.
    ///
    /// # Safety
    /// A well-formed chain of free blocks the caller owns, bound for
    /// `inbox`, which lives forever.
    #[inline(never)]
    unsafe fn join_owner(
        &mut self,
        inbox: *const Inbox,
        head: *mut Block,
        tail: *mut Block,
        count: u32,
        bytes: usize,
    ) {
        let j = Self::owner_slot_of(inbox);
        if self.owners[j].inbox != inbox {
            if self.owners[j].count > 0 {
                self.flush_owner(j);
            }
            self.owners[j].inbox = inbox;
        }
        let o = &mut self.owners[j];
        // SAFETY: the chain is the caller's.
        unsafe { block::set_next(tail, o.head) };
        if o.head.is_null() {
            o.tail = tail;
        }
        o.head = head;
        o.count += count;
        o.bytes += bytes;
        if o.count >= self.max_count {
            self.flush_owner(j);
        }
    }

    #[inline(never)]
    fn flush_owner(&mut self, j: usize) {
        let o = std::mem::replace(&mut self.owners[j], EMPTY_SLOT);
        if o.count == 0 {
            return;
        }
        self.bytes_total -= o.bytes;
        // The chain is well formed and ours (slot invariant), and
        // the inbox lives forever (`push`'s contract). Consecutive batches
        // go to consecutive lanes.
        // SAFETY: as just said.
        unsafe { (*o.inbox).push(self.batches_sent as usize, o.head, o.tail) };
        self.sent(o.count);
    }

    #[inline]
    fn sent(&mut self, count: u32) {
        self.batches_sent += 1;
        #[cfg(not(loom))]
        {
            REMOTE.sent.fetch_add(u64::from(count), Ordering::Relaxed);
            REMOTE.batches.fetch_add(1, Ordering::Relaxed);
        }
        let _ = count;
    }

    /// Whether no block is pending.
    pub(crate) fn is_empty(&self) -> bool {
        self.occupied == 0 && self.owners.iter().all(|s| s.count == 0)
    }

    /// Sends every batch.
    #[inline(never)]
    pub(crate) fn flush(&mut self) {
        if self.bytes_total == 0 {
            debug_assert!(self.is_empty());
            return;
        }
        while self.occupied != 0 {
            self.evict(self.occupied.trailing_zeros() as usize);
        }
        for j in 0..OWNER_SLOTS {
            self.flush_owner(j);
        }
        debug_assert_eq!(self.bytes_total, 0);
    }
}

const _: () = assert!(MIN_RUN >= 2, "a freed run has two blocks or more");
