//! loom model of [`GcDictionary`](crate::GcDictionary)'s lock-free lookups
//! against a removal on another thread (`dictionary.rs`, `get_key_value`
//! and `remove_at`), under `--cfg loom`.
//!
//! Three entries in a four-slot index: A and B share a probe run from
//! slot 0 (B sits in slot 1), C sits alone in slot 2 and is the last
//! entry. The writer removes A as `remove_at` does, inside its move
//! bracket (`moves` odd): the backward shift moves B's slot into slot 0
//! and clears slot 1, then the last entry C moves into A's place (its
//! slot renamed, its fields copied) and the length drops. The reader looks
//! B up as `get_key_value` does: an even `moves`, the probe (`find`), and
//! `moves` again, retrying if it changed. Every cell is an acquire load
//! and a release store, as `GcCell`'s are. In every interleaving the
//! reader finds B with B's value: B stays present throughout. The variant
//! whose reader does not read `moves` again can miss B (it read slot 0
//! before the shift and slot 1 after it) and fails. A copy of the code's
//! protocol (the dictionary itself needs the runtime, which loom does not
//! build); not modelled: lookups of keys being removed. Growth is the
//! second model (`growth`).

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;

const SLOTS: usize = 4;
const MASK: usize = SLOTS - 1;

/// `dictionary.rs`'s `slot`: the hash's top half, and the entry plus one.
fn slot(h: u64, e: usize) -> u64 {
    (h & !0xffff_ffff) | (e as u64 + 1)
}

fn slot_entry(s: u64) -> usize {
    (s & 0xffff_ffff) as usize - 1
}

fn slot_matches(s: u64, h: u64) -> bool {
    (s ^ h) >> 32 == 0
}

struct Entry {
    hash: AtomicU64,
    key: AtomicU64,
    value: AtomicU64,
}

struct Dict {
    moves: AtomicU64,
    len: AtomicU64,
    indices: Vec<AtomicU64>,
    entries: Vec<Entry>,
}

// Homes: A and B slot 0, C slot 2 (low bits); tags in the top halves.
const A: (u64, u64, u64) = (1 << 32, 10, 100);
const B: (u64, u64, u64) = (2 << 32, 20, 200);
const C: (u64, u64, u64) = (3 << 32 | 2, 30, 300);

impl Dict {
    fn new() -> Dict {
        let entries = [A, B, C]
            .iter()
            .map(|&(h, k, v)| Entry {
                hash: AtomicU64::new(h),
                key: AtomicU64::new(k),
                value: AtomicU64::new(v),
            })
            .collect();
        let indices = [slot(A.0, 0), slot(B.0, 1), slot(C.0, 2), 0]
            .iter()
            .map(|&s| AtomicU64::new(s))
            .collect();
        Dict {
            moves: AtomicU64::new(0),
            len: AtomicU64::new(3),
            indices,
            entries,
        }
    }

    fn get(&self, i: usize) -> u64 {
        self.indices[i].load(Ordering::Acquire)
    }

    fn put(&self, i: usize, s: u64) {
        self.indices[i].store(s, Ordering::Release);
    }

    /// `remove_at(pos, e)` for the entry in slot `pos`, as the code.
    fn remove_at(&self, pos: usize, e: usize) {
        let m = self.moves.load(Ordering::Acquire);
        self.moves.store(m + 1, Ordering::Release);
        let len = self.len.load(Ordering::Acquire) as usize;
        let mut hole = pos;
        let mut i = (pos + 1) & MASK;
        loop {
            let s = self.get(i);
            if s == 0 {
                break;
            }
            let home = self.entries[slot_entry(s)].hash.load(Ordering::Acquire) as usize & MASK;
            if (i.wrapping_sub(home) & MASK) >= (i.wrapping_sub(hole) & MASK) {
                self.put(hole, s);
                hole = i;
            }
            i = (i + 1) & MASK;
        }
        self.put(hole, 0);
        let last = len - 1;
        if e != last {
            let l = &self.entries[last];
            let (h, k, v) = (
                l.hash.load(Ordering::Acquire),
                l.key.load(Ordering::Acquire),
                l.value.load(Ordering::Acquire),
            );
            let mut p = h as usize & MASK;
            while self.get(p) != slot(h, last) {
                p = (p + 1) & MASK;
            }
            self.put(p, slot(h, e));
            let to = &self.entries[e];
            to.hash.store(h, Ordering::Release);
            to.key.store(k, Ordering::Release);
            to.value.store(v, Ordering::Release);
        }
        self.len.store(last as u64, Ordering::Release);
        self.moves.store(m + 2, Ordering::Release);
    }

