//! The object space over any `GlobalAlloc`: the seeds' experiment, one
//! collector over several memory managers. Mutators allocate every object
//! through the allocator; the GC threads' sweep frees the dead ones
//! through it, on their own threads (cross-thread frees: the pattern that
//! decides whether a memory manager scales under a collector).
//!
//! # Finding objects and their marks without side bitmaps
//! Each object is preceded by a 16-byte prefix (more if its alignment is
//! larger): its allocation size word (size, and log2 of the alignment in
//! the top six bits, which is what `dealloc` needs), then its *mark word*,
//! the number of the full cycle that last marked it. The space's `epoch`
//! is that number for the cycle under way; a full cycle's pause bumps it,
//! which unmarks every object at once (no walk), and minor cycles keep it,
//! so survivors stay marked (the sticky marks of `lib.rs`). Objects start
//! at mark 0, white; epochs start at 1.
//!
//! Every object is registered in a *chunk*, an array of addresses filled
//! by one mutator (`Local`) with a published length: the mutator writes
//! the slot, then stores the length with release ordering. Chunks are
//! listed in `young` when started. The pause's snapshot takes the list and
//! each chunk's length: with every mutator outside `mutate`, those
//! prefixes hold complete objects, and what is allocated after (the sweep
//! runs beside the mutators) lands past them, out of this cycle's reach,
//! as objects allocated after the stop are left out of the page space's
//! sealed copy of the allocated bits. The sweep frees the unmarked objects
//! of the snapshot's ranges and moves the marked ones to `old`, compact arrays of survivors; a
//! chunk goes back to `young` unless it is full or its mutator is gone,
//! with `swept` remembering where the next sweep starts. Minor cycles
//! sweep `young` alone (old objects are marked until a full cycle); full
//! cycles sweep `old` too.
//!
//! # Ownership
//! Only the collector (under the process-wide cycle lock) takes and puts
//! back the lists; a chunk's slots below its published length are written
//! once, by its mutator, before that length, and never again; `swept` is
//! the collector's. An object is freed by the sweep that found it
//! unmarked, or by the finalizer that sweep gave it to (objects with drop
//! glue: their destructors run there, as in the page space), and by no
//! one else: once swept it is in no list. In verify mode freed objects are
//! poisoned and kept a cycle in `quarantine`, so that the next mark
//! reaching one is caught, as the page space's poison is.
//!
//! # Cost per object
//! 16 bytes of prefix and 8 of registry, plus the allocator's own header
//! and rounding; marking writes the prefix (a cache line of the object,
//! where the page space writes a bitmap word); sweeping reads every
//! registered object's prefix and header (the page space reads bitmaps,
//! and headers only for drop glue).

use crate::finalize::PageWork;
use crate::registry::{Chunk, CHUNK_SLOTS};
use crate::gc::{header_of, poison};
use crate::sweep::Swept;
use loam_threadpool::ThreadPool;
use parking_lot::Mutex;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Old survivors a sweep thread claims at a time.
const OLD_CLAIM: usize = 4096;

/// Bits of the size word that hold the size; the rest hold log2(align).
const SIZE_BITS: u32 = 58;

/// A mutator's part of the space: the chunk it registers objects in.
#[derive(Default)]
pub(crate) struct Local {
    chunk: RefCell<Option<Arc<Chunk>>>,
}

/// What a pause took for the sweep.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// Chunks with the range `from..to` to sweep.
    young: Vec<(Arc<Chunk>, usize, usize)>,
    /// Old survivors (full cycles only).
    old: Vec<Box<[usize]>>,
    /// Verify mode: the objects poisoned before this pause, which its
    /// mark has passed by the time the sweep frees them.
    quarantined: Vec<usize>,
}

impl Snapshot {
    /// Every object in the snapshot, for verify mode.
    pub(crate) fn addresses(&self) -> impl Iterator<Item = usize> + '_ {
        let young = self
            .young
            .iter()
            .flat_map(|(c, from, to)| c.addresses(*from, *to));
        young.chain(self.old.iter().flat_map(|o| o.iter().copied()))
    }
}

