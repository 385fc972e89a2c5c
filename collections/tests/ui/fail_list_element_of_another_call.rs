// A list cannot take an element branded by another `mutate` call (here a
// second mutator's call inside the first): that call's unrooted objects
// may be freed once it ends, while the list lives on.
use loam_collections::{GcList, GcString};
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let (mut m1, mut m2) = (rt.attach(), rt.attach());
    m1.mutate(|mc1| {
        let list: GcList<GcString> = GcList::new(mc1);
        m2.mutate(|mc2| list.push(mc1, GcString::new(mc2, "other call")));
    });
}
