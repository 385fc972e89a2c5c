//! A heap's upkeep: releasing empty pages, decommitting free slices that
//! stayed idle for the purge delay (and unmapping segments left entirely
//! free), and visiting the heaps of exited threads (the orphans of
//! `abandon.rs`): draining what other threads sent them, releasing what
//! became empty, and adopting their segments when this heap needs memory.

use super::{run_mask, LocalHeap};
use crate::options;
use crate::os;
use crate::segment::{self, Segment, SegmentKind, SLICES, SLICE_SHIFT, USABLE_MASK};
use crate::segment_cache;
use crate::size_class::NUM_CLASSES;
use crate::sync::Ordering;
use std::ptr;

impl LocalHeap {
    /// Releases every empty page, the current ones included.
    pub(crate) fn retire_empty_pages(&mut self) {
        for c in 0..NUM_CLASSES {
            self.current[c] = ptr::null_mut();
            let mut page = self.queues[c].first;
            while !page.is_null() {
                // SAFETY: pages on our queues are ours.
                unsafe {
                    let next = (*page).next;
                    (*page).collect();
                    if (*page).used() == 0 {
                        self.queues[c].remove(page);
                        self.release_page(page);
                    }
                    page = next;
                }
            }
            self.current[c] = self.queues[c].first;
        }
    }

    /// Decommits free slices that have been idle for the purge delay (all of
    /// them when `force`), and unmaps segments left entirely free.
    pub(crate) fn purge(&mut self, force: bool) {
        self.purge_idle_for(force, options::purge_delay_ms());
    }

    /// [`purge`](Self::purge), of the slices idle for `delay` ms.
    fn purge_idle_for(&mut self, force: bool, delay: u64) {
        let _ = segment::expire_huge_cache();
        let _ = segment_cache::expire(false);
        if self.dirty_segments == 0 {
            return;
        }
        let now = os::now_ms();
        if !force && now < self.next_purge_ms {
            return;
        }
        self.next_purge_ms = now.saturating_add((delay / 2).max(1));
        let mut seg = self.segments.first;
        // Dirty slices are free ones: none past the first segment without
        // room (`LocalHeap::segments`).
        // SAFETY: segments on our list are ours.
        while !seg.is_null() && unsafe { super::has_room(seg) } {
            // SAFETY: as just said.
            unsafe {
                let next = (*seg).next;
                let dirty = (*seg).dirty.load(Ordering::Relaxed);
                if dirty != 0 && (force || now.saturating_sub((*seg).last_free_ms) >= delay) {
                    self.dirty_segments -= 1;
                    if (*seg).free_slices.load(Ordering::Relaxed) == USABLE_MASK {
                        self.unlink_segment(seg);
                        Segment::destroy(seg);
                    } else {
                        // Runs the kernel would not decommit stay dirty
                        // (not zeroed: `alloc_zeroed` clears them), for the
                        // next purge to try again.
                        let left = decommit_runs(seg, dirty);
                        (*seg).dirty.store(left, Ordering::Relaxed);
                        if left != 0 {
                            self.dirty_segments += 1;
                            // Not again before another purge delay.
                            (*seg).last_free_ms = now;
                        }
                    }
                }
                seg = next;
            }
        }
    }

    /// For a lent heap (`lend.rs`), which the caller holds: takes back and
    /// gives back as [`tidy`](Self::tidy) does, but decommits only the
    /// slices (and unmaps only the wholly free segments) idle as long as
    /// the process-wide cache keeps a wholly free segment (ten purge
    /// delays, at most a second, or one purge delay if that is longer):
    /// they wait for another thread's need, as
    /// the cache's segments do, and a thread that borrows them finds them
    /// resident. Returns in how many milliseconds the next of those left
    /// is due, if any is left.
    pub(crate) fn tidy_lent(&mut self) -> Option<u64> {
        let delay = segment_cache::expiry_ms();
        let drained = self.drain_lent();
        self.purge_idle_for(false, delay);
        if drained {
            self.give_empty_segments();
        }
        self.purge_due_in(delay)
    }

    /// For a lent heap, listed (the caller holds the lent lock): drains
    /// what others sent it and, if that was anything, releases the pages it
    /// emptied. Returns whether it drained any, or released what the heap
    /// was lent with. A heap lent by `lend` was tidied as it was lent (its
    /// thread sent its caches and released its empty pages), and its
    /// thread frees nothing into it while it is lent, so only what comes
    /// through its queue empties a page meanwhile: a drain that finds none
    /// leaves nothing to release, and the walk of every page queue is
    /// skipped (a borrower asks each lent heap as it maps, the collector's
    /// trim after each cycle). A heap lent untidied (`lend_idle`: a parked
    /// worker, whose last frees and reclaimed page runs may have emptied
    /// pages) is walked once, by the first drain.
    fn drain_lent(&mut self) -> bool {
        let drained = self.drain_remote() > 0;
        let untidy = std::mem::take(&mut self.lent_untidy);
        if drained || untidy {
            self.retire_empty_pages();
        }
        drained || untidy
    }

