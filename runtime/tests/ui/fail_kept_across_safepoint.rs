// A `Gc` cannot outlive its `mutate` call, so it cannot be alive at a
// safepoint (a collection between calls would free it).
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    let mut kept = None;
    m.mutate(|mc| kept = Some(mc.alloc(1_u32)));
    m.collect();
    println!("{:?}", kept);
}
