// Runtime B's call cannot allocate an object holding runtime A's pointer:
// B's collector would trace A's object, and A's, knowing nothing of B's
// object, could free what it points to. `alloc` asks `T: 'gc`, and A's
// brand does not outlive B's call.
use loam_runtime::{Gc, Runtime, Trace};

#[derive(Trace)]
struct Holder<'gc> {
    x: Gc<'gc, u32>,
}

fn main() {
    let (a, b) = (Runtime::new(), Runtime::new());
    let mut ma = a.attach();
    ma.mutate(|mc| {
        let o: Gc<'_, u32> = mc.alloc(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut mb = b.attach();
                mb.mutate(|mcb| {
                    mcb.alloc(Holder { x: o });
                });
            });
        });
    });
}
