//! Sealing pages: a collector's copy of every page's allocated bits as of
//! its stop, taken while the mutators run (`docs/handshakes.md`, step 3;
//! the protocol's loom model is `seal_model.rs`).
//!
//! A collector that sweeps `allocated & !marked` must not sweep an object
//! allocated after its stop (the mutators allocate white, and such an
//! object may be held unrooted by a call under way when the sweep runs).
//! It used to copy every page's allocated bits in the pause, which is work
//! proportional to the heap with the world stopped (0.5 ms at 100 MB of
//! young pages). Instead:
//!
//! - **The epoch.** The collector raises the process-wide seal epoch `E`
//!   with its mutators stopped ([`SealEpoch::raise`]). Every allocation of
//!   a collector's object ([`crate::alloc_object`], [`crate::alloc_object_in`])
//!   reads it (a relaxed load of one global, which changes once a cycle).
//! - **The owner seals.** Before its first allocation in a page after the
//!   stop (the page's `sealed` word below `E`: one load and compare on a
//!   line the allocation writes anyway), the owner claims the page (a CAS
//!   to `E | BUSY`), copies the page's allocated bits, less its pending
//!   ones, into the page's seal bitmap (the image), and publishes `E` with
//!   the image's length (release). Only then does it set a bit.
//! - **The walk takes the rest.** A collector's walk, after the stop and
//!   with the mutators running ([`PageRef::sealed_words`]), reads `sealed`
//!   (acquire). At `E`, the copy is the owner's image. Below `E`, it copies
//!   the page itself and claims it with a CAS from the value it read to
//!   `E` (release): on success no owner sealed, so none allocated, in
//!   between, and an owner that comes later acquires the CAS and so sets
//!   its bits after the walk's reads. On failure an owner sealed meanwhile
//!   (and may have allocated since): the walk drops its copy and takes the
//!   owner's image. No mutator ever waits for the walk. A page whose owner
//!   is copying (`BUSY`) the walk passes by and comes back to at its end
//!   ([`PageRef::try_sealed_words`]): the wait is for an owner the OS
//!   preempted mid-copy, which spinning on its page kept from the CPU.
//!
//! Why the copy holds exactly the objects allocated before the stop: every
//! block in a copy was allocated, and not freed, when the page was sealed,
//! which was after the stop; a collector's objects are freed only by its
//! sweeps, which do not run between its stop and its own sweep, so the
//! copy holds all of its objects allocated before the stop. Its objects
//! allocated after the stop come from its calls that began after it: each
//! such allocation reads `E` (the handshake orders the raise before the
//! call) and finds its page sealed, or seals it first. Allocations that
//! read an older epoch are other runtimes' (their calls began before the
//! stop; calls of two runtimes do not nest on a thread) or plain threads'
//! (which set no allocated bit): a copy may hold the former, which the
//! sweep tells apart by their pages' tags or their headers. Any seal for `E`, by whichever
//! allocation, comes after the stop and before the page's first bit set
//! after it by an allocation that read `E`: that is all it needs.
//!
//! # The `sealed` word
//! Bits 0 – 7: the image's length in words (1 – 128; 0 after a walk's
//! claim, which writes no image: a walk passes each page once, and no one
//! else reads images). Bit 8: `BUSY` while an owner copies. Bits 9 – 63:
//! the epoch, so that comparing whole words compares epochs (55 bits do not
//! wrap). A page set up again keeps its descriptor's `sealed` word: if it
//! says `E`, its image is of the page released before, and a page released
//! after the stop had nothing in its image (a block in an image holds an
//! object no sweep frees before this cycle's, which keeps the page), so a
//! walk that finds an image of the wrong length takes the page for empty,
//! and one of the right length reads zeros.

use crate::inspect::{Bitmap, PageRef};
use crate::page::Page;
use crate::sync::{AtomicU64, Ordering};

