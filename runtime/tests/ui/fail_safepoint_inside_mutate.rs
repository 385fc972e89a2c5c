// Safepoints take `&mut Mutator`, which `mutate` holds for the whole call:
// no collection can happen while an unrooted `Gc` is in scope.
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let g = mc.alloc(1_u32);
        m.collect();
        println!("{}", *g);
    });
}
