//! A managed collection written from scratch with loam-runtime's public API
//! alone: an ordered map from `u64` to managed strings, as an unbalanced
//! binary search tree.
//!
//! What it shows:
//! - `#[derive(Trace)]` on the node type, whose links change after
//!   allocation, so they are `GcCell`s, and every link store goes through
//!   the write barrier (`GcCell::set` with the call's `Mutation`);
//! - a handle type (`Tree`, one `Gc`) that is itself a `CellValue`, so
//!   trees can be stored in cells, lists, other trees;
//! - iteration without recursion (an explicit stack of `Gc`s, which live as
//!   long as the `mutate` call);
//! - rooting the tree across calls, with collections in between that free
//!   the nodes it let go of (counted with a destructor).
//!
//! Run: `cargo run --release --example custom_collection [-- KEYS]`.

use loam::runtime::{CellValue, Gc, GcCell, Mutation, Root, Rootable, Runtime, Trace, Tracer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Counts nodes freed by the collector.
struct Freed(Arc<AtomicUsize>);

impl Drop for Freed {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Trace)]
struct Node<'gc> {
    key: u64,
    value: GcCell<'gc, Gc<'gc, str>>,
    left: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
    right: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
    /// `'static`, so it needs no tracing.
    #[trace(skip)]
    _freed: Freed,
}

#[derive(Trace)]
struct TreeObj<'gc> {
    root: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
    len: GcCell<'gc, usize>,
    #[trace(skip)]
    freed: Arc<AtomicUsize>,
}

/// An ordered map in the managed heap: a handle, `Copy`, one word.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Tree<'gc>(Gc<'gc, TreeObj<'gc>>);

// SAFETY: a transparent newtype of `Gc`: one word, no padding.
unsafe impl CellValue for Tree<'_> {}

// SAFETY: reports the one managed pointer it holds; no `Drop`.
unsafe impl Trace for Tree<'_> {
    fn trace(&self, tracer: &mut Tracer) {
        self.0.trace(tracer)
    }
}

/// Where a key is, or would go: the cell that points (or would point) to
/// its node.
type Link<'gc> = &'gc GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>;

impl<'gc> Tree<'gc> {
    fn new(mc: &Mutation<'gc>, freed: Arc<AtomicUsize>) -> Self {
        Tree(mc.alloc(TreeObj {
            root: GcCell::new(None),
            len: GcCell::new(0),
            freed,
        }))
    }

    fn len(self) -> usize {
        self.0.len.get()
    }

    /// The link holding `key`'s node, or the empty link where it would go.
    fn find(self, key: u64) -> Link<'gc> {
        let mut link: Link<'gc> = &Gc::get(self.0).root;
        while let Some(node) = link.get() {
            let node = Gc::get(node);
            link = match key.cmp(&node.key) {
                std::cmp::Ordering::Less => &node.left,
                std::cmp::Ordering::Greater => &node.right,
                std::cmp::Ordering::Equal => return link,
            };
        }
        link
    }

    fn get(self, key: u64) -> Option<&'gc str> {
        self.find(key)
            .get()
            .map(|n| Gc::get(Gc::get(n).value.get()))
    }

    /// Inserts or replaces; every store is a barrier cell's.
    fn insert(self, mc: &Mutation<'gc>, key: u64, value: &str) {
        let value = mc.alloc_str(value);
        let link = self.find(key);
        match link.get() {
            Some(node) => node.value.set(mc, value),
            None => {
                let node = mc.alloc(Node {
                    key,
                    value: GcCell::new(value),
                    left: GcCell::new(None),
                    right: GcCell::new(None),
                    _freed: Freed(self.0.freed.clone()),
                });
                link.set(mc, Some(node));
                self.0.len.set(mc, self.len() + 1);
            }
        }
    }

    /// Removes `key`: its node is unlinked and left to the collector.
    fn remove(self, mc: &Mutation<'gc>, key: u64) -> bool {
        let link = self.find(key);
        let Some(node) = link.get() else {
            return false;
        };
        let replacement = match (node.left.get(), node.right.get()) {
            (None, child) | (child, None) => child,
            (Some(_), Some(right)) => {
                // The smallest node of the right subtree takes its place.
                let mut min_link: Link<'gc> = &Gc::get(node).right;
                let mut min = right;
                while let Some(l) = min.left.get() {
                    min_link = &Gc::get(min).left;
                    min = l;
                }
                min_link.set(mc, min.right.get());
                min.left.set(mc, node.left.get());
                min.right.set(mc, node.right.get());
                Some(min)
            }
        };
        link.set(mc, replacement);
        self.0.len.set(mc, self.len() - 1);
        true
    }

    /// In-order iteration with an explicit stack: no recursion, so a
    /// degenerate tree of any depth iterates in constant native stack.
    fn iter(self) -> impl Iterator<Item = (u64, &'gc str)> {
        let mut stack: Vec<Gc<'gc, Node<'gc>>> = Vec::new();
        let mut cur = self.0.root.get();
        std::iter::from_fn(move || {
            while let Some(n) = cur {
                stack.push(n);
                cur = n.left.get();
            }
            let n = stack.pop()?;
            cur = n.right.get();
            Some((n.key, Gc::get(Gc::get(n).value.get())))
        })
    }
}

