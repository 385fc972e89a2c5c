//! `Root::of` and `GlobalRoot::of`: roots whose type the compiler infers
//! from the object's, for derived types (branded or not, generic over
//! `'static` parameters, enums) and the runtime's leaf types.

use loam_runtime::{Gc, GcCell, GlobalRoot, Root, Runtime, Trace};

#[derive(Trace)]
struct Node<'gc> {
    value: u32,
    next: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
}

#[derive(Trace)]
struct Plain {
    value: u64,
}

#[derive(Trace)]
struct Tagged<'gc, T: 'static> {
    tag: T,
    node: Gc<'gc, Node<'gc>>,
}

#[derive(Trace)]
enum Shape<'gc> {
    Leaf(u32),
    Pair(Gc<'gc, Shape<'gc>>, Gc<'gc, Shape<'gc>>),
}

fn depth(s: &Shape<'_>) -> u32 {
    match s {
        Shape::Leaf(_) => 1,
        Shape::Pair(a, b) => 1 + depth(a).max(depth(b)),
    }
}

#[test]
fn roots_of_inferred_types_survive_collections() {
    let rt = Runtime::builder()
        .gc_threads(1)
        .ignore_env()
        .verify(true)
        .build();
    let mut m = rt.attach();
    let (head, plain, tagged, shape, numbers, text) = m.mutate(|mc| {
        let tail = mc.alloc(Node {
            value: 2,
            next: GcCell::new(None),
        });
        let head = mc.alloc(Node {
            value: 1,
            next: GcCell::new(Some(tail)),
        });
        let leaf = mc.alloc(Shape::Leaf(1));
        let pair = mc.alloc(Shape::Pair(leaf, leaf));
        (
            Root::of(mc, head),
            Root::of(mc, mc.alloc(Plain { value: 9 })),
            GlobalRoot::of(
                mc,
                mc.alloc(Tagged {
                    tag: "t",
                    node: tail,
                }),
            ),
            Root::of(mc, mc.alloc(Shape::Pair(pair, leaf))),
            Root::of(mc, mc.alloc_slice(&[1_u64, 2, 3])),
            GlobalRoot::of(mc, mc.alloc_str("kept")),
        )
    });
    m.collect();
    m.mutate(|mc| {
        assert_eq!(head.get(mc).next.get().unwrap().value, 2);
        assert_eq!(plain.get(mc).value, 9);
        assert_eq!(tagged.get(mc).tag, "t");
        assert_eq!(tagged.get(mc).node.value, 2);
        assert_eq!(depth(&shape.get(mc)), 3);
        assert_eq!(&*numbers.get(mc), &[1, 2, 3]);
        assert_eq!(&*text.get(mc), "kept");
    });
}
