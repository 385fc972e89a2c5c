//! loom model of a `mutate` call's entry (`--cfg loom`): the real
//! [`Calls::enter`] against the coordinator's real stores
//! ([`Calls::next_epoch`], [`Calls::set`]), as `calls.rs` describes them.
//!
//! The model runs a ragged mark's end and the next mark's start on the
//! coordinator, and one call on a mutator, from mark 1 (remember epoch 1
//! begins mark 1 here); every pair the call keeps is one mark's. Storing
//! the epoch after the word fails: a call reads the new word twice around
//! the old epoch.

use crate::calls::{CallState, Calls};
use loom::sync::Arc;

/// The word of mark `remember`, or of no mark.
fn state(marking: bool, remember: u64) -> CallState {
    CallState {
        marking,
        window: false,
        clearing: false,
        remember,
    }
}

/// Mark 1 ends and mark 2 begins, while one call enters. With
/// `epoch_last` the next start stores its epoch after its word.
fn run(epoch_last: bool) {
    loom::model(move || {
        let calls = Arc::new(Calls::default());
        calls.next_epoch();
        calls.set(state(true, 1));
        let coordinator = {
            let calls = calls.clone();
            loom::thread::spawn(move || {
                // Mark 1's end.
                calls.set(state(false, 1));
                // Mark 2's start (`Cycle::start_ragged`).
                if epoch_last {
                    calls.set(state(true, 2));
                    calls.next_epoch();
                } else {
                    calls.next_epoch();
                    calls.set(state(true, 2));
                }
            })
        };
        let (entered, epoch) = calls.enter();
        if entered.marking {
            let mark = entered.remember;
            assert_eq!(
                epoch, mark,
                "a call kept mark {mark}'s word with mark {epoch}'s epoch"
            );
        } else {
            assert_eq!(epoch, 0, "a call outside a mark kept an epoch");
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
