// Runtime B's call cannot make a weak reference to runtime A's object:
// B's collector would clear it by B's marks, which never reach A's heap.
use loam_runtime::{Gc, GcWeak, Runtime};

fn main() {
    let (a, b) = (Runtime::new(), Runtime::new());
    let mut ma = a.attach();
    ma.mutate(|mc| {
        let o: Gc<'_, u32> = mc.alloc(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut mb = b.attach();
                mb.mutate(|mcb| {
                    let _w = GcWeak::new(mcb, o);
                });
            });
        });
    });
}
