//! loom models of a ragged mark's end (`--cfg loom`; `cycle/ragged.rs`,
//! `barrier.rs`, "Ragged cycles").
//!
//! They use the real handshake (`Handshake::wait_for_calls`,
//! `wait_for_shades`) and model the
//! rest: one object, its mark bit and a `traced` flag, the gray queue as a
//! mutex-guarded vector, `marking` as `Shared::calls`' bit, and the weak
//! gate as a read-write lock.
//!
//! 1. `a_shade_in_a_call_under_way_is_traced_before_the_end`: a call that
//!    holds an object from before the end shades it (hands it out) at any
//!    point, while the collector drains, waits for the calls under way
//!    and looks again. Whenever the mark ends, the object is marked only
//!    if traced. Dropping the wait makes it fail.
//!    (That is the first look's wait, for the calls that began in the
//!    window; their barriers open no bracket, `Mutation::brackets`, and
//!    this wait is what covers them.)
//! 3. `an_overwrite_under_way_at_the_end_is_seen_or_waited_for`: a call
//!    that began after the window closed overwrites the only pointer to
//!    an object through the snapshot barrier (a shading bracket around
//!    the load, the store and the shade), while the markers read that
//!    pointer and the end waits for the brackets under way
//!    (`Handshake::wait_for_shades`) and looks. If the mark ends while
//!    the call holds the object, the object is marked and traced.
//!    Dropping the wait makes it fail. (It passes without the bracket's
//!    fence too: with one writer, the cell's release store and the
//!    markers' acquire load order the bracket before any read of the new
//!    value. The fence is for a marker that reads a later writer's value,
//!    `Handshake::wait_for_shades`.)
//! 4. `a_shade_a_later_bracket_absorbed_is_waited_for`: one call cuts
//!    the only pointer to an object and shades it; another call, which
//!    read the object before the cut, stores it (shading it too), its
//!    bracket opening after the end's first fence. Only the shade that
//!    sets the mark bit pushes, so the cutting call's shade may push
//!    nothing while the other's push is still to come. The end's second
//!    round of waiting sees that bracket; with one round it fails (with
//!    its own preemption bound of 5: the failing schedule needs four).
//! 5. `a_window_call_is_waited_for_or_reads_the_window_closed`: the end's
//!    first wait is for the calls that began in the window, listed as it
//!    closes (`calls_under_way`, `Handshake::confirm_window`): a call that
//!    read the window open either is waited for, or reads it closed as it
//!    confirms and runs as a later call. Listing every call inside
//!    instead (a call that began after the close may be inside as the list
//!    is taken) made a test's long later call hold the end for ever.
//! 6. `an_upgrade_never_hands_out_what_the_sweep_frees`: an upgrade of a
//!    weak cell whose target nothing else reaches, against the end (last
//!    look, clearing the cell, lowering `marking`, all under the gate's
//!    write lock) and the sweep. The upgrade returns the target only if it
//!    was kept, and a kept target was traced. Shading without the gate, or
//!    not reading the cell again under it, makes it fail.
//! 7. `what_a_window_calls_fresh_object_holds_is_marked`: a window call
//!    made `N` after T (young, flagged `WINDOW_MADE`), with an object of
//!    the copy `X` that only `N` reaches, put `N` into `S` and handed `S`
//!    out (shaded) before it ended; the end's first look drains `S`. A
//!    later call reaches `N` through `S`, cutting it (a deletion barrier),
//!    storing it elsewhere (an insertion shade, which marks `N` before any
//!    marker traces it), or making a fresh object `Y` of its own with it
//!    (young, not flagged, so left untraced by the looks after the first)
//!    and cutting it, and holds it, while the end traces, waits for the
//!    brackets and looks. If the mark ends while the call holds `N`, `X`
//!    is marked. Passing over young objects whatever their flag fails it
//!    (the cuts), and so does leaving every young object shaded after the
//!    first look untraced (the store): the two rules that let window
//!    calls' fresh objects shade nothing (`barrier.rs`, "Ragged cycles",
//!    6).
//! 8. `a_window_calls_unbracketed_shade_is_waited_for`: model 4 with the
//!    holder a call of the start's window, whose barriers open no bracket
//!    (`Mutation::brackets`): the end's first round waits for that call
//!    to end before it waits for the brackets, and either shade may set
//!    the mark bit first. Dropping the wait for the call makes it fail.
//! 9. `a_window_calls_store_reads_the_value_of_t_it_overwrites`: an old
//!    call (barrier off) stores into a root's cell and ends (T); a window
//!    call stores over the cell across T and shades what it overwrote; a
//!    later call loads the cell and holds what it read; the markers read
//!    the cell after T and the end's first look waits for the window call.
//!    What the later call holds is marked. A load and a store in the
//!    window call, as later calls do, fails it
//!    (`a_window_calls_load_then_store_loses_the_value_of_t`): the value
//!    of T, stored by the old call between the two, is overwritten unread
//!    (`GcCell::store_marking`'s swap).
//! 10. `a_window_calls_lock_write_leaves_the_next_write_to_shade`: a
//!     window call writes a `GcLock`, an old call writes it with the
//!     barrier off and ends (T), a later call reads it and holds what it
//!     read while another writes it through the barrier and the markers
//!     read it. What the reader holds is marked (or made after T). A
//!     window call that recorded the lock shaded for the mark fails it
//!     (`a_window_calls_recorded_lock_write_loses_an_old_calls_contents`):
//!     the later write skipped its shade of what the old call stored.
//!
//! Model 3 runs twice: with the asymmetric fences (a bracket opens with
//! a release store and the light fence, the end's waits take the heavy
//! one, `fence.rs`; loom models both as sequentially consistent fences),
//! and, `_without_membarrier`, on the path a system without them takes
//! (`fence::without_pair`: a read-modify-write and full fences), so that
//! both openings meet the waits' logic. Neither run fails without the
//! fences themselves (see model 3).

