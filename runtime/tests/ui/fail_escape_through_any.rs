// A `Gc` cannot leave its call as a `Box<dyn Any>` (to be downcast back
// later): `Any` is only for `'static` types, and a `Gc` carries its call's
// brand.
use loam_runtime::Runtime;
use std::any::Any;

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    let _kept: Box<dyn Any> = m.mutate(|mc| {
        let g = mc.alloc(1_u32);
        Box::new(g) as Box<dyn Any>
    });
}
