// An unrooted `Gc` cannot reach another thread: `thread::spawn` needs
// `'static`, and a `Gc` carries its call's brand.
use loam_runtime::Runtime;

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let g = mc.alloc(1_u32);
        std::thread::spawn(move || println!("{}", *g));
    });
}