use crate::handshake::{Handshake, Slot};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex, RwLock};

/// The modelled collector state for one object.
#[derive(Default)]
struct State {
    marking: AtomicBool,
    marked: AtomicBool,
    traced: AtomicBool,
    gray: Mutex<Vec<usize>>,
}

impl State {
    /// `mark::shade`: sets the bit, queues the object if it set it.
    fn shade(&self) {
        if !self.marked.swap(true, Ordering::AcqRel) {
            self.gray.lock().unwrap().push(1);
        }
    }

    /// The markers: takes the queue and traces what it held. True if it
    /// held anything.
    fn drain_and_trace(&self) -> bool {
        let work = std::mem::take(&mut *self.gray.lock().unwrap());
        for _ in &work {
            self.traced.store(true, Ordering::Release);
        }
        !work.is_empty()
    }

    fn gray_is_empty(&self) -> bool {
        self.gray.lock().unwrap().is_empty()
    }
}

#[test]
fn a_shade_in_a_call_under_way_is_traced_before_the_end() {
    loom::model(|| {
        let hs = Arc::new(Handshake::default());
        let slots = Arc::new([Slot::default()]);
        hs.attach(&slots[0]);
        let st = Arc::new(State::default());
        st.marking.store(true, Ordering::Relaxed);
        // The call began before the end's first look (in the window, say),
        // holding the object unshaded.
        hs.enter(&slots[0]);
        let mutator = {
            let (hs, slots, st) = (hs.clone(), slots.clone(), st.clone());
            loom::thread::spawn(move || {
                // Hands it out: a store shades it.
                st.shade();
                hs.leave(&slots[0]);
            })
        };
        let mut ended = false;
        for _ in 0..3 {
            while st.drain_and_trace() {}
            hs.wait_for_calls(&[&slots[0]]);
            if st.gray_is_empty() {
                ended = true;
                break;
            }
        }
        if ended {
            st.marking.store(false, Ordering::Release);
            assert!(
                !st.marked.load(Ordering::Acquire) || st.traced.load(Ordering::Acquire),
                "the mark ended with a shaded object untraced"
            );
        }
        mutator.join().unwrap();
    });
}

#[test]
fn an_overwrite_under_way_at_the_end_is_seen_or_waited_for() {
    overwrite_under_way();
}

/// Model 3 where `membarrier` is not there: the brackets open with a
/// read-modify-write and a full fence, the waits fence in full.
#[test]
fn an_overwrite_under_way_at_the_end_is_seen_or_waited_for_without_membarrier() {
    crate::fence::without_pair(overwrite_under_way);
}