/// The `GlobalAlloc` object space (module docs).
pub(crate) struct AllocSpace {
    alloc: Box<dyn GlobalAlloc + Send + Sync>,
    name: &'static str,
    /// The mark of the cycle under way (module docs). Written in pauses
    /// only; read by markers and barriers, which the handshake orders
    /// after the write.
    epoch: AtomicU64,
    young: Mutex<Vec<Arc<Chunk>>>,
    old: Mutex<Vec<Box<[usize]>>>,
    /// Verify mode: poisoned dead objects, freed by the next sweep.
    quarantine: Mutex<Vec<usize>>,
}

/// The prefix before an object of alignment `align`.
#[inline]
fn prefix(align: usize) -> usize {
    align.max(16)
}

impl AllocSpace {
    pub(crate) fn new<A: GlobalAlloc + Send + Sync + 'static>(alloc: A) -> AllocSpace {
        AllocSpace {
            alloc: Box::new(alloc),
            name: std::any::type_name::<A>(),
            epoch: AtomicU64::new(1),
            young: Mutex::new(Vec::new()),
            old: Mutex::new(Vec::new()),
            quarantine: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// What an object of `bytes` bytes aligned to `align` is charged: its
    /// allocation, prefix included.
    #[inline]
    pub(crate) fn charge(bytes: usize, align: usize) -> usize {
        prefix(align) + bytes
    }

    /// Allocates an object of `bytes` bytes aligned to `align` for the
    /// mutator whose part is `local`, and registers it; null when the
    /// allocator has no memory. The caller writes the object before its
    /// `mutate` call returns.
    pub(crate) fn alloc(&self, local: &Local, bytes: usize, align: usize) -> *mut u8 {
        let pre = prefix(align);
        let Ok(layout) = Layout::from_size_align(pre + bytes, align.max(8)) else {
            return std::ptr::null_mut();
        };
        // The size word keeps the alignment in its top bits.
        if layout.size() >= 1 << SIZE_BITS {
            return std::ptr::null_mut();
        }
        // SAFETY: a non-zero size (the prefix).
        let base = unsafe { self.alloc.alloc(layout) };
        if base.is_null() {
            return base;
        }
        if (base as usize + layout.size()) >> crate::mark::CHUNK_SHIFT != 0 {
            // Allocated just above with `layout`, and handed to
            // nobody.
            // SAFETY: as just said.
            unsafe { self.alloc.dealloc(base, layout) };
            address_out_of_range(base as usize);
            return std::ptr::null_mut();
        }
        // SAFETY: `base` has `pre + bytes` bytes, aligned to `align >= 8`
        // (so both prefix words are aligned: `pre` is a multiple of 8).
        let addr = unsafe {
            let addr = base.add(pre);
            let word = layout.size() as u64 | u64::from(layout.align().trailing_zeros()) << SIZE_BITS;
            addr.sub(16).cast::<u64>().write(word);
            addr.sub(8).cast::<AtomicU64>().write(AtomicU64::new(0));
            addr
        };
        self.register(local, addr as usize);
        addr
    }

    fn register(&self, local: &Local, addr: usize) {
        let mut current = local.chunk.borrow_mut();
        let full = current.as_ref().map_or(true, |c| c.is_full());
        if full {
            let chunk = Arc::new(Chunk::new());
            self.young.lock().push(chunk.clone());
            *current = Some(chunk);
        }
        // The chunk in `local` is this thread's own (`Local` is the
        // mutator's, never shared), with room (just checked).
        // SAFETY: as just said.
        unsafe { current.as_ref().expect("a chunk with room").push(addr) };
    }

    /// The mark word of the object at `addr`.
    ///
    /// # Safety
    /// `addr` is an allocated object of this space.
    #[inline]
    unsafe fn mark_word<'a>(addr: usize) -> &'a AtomicU64 {
        // SAFETY: the prefix's second word (caller), written at allocation.
        unsafe { &*((addr - 8) as *const AtomicU64) }
    }

    /// Marks the object at `addr`; true if this call did.
    ///
    /// # Safety
    /// `addr` is an allocated object of this space.
    #[inline]
    pub(crate) unsafe fn mark(&self, addr: usize) -> bool {
        let epoch = self.epoch.load(Ordering::Relaxed);
        // SAFETY: as the caller's.
        let word = unsafe { Self::mark_word(addr) };
        word.load(Ordering::Relaxed) != epoch && word.swap(epoch, Ordering::AcqRel) != epoch
    }

    /// Whether the object at `addr` is marked.
    ///
    /// # Safety
    /// As [`mark`](Self::mark).
    #[inline]
    pub(crate) unsafe fn is_marked(&self, addr: usize) -> bool {
        // SAFETY: as the caller's.
        unsafe { Self::mark_word(addr) }.load(Ordering::Acquire) == self.epoch.load(Ordering::Relaxed)
    }

    /// The size word of the object at `addr`: (allocation size, align).
    ///
    /// # Safety
    /// As [`mark`](Self::mark).
    unsafe fn layout_of(addr: usize) -> Layout {
        // SAFETY: the prefix's first word (caller).
        let word = unsafe { *((addr - 16) as *const u64) };
        let size = (word & ((1 << SIZE_BITS) - 1)) as usize;
        let align = 1_usize << (word >> SIZE_BITS);
        // SAFETY: the layout the object was allocated with.
        unsafe { Layout::from_size_align_unchecked(size, align) }
    }

    /// Bytes the object at `addr` may use from its start: its allocation
    /// less the prefix before it (`Mutation::try_grow_in_place`).
    ///
    /// # Safety
    /// As [`mark`](Self::mark).
    pub(crate) unsafe fn usable(addr: usize) -> usize {
        // SAFETY: as the caller's.
        let layout = unsafe { Self::layout_of(addr) };
        layout.size() - prefix(layout.align())
    }

    /// Frees the dead object at `addr` through the allocator, or in verify
    /// mode keeps it, poisoned by the caller, for a cycle.
    ///
    /// # Safety
    /// The caller owns the dead object (it was swept unmarked, and its
    /// destructor has run); it is in no registry.
    pub(crate) unsafe fn free(&self, addr: usize, verify: bool) {
        if verify {
            self.quarantine.lock().push(addr);
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { self.dealloc(addr) }
    }

    /// # Safety
    /// As [`free`](Self::free).
    unsafe fn dealloc(&self, addr: usize) {
        // SAFETY: the object's allocation, with its layout (caller).
        unsafe {
            let layout = Self::layout_of(addr);
            let base = (addr - prefix(layout.align())) as *mut u8;
            self.alloc.dealloc(base, layout);
        }
    }

    /// In the pause (world stopped, under the cycle lock): takes what this
    /// cycle sweeps. A full cycle unmarks every object first.
    pub(crate) fn snapshot(&self, full: bool) -> Snapshot {
        if full {
            self.epoch.fetch_add(1, Ordering::Relaxed);
        }
        let young = std::mem::take(&mut *self.young.lock())
            .into_iter()
            .map(|c| {
                let to = c.published();
                let from = c.swept();
                (c, from, to)
            })
            .collect();
        let old = if full {
            std::mem::take(&mut *self.old.lock())
        } else {
            Vec::new()
        };
        let quarantined = std::mem::take(&mut *self.quarantine.lock());
        Snapshot {
            young,
            old,
            quarantined,
        }
    }

    /// Puts a snapshot back unswept (a cycle whose marks cannot be trusted
    /// frees nothing).
    pub(crate) fn restore(&self, snap: Snapshot) {
        self.young.lock().extend(snap.young.into_iter().map(|(c, _, _)| c));
        self.old.lock().extend(snap.old);
        self.quarantine.lock().extend(snap.quarantined);
    }

    /// Sweeps `snap` on the threads of `pool`: frees the unmarked objects
    /// (those with drop glue go to the finalizer, returned), keeps the
    /// marked ones as old. Returns what it freed.
    ///
    /// # Safety
    /// `snap` is this cycle's, its marks complete; under the cycle lock.
    pub(crate) unsafe fn sweep(
        &self,
        pool: &ThreadPool,
        snap: Snapshot,
        id: u16,
        verify: bool,
    ) -> (Swept, Vec<PageWork>) {
        // The objects poisoned before this cycle's pause: its mark has
        // passed them (those poisoned since wait for the next).
        for &addr in &snap.quarantined {
            // SAFETY: dead, poisoned, in no registry (`free`).
            unsafe { self.dealloc(addr) };
        }
        let units: Vec<(&Chunk, usize, usize)> = snap
            .young
            .iter()
            .map(|(c, from, to)| (&**c, *from, *to))
            .collect();
        let old: Vec<&[usize]> = snap.old.iter().flat_map(|o| o.chunks(OLD_CLAIM)).collect();
        let next = AtomicUsize::new(0);
        let total = units.len() + old.len();
        let results = pool.broadcast(|_| {
            let mut out = Swept::default();
            let mut survivors = Vec::new();
            let mut dead_with_drop = Vec::new();
            let mut visit = |addr: usize| {
                // SAFETY: a snapshot object, allocated: only this sweep
                // frees it.
                if unsafe { self.is_marked(addr) } {
                    survivors.push(addr);
                    return;
                }
                // SAFETY: as above; dead and ours from here.
                let (desc, _) = unsafe { header_of(addr) };
                // SAFETY: as above.
                let layout = unsafe { Self::layout_of(addr) };
                let size = layout.size();
                let bytes = size - prefix(layout.align());
                out.bytes += size;
                out.objects += 1;
                if desc.drop.is_some() {
                    dead_with_drop.push(((addr, Some(desc), bytes), size));
                } else {
                    if verify {
                        // SAFETY: we own the dead object's `bytes` bytes.
                        unsafe { poison(addr, bytes, id) };
                    }
                    // Dead, no destructor to run, and in no registry once
                    // this snapshot is done: its slot stays below `swept`
                    // until `set_swept` after the broadcast, and a panic
                    // in between (which would let `AllocSpace::drop` free
                    // it again) stops the process (`collector::or_stop`).
                    // SAFETY: as just said.
                    unsafe { self.free(addr, verify) };
                }
            };
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                if let Some(&(chunk, from, to)) = units.get(i) {
                    chunk.addresses(from, to).for_each(&mut visit);
                } else {
                    old[i - units.len()].iter().for_each(|&a| visit(a));
                }
            }
            // This thread is about to idle: a space over loam's own heap
            // (`LoamAlloc`) batched its frees for their owners, and a batch
            // not full yet would wait for this thread's next sweep.
            loam_heap::flush();
            // In pieces: the finalizer frees, and a brake sees it move, a
            // piece at a time. Each counts the objects' whole charge.
            let work: Vec<PageWork> = dead_with_drop
                .chunks(crate::finalize::OBJECTS_PER_WORK)
                .map(|piece| PageWork {
                    dead: piece.iter().map(|&(d, _)| d).collect(),
                    run: None,
                    bytes: piece.iter().map(|&(_, size)| size).sum(),
                })
                .collect();
            (out, survivors, work)
        });
        let mut swept = Swept::default();
        let mut finalizing = Vec::new();
        let mut kept = Vec::new();
        for (out, survivors, work) in results {
            swept.bytes += out.bytes;
            swept.objects += out.objects;
            if !survivors.is_empty() {
                kept.push(survivors.into_boxed_slice());
            }
            finalizing.extend(work);
        }
        self.old.lock().append(&mut kept);
        // Chunks back in `young`, unless done: full, or left by their
        // mutator (only the snapshot holds it, so its length is final).
        let mut back = Vec::new();
        for (mut chunk, _, to) in snap.young {
            chunk.set_swept(to);
            // `get_mut` checks that this is the last handle with acquire
            // ordering (`strong_count` is relaxed): the mutator's drop of
            // its handle, and every length it published before, happened
            // before the load below.
            let left_by_its_mutator = Arc::get_mut(&mut chunk).is_some() && to == chunk.published();
            let done = to == CHUNK_SLOTS || left_by_its_mutator;
            if !done {
                back.push(chunk);
            }
        }
        self.young.lock().append(&mut back);
        (swept, finalizing)
    }
}

impl Drop for AllocSpace {
    /// The runtime is gone, and its last cycle freed every object; what a
    /// cycle whose mark failed left registered is freed here (without
    /// destructors), and the quarantine.
    fn drop(&mut self) {
        let mut left: Vec<usize> = std::mem::take(self.quarantine.get_mut());
        for chunk in self.young.get_mut().drain(..) {
            left.extend(chunk.addresses(chunk.swept(), chunk.published()));
        }
        for old in self.old.get_mut().drain(..) {
            left.extend_from_slice(&old);
        }
        for addr in left {
            // SAFETY: every listed object is allocated and unreachable (no
            // runtime, no roots), listed once.
            unsafe { self.dealloc(addr) };
        }
    }
}

impl std::fmt::Debug for AllocSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocSpace").field("alloc", &self.name).finish_non_exhaustive()
    }
}

