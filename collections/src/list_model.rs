//! loom models of [`GcList`](crate::GcList)'s uninitialised spare slots
//! against a reader on another thread (`list.rs`, "Uninitialised slots"),
//! under `--cfg loom`.
//!
//! A slot is a plain `written` flag (the first store into a slot is a
//! plain write of a whole cell, which loom checks for races) beside the
//! atomic value that later stores and every load use. The writer runs
//! `GcList`'s protocol with the writer lock held throughout (one writing
//! thread): a push at `filled` writes the slot plainly and then publishes
//! the length (release); a push below `filled` (after a pop) stores the
//! value atomically; growth (when the array is full, or a `reserve` after
//! a pop) copies the slots written so far (`filled`) into a fresh array,
//! which starts with that `filled`, and publishes it before any length
//! that reaches past the old capacity. The reader loads the length
//! (acquire), then the array (acquire), checks that the length is within
//! the array (`GcList::cell` reads an element on that alone), and reads
//! every slot below the length, as `GcList::view` does.
//!
//! In every interleaving the reader reads only written slots, never while
//! their first write is under way, and only values the list held (nonzero:
//! every value pushed is). Not modelled: `extend`'s runs (`fill_run`, whose
//! fused iterator keeps its plain writes at or past `filled`), the lock
//! handed between writers (its own models, `lock.rs`), panics and failed
//! growth (both leave the list's cells as they were), and growth in place
//! (the array's own model is loam-runtime's `grow_model.rs`; for the list
//! it is the current array getting more slots past `filled`, its length
//! stored before any list length that needs them, as a grown array is
//! published before such a length here). The
//! variants that publish the length before the write, reserve copying
//! only the elements in use (a slot a pop left is then unwritten in the
//! new array, and written plainly while a reader holding the longer
//! length may read it), forget the high mark (a popped slot written
//! plainly again in the same array), or publish a grown array after the
//! length that needs it, fail.
//!
//! A second model checks that a push during a concurrent mark is traced
//! by the marker or shaded by the pusher (`shade_pushed`), and a third
//! that a sort during a concurrent mark leaves every element traced or
//! shaded by the time the mark ends (`GcLog::moving`). A fourth has the
//! marker trace the list in parts (`ListObj::trace_part`): the count of
//! parts is read after the log met the marker, or a push is missed.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;

/// Capacities of the arrays the list goes through.
const CAPS: [usize; 3] = [1, 2, 4];

struct Slot {
    written: UnsafeCell<bool>,
    value: AtomicUsize,
}

struct List {
    /// `arrays[a]` has `CAPS[a]` slots; `items` is the current one's index.
    arrays: Vec<Vec<Slot>>,
    items: AtomicUsize,
    len: AtomicUsize,
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    /// `GcList`'s order.
    Right,
    /// The length published before the slot is written.
    LenFirst,
    /// A `reserve` after a pop that copies only the elements in use.
    ReserveInUse,
    /// No high mark: a slot a pop left is written plainly again.
    NoHigh,
    /// A grown array published after the length that needs it.
    ArrayLate,
}

/// The writer's own copy of the list, as `ListWriter` keeps it.
struct Writer {
    list: Arc<List>,
    array: usize,
    len: usize,
    high: usize,
    variant: Variant,
}

impl List {
    fn new() -> Self {
        List {
            arrays: CAPS
                .iter()
                .map(|&cap| {
                    (0..cap)
                        .map(|_| Slot {
                            written: UnsafeCell::new(false),
                            value: AtomicUsize::new(0),
                        })
                        .collect()
                })
                .collect(),
            items: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
        }
    }
}

impl Writer {
    fn slots(&self) -> &[Slot] {
        &self.list.arrays[self.array]
    }

    fn filled(&self) -> usize {
        if self.variant == Variant::NoHigh {
            return self.len;
        }
        self.len.max(self.high)
    }

    /// `ListWriter::fill`: the first store into a slot is a plain write.
    fn fill(&self, i: usize, value: usize) {
        let slot = &self.slots()[i];
        if i < self.filled() {
            slot.value.store(value, Ordering::Release);
        } else {
            // SAFETY: loom's cell checks that no other access to the flag
            // is concurrent with this write (the claim under test).
            slot.written.with_mut(|w| unsafe { *w = true });
            slot.value.store(value, Ordering::Relaxed);
        }
    }

