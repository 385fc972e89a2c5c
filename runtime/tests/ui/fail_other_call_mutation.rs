// A scoped thread of a `mutate` call, attached to the same runtime, cannot
// write the call's objects through its own `Mutation` either: each call has
// its own brand.
use loam_runtime::{Gc, GcCell, Runtime, Trace};

#[derive(Trace)]
struct Obj<'gc> {
    item: GcCell<'gc, Option<Gc<'gc, u32>>>,
}

fn main() {
    let a = Runtime::new();
    let mut ma = a.attach();
    ma.mutate(|mc| {
        let obj = mc.alloc(Obj { item: GcCell::new(Some(mc.alloc(1))) });
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut m2 = a.attach();
                m2.mutate(|mc2| obj.item.set(mc2, None));
            });
        });
    });
}
