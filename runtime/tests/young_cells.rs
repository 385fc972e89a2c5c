//! Stores into a young object's cells skip the generational barrier
//! (`barrier.rs`, "A young object's cells"); a cell that is *not* in a
//! managed object must still take it, even where it lies in loam's pages.
//! Here loam is the global allocator, so a `Vec`'s buffer of cells inside
//! an old object's `GcLock` is a block of the same pages as the objects,
//! never marked: if the barrier took it for a young object, the values
//! stored into it would not be remembered, the next minor cycle would not
//! reach them, and verify mode would stop the process (or the sums below
//! would read freed nodes).

use loam_runtime::{Gc, GcCell, GcLock, Root, Rootable, Runtime, Trace};

#[global_allocator]
static ALLOC: loam_heap::LoamAlloc = loam_heap::LoamAlloc;

#[derive(Trace)]
struct Node<'gc> {
    value: u64,
    next: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
}

/// A cell after a word that reads as an object header of runtime 1 (the
/// id is a header's top 16 bits), so that a buffer of these passes the
/// barrier's header check and only the allocated bit tells it from an
/// object (this binary's one runtime takes id 1).
#[derive(Trace)]
struct Tagged<'gc> {
    tag: u64,
    cell: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
}

fn tagged<'gc>() -> Tagged<'gc> {
    Tagged {
        tag: 1 << 48,
        cell: GcCell::new(None),
    }
}

#[derive(Trace)]
struct Holder<'gc> {
    /// Cells in a `malloc`'d buffer (loam's, here), inside an old object.
    cells: GcLock<'gc, Vec<Tagged<'gc>>>,
    /// Cells in a `Box` (loam's too).
    boxed: Box<[Tagged<'gc>]>,
}

fn sum<'gc>(mut cur: Option<Gc<'gc, Node<'gc>>>) -> (u64, u64) {
    let (mut s, mut len) = (0, 0);
    while let Some(n) = cur {
        s += n.value;
        len += 1;
        cur = n.next.get();
    }
    (s, len)
}

#[test]
fn cells_outside_managed_objects_still_remember_what_they_store() {
    let rt = Runtime::builder()
        .gc_threads(2)
        .ignore_env()
        .verify(true)
        .min_heap(256 << 10)
        .build();
    let mut m = rt.attach();
    let holder: Root<Rootable!['gc => Holder<'gc>]> = m.mutate(|mc| {
        mc.root(mc.alloc(Holder {
            cells: GcLock::new((0..16).map(|_| tagged()).collect()),
            boxed: (0..16).map(|_| tagged()).collect(),
        }))
    });
    // Old: the holder, and the buffers are not objects at all.
    m.collect();
    let rounds = 20_000_u64;
    for i in 0..rounds {
        m.mutate(|mc| {
            let h = holder.get(mc);
            let node = |value, next| {
                mc.alloc(Node {
                    value,
                    next: GcCell::new(next),
                })
            };
            let k = (i % 16) as usize;
            // Through a shared read of the lock: the cell's own barrier,
            // with the cell in the Vec's buffer.
            h.cells.read()[k]
                .cell
                .set(mc, Some(node(i, Some(node(1, None)))));
            h.boxed[k].cell.set(mc, Some(node(i, None)));
            // Young garbage, to bring minor cycles on.
            for j in 0..16 {
                node(j, None);
            }
        });
    }
    assert!(rt.stats().minor_cycles >= 3, "{:?}", rt.stats());
    m.mutate(|mc| {
        let h = holder.get(mc);
        for k in 0..16 {
            let last = rounds - 16 + k as u64;
            assert_eq!(sum(h.cells.read()[k].cell.get()), (last + 1, 2), "cell {k}");
            assert_eq!(sum(h.boxed[k].cell.get()), (last, 1), "boxed cell {k}");
        }
    });
}
