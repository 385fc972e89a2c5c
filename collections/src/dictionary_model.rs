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
//! build); not modelled: growth (new arrays, published before the length
//! that needs them) and lookups of keys being removed.

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
