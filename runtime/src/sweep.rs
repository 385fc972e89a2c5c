//! The concurrent sweep: GC threads free this runtime's dead objects while
//! the mutators run, helped by mutators that pacing would otherwise hold
//! until it ends ([`Work`], "Helpers").
//!
//! A page's dead objects are `allocated & !marked` with this runtime's id in
//! their header, where `allocated` is the copy of the page's allocated bits
//! as of the cycle's stop (`cycle.rs`, `snapshot_pages`): objects allocated
//! since are not in it, so mutators allocate plain white, with no atomic write to the mark bitmap.
//! The sweeper sends the page's dead blocks (after their drop glue, which
//! the finalizer thread runs for pages that have any) to their owning
//! thread heap as one *page run*
//! (`FreeBatch::push_page_run`, one atomic operation): when they are all the
//! page has in use, the owner resets the whole page in O(1) and hands its
//! blocks out again in address order. The owner, the only writer of a page's
//! allocated bits (so that allocating costs no atomic read-modify-write),
//! clears the run's bits when it takes the run back; until then the run's
//! blocks are *pending* (a bitmap the sender sets), and the next snapshot
//! leaves them out of its copy, so later cycles sweep the page's other
//! blocks whether or not its owner has come back.
//!
//! A page is live while it holds a block in use, and the snapshot's copy
//! of a page is blocks in use that only this runtime's sweep frees (another
//! runtime's frees its own, never at the same time), so each snapshot page
//! is live until the sweep sends its run, after which the sweep does not
//! touch it.

use crate::finalize::PageWork;
use crate::gc::{header_of, poison, TypeDesc};
use loam_heap::{FreeBatch, PageRef};
use loam_threadpool::ThreadPool;
use parking_lot::{Condvar, Mutex};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Bitmap words of the largest page: no page has more than 8192 blocks.
const MAX_WORDS: usize = 128;

/// Pages a GC thread claims at a time.
pub(crate) const CLAIM: usize = 16;

/// Page flag: some object allocated in the page has drop glue. Without it,
/// and with one runtime alive or a page whose tag is the sweeping
/// runtime's (`sweep_page`), the sweep frees a page's dead objects from the
/// bitmaps alone, never touching the objects until it links them into a
/// free batch.
pub(crate) const HAS_DROP: u8 = 1;

/// Page flag: every block of the page is a marked object. Set by the sweep,
/// cleared by the next full cycle with the marks (before its stop, or by
/// its snapshot in the pause).
/// Only a full cycle (of any runtime) clears marks, marked objects are not
/// freed until then, and a page with every block allocated hands out none,
/// so the page stays exactly so until that full cycle: minor cycles leave it
/// out of their snapshot and their sweep. (An old generation fills such
/// pages: binary-trees' long-lived tree at depth 21 is 1,500 of them, which
/// every minor pause copied the bits of before.)
pub(crate) const OLD: u8 = 2;

/// A dead object: its address, and its descriptor when the sweep read it.
type Dead = (usize, Option<&'static TypeDesc>);

/// What a sweep freed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Swept {
    pub(crate) bytes: usize,
    pub(crate) objects: u64,
    /// Of `bytes`, those of large objects (past the heap's largest size
    /// class): whether large garbage is being made, for the large-object
    /// trigger (`Mutator::count_large`).
    pub(crate) large_bytes: usize,
    /// Of `bytes`, those of dead objects left to the finalizer, whose
    /// blocks come back after their destructors: reported to `freed`
    /// (`parallel`) only once queued for it (`finalize.rs`, "The brake").
    pub(crate) held: usize,
}

impl Swept {
    /// Adds another thread's (or helper's) totals.
    pub(crate) fn add(&mut self, other: Swept) {
        self.bytes += other.bytes;
        self.objects += other.objects;
        self.large_bytes += other.large_bytes;
        self.held += other.held;
    }
}

