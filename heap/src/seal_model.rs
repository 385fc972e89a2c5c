//! Loom model of sealing a page at its first allocation after a cycle's
//! first stop (`docs/handshakes.md`, "Step 3 without allocating black";
//! built in `seal.rs`): this model is its proof, written first. A collector's copy of a page's allocated bits is taken after the
//! stop, with the mutators running; the page's owner, before its first
//! allocation there after the stop, seals the page (copies its bits into a
//! seal bitmap), and a GC thread walking the pages claims the ones not
//! sealed yet and copies them itself. Either way the copy must hold
//! exactly the blocks allocated before the stop.
//!
//! Two blocks stand for the page: block 0 holds an object allocated before
//! the stop (bit 0), block 1 is free and the owner allocates it after the
//! stop (bit 1). The page's `sealed` word is the epoch whose copy it holds;
//! `E | BUSY` while its owner copies:
//! - owner, before allocating: if `sealed` is below `E`, CAS it from that
//!   value to `E | BUSY`, copy the allocated word into the seal bitmap,
//!   store `E` (release); then write the object and set its bit
//!   (release);
//! - the walk (a GC thread): read `sealed` (acquire); at `E` the copy is
//!   the seal bitmap; on `E | BUSY` wait; otherwise copy the allocated
//!   word (acquire), and CAS `sealed` from the
//!   value read to `E` (release); it writes no seal bitmap (a walk reads a
//!   page once). If the CAS fails, the owner sealed meanwhile: wait for
//!   `E` and take the seal bitmap instead. No mutator waits for the walk.
//!
//! In every interleaving the copy is bit 0 alone. The variants that publish
//! `E` before the owner's copy, allocate before sealing, or keep the walk's
//! copy when its CAS failed, fail.
//!
//! A second model adds a mutator's barrier asking whether a block it
//! reached was allocated after the stop (`PageRef::allocated_since`), to
//! skip the deletion barrier's shade of such a block: it reads `sealed`
//! (acquire) and answers yes only if the page is sealed for `E` by its
//! owner (an image, `IMG` here; the real word's image length) and the
//! image lacks the block. It must never say yes of a block in the walk's
//! copy, and must say yes of the block allocated after the stop once its
//! owner has sealed the page. The variant that takes a walk's claim (no
//! image) for an empty image fails, and so does one that never says yes.
//! (A seal under way shows no image either, `E | BUSY`, so the same check
//! covers it.)
//!
//! A third (`epochs`) adds the raise of the epoch and an allocation that
//! reads an older one (another runtime's call begun before the stop), in
//! the real word's encoding: the copy stays exact, and letting calls
//! begin before the raise fails it. The first two keep `E` fixed and mark
//! an owner's image with `IMG` where the real word has its length; the
//! pending bits (a run taken back during the walk) are `pending_model.rs`'s.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// The epoch the stop raised (the page was last sealed at `E - 1`).
const E: u64 = 2;
/// Set in `sealed` while the owner copies.
const BUSY: u64 = 1 << 63;
/// Set in `sealed` by an owner's seal (its image is in `seal_bits`); a
/// walk's claim stores `E` alone (the real word: a nonzero image length).
const IMG: u64 = 1 << 62;
/// The object allocated before the stop.
const OLD: u64 = 1;
/// The block the owner allocates after the stop.
const NEW: u64 = 2;

struct Page {
    sealed: AtomicU64,
    allocated: AtomicU64,
    /// The owner's copy (published by its release store of `E`).
    seal_bits: AtomicU64,
}

/// Which step the model gets wrong, if any.
#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    /// The owner stores `E` before it writes the seal bitmap.
    PublishFirst,
    /// The owner sets the new block's bit before it seals the page.
    AllocateFirst,
    /// The walk keeps its copy although its CAS failed (an owner sealed
    /// and allocated between its read of `sealed` and its CAS).
    KeepStaleCopy,
}

/// Waits (yielding to loom) while the owner copies; the value seen last.
fn settled(p: &Page) -> u64 {
    loop {
        let s = p.sealed.load(Ordering::Acquire);
        if s != E | BUSY {
            return s & !IMG;
        }
        thread::yield_now();
    }
}

