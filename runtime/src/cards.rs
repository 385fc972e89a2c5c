//! [`GcCards`]: card marking for an object traced in parts, so that a minor
//! cycle traces again only the parts that changed.
//!
//! A collection records its object with its [`GcLog`](crate::GcLog) when it
//! changes, and the next minor cycle traces the object again: all of it,
//! though the change was one element of a million (a rooted list of a
//! million `Gc`s, one element set a call, spent 15% of the mutator's time
//! assisting with those traces: `examples/long_list.rs`). Its cards say
//! which slots changed: slot `i` lies in card `min(i >> scale, 51)`, one
//! bit of a word, and a store between marks sets its card's bit
//! ([`touch`](GcCards::touch)). Part 0 of a marker's trace *takes* the
//! changed cards (clears them, and keeps them for this cycle's later
//! parts); a later part whose slots lie in no taken card reports nothing
//! ([`must_trace`](GcCards::must_trace)).
//!
//! # Why a part may skip the cards not taken
//! The minor cycles' invariant (`barrier.rs`) lets a marked object point
//! to an unmarked one only if the object is recorded: the next minor cycle
//! traces it again. With cards, the object's slots in cards not changed
//! hold marked objects only (or the pointer's target is queued, or
//! remembered, as the barrier leaves it). Why that holds at a minor
//! cycle's take:
//! 1. *A card is cleared only by a take, and every card taken is traced in
//!    the same cycle.* The take merges the cards into `taken` before part 0
//!    returns; the later parts are queued after it (the mark queues order
//!    the two) and read `taken`, and all of them run before the mark ends.
//!    A take of another cycle never counts: `taken` carries the cycle's
//!    tag, and a part that reads another tag traces. (A tag is the cycle's
//!    number modulo 64: an old take read as this cycle's only adds cards.)
//!    A mark in which a `Trace` panicked frees nothing, and the next cycle
//!    is full (below).
//! 2. *A store between marks sets its card before the next trace reads
//!    it.* A call that read `marking` clear runs between two marks: no
//!    trace overlaps it (`barrier.rs`, "A young object's cells", 1), and
//!    the cycle that begins after it reads what it stored, and its touch
//!    with it. So the store's slot is in a taken card at the next take.
//!    Stores into a young collection's slots included: its cards are all
//!    changed until its first take (`new`).
//! 3. *A store during a mark shades what it stores* (`barrier.rs`, 2), into
//!    `gray` or a remembered list, which the next cycle takes, or finds it
//!    marked; except into a collection whose log no marker has met, which
//!    no take has seen either (a take comes after the log's `trace` in
//!    part 0): all its cards are changed. The stores of a call that began
//!    before a mark and runs on past it shade too. Their touches cost the
//!    next cycle a card's trace, and cover a shade that a panicking
//!    `Trace` cut short (which breaks `Trace`'s rule 5, but should not
//!    cost an object): so a collection touches before it stores.
//! 4. *What a trace marks stays marked until marks are cleared*, and a
//!    clear (any runtime's full cycle: phase 0 or its pause in loam's
//!    pages, a `GlobalAlloc` space's full snapshot) counts itself in
//!    `MARK_CLEARS` before any mark of its cycle begins. A take keeps the
//!    count it read; one that reads a different count takes every card.
//!    So a card not changed since the last take that cleared it was traced
//!    by that take's parts with the marks of then, which still stand.
//! 5. *Moving values among slots is a store*: a sort or a shift touches
//!    every card it writes. Growth into a larger array keeps every value at
//!    its index (no card changes), and rescales the cards
//!    ([`rescale`](GcCards::rescale)), all changed: a card's bit means its
//!    slots under one scale. A take racing with the rescale (during a mark)
//!    may clear some of the new bits: harmless, since what a take leaves
//!    clear is a claim about the slots that take's parts trace or that no
//!    store between marks changed, under either scale (2).
//!
//! 6. *One object's cards.* A take clears what it read for its own
//!    object's parts; a `GcCards` reached from two objects (through an
//!    `Arc`) would let one object's take clear the other's changes. The
//!    first take records the object (`owner`), and a take from another
//!    object marks the cards shared: from then on every take takes every
//!    card, as a `GcLog` reached from two objects makes every cycle full.
//!    Each object's first take takes every card anyway (`clears`).
//!
//! A full cycle takes the cards too (every card: the count changed), so
//! the minor cycles after it start clean. Traced whole (`Trace::trace`: a
//! part traced again because a lock inside was held, verify mode), an
//! object takes nothing: its cards stay changed for the next take.
//!
//! # Memory ordering
//! Touches are relaxed: a store between marks and the next trace are
//! ordered by the cycle's handshake, as the store itself is (2). Takes of
//! one cycle merge into `taken` with a compare-and-swap; a take stores the
//! count after its merge (release), so a take that reads the new count
//! (acquire) finds the merge in `taken`, all cards included. The loom
//! model is at the end.

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