fn overwrite_under_way() {
    loom::model(|| {
        let hs = Arc::new(Handshake::default());
        let slots = Arc::new([Slot::default()]);
        let st = Arc::new(State::default());
        st.marking.store(true, Ordering::Relaxed);
        // A cell of a traced object: the only pointer to the object (1)
        // until the call overwrites it.
        let cell = Arc::new(AtomicUsize::new(1));
        let mutator = {
            let (slots, st, cell) = (slots.clone(), st.clone(), cell.clone());
            loom::thread::spawn(move || {
                // `GcCell::set` in a call that began after the window
                // closed: the object is the old value, which the call
                // then holds.
                slots[0].begin_shading();
                let old = cell.load(Ordering::Acquire);
                cell.store(0, Ordering::Release);
                if old != 0 {
                    st.shade();
                }
                slots[0].end_shading();
                old != 0
            })
        };
        // The markers trace the cell's owner.
        if cell.load(Ordering::Acquire) != 0 && !st.marked.swap(true, Ordering::AcqRel) {
            st.traced.store(true, Ordering::Release);
        }
        // The end's later looks (`Cycle::terminate_ragged`).
        let mut ended = false;
        for _ in 0..2 {
            hs.wait_for_shades(&[&slots[0]]);
            if !st.drain_and_trace() {
                ended = true;
                break;
            }
        }
        let marked = st.marked.load(Ordering::Acquire);
        let traced = st.traced.load(Ordering::Acquire);
        let holds = mutator.join().unwrap();
        if ended && holds {
            assert!(
                marked && traced,
                "the mark ended while a call held an object it had not seen"
            );
        }
    });
}

#[test]
fn a_shade_a_later_bracket_absorbed_is_waited_for() {
    absorbed_shade(false);
}

/// Model 4, and with `window` model 8: one call cuts the only pointer to
/// an object and shades it, bracketed; another, which read the object
/// before the cut, stores it and shades it, bracketed, or (`window`) as a
/// call of the start's window, with no bracket, which the end's first
/// round waits for.
fn absorbed_shade(window: bool) {
    // The failing schedule of the one-round wait needs four preemptions:
    // a bound of its own, whatever `LOOM_MAX_PREEMPTIONS` says (5 s).
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(if window { 4 } else { 5 });
    model.check(move || {
        let hs = Arc::new(Handshake::default());
        let slots = Arc::new([Slot::default(), Slot::default()]);
        let st = Arc::new(State::default());
        st.marking.store(true, Ordering::Relaxed);
        if window {
            // The holder's call began in the window: inside, and listed.
            hs.attach(&slots[1]);
            hs.enter(&slots[1]);
        }
        // The only pointer to the object (1), in a cell of a traced object.
        let cell = Arc::new(AtomicUsize::new(1));
        let cutter = {
            let (slots, st, cell) = (slots.clone(), st.clone(), cell.clone());
            loom::thread::spawn(move || {
                // A later call's `GcCell::replace(None)`.
                slots[0].begin_shading();
                if cell.swap(0, Ordering::AcqRel) != 0 {
                    st.shade();
                }
                slots[0].end_shading();
            })
        };
        let holder = {
            let (hs, slots, st) = (hs.clone(), slots.clone(), st.clone());
            loom::thread::spawn(move || {
                // Read the object before the cut; stores it now (the
                // barrier shades the new value).
                if window {
                    st.shade();
                    hs.leave(&slots[1]);
                } else {
                    slots[1].begin_shading();
                    st.shade();
                    slots[1].end_shading();
                }
            })
        };
        // The markers trace the cell's owner.
        if cell.load(Ordering::Acquire) != 0 && !st.marked.swap(true, Ordering::AcqRel) {
            st.traced.store(true, Ordering::Release);
        }
        let mut ended = false;
        for round in 0..2 {
            if window && round == 0 {
                hs.wait_for_calls(&[&slots[1]]);
            }
            hs.wait_for_shades(&[&slots[0], &slots[1]]);
            if !st.drain_and_trace() {
                ended = true;
                break;
            }
        }
        let marked = st.marked.load(Ordering::Acquire);
        let traced = st.traced.load(Ordering::Acquire);
        cutter.join().unwrap();
        holder.join().unwrap();
        if ended {
            assert!(
                marked && traced,
                "the mark ended with a held object unmarked or untraced"
            );
        }
    });
}

