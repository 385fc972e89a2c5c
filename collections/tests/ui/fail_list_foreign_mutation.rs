// A list of runtime A cannot be changed through runtime B's `Mutation`,
// from a scoped thread of A's call that attached to B (the example in
// `GcList`'s docs): B's barrier would record the push for B's collector,
// and A's would miss what it stored. The list carries A's brand, B's
// `Mutation` another.
use loam_collections::GcList;
use loam_runtime::Runtime;

fn main() {
    let (a, b) = (Runtime::new(), Runtime::new());
    let mut ma = a.attach();
    ma.mutate(|mc| {
        let list = GcList::new(mc);
        std::thread::scope(|s| {
            s.spawn(|| b.attach().mutate(|mcb| list.push(mcb, 1_u64)));
        });
    });
}
