// Brands are invariant: a `Gc` of one `mutate` call (or runtime) cannot be
// stored in an object of another.
use loam_runtime::{Gc, GcCell, Runtime, Trace};

#[derive(Trace)]
struct Holder<'gc> {
    held: GcCell<'gc, Option<Gc<'gc, u32>>>,
}

fn main() {
    let (a, b) = (Runtime::new(), Runtime::new());
    let (mut ma, mut mb) = (a.attach(), b.attach());
    ma.mutate(|mca| {
        let x = mca.alloc(1_u32);
        mb.mutate(|mcb| {
            let h = mcb.alloc(Holder { held: GcCell::new(None) });
            h.held.set(mcb, Some(x));
        });
    });
}
