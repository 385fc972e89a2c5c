//! The concurrent sweep: GC threads free this runtime's dead objects while
//! the mutators run.
//!
//! A page's dead objects are `allocated & !marked` with this runtime's id in
//! their header, where `allocated` is the copy of the page's allocated bits
//! as of the cycle's stop (`cycle.rs`, `snapshot_pages`): objects allocated
//! since are not in it, so mutators allocate plain white, with no atomic write to the mark bitmap.
//! The sweeper runs the dead objects' drop glue and sends the page's dead
//! blocks to their owning thread heap as one *page run*
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
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bitmap words of the largest page: no page has more than 8192 blocks.
const MAX_WORDS: usize = 128;

/// Pages a GC thread claims at a time.
const CLAIM: usize = 16;

/// Page flag: some object allocated in the page has drop glue. Without it,
/// and with one runtime alive, the sweep frees a page's dead objects from the
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
}

/// Sweeps `pages` (start addresses from the cycle's snapshot) on the threads
/// of `pool`. Returns what it freed, counting the pages it leaves to the
/// finalizer (returned too: dead objects with drop glue among them).
///
/// # Safety
/// The pages are in this cycle's snapshot (their allocated bits as of its
/// stop) with an allocated bit set, their marks were cleared before this cycle's mark, and the mark is
/// complete. No other sweep runs (the process-wide cycle lock).
pub(crate) unsafe fn parallel(
    pool: &ThreadPool,
    pages: &[usize],
    ranges: &[(usize, usize)],
    bits: &[u64],
    id: u16,
    alone: bool,
    verify: bool,
) -> (Swept, Vec<PageWork>) {
    let next = AtomicUsize::new(0);
    let results = pool.broadcast(|_| {
        let mut batch = FreeBatch::new();
        let mut dead: Vec<Dead> = Vec::new();
        let mut run: Vec<NonNull<u8>> = Vec::new();
        let mut finalizing: Vec<PageWork> = Vec::new();
        let mut out = Swept::default();
        loop {
            let i = next.fetch_add(CLAIM, Ordering::Relaxed);
            if i >= pages.len() {
                break;
            }
            for k in i..(i + CLAIM).min(pages.len()) {
                let (start, (from, to)) = (pages[k], ranges[k]);
                // SAFETY: the caller's contract; each page is swept once.
                let (bs, all) =
                    unsafe { sweep_page(start, &bits[from..to], id, alone, verify, &mut dead) };
                if let Some(cap) = all {
                    // Every block of the page is a dead object of ours with
                    // no drop glue (and verify mode off): hand the page back
                    // whole, without touching its blocks.
                    // SAFETY: block 0 is one of them, live until this call.
                    let block = unsafe { NonNull::new_unchecked(start as *mut u8) };
                    // SAFETY: every block is dead and ours (sweep_page).
                    if unsafe { batch.push_whole_page(block) } {
                        out.bytes += cap * bs;
                        out.objects += cap as u64;
                        continue;
                    }
                    // Some block not in use after all: list them.
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
                    let held = unsafe { FreeBatch::hold_page_run(&run) };
                    run.clear();
                    let dead: Vec<_> = dead
                        .drain(..)
                        .map(|(addr, desc)| (addr, desc, size_of(addr, desc)))
                        .collect();
                    out.bytes += dead.iter().map(|d| d.2).sum::<usize>();
                    out.objects += dead.len() as u64;
                    finalizing.push(PageWork {
                        dead,
                        run: Some(held),
                    });
                    continue;
                }
                for (addr, desc) in dead.drain(..) {
                    let size = size_of(addr, desc);
                    // SAFETY: `addr` is dead and now ours alone (no thread
                    // can reach it, and its block goes back only in the run
                    // below, whose owner clears its allocated bit).
                    unsafe { finalize(addr, desc, size, id, verify, &crate::panics::CYCLE_LOG) };
                    // SAFETY: live blocks are never at address 0.
                    run.push(unsafe { NonNull::new_unchecked(addr as *mut u8) });
                    out.bytes += size;
                    out.objects += 1;
                }
                // The page's dead objects go back as one run: when they are
                // all its owner has in use there, the owner resets the page
                // whole instead of walking them.
                // SAFETY: dead blocks of one page from `LoamAlloc`, each once,
                // never touched again by us.
                unsafe { batch.push_page_run(&run) };
                run.clear();
            }
        }
        batch.flush();
        (out, finalizing)
    });
    let mut swept = Swept::default();
    let mut finalizing = Vec::new();
    for (out, mut work) in results {
        swept.bytes += out.bytes;
        swept.objects += out.objects;
        finalizing.append(&mut work);
    }
    (swept, finalizing)
}

/// Collects the dead objects of runtime `id` in the page at `start` into
/// `dead` and returns the page's block size. With `alone` (no other runtime
/// alive) and no drop glue in the page, it reads no object header; if then
/// every block of the page is a dead object (and not `verify`, which poisons
/// each), it lists none and returns the page's capacity instead.
///
/// # Safety
/// As [`parallel`].
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
    let read_headers = !alone || large || page.flags() & HAS_DROP != 0;
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