/// In a child after `fork`: a page whose owner was writing its image at
/// the fork (`BUSY`) would stay so for ever (the owner is a thread the
/// child does not have), and a walk of a collector built in the child
/// waited for it for ever. Each such page is left as a walk's claim for
/// the epoch it was being sealed for, which the child's next stop
/// raises past: its walk copies the page's bits itself.
#[cfg(not(loom))]
pub(crate) fn forget_seals_after_fork() {
    // No collector ever raised an epoch (a plain `LoamAlloc` program that
    // forks and execs): no page was ever sealed, nothing to walk.
    if KEY.load(Ordering::Relaxed) == 0 {
        return;
    }
    crate::segment::for_each_segment(|seg| {
        for i in crate::segment::HEADER_SLICES..crate::segment::SLICES {
            // Registered segments stay mapped while the registry lock is
            // held (the walk's); `sealed` is atomic; the child's one thread
            // is the only one.
            // SAFETY: as just said.
            let sealed = unsafe { &(*crate::segment::Segment::page(seg, i)).sealed };
            let s = sealed.load(Ordering::Relaxed);
            if s & BUSY != 0 {
                sealed.store(s & !(BUSY | LEN), Ordering::Relaxed);
            }
        }
    });
}

/// The process-wide seal epoch, shifted into place as `sealed` holds it
/// (`EPOCH_SHIFT`): raised at each collector stop.
static KEY: AtomicU64 = AtomicU64::new(0);

/// Set in `sealed` while the page's owner writes its image.
const BUSY: u64 = 1 << 8;
/// The image's length in words, in `sealed`.
const LEN: u64 = 0xff;
/// Where the epoch starts in `sealed`.
const EPOCH_SHIFT: u32 = 9;

/// A seal epoch, as a collector raised it at a stop: the snapshot of the
/// allocated bits its walk takes ([`PageRef::sealed_words`]) is as of
/// that stop, because each allocation of a collector's object after it
/// seals its page first (module docs in `seal.rs`).
///
/// # Examples
/// ```
/// use loam_heap::SealEpoch;
/// let before = SealEpoch::current();
/// // A collector, its mutators stopped, no walk under way:
/// // SAFETY: no other collector in this program.
/// let e = unsafe { SealEpoch::raise() };
/// assert!(e > before);
/// assert_eq!(SealEpoch::current(), e);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SealEpoch(u64);

impl SealEpoch {
    /// The epoch the last stop raised.
    #[inline]
    pub fn current() -> SealEpoch {
        SealEpoch(KEY.load(Ordering::Acquire))
    }

    /// Raises the epoch and returns it: for a collector, with its mutators
    /// stopped (no call of theirs under way) and before any of them enters
    /// again, once per cycle.
    ///
    /// # Safety
    /// No walk for an earlier epoch ([`PageRef::sealed_words`]) is under
    /// way, nor starts after this call: cycles of collectors sharing this
    /// heap do not overlap from their raise to the end of their walk.
    /// (Otherwise that walk meets pages sealed for this later epoch, whose
    /// images hold blocks allocated after its stop.)
    pub unsafe fn raise() -> SealEpoch {
        SealEpoch(KEY.fetch_add(1 << EPOCH_SHIFT, Ordering::AcqRel) + (1 << EPOCH_SHIFT))
    }
}

/// Whether `page` is sealed for the current epoch: the allocation fast
/// path's check.
///
/// # Safety
/// `page` is a live page descriptor.
#[inline(always)]
pub(crate) unsafe fn is_sealed(page: *mut Page) -> bool {
    // Relaxed for the epoch: a call that began after a stop is ordered
    // after its raise by the runtime's handshake. Acquire for `sealed`: a
    // walk that claimed the page (release) read its bits before the bit
    // this allocation sets.
    // SAFETY: a live descriptor (caller).
    unsafe { (*page).sealed.load(Ordering::Acquire) >= KEY.load(Ordering::Relaxed) }
}

/// Seals `page` for the current epoch if it is not yet: the owner's step
/// before it sets an allocated bit in `page`.
///
/// # Safety
/// `page` is a live page's first descriptor, and the calling thread owns it
/// (its allocated bits change only through this thread).
#[inline(always)]
pub(crate) unsafe fn seal_before_alloc(page: *mut Page) {
    // SAFETY: a live descriptor (caller).
    if !unsafe { is_sealed(page) } {
        // Acquire: the sealer may be a thread of another runtime, whose
        // call began before the stop (so no handshake orders it after the
        // stop). Acquiring the raise orders the seal's reads after what
        // the collector's last sweep published before it: the runs it
        // counted out and their pending bits, which the image leaves out.
        // SAFETY: as for this function.
        unsafe { seal_slow(page, SealEpoch(KEY.load(Ordering::Acquire))) }
    }
}