    /// Milliseconds until a purge of the slices idle for `delay` ms has
    /// any to decommit (zero if some are due now), or `None` if no slice
    /// is free and resident.
    fn purge_due_in(&self, delay: u64) -> Option<u64> {
        if self.dirty_segments == 0 {
            return None;
        }
        let now = os::now_ms();
        // A purge runs at most every half delay (`next_purge_ms`): none is
        // due before that, whatever its slices' age.
        let earliest = self.next_purge_ms.saturating_sub(now);
        let mut due = None::<u64>;
        let mut seg = self.segments.first;
        // SAFETY: segments on our list are ours (the caller holds the heap),
        // and dirty ones come before the first without room.
        while !seg.is_null() && unsafe { super::has_room(seg) } {
            // SAFETY: as just said.
            unsafe {
                if (*seg).dirty.load(Ordering::Relaxed) != 0 {
                    let age = now.saturating_sub((*seg).last_free_ms);
                    let left = delay.saturating_sub(age).max(earliest);
                    due = Some(due.map_or(left, |d| d.min(left)));
                }
                seg = (*seg).next;
            }
        }
        due
    }

    /// Walks orphaned heaps: drains each one's queue (freeing into its pages
    /// or forwarding), releases what became empty, and with `adopt` takes the
    /// segments of the first orphan that has any.
    /// Returns what it took off queues (`drain_remote`): zero when they were
    /// all empty.
    pub(crate) fn visit_orphans(&mut self, adopt: bool, force: bool) -> u64 {
        let mut adopted = !adopt;
        let mut drained = 0;
        crate::abandon::for_each_orphan(|o| {
            // SAFETY: the orphan lock is held, so `o` is ours alone; it is
            // not `self` (a live heap is never on the orphan list).
            let o = unsafe { &mut *o };
            drained += o.tidy(force);
            if !adopted && !o.segments.first.is_null() {
                self.adopt(o);
                adopted = true;
            }
        });
        crate::abandon::settle_orphans();
        drained
    }

    /// Drains, sends, and gives back what is empty (used on abandon, on
    /// orphan visits, by `release` and `collect`); decommits free slices
    /// idle for the purge delay, or all of them with `force`. Without
    /// `force` (the heap's thread is gone), its wholly free segments go
    /// to the process-wide cache for any heap to take; with it they go
    /// back to the OS.
    /// Returns what it took off queues (`drain_remote`): zero when they were
    /// all empty.
    pub(crate) fn tidy(&mut self, force: bool) -> u64 {
        let drained = self.take_back();
        if !force {
            // After `purge` would unmap those idle past the delay; the
            // rest wait in the cache instead of with a heap nobody runs.
            self.purge(false);
            self.give_empty_segments();
        } else {
            self.purge(true);
        }
        drained
    }

    /// As the heap's thread goes idle (`crate::hand_over`): takes back and
    /// gives back as `tidy` does, its wholly free segments to the cache
    /// for the threads still running, and decommits its other free
    /// slices, which no other heap can use, at once.
    pub(crate) fn hand_over(&mut self) {
        self.take_back();
        self.give_empty_segments();
        self.purge(true);
    }

    /// Sends the frees this heap holds for others, takes back what others
    /// sent it, and releases its empty pages. Returns what it took off its
    /// queues (`drain_remote`): zero when they were all empty.
    fn take_back(&mut self) -> u64 {
        self.flush_thread_cache();
        self.cache.flush();
        let drained = self.drain_remote();
        self.retire_empty_pages();
        drained
    }

    /// For a heap about to be lent (`lend.rs`, its owner): takes back what
    /// others sent it, releases its empty pages and gives its wholly free
    /// segments to the process-wide cache, decommitting nothing (another
    /// thread may need them soon). Returns how many it gave.
    pub(crate) fn give_back(&mut self) -> usize {
        self.take_back();
        self.give_empty_segments()
    }

    /// [`give_back`](Self::give_back) for a lent heap, listed (a borrower,
    /// under the lent lock): only what a drain emptied can have become
    /// free since (`drain_lent`).
    pub(crate) fn give_back_lent(&mut self) -> usize {
        if self.drain_lent() {
            self.give_empty_segments()
        } else {
            0
        }
    }

