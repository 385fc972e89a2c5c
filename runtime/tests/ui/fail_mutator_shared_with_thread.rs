// Nor can a `Mutator` be shared with another thread by reference.
use loam_runtime::{Mutator, Runtime};

fn main() {
    let rt = Runtime::new();
    let m = rt.attach();
    let shared: &Mutator = &m;
    std::thread::scope(|s| {
        s.spawn(move || {
            std::hint::black_box(shared);
        });
    });
}
