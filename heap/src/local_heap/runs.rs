//! Taking back page runs: the dead blocks of one page that a collector's
//! sweeper (`FreeBatch::push_page_run`, queued on the inbox's run queue)
//! or another thread's frees (a *freed run*, `freed_run.rs`, on its own
//! queue) send to the page's owner in one message. The owner is the only writer
//! of its pages' allocated bits and lists, so it applies the run itself,
//! the next time it passes a slow path (or enters `mutate`): a freed run is
//! spliced onto the page's free list in O(1); a sweeper's run that
//! accounts for every block its page has in use resets the page in O(1),
//! any other is walked and freed block by block; a run whose segment was
//! adopted by another heap since it was sent is forwarded to the new owner,
//! never applied twice.
//!
//! Until then a sweeper's run's blocks are *pending*: their bits in the page's
//! pending bitmap are set (by the sender, before it counts the run out in
//! `Page::runs_out`), so a sweeper can tell them from allocated objects
//! and sweep the page's other blocks meanwhile, sending further runs. The
//! owner clears a run's allocated bits, then its pending bits, then takes
//! the count back, each step a release, and a reader goes the other way
//! (`PageRef::pending_words`).

use super::{owner_inbox, LocalHeap};
use crate::block::{self, Block};
use crate::inspect::{pending_bitmap, AllocatedBit};
use crate::page::{Page, PageState};
use crate::freed_run::FreedRun;
use crate::remote::{route_runs, Inbox, RunKind, RunQueue, REMOTE};
use crate::segment;
use crate::sync::Ordering;
use std::ptr;

impl LocalHeap {
    /// Takes back the page runs and freed runs queued for us, if any;
    /// returns the blocks taken (forwarded runs count one each).
    #[inline]
    pub(crate) fn reclaim_runs(&mut self) -> u64 {
        let (runs, freed) = (self.queue.runs.take_all(), self.queue.freed.take_all());
        if runs.is_null() && freed.is_null() {
            return 0;
        }
        // SAFETY: taken from our queues just now.
        unsafe { self.reclaim_taken(runs, freed) }
    }

    /// The body of [`LocalHeap::reclaim_runs`] once something came, out of
    /// the line of its every caller (`mutate` entries among them).
    ///
    /// # Safety
    /// `runs` and `freed` came from our run queue and freed-run queue.
    #[inline(never)]
    unsafe fn reclaim_taken(&mut self, runs: *mut Block, freed: *mut Block) -> u64 {
        // The stacks came from our queues (caller), read and
        // forwarded as their queues' runs.
        // SAFETY: as just said.
        unsafe {
            self.drain_stack(
                runs,
                |run| {
                    let (next, kind, len) = RunQueue::header(run);
                    ((kind, len), next)
                },
                |heap, run, (kind, len)| heap.take_run(run, kind, len) as u64,
                |owner, run, (kind, _)| (*owner).runs.push(run, kind),
            ) + self.drain_stack(
                freed,
                |run| FreedRun::read(run),
                |heap, _, run| heap.take_freed(run),
                |owner, _, run| (*owner).freed.push(&run),
            )
        }
    }

    /// Routes the stack of runs linked from `run` (`route_runs`): `apply`
    /// takes back each run whose segment is still ours and returns its
    /// blocks; `forward` hands the others on to the heap that adopted their
    /// segment since they were sent. Returns the blocks applied and the
    /// runs forwarded.
    ///
    /// # Safety
    /// `run` came from one of our inbox's run queues, whose headers `read`
    /// reads and whose queue `forward` pushes on; `apply` and `forward`
    /// take ownership of a run.
    unsafe fn drain_stack<H: Copy>(
        &mut self,
        run: *mut Block,
        read: impl Fn(*mut Block) -> (H, *mut Block),
        mut apply: impl FnMut(&mut Self, *mut Block, H) -> u64,
        forward: impl FnMut(*const Inbox, *mut Block, H),
    ) -> u64 {
        let me = ptr::addr_of!(self.queue);
        let mut n = 0;
        // `route_runs` gives `apply` only runs whose page is ours, and
        // forwards the others to their segment's owner now.
        // The runs came from our queue (caller); heaps (hence
        // queues) live forever; a run's blocks are dead blocks of one live
        // page (the run holds them in use), so its segment is mapped.
        // SAFETY: as just said.
        let forwarded = unsafe {
            route_runs(
                run,
                me,
                read,
                |run| owner_inbox(run.cast()),
                |run, header| n += apply(self, run, header),
                forward,
            )
        };
        if n != 0 {
            REMOTE.drained.fetch_add(n, Ordering::Relaxed);
        }
        n + forwarded
    }

