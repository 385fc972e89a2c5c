//! A root table's slots: object addresses in chunks that never move, read
//! and written with one atomic access each, so that a root's `get` and
//! `set` take no lock. (They locked the table's mutex: a `GlobalRoot` read
//! took 20 ns on one thread and 175 – 183 ns on each of two reading at
//! once.) The table hands slots out and takes them back under its own
//! lock (`root.rs`); this is the part its readers see.
//!
//! Chunk `c` holds `BASE << c` slots, so [`CHUNKS`] of them hold every
//! index a `u32` names while the first is small. A chunk is allocated and
//! its pointer published (release) before any of its slots is handed out,
//! by the table's owner under its lock; a reader holds an index only
//! through a root made after that (whose handle reached the reader's
//! thread through whatever moved it there, which orders it after), and
//! loads the pointer with acquire. A slot's value is stored with release
//! and loaded with acquire: the object it names was written before it was
//! rooted. Chunks are freed with the table, which outlives every root of
//! it (each holds the table's owner). The loom model is at the end.

use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

/// Slots in chunk 0 (small under loom, where each is a modelled atomic).
#[cfg(not(loom))]
const BASE: usize = 64;
#[cfg(loom)]
const BASE: usize = 2;

/// Chunks: `BASE * (2^CHUNKS - 1)` slots, past `u32::MAX`.
const CHUNKS: usize = 32 - BASE.trailing_zeros() as usize + 1;
const _: () = assert!((BASE as u64) * ((1_u64 << CHUNKS) - 1) > u32::MAX as u64);

/// The slots of a root table.
pub(crate) struct Slots {
    chunks: [AtomicPtr<AtomicUsize>; CHUNKS],
}

/// The chunk and the offset in it of slot `i`.
#[inline]
fn locate(i: usize) -> (usize, usize) {
    let q = i / BASE + 1;
    let c = (usize::BITS - 1 - q.leading_zeros()) as usize;
    (c, i - BASE * ((1 << c) - 1))
}

impl Slots {
    pub(crate) fn new() -> Slots {
        Slots {
            chunks: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// Makes slot `i` usable, allocating its chunk if `i` is the chunk's
    /// first slot (each slot zero). For the table's owner, under its lock,
    /// with `i` the next slot never handed out.
    pub(crate) fn grow_to(&self, i: usize) {
        let (c, off) = locate(i);
        if off == 0 {
            let chunk: Box<[AtomicUsize]> = (0..BASE << c).map(|_| AtomicUsize::new(0)).collect();
            let p = Box::into_raw(chunk).cast::<AtomicUsize>();
            self.chunks[c].store(p, Ordering::Release);
        }
    }

    #[inline]
    fn slot(&self, i: usize) -> &AtomicUsize {
        let (c, off) = locate(i);
        let p = self.chunks[c].load(Ordering::Acquire);
        assert!(
            !p.is_null(),
            "loam: root slot {i} read before it was handed out"
        );
        // Chunk `c` holds `BASE << c` slots and `off` is below that
        // (`locate`); it lives as long as `self` (freed in `drop`).
        // SAFETY: as just said.
        unsafe { &*p.add(off) }
    }

    /// The address in slot `i` (0: none), which was handed out.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> usize {
        self.slot(i).load(Ordering::Acquire)
    }

    /// Stores `addr` in slot `i`, which was handed out.
    #[inline]
    pub(crate) fn set(&self, i: usize, addr: usize) {
        self.slot(i).store(addr, Ordering::Release);
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        for (c, chunk) in self.chunks.iter_mut().enumerate() {
            let p = chunk.load(Ordering::Relaxed);
            if !p.is_null() {
                // Made by `grow_to` from a boxed slice of `BASE << c`
                // slots, freed once (the table is going).
                // SAFETY: as just said.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, BASE << c)) });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{locate, BASE};

    /// Each index maps to one slot, chunk after chunk, each twice the last.
    #[test]
    fn indices_fill_the_chunks_in_order() {
        let mut expect = (0, 0);
        for i in 0..BASE * 1023 {
            assert_eq!(locate(i), expect, "slot {i}");
            expect.1 += 1;
            if expect.1 == BASE << expect.0 {
                expect = (expect.0 + 1, 0);
            }
        }
        assert!(locate(u32::MAX as usize).0 < super::CHUNKS);
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::{Slots, BASE};
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;

    /// The owner hands out slots into a second chunk and roots an object
    /// in the last, then passes its index to another thread (release, as
    /// a root's handle travels); that thread reads the slot, its chunk's
    /// pointer included, and finds the address.
    #[test]
    fn a_root_read_on_another_thread_finds_its_slot() {
        loom::model(|| {
            let slots = Arc::new(Slots::new());
            let index = Arc::new(AtomicUsize::new(usize::MAX));
            let reader = {
                let (slots, index) = (slots.clone(), index.clone());
                loom::thread::spawn(move || loop {
                    let i = index.load(Ordering::Acquire);
                    if i != usize::MAX {
                        return slots.get(i);
                    }
                    loom::thread::yield_now();
                })
            };
            let last = BASE + 1;
            for i in 0..=last {
                slots.grow_to(i);
            }
            slots.set(last, 0x1000);
            index.store(last, Ordering::Release);
            assert_eq!(reader.join().unwrap(), 0x1000);
        });
    }
}
