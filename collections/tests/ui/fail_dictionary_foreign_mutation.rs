// A dictionary of runtime A cannot be changed through runtime B's
// `Mutation`, not even from a scoped thread of A's call that attached to
// B: B's barrier would record the write for B's collector, and A's would
// miss it. The dictionary carries A's brand, B's `Mutation` another.
use loam_collections::GcDictionary;
use loam_runtime::Runtime;

fn main() {
    let (a, b) = (Runtime::new(), Runtime::new());
    let mut ma = a.attach();
    ma.mutate(|mc| {
        let d = GcDictionary::<u64, u64>::new(mc);
        std::thread::scope(|s| {
            s.spawn(|| b.attach().mutate(|mcb| d.insert(mcb, 1, 2)));
        });
    });
}