/// A sweep's pages, claimed [`CLAIM`] at a time by the GC threads
/// ([`parallel`]) and by mutators that pacing holds until the sweep has
/// freed enough ([`Helper::help`], offered by `Shared::offer_sweep`): a
/// mutator that would wait for the sweep sweeps instead, as Go's
/// allocating goroutines sweep spans.
///
/// # Helpers
/// A mutator registers as a helper (`helpers`) under the control mutex,
/// and only while the work is offered there; the cycle withdraws the offer
/// under the same mutex once its GC threads have claimed every page, then
/// waits until no helper is registered ([`Work::wait_for_helpers`]). So
/// every claim, and the helper's report of it, ends before the cycle reads
/// the sweep's totals or its pages' words are reused; a helper that comes
/// later finds nothing offered.
pub(crate) struct Work {
    /// Start addresses of the pages (from the cycle's snapshot).
    pages: Vec<usize>,
    /// Each page's allocated words in `bits`.
    ranges: Vec<(usize, usize)>,
    bits: Vec<u64>,
    id: u16,
    alone: bool,
    verify: bool,
    /// The next page to claim.
    next: AtomicUsize,
    /// Mutators helping now (see above).
    helpers: AtomicUsize,
    /// What the helpers freed, and their pages for the finalizer.
    helped: Mutex<(Swept, Vec<PageWork>)>,
    /// Notified, under `helped`, by the last helper to leave.
    gone: Condvar,
}

impl Work {
    /// The sweep of `pages` (start addresses from the cycle's snapshot,
    /// each with its range of allocated words in `bits`), for runtime
    /// `id`.
    ///
    /// # Safety
    /// The pages are in this cycle's snapshot (their allocated bits as of
    /// its stop) with an allocated bit set, their marks are this cycle's
    /// (cleared before its mark in a full cycle; in a minor one, the sticky
    /// marks of the cycles before, every one of a live object, and this
    /// cycle's), and the mark is complete. No other sweep runs
    /// (the process-wide cycle lock), and none of the pages is swept but
    /// through this work. `alone`: no other runtime's object is among the
    /// snapshot's blocks (`runtime_count.rs`).
    pub(crate) unsafe fn new((pages, ranges, bits): PageVecs, id: u16, alone: bool, verify: bool) -> Work {
        Work {
            pages,
            ranges,
            bits,
            id,
            alone,
            verify,
            next: AtomicUsize::new(0),
            helpers: AtomicUsize::new(0),
            helped: Mutex::new((Swept::default(), Vec::new())),
            gone: Condvar::new(),
        }
    }

    /// Whether pages are left to claim.
    pub(crate) fn has_pages(&self) -> bool {
        self.next.load(Ordering::Relaxed) < self.pages.len()
    }

    /// After withdrawing the offer (type docs): waits for the helpers that
    /// registered before (each finishes the claim it holds, at most
    /// [`CLAIM`] pages), then returns what they freed and the pages'
    /// vectors, for the next cycle's snapshot to reuse.
    pub(crate) fn wait_for_helpers(self: Arc<Self>) -> (Swept, Vec<PageWork>, Option<PageVecs>) {
        let helped = {
            let mut h = self.helped.lock();
            // Acquire: with the helpers' release, what they reported is
            // in `helped`. The last one notifies under the mutex, after its
            // decrement, so the wake is not lost.
            while self.helpers.load(Ordering::Acquire) != 0 {
                self.gone.wait(&mut h);
            }
            std::mem::take(&mut *h)
        };
        // A helper that has deregistered may still hold its reference a
        // moment: then the vectors are not reused.
        let vecs = Arc::try_unwrap(self).ok().map(|w| (w.pages, w.ranges, w.bits));
        (helped.0, helped.1, vecs)
    }

