//! Taking back page runs: the dead blocks a collector's sweeper sends to
//! a page's owner in one message (`FreeBatch::push_page_run`, queued on
//! `LocalHeap::runs`). The owner is the only writer of its pages'
//! allocated bits and lists, so the sweeper leaves the page flagged
//! `RUN_PENDING` and the owner applies the run the next time it passes a
//! slow path (or enters `mutate`): a run that accounts for every block its
//! page has in use resets the page in O(1); any other is walked and freed
//! block by block; a run whose segment was adopted by another heap since
//! it was sent is forwarded to the new owner, never applied twice.

use super::LocalHeap;
use crate::block::{self, Block};
use crate::inspect::{AllocatedBit, RUN_PENDING};
use crate::page::{Page, PageState};
use crate::remote::{RunKind, RunQueue, REMOTE};
use crate::segment;
use crate::sync::Ordering;

impl LocalHeap {
    /// Takes back the page runs queued for us, if any; returns the blocks
    /// taken.
    #[inline]
    pub(crate) fn reclaim_runs(&mut self) -> u64 {
        let runs = self.runs.take_all();
        if runs.is_null() {
            return 0;
        }
        // SAFETY: the runs came from our queue.
        let n = unsafe { self.drain_runs(runs) };
        REMOTE.drained.fetch_add(n, Ordering::Relaxed);
        n
    }

    /// Takes back the page runs linked from `run`: a run that accounts for
    /// every block its page has in use resets the page in O(1); any other is
    /// walked and freed block by block (or forwarded, if its segment has
    /// been adopted by another heap since it was sent). Returns the blocks
    /// taken.
    ///
    /// # Safety
    /// `run` came from `self.runs.take_all()`.
    unsafe fn drain_runs(&mut self, mut run: *mut Block) -> u64 {
        let me: *mut LocalHeap = self;
        let mut n = 0;
        while !run.is_null() {
            // SAFETY: a queued run is ours, its blocks dead blocks of one live
            // page (the run holds them in use), of at least MIN_RUN_BLOCK bytes.
            unsafe {
                let (next_run, kind, len) = RunQueue::header(run);
                let page = segment::page_of(run.cast());
                let len = if kind == RunKind::WholePage {
                    (*page).capacity()
                } else {
                    len
                };
                let size = (*page).block_size();
                let owner = (*segment::segment_of(run.cast())).owner.load(Ordering::Relaxed);
                let small = (*page).state() == PageState::Small;
                if kind == RunKind::WholePage && owner == me && (*page).used() as usize != len {
                    crate::fatal("a whole-page run found blocks of its page in use");
                }
                if owner == me && small && (*page).used() as usize == len {
                    AllocatedBit::clear_page(page);
                    (*page).reset_empty();
                    // Also drops RUN_PENDING (release: a sweeper that sees
                    // it clear sees the cleared bits).
                    (*page).user_flags.store(0, Ordering::Release);
                    // Keep the page in its class queue, not released: a
                    // collector empties pages wholesale and the mutator
                    // refills them at once (releasing would decommit them
                    // after the purge delay, and the refill would fault the
                    // memory back in). `tidy` and `collect` still release it.
                    self.requeue_full(page);
                } else if kind == RunKind::WholePage {
                    // Adopted since it was sent (a whole-page run always
                    // resets its page otherwise): the new owner takes it.
                    (*owner).runs.push(run, kind);
                } else {
                    // Words 1 of the first two blocks overwrote the debug
                    // fill: restore it.
                    block::on_free(run.cast(), size);
                    if len > 1 {
                        block::on_free(block::next(run).cast(), size);
                    }
                    let mut b = run;
                    if owner == me {
                        while !b.is_null() {
                            AllocatedBit::of(page, b.cast()).clear();
                            b = block::next(b);
                        }
                        (*page)
                            .user_flags
                            .fetch_and(!RUN_PENDING, Ordering::Release);
                        b = run;
                        while !b.is_null() {
                            let next = block::next(b);
                            self.free_drained(page, b.cast());
                            b = next;
                        }
                    } else {
                        // Adopted since it was sent: the new owner takes it
                        // as a run.
                        block::set_word(run, 1, 0);
                        if len > 1 {
                            block::set_word(block::next(run), 1, len);
                        }
                        (*owner).runs.push(run, kind);
                    }
                }
                n += len as u64;
                run = next_run;
            }
        }
        n
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