#[test]
fn a_window_call_is_waited_for_or_reads_the_window_closed() {
    loom::model(|| {
        let hs = Arc::new(Handshake::default());
        let slots = Arc::new([Slot::default()]);
        hs.attach(&slots[0]);
        let window = Arc::new(AtomicBool::new(true));
        let waited = Arc::new(AtomicBool::new(false));
        let mutator = {
            let (hs, slots, window, waited) =
                (hs.clone(), slots.clone(), window.clone(), waited.clone());
            loom::thread::spawn(move || {
                hs.enter(&slots[0]);
                let in_window = window.load(Ordering::Acquire)
                    && hs.confirm_window(&slots[0], || window.load(Ordering::Acquire));
                if in_window {
                    // Its last step as a window call: the end has not
                    // passed its first wait.
                    assert!(
                        !waited.load(Ordering::Acquire),
                        "the end's first wait passed a window call under way"
                    );
                }
                hs.leave(&slots[0]);
            })
        };
        // The window closes; the end's first wait.
        window.store(false, Ordering::Release);
        let listed = hs.calls_under_way(&[&slots[0]], true);
        hs.wait_for_listed(&[&slots[0]], &listed, true);
        waited.store(true, Ordering::Release);
        mutator.join().unwrap();
    });
}

#[test]
fn an_upgrade_never_hands_out_what_the_sweep_frees() {
    loom::model(|| {
        let st = Arc::new(State::default());
        st.marking.store(true, Ordering::Relaxed);
        let gate = Arc::new(RwLock::new(()));
        // The weak cell's target: garbage unless an upgrade shades it.
        let target = Arc::new(AtomicUsize::new(1));
        let freed = Arc::new(AtomicBool::new(false));
        let upgrader = {
            let (st, gate, target) = (st.clone(), gate.clone(), target.clone());
            loom::thread::spawn(move || {
                // `GcWeak::upgrade`.
                let marking = st.marking.load(Ordering::Acquire);
                let mut addr = target.load(Ordering::Acquire);
                if addr == 0 {
                    return None;
                }
                if marking {
                    let _g = gate.read().unwrap();
                    if st.marking.load(Ordering::Acquire) {
                        st.shade();
                    } else {
                        addr = target.load(Ordering::Acquire);
                        if addr == 0 {
                            return None;
                        }
                    }
                }
                Some(addr)
            })
        };
        // The end (`Cycle::terminate_ragged`), the waits left out: the
        // upgrade runs in a call that began after them.
        for _ in 0..3 {
            while st.drain_and_trace() {}
            let g = gate.write().unwrap();
            if !st.gray_is_empty() {
                drop(g);
                continue;
            }
            if !st.marked.load(Ordering::Acquire) {
                target.store(0, Ordering::Release);
            }
            st.marking.store(false, Ordering::Release);
            drop(g);
            break;
        }
        // The sweep, once the mark has ended.
        if !st.marking.load(Ordering::Acquire) && !st.marked.load(Ordering::Acquire) {
            freed.store(true, Ordering::Release);
        }
        let got = upgrader.join().unwrap();
        if got.is_some() {
            assert!(
                !freed.load(Ordering::Acquire),
                "an upgrade handed out a freed object"
            );
        }
        if st.marked.load(Ordering::Acquire) && !st.marking.load(Ordering::Acquire) {
            assert!(
                st.traced.load(Ordering::Acquire),
                "a shaded target was left untraced"
            );
        }
    });
}

/// How model 7's later call reaches the window call's object.
#[derive(Clone, Copy, PartialEq)]
enum Reach {
    /// Cuts it out of the object that holds it (a deletion barrier) and
    /// holds it past the end.
    Cut,
    /// Reads it without a cut and stores it elsewhere (an insertion
    /// barrier's shade, which marks it), then holds it past the end.
    Copy,
    /// Reads it, makes a fresh object `Y` of its own with it (young, not
    /// flagged: the end leaves it untraced after the first look), cuts it
    /// out of `S`, stores `Y` elsewhere (shading `Y` only), and holds `Y`
    /// past the end.
    Wrap,
}