/// The owner allocates block 1, sealing the page first.
fn owner(p: &Page, bug: Bug) {
    if bug == Bug::AllocateFirst {
        p.allocated.fetch_or(NEW, Ordering::Release);
    }
    loop {
        let s = settled(p);
        if s == E {
            break;
        }
        if p.sealed
            .compare_exchange(s, E | BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            let bits = p.allocated.load(Ordering::Relaxed);
            if bug == Bug::PublishFirst {
                p.sealed.store(E | IMG, Ordering::Release);
                p.seal_bits.store(bits, Ordering::Relaxed);
            } else {
                p.seal_bits.store(bits, Ordering::Relaxed);
                p.sealed.store(E | IMG, Ordering::Release);
            }
            break;
        }
    }
    if bug != Bug::AllocateFirst {
        // The object is written, then its bit set (release).
        p.allocated.fetch_or(NEW, Ordering::Release);
    }
}

/// The walk's copy of the page.
fn walk(p: &Page, bug: Bug) -> u64 {
    let s = settled(p);
    if s == E {
        return p.seal_bits.load(Ordering::Relaxed);
    }
    let bits = p.allocated.load(Ordering::Acquire);
    match p
        .sealed
        .compare_exchange(s, E, Ordering::Release, Ordering::Relaxed)
    {
        Ok(_) => bits,
        Err(_) if bug == Bug::KeepStaleCopy => bits,
        Err(_) => {
            // The owner sealed meanwhile: its copy, published by `E`.
            while settled(p) != E {}
            p.seal_bits.load(Ordering::Relaxed)
        }
    }
}

/// The page as the stop left it: block 0 allocated, sealed for `E - 1`.
fn page() -> Arc<Page> {
    Arc::new(Page {
        sealed: AtomicU64::new(E - 1),
        allocated: AtomicU64::new(OLD),
        seal_bits: AtomicU64::new(0),
    })
}

fn model(bug: Bug) {
    crate::sync::model(move || {
        let p = page();
        let o = {
            let p = p.clone();
            thread::spawn(move || owner(&p, bug))
        };
        // Both sides on threads of their own: with the walk on the model's
        // main thread, loom never ran the owner before the walk's first
        // read, and missed the failing runs of two variants and a bug in
        // the protocol as first written (the walk wrote the seal bitmap
        // before its CAS, over the owner's copy when it lost).
        let w = {
            let p = p.clone();
            thread::spawn(move || walk(&p, bug))
        };
        let copy = w.join().unwrap();
        o.join().unwrap();

        assert_copy(copy, OLD, NEW);
        // Whoever sealed, the page ends sealed for this epoch.
        assert_eq!(p.sealed.load(Ordering::Relaxed) & !IMG, E);
    });
}

/// The walk's copy of the page's allocated bits: the object allocated
/// before the stop (bit `old`), and not the block allocated after it
/// (`new`). Both models' checks.
fn assert_copy(copy: u64, old: u64, new: u64) {
    assert_eq!(
        copy & old,
        old,
        "the copy lost an object allocated before the stop"
    );
    assert_eq!(
        copy & new,
        0,
        "the copy holds a block allocated after the stop"
    );
}

#[test]
fn the_copy_holds_exactly_the_blocks_allocated_before_the_stop() {
    model(Bug::None);
}

#[test]
#[should_panic(expected = "the copy lost an object allocated before the stop")]
fn publishing_the_epoch_before_the_owners_copy_loses_objects() {
    model(Bug::PublishFirst);
}

#[test]
#[should_panic(expected = "the copy holds a block allocated after the stop")]
fn allocating_before_sealing_puts_a_new_block_in_the_copy() {
    model(Bug::AllocateFirst);
}

#[test]
#[should_panic(expected = "the copy holds a block allocated after the stop")]
fn keeping_the_walks_copy_after_a_failed_cas_races_the_owners_allocation() {
    model(Bug::KeepStaleCopy);
}

