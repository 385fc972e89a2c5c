// Runtime B's call cannot root runtime A's pointer: B's root table would
// keep an object of a heap B's collector does not know.
use loam_runtime::{Gc, Root, Rootable, Runtime};

fn main() {
    let (a, b) = (Runtime::new(), Runtime::new());
    let mut ma = a.attach();
    ma.mutate(|mc| {
        let o: Gc<'_, u32> = mc.alloc(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut mb = b.attach();
                mb.mutate(|mcb| {
                    let _r: Root<Rootable![u32]> = mcb.root(o);
                });
            });
        });
    });
}