/// What model 7's end and barrier do: as built, or without one of the
/// two rules (each fails).
#[derive(Clone, Copy, PartialEq)]
enum Rules {
    AsBuilt,
    /// The later call passes over young objects, flagged or not.
    PassOverFlagged,
    /// The looks after the first leave every young object untraced.
    YoungLeftAfterFirstLook,
}

#[test]
fn what_a_window_calls_fresh_object_holds_is_marked() {
    window_calls_fresh_object(Reach::Cut, Rules::AsBuilt);
    window_calls_fresh_object(Reach::Copy, Rules::AsBuilt);
    window_calls_fresh_object(Reach::Wrap, Rules::AsBuilt);
}

#[test]
#[should_panic(expected = "held by a later call, unmarked")]
fn passing_over_a_window_calls_young_object_loses_it_under_a_later_calls_own() {
    window_calls_fresh_object(Reach::Wrap, Rules::PassOverFlagged);
}

#[test]
#[should_panic(expected = "held by a later call, unmarked")]
fn passing_over_a_window_calls_young_object_loses_what_it_holds() {
    window_calls_fresh_object(Reach::Cut, Rules::PassOverFlagged);
}

#[test]
#[should_panic(expected = "held by a later call, unmarked")]
fn leaving_every_young_object_untraced_loses_a_window_calls_object() {
    window_calls_fresh_object(Reach::Copy, Rules::YoungLeftAfterFirstLook);
}

/// Model 7's objects: `S`, which a window call handed out (shaded; the
/// first look drains it, the call having ended), `N`, a fresh object the
/// call made after T and put in `S` (young: outside the sweep's copy, and
/// flagged), and `X`, an object of the copy that only `N` reaches (an old
/// call cut every other path before T).
const S: usize = 0;
const N: usize = 1;
const X: usize = 2;
/// The later call's own fresh object (`Reach::Wrap`).
const Y: usize = 3;

/// Model 7: a later call reaches `N` through `S` while the end traces,
/// waits for the brackets under way and looks (`Cycle::terminate_ragged`).
/// If the mark ends while the call holds `N`, `X` must be marked.
fn window_calls_fresh_object(reach: Reach, rules: Rules) {
    loom::model(move || {
        let hs = Arc::new(Handshake::default());
        let slots = Arc::new([Slot::default()]);
        let marked: Arc<[AtomicBool; 4]> = Arc::new(Default::default());
        let gray = Arc::new(Mutex::new(Vec::new()));
        marked[S].store(true, Ordering::Relaxed);
        // `S`'s cell holding `N` (0: cut).
        let cell = Arc::new(AtomicUsize::new(1));
        let shade = |marked: &[AtomicBool; 4], gray: &Mutex<Vec<usize>>, o: usize| {
            if !marked[o].swap(true, Ordering::AcqRel) {
                gray.lock().unwrap().push(o);
            }
        };
        let call = {
            let (slots, marked, gray, cell) =
                (slots.clone(), marked.clone(), gray.clone(), cell.clone());
            loom::thread::spawn(move || {
                slots[0].begin_shading();
                let held = match reach {
                    Reach::Cut => {
                        // `shade_old`: `N` is young, and flagged.
                        let old = cell.swap(0, Ordering::AcqRel);
                        if old != 0 && rules != Rules::PassOverFlagged {
                            shade(&marked, &gray, N);
                        }
                        old != 0
                    }
                    Reach::Copy => {
                        let n = cell.load(Ordering::Acquire);
                        if n != 0 {
                            // Stored into another cell: the new value's shade.
                            shade(&marked, &gray, N);
                        }
                        n != 0
                    }
                    Reach::Wrap => {
                        // `Y` is made with what was read: no shade.
                        let n = cell.load(Ordering::Acquire);
                        if n != 0 {
                            let old = cell.swap(0, Ordering::AcqRel);
                            if old != 0 && rules != Rules::PassOverFlagged {
                                shade(&marked, &gray, N);
                            }
                            // `Y` stored: the new value's shade.
                            shade(&marked, &gray, Y);
                        }
                        n != 0
                    }
                };
                slots[0].end_shading();
                held
            })
        };
        // Left untraced by the looks after the first: as built, young
        // objects without the flag (`Y`).
        let left = |o: usize, first: bool| {
            !first && (o == Y || (rules == Rules::YoungLeftAfterFirstLook && o == N))
        };
        let trace = |o: usize, rest: &mut Vec<usize>| {
            let child = match o {
                S if cell.load(Ordering::Acquire) != 0 => Some(N),
                N => Some(X),
                Y => Some(N),
                _ => None,
            };
            if let Some(c) = child {
                if !marked[c].swap(true, Ordering::AcqRel) {
                    rest.push(c);
                }
            }
        };
        let mut rest = Vec::new();
        let mut first = true;
        let mut ended = false;
        for _ in 0..3 {
            loop {
                let mut batch = std::mem::take(&mut *gray.lock().unwrap());
                batch.retain(|&o| !left(o, first));
                batch.append(&mut rest);
                if batch.is_empty() {
                    break;
                }
                for o in batch {
                    trace(o, &mut rest);
                }
            }
            hs.wait_for_shades(&[&slots[0]]);
            let mut batch = std::mem::take(&mut *gray.lock().unwrap());
            if first {
                batch.push(S);
            }
            let done = if first {
                batch.is_empty()
            } else {
                batch.iter().all(|&o| left(o, first))
            };
            first = false;
            if done {
                ended = true;
                break;
            }
            rest.extend(batch);
        }
        let x = marked[X].load(Ordering::Acquire);
        let held = call.join().unwrap();
        if ended && held {
            assert!(
                x,
                "the mark ended with an object held by a later call, unmarked"
            );
        }
    });
}

