// A `Mutation` allocates from its own thread's heap: it cannot be shared
// with a scoped thread.
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    m.mutate(|mc| {
        std::thread::scope(|s| {
            s.spawn(|| mc.alloc(1_u32));
        });
    });
}
