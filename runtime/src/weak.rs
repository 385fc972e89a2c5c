//! Weak references: [`GcWeak`], cleared by the collector when its target
//! dies.
//!
//! A weak reference is a pointer to a small managed *weak cell* holding the
//! target's address, which the cell does not trace. The runtime keeps a list
//! of live cells; after each mark, before any sweep can free a target, it
//! clears every cell whose target was not marked (and forgets the cells
//! that were not marked themselves): with the world still stopped, or, at
//! the end of a ragged mark, under the weak gate's write lock, which an
//! upgrade that shades holds for reading. Minor cycles look at the cells
//! made since the last cycle only ([`WeakCells`]): the others and their
//! targets are marked until a full cycle, this runtime's or, over loam's
//! pages, another's, which clears every page's marks (a minor cycle after
//! one looks at every cell).
//!
//! During a concurrent mark an upgrade shades its target: the target may be
//! unreachable from the mark's snapshot, and the pointer the upgrade hands
//! out could otherwise be stored where no marker looks.

use crate::gc::Gc;
use crate::mutator::Mutation;
use crate::trace::{Trace, Tracer};
use std::fmt;
use std::marker::PhantomData;
use crate::runtime::Shared;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The managed cell a [`GcWeak`] points to.
#[repr(C)]
pub(crate) struct WeakCell {
    pub(crate) target: AtomicUsize,
    /// The runtime the cell (and its target) belong to.
    shared: NonNull<Shared>,
}

// SAFETY: `shared` is only read, through `&Shared` (which is `Sync`), and
// only while the runtime is alive (see `GcWeak::upgrade`).
unsafe impl Send for WeakCell {}
// SAFETY: as above.
unsafe impl Sync for WeakCell {}

// SAFETY: the target is deliberately not traced: the collector clears it
// instead (module docs). No managed pointer is otherwise held (1, 3); no
// `Drop` (4).
unsafe impl Trace for WeakCell {
    const NEEDS_TRACE: bool = false;
    fn trace(&self, _: &mut Tracer) {}
}

/// A reference that does not keep its target alive:
/// [`upgrade`](GcWeak::upgrade) returns `None` once a collection found the
/// target unreachable.
///
/// # Examples
/// ```
/// use loam_runtime::{GcWeak, Root, Rootable, Runtime};
///
/// let rt = Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// let (weak, strong): (Root<Rootable!['gc => GcWeak<'gc, u32>]>, Root<Rootable!['gc => u32]>) =
///     m.mutate(|mc| {
///         let target = mc.alloc(7_u32);
///         (mc.root(mc.alloc(GcWeak::new(mc, target))), mc.root(target))
///     });
/// m.collect();
/// m.mutate(|mc| assert_eq!(weak.get(mc).upgrade().map(|g| *g), Some(7)));
/// drop(strong);
/// m.collect();
/// m.mutate(|mc| assert!(weak.get(mc).upgrade().is_none()));
/// ```
pub struct GcWeak<'gc, T> {
    cell: Gc<'gc, WeakCell>,
    _target: PhantomData<Gc<'gc, T>>,
}

impl<T> Clone for GcWeak<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for GcWeak<'_, T> {}

impl<'gc, T: Trace> GcWeak<'gc, T> {
    /// A weak reference to `target` (allocates its small cell).
    pub fn new(mc: &Mutation<'gc>, target: Gc<'gc, T>) -> Self {
        let cell = mc.alloc(WeakCell {
            target: AtomicUsize::new(target.addr()),
            shared: NonNull::from(mc.shared()),
        });
        if mc.mark_epoch() != 0 {
            // A ragged cycle's end checks every cell registered by then
            // (`Cycle::terminate_ragged`): one made during the mark is
            // marked, so that it is kept, and so is its target, which the
            // call holds and may hold from before the mark's start
            // (`barrier.rs`, "Ragged cycles").
            mc.shade_addr(cell.addr());
            mc.shade_addr(target.addr());
        }
        let weak = &mc.shared().weak;
        // The collector walks the list at a ragged mark's end: a hold.
        let walked = Some(&mc.shared().weak_walked);
        crate::mutator::take_counting(mc.shared(), walked, || weak.try_lock(), || weak.lock()).push(cell.addr());
        GcWeak {
            cell,
            _target: PhantomData,
        }
    }