#[test]
fn a_window_calls_unbracketed_shade_is_waited_for() {
    absorbed_shade(true);
}

/// How a window call's store reads what it overwrites
/// (`GcCell::store_marking`).
#[derive(Clone, Copy)]
enum WindowStore {
    /// One read-modify-write, as the code does.
    Swap,
    /// A load, then a store: what every later call does.
    LoadThenStore,
}

/// Model 9: cell `c` of a marked root holds `A` as the window opens. An
/// old call (barrier off) stores `B` into it and ends: T. A window call,
/// running across T, stores `Y` over `c` and shades what it overwrote and
/// `Y` (no bracket: the end's first wait outlasts it). A later call,
/// begun after T, loads `c` and holds what it read, storing it nowhere
/// (loads shade nothing). The markers read `c` after T; the end's first
/// look waits for the window call and drains. Whatever the later call
/// holds must then be marked. With a load and a store, the window call
/// can load `A` before the old call's store and store `Y` after the later
/// call read `B`: `B`, the value of T, is overwritten unread, and the
/// markers read `Y`. The swap reads `B` (`barrier.rs`, "Ragged cycles",
/// 3).
fn window_store(how: WindowStore) {
    const A: usize = 1;
    const B: usize = 2;
    const Y: usize = 3;
    loom::model(move || {
        let cell = Arc::new(AtomicUsize::new(A));
        let marks: Arc<[AtomicBool; 4]> = Arc::new(Default::default());
        let gray = Arc::new(Mutex::new(Vec::new()));
        let shade = {
            let (marks, gray) = (marks.clone(), gray.clone());
            move |o: usize| {
                if o != 0 && !marks[o].swap(true, Ordering::AcqRel) {
                    gray.lock().unwrap().push(o);
                }
            }
        };
        // The old call's plain store, as a swap whose result it drops:
        // loom lets a read-modify-write racing a plain store read a value
        // the store had already overwritten (tokio-rs/loom#254), which
        // failed the swap's model where no execution can.
        let old = {
            let cell = cell.clone();
            loom::thread::spawn(move || {
                let _ = cell.swap(B, Ordering::Release);
            })
        };
        let window = {
            let (cell, shade) = (cell.clone(), shade.clone());
            loom::thread::spawn(move || {
                let overwritten = match how {
                    WindowStore::Swap => cell.swap(Y, Ordering::AcqRel),
                    WindowStore::LoadThenStore => {
                        let v = cell.load(Ordering::Acquire);
                        cell.store(Y, Ordering::Release);
                        v
                    }
                };
                shade(overwritten);
                shade(Y);
                overwritten
            })
        };
        // T: the old calls have ended (`wait_for_calls`).
        old.join().unwrap();
        let later = {
            let cell = cell.clone();
            loom::thread::spawn(move || cell.load(Ordering::Acquire))
        };
        // The markers trace the root: they read `c` (the objects it may
        // hold have no fields).
        let read = cell.load(Ordering::Acquire);
        shade(read);
        // The end's first look: after the window call has ended, drain.
        let overwritten = window.join().unwrap();
        gray.lock().unwrap().clear();
        let held = later.join().unwrap();
        assert!(
            marks[held].load(Ordering::Acquire),
            "the mark ended with object {held}, held by a later call, unmarked: a value of T \
             overwritten unread (it overwrote {overwritten}, the markers read {read})"
        );
    });
}

