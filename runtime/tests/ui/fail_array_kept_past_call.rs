// A managed array or string is a `Gc` like any other: it cannot outlive the
// `mutate` call that branded it (a collection may run between calls).
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    let mut kept = None;
    m.mutate(|mc| kept = Some(mc.alloc_str("gone by the next safepoint")));
    let _ = kept;
}
