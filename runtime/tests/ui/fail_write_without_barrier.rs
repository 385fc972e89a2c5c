// An object is only ever reached through `&T`: a managed pointer field
// cannot be assigned after allocation without a barrier cell.
use loam_runtime::{Gc, Runtime, Trace};

#[derive(Trace)]
struct Node<'gc> {
    next: Option<Gc<'gc, Node<'gc>>>,
}

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let a = mc.alloc(Node { next: None });
        let b = mc.alloc(Node { next: None });
        a.next = Some(b);
    });
}