/// Which step of the barrier's question the model gets wrong, if any.
#[derive(Clone, Copy, PartialEq)]
enum Ask {
    Right,
    /// Never says yes (safe, and useless).
    AlwaysNo,
    /// Takes a page the walk claimed (no image) as sealed with an empty one.
    IgnoreClaim,
}

/// `PageRef::allocated_since`: whether `block` was certainly allocated
/// after the stop. "No" is always safe (the barrier shades).
fn allocated_since(p: &Page, block: u64, ask: Ask) -> bool {
    let s = p.sealed.load(Ordering::Acquire);
    if s & BUSY != 0 || ask == Ask::AlwaysNo {
        return false;
    }
    if s & !IMG != E {
        // Not sealed for this stop: nothing in it was allocated since.
        return false;
    }
    if s & IMG == 0 && ask != Ask::IgnoreClaim {
        // A walk's claim: its copy is not in the page.
        return false;
    }
    p.seal_bits.load(Ordering::Relaxed) & block == 0
}

/// The owner, the walk and a mutator that asks about the block allocated
/// before the stop (which it may reach at any time) and the one allocated
/// after (once it sees it allocated: acquire on the bit, as the object's
/// publication would order it).
fn ask_model(ask: Ask) {
    crate::sync::model(move || {
        let p = page();
        let o = {
            let p = p.clone();
            thread::spawn(move || owner(&p, Bug::None))
        };
        let w = {
            let p = p.clone();
            thread::spawn(move || walk(&p, Bug::None))
        };
        let m = {
            let p = p.clone();
            thread::spawn(move || {
                let old = allocated_since(&p, OLD, ask);
                let new = if p.allocated.load(Ordering::Acquire) & NEW != 0 {
                    allocated_since(&p, NEW, ask)
                } else {
                    false
                };
                (old, new)
            })
        };
        let copy = w.join().unwrap();
        o.join().unwrap();
        let (old, new) = m.join().unwrap();
        assert!(
            !(old && copy & OLD != 0) && !(new && copy & NEW != 0),
            "a block of the copy was taken for one allocated after the stop"
        );
        // And the question is worth asking: once the owner sealed the page
        // with its image, the block it allocated after the stop is known
        // as such (an answer of "no" throughout would pass the above).
        if p.sealed.load(Ordering::Acquire) & IMG != 0 {
            assert!(
                allocated_since(&p, NEW, ask),
                "a block allocated after the stop, on a page its owner sealed, was not known"
            );
        }
    });
}

#[test]
#[should_panic(expected = "was not known")]
fn answering_no_throughout_fails() {
    ask_model(Ask::AlwaysNo);
}

#[test]
fn only_blocks_outside_the_copy_are_allocated_since() {
    ask_model(Ask::Right);
}

#[test]
#[should_panic(expected = "taken for one allocated after the stop")]
fn taking_a_claim_for_an_empty_image_fails() {
    ask_model(Ask::IgnoreClaim);
}

/// The epoch model: the raise itself, and an allocation that reads an
/// older epoch. `seal.rs`'s encoding (the epoch from bit 9, `BUSY` bit 8,
/// the image's length below) and its steps, on a one-word page:
/// - the collector raises the key (`SealEpoch::raise`, `AcqRel`), lets
///   its runtime's calls begin (the handshake's resume, a release its
///   calls acquire), then walks (`try_sealed_words`, waiting on `BUSY` as
///   `sealed_words` does);
/// - the page's owner first allocates for another runtime, in a call that
///   began before the stop (no handshake orders it after the raise, so it
///   may read the old key), then, once this runtime's calls may begin,
///   for this runtime; each allocation is `seal_before_alloc` (a relaxed
///   key against an acquired `sealed`, the slow path acquiring the key),
///   then the bit (release).
///
/// The page was last sealed two epochs ago, so a stale allocation seals
/// it for the old epoch. The copy must hold the object allocated before
/// the stop and not this runtime's allocated after; the other runtime's
/// may be in it or not (its sweep tells pages' tags and headers apart).
/// The variant whose collector lets calls begin before it raises the key
/// fails: a call that read the old key found the page sealed and
/// allocated into the copy.
mod epochs {
    use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    const EPOCH_SHIFT: u32 = 9;
    const BUSY: u64 = 1 << 8;
    const LEN: u64 = 0xff;
    /// The epoch the stop raises, shifted as the key holds it.
    const E: u64 = 3 << EPOCH_SHIFT;
    const OLD: u64 = 1;
    /// Another runtime's object, allocated in a call begun before the stop.
    const OTHER: u64 = 2;
    /// This runtime's object, allocated after the stop.
    const NEW: u64 = 4;

