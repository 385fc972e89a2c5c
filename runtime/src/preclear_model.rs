//! loom model of a full cycle's phase 0 (`--cfg loom`): the marks cleared
//! with the mutators running, then the remembered objects' marks cleared
//! at the stop (`barrier.rs`, "Clearing the marks with the mutators
//! running").
//!
//! One mark word holds the bits of objects 0 and 1 (the heap's side
//! bitmap: one atomic word for 64 blocks). The clearer loads the word and,
//! if it is not zero, stores a zero word, as `PageRef::clear_marks` does
//! (a swap here, for loom's sake: see `run`); a word it reads as zero it
//! leaves alone. Each mutator runs the between-marks
//! barrier on one object, as `remember` does through `loam_heap::mark_block`:
//! a relaxed load that returns if the bit is set, else a `fetch_or`, and a
//! push onto its remembered list if the `fetch_or` found the bit clear.
//! The joins stand for the stop's handshake; the stop then clears each
//! remembered object's bit with a `fetch_and`. In every interleaving, and
//! from every starting word, no bit is left set. Skipping the stop's
//! clear fails: a `remember` after the clearer's store leaves its bit.
//!
//! A ragged start cannot clear those bits: a window call's shade may
//! have found one set and left the object to whoever set it. It keeps the
//! remembered (and earlier shaded) objects whose bit it reads set
//! instead, and traces them (`cycle/ragged.rs`). The second model has a
//! window call shade an object from the start's store on, racing the old
//! calls' `remember`s and the start's reads of the bits, and an object
//! shaded before phase 0 waiting in `gray`: every object marked at the
//! end is traced, kept by the start or pushed by the shade. Keeping none
//! of them fails.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;

/// `loam_heap::mark_block`: true if this call set the bit.
fn mark(word: &AtomicU64, o: u32) -> bool {
    let bit = 1u64 << o;
    if word.load(Ordering::Relaxed) & bit != 0 {
        return false;
    }
    word.fetch_or(bit, Ordering::AcqRel) & bit == 0
}

/// Phase 0's clearer of the word (`PageRef::clear_marks`).
fn spawn_clearer(word: &Arc<AtomicU64>) -> loom::thread::JoinHandle<()> {
    let word = word.clone();
    // A swap where the heap stores: loom lets a plain store land between
    // the read and the write of another thread's `fetch_or`
    // (tokio-rs/loom#254), which C++'s RMW atomicity forbids, and then
    // reports a word that no real execution can end with. A swap gets the
    // constraint the standard already gives the store.
    loom::thread::spawn(move || {
        if word.load(Ordering::Relaxed) != 0 {
            word.swap(0, Ordering::Relaxed);
        }
    })
}

/// Mutators' calls remembering `objects`, one each: each joins to the
/// object it pushed onto its remembered list, if it pushed it.
fn spawn_remembering(
    word: &Arc<AtomicU64>,
    objects: [u32; 2],
) -> Vec<loom::thread::JoinHandle<Option<u32>>> {
    objects
        .into_iter()
        .map(|o| {
            let word = word.clone();
            loom::thread::spawn(move || mark(&word, o).then_some(o))
        })
        .collect()
}

/// Runs phase 0 and the stop; returns the word after the stop, which
/// clears the remembered objects' bits unless `skip_stop_clear`.
fn run(start: u64, objects: [u32; 2], skip_stop_clear: bool) -> u64 {
    let word = Arc::new(AtomicU64::new(start));
    let clearer = spawn_clearer(&word);
    let mutators = spawn_remembering(&word, objects);
    clearer.join().unwrap();
    // The stop.
    let remembered: Vec<u32> = mutators
        .into_iter()
        .filter_map(|m| m.join().unwrap())
        .collect();
    if !skip_stop_clear {
        for o in remembered {
            word.fetch_and(!(1u64 << o), Ordering::AcqRel);
        }
    }
    word.load(Ordering::Relaxed)
}

#[test]
fn no_mark_is_left_at_the_stop() {
    for start in 0..4 {
        for objects in [[0, 1], [0, 0], [1, 1]] {
            loom::model(move || {
                assert_eq!(
                    run(start, objects, false),
                    0,
                    "from {start:#b}, {objects:?}"
                );
            });
        }
    }
}

#[test]
#[should_panic(expected = "a mark left")]
fn without_the_stops_clear_a_mark_is_left() {
    loom::model(|| {
        assert_eq!(run(0, [0, 1], true), 0, "a mark left");
    });
}

/// Runs phase 0 and a ragged start. Two old calls remember `objects`
/// (one each) from before phase 0 to T; once phase 0 has cleared the
/// word, the start's store lets a window call begin, which shades
/// `shaded` (pushing it if its mark set the bit) while the old calls may
/// still run. `gray_before`, if given, was shaded before phase 0 (its bit
/// is set in `start`) and waits in `gray`. At T (the old calls joined) the
/// start keeps the remembered and gray objects whose bit it reads set
/// (none if `keep_none`), while the window call may still run. Returns
/// the marked objects that nobody traces.
fn run_ragged(
    start: u64,
    objects: [u32; 2],
    gray_before: Option<u32>,
    shaded: u32,
    keep_none: bool,
) -> Vec<u32> {
    let word = Arc::new(AtomicU64::new(start | gray_before.map_or(0, |o| 1 << o)));
    let old_calls = spawn_remembering(&word, objects);
    spawn_clearer(&word).join().unwrap();
    let window_call = {
        let word = word.clone();
        loom::thread::spawn(move || mark(&word, shaded).then_some(shaded))
    };
    let entries: Vec<u32> = old_calls
        .into_iter()
        .filter_map(|m| m.join().unwrap())
        .chain(gray_before)
        .collect();
    let kept: Vec<u32> = entries
        .into_iter()
        .filter(|&o| !keep_none && word.load(Ordering::Relaxed) & (1 << o) != 0)
        .collect();
    let gray = window_call.join().unwrap();
    let end = word.load(Ordering::Relaxed);
    (0..2)
        .filter(|&o| end & (1 << o) != 0 && !kept.contains(&o) && gray != Some(o))
        .collect()
}

#[test]
fn a_ragged_start_traces_every_mark_it_does_not_clear() {
    // Four threads a model: the starting words and pairs the first model
    // tries one by one, less those that only rename the objects.
    for start in [0b00, 0b01, 0b11] {
        for objects in [[0, 1], [0, 0]] {
            for gray_before in [None, Some(0), Some(1)] {
                for shaded in 0..2 {
                    loom::model(move || {
                        let untraced = run_ragged(start, objects, gray_before, shaded, false);
                        assert!(
                            untraced.is_empty(),
                            "from {start:#b}, {objects:?}, {gray_before:?}, {shaded}: {untraced:?}"
                        );
                    });
                }
            }
        }
    }
}

#[test]
#[should_panic(expected = "marked, untraced")]
fn a_ragged_start_that_keeps_no_remembered_object_leaves_one_untraced() {
    loom::model(|| {
        let untraced = run_ragged(0, [0, 1], None, 1, true);
        assert!(untraced.is_empty(), "marked, untraced: {untraced:?}");
    });
}
