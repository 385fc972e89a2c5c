// A `Mutator` is its thread's: the heap it allocates from, and the calls
// it tracks, are that thread's. Another thread attaches its own.
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let m = rt.attach();
    std::thread::spawn(move || drop(m));
}
