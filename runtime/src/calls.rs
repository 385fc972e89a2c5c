//! What a `mutate` call reads as it begins ([`Calls`]): the calls word,
//! which says whether a concurrent mark runs and how the call's barriers
//! behave, and the mark epoch beside it. Compiled under loom too, where
//! `call_entry_model.rs` checks [`Calls::enter`] against the
//! coordinator's stores.
//!
//! # The protocol
//! Only the coordinator writes. A ragged mark's start stores the next
//! epoch ([`Calls::next_epoch`], release), then a word with `MARKING` and
//! the next remember epoch ([`Calls::set`], release); its end stores a
//! word without `MARKING`. Every start's word differs from every earlier
//! one (its remember epoch counts the starts), so there is no ABA. A
//! stopped cycle raises the remember epoch at its stop and, if its mark
//! goes on concurrently, stores the next epoch before `MARKING`, the same
//! order; its end clears `MARKING` with the world stopped, when no call
//! reads.
//!
//! A call keeps the word and, while it says a mark runs, the epoch, and the
//! two must be of one cycle: a `GcLock` shaded for the epoch a call read is
//! taken as shaded for that mark. [`Calls::enter`] reads the word
//! (acquire), the epoch (acquire) and the word again, and starts over when
//! the two reads differ. Why that is enough: an epoch read that sees the
//! next mark's store synchronizes with it, and the end's word was stored
//! before it, so the second read of the word cannot return the first
//! read's (older) word. Storing the epoch after the word breaks it: a call
//! can read the new word twice around the old epoch (the model's failing
//! variant).

use crate::sync::{AtomicU64, Ordering};

/// The word: a concurrent mark runs, and the barriers shade
/// (`Mutation::barrier_store`).
const MARKING: u64 = 1;
/// The word: a ragged start waits for the calls that began before its
/// mark (they run with the barrier off; `cycle.rs`, "Ragged cycles").
const WINDOW: u64 = 2;
/// The word: a full cycle's phase 0 is clearing the marks, or has cleared
/// them, and the cycle has not started: calls that begin now skip the
/// generational barrier's `remember`. The cycle to come is full and traces
/// everything from the roots, so what they would mark and remember for
/// the next minor cycle is nothing it needs; marked, a stored object would
/// be kept by that full cycle as if live (`barrier.rs`, "Clearing the
/// marks with the mutators running").
const CLEARING: u64 = 4;
/// The word: the remember epoch's lowest bit. The remember epoch counts
/// the cycles' starts: a `GcLock` records its owning object at most once
/// per value of it, into the remembered list of that epoch's parity
/// (`MutatorShared::remembered`).
const EPOCH_SHIFT: u32 = 3;

/// What one `mutate` call read of the calls word as it began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallState {
    /// [`MARKING`].
    pub(crate) marking: bool,
    /// [`WINDOW`].
    pub(crate) window: bool,
    /// [`CLEARING`].
    pub(crate) clearing: bool,
    /// The remember epoch ([`EPOCH_SHIFT`]).
    pub(crate) remember: u64,
}

impl CallState {
    fn word(self) -> u64 {
        (self.remember << EPOCH_SHIFT)
            | if self.marking { MARKING } else { 0 }
            | if self.window { WINDOW } else { 0 }
            | if self.clearing { CLEARING } else { 0 }
    }

    fn of(w: u64) -> CallState {
        CallState {
            marking: w & MARKING != 0,
            window: w & WINDOW != 0,
            clearing: w & CLEARING != 0,
            remember: w >> EPOCH_SHIFT,
        }
    }
}

/// The calls word and the mark epoch (module docs).
#[derive(Debug, Default)]
pub(crate) struct Calls {
    /// A [`CallState`] in one word, so that a call sees one cycle's
    /// values together. Written by the coordinator only (release, after
    /// `mark_epoch`); a call reads it as it begins (acquire, after its
    /// entry fence, [`enter`](Calls::enter)) and keeps what it read.
    word: AtomicU64,
    /// Counts concurrent marks: a `GcLock` shades its contents once per
    /// mark, and records the mark it did it for. 64 bits: a `GcLock`
    /// shaded one epoch ago must never look shaded now. Written by the
    /// coordinator only.
    mark_epoch: AtomicU64,
}

impl Calls {
    /// The state a call that begins now runs with (acquire: a call that
    /// sees `MARKING` sees the epoch stored before it).
    #[inline]
    pub(crate) fn now(&self) -> CallState {
        CallState::of(self.word.load(Ordering::Acquire))
    }

    /// Whether a concurrent mark runs now (acquire: what the collector did
    /// before it cleared the flag, such as clearing weak cells, is seen).
    #[inline]
    pub(crate) fn marking(&self) -> bool {
        self.word.load(Ordering::Acquire) & MARKING != 0
    }

    /// The state a `mutate` call begins with, and the epoch of the mark it
    /// runs in (0 if none runs), both of one cycle (module docs).
    #[inline]
    pub(crate) fn enter(&self) -> (CallState, u64) {
        loop {
            let calls = self.now();
            if !calls.marking {
                return (calls, 0);
            }
            let epoch = self.mark_epoch.load(Ordering::Acquire);
            if self.now() == calls {
                return (calls, epoch);
            }
        }
    }

    /// The epoch of the last mark begun (0: none yet). Relaxed: the
    /// coordinator reads its own stores, and a mutator reads it only to
    /// tell one mark from another.
    #[inline]
    pub(crate) fn mark_epoch(&self) -> u64 {
        self.mark_epoch.load(Ordering::Relaxed)
    }

    /// Sets what calls that begin from now on run with (the coordinator
    /// only; release, after the epoch and what the start of a mark
    /// prepared).
    pub(crate) fn set(&self, s: CallState) {
        self.word.store(s.word(), Ordering::Release);
    }

    /// A mark begins: stores the next epoch and returns it (the
    /// coordinator only, before [`set`](Self::set) stores its `MARKING`
    /// word). Release, for [`enter`](Self::enter)'s acquire: a call that
    /// reads the epoch reads the earlier end's word, or a later one.
    pub(crate) fn next_epoch(&self) -> u64 {
        let epoch = self.mark_epoch.load(Ordering::Relaxed) + 1;
        self.mark_epoch.store(epoch, Ordering::Release);
        epoch
    }
}