    fn set_len(&mut self, len: usize) {
        if len < self.len {
            self.high = self.high.max(self.len);
        }
        self.len = len;
        self.list.len.store(len, Ordering::Release);
    }

    /// `GcList::grow_for`: a fresh array holding copies of the slots
    /// written so far, published before any longer length.
    fn grow(&mut self) {
        let next = self.array + 1;
        let filled = if self.variant == Variant::ReserveInUse {
            self.len
        } else {
            self.filled()
        };
        for i in 0..filled {
            let v = self.slots()[i].value.load(Ordering::Relaxed);
            let slot = &self.list.arrays[next][i];
            // SAFETY: as in `fill`: loom checks the write races with nothing.
            slot.written.with_mut(|w| unsafe { *w = true });
            slot.value.store(v, Ordering::Relaxed);
        }
        self.array = next;
        self.high = filled;
        if self.variant != Variant::ArrayLate {
            self.list.items.store(next, Ordering::Release);
        }
    }

    fn push(&mut self, value: usize) {
        if self.len == CAPS[self.array] {
            self.grow();
        }
        let len = self.len;
        if self.variant == Variant::LenFirst {
            self.set_len(len + 1);
            self.fill(len, value);
        } else {
            self.fill(len, value);
            self.set_len(len + 1);
        }
        if self.variant == Variant::ArrayLate {
            self.list.items.store(self.array, Ordering::Release);
        }
    }

    fn pop(&mut self) {
        let len = self.len - 1;
        self.set_len(len);
    }
}

/// `GcList::view` and a read of every slot it covers: each must have been
/// written, with a value the list held (values are nonzero).
fn read(list: &List) {
    let len = list.len.load(Ordering::Acquire);
    let array = list.items.load(Ordering::Acquire);
    let slots = &list.arrays[array];
    // `GcList::cell` reads an element past no check of the array's length.
    assert!(len <= slots.len(), "a reader met a length past its array");
    for slot in &slots[..len] {
        // SAFETY: loom checks that this read races with no write.
        let written = slot.written.with(|w| unsafe { *w });
        assert!(written, "a reader met an unwritten slot");
        assert_ne!(slot.value.load(Ordering::Acquire), 0);
    }
}

fn model(variant: Variant) {
    loom::model(move || {
        let list = Arc::new(List::new());
        let reader = {
            let list = list.clone();
            loom::thread::spawn(move || read(&list))
        };
        // The writer on a thread of its own too: loom explored less with
        // one side on the model's main thread (heap/src/seal_model.rs).
        let writer = loom::thread::spawn(move || {
            let mut w = Writer {
                list,
                array: 0,
                len: 0,
                high: 0,
                variant,
            };
            w.push(1); // array 0, fresh
            w.push(2); // grows into array 1 (full), fresh slot 1
            w.pop(); // slot 1 stays written (the high mark)
            w.push(3); // slot 1 again, atomically
            w.pop();
            w.grow(); // `reserve`: into array 2, slot 1 copied
            w.push(4); // slot 1 of array 2, atomically
            w.push(5); // fresh slot 2
        });
        writer.join().unwrap();
        reader.join().unwrap();
    });
}

#[test]
fn readers_meet_only_written_slots() {
    model(Variant::Right);
}