use crate::trace::Tracer;
use std::fmt;
use std::ops::Range;

/// Cards a [`GcCards`] has: bits 0 – 51 of each word.
const CARDS: usize = 52;
/// The cards' bits.
const CARD_BITS: u64 = (1 << CARDS) - 1;
/// Bits 52 – 57: the scale (`log2` of the slots a card covers).
const SCALE_AT: u32 = 52;
const SCALE_BITS: u64 = 0x3f << SCALE_AT;
/// Bits 58 – 63 of `taken`: the tag of the cycle that took it.
const TAG_AT: u32 = 58;
/// The smallest scale: a card is at least 256 slots, a part's share of a
/// collection's elements (`loam-collections`).
const MIN_SCALE: u32 = 8;

/// Card marking for an object traced in parts
/// ([`Trace::trace_part`](crate::Trace::trace_part)): which of its slots
/// changed since a marker last traced them, so that a minor cycle's trace
/// of the object skips the parts that did not (module docs, `cards.rs`).
///
/// Slot `i` (an index into whatever the object's parts cover: a list's
/// elements) lies in card `min(i >> scale, 51)` (52 cards), where the scale is
/// set by [`rescale`](GcCards::rescale) for the number of slots.
///
/// # The contract
/// An object's `Trace` impl that uses its cards (part 0 calls
/// [`take`](GcCards::take) after its log's `trace`, and later parts skip
/// what [`must_trace`](GcCards::must_trace) says they may) must
/// [`touch`](GcCards::touch) the card of every slot it reports whose value
/// changes, in the same `mutate` call as the change (a store, a move by a
/// sort or a shift); and call `rescale` whenever it changes the scale. That
/// rests on the impl's own `unsafe impl Trace` (rule 7): a store left
/// untouched is a slot the next minor cycle does not read.
///
/// # Examples
/// ```
/// use loam_runtime::GcCards;
///
/// let cards = GcCards::new();
/// cards.rescale(1 << 20); // a million slots: 32 cards of 32,768
/// cards.touch(100_000);
/// cards.touch_range(0..10);
/// assert_eq!(cards.scale(), 15);
/// ```
pub struct GcCards {
    /// The cards changed since a take cleared them (bits 0 – 51), and the
    /// scale (52 – 57).
    changed: AtomicU64,
    /// What this cycle's takes took: cards, the scale they were read
    /// with, and the cycle's tag (58 – 63).
    taken: AtomicU64,
    /// `MARK_CLEARS` as the last take read it (`u64::MAX`: never taken).
    clears: AtomicU64,
    /// The object whose trace took the cards (0: none yet; [`SHARED`]: two
    /// objects' traces did, module docs, 6).
    owner: AtomicUsize,
}

/// `GcCards::owner` of cards two objects' traces took.
const SHARED: usize = 1;

/// A `GcCards` with every card changed, at the smallest scale (the body of
/// `GcCards::new`, `const` outside loom).
macro_rules! gc_cards {
    () => {
        GcCards {
            changed: AtomicU64::new(CARD_BITS | (MIN_SCALE as u64) << SCALE_AT),
            taken: AtomicU64::new(0),
            clears: AtomicU64::new(u64::MAX),
            owner: AtomicUsize::new(0),
        }
    };
}