    struct Page {
        sealed: AtomicU64,
        allocated: AtomicU64,
        image: AtomicU64,
    }

    /// `seal_before_alloc`, then the block's bit.
    fn alloc(p: &Page, key: &AtomicU64, block: u64) {
        if p.sealed.load(Ordering::Acquire) < key.load(Ordering::Relaxed) {
            let seal = key.load(Ordering::Acquire);
            loop {
                let s = p.sealed.load(Ordering::Acquire);
                if s >= seal {
                    break;
                }
                if s & BUSY != 0 {
                    thread::yield_now();
                    continue;
                }
                if p.sealed
                    .compare_exchange(s, seal | BUSY, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    continue;
                }
                p.image
                    .store(p.allocated.load(Ordering::Acquire), Ordering::Relaxed);
                p.sealed.store(seal | 1, Ordering::Release);
                break;
            }
        }
        p.allocated.fetch_or(block, Ordering::Release);
    }

    /// `sealed_words` for `seal`: the copy (0 for "nothing of the stop's").
    fn walk(p: &Page, seal: u64) -> u64 {
        loop {
            let s = p.sealed.load(Ordering::Acquire);
            if s & BUSY != 0 {
                thread::yield_now();
                continue;
            }
            assert!(
                s >> EPOCH_SHIFT <= seal >> EPOCH_SHIFT,
                "a page sealed for a later epoch"
            );
            if s >= seal {
                return if s & LEN == 1 {
                    p.image.load(Ordering::Relaxed)
                } else {
                    0
                };
            }
            let copy = p.allocated.load(Ordering::Acquire);
            if p.sealed
                .compare_exchange(s, seal, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return copy;
            }
        }
    }

    fn model(resume_first: bool) {
        crate::sync::model(move || {
            let key = Arc::new(AtomicU64::new(E - (1 << EPOCH_SHIFT)));
            let resumed = Arc::new(AtomicBool::new(false));
            let p = Arc::new(Page {
                sealed: AtomicU64::new((E - (2 << EPOCH_SHIFT)) | 1),
                allocated: AtomicU64::new(OLD),
                image: AtomicU64::new(OLD),
            });
            let owner = {
                let (p, key, resumed) = (p.clone(), key.clone(), resumed.clone());
                thread::spawn(move || {
                    alloc(&p, &key, OTHER);
                    while !resumed.load(Ordering::Acquire) {
                        thread::yield_now();
                    }
                    alloc(&p, &key, NEW);
                })
            };
            let collector = {
                let (p, key, resumed) = (p.clone(), key.clone(), resumed.clone());
                thread::spawn(move || {
                    if resume_first {
                        resumed.store(true, Ordering::Release);
                    }
                    let seal =
                        key.fetch_add(1 << EPOCH_SHIFT, Ordering::AcqRel) + (1 << EPOCH_SHIFT);
                    if !resume_first {
                        resumed.store(true, Ordering::Release);
                    }
                    walk(&p, seal)
                })
            };
            let copy = collector.join().unwrap();
            owner.join().unwrap();
            super::assert_copy(copy, OLD, NEW);
            assert_eq!(
                p.sealed.load(Ordering::Relaxed) >> EPOCH_SHIFT,
                E >> EPOCH_SHIFT
            );
        });
    }

    #[test]
    fn an_allocation_of_an_older_epoch_leaves_the_copy_exact() {
        model(false);
    }

    #[test]
    #[should_panic(expected = "the copy holds a block allocated after the stop")]
    fn calls_let_in_before_the_raise_allocate_into_the_copy() {
        model(true);
    }
}
