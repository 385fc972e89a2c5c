// `Rootable` is a safe trait, and rustc accepts impls for two types that
// subtyping relates (`for<'x> fn(&'x ())` is a subtype of
// `fn(&'static ())`), each with its own `Root`. Were `Root` and
// `GlobalRoot` covariant in their type, a root made under one could be read
// under the other: here an integer handed back as a `Gc<String>`.
#![allow(coherence_leak_check)]
use loam_runtime::{Gc, GlobalRoot, Root, Rootable, Runtime};

struct W<T: ?Sized>(std::marker::PhantomData<T>);
impl<'a> Rootable<'a> for W<for<'x> fn(&'x ())> {
    type Root = usize;
}
impl<'a> Rootable<'a> for W<fn(&'static ())> {
    type Root = Gc<'a, String>;
}

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    let r: Root<W<for<'x> fn(&'x ())>> = m.mutate(|mc| mc.root(mc.alloc(0x4141_4141_usize)));
    let r: Root<W<fn(&'static ())>> = r;
    m.mutate(|mc| println!("{}", **r.get(mc)));
    let g: GlobalRoot<W<for<'x> fn(&'x ())>> =
        m.mutate(|mc| mc.global_root(mc.alloc(0x4141_4141_usize)));
    let g: GlobalRoot<W<fn(&'static ())>> = g;
    m.mutate(|mc| println!("{}", **g.get(mc)));
}
