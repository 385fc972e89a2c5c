// A list's writer holds the list's lock and the call's `Mutation`: it
// cannot leave the call either (its pushes would run where no collector
// sees them).
use loam_collections::GcList;
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    let mut kept = None;
    m.mutate(|mc| {
        let list = GcList::<u64>::new(mc);
        kept = Some(list.writer(mc));
    });
    drop(kept);
}
