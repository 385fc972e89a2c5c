// A collection lives across calls in a `Root` (or in a rooted object), and
// collections nest: a dictionary of lists keyed by strings. Where the
// elements carry no brand, `Root::of` infers the root's type.
use loam_collections::{GcDictionary, GcList, GcString, GcStringBuilder};
use loam_runtime::{Gc, Root, Rootable, Runtime};

type Index = Rootable!['gc => GcDictionary<'gc, GcString<'gc>, GcList<'gc, u64>>];

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    let root: Root<Index> = m.mutate(|mc| mc.root(mc.alloc(GcDictionary::new(mc))));
    m.mutate(|mc| {
        let d = *root.get(mc);
        let l = GcList::from_slice(mc, &[1, 2, 3]);
        d.insert(mc, GcString::new(mc, "small"), l);
    });
    m.collect();
    let sum: u64 = m.mutate(|mc| {
        let d: GcDictionary<GcString, GcList<u64>> = *root.get(mc);
        let l: GcList<u64> = d.get("small").unwrap();
        let _: Gc<GcDictionary<GcString, GcList<u64>>> = mc.alloc(d);
        l.iter().sum()
    });
    assert_eq!(sum, 6);

    let counts = m.mutate(|mc| Root::of(mc, mc.alloc(GcList::from_slice(mc, &[4_u64, 5]))));
    let table = m.mutate(|mc| Root::of(mc, mc.alloc(GcDictionary::<u64, u64>::new(mc))));
    let text = m.mutate(|mc| Root::of(mc, mc.alloc(GcStringBuilder::new(mc))));
    m.collect();
    m.mutate(|mc| {
        table.get(mc).insert(mc, 1, counts.get(mc).iter().sum());
        text.get(mc).push_str(mc, "nine");
    });
    m.collect();
    m.mutate(|mc| {
        assert_eq!(table.get(mc).get(&1), Some(9));
        assert_eq!(text.get(mc).to_gc_string(mc), "nine");
    });
}