#[cold]
#[inline(never)]
unsafe fn seal_slow(page: *mut Page, seal: SealEpoch) {
    // SAFETY: live and ours for the call (caller).
    let p = unsafe { PageRef::from_raw(page) };
    // SAFETY: as above.
    let sealed = unsafe { &(*page).sealed };
    loop {
        let s = sealed.load(Ordering::Acquire);
        if s >= seal.0 {
            // A walk claimed it (an owner is never BUSY here: pages have one
            // owner, and this is it).
            return;
        }
        if s & BUSY != 0 {
            std::hint::spin_loop();
            continue;
        }
        if sealed
            .compare_exchange(s, seal.0 | BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        let image = p.bitmap(Bitmap::Seal);
        let mut n = 0;
        allocated_less_pending(p, |w| {
            image[n].store(w, Ordering::Relaxed);
            n += 1;
        });
        // Published with its length: a walk that acquires `E` reads it.
        sealed.store(seal.0 | n as u64, Ordering::Release);
        return;
    }
}

/// Calls `f` with each of the page's allocated words less the blocks of
/// page runs out, `bitmap_words()` of them. The order of the reads is the
/// pending protocol's: an owner taking a run back clears the run's
/// allocated bits, then its pending bits, then its count (`runs_out`), so
/// the count is read first, then each pending word before its allocated
/// word. A block is in the copy only if its allocated bit was set and no
/// run held it: it holds an object (or did, and its run has been taken back
/// since, which the pending word read first rules out).
fn allocated_less_pending(p: PageRef<'_>, mut f: impl FnMut(u64)) {
    let words = p.bitmap_words();
    if p.runs_out() != 0 {
        p.pending_words()
            .chain(std::iter::repeat(0))
            .zip(p.allocated_words())
            .take(words)
            .for_each(|(pending, allocated)| f(allocated & !pending));
    } else {
        p.allocated_words().take(words).for_each(f);
    }
}

impl PageRef<'_> {
    /// Whether the block at `p`, one in use that the caller reached, was
    /// certainly allocated after the stop that raised `seal`: true only if
    /// its page's owner sealed the page for `seal` (its image is in the
    /// page) and the image lacks the block. False when it cannot tell (a
    /// page the walk claimed, whose copy is the walk's; a seal under way;
    /// a page set up again since), and for blocks allocated before the
    /// stop. A collector's barrier asks it to skip the deletion barrier's
    /// shade of an object its sweep will not free anyway (its copy lacks
    /// the block: the walk's copy of a page its owner sealed is the
    /// image). The loom model is `seal_model.rs`, `ask_model`.
    ///
    /// # Examples
    /// ```
    /// use loam_heap::{alloc_object, PageRef, SealEpoch};
    /// # // Leaked: a block with its allocated bit set goes back through a page run.
    /// let (a, bit) = alloc_object(48, 8, 0, 0);
    /// bit.unwrap().set();
    /// // A collector's stop.
    /// // SAFETY: no other collector in this program.
    /// let e = unsafe { SealEpoch::raise() };
    /// // An allocation after the stop, in the same page: its owner seals it.
    /// let (b, bit) = alloc_object(48, 8, 0, 0);
    /// bit.unwrap().set();
    /// // SAFETY: `a` and `b` stay live.
    /// let (pa, pb) = unsafe { (PageRef::of(a), PageRef::of(b)) };
    /// assert!(!pa.allocated_since(a, e));
    /// assert!(pb.allocated_since(b, e));
    /// ```
    pub fn allocated_since(&self, p: *const u8, seal: SealEpoch) -> bool {
        // SAFETY: a PageRef names a live descriptor.
        let sealed = unsafe { &(*self.raw()).sealed };
        // Acquire: an owner's image is published by its release of `s`.
        let s = sealed.load(Ordering::Acquire);
        let len = (s & LEN) as usize;
        // A seal under way (`BUSY`, no length yet), another epoch's seal
        // (below `seal`: nothing allocated since the stop; above: a later
        // stop's image, not this one's), a walk's claim (no length), or a
        // page set up again with another geometry.
        if s & BUSY != 0 || s & !LEN != seal.0 || len == 0 || len != self.bitmap_words() {
            return false;
        }
        let i = self.block_index(p);
        self.bitmap(Bitmap::Seal)[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) == 0
    }

    /// Appends to `out` the page's allocated bits as of the stop that
    /// raised `seal`, less the blocks of page runs out (one word per
    /// 64 blocks, [`bitmap_words`](Self::bitmap_words) of them), and
    /// returns true; or returns false, appending nothing, if the page was
    /// released and set up again meanwhile (nothing allocated before the
    /// stop is in it then). For a collector's walk after its stop, with the
    /// mutators running; it claims the page for `seal` if its owner has not
    /// sealed it yet (module docs in `seal.rs`). One walk per epoch: a
    /// page it claimed is not read again.
    ///
    /// # Examples
    /// ```
    /// use loam_heap::{alloc_object, PageRef, SealEpoch};
    /// # // Leaked: a block with its allocated bit set goes back through a page run.
    /// let (a, bit) = alloc_object(48, 8, 0, 0);
    /// bit.unwrap().set();
    /// // A collector's stop.
    /// // SAFETY: no other collector in this program.
    /// let e = unsafe { SealEpoch::raise() };
    /// // An allocation after the stop, in the same page: it seals first.
    /// let (b, bit) = alloc_object(48, 8, 0, 0);
    /// bit.unwrap().set();
    /// // SAFETY: `a` stays live.
    /// let page = unsafe { PageRef::of(a) };
    /// let mut copy = Vec::new();
    /// assert!(page.sealed_words(e, &mut copy));
    /// let bit_of = |p: *mut u8| {
    ///     let i = page.block_index(p);
    ///     copy[i / 64] & (1 << (i % 64)) != 0
    /// };
    /// assert!(bit_of(a) && !bit_of(b));
    /// ```
    pub fn sealed_words(&self, seal: SealEpoch, out: &mut Vec<u64>) -> bool {
        let mut waits = 0_u32;
        loop {
            if let Some(copied) = self.try_sealed_words(seal, out) {
                return copied;
            }
            // The owner is copying: a few hundred nanoseconds, unless it
            // was preempted in the middle, when spinning here only keeps
            // a CPU from it. Spin a little, then give the CPU up.
            waits += 1;
            if waits < 64 && !cfg!(loom) {
                std::hint::spin_loop();
            } else if waits < 128 || cfg!(loom) {
                crate::sync::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
    }

    /// [`sealed_words`](Self::sealed_words) without waiting: `None`,
    /// appending nothing, while the page's owner is writing its image
    /// (the walk can come back to the page later), else what
    /// `sealed_words` returns.
    ///
    /// A walk that waited there waited for as long as the OS kept the
    /// owner off its CPU when it was preempted mid-copy: binary-trees at
    /// depth 16 with two mutators on two cores saw walks of 37 and 48 ms
    /// (against under 1 ms), spinning on one page, while a mutator paced
    /// for that cycle waited with them. Passing such a page by and coming
    /// back to it at the end of the walk gives the owner that long to run.
    ///
    /// # Examples
    /// ```
    /// use loam_heap::{alloc_object, PageRef, SealEpoch};
    /// # // Leaked: a block with its allocated bit set goes back through a page run.
    /// let (a, bit) = alloc_object(48, 8, 0, 0);
    /// bit.unwrap().set();
    /// // SAFETY: no other collector in this program.
    /// let e = unsafe { SealEpoch::raise() };
    /// // SAFETY: `a` stays live.
    /// let page = unsafe { PageRef::of(a) };
    /// let mut copy = Vec::new();
    /// // Nobody else is sealing the page: the walk claims and copies it.
    /// assert_eq!(page.try_sealed_words(e, &mut copy), Some(true));
    /// assert_eq!(copy.len(), page.bitmap_words());
    /// ```
    pub fn try_sealed_words(&self, seal: SealEpoch, out: &mut Vec<u64>) -> Option<bool> {
        let words = self.bitmap_words();
        // SAFETY: a PageRef names a live descriptor.
        let sealed = unsafe { &(*self.raw()).sealed };
        loop {
            let s = sealed.load(Ordering::Acquire);
            if s & BUSY != 0 {
                return None;
            }
            if s >> EPOCH_SHIFT > seal.0 >> EPOCH_SHIFT {
                crate::fatal("a page sealed for a later epoch than its walk's: cycles overlap");
            }
            if s >= seal.0 {
                // The owner's image, published by its release of `s`.
                let len = (s & LEN) as usize;
                if len != words {
                    // Of a page released since (or this walk's own claim,
                    // which it never reads twice): nothing of the stop's.
                    return Some(false);
                }
                out.extend(
                    self.bitmap(Bitmap::Seal)
                        .iter()
                        .take(len)
                        .map(|w| w.load(Ordering::Relaxed)),
                );
                return Some(true);
            }
            let from = out.len();
            allocated_less_pending(*self, |w| out.push(w));
            if out.len() != from + words || self.bitmap_words() != words {
                // Released and set up again between the reads: its only
                // blocks in use were a run's, taken back meanwhile, so
                // nothing of the stop's is in it. Left unclaimed: an owner
                // seals it before allocating.
                out.truncate(from);
                return Some(false);
            }
            if sealed
                .compare_exchange(s, seal.0, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return Some(true);
            }
            // An owner sealed meanwhile, and may have allocated since: its
            // image, not this copy.
            out.truncate(from);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A walk passes by a page whose owner is writing its image, leaving
    /// its copy untouched, and `sealed_words` waits for the image (or for
    /// the page to be the walk's to claim) instead of copying a page
    /// half-sealed.
    #[test]
    fn a_walk_passes_a_page_being_sealed_and_waits_for_it_only_when_asked() {
        let (a, bit) = crate::alloc_object(48, 8, 0, 0);
        bit.expect("an object block").set();
        // The only collector of this test binary: no other test raises.
        // SAFETY: as just said.
        let e = unsafe { SealEpoch::raise() };
        // SAFETY: `a` is leaked, so its page stays live.
        let page = unsafe { PageRef::of(a) };
        // SAFETY: a PageRef names a live descriptor.
        let sealed = unsafe { &(*page.raw()).sealed };
        let before = sealed.load(Ordering::Acquire);
        assert!(before < e.0, "nothing sealed the page for the new epoch yet");
        // The owner, preempted in the middle of its copy.
        sealed.store(e.0 | BUSY, Ordering::Release);
        let mut copy = vec![7];
        assert_eq!(page.try_sealed_words(e, &mut copy), None);
        assert_eq!(copy, [7], "a busy page's copy appended words");
        let start = page.start() as usize;
        let (walking, walks) = std::sync::mpsc::channel();
        let walker = std::thread::spawn(move || {
            // SAFETY: `a`'s page stays live (above).
            let page = unsafe { PageRef::of(start as *const u8) };
            let mut copy = Vec::new();
            walking.send(()).unwrap();
            let copied = page.sealed_words(e, &mut copy);
            (copied, copy)
        });
        // Most likely the walker is waiting by the end of the nap (its
        // spins, yields and naps); the outcome is the same either way.
        walks.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        // The owner resumes: its seal ends, as `seal_slow` ends it, with
        // the image and its length (here from the top, the copy undone).
        sealed.store(before, Ordering::Release);
        // This thread allocated `a`, so it owns the page.
        // SAFETY: as just said; the page is live.
        unsafe { seal_before_alloc(page.raw()) };
        let (copied, copy) = walker.join().expect("the walker panicked");
        assert!(copied);
        assert_eq!(copy.len(), page.bitmap_words());
        let i = page.block_index(a);
        assert_ne!(copy[i / 64] & (1 << (i % 64)), 0, "the copy lacks the object allocated before the stop");
    }
}