#[test]
#[should_panic(expected = "a reader met an unwritten slot")]
fn publishing_the_length_first_fails() {
    model(Variant::LenFirst);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn reserving_with_a_copy_of_the_elements_in_use_fails() {
    model(Variant::ReserveInUse);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn writing_a_popped_slot_plainly_fails() {
    model(Variant::NoHigh);
}

#[test]
#[should_panic(expected = "a reader met a length past its array")]
fn publishing_a_grown_array_after_its_length_fails() {
    model(Variant::ArrayLate);
}

/// A marker meeting the list's log (`LogOwner::adopt`, loam-runtime): it sets the owner,
/// then fences (or not, in the variants that fail) before it reads the
/// list.
fn adopt(owner: &AtomicUsize, with_fence: bool) {
    let _ = owner.compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed);
    if with_fence {
        loom::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// The pusher of the push models (`shade_pushed`): writes 7 into `slot`,
/// stores the length `len` (release), fences (or not, in the variant
/// that fails), and shades the value if a marker has met the log.
fn push_seven(
    slot: &AtomicUsize,
    len: &AtomicUsize,
    new_len: usize,
    owner: &AtomicUsize,
    shaded: &loom::sync::atomic::AtomicBool,
    with_fence: bool,
) {
    slot.store(7, Ordering::Relaxed);
    len.store(new_len, Ordering::Release);
    if with_fence {
        loom::sync::atomic::fence(Ordering::SeqCst);
    }
    if owner.load(Ordering::Relaxed) != 0 {
        shaded.store(true, Ordering::Relaxed);
    }
}

/// A push during a concurrent mark into a list no marker may have met
/// (`shade_pushed`, `GcLog::after_unreported_stores`) against a marker
/// tracing the list: the pusher writes the slot, stores the length
/// (release), fences and reads the log's owner, and shades the value only
/// if it finds one; the marker sets the owner, fences, and reads the
/// length (acquire) and the slot, as the list's trace does after the log's.
/// In every interleaving the marker reads the value or the pusher shades
/// it. Without either fence, an interleaving does neither.
fn push_against_a_marker(writer_fence: bool, marker_fence: bool) {
    use loom::sync::atomic::AtomicBool;
    struct Pushed {
        owner: AtomicUsize,
        len: AtomicUsize,
        slot: AtomicUsize,
        shaded: AtomicBool,
    }
    loom::model(move || {
        let p = Arc::new(Pushed {
            owner: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            slot: AtomicUsize::new(0),
            shaded: AtomicBool::new(false),
        });
        let marker = {
            let p = p.clone();
            loom::thread::spawn(move || {
                adopt(&p.owner, marker_fence);
                let len = p.len.load(Ordering::Acquire);
                len > 0 && p.slot.load(Ordering::Relaxed) == 7
            })
        };
        let pusher = {
            let p = p.clone();
            loom::thread::spawn(move || {
                push_seven(&p.slot, &p.len, 1, &p.owner, &p.shaded, writer_fence)
            })
        };
        let read = marker.join().unwrap();
        pusher.join().unwrap();
        assert!(
            read || p.shaded.load(Ordering::Relaxed),
            "a value pushed during a mark was neither traced nor shaded"
        );
    });
}

#[test]
fn a_push_is_traced_or_shaded() {
    push_against_a_marker(true, true);
}

#[test]
#[should_panic(expected = "neither traced nor shaded")]
fn a_push_without_the_pushers_fence_fails() {
    push_against_a_marker(false, true);
}

#[test]
#[should_panic(expected = "neither traced nor shaded")]
fn a_push_without_the_markers_fence_fails() {
    push_against_a_marker(true, false);
}

/// A sort during a concurrent mark, of a list no marker may have met
/// (`GcList::sort_by`, `GcLog::moving`), against a marker tracing the
/// list and the mark's end: the sorter opens a shading bracket (a
/// read-modify-write and a fence, as `Slot::begin_shading` does without
/// `membarrier`; with it, a release store and a fence that loom models as
/// sequentially consistent, the same to this model), swaps the two
/// elements with plain stores, fences, reads the log's owner, shades both
/// elements if it finds one, and closes the bracket (release). The marker
/// sets the owner, fences and reads both slots; the end then fences and
/// waits while the bracket is open (`Handshake::wait_for_shades`). What is
/// marked when the mark ends, read or shaded, holds both elements in every
/// interleaving. Without the sorter's fence or the marker's, or with the bracket
/// opened after the moves instead of before, an interleaving marks one
/// element only (the marker read a slot before the swap and the other
/// after it).
fn sort_against_a_marker(mover_fence: bool, marker_fence: bool, bracket_first: bool) {
    use loom::sync::atomic::{fence, AtomicBool};
    struct Sorted {
        owner: AtomicUsize,
        slots: [AtomicUsize; 2],
        shading: AtomicUsize,
        shaded: AtomicBool,
    }
    loom::model(move || {
        let p = Arc::new(Sorted {
            owner: AtomicUsize::new(0),
            slots: [AtomicUsize::new(1), AtomicUsize::new(2)],
            shading: AtomicUsize::new(0),
            shaded: AtomicBool::new(false),
        });
        let marker = {
            let p = p.clone();
            loom::thread::spawn(move || {
                adopt(&p.owner, marker_fence);
                let read = [
                    p.slots[0].load(Ordering::Relaxed),
                    p.slots[1].load(Ordering::Relaxed),
                ];
                // The end: wait for open brackets, then take what they shaded.
                fence(Ordering::SeqCst);
                while p.shading.load(Ordering::Acquire) & 1 == 1 {
                    loom::thread::yield_now();
                }
                let shaded = p.shaded.load(Ordering::Relaxed);
                [1, 2].iter().all(|v| shaded || read.contains(v))
            })
        };
        let sorter = {
            let p = p.clone();
            loom::thread::spawn(move || {
                let open = || {
                    p.shading.fetch_add(1, Ordering::Relaxed);
                    fence(Ordering::SeqCst);
                };
                if bracket_first {
                    open();
                }
                p.slots[0].store(2, Ordering::Relaxed);
                p.slots[1].store(1, Ordering::Relaxed);
                if !bracket_first {
                    open();
                }
                if mover_fence {
                    fence(Ordering::SeqCst);
                }
                if p.owner.load(Ordering::Relaxed) != 0 {
                    p.shaded.store(true, Ordering::Relaxed);
                }
                p.shading.fetch_add(1, Ordering::Release);
            })
        };
        let whole = marker.join().unwrap();
        sorter.join().unwrap();
        assert!(
            whole,
            "a sort during a mark left an element unmarked at the mark's end"
        );
    });
}

#[test]
fn a_sort_is_traced_or_shaded() {
    sort_against_a_marker(true, true, true);
}

#[test]
#[should_panic(expected = "left an element unmarked")]
fn a_sort_without_the_markers_fence_fails() {
    sort_against_a_marker(true, false, true);
}

#[test]
#[should_panic(expected = "left an element unmarked")]
fn a_sort_whose_bracket_opens_after_the_moves_fails() {
    sort_against_a_marker(true, true, false);
}

#[test]
#[should_panic(expected = "left an element unmarked")]
fn a_sort_without_the_sorters_fence_fails() {
    sort_against_a_marker(false, true, true);
}

/// A push during a mark against a marker tracing the list in parts
/// (`ListObj::trace_part`): part 0 meets the log (owner, fence) and then
/// reads the length, whose count of parts queues the later parts, each of
/// which reads its slot. The pusher is `push_against_a_marker`'s. In every
/// interleaving the pushed value is in a part the marker traces, or the
/// pusher shades it. Reading the length (the count) before the log, as a
/// first version did, fails: the count misses the push, and the pusher,
/// before the log met its marker, does not shade.
fn push_against_parts(count_first: bool) {
    use loom::sync::atomic::AtomicBool;
    struct Pushed {
        owner: AtomicUsize,
        len: AtomicUsize,
        slots: [AtomicUsize; 2],
        shaded: AtomicBool,
    }
    loom::model(move || {
        // One element already (5); a part a slot.
        let p = Arc::new(Pushed {
            owner: AtomicUsize::new(0),
            len: AtomicUsize::new(1),
            slots: [AtomicUsize::new(5), AtomicUsize::new(0)],
            shaded: AtomicBool::new(false),
        });
        let marker = {
            let p = p.clone();
            loom::thread::spawn(move || {
                let early = p.len.load(Ordering::Acquire);
                adopt(&p.owner, true);
                let parts = if count_first {
                    early
                } else {
                    p.len.load(Ordering::Acquire)
                };
                // The later parts, each reading the list as it is then.
                (0..parts).any(|k| {
                    k < p.len.load(Ordering::Acquire) && p.slots[k].load(Ordering::Relaxed) == 7
                })
            })
        };
        let pusher = {
            let p = p.clone();
            loom::thread::spawn(move || {
                push_seven(&p.slots[1], &p.len, 2, &p.owner, &p.shaded, true)
            })
        };
        let read = marker.join().unwrap();
        pusher.join().unwrap();
        assert!(
            read || p.shaded.load(Ordering::Relaxed),
            "a value pushed during a mark was in no part traced and not shaded"
        );
    });
}

#[test]
fn a_push_is_in_a_traced_part_or_shaded() {
    push_against_parts(false);
}

#[test]
#[should_panic(expected = "in no part traced and not shaded")]
fn counting_the_parts_before_the_log_fails() {
    push_against_parts(true);
}
