//! loom model of an array lengthened in place (`--cfg loom`): `array.rs`,
//! "Lengthening in place", and `Mutation::try_grow_in_place`.
//!
//! The array is a length word and four element slots, each a plain cell
//! (loom checks every plain access against the others for races), the
//! first written before the model starts. Two threads lengthen it by one
//! element each, as `try_grow_in_place` does: take the claim (a
//! compare-and-swap of a flag from false to true, acquire, giving up if
//! it fails), load the length (relaxed), write the element past it
//! plainly, store the new length (release) and let the claim go
//! (release). A reader loads the length (acquire) and reads every element
//! below it plainly, as a `Gc<[T]>` deref and a loop over it do.
//!
//! In every interleaving no plain access races another, the reader meets
//! only written elements (each holds its index plus one), and the final
//! length counts the lengthenings that claimed the word. Without the
//! claim two lengthenings write the same slot (a race); with the new
//! length stored relaxed, or the reader's length loaded relaxed, the
//! reader's read of a new element races its write. Those variants fail.
//!
//! The reader and one lengthening run on threads of their own, the other
//! on the model's main thread: with both lengthenings spawned and the
//! reader on the main thread, loom never ran a lengthening before the
//! read, and every variant passed.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Right,
    /// No claim: the length is loaded and stored, nothing else.
    NoClaim,
    /// The new length stored relaxed.
    RelaxedStore,
    /// The reader's length loaded relaxed.
    RelaxedLoad,
}

struct Array {
    claim: AtomicBool,
    len: AtomicUsize,
    slots: [UnsafeCell<usize>; 4],
}

impl Array {
    /// `try_grow_in_place` by one element; true if it lengthened.
    fn grow(&self, variant: Variant) -> bool {
        let claimed = variant != Variant::NoClaim;
        if claimed
            && self
                .claim
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        let old = self.len.load(Ordering::Relaxed);
        let grew = old < self.slots.len();
        if grew {
            // SAFETY: past the length, claimed: loom checks that no other
            // access overlaps.
            self.slots[old].with_mut(|p| unsafe { *p = old + 1 });
            let order = if variant == Variant::RelaxedStore {
                Ordering::Relaxed
            } else {
                Ordering::Release
            };
            self.len.store(old + 1, order);
        }
        if claimed {
            self.claim.store(false, Ordering::Release);
        }
        grew
    }

    /// The elements below the length, as a reader sees them.
    fn read(&self, variant: Variant) -> usize {
        let order = if variant == Variant::RelaxedLoad {
            Ordering::Relaxed
        } else {
            Ordering::Acquire
        };
        let len = self.len.load(order);
        for i in 0..len {
            // SAFETY: below a length read with acquire: written before its
            // release store (loom checks it).
            let v = self.slots[i].with(|p| unsafe { *p });
            assert_eq!(v, i + 1, "element {i} read unwritten");
        }
        len
    }
}

fn model(variant: Variant) {
    loom::model(move || {
        let a = Arc::new(Array {
            claim: AtomicBool::new(false),
            len: AtomicUsize::new(1),
            slots: [
                UnsafeCell::new(1),
                UnsafeCell::new(0),
                UnsafeCell::new(0),
                UnsafeCell::new(0),
            ],
        });
        let reader = {
            let a = a.clone();
            loom::thread::spawn(move || a.read(variant))
        };
        let other = {
            let a = a.clone();
            loom::thread::spawn(move || a.grow(variant))
        };
        let grown = usize::from(a.grow(variant)) + usize::from(other.join().unwrap());
        assert!(reader.join().unwrap() <= 1 + grown);
        assert_eq!(a.read(Variant::Right), 1 + grown, "a lengthening lost");
    });
}

#[test]
fn lengthenings_take_turns_and_readers_see_written_elements() {
    model(Variant::Right);
}

#[test]
#[should_panic]
fn without_the_claim_two_lengthenings_race() {
    model(Variant::NoClaim);
}

#[test]
#[should_panic]
fn a_length_stored_relaxed_races_the_reader() {
    model(Variant::RelaxedStore);
}

#[test]
#[should_panic]
fn a_length_read_relaxed_races_the_write() {
    model(Variant::RelaxedLoad);
}
