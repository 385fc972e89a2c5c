// A barrier cell of runtime A cannot be written through runtime B's
// `Mutation`, not even from a scoped thread of A's `mutate` call that
// attached to B: B's barrier would serve B's marking, generations and
// remembered set, and A's collector would miss the write. The cell carries
// A's brand, B's `Mutation` another.
use loam_runtime::{Gc, GcCell, Runtime, Trace};

#[derive(Trace)]
struct Obj<'gc> {
    item: GcCell<'gc, Option<Gc<'gc, u32>>>,
}

fn main() {
    let (a, b) = (Runtime::new(), Runtime::new());
    let mut ma = a.attach();
    ma.mutate(|mc| {
        let obj = mc.alloc(Obj { item: GcCell::new(Some(mc.alloc(1))) });
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut mb = b.attach();
                mb.mutate(|mcb| drop(obj.item.replace(mcb, None)));
            });
        });
    });
}