/// Memory above the 48 bits of address the mark's queue entries keep
/// (`mark.rs`, "Long arrays"): refused, so the allocation fails as out of
/// memory (an `Err` from the `try_` calls, the caller's credit given
/// back) rather than being traced at the wrong address; said once on
/// stderr.
#[cold]
#[inline(never)]
fn address_out_of_range(addr: usize) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        use std::io::Write;
        // Not `eprintln!`, which panics when stderr is gone.
        let _ = writeln!(
            std::io::stderr(),
            "loam: the memory manager returned {addr:#x}, above the 48-bit range the collector's \
             mark queues encode; such allocations fail as out of memory"
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::{Gc, GcCell, Runtime, Trace};
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DROPS: AtomicUsize = AtomicUsize::new(0);

    struct Counted;

    impl Drop for Counted {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[derive(Trace)]
    struct Node<'gc> {
        value: u64,
        next: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
        #[trace(skip)]
        _drop: Counted,
    }

    /// Small enough for Miri (`cargo +nightly miri test -p loam-runtime
    /// --lib`): objects in the system allocator, a minor and a full cycle,
    /// arrays, the finalizer path, and every object freed exactly once.
    #[test]
    fn objects_in_the_system_allocator_live_and_die_once() {
        let rt = Runtime::builder()
            .global_alloc(std::alloc::System)
            .gc_threads(1)
            .ignore_env()
            .verify(true)
            .build();
        let mut m = rt.attach();
        let kept = m.mutate(|mc| {
            let mut head = None;
            for value in 0..20 {
                head = Some(mc.alloc(Node {
                    value,
                    next: GcCell::new(head),
                    _drop: Counted,
                }));
            }
            let _garbage = mc.alloc(Node {
                value: 99,
                next: GcCell::new(None),
                _drop: Counted,
            });
            let _array = mc.alloc_slice(&[1_u64, 2, 3]);
            crate::Root::of(mc, head.unwrap())
        });
        m.collect();
        rt.wait_for_drops();
        assert_eq!(DROPS.load(Ordering::Relaxed), 1, "only the garbage node died");
        let sum = m.mutate(|mc| {
            let mut sum = 0;
            let mut at = Some(kept.get(mc));
            while let Some(n) = at {
                sum += n.value;
                at = n.next.get();
            }
            sum
        });
        assert_eq!(sum, 190);
        drop(kept);
        m.collect();
        rt.wait_for_drops();
        assert_eq!(DROPS.load(Ordering::Relaxed), 21);
    }
}