/// Model 9, as the code does it.
#[test]
fn a_window_calls_store_reads_the_value_of_t_it_overwrites() {
    window_store(WindowStore::Swap);
}

/// Model 9 with a load and a store in the window call: it fails.
#[test]
#[should_panic(expected = "overwritten unread")]
fn a_window_calls_load_then_store_loses_the_value_of_t() {
    window_store(WindowStore::LoadThenStore);
}

/// Model 10: `GcLock::write`'s shade-once-per-mark (`shaded`), and its
/// exception for window calls (`barrier.rs`, "Ragged cycles", 7). The
/// lock holds `A` as the window opens. A window call writes it (shading
/// the contents before and after its closure, which stores `Y`), an old
/// call writes `B` into it with the barrier off and ends (T), a later
/// call reads the lock and holds what it read, and another later call
/// writes `Z` through the barrier while the markers read the lock after
/// T. Whatever the reader holds must be marked. If the window call
/// recorded `shaded`, the later writer skipped its shade of `B`, which the
/// old call stored unshaded after the window call's write.
fn window_lock_write(window_records: bool) {
    const A: usize = 1;
    const B: usize = 2;
    const Y: usize = 3;
    const Z: usize = 4;
    /// This mark's epoch.
    const E: usize = 1;
    loom::model(move || {
        let lock = Arc::new(Mutex::new(A));
        let shaded = Arc::new(AtomicUsize::new(0));
        let marks: Arc<[AtomicBool; 5]> = Arc::new(Default::default());
        let shade = {
            let marks = marks.clone();
            move |o: usize| {
                marks[o].store(true, Ordering::Release);
            }
        };
        // `GcLock::write` with the barrier on, storing `new`.
        let write = {
            let (lock, shaded, shade) = (lock.clone(), shaded.clone(), shade.clone());
            move |new: usize, window: bool| {
                let mut g = lock.lock().unwrap();
                if shaded.load(Ordering::Relaxed) != E {
                    shade(*g);
                    if !window || window_records {
                        shaded.store(E, Ordering::Relaxed);
                    }
                }
                *g = new;
                if window {
                    shade(*g);
                }
            }
        };
        let window = {
            let write = write.clone();
            loom::thread::spawn(move || write(Y, true))
        };
        let old = {
            let lock = lock.clone();
            loom::thread::spawn(move || *lock.lock().unwrap() = B)
        };
        // T.
        old.join().unwrap();
        let reader = {
            let lock = lock.clone();
            loom::thread::spawn(move || *lock.lock().unwrap())
        };
        let writer = loom::thread::spawn(move || write(Z, false));
        // The markers trace the lock's contents.
        let read = *lock.lock().unwrap();
        shade(read);
        // The end's first look waits for the window call.
        window.join().unwrap();
        writer.join().unwrap();
        let held = reader.join().unwrap();
        // `Z` is young: a later call made it after T (the sweep's copy
        // does not hold it), so this cycle does not free it.
        assert!(
            held == Z || marks[held].load(Ordering::Acquire),
            "the mark ended with object {held}, held by a later call, unmarked: a lock's \
             contents stored by an old call were never shaded (the markers read {read})"
        );
    });
}

/// Model 10, as the code does it: a window call's lock write records no
/// `shaded`.
#[test]
fn a_window_calls_lock_write_leaves_the_next_write_to_shade() {
    window_lock_write(false);
}

/// Model 10 with the window call recording `shaded`: it fails.
#[test]
#[should_panic(expected = "contents stored by an old call were never shaded")]
fn a_window_calls_recorded_lock_write_loses_an_old_calls_contents() {
    window_lock_write(true);
}