    /// Claims the next [`CLAIM`] pages and sweeps them into `done`; false
    /// if none was left.
    ///
    /// # Safety
    /// The caller is one of the sweep's GC threads or a registered helper.
    unsafe fn claim(&self, done: &mut Done, freed: &dyn Fn(usize)) -> bool {
        let (pages, ranges, bits) = (&self.pages, &self.ranges, &self.bits);
        let (id, alone, verify) = (self.id, self.alone, self.verify);
        let Done {
            batch,
            dead,
            run,
            finalizing,
            out,
        } = done;
        let i = self.next.fetch_add(CLAIM, Ordering::Relaxed);
        if i >= pages.len() {
            return false;
        }
        let (before, held_before) = (out.bytes, out.held);
        for k in i..(i + CLAIM).min(pages.len()) {
            let (start, (from, to)) = (pages[k], ranges[k]);
            // SAFETY: the constructor's contract; each page is swept once
            // (claimed by one thread).
            let (bs, all) = unsafe { sweep_page(start, &bits[from..to], id, alone, verify, dead) };
            if let Some(cap) = all {
                // Every block of the page is a dead object of ours with
                // no drop glue (and verify mode off): hand the page back
                // whole, without touching its blocks.
                // SAFETY: block 0 is one of them, live until this call.
                let block = unsafe { NonNull::new_unchecked(start as *mut u8) };
                // SAFETY: every block is dead and ours (sweep_page).
                if unsafe { batch.push_whole_page(block) } {
                    // (A large object's page never comes here: its
                    // headers are read, for its size.)
                    out.bytes += cap * bs;
                    out.objects += cap as u64;
                    continue;
                }
                // Not taken (a page no longer in its small-class state, or
                // some block not counted in use): list the blocks, every
                // one a dead object of this runtime in the copy.
                dead.extend((0..cap).map(|b| (start + b * bs, None)));
            }
            // Accounting is in blocks (see `Mutation::try_alloc`); a
            // span's block is its object's size.
            let size_of = |addr: usize, desc: Option<&TypeDesc>| match desc {
                // SAFETY: a dead object of ours, not yet freed, whose
                // header named `d`.
                Some(d) if bs > loam_heap::SMALL_MAX => unsafe { d.object_size(addr) },
                _ => bs,
            };
            if dead.iter().any(|(_, d)| d.is_some_and(|d| d.drop.is_some())) {
                // Destructors to run: the page's dead objects go to the
                // finalizer, which sends their blocks back after them
                // (`finalize.rs`). Held as a run first (pending, counted
                // out), so that no later cycle's snapshot copies them,
                // while it sweeps the page's other blocks.
                run.extend(dead.iter().map(|&(addr, _)| {
                    // SAFETY: live blocks are never at address 0.
                    unsafe { NonNull::new_unchecked(addr as *mut u8) }
                }));
                // SAFETY: dead objects of ours, of this page (a
                // snapshot page, live), each once; the finalizer owns
                // them from here and sends the run.
                let held = unsafe { FreeBatch::hold_page_run(run) };
                run.clear();
                let dead: Vec<_> = dead
                    .drain(..)
                    .map(|(addr, desc)| (addr, desc, size_of(addr, desc)))
                    .collect();
                let bytes = dead.iter().map(|d| d.2).sum::<usize>();
                out.bytes += bytes;
                out.held += bytes;
                if bs > loam_heap::SMALL_MAX {
                    out.large_bytes += bytes;
                }
                out.objects += dead.len() as u64;
                finalizing.push(PageWork {
                    dead,
                    run: Some(held),
                    bytes,
                });
                continue;
            }
            // No drop glue (above): nothing of the program's runs here, on
            // a GC thread or a helping mutator.
            let log = crate::panics::cycle_log();
            for (addr, desc) in dead.drain(..) {
                let size = size_of(addr, desc);
                // `addr` is dead and now ours alone (no thread can reach
                // it, and its block goes back only in the run below, whose
                // owner clears its allocated bit).
                // SAFETY: as just said.
                unsafe { finalize(addr, desc, size, id, verify, log) };
                // SAFETY: live blocks are never at address 0.
                run.push(unsafe { NonNull::new_unchecked(addr as *mut u8) });
                out.bytes += size;
                if bs > loam_heap::SMALL_MAX {
                    out.large_bytes += size;
                }
                out.objects += 1;
            }
            // The page's dead objects go back as one run: when they are
            // all its owner has in use there, the owner resets the page
            // whole instead of walking them.
            // SAFETY: dead blocks of one page from `LoamAlloc`, each once,
            // never touched again by us.
            unsafe { batch.push_page_run(run) };
            run.clear();
        }
        // Not what the finalizer holds: those blocks are not back yet
        // (the cycle counts them over to it as it queues them).
        freed(out.bytes - before - (out.held - held_before));
        true
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("sweep::Work")
            .field("pages", &self.pages.len())
            .field("next", &self.next)
            .field("helpers", &self.helpers)
            .finish_non_exhaustive()
    }
}

/// A mutator registered as a helper of a sweep ([`Work`], "Helpers"),
/// until dropped: it may claim the work's pages.
pub(crate) struct Helper {
    work: Arc<Work>,
}

impl Helper {
    /// Registers as a helper of `work`.
    ///
    /// # Safety
    /// Under the control mutex, with `work` offered there
    /// (`Shared::offer_sweep`, not yet withdrawn).
    pub(crate) unsafe fn register(work: &Arc<Work>) -> Helper {
        // Ordered before the withdrawal by the mutex.
        work.helpers.fetch_add(1, Ordering::Relaxed);
        Helper { work: work.clone() }
    }

