// A `Gc` cannot outlive its call through a static: its type is `'static`,
// and a `Gc` carries its call's brand.
use loam_runtime::{Gc, Runtime};
use std::sync::OnceLock;

static KEPT: OnceLock<Gc<'static, u32>> = OnceLock::new();

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let g = mc.alloc(1_u32);
        let _ = KEPT.set(g);
    });
}
