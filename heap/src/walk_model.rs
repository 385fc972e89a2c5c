//! loom model of page walks without the registry's lock
//! (`segment.rs`, `for_each_segment_unlocked`; the epochs of
//! `walk_epochs.rs`, run as they are, under a loom mutex standing for the
//! registry's `SpinLock`, whose spinning loom cannot explore and whose own
//! model is in `spin.rs`).
//!
//! Three segments are linked from the head, 2 -> 1 -> 0. A walk takes the
//! lock to begin (counting itself) and to step from a segment to the
//! next, and reads each segment without it; it ends under the lock,
//! taking the lists the epochs release, and unmaps them after. A
//! destroyer unlinks segments 1 and then 2 under the lock, keeping their
//! links (a walk standing on one goes on to the segments still linked),
//! and either unmaps each at once, when no walk runs, or leaves it in the
//! list the epochs name. Each segment is a loom cell: a walk's read and an
//! unmap's write that no lock orders are a race loom reports. Two walks,
//! the second beginning whenever loom lets it, and the destroyer: no
//! segment is unmapped while a walk may read it, and every unlinked one is
//! unmapped once the walks have ended; one walker walks twice, so that a
//! walk of the next epoch runs beside one of the epoch before. Unmapping
//! a deferred segment at the first walk's end instead of at the epochs'
//! word fails. (The epochs' own rule, step by step, is the unit test in
//! `walk_epochs.rs`: this model did not find a rule that reads the ending
//! walk's count instead of the epoch before's, which the unit test does.)

use crate::walk_epochs::WalkEpochs;
use loom::cell::UnsafeCell;
use loom::sync::{Arc, Mutex};
use loom::thread;

const N: usize = 3;
const NONE: usize = usize::MAX;

struct Registry {
    head: usize,
    /// `all_next` of each segment (kept when it is unlinked).
    next: [usize; N],
    epochs: WalkEpochs,
    deferred: [Vec<usize>; 2],
    /// Unmapped segments, for the end's check.
    unmapped: Vec<usize>,
}

struct World {
    reg: Mutex<Registry>,
    /// Each segment's memory: read by walks, written by its unmap.
    segments: [UnsafeCell<u64>; N],
}

impl World {
    fn unmap(&self, s: usize) {
        // loom checks that no walk's read races this write (the model's
        // assertion); the cell is the segment's memory.
        // SAFETY: as just said.
        self.segments[s].with_mut(|m| unsafe { *m = u64::MAX });
        self.reg.lock().unwrap().unmapped.push(s);
    }

    fn walk(&self, early_release: bool) {
        let (mut s, p) = {
            let mut reg = self.reg.lock().unwrap();
            let p = reg.epochs.begin();
            (reg.head, p)
        };
        while s != NONE {
            // A read of the segment's memory, which loom orders against
            // its unmap (above).
            // SAFETY: as just said.
            let v = self.segments[s].with(|m| unsafe { *m });
            assert_ne!(v, u64::MAX, "a walk read segment {s} after its unmap");
            s = self.reg.lock().unwrap().next[s];
        }
        let dead: Vec<usize> = {
            let mut reg = self.reg.lock().unwrap();
            if early_release {
                // The wrong rule: whatever waits, at any walk's end.
                reg.epochs.end(p);
                let d = std::mem::take(&mut reg.deferred);
                d.into_iter().flatten().collect()
            } else {
                let released = reg.epochs.end(p);
                released
                    .into_iter()
                    .flatten()
                    .flat_map(|q| std::mem::take(&mut reg.deferred[q]))
                    .collect()
            }
        };
        for d in dead {
            self.unmap(d);
        }
    }

    fn destroy(&self, s: usize) {
        let now = {
            let mut reg = self.reg.lock().unwrap();
            // Unlink `s`, keeping its own link.
            if reg.head == s {
                reg.head = reg.next[s];
            } else {
                let mut p = reg.head;
                while reg.next[p] != s {
                    p = reg.next[p];
                }
                reg.next[p] = reg.next[s];
            }
            match reg.epochs.defer_to() {
                Some(q) => {
                    reg.deferred[q].push(s);
                    false
                }
                None => true,
            }
        };
        if now {
            self.unmap(s);
        }
    }
}

fn run(early_release: bool) {
    crate::sync::model(move || {
        let world = Arc::new(World {
            reg: Mutex::new(Registry {
                head: 2,
                next: [NONE, 0, 1],
                epochs: WalkEpochs::new(),
                deferred: [Vec::new(), Vec::new()],
                unmapped: Vec::new(),
            }),
            segments: std::array::from_fn(|_| UnsafeCell::new(0)),
        });
        // The first walker walks twice, so that a walk may begin in the
        // next epoch while the other's, of the one before, still runs.
        let walkers: Vec<_> = [2, 1]
            .into_iter()
            .map(|walks| {
                let w = world.clone();
                thread::spawn(move || {
                    for _ in 0..walks {
                        w.walk(early_release)
                    }
                })
            })
            .collect();
        world.destroy(1);
        world.destroy(2);
        for w in walkers {
            w.join().unwrap();
        }
        let mut unmapped = world.reg.lock().unwrap().unmapped.clone();
        unmapped.sort_unstable();
        assert_eq!(unmapped, [1, 2], "an unlinked segment stayed mapped");
    });
}

#[test]
fn no_segment_is_unmapped_under_a_walk() {
    run(false);
}

#[test]
#[should_panic(expected = "Concurrent read and write accesses")]
fn unmapping_at_any_walks_end_fails() {
    run(true);
}
