// A `Gc` cannot outlive its call through a thread local: the thread
// local's type is `'static`, and a `Gc` carries its call's brand.
use loam_runtime::{Gc, Runtime};
use std::cell::Cell;

thread_local! {
    static KEPT: Cell<Option<Gc<'static, u32>>> = const { Cell::new(None) };
}

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let g = mc.alloc(1_u32);
        KEPT.with(|k| k.set(Some(g)));
    });
}