    /// `find`: the probe for key `q` of hash `h`.
    fn find(&self, q: u64, h: u64) -> Option<u64> {
        let len = self.len.load(Ordering::Acquire) as usize;
        let mut pos = h as usize & MASK;
        for _ in 0..SLOTS {
            let s = self.get(pos);
            if s == 0 {
                return None;
            }
            if slot_matches(s, h) {
                let e = slot_entry(s);
                if e < len {
                    let entry = &self.entries[e];
                    if entry.key.load(Ordering::Acquire) == q {
                        return Some(entry.value.load(Ordering::Acquire));
                    }
                }
            }
            pos = (pos + 1) & MASK;
        }
        None
    }

    /// `get_key_value`'s loop; `recheck` false is the variant that trusts
    /// one probe.
    fn lookup(&self, q: u64, h: u64, recheck: bool) -> Option<u64> {
        loop {
            let before = self.moves.load(Ordering::Acquire);
            if before % 2 == 1 {
                loom::thread::yield_now();
                continue;
            }
            let found = self.find(q, h);
            if !recheck || self.moves.load(Ordering::Acquire) == before {
                return found;
            }
        }
    }
}

fn run(recheck: bool) {
    let d = Arc::new(Dict::new());
    let writer = {
        let d = d.clone();
        loom::thread::spawn(move || d.remove_at(0, 0))
    };
    let found = d.lookup(B.1, B.0, recheck);
    writer.join().unwrap();
    assert_eq!(found, Some(B.2), "a lookup missed a key that stayed");
    // And after the removal: B and C found, A gone.
    assert_eq!(d.lookup(B.1, B.0, true), Some(B.2));
    assert_eq!(d.lookup(C.1, C.0, true), Some(C.2));
    assert_eq!(d.lookup(A.1, A.0, true), None);
}

#[test]
fn a_lookup_racing_a_removal_finds_a_key_that_stays() {
    loom::model(|| run(true));
}

#[test]
#[should_panic(expected = "a lookup missed a key that stayed")]
fn without_the_second_read_of_moves_a_lookup_misses_a_key_that_stays() {
    loom::model(|| run(false));
}

/// Growth (`push_entry`): the insert of a fourth entry `D` into three in
/// a full three-entry array and a four-slot index grows both. The writer
/// fills a six-entry array with copies of the three (spares hold the new
/// entry, as the code's do) and an eight-slot index with their slots,
/// installs the entries, then the index (release), fills entry 3, places
/// its slot and stores the length. Readers load the length, then the
/// entries, then the index (acquire), and bound the entry number by both.
/// In every interleaving a lookup of `B` finds `B`'s value, and one of
/// `D` finds `D`'s value or nothing. The variant whose writer installs the
/// new entries before copying into them fails (a reader probes the old
/// index into the new, empty array).
mod growth {
    use super::{slot, slot_entry, slot_matches, A, B, C};
    use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use loom::sync::Arc;

    const D: (u64, u64, u64) = (4 << 32 | 1, 40, 400);

    struct Entry {
        hash: AtomicU64,
        key: AtomicU64,
        value: AtomicU64,
    }

    impl Entry {
        fn new((h, k, v): (u64, u64, u64)) -> Entry {
            Entry {
                hash: AtomicU64::new(h),
                key: AtomicU64::new(k),
                value: AtomicU64::new(v),
            }
        }
    }

    /// The two generations of each array (0 old, 1 grown) and the cells
    /// that say which is installed.
    struct Dict {
        len: AtomicU64,
        entries_at: AtomicUsize,
        indices_at: AtomicUsize,
        entries: [Vec<Entry>; 2],
        indices: [Vec<AtomicU64>; 2],
    }