    /// How many free slices our segments have, and whether one of them
    /// has a run of `need`.
    pub(crate) fn free_slices(&self, need: usize) -> (usize, bool) {
        let (mut free, mut fits) = (0, false);
        let mut seg = self.segments.first;
        // SAFETY: segments on our list are ours (the caller holds the heap),
        // those with room first.
        while !seg.is_null() && unsafe { super::has_room(seg) } {
            // SAFETY: as just said.
            unsafe {
                let slices = (*seg).free_slices.load(Ordering::Relaxed);
                free += (slices & USABLE_MASK).count_ones() as usize;
                fits |= Segment::find_free_run(slices, need).is_some();
                seg = (*seg).next;
            }
        }
        (free, fits)
    }

    /// Gives every wholly free segment of ours to the process-wide cache
    /// (`segment_cache.rs`), as resident as it is: this heap is going idle
    /// or away, and another may need the memory soon. Returns how many.
    fn give_empty_segments(&mut self) -> usize {
        let mut given = 0;
        let mut seg = self.segments.first;
        // An empty segment has room: none past the first without.
        // SAFETY: segments on our list are ours.
        while !seg.is_null() && unsafe { super::has_room(seg) } {
            // SAFETY: segments on our list are ours; one with every usable
            // slice free holds no page, so no queue or `current` names it,
            // and unlinked it is ours alone to give.
            unsafe {
                let next = (*seg).next;
                if (*seg).kind == SegmentKind::Normal
                    && (*seg).free_slices.load(Ordering::Relaxed) == USABLE_MASK
                {
                    self.unlink_segment(seg);
                    if (*seg).dirty.load(Ordering::Relaxed) != 0 {
                        self.dirty_segments -= 1;
                    }
                    segment_cache::put(seg);
                    given += 1;
                }
                seg = next;
            }
        }
        given
    }

    /// Takes a wholly free segment from the process-wide cache into our
    /// list, or returns null if it holds none.
    pub(super) fn take_cached_segment(&mut self) -> *mut Segment {
        let seg = segment_cache::take(self);
        if !seg.is_null() {
            self.link_segment(seg);
            // SAFETY: the cache gave it to us.
            unsafe {
                if (*seg).dirty.load(Ordering::Relaxed) != 0 {
                    self.dirty_segments += 1;
                }
                // Its resident slices are this heap's to use for a purge
                // delay from now, not from when another heap freed them:
                // else the next purge would decommit every slice but the
                // page about to be set up, and this heap fault them in.
                (*seg).last_free_ms = os::now_ms();
            }
        }
        seg
    }

    /// Takes every segment and page of heap `o`, abandoned or lent, which
    /// the caller holds alone (under the orphan or the lent lock).
    pub(crate) fn adopt(&mut self, o: &mut LocalHeap) {
        let me: *mut LocalHeap = self;
        let mut seg = o.segments.first;
        while !seg.is_null() {
            // SAFETY: `o` is held exclusively (orphan or lent lock), so its segments
            // are ours to re-own. The Release store pairs with nothing in
            // particular: senders only need *some* owner whose queue is drained.
            unsafe {
                let next = (*seg).next;
                (*seg).owner.store(me, Ordering::Release);
                self.link_segment(seg);
                seg = next;
            }
        }
        o.segments = crate::queue::Queue::NEW;
        self.dirty_segments += std::mem::take(&mut o.dirty_segments);
        for c in 0..NUM_CLASSES {
            o.current[c] = ptr::null_mut();
            // SAFETY: both queues' pages are ours now.
            unsafe { self.queues[c].append(&mut o.queues[c]) };
            if self.current[c].is_null() {
                self.current[c] = self.queues[c].first;
            }
        }
        // SAFETY: as above.
        unsafe { self.full.append(&mut o.full) };
        let pages = std::mem::take(&mut o.page_count);
        self.page_count += pages;
        crate::stats::COUNTERS
            .pages_adopted
            .fetch_add(pages as u64, Ordering::Relaxed);
    }
}

/// Decommits each run of set bits in `dirty`; returns the runs the kernel
/// refused (still dirty: their contents stay).
///
/// # Safety
/// `seg` is ours and every slice in `dirty` is free.
unsafe fn decommit_runs(seg: *mut Segment, mut dirty: u64) -> u64 {
    let mut left = 0;
    while dirty != 0 {
        let i = dirty.trailing_zeros() as usize;
        let n = (!(dirty >> i)).trailing_zeros() as usize;
        let n = n.min(SLICES - i);
        let start = Segment::slice_start(seg, i) as *mut u8;
        // The run's slices are free slices of our segment, which hold
        // nothing live (caller).
        // SAFETY: as just said.
        let decommitted = unsafe { os::decommit(start, n << SLICE_SHIFT) };
        if decommitted {
            crate::stats::COUNTERS
                .bytes_decommitted
                .fetch_add((n << SLICE_SHIFT) as u64, Ordering::Relaxed);
        } else {
            left |= run_mask(i, n);
        }
        dirty &= !run_mask(i, n);
    }
    left
}
