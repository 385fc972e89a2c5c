//! loom model of a `mutate` call's entry (`--cfg loom`): the double read
//! of `Shared::calls` around `Shared::mark_epoch` (`Mutator::mutate`).
//!
//! A call keeps the calls word and, while it says a mark runs, the mark
//! epoch, and the two must be of one cycle: a `GcLock` shaded for the
//! epoch it read is taken as shaded for that mark. The coordinator ends a
//! ragged mark by storing a calls word without `MARKING` (release), and
//! begins the next by storing the next epoch (release) and then a calls
//! word with `MARKING` and the next remember epoch (release): the word
//! differs from every earlier one, so there is no ABA. The call reads the
//! word (acquire), the epoch (acquire) and the word again, and starts over
//! when the two reads differ.
//!
//! Why that is enough: an epoch read that sees the next mark's store
//! synchronizes with it, and the end's calls word was stored before it,
//! so the second read of the word cannot return the first read's (older)
//! word. The model runs the end and the next start on the coordinator,
//! and one call on a mutator, from a calls word of mark 1; every pair the
//! call keeps is one mark's. Storing the epoch after the calls word fails:
//! a call reads the new word twice around the old epoch.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;

const MARKING: u64 = 1;
/// The remember epoch's lowest bit, as in `runtime.rs`.
const EPOCH_SHIFT: u32 = 3;

/// The calls word of a state: `marking`, and the remember epoch, which
/// counts the cycles' starts.
fn word(marking: bool, remember: u64) -> u64 {
    (remember << EPOCH_SHIFT) | if marking { MARKING } else { 0 }
}

struct Shared {
    calls: AtomicU64,
    mark_epoch: AtomicU64,
}

/// `Mutator::mutate`'s entry: the word, and the epoch if it says a mark
/// runs (0 otherwise).
fn enter(s: &Shared) -> (u64, u64) {
    loop {
        let calls = s.calls.load(Ordering::Acquire);
        if calls & MARKING == 0 {
            return (calls, 0);
        }
        let epoch = s.mark_epoch.load(Ordering::Acquire);
        if s.calls.load(Ordering::Acquire) == calls {
            return (calls, epoch);
        }
    }
}

/// Mark 1 (remember epoch 1) ends and mark 2 (remember epoch 2) begins,
/// while one call enters. With `epoch_last` the next start stores its
/// epoch after its calls word.
fn run(epoch_last: bool) {
    loom::model(move || {
        let s = Arc::new(Shared {
            calls: AtomicU64::new(word(true, 1)),
            mark_epoch: AtomicU64::new(1),
        });
        let coordinator = {
            let s = s.clone();
            loom::thread::spawn(move || {
                // Mark 1's end.
                s.calls.store(word(false, 1), Ordering::Release);
                // Mark 2's start (`cycle/ragged.rs`, `start`).
                if epoch_last {
                    s.calls.store(word(true, 2), Ordering::Release);
                    s.mark_epoch.store(2, Ordering::Release);
                } else {
                    s.mark_epoch.store(2, Ordering::Release);
                    s.calls.store(word(true, 2), Ordering::Release);
                }
            })
        };
        let (calls, epoch) = enter(&s);
        if calls & MARKING != 0 {
            // The mark whose word the call read: remember epoch r begins
            // mark r here.
            let mark = calls >> EPOCH_SHIFT;
            assert_eq!(
                epoch, mark,
                "a call kept mark {mark}'s word with mark {epoch}'s epoch"
            );
        }
        coordinator.join().unwrap();
    });
}

#[test]
fn a_call_keeps_one_marks_word_and_epoch() {
    run(false);
}

#[test]
#[should_panic(expected = "a call kept mark 2's word with mark 1's epoch")]
fn storing_the_epoch_after_the_word_fails() {
    run(true);
}