    fn place(indices: &[AtomicU64], h: u64, e: usize) {
        let mask = indices.len() - 1;
        let mut p = h as usize & mask;
        while indices[p].load(Ordering::Acquire) != 0 {
            p = (p + 1) & mask;
        }
        indices[p].store(slot(h, e), Ordering::Release);
    }

    impl Dict {
        fn new() -> Dict {
            let old_indices: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
            for (e, &(h, _, _)) in [A, B, C].iter().enumerate() {
                place(&old_indices, h, e);
            }
            Dict {
                len: AtomicU64::new(3),
                entries_at: AtomicUsize::new(0),
                indices_at: AtomicUsize::new(0),
                entries: [
                    [A, B, C].into_iter().map(Entry::new).collect(),
                    // Allocated, not yet filled: what the writer copies
                    // into (the code fills it as it allocates it).
                    (0..6).map(|_| Entry::new((0, 0, 0))).collect(),
                ],
                indices: [old_indices, (0..8).map(|_| AtomicU64::new(0)).collect()],
            }
        }

        /// `push_entry(D)`; `install_first`: the variant that installs the
        /// new entries before it copies into them.
        fn insert_d(&self, install_first: bool) {
            let grown = &self.entries[1];
            if install_first {
                self.entries_at.store(1, Ordering::Release);
            }
            for (e, &(h, k, v)) in [A, B, C, D, D, D].iter().enumerate() {
                grown[e].hash.store(h, Ordering::Release);
                grown[e].key.store(k, Ordering::Release);
                grown[e].value.store(v, Ordering::Release);
            }
            let fresh = &self.indices[1];
            for (e, &(h, _, _)) in [A, B, C].iter().enumerate() {
                place(fresh, h, e);
            }
            self.entries_at.store(1, Ordering::Release);
            self.indices_at.store(1, Ordering::Release);
            place(fresh, D.0, 3);
            self.len.store(4, Ordering::Release);
        }

        /// `find`.
        fn find(&self, q: u64, h: u64) -> Option<u64> {
            let len = self.len.load(Ordering::Acquire) as usize;
            let entries = &self.entries[self.entries_at.load(Ordering::Acquire)];
            let indices = &self.indices[self.indices_at.load(Ordering::Acquire)];
            let len = len.min(entries.len());
            let mask = indices.len() - 1;
            let mut pos = h as usize & mask;
            for _ in 0..indices.len() {
                let s = indices[pos].load(Ordering::Acquire);
                if s == 0 {
                    return None;
                }
                if slot_matches(s, h) {
                    let e = slot_entry(s);
                    if e < len && entries[e].key.load(Ordering::Acquire) == q {
                        return Some(entries[e].value.load(Ordering::Acquire));
                    }
                }
                pos = (pos + 1) & mask;
            }
            None
        }
    }

    fn run(install_first: bool) {
        loom::model(move || {
            let d = Arc::new(Dict::new());
            let writer = {
                let d = d.clone();
                loom::thread::spawn(move || d.insert_d(install_first))
            };
            let b = d.find(B.1, B.0);
            let dv = d.find(D.1, D.0);
            writer.join().unwrap();
            assert_eq!(b, Some(B.2), "a lookup missed a key that stayed");
            assert!(
                dv.is_none() || dv == Some(D.2),
                "a lookup of the new key read {dv:?}"
            );
            // After the insert: all four found.
            for (k, h, v) in [
                (A.1, A.0, A.2),
                (B.1, B.0, B.2),
                (C.1, C.0, C.2),
                (D.1, D.0, D.2),
            ] {
                assert_eq!(d.find(k, h), Some(v));
            }
        });
    }

    #[test]
    fn lookups_racing_a_growing_insert_find_what_is_there() {
        run(false);
    }

    #[test]
    #[should_panic(expected = "a lookup missed a key that stayed")]
    fn installing_the_entries_before_copying_them_loses_a_key() {
        run(true);
    }
}
