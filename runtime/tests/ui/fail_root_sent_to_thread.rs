// A `Root` belongs to its thread's mutator; `GlobalRoot` is the one to share.
use loam_runtime::{Root, Rootable, Runtime};

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    let r: Root<Rootable!['gc => u32]> = m.mutate(|mc| mc.root(mc.alloc(1)));
    std::thread::spawn(move || drop(r));
}
