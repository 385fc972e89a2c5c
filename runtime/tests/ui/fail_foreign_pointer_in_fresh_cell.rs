// A cell made inside runtime B's call (on the stack, not in any object)
// cannot be given runtime A's pointers: B's barrier would mark A's young
// object, A's next minor cycle would take it for old and skip what it
// points to. The value's brand must outlive the cell's.
use loam_runtime::{Gc, GcCell, Runtime};

fn main() {
    let (a, b) = (Runtime::new(), Runtime::new());
    let mut ma = a.attach();
    ma.mutate(|mc| {
        let o: Gc<'_, u32> = mc.alloc(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut mb = b.attach();
                mb.mutate(|mcb| GcCell::new(None).set(mcb, Some(o)));
            });
        });
    });
}