impl GcCards {
    /// Cards all changed, at the smallest scale.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        gc_cards!()
    }

    /// (loom's atomics have no `const fn new`.)
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        gc_cards!()
    }

    /// Cards all changed, scaled for `slots` slots
    /// ([`rescale`](Self::rescale)).
    pub fn with_slots(slots: usize) -> Self {
        let c = Self::new();
        c.rescale(slots);
        c
    }

    /// The scale: slot `i` lies in card `min(i >> scale, 51)`.
    pub fn scale(&self) -> u32 {
        ((self.changed.load(Ordering::Relaxed) & SCALE_BITS) >> SCALE_AT) as u32
    }

    /// Sets the scale for `slots` slots (the smallest whose cards cover
    /// them, at least 256 slots a card) and marks every card changed: for
    /// an object whose slots grew (a collection's new array).
    pub fn rescale(&self, slots: usize) {
        let mut scale = MIN_SCALE;
        while scale < 63 && (CARDS as u128) << scale < slots as u128 {
            scale += 1;
        }
        // A swap, not a store: it races with takes' `fetch_and` (module
        // docs, 5), and loom reads a plain store racing a
        // read-modify-write wrongly (tokio-rs/loom#254).
        self.changed
            .swap(CARD_BITS | (scale as u64) << SCALE_AT, Ordering::Relaxed);
    }

    /// Marks the card of slot `i` changed. A load and a compare when it is
    /// already (a run of stores into one card costs one read-modify-write
    /// a cycle).
    #[inline(always)]
    pub fn touch(&self, i: usize) {
        let w = self.changed.load(Ordering::Relaxed);
        let bit = 1 << card_of(i, w);
        if w & bit == 0 {
            self.changed.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// Marks the cards of slots `range` changed.
    #[inline]
    pub fn touch_range(&self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        let w = self.changed.load(Ordering::Relaxed);
        let bits = cards_of(&range, w);
        if w & bits != bits {
            self.changed.fetch_or(bits, Ordering::Relaxed);
        }
    }

    /// Part 0 of a marker's trace of the object: takes the changed cards
    /// for this cycle's later parts ([`must_trace`](Self::must_trace)), or
    /// every card if marks were cleared since the last take. Call it after
    /// the object's log's `trace`. Outside a marker's trace (verify mode)
    /// it takes nothing.
    #[cfg(not(loom))]
    pub fn take(&self, tracer: &Tracer) {
        if tracer.current() != 0 {
            let (cycle, clears) = crate::cycle::card_epoch();
            self.take_in(cycle, clears, tracer.current());
        }
    }

    /// Whether a later part of a marker's trace must report slots `range`:
    /// true if they lie in a card this cycle's takes took, or if `taken`
    /// carries another cycle's tag (modulo 64), or outside a marker's
    /// trace. (Later parts run only after their part 0 took, in the same
    /// cycle.)
    #[cfg(not(loom))]
    #[inline]
    pub fn must_trace(&self, tracer: &Tracer, range: Range<usize>) -> bool {
        tracer.current() == 0 || self.must_trace_in(crate::cycle::card_epoch().0, range)
    }

    /// [`take`](Self::take) in cycle `cycle`, with `clears` marks clears
    /// counted so far, for a trace of the object at `owner`.
    fn take_in(&self, cycle: u64, clears: u64, owner: usize) {
        let w = self.changed.load(Ordering::Acquire);
        let mut took = w & (CARD_BITS | SCALE_BITS);
        // Asked whatever the count says, so that another object's take
        // always marks the cards shared (a take after a clear took every
        // card and skipped the question: the next take of the first
        // object then trusted cards the other had cleared).
        let owned = self.owned_by(owner);
        if !owned || self.clears.load(Ordering::Acquire) != clears {
            took |= CARD_BITS;
        }
        // What it read as changed, cleared: a touch after the load sets
        // its bit again for the next take (a store during the mark: 3).
        // Release: a take of another object that reads the word this
        // leaves (acquire, above) sees the cards marked shared, if this
        // take marked them (module docs, 6).
        self.changed.fetch_and(!(w & CARD_BITS), Ordering::AcqRel);
        let tag = (cycle & 0x3f) << TAG_AT;
        let mut cur = self.taken.load(Ordering::Acquire);
        loop {
            let next = if cur & !(CARD_BITS | SCALE_BITS) != tag {
                // The cycle's first take.
                tag | took
            } else if cur & SCALE_BITS == took & SCALE_BITS {
                cur | took
            } else {
                // Rescaled between two takes of the cycle: every card.
                cur | CARD_BITS
            };
            match self
                .taken
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        // After the merge: a take that reads this count finds it (module
        // docs, "Memory ordering").
        self.clears.store(clears, Ordering::Release);
    }

    /// Whether the cards are `owner`'s alone: the first take's object, and
    /// no other's since (module docs, 6).
    fn owned_by(&self, owner: usize) -> bool {
        match self
            .owner
            .compare_exchange(0, owner, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => true,
            Err(o) if o == owner => true,
            Err(_) => {
                self.owner.store(SHARED, Ordering::Relaxed);
                false
            }
        }
    }

    /// [`must_trace`](Self::must_trace) in cycle `cycle`.
    #[inline]
    fn must_trace_in(&self, cycle: u64, range: Range<usize>) -> bool {
        let t = self.taken.load(Ordering::Acquire);
        if t >> TAG_AT != cycle & 0x3f {
            return true;
        }
        !range.is_empty() && t & cards_of(&range, t) != 0
    }
}

// SAFETY: holds no managed pointer (3); no `Drop` (4).
unsafe impl crate::Trace for GcCards {
    const NEEDS_TRACE: bool = false;

    fn trace(&self, _: &mut Tracer) {}
}

impl Default for GcCards {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for GcCards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.changed.load(Ordering::Relaxed);
        f.debug_struct("GcCards")
            .field("scale", &((w & SCALE_BITS) >> SCALE_AT))
            .field("changed", &format_args!("{:#x}", w & CARD_BITS))
            .finish()
    }
}

/// The card of slot `i` under the scale in word `w`.
#[inline(always)]
fn card_of(i: usize, w: u64) -> u32 {
    let scale = ((w & SCALE_BITS) >> SCALE_AT) as u32;
    (i.checked_shr(scale).unwrap_or(0)).min(CARDS - 1) as u32
}

/// The bits of the cards of the nonempty `range` under the scale in `w`.
#[inline]
fn cards_of(range: &Range<usize>, w: u64) -> u64 {
    let (first, last) = (card_of(range.start, w), card_of(range.end - 1, w));
    // Bits `first ..= last`.
    (CARD_BITS >> (CARDS as u32 - 1 - last)) & !((1 << first) - 1)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn cards_cover_their_slots_at_every_scale() {
        let c = GcCards::new();
        assert_eq!(c.scale(), MIN_SCALE);
        c.rescale(1 << 20);
        assert_eq!(
            c.scale(),
            15,
            "52 cards of 2^15 cover 2^20 slots, of 2^14 do not"
        );
        c.rescale(52 << 20);
        assert_eq!(c.scale(), 20);
        c.rescale(usize::MAX);
        assert_eq!(c.scale(), 59);
        let w = (15_u64) << SCALE_AT;
        assert_eq!(card_of(0, w), 0);
        assert_eq!(card_of((1 << 15) - 1, w), 0);
        assert_eq!(card_of(1 << 15, w), 1);
        assert_eq!(card_of(usize::MAX, w), CARDS as u32 - 1);
        assert_eq!(cards_of(&(0..1), w), 1);
        assert_eq!(cards_of(&((1 << 15) - 1..(1 << 15) + 1), w), 0b11);
        assert_eq!(cards_of(&(3 << 15..usize::MAX), w), CARD_BITS & !0b111);
    }

    #[test]
    fn a_take_clears_what_it_took_and_its_parts_see_it() {
        let c = GcCards::new();
        c.rescale(1 << 20);
        // First take (never taken): every card, whatever changed.
        c.take_in(1, 0, 8);
        assert!(c.must_trace_in(1, 5 << 15..6 << 15));
        // Nothing changed since, same clears: a later cycle skips all.
        c.take_in(2, 0, 8);
        assert!(!c.must_trace_in(2, 0..1 << 20));
        // A touch: that card only.
        c.touch((7 << 15) + 3);
        c.take_in(3, 0, 8);
        assert!(c.must_trace_in(3, 7 << 15..8 << 15));
        assert!(c.must_trace_in(3, 0..(7 << 15) + 1));
        assert!(!c.must_trace_in(3, 0..7 << 15));
        assert!(!c.must_trace_in(3, 8 << 15..1 << 20));
        // A second take of the same cycle adds, never removes.
        c.take_in(3, 0, 8);
        assert!(c.must_trace_in(3, 7 << 15..8 << 15));
        // Another cycle's parts reading this take: they trace.
        assert!(c.must_trace_in(4, 0..1));
        // Marks cleared since: every card.
        c.take_in(5, 1, 8);
        assert!(c.must_trace_in(5, 0..1));
        // A range touch, and a rescale (all changed).
        c.touch_range(1..(2 << 15) + 1);
        c.take_in(6, 1, 8);
        assert!(c.must_trace_in(6, 2 << 15..3 << 15) && !c.must_trace_in(6, 3 << 15..4 << 15));
        c.rescale(1 << 21);
        c.take_in(7, 1, 8);
        assert!(c.must_trace_in(7, 40 << 16..41 << 16));
    }

    #[test]
    fn cards_two_objects_take_are_taken_whole_from_then_on() {
        let c = GcCards::with_slots(1 << 20);
        c.take_in(1, 0, 8);
        c.take_in(2, 0, 8);
        assert!(
            !c.must_trace_in(2, 0..1 << 20),
            "one owner, nothing changed"
        );
        // Another object's trace takes the same cards: every card, for it
        // and for the first object from then on.
        c.take_in(3, 0, 16);
        assert!(c.must_trace_in(3, 9 << 15..10 << 15));
        c.take_in(4, 0, 8);
        assert!(c.must_trace_in(4, 9 << 15..10 << 15));
        // The other object's first take after a mark clear (every card
        // anyway) still marks the cards shared.
        let c = GcCards::with_slots(1 << 20);
        c.take_in(1, 0, 8);
        c.take_in(2, 1, 16);
        c.take_in(2, 1, 8);
        assert!(c.must_trace_in(2, 9 << 15..10 << 15));
    }
}

/// The loom model: takes of one cycle racing each other and a rescale,
/// against what their parts read.
#[cfg(all(test, loom))]
mod model {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A take that stores what it took over `taken` instead of merging:
    /// the rule `takes_of_one_cycle_lose_no_card` checks.
    fn take_overwriting(c: &GcCards, cycle: u64, clears: u64) {
        let w = c.changed.load(Ordering::Acquire);
        let mut took = w & (CARD_BITS | SCALE_BITS);
        if c.clears.load(Ordering::Acquire) != clears {
            took |= CARD_BITS;
        }
        c.changed.fetch_and(!(w & CARD_BITS), Ordering::Relaxed);
        c.taken
            .store((cycle & 0x3f) << TAG_AT | took, Ordering::Release);
        c.clears.store(clears, Ordering::Release);
    }

    /// Two takes of one cycle (an object traced twice: remembered and
    /// shaded), each followed by its own parts: every card changed before
    /// the cycle is traced by the parts of whichever take cleared it.
    #[test]
    fn takes_of_one_cycle_lose_no_card() {
        two_takes(|c, cycle, clears| c.take_in(cycle, clears, 8));
    }

    #[test]
    #[should_panic(expected = "lost")]
    fn takes_that_overwrite_each_other_lose_a_card() {
        two_takes(take_overwriting);
    }

    fn two_takes(take: fn(&GcCards, u64, u64)) {
        loom::model(move || {
            let c = Arc::new(GcCards::new());
            c.rescale(4 << MIN_SCALE);
            c.take_in(1, 0, 8);
            // Cards 1 and 3 changed between marks.
            c.touch(1 << MIN_SCALE);
            c.touch(3 << MIN_SCALE);
            let markers: Vec<_> = (0..2)
                .map(|_| {
                    let c = c.clone();
                    thread::spawn(move || {
                        take(&c, 2, 0);
                        // The parts this take queued.
                        (0..4)
                            .map(|k| c.must_trace_in(2, k << MIN_SCALE..(k + 1) << MIN_SCALE))
                            .collect::<Vec<bool>>()
                    })
                })
                .collect();
            let mut traced = [false; 4];
            for m in markers {
                let t = m.join().unwrap();
                for (k, &x) in t.iter().enumerate() {
                    traced[k] |= x;
                }
            }
            // Each changed card was traced, or is still changed (for the
            // next take).
            let left = c.changed.load(Ordering::Relaxed);
            for k in [1, 3] {
                assert!(traced[k] || left & (1 << k) != 0, "card {k} lost");
            }
        });
    }

    /// A take after marks were cleared, racing a second take of the same
    /// cycle that reads the new count: the second's parts trace every card.
    #[test]
    fn a_take_that_reads_the_new_clear_count_sees_every_card() {
        loom::model(|| {
            let c = Arc::new(GcCards::new());
            c.rescale(4 << MIN_SCALE);
            c.take_in(1, 0, 8);
            // Marks cleared (count 1): nothing changed, all must be traced.
            let c2 = c.clone();
            let a = thread::spawn(move || {
                c2.take_in(2, 1, 8);
                (0..4).all(|k| c2.must_trace_in(2, k << MIN_SCALE..(k + 1) << MIN_SCALE))
            });
            let b = {
                let c = c.clone();
                thread::spawn(move || {
                    c.take_in(2, 1, 8);
                    (0..4).all(|k| c.must_trace_in(2, k << MIN_SCALE..(k + 1) << MIN_SCALE))
                })
            };
            assert!(a.join().unwrap(), "the first take's parts skipped a card");
            assert!(b.join().unwrap(), "the second take's parts skipped a card");
        });
    }

    /// Cards two objects' traces take (a `GcCards` behind an `Arc`): the
    /// first object's take, racing the second's first, traces its own
    /// changed card, or finds it still changed. The second's take marks
    /// the cards shared before it clears what it read, and the first's
    /// take, reading the cleared word, sees the mark (module docs, 6).
    #[test]
    fn a_second_objects_take_loses_no_card_of_the_first() {
        loom::model(|| {
            let c = Arc::new(GcCards::new());
            c.rescale(4 << MIN_SCALE);
            c.take_in(1, 0, 8);
            // The first object's change, between marks.
            c.touch(1 << MIN_SCALE);
            let c2 = c.clone();
            let other = thread::spawn(move || c2.take_in(2, 0, 16));
            c.take_in(2, 0, 8);
            let traced = c.must_trace_in(2, 1 << MIN_SCALE..2 << MIN_SCALE);
            other.join().unwrap();
            let left = c.changed.load(Ordering::Relaxed) & (1 << 1) != 0;
            assert!(traced || left, "the first object's changed card was lost");
        });
    }

    /// A rescale (growth during a mark) racing a take: every card changed
    /// before is traced by the take's parts or left changed.
    #[test]
    fn a_rescale_racing_a_take_loses_no_card() {
        loom::model(|| {
            let c = Arc::new(GcCards::new());
            c.rescale(4 << MIN_SCALE);
            c.take_in(1, 0, 8);
            c.touch(2 << MIN_SCALE);
            let c2 = c.clone();
            let grow = thread::spawn(move || c2.rescale(8 << MIN_SCALE));
            c.take_in(2, 0, 8);
            let traced = c.must_trace_in(2, 2 << MIN_SCALE..3 << MIN_SCALE);
            grow.join().unwrap();
            // Under the new scale (8 cards of 256), slot 512 is card 2.
            let left = c.changed.load(Ordering::Relaxed);
            assert!(traced || left & (1 << 2) != 0, "the changed card was lost");
        });
    }
}