    /// The target, if no collection has found it unreachable.
    pub fn upgrade(self) -> Option<Gc<'gc, T>> {
        // The cell is reachable only while a `mutate` call of its runtime
        // is under way: on this thread, or on a thread that waits for this
        // one (a scoped thread of the call, which may be inside a call of
        // another runtime as it upgrades); that call's mutator holds a
        // handle, which keeps `Shared` alive.
        // SAFETY: as just said.
        let shared = unsafe { self.cell.shared.as_ref() };
        // Before the target (both acquire): a mark that ended raggedly
        // cleared the cells before it lowered the flag, so a target read
        // after the flag is seen lowered is one the end let stand.
        let marking = shared.calls.marking();
        let mut addr = self.cell.target.load(Ordering::Acquire);
        if addr == 0 {
            return None;
        }
        if marking {
            // Under the gate, read again: a ragged cycle ends its mark
            // under the gate's write lock, after a last look for shaded
            // objects, and clears the weak cells with it
            // (`Cycle::terminate_ragged`). So this shade is seen by that
            // look, or the mark is over and the cell is read as it left
            // it: cleared, or its target marked.
            // (A wait for the gate, which the end holds while it walks the
            // weak cells, is a hold.)
            let gate = &shared.weak_gate;
            let _gate = crate::mutator::take_counting(shared, None, || gate.try_read(), || gate.read());
            if shared.calls.marking() {
                // SAFETY: a nonzero target is allocated (below); no sweep
                // runs during a mark.
                unsafe { crate::mark::shade(&shared.space, &shared.gray, addr) };
            } else {
                addr = self.cell.target.load(Ordering::Acquire);
                if addr == 0 {
                    return None;
                }
            }
        }
        // A nonzero target is live: the collector clears the cell before
        // the sweep frees the target, either with the world stopped or
        // before it lowers `marking` (read before the target, above); a
        // mark under way will keep it (shaded above); a mark that begins
        // after this call did cannot end before it returns (its start, or
        // its stop, waits for the call).
        // SAFETY: `addr` is that live target, a `T` of this runtime.
        Some(unsafe { Gc::from_addr(addr) })
    }
}

impl<T> fmt::Debug for GcWeak<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GcWeak")
    }
}

// SAFETY: traces the cell, not the target (module docs) (1); pure (2); the
// cell is managed, so tracing is needed (3); no `Drop` (4).
unsafe impl<T: Trace> Trace for GcWeak<'_, T> {
    fn trace(&self, tracer: &mut Tracer) {
        self.cell.trace(tracer)
    }
}

/// A runtime's live weak cells, in two lists: the *young* ones, registered
/// since the last cycle that processed them, and the *old* ones, which a
/// cycle found marked with their targets marked (or cleared). Marks stay
/// until a full cycle clears them (sticky marks), and minor cycles free
/// no marked object: an old cell and its target outlive every minor
/// cycle, which has nothing to clear or forget among them and processes
/// the young cells alone. (Every cycle walked every cell, with the world
/// stopped or under the weak gate, which upgrades and new cells wait for:
/// a program holding a million weak references paid for all of them in
/// every minor cycle.)
///
/// A full cycle of *any* runtime over loam's pages clears every page's
/// marks, this runtime's objects' included, which are then young again:
/// a minor cycle of this runtime may free them. So a minor cycle that
/// follows such a clear (the count of clears moved since this runtime
/// last processed its old cells) processes the old cells too. (The count
/// also counts full snapshots of `GlobalAlloc` spaces, for card takes,
/// which costs an extra pass over the old cells after one.)
#[derive(Default)]
pub(crate) struct WeakCells {
    young: Vec<usize>,
    old: Vec<usize>,
    /// The process's count of mark clears when the old cells were last
    /// processed (`cycle.rs`, `MARK_CLEARS`).
    clears_seen: u64,
}

impl WeakCells {
    /// Registers a new cell.
    pub(crate) fn push(&mut self, cell: usize) {
        self.young.push(cell);
    }

    /// The cells a mark beginning now processes when it ends (those
    /// registered later may be unmarked yet live: [`process`]).
    pub(crate) fn registered(&self) -> usize {
        self.young.len()
    }

    /// After a mark: processes the young cells registered before it
    /// began (the first `upto`), and the old ones too in a `full` cycle or
    /// after marks were cleared since they last were (`clears`, the
    /// process's count of mark clears now); the young ones it keeps are
    /// old from now on.
    pub(crate) fn process(&mut self, upto: usize, full: bool, clears: u64, is_marked: impl Fn(usize) -> bool) {
        if full || clears != self.clears_seen {
            process(&mut self.old, usize::MAX, &is_marked);
            self.clears_seen = clears;
        }
        let kept = process(&mut self.young, upto, &is_marked);
        self.old.extend(self.young.drain(..kept));
    }
}

/// After a mark (world stopped, or a ragged mark's end under the weak
/// gate): of the first `upto` cells, clears those
/// whose target is unmarked and forgets the unmarked ones; returns how many
/// of them it kept (they stay first, in order). `is_marked(addr)`
/// answers for this runtime's objects.
///
/// `upto` is the number of cells registered when the mark began: a cell
/// made during a concurrent mark, and its target, may be unmarked yet live
/// (objects allocated during a mark are white, and not swept by its
/// sweep). A cell made before holds a target allocated before it, and for
/// both, unmarked means unreachable since the mark began (an upgrade
/// during the mark shades the target). A ragged cycle takes every cell:
/// `GcWeak::new` shades a cell made during a mark, and its target.
fn process(cells: &mut Vec<usize>, upto: usize, is_marked: impl Fn(usize) -> bool) -> usize {
    let (mut i, mut kept) = (0, 0);
    cells.retain(|&cell| {
        i += 1;
        if i > upto {
            return true;
        }
        if !is_marked(cell) {
            return false;
        }
        kept += 1;
        // SAFETY: a marked weak cell is a live `GcBox<WeakCell>`; its
        // payload (`target` first: `repr(C)`) follows the one-word header.
        let target = unsafe { &*((cell + std::mem::size_of::<usize>()) as *const AtomicUsize) };
        let t = target.load(Ordering::Relaxed);
        if t != 0 && !is_marked(t) {
            target.store(0, Ordering::Release);
        }
        true
    });
    kept
}
