//! The registry chunks of a `GlobalAlloc` object space (`alloc_space.rs`):
//! one mutator fills a chunk with the addresses of the objects it
//! allocates, and publishes each with the chunk's length; a reader that
//! loads the length sees every address below it.
//!
//! Protocol: the owner writes slot `i` (plain memory), then stores
//! `len = i + 1` (release); a reader loads `len` (acquire) and then reads
//! slots below it. Slots below a published length never change again, and
//! slots at or past it are the owner's alone, so a reader may run beside
//! a writer that goes on filling the chunk (the sweep runs beside the
//! mutators): no slot is ever written and read at once. `swept` is the
//! collector's: where its next read starts. The loom model below checks
//! the reads against the writes (loom reports a read of a slot not ordered
//! after its write), and fails if the release or the acquire is weakened.

use crate::sync::{AtomicUsize, Ordering};
#[cfg(loom)]
use loom::cell::UnsafeCell;

/// `loom::cell::UnsafeCell`'s interface over std's.
#[cfg(not(loom))]
struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Addresses per chunk (a few under loom, to keep the model small).
#[cfg(not(loom))]
pub(crate) const CHUNK_SLOTS: usize = 4096;
#[cfg(loom)]
pub(crate) const CHUNK_SLOTS: usize = 3;

// SAFETY: the slots are shared by the protocol above: each is written
// once, by the owner, before the release store that publishes it, and read
// only by threads that loaded a length past it with acquire.
unsafe impl Sync for Chunk {}
// SAFETY: as above; a chunk holds plain addresses.
unsafe impl Send for Chunk {}

/// One mutator's run of registered objects.
///
/// # Invariants
/// `swept <= len <= CHUNK_SLOTS`; every slot below `len` holds a nonzero
/// address, written before `len` passed it and never again.
pub(crate) struct Chunk {
    slots: Box<[UnsafeCell<usize>]>,
    /// Slots filled. Writer: the owner (release); readers: acquire.
    len: AtomicUsize,
    /// Slots already swept. The collector's alone.
    swept: AtomicUsize,
}

impl Chunk {
    pub(crate) fn new() -> Chunk {
        Chunk {
            slots: (0..CHUNK_SLOTS).map(|_| UnsafeCell::new(0)).collect(),
            len: AtomicUsize::new(0),
            swept: AtomicUsize::new(0),
        }
    }

    /// Whether every slot is filled (the owner's view).
    pub(crate) fn is_full(&self) -> bool {
        self.len.load(Ordering::Relaxed) == CHUNK_SLOTS
    }

    /// Appends `addr`.
    ///
    /// # Safety
    /// The caller is the chunk's owner (the one thread that pushes into
    /// it), and the chunk is not full. (The chunk is shared, `Sync`, with
    /// the collector, which only reads: a second pusher would race the
    /// owner's plain write of the slot.)
    pub(crate) unsafe fn push(&self, addr: usize) {
        debug_assert!(addr != 0);
        let i = self.len.load(Ordering::Relaxed);
        // SAFETY: slot `i` is at the published length: the owner's alone
        // (readers read below a length they loaded), and we are the owner
        // (caller).
        self.slots[i].with_mut(|p| unsafe { *p = addr });
        self.len.store(i + 1, Ordering::Release);
    }

    /// The published length: every slot below it is readable.
    pub(crate) fn published(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// The addresses in slots `from..to`, `to` at most a length this
    /// thread has loaded with [`published`](Self::published) (or one
    /// ordered after it).
    pub(crate) fn addresses(&self, from: usize, to: usize) -> impl Iterator<Item = usize> + '_ {
        // SAFETY: slots below a published length the caller loaded were
        // written before it (release/acquire) and are never written again.
        self.slots[from..to]
            .iter()
            .map(|s| s.with(|p| unsafe { *p }))
    }

    /// Where the next sweep starts.
    pub(crate) fn swept(&self) -> usize {
        self.swept.load(Ordering::Relaxed)
    }

    /// Records that slots below `to` are swept (the collector only).
    pub(crate) fn set_swept(&self, to: usize) {
        debug_assert!(self.swept() <= to && to <= CHUNK_SLOTS);
        self.swept.store(to, Ordering::Relaxed);
    }
}

#[cfg(all(test, loom))]
mod model {
    use super::{Chunk, CHUNK_SLOTS};
    use loom::sync::Arc;

    /// The owner fills the chunk while a reader takes snapshots of the
    /// published prefix, as the pause and the sweep do: every address the
    /// reader reads below a length it loaded is the one written there.
    #[test]
    fn a_reader_sees_every_published_address() {
        loom::model(|| {
            let chunk = Arc::new(Chunk::new());
            let owner = {
                let chunk = chunk.clone();
                loom::thread::spawn(move || {
                    for i in 0..CHUNK_SLOTS {
                        // This thread is the owner; CHUNK_SLOTS pushes
                        // fill it.
                        // SAFETY: as just said.
                        unsafe { chunk.push(0x1000 + i) };
                    }
                })
            };
            // Snapshots until the chunk is full, each from where the last
            // one ended.
            loop {
                let (from, to) = (chunk.swept(), chunk.published());
                for (k, addr) in chunk.addresses(from, to).enumerate() {
                    assert_eq!(addr, 0x1000 + from + k, "slot {} read unwritten", from + k);
                }
                chunk.set_swept(to);
                if to == CHUNK_SLOTS {
                    break;
                }
                loom::thread::yield_now();
            }
            owner.join().unwrap();
            assert!(chunk.is_full());
        });
    }
}