    /// Splices freed run `run` onto its page's free list; returns its
    /// length.
    ///
    /// # Safety
    /// The run came from our queue, and its page is ours.
    unsafe fn take_freed(&mut self, run: FreedRun) -> u64 {
        // A queued run is ours, its blocks dead blocks of one live
        // page of ours (caller), each counted in its `used`.
        // SAFETY: as just said.
        unsafe {
            let page = segment::page_of(run.first.cast());
            if block::CHECKED && !run.fits(&*page) {
                // Its header words are raw: a write after free into a
                // block in flight would have the splice write anywhere.
                crate::fatal("a freed run's header was overwritten (a write after free)");
            }
            run.unseal();
            (*page).push_freed_run(run.first, run.tail, run.len as u32);
            self.after_local_free(page);
        }
        run.len as u64
    }

    /// Applies run `run` of `kind` and `len` blocks (0 for a whole page),
    /// of one of our pages; returns the blocks it held.
    ///
    /// # Safety
    /// The run came from our queue, and its page is ours.
    unsafe fn take_run(&mut self, run: *mut Block, kind: RunKind, len: usize) -> usize {
        // A queued run is ours, its blocks dead blocks of one live
        // page of ours (caller), of at least MIN_RUN_BLOCK bytes.
        // SAFETY: as just said.
        unsafe {
            let page = segment::page_of(run.cast());
            let size = (*page).block_size();
            let len = if kind == RunKind::WholePage {
                (*page).capacity()
            } else {
                len
            };
            if (*page).used() as usize == len && (*page).state() == PageState::Small {
                // Every block in use is this run's, so no other run is
                // out: the allocated bits, then the pending bits, then
                // the count (release each: a sweeper that reads the
                // count, then pending, then allocated, sees them in
                // that order, `PageRef::pending_words`).
                AllocatedBit::clear_page(page);
                for w in pending_bitmap(page, (*page).capacity().div_ceil(64)) {
                    w.store(0, Ordering::Release);
                }
                let out = (*page).runs_out.fetch_sub(1, Ordering::Release);
                debug_assert_eq!(out, 1, "a page reset with another run out");
                (*page).reset_empty();
                (*page).user_flags.store(0, Ordering::Release);
                // Keep the page in its class queue, not released: a
                // collector empties pages wholesale and the mutator
                // refills them at once (releasing would decommit them
                // after the purge delay, and the refill would fault the
                // memory back in). `tidy` and `collect` still release it.
                self.requeue_full(page);
                return len;
            }
            if kind == RunKind::WholePage {
                crate::fatal("a whole-page run found blocks of its page in use");
            }
            // Words 1 of the first two blocks overwrote the debug fill:
            // restore it.
            block::on_free(run.cast(), size);
            if len > 1 {
                block::on_free(block::next(run).cast(), size);
            }
            // Allocated bits, then pending bits, then the count, as above;
            // other runs of the page may still be out. One pass, one
            // atomic AND per pending word when the blocks come in address
            // order (a sweeper's do), each after the allocated bits of the
            // blocks it covers.
            let pending = pending_bitmap(page, (*page).capacity().div_ceil(64));
            let (mut word, mut mask) = (usize::MAX, 0u64);
            let mut b = run;
            while !b.is_null() {
                let i = (*page).block_index(b.cast());
                AllocatedBit::at(page, i).clear();
                if i / 64 != word {
                    if mask != 0 {
                        pending[word].fetch_and(!mask, Ordering::Release);
                    }
                    (word, mask) = (i / 64, 0);
                }
                mask |= 1u64 << (i % 64);
                b = block::next(b);
            }
            if mask != 0 {
                pending[word].fetch_and(!mask, Ordering::Release);
            }
            (*page).runs_out.fetch_sub(1, Ordering::Release);
            b = run;
            while !b.is_null() {
                let next = block::next(b);
                self.free_drained(page, b.cast());
                b = next;
            }
            len
        }
    }

    /// Moves `page` from the full list back to its class queue, if it is
    /// there.
    ///
    /// # Safety
    /// `page` is a small page of ours.
    pub(super) unsafe fn requeue_full(&mut self, page: *mut Page) {
        // SAFETY: ours (caller).
        unsafe {
            if (*page).in_full {
                let c = (*page).class as usize;
                self.full.remove(page);
                (*page).in_full = false;
                self.queues[c].push_back(page);
                if self.current[c].is_null() {
                    self.current[c] = self.queues[c].first;
                }
            }
        }
    }
}
