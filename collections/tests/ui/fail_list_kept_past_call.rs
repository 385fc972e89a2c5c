// A list is a `Gc` like any other: it cannot outlive the `mutate` call
// that branded it unrooted (a collection may run between calls and free
// it).
use loam_collections::GcList;
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    let mut kept = None;
    m.mutate(|mc| kept = Some(GcList::<u64>::new(mc)));
    let _ = kept;
}