fn main() {
    // KEYS: whole batches of 1,000, at most 100 million (the keys are
    // drawn from 4 × KEYS).
    const USAGE: &str = "Usage: custom_collection [KEYS (a multiple of 1000, from 1000 to 100000000, default 200000)]";
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return;
    }
    let keys: u64 = match args.as_slice() {
        [] => 200_000,
        [a] => match a.parse::<u64>() {
            Ok(k) if (1000..=100_000_000).contains(&k) && k % 1000 == 0 => k,
            _ => {
                eprintln!("error: KEYS must be a multiple of 1000 from 1000 to 100000000, not `{a}`\n\n{USAGE}");
                std::process::exit(2)
            }
        },
        [_, extra, ..] => {
            eprintln!("error: unexpected argument `{extra}`\n\n{USAGE}");
            std::process::exit(2)
        }
    };
    // A small minimum heap, so that cycles (mostly minor) run between the
    // batches.
    let rt = Runtime::builder().min_heap(2 << 20).build();
    let mut m = rt.attach();
    let freed = Arc::new(AtomicUsize::new(0));
    // The tree lives across `mutate` calls in a root (a `Root` holds a `Gc`,
    // so the handle is boxed in a one-word object).
    let tree: Root<Rootable!['gc => Tree<'gc>]> =
        m.mutate(|mc| mc.root(mc.alloc(Tree::new(mc, freed.clone()))));
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % (keys * 4)
    };
    // Insert in batches, one call each: the collector runs between calls.
    let mut inserted = std::collections::BTreeMap::new();
    for _ in 0..keys / 1000 {
        let batch: Vec<u64> = (0..1000).map(|_| next()).collect();
        m.mutate(|mc| {
            let t = *tree.get(mc);
            for &k in &batch {
                t.insert(mc, k, &format!("v{k}"));
            }
        });
        for k in batch {
            inserted.insert(k, ());
        }
    }
    // Remove every other key.
    let gone: Vec<u64> = inserted.keys().copied().step_by(2).collect();
    m.mutate(|mc| {
        let t = *tree.get(mc);
        for &k in &gone {
            assert!(t.remove(mc, k));
        }
    });
    for k in &gone {
        inserted.remove(k);
    }
    m.collect();
    m.runtime().wait_for_drops();
    m.mutate(|mc| {
        let t = *tree.get(mc);
        assert_eq!(t.len(), inserted.len());
        assert!(
            t.iter().map(|(k, _)| k).eq(inserted.keys().copied()),
            "in order, all there"
        );
        let (k, _) = inserted.iter().next().expect("some key survived");
        assert_eq!(t.get(*k), Some(format!("v{k}").as_str()));
        assert_eq!(t.get(gone[0]), None);
    });
    let s = rt.stats();
    println!(
        "{} keys kept, {} removed nodes freed; {} cycles ({} minor), mutator held at most {:.3} ms",
        inserted.len(),
        freed.load(Ordering::Relaxed),
        s.cycles,
        s.minor_cycles,
        s.mutator_pauses.max().as_secs_f64() * 1e3
    );
    assert_eq!(
        freed.load(Ordering::Relaxed),
        gone.len(),
        "every removed node was freed"
    );
}