    /// Sweeps claims of pages until none is left, `until` has passed or
    /// `enough` says so (both looked at between claims), reporting each
    /// claim's bytes to `freed`. Returns whether it claimed any.
    pub(crate) fn help(&self, until: Instant, enough: &dyn Fn() -> bool, freed: &dyn Fn(usize)) -> bool {
        let work = &*self.work;
        let mut done = Done::default();
        let mut any = false;
        while Instant::now() < until && !enough() {
            // SAFETY: a registered helper (`register`); the cycle waits for
            // it before the sweep ends.
            if !unsafe { work.claim(&mut done, freed) } {
                break;
            }
            any = true;
        }
        done.batch.flush();
        let mut h = work.helped.lock();
        h.0.add(done.out);
        h.1.append(&mut done.finalizing);
        any
    }
}

impl Drop for Helper {
    /// Deregisters (a panic too: the cycle must not wait for ever), waking
    /// the cycle's wait if this was the last helper.
    fn drop(&mut self) {
        // Release: the cycle's wait reads what this helper reported after.
        if self.work.helpers.fetch_sub(1, Ordering::Release) == 1 {
            let _h = self.work.helped.lock();
            self.work.gone.notify_all();
        }
    }
}

/// A sweep's vectors (`Work::new`'s pages, ranges and words), given back
/// for the next snapshot to reuse.
pub(crate) type PageVecs = (Vec<usize>, Vec<(usize, usize)>, Vec<u64>);

/// One sweeping thread's state across its claims.
#[derive(Default)]
struct Done {
    batch: FreeBatch,
    dead: Vec<Dead>,
    run: Vec<NonNull<u8>>,
    finalizing: Vec<PageWork>,
    out: Swept,
}

/// Sweeps `work` on the threads of `pool` until every page is claimed.
/// Returns what they freed, counting the pages they leave to the finalizer
/// (returned too: dead objects with drop glue among them), and reports it
/// as it goes: `freed` is called with the bytes of each claim of pages
/// once they are freed (not those left to the finalizer, which the cycle
/// counts over to it as it queues them: `Swept::held`), so that the heap's
/// count falls as the sweep goes rather than at its end (pacing waits for
/// it: `Shared::sweep_freed`). Helpers' claims are theirs to report
/// ([`Helper::help`], [`Work::wait_for_helpers`]). Between claims each
/// thread calls `aside` (`HeldCpus::step_aside`: the mutators run, and
/// one that helps the sweep on this thread's CPU is held while this
/// thread runs).
pub(crate) fn parallel(
    pool: &ThreadPool,
    work: &Work,
    freed: &(dyn Fn(usize) + Sync),
    aside: &(dyn Fn() + Sync),
) -> (Swept, Vec<PageWork>) {
    let results = pool.broadcast(|_| {
        let mut done = Done::default();
        // SAFETY: one of the sweep's GC threads (`Work::new`'s contract
        // covers the pages).
        while unsafe { work.claim(&mut done, freed) } {
            aside();
        }
        done.batch.flush();
        (done.out, done.finalizing)
    });
    let mut swept = Swept::default();
    let mut finalizing = Vec::new();
    for (out, mut work) in results {
        swept.add(out);
        finalizing.append(&mut work);
    }
    (swept, finalizing)
}

