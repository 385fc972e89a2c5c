// A `Gc` cannot leave its call as a panic payload (caught outside the
// call): a payload is `'static`, and a `Gc` carries its call's brand.
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    let _caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.mutate(|mc| {
            let g = mc.alloc(1_u32);
            std::panic::panic_any(g);
        })
    }));
}