/// Collects the dead objects of runtime `id` in the page at `start` into
/// `dead` and returns the page's block size. With `alone` (no other
/// runtime's object among the snapshot's blocks), or a page whose objects
/// are all this runtime's (its tag), and no drop glue in the page, it
/// reads no object header; if then
/// every block of the page is a dead object (and not `verify`, which poisons
/// each), it lists none and returns the page's capacity instead.
///
/// # Safety
/// As [`Work::new`].
unsafe fn sweep_page(
    start: usize,
    allocated: &[u64],
    id: u16,
    alone: bool,
    verify: bool,
    dead: &mut Vec<Dead>,
) -> (usize, Option<usize>) {
    // SAFETY: the page holds an allocated object this sweep has not freed
    // (caller), so it is live.
    let page = unsafe { PageRef::of(start as *const u8) };
    let base = page.start() as usize;
    let bs = page.block_size();
    // The copied blocks keep the page's geometry fixed (the snapshot left
    // out the blocks of runs still out).
    if page.start() as usize != start
        || page.bitmap_words() != allocated.len()
        || allocated.len() > MAX_WORDS
    {
        crate::collector::fatal("sweep: a snapshot page changed under the sweep");
    }
    let large = bs > loam_heap::SMALL_MAX;
    // Whose objects the page holds (`PageRef::tag`: every object allocated
    // in it since it was set up, if all of one runtime). Read after the
    // snapshot's copy of the allocated bits (acquire), so it counts every
    // object of the copy. Only another runtime's: none of ours to free.
    let tag = page.tag();
    if tag != id && tag != 0 && tag != loam_heap::TAG_MIXED {
        return (bs, None);
    }
    // The marks, read once. Those of the snapshot's objects no longer
    // change: the barrier marks only what a mutator can reach, and the
    // snapshot's unmarked objects are unreachable.
    let mut mark_buf = [0u64; MAX_WORDS];
    let marks = &mut mark_buf[..allocated.len()];
    for (m, w) in marks.iter_mut().zip(page.mark_words()) {
        *m = w;
    }
    let marks = &*marks;
    // Every block marked: nothing to free, now or in any minor cycle (`OLD`).
    let cap = page.capacity();
    let all_marked = marks.iter().enumerate().all(|(w, &m)| {
        let mask = if (w + 1) * 64 <= cap {
            u64::MAX
        } else {
            (1u64 << (cap % 64)) - 1
        };
        m & mask == mask
    });
    if all_marked {
        page.set_flags(OLD);
        return (bs, None);
    }
    // The mutator sets the flag before an object's (release) allocated bit;
    // the snapshot read the bits after that (the walk acquires each bit, or
    // the owner's release of its seal, which came after), so it covers
    // every object in them.
    // Another runtime's objects may lie among ours unless the tag is ours
    // (then every allocated object of the page is ours: ids are reused
    // only once no object carries them).
    let read_headers = (!alone && tag != id) || large || page.flags() & HAS_DROP != 0;
    if !read_headers && !verify {
        // All garbage? (The common case for young pages.)
        let (mut allocated_n, mut dead_n) = (0, 0);
        for (w, &a) in allocated.iter().enumerate() {
            allocated_n += a.count_ones() as usize;
            dead_n += (a & !marks[w]).count_ones() as usize;
        }
        if dead_n == page.capacity() && allocated_n == dead_n {
            return (bs, Some(dead_n));
        }
    }
    for (w, &a) in allocated.iter().enumerate() {
        if a == 0 {
            continue;
        }
        let mut cand = a & !marks[w];
        if cand == 0 {
            continue;
        }
        while cand != 0 {
            let b = cand.trailing_zeros() as usize;
            cand &= cand - 1;
            let addr = base + (w * 64 + b) * bs;
            // Only this sweep frees a snapshot page's blocks, so each one the
            // snapshot saw allocated still is.
            if verify && !page.is_allocated(w * 64 + b) {
                crate::collector::fatal(&format!(
                    "verify: sweep: block {addr:#x} was freed since the snapshot"
                ));
            }
            if !read_headers {
                dead.push((addr, None));
                continue;
            }
            // SAFETY: allocated (its bit was set, acquire) and not freed: only
            // its own runtime's sweep frees it, and none other runs.
            let (desc, owner) = unsafe { header_of(addr) };
            if owner == id {
                dead.push((addr, Some(desc)));
            }
        }
    }
    (bs, None)
}

/// Runs the drop glue of the dead object at `addr` (and poisons it in
/// verify mode), before its block is freed.
///
/// # Safety
/// The caller owns the dead object.
pub(crate) unsafe fn finalize(
    addr: usize,
    desc: Option<&TypeDesc>,
    size: usize,
    id: u16,
    verify: bool,
    panics: &crate::panics::PanicLog,
) {
    if let Some((drop, desc)) = desc.and_then(|d| Some((d.drop?, d))) {
        // A panicking destructor must not take the collector down: it is
        // contained, its payload too, and reported once per type (the
        // memory is freed all the same).
        let dropped = crate::panics::contain(|| {
            // SAFETY: dropped once, here; the caller owns the object.
            unsafe { drop(addr as *mut u8) }
        });
        if let Err(msg) = dropped {
            panics.record(crate::panics::Kind::Drop, (desc.name)(), msg);
        }
    }
    if verify {
        // SAFETY: the caller owns `size` bytes at `addr`.
        unsafe { poison(addr, size, id) };
    }
}
