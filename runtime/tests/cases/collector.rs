// The collector end to end: what is rooted survives with its contents,
// what is not is dropped once, weak references clear, the heap limit is an
// `Err`, and objects outlive the thread that made them. Included by one
// test file per object space (`collector.rs`, `collector_system.rs`,
// `collector_mimalloc.rs`), each defining `space(builder)` and
// `charged(bytes, align)`, what the space charges an object.

use loam_runtime::{
    Gc, GcCell, GcLock, GcWeak, GlobalRoot, Root, Rootable, Runtime, RuntimeBuilder, Trace,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn rt(threads: usize) -> RuntimeBuilder {
    space(Runtime::builder())
        .gc_threads(threads)
        .ignore_env()
        .verify(true)
}

/// Counts its drops in a shared counter.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Trace)]
struct Node<'gc> {
    value: u64,
    next: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
    #[trace(skip)]
    _drops: Counted,
}

type NodeRoot = Rootable!['gc => Node<'gc>];
type TableRoot = Rootable!['gc => GcLock<'gc, Vec<Gc<'gc, String>>>];
type BlocksRoot = Rootable!['gc => GcLock<'gc, Vec<Gc<'gc, [u64; 512]>>>];

fn list<'gc>(
    mc: &loam_runtime::Mutation<'gc>,
    n: u64,
    drops: &Arc<AtomicUsize>,
) -> Gc<'gc, Node<'gc>> {
    let mut head = None;
    for value in (0..n).rev() {
        head = Some(mc.alloc(Node {
            value,
            next: GcCell::new(head),
            _drops: Counted(drops.clone()),
        }));
    }
    head.expect("n > 0")
}

fn sum<'gc>(mut cur: Option<Gc<'gc, Node<'gc>>>) -> (u64, u64) {
    let (mut s, mut len) = (0, 0);
    while let Some(n) = cur {
        s += n.value;
        len += 1;
        cur = n.next.get();
    }
    (s, len)
}

#[test]
fn the_runtime_runs_on_its_space() {
    assert_eq!(rt(1).build().object_space(), SPACE);
}

#[test]
fn unrooted_objects_are_dropped_and_rooted_ones_survive() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt(2).build();
    let mut m = rt.attach();
    let kept: Root<NodeRoot> = m.mutate(|mc| {
        list(mc, 1000, &drops); // garbage
        mc.root(list(mc, 500, &drops))
    });
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 1000);
    m.mutate(|mc| assert_eq!(sum(Some(kept.get(mc))), (124_750, 500)));
    let s = rt.stats();
    assert_eq!(s.cycles, 1);
    assert_eq!(s.objects_freed, 1000);
    assert_eq!(s.last.as_ref().unwrap().objects_marked, 500);
    // Cut the list in the middle through the barrier cell.
    m.mutate(|mc| {
        let mut cur = kept.get(mc);
        for _ in 0..99 {
            cur = cur.next.get().unwrap();
        }
        cur.next.set(mc, None);
    });
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 1400);
    drop(kept);
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 1500);
    assert_eq!(rt.stats().live_size, 0);
}

#[test]
fn dropping_the_runtime_drops_every_object() {
    let drops = Arc::new(AtomicUsize::new(0));
    {
        let rt = rt(1).build();
        let mut m = rt.attach();
        let _kept: Root<NodeRoot> = m.mutate(|mc| mc.root(list(mc, 300, &drops)));
        m.mutate(|mc| list(mc, 200, &drops).value);
    }
    assert_eq!(drops.load(Ordering::Relaxed), 500);
}

#[test]
fn a_ten_million_node_list_marks_without_recursion() {
    let n = 10_000_000;
    let rt = rt(2).verify(false).gc_percent(u32::MAX).build();
    let mut m = rt.attach();
    #[derive(Trace)]
    struct Link<'gc> {
        next: Option<Gc<'gc, Link<'gc>>>,
    }
    let head: Root<Rootable!['gc => Link<'gc>]> = m.mutate(|mc| {
        let mut head = mc.alloc(Link { next: None });
        for _ in 1..n {
            head = mc.alloc(Link { next: Some(head) });
        }
        mc.root(head)
    });
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(rt.stats().last.unwrap().objects_marked, n);
    drop(head);
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(rt.stats().last.unwrap().objects_freed, n);
}

#[test]
fn global_roots_share_objects_between_threads() {
    let rt = rt(2).build();
    let mut m = rt.attach();
    let table: GlobalRoot<TableRoot> =
        m.mutate(|mc| mc.global_root(mc.alloc(GcLock::new(Vec::new()))));
    let table = Arc::new(table);
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let (rt, table) = (rt.clone(), table.clone());
            std::thread::spawn(move || {
                let mut m = rt.attach();
                for i in 0..200 {
                    m.mutate(|mc| {
                        let s = mc.alloc(format!("{t}-{i}"));
                        table.get(mc).write(mc, |v| v.push(s));
                        mc.alloc([0u8; 100]); // garbage, to drive cycles
                    });
                    if i % 50 == 0 {
                        m.collect();
                        m.runtime().wait_for_drops();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    m.collect();
    m.runtime().wait_for_drops();
    m.mutate(|mc| {
        let v = table.get(mc);
        let v = v.read();
        assert_eq!(v.len(), 800);
        for t in 0..4 {
            assert_eq!(
                v.iter().filter(|s| s.starts_with(&format!("{t}-"))).count(),
                200
            );
        }
    });
}

#[test]
fn objects_outlive_the_thread_that_allocated_them() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt(2).build();
    let root: GlobalRoot<NodeRoot> = {
        let (rt, drops) = (rt.clone(), drops.clone());
        std::thread::spawn(move || {
            let mut m = rt.attach();
            m.mutate(|mc| {
                list(mc, 777, &drops); // garbage left behind
                mc.global_root(list(mc, 1000, &drops))
            })
        })
        .join()
        .unwrap()
    };
    // The thread is gone; its heap's pages are orphaned or adopted.
    let mut m = rt.attach();
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 777);
    m.mutate(|mc| assert_eq!(sum(Some(root.get(mc))), (499_500, 1000)));
    drop(root);
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 1777);
}

/// Same size as a `Node`, with no drop glue: garbage that a sweep hands
/// back to its allocating thread as a page run.
#[derive(Trace)]
struct Plain {
    _a: u64,
    _b: u64,
    _c: u64,
}

/// A thread allocates garbage and two rooted lists side by side in the
/// same pages, detaches and sits idle, never to allocate again. A
/// collection sends the garbage back to it as page runs, which it never
/// takes back. Later collections must still free the lists' objects in
/// those pages once unrooted, and dropping the runtime must drop the rest.
#[test]
fn pages_whose_runs_an_idle_thread_holds_are_still_collected() {
    const N: usize = 3000;
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt(2).build();
    let (roots_tx, roots_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let idle = {
        let (rt, drops) = (rt.clone(), drops.clone());
        std::thread::spawn(move || {
            let mut m = rt.attach();
            let roots = m.mutate(|mc| {
                let (mut a, mut b) = (None, None);
                for value in 0..N as u64 {
                    mc.alloc(Plain { _a: value, _b: 0, _c: 0 });
                    for head in [&mut a, &mut b] {
                        *head = Some(mc.alloc(Node {
                            value,
                            next: GcCell::new(*head),
                            _drops: Counted(drops.clone()),
                        }));
                    }
                    mc.alloc(Plain { _a: value, _b: 1, _c: 1 });
                }
                (mc.global_root(a.unwrap()), mc.global_root(b.unwrap()))
            });
            drop(m);
            drop(rt);
            roots_tx.send(roots).unwrap();
            // Idle: no `mutate`, no allocation, until the test ends.
            done_rx.recv().unwrap();
        })
    };
    let (a, b): (GlobalRoot<NodeRoot>, GlobalRoot<NodeRoot>) = roots_rx.recv().unwrap();
    // Frees the plain objects: page runs to the idle thread, left out.
    rt.collect();
    rt.wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 0);
    drop(a);
    rt.collect();
    rt.wait_for_drops();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        N,
        "collect() left objects in pages whose runs the idle thread holds"
    );
    drop(b);
    drop(rt);
    assert_eq!(
        drops.load(Ordering::Relaxed),
        2 * N,
        "dropping the runtime left objects in pages whose runs the idle thread holds"
    );
    done_tx.send(()).unwrap();
    idle.join().unwrap();
}

/// A gate a destructor waits at (a minute at most, so that a failing test
/// ends).
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    fn open(&self) {
        *self.0 .0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.0 .1.notify_all();
    }
}

/// Opens its gate when dropped (on a failed assertion too, before the
/// runtime's drop waits for the destructors).
struct OpenOnDrop(Gate);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Blocks its drop until the gate opens.
struct WaitsAt(Gate);

impl Drop for WaitsAt {
    fn drop(&mut self) {
        let (open, cv) = &*self.0 .0;
        let guard = open.lock().unwrap();
        let _ = cv.wait_timeout_while(guard, std::time::Duration::from_secs(60), |open| !*open);
    }
}

/// An object whose destructor blocks until its gate opens.
#[derive(Trace)]
struct Blocker {
    #[trace(skip)]
    _gate: WaitsAt,
    _a: u64,
    _b: u64,
}

#[derive(Trace)]
struct Link<'gc> {
    next: GcCell<'gc, Option<Gc<'gc, Link<'gc>>>>,
    _a: u64,
    _b: u64,
}

type LinkRoot = Rootable!['gc => Link<'gc>];

/// The finalizer holds only the dead objects it runs destructors for, not
/// their pages: while a destructor is blocked, `collect()` still frees the
/// garbage that shares its pages, and dropping the runtime frees every
/// object (a page whose objects waited for the finalizer used to be left
/// out of every snapshot, and `collect()` and the runtime's last cycle
/// waited for the finalizer a second, then left the page unswept).
#[test]
fn garbage_beside_a_blocked_destructor_is_collected() {
    const N: u64 = 4000;
    let gate = Gate::default();
    let rt = rt(2).build();
    let mut m = rt.attach();
    let opens = OpenOnDrop(gate.clone());
    // Blockers among the links, in the same pages (same size, one thread).
    let links: Root<LinkRoot> = m.mutate(|mc| {
        let mut head = None;
        for i in 0..N {
            if i % 200 == 0 {
                mc.alloc(Blocker {
                    _gate: WaitsAt(gate.clone()),
                    _a: i,
                    _b: 0,
                });
            }
            head = Some(mc.alloc(Link {
                next: GcCell::new(head),
                _a: i,
                _b: 0,
            }));
        }
        mc.root(head.unwrap())
    });
    // The blockers are garbage: their pages' dead objects go to the
    // finalizer, which blocks in the first destructor.
    m.collect();
    let before = rt.stats().objects_freed;
    drop(links);
    m.collect();
    let freed = rt.stats().objects_freed - before;
    assert!(
        freed >= N,
        "collect() freed {freed} objects of {N} unrooted links while a destructor was blocked"
    );
    drop(m);
    drop(opens);
    rt.wait_for_drops();
    drop(rt);
}

/// A runtime of two GC threads and a 256 KiB minimum heap, and the count
/// of its minor cycles.
fn counting_minors() -> (Runtime, Arc<AtomicUsize>) {
    let minors = Arc::new(AtomicUsize::new(0));
    let count = minors.clone();
    let rt = rt(2)
        .min_heap(256 << 10)
        .on_cycle(move |e| {
            count.fetch_add(usize::from(e.minor), Ordering::Relaxed);
        })
        .build();
    (rt, minors)
}

/// An object holding a weak reference, and the reference's target.
#[derive(Trace)]
struct WeakHolder<'gc> {
    weak: GcWeak<'gc, Node<'gc>>,
}

type WeakHolderRoot = Rootable!['gc => WeakHolder<'gc>];

/// A rooted holder whose weak reference points to a list of `len` nodes,
/// and a root of that list.
fn weakly_held(
    m: &mut loam_runtime::Mutator,
    len: u64,
    drops: &Arc<AtomicUsize>,
) -> (Root<WeakHolderRoot>, Root<NodeRoot>) {
    m.mutate(|mc| {
        let target = list(mc, len, drops);
        (
            mc.root(mc.alloc(WeakHolder {
                weak: GcWeak::new(mc, target),
            })),
            mc.root(target),
        )
    })
}

#[test]
fn weak_references_clear_when_their_target_dies() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt(1).build();
    let mut m = rt.attach();
    let (holder, strong) = weakly_held(&mut m, 3, &drops);
    m.collect();
    m.runtime().wait_for_drops();
    m.mutate(|mc| {
        let t = holder.get(mc).weak.upgrade().expect("target is rooted");
        assert_eq!(sum(Some(t)), (3, 3));
    });
    drop(strong);
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 3);
    m.mutate(|mc| assert!(holder.get(mc).weak.upgrade().is_none()));
}

/// Old weak cells (their cell and target marked by a cycle) are left out
/// of minor cycles' weak processing, which takes the young ones alone:
/// through minor cycles, weak references to young targets that die are
/// cleared and old ones still upgrade; a full cycle then clears the old
/// ones whose targets were let go, and keeps the rest.
#[test]
fn weak_references_old_and_young_through_minor_and_full_cycles() {
    #[derive(Trace)]
    struct Weaks<'gc> {
        cells: GcLock<'gc, Vec<GcWeak<'gc, Node<'gc>>>>,
    }
    type WeaksRoot = Rootable!['gc => Weaks<'gc>];
    type TargetsRoot = Rootable!['gc => GcLock<'gc, Vec<Gc<'gc, Node<'gc>>>>];
    let drops = Arc::new(AtomicUsize::new(0));
    let (rt, minors) = counting_minors();
    let mut m = rt.attach();
    const OLD: usize = 200;
    // Old: rooted targets and their weak references, made old by a full
    // cycle.
    let (old_weaks, targets): (Root<WeaksRoot>, Root<TargetsRoot>) = m.mutate(|mc| {
        let targets: Vec<_> = (0..OLD as u64).map(|i| list(mc, 1 + i % 2, &drops)).collect();
        let cells = targets.iter().map(|&t| GcWeak::new(mc, t)).collect();
        (
            mc.root(mc.alloc(Weaks {
                cells: GcLock::new(cells),
            })),
            mc.root(mc.alloc(GcLock::new(targets))),
        )
    });
    m.collect();
    m.runtime().wait_for_drops();
    // Young: weak references, rooted, to young targets nothing else holds,
    // among young garbage, until minor cycles have run.
    let young_weaks: Root<WeaksRoot> = m.mutate(|mc| {
        mc.root(mc.alloc(Weaks {
            cells: GcLock::new(Vec::new()),
        }))
    });
    // Made in one call between marks: made during a mark, `GcWeak::new`
    // shades its target, which the next cycle then keeps.
    while !m.mutate(|mc| {
        if mc.is_marking() {
            return false;
        }
        young_weaks.get(mc).cells.write(mc, |v| {
            for _ in 0..100 {
                v.push(GcWeak::new(mc, list(mc, 1, &drops)));
            }
        });
        true
    }) {
        std::thread::yield_now();
    }
    let before = minors.load(Ordering::Relaxed);
    let mut rounds = 0_u64;
    while minors.load(Ordering::Relaxed) < before + 3 {
        assert!(rounds < 200_000, "no minor cycle ran");
        m.mutate(|mc| {
            for j in 0..8 {
                mc.alloc([rounds + j; 8]);
            }
        });
        rounds += 1;
    }
    m.mutate(|mc| {
        let cleared = young_weaks.get(mc).cells.read().iter().filter(|w| w.upgrade().is_none()).count();
        assert_eq!(cleared, 100, "the young weak references whose targets died in minor cycles");
        for (i, w) in old_weaks.get(mc).cells.read().iter().enumerate() {
            let t = w.upgrade().unwrap_or_else(|| panic!("old weak reference {i} cleared, its target rooted"));
            assert_eq!(sum(Some(t)).1, 1 + i as u64 % 2);
        }
        // Let the odd ones' targets go.
        targets.get(mc).write(mc, |v| {
            for (i, t) in v.iter_mut().enumerate() {
                if i % 2 == 1 {
                    *t = list(mc, 1, &drops);
                }
            }
        });
    });
    m.collect();
    m.runtime().wait_for_drops();
    m.mutate(|mc| {
        for (i, w) in old_weaks.get(mc).cells.read().iter().enumerate() {
            assert_eq!(
                w.upgrade().is_some(),
                i % 2 == 0,
                "old weak reference {i} after a full cycle let its target go (odd ones)"
            );
        }
    });
}

/// Over loam's pages, a full cycle of one runtime clears every page's
/// marks, another runtime's objects' included, which are young again: a
/// minor cycle of that other runtime may free them, and must then clear
/// its old weak references to them. Its weak processing left its old cells
/// out of minor cycles, and an upgrade handed out a freed target. (A
/// `GlobalAlloc` space keeps its marks to itself: there the target, old,
/// lives on until a full cycle of its own, and the reference with it.)
#[test]
fn an_old_weak_reference_clears_when_another_runtimes_full_cycle_made_its_target_young() {
    let drops = Arc::new(AtomicUsize::new(0));
    let minors = Arc::new(Mutex::new(Vec::new()));
    let a = rt(1).build();
    let b = {
        let minors = minors.clone();
        rt(1).min_heap(256 << 10)
            .on_cycle(move |e| minors.lock().unwrap().push(e.minor))
            .build()
    };
    let mut mb = b.attach();
    let (holder, strong) = weakly_held(&mut mb, 1, &drops);
    // The reference old (its cell and target marked), then its target
    // let go, then the other runtime's full cycle.
    mb.collect();
    drop(strong);
    a.attach().collect();
    let seen = minors.lock().unwrap().len();
    let mut rounds = 0_u64;
    while minors.lock().unwrap().len() == seen {
        assert!(rounds < 1_000_000, "no cycle of the runtime ran");
        mb.mutate(|mc| {
            for k in 0..64_u64 {
                mc.alloc([k; 8]);
            }
        });
        rounds += 1;
    }
    let minor = minors.lock().unwrap()[seen];
    let pages = SPACE == "loam pages";
    mb.mutate(|mc| {
        let target = holder.get(mc).weak.upgrade();
        if pages {
            assert!(
                target.is_none(),
                "a weak reference handed out a target its runtime's {} cycle freed",
                if minor { "minor" } else { "full" }
            );
        } else if let Some(t) = target {
            assert_eq!(sum(Some(t)), (0, 1), "a live target's value");
        }
    });
}

#[test]
fn the_heap_limit_is_an_error_and_the_heap_stays_usable() {
    let rt = rt(1).verify(false).heap_limit(8 << 20).build();
    let mut m = rt.attach();
    let kept: Root<BlocksRoot> = m.mutate(|mc| mc.root(mc.alloc(GcLock::new(Vec::new()))));
    // Fill the heap with rooted 4 KiB objects until it refuses.
    let mut refused = None;
    for _ in 0..10_000 {
        let r = m.mutate(|mc| match mc.try_alloc([9_u64; 512]) {
            Ok(b) => {
                kept.get(mc).write(mc, |v| v.push(b));
                None
            }
            Err(e) => Some((e.to_string(), e.into_inner()[0])),
        });
        if r.is_some() {
            refused = r;
            break;
        }
    }
    let (msg, value) = refused.expect("an 8 MiB heap must fill up");
    assert!(msg.contains("limit of 8388608 bytes"), "{msg}");
    assert_eq!(value, 9, "the value comes back in the error");
    let n = m.mutate(|mc| kept.get(mc).read().len());
    // Accounting is in what the space charges: in the pages, a 4104-byte
    // object takes a 5120-byte block.
    let block = charged(4104, 8);
    let fit = (8 << 20) / block;
    assert!(
        n <= fit && n + 16 >= fit,
        "{n} objects in blocks of {block} bytes, {fit} fit in 8 MiB"
    );
    // `alloc` panics with the same message; the runtime carries on.
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.mutate(|mc| {
            for _ in 0..10_000 {
                kept.get(mc).write(mc, |v| v.push(mc.alloc([0_u64; 512])));
            }
        })
    }));
    let msg = *p.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.contains("heap limit"), "{msg}");
    // Drop the roots: the next call collects first, and allocation works.
    m.mutate(|mc| kept.get(mc).write(mc, |v| v.clear()));
    m.collect();
    m.runtime().wait_for_drops();
    m.mutate(|mc| {
        for _ in 0..1000 {
            kept.get(mc).write(mc, |v| v.push(mc.alloc([1_u64; 512])));
        }
    });
    assert!(rt.stats().heap_size <= 8 << 20);
}

#[test]
fn pacing_starts_cycles_and_bounds_the_heap() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let rt = {
        let events = events.clone();
        rt(2)
            .verify(false)
            .min_heap(1 << 20)
            .on_cycle(move |e| events.lock().unwrap().push(e.clone()))
            .build()
    };
    let mut m = rt.attach();
    for i in 0..20_000_u64 {
        m.mutate(|mc| {
            for j in 0..10 {
                mc.alloc([i + j; 8]);
            }
        });
    }
    m.collect();
    m.runtime().wait_for_drops();
    let s = rt.stats();
    let events = events.lock().unwrap();
    assert!(
        s.cycles >= 5,
        "{} cycles for 14 MiB allocated over a 1 MiB goal",
        s.cycles
    );
    assert_eq!(events.len() as u64, s.cycles);
    // A ragged cycle pauses nothing, unless its end fell back to stops.
    let stopped = events.iter().filter(|e| !e.ragged).count() as u64;
    assert_eq!(s.ragged_cycles, s.cycles - stopped);
    if s.ragged_cycles == 0 {
        assert_eq!(s.pauses.count(), s.cycles);
    } else {
        assert!(s.pauses.count() >= stopped);
    }
    assert!(events.iter().filter(|e| !e.forced).count() >= 4);
    assert!(events.iter().filter(|e| !e.ragged).all(|e| e.pause >= e.mark));
    // A mutator that outruns the collector waits at twice the goal.
    let worst = events.iter().map(|e| e.heap_before).max().unwrap();
    assert!(
        worst <= 4 << 20,
        "heap reached {worst} bytes with a 1 MiB goal"
    );
    assert!(s.pauses.max() >= s.pauses.p99() && s.pauses.p99() >= s.pauses.p50());
    // No object was ever rooted: all were freed.
    assert_eq!(s.bytes_marked, 0);
    assert_eq!(s.objects_freed, 200_000);
}

#[test]
fn a_panic_inside_mutate_leaves_the_runtime_working() {
    let rt = rt(1).build();
    let mut m = rt.attach();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.mutate(|mc| {
            mc.alloc(1_u32);
            panic!("user code failed");
        })
    }));
    assert!(r.is_err());
    m.collect(); // would hang if the mutator were still inside
    m.runtime().wait_for_drops();
    assert_eq!(m.mutate(|mc| *mc.alloc(3_u32)), 3);
}

#[test]
#[should_panic(expected = "already has a Mutator of this runtime")]
fn attaching_twice_panics() {
    let rt = rt(1).build();
    let _a = rt.attach();
    let _b = rt.attach();
}

#[test]
#[should_panic(expected = "a root of one runtime was read through a mutator of another")]
fn a_root_of_another_runtime_panics() {
    let (a, b) = (rt(1).build(), rt(1).build());
    let (mut ma, mut mb) = (a.attach(), b.attach());
    let r: Root<Rootable!['gc => u8]> = ma.mutate(|mc| mc.root(mc.alloc(1)));
    mb.mutate(|mc| *r.get(mc));
}

/// Every other way into a root through a mutator of another runtime (a
/// root's `set`, a global root's `get` and `set`, from another thread too)
/// panics with the message, and the roots still hold their objects after.
#[test]
fn roots_of_another_runtime_panic_on_every_access() {
    let (a, b) = (rt(1).build(), rt(1).build());
    let (mut ma, mut mb) = (a.attach(), b.attach());
    type Byte = Rootable!['gc => u8];
    let r: Root<Byte> = ma.mutate(|mc| mc.root(mc.alloc(1)));
    let g: GlobalRoot<Byte> = ma.mutate(|mc| mc.global_root(mc.alloc(2)));
    let refused = |what: &str, f: &mut dyn FnMut()| {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err(what);
        let msg = err
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| err.downcast_ref::<String>().cloned());
        assert!(
            msg.as_deref()
                .is_some_and(|m| m.contains("a root of one runtime was read through a mutator of another")),
            "{what}: {msg:?}"
        );
    };
    refused("Root::set", &mut || mb.mutate(|mc| r.set(mc, mc.alloc(3))));
    refused("GlobalRoot::get", &mut || { mb.mutate(|mc| *g.get(mc)); });
    refused("GlobalRoot::set", &mut || mb.mutate(|mc| g.set(mc, mc.alloc(4))));
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut mb2 = b.attach();
            refused("GlobalRoot::get on another thread", &mut || { mb2.mutate(|mc| *g.get(mc)); });
        });
    });
    ma.collect();
    assert_eq!(ma.mutate(|mc| (*r.get(mc), *g.get(mc))), (1, 2));
}

#[test]
#[should_panic(expected = "collect called inside a mutate closure")]
fn collecting_inside_mutate_panics() {
    let rt = rt(1).build();
    let mut m = rt.attach();
    m.mutate(|_| rt.collect());
}

#[test]
fn runtimes_side_by_side_keep_their_own_objects() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rts: Vec<_> = (0..3).map(|_| rt(1).build()).collect();
    let handles: Vec<_> = rts
        .iter()
        .map(|rt| {
            let (rt, drops) = (rt.clone(), drops.clone());
            std::thread::spawn(move || {
                let mut m = rt.attach();
                let kept: Root<NodeRoot> = m.mutate(|mc| mc.root(list(mc, 100, &drops)));
                for _ in 0..20 {
                    m.mutate(|mc| list(mc, 100, &drops).value);
                    m.collect();
                    m.runtime().wait_for_drops();
                    m.mutate(|mc| assert_eq!(sum(Some(kept.get(mc))), (4950, 100)));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    drop(rts);
    assert_eq!(drops.load(Ordering::Relaxed), 3 * 21 * 100);
}

/// A node without drop glue: the sweep frees pages of these from their
/// bitmaps, reading no header when it can tell the page holds only its
/// own runtime's objects (the page's tag, `runtime/src/sweep.rs`).
#[derive(Trace)]
struct Bare<'gc> {
    value: u64,
    next: Option<Gc<'gc, Bare<'gc>>>,
}

fn bare_list<'gc>(mc: &loam_runtime::Mutation<'gc>, first: u64, n: u64) -> Gc<'gc, Bare<'gc>> {
    let mut head = None;
    for value in (first..first + n).rev() {
        head = Some(mc.alloc(Bare { value, next: head }));
    }
    head.expect("n > 0")
}

fn bare_sum<'gc>(mut cur: Option<Gc<'gc, Bare<'gc>>>) -> (u64, u64) {
    let (mut s, mut len) = (0, 0);
    while let Some(n) = cur {
        s += n.value;
        len += 1;
        cur = n.next;
    }
    (s, len)
}

/// Two runtimes whose objects share pages (one thread allocates for both,
/// in turns) or not (a thread each), with objects that need no drop glue:
/// each sweep frees its own garbage and nothing of the other's, whatever
/// its pages hold (verify mode on: a freed object reached aborts). Each
/// runtime frees all its garbage, counted by the objects its cycles free.
#[test]
fn runtimes_sharing_pages_free_only_their_own_objects() {
    let (calls, n) = (1_000_u64, 64_u64);
    let run = |shared_thread: bool| {
        let rts = [rt(1).min_heap(256 << 10).build(), rt(1).min_heap(256 << 10).build()];
        let work = |m: &mut loam_runtime::Mutator, kept: &Root<Rootable!['gc => Bare<'gc>]>, i: u64, k: u64| {
            m.mutate(|mc| {
                bare_list(mc, i, n);
                assert_eq!(bare_sum(Some(kept.get(mc))), (k * 1_000_000 + 499_500, 1000));
            });
            if i % 250 == 0 {
                m.collect();
            }
        };
        if shared_thread {
            let mut ms: Vec<_> = rts.iter().map(|rt| rt.attach()).collect();
            let kept: Vec<Root<Rootable!['gc => Bare<'gc>]>> = (0..2)
                .map(|k| ms[k].mutate(|mc| mc.root(bare_list(mc, 1000 * k as u64, 1000))))
                .collect();
            for i in 0..calls {
                for k in 0..2 {
                    work(&mut ms[k], &kept[k], i, k as u64);
                }
            }
        } else {
            std::thread::scope(|s| {
                for (k, rt) in rts.iter().enumerate() {
                    s.spawn(move || {
                        let mut m = rt.attach();
                        let kept: Root<Rootable!['gc => Bare<'gc>]> =
                            m.mutate(|mc| mc.root(bare_list(mc, 1000 * k as u64, 1000)));
                        for i in 0..calls {
                            work(&mut m, &kept, i, k as u64);
                        }
                    });
                }
            });
        }
        for rt in &rts {
            rt.collect();
            rt.wait_for_drops();
            // Every list is garbage by now, the kept one too (its root
            // is gone).
            assert_eq!(rt.stats().objects_freed, calls * n + 1000, "{:?}", rt.stats());
        }
    };
    run(true);
    run(false);
}


#[test]
fn a_sweep_may_drop_the_last_handle_of_another_runtime() {
    // An object of `a` owns `b`'s last handle: `a`'s sweep drops it on a GC
    // thread while `a`'s cycle holds the process-wide cycle lock that `b`'s
    // last cycle needs. It must not wait for `b` there.
    let drops = Arc::new(AtomicUsize::new(0));
    let (a, b) = (rt(1).build(), rt(1).build());
    {
        let mut mb = b.attach();
        mb.mutate(|mc| list(mc, 10, &drops).value); // garbage for b's last cycle
    }
    // For b's end, which runs in the background once its last handle goes.
    let b_stats = b.stats_handle();
    let mut ma = a.attach();
    ma.mutate(|mc| {
        mc.alloc(Mutex::new(Some(b)));
    });
    ma.collect();
    ma.runtime().wait_for_drops();
    drop(ma);
    drop(a);
    // b's collector finishes on its own: its last cycle may wait for the
    // process-wide cycle lock, which other tests' cycles hold meanwhile
    // (a 2 s poll here failed on a busy machine), so
    // wait for its end, however long.
    b_stats.wait_final();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        10,
        "b's last cycle dropped its objects"
    );
}

#[derive(Trace)]
struct Holder<'gc> {
    slots: [GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>; 16],
}

#[test]
fn minor_cycles_keep_old_objects_and_what_cells_store_into_them() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (rt, minors) = counting_minors();
    let mut m = rt.attach();
    // Old: a rooted list and a rooted holder, promoted by a full cycle.
    let old: Root<NodeRoot> = m.mutate(|mc| mc.root(list(mc, 1000, &drops)));
    let holder: Root<Rootable!['gc => Holder<'gc>]> = m.mutate(|mc| {
        mc.root(mc.alloc(Holder {
            slots: Default::default(),
        }))
    });
    m.collect();
    m.runtime().wait_for_drops();
    // Young lists stored into the old holder, among young garbage: minor
    // cycles must trace them from the barrier's record, as nothing young
    // roots them.
    let rounds = 6000_u64;
    for i in 0..rounds {
        m.mutate(|mc| {
            for j in 0..8 {
                mc.alloc([i + j; 8]);
            }
            let young = list(mc, 4, &drops);
            let head = mc.alloc(Node {
                value: i,
                next: GcCell::new(Some(young)),
                _drops: Counted(drops.clone()),
            });
            holder.get(mc).slots[(i % 16) as usize].set(mc, Some(head));
        });
    }
    let s = rt.stats();
    assert!(
        minors.load(Ordering::Relaxed) >= 3 && s.minor_cycles >= 3,
        "{} minor cycles of {}",
        s.minor_cycles,
        s.cycles
    );
    m.mutate(|mc| {
        assert_eq!(sum(Some(old.get(mc))), (999 * 1000 / 2, 1000));
        for (k, slot) in holder.get(mc).slots.iter().enumerate() {
            let last = rounds - 16 + k as u64;
            // The head's value, then the young list 0..4.
            assert_eq!(sum(slot.get()), (last + 6, 5), "slot {k}");
        }
    });
    // Everything but the rooted objects is garbage: a full cycle frees it.
    m.collect();
    m.runtime().wait_for_drops();
    let allocated = 1000 + rounds as usize * 5;
    assert_eq!(drops.load(Ordering::Relaxed), allocated - 1000 - 16 * 5);
    drop(old);
    drop(holder);
    drop(m);
    drop(rt);
    assert_eq!(drops.load(Ordering::Relaxed), allocated);
}

/// A chain of `n` nodes built as a user builds one with `GcCell::set`:
/// each node made empty, then stored into the one before it.
fn chain_by_set<'gc>(
    mc: &loam_runtime::Mutation<'gc>,
    first: u64,
    n: u64,
    drops: &Arc<AtomicUsize>,
) -> Gc<'gc, Node<'gc>> {
    let node = |value| {
        mc.alloc(Node {
            value,
            next: GcCell::new(None),
            _drops: Counted(drops.clone()),
        })
    };
    let head = node(first);
    let mut tail = head;
    for value in first + 1..first + n {
        let next = node(value);
        tail.next.set(mc, Some(next));
        tail = next;
    }
    head
}

/// Stores into a young object's cells promote nothing (`barrier.rs`, "A
/// young object's cells"): a structure built with `GcCell::set` and then
/// dropped dies in minor cycles, where marking every stored node left all
/// but the head of each chain to a full cycle. Of the objects freed here,
/// minor cycles freed 95 – 98% (81 – 85% with ragged cycles, whose window
/// calls shade what they store; 60 – 62% with two processes beside a busy
/// loop), against 5% (6 – 9%) when every store marked. The bound asked is a
/// third.
#[test]
fn minor_cycles_free_structures_built_with_set() {
    let drops = Arc::new(AtomicUsize::new(0));
    // (minor, objects freed) of each cycle.
    let freed = Arc::new(Mutex::new(Vec::new()));
    let rt = {
        let freed = freed.clone();
        rt(2)
            .min_heap(256 << 10)
            .on_cycle(move |e| freed.lock().unwrap().push((e.minor, e.objects_freed)))
            .build()
    };
    let mut m = rt.attach();
    let (calls, n) = (40_000_u64, 16_u64);
    for i in 0..calls {
        let head = m.mutate(|mc| sum(Some(chain_by_set(mc, i, n, &drops))));
        assert_eq!(head, (n * i + n * (n - 1) / 2, n));
    }
    let (minor, full) = freed
        .lock()
        .unwrap()
        .iter()
        .fold((0, 0), |(mi, fu), &(is_minor, f)| {
            if is_minor {
                (mi + f, fu)
            } else {
                (mi, fu + f)
            }
        });
    assert!(rt.stats().minor_cycles >= 3, "{:?}", rt.stats());
    if SPACE == "loam pages" {
        // A `GlobalAlloc` space cannot tell a young object's cell, and
        // remembers every store as before.
        assert!(
            minor * 3 >= minor + full,
            "minor cycles freed {minor} objects, full ones {full}: the chains were promoted"
        );
    }
    drop(m);
    drop(rt);
    assert_eq!(drops.load(Ordering::Relaxed), (calls * n) as usize);
}

/// The other side of the skip: a chain built with `GcCell::set` and stored
/// into an old object, before or after it grows, survives minor cycles
/// whole (verify mode on). Skipping for the old holder too frees the
/// chains.
#[test]
fn young_chains_stored_into_an_old_holder_survive() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt(2).min_heap(256 << 10).build();
    let mut m = rt.attach();
    let holder: Root<Rootable!['gc => Holder<'gc>]> = m.mutate(|mc| {
        mc.root(mc.alloc(Holder {
            slots: Default::default(),
        }))
    });
    m.collect();
    let rounds = 20_000_u64;
    for i in 0..rounds {
        m.mutate(|mc| {
            let slot = &holder.get(mc).slots[(i % 16) as usize];
            if i % 2 == 0 {
                // Grown young, then stored into the old holder.
                slot.set(mc, Some(chain_by_set(mc, i, 8, &drops)));
            } else {
                // Stored first, then grown through its (now old) head, and
                // through young nodes stored after it.
                let head = chain_by_set(mc, i, 1, &drops);
                slot.set(mc, Some(head));
                let rest = chain_by_set(mc, i + 1, 7, &drops);
                head.next.set(mc, Some(rest));
            }
            // Young garbage built the same way, to bring cycles on.
            chain_by_set(mc, 0, 8, &drops);
        });
    }
    assert!(rt.stats().minor_cycles >= 3, "{:?}", rt.stats());
    m.mutate(|mc| {
        for (k, slot) in holder.get(mc).slots.iter().enumerate() {
            let last = rounds - 16 + k as u64;
            assert_eq!(sum(slot.get()), (8 * last + 28, 8), "slot {k}");
        }
    });
    drop(holder);
    drop(m);
    drop(rt);
    assert_eq!(drops.load(Ordering::Relaxed), rounds as usize * 16);
}

/// Holds the marker that traces it, while armed, until the test's call
/// has run inside the mark (or `GATE_YIELDS` yields have passed): a
/// concurrent mark then lasts until a mutator's call begins inside it,
/// however the scheduler treats the threads. Nothing is timed, and the
/// test's outcome never depends on the gate holding.
struct MarkGate;

/// Yields a held marker makes before it goes on anyway.
const GATE_YIELDS: u32 = 1_000_000;

static GATE_ARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

// SAFETY: holds no managed pointer, so it reports nothing (1, 2); traced
// (3) only to hold its marker for a while; no `Drop` (4).
unsafe impl Trace for MarkGate {
    fn trace(&self, _: &mut loam_runtime::Tracer) {
        for _ in 0..GATE_YIELDS {
            if !GATE_ARMED.load(Ordering::Acquire) {
                break;
            }
            std::thread::yield_now();
        }
    }
}

/// Stores into a young object's cells during a concurrent mark promote
/// nothing either (`barrier.rs`, "A young object's cells", 4): chains
/// built with `GcCell::set` inside a call that began in a mark (not in a
/// ragged start's window), and dropped, are freed by the next cycle when
/// it is minor. Shading every stored value marked them all, and minor
/// cycles kept them. The marks are those of cycles the allocations bring
/// on, as a program's are (ragged ones where the space has them; a forced
/// cycle is always stopped), each held open by a fresh gate until the
/// call has run. The same call stores chains into an old holder, which
/// must survive whole (verify mode on).
#[test]
fn stores_during_marks_into_young_holders_promote_nothing() {
    let drops = Arc::new(AtomicUsize::new(0));
    // Every mark past its roots runs with the mutators, so the gate is
    // met by a concurrent marker, not in a pause.
    let rt = rt(2)
        .min_heap(1 << 20)
        .mark_pause_budget(std::time::Duration::ZERO)
        .build();
    let mut m = rt.attach();
    let holder: Root<Rootable!['gc => Holder<'gc>]> = m.mutate(|mc| {
        mc.root(mc.alloc(Holder {
            slots: Default::default(),
        }))
    });
    // The first cycle is full; the later ones here are minor.
    m.collect();
    let (chains, n) = (100_u64, 16_u64);
    let (mut rounds, mut checked, mut freed_by_minor) = (0, 0, 0);
    for attempt in 0..20_u64 {
        // Young, so the next cycle, minor or full, traces it.
        let gate: Root<Rootable![MarkGate]> = m.mutate(|mc| mc.root(mc.alloc(MarkGate)));
        GATE_ARMED.store(true, Ordering::Release);
        // Garbage until a call begins inside a mark.
        let mut inside = false;
        for _ in 0..100_000 {
            inside = m.mutate(|mc| {
                if !mc.is_marking() || mc.began_in_window() {
                    mc.alloc_slice_fill(1 << 12, 0_u8);
                    return false;
                }
                for i in 0..chains {
                    // Garbage, built young.
                    chain_by_set(mc, i * n, n, &drops);
                }
                for (k, slot) in holder.get(mc).slots.iter().enumerate() {
                    // Into the old holder: kept.
                    slot.set(mc, Some(chain_by_set(mc, attempt + k as u64, 8, &drops)));
                }
                true
            });
            if inside {
                break;
            }
        }
        GATE_ARMED.store(false, Ordering::Release);
        assert!(inside, "no call began inside a mark");
        rounds += 1;
        rt.wait_for_cycle();
        rt.wait_for_drops();
        // The mark's own sweep leaves what was allocated during it; the
        // next cycle, brought on by garbage the chains are not part of
        // (more may follow), frees them if it is minor and they were not
        // promoted.
        let before = rt.stats();
        let dropped_before = drops.load(Ordering::Relaxed);
        while rt.stats().cycles == before.cycles {
            m.mutate(|mc| {
                mc.alloc_slice_fill(1 << 12, 0_u8);
            });
        }
        rt.wait_for_cycle();
        rt.wait_for_drops();
        let after = rt.stats();
        let dropped = drops.load(Ordering::Relaxed) - dropped_before;
        m.mutate(|mc| {
            for (k, slot) in holder.get(mc).slots.iter().enumerate() {
                let first = attempt + k as u64;
                assert_eq!(sum(slot.get()), (8 * first + 28, 8), "slot {k}");
            }
        });
        drop(gate);
        // Only minor cycles since (a full one frees the chains either way).
        if after.cycles - before.cycles == after.minor_cycles - before.minor_cycles {
            checked += 1;
            // The chains, and the holder's chains of the attempt before
            // (overwritten in the mark, so the mark kept them).
            if dropped >= (chains * n) as usize {
                freed_by_minor += 1;
            }
            if checked == 3 {
                break;
            }
        }
    }
    if SPACE == "loam pages" {
        // (A `GlobalAlloc` space cannot tell a young object's cell and
        // shades as before.)
        assert_eq!(checked, 3, "fewer than three marks were followed by minor cycles only");
        assert_eq!(
            freed_by_minor, checked,
            "the chains built during the marks were promoted"
        );
    }
    drop(holder);
    drop(m);
    drop(rt);
    assert_eq!(drops.load(Ordering::Relaxed), rounds * ((chains * n) as usize + 16 * 8));
}

/// Pages whose every block is marked are left out of minor cycles (the
/// sweep flags them old); a full cycle must still look at them, and free
/// what died there meanwhile.
#[test]
fn old_pages_skipped_by_minor_cycles_are_swept_by_full_ones() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt(2).min_heap(256 << 10).build();
    let mut m = rt.attach();
    // Enough nodes to fill pages whole, promoted by a full cycle; the minor
    // cycles below then find their pages all marked.
    let n = 20_000_u64;
    let old: Root<NodeRoot> = m.mutate(|mc| mc.root(list(mc, n, &drops)));
    m.collect();
    m.runtime().wait_for_drops();
    let churn = |m: &mut loam_runtime::Mutator| {
        for i in 0..20_000_u64 {
            m.mutate(|mc| {
                for j in 0..8 {
                    mc.alloc([i + j; 8]);
                }
            });
        }
    };
    churn(&mut m);
    let minors = rt.stats().minor_cycles;
    assert!(minors >= 2, "only {minors} minor cycles: {:?}", rt.stats());
    // Cut the list in half: the tail is old garbage now, in old pages.
    m.mutate(|mc| {
        let mut cur = old.get(mc);
        for _ in 1..n / 2 {
            cur = cur.next.get().expect("the list is whole");
        }
        cur.next.set(mc, None);
    });
    churn(&mut m);
    assert!(
        rt.stats().minor_cycles > minors,
        "no minor cycle after the cut"
    );
    // Minor cycles keep old garbage; they must not have freed the live half.
    m.mutate(|mc| assert_eq!(sum(Some(old.get(mc))), ((n / 2 - 1) * n / 4, n / 2)));
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        (n / 2) as usize,
        "the full cycle frees the tail"
    );
    m.mutate(|mc| assert_eq!(sum(Some(old.get(mc))), ((n / 2 - 1) * n / 4, n / 2)));
    drop(old);
    drop(m);
    drop(rt);
    assert_eq!(drops.load(Ordering::Relaxed), n as usize);
}

/// Forced collections back to back on a thread of their own, until stopped.
struct Collecting {
    stop: Arc<std::sync::atomic::AtomicBool>,
    cycles: Arc<std::sync::atomic::AtomicUsize>,
    thread: std::thread::JoinHandle<usize>,
}

impl Collecting {
    fn start(rt: &Runtime) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cycles = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (rt, flag, count) = (rt.clone(), stop.clone(), cycles.clone());
        let thread = std::thread::spawn(move || {
            let mut n = 0;
            while !flag.load(Ordering::Relaxed) {
                rt.collect();
                n += 1;
                count.store(n, Ordering::Relaxed);
            }
            n
        });
        Collecting {
            stop,
            cycles,
            thread,
        }
    }

    /// Whether a loop that waits for calls during marks has tried long
    /// enough: `calls` calls, and 50 collections on the collecting thread
    /// (counted, not timed: on a busy machine that thread may not run for
    /// a while, and a cap on calls alone ran out before it did).
    fn tried_enough(&self, calls: usize) -> bool {
        calls >= 1_000_000 && self.cycles.load(Ordering::Relaxed) >= 50
    }

    /// Stops, and returns how many collections ran.
    fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

#[derive(Trace)]
struct Slot<'gc> {
    leaf: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
}

/// The snapshot barrier: during concurrent marks (a zero pause budget sends
/// every mark past the roots to the GC threads), a mutator takes leaves out
/// of slots into roots made meanwhile, which no marker reads, and puts
/// rooted leaves back. A leaf whose last pointer is overwritten before a
/// marker reads it is only kept by the barrier shading the old value:
/// without that, verify mode aborts (or the sums below go wrong).
#[test]
fn a_concurrent_mark_keeps_what_mutators_move_meanwhile() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt(2)
        .mark_pause_budget(std::time::Duration::ZERO)
        .gc_percent(u32::MAX)
        .build();
    let mut m = rt.attach();
    const SLOTS: u64 = 20_000;
    type SlotsRoot = Rootable!['gc => GcLock<'gc, Vec<Gc<'gc, Slot<'gc>>>>];
    let slots: Root<SlotsRoot> = m.mutate(|mc| {
        let v = (0..SLOTS)
            .map(|_| {
                mc.alloc(Slot {
                    leaf: GcCell::new(Some(list(mc, 3, &drops))),
                })
            })
            .collect();
        mc.root(mc.alloc(GcLock::new(v)))
    });
    let collector = Collecting::start(&rt);
    let mut held: Vec<Root<NodeRoot>> = Vec::new();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut during_marks = 0;
    // Until enough calls ran during a mark, with a cap on the calls and the
    // collections (not on time: the assertion below must not depend on the
    // machine's speed).
    let mut calls = 0;
    while during_marks < 200 && !collector.tried_enough(calls) {
        calls += 1;
        m.mutate(|mc| {
            during_marks += usize::from(mc.is_marking());
            let slots = slots.get(mc);
            let slots = slots.read();
            for _ in 0..16 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let s = slots[(rng % SLOTS) as usize];
                match s.leaf.get() {
                    Some(leaf) => {
                        held.push(mc.root(leaf));
                        s.leaf.set(mc, None);
                    }
                    None => {
                        if let Some(r) = held.pop() {
                            s.leaf.set(mc, Some(r.get(mc)));
                        }
                    }
                }
            }
        });
    }
    let cycles = collector.stop();
    assert!(
        during_marks > 0,
        "no mutate call ran during a concurrent mark ({cycles} cycles)"
    );
    assert!(rt.stats().concurrent_cycles > 0);
    m.collect();
    m.runtime().wait_for_drops();
    // Every leaf is where the mutator left it, whole: 3 nodes, values 0 1 2.
    let (leaves, nodes) = m.mutate(|mc| {
        let mut leaves = 0;
        let mut nodes = 0;
        for s in slots.get(mc).read().iter() {
            if let Some(leaf) = s.leaf.get() {
                assert_eq!(sum(Some(leaf)), (3, 3));
                leaves += 1;
                nodes += 3;
            }
        }
        for r in &held {
            assert_eq!(sum(Some(r.get(mc))), (3, 3));
            leaves += 1;
            nodes += 3;
        }
        (leaves, nodes)
    });
    assert_eq!(leaves, SLOTS);
    assert_eq!(nodes, 3 * SLOTS);
    assert_eq!(drops.load(Ordering::Relaxed), 0, "no leaf was freed");
    drop(held);
    drop(slots);
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 3 * SLOTS as usize);
}

/// A weak upgrade during a concurrent mark shades its target: the target
/// may be unreachable from the mark's snapshot, and rooting it must keep
/// it. Fresh weak-only objects are made on every call, so that marks start
/// with some to upgrade.
#[test]
fn a_weak_upgrade_during_a_concurrent_mark_keeps_its_target() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt(2)
        .mark_pause_budget(std::time::Duration::ZERO)
        .min_heap(8 << 20)
        .build();
    let mut m = rt.attach();
    // A long list, so that each mark takes a while.
    let _ballast: Root<NodeRoot> = m.mutate(|mc| mc.root(list(mc, 50_000, &drops)));
    type WeakRoot = Rootable!['gc => GcWeak<'gc, Node<'gc>>];
    let collector = Collecting::start(&rt);
    let mut weaks: Vec<Root<WeakRoot>> = Vec::new();
    let mut revived: Vec<Root<NodeRoot>> = Vec::new();
    // A cap on the calls and the collections, not on time (as above).
    let mut calls = 0;
    while revived.len() < 500 && !collector.tried_enough(calls) {
        calls += 1;
        m.mutate(|mc| {
            let marking = mc.is_marking();
            for w in weaks.drain(..) {
                if let Some(target) = w.get(mc).upgrade() {
                    // Only those upgraded during a mark are kept.
                    if marking {
                        revived.push(mc.root(target));
                    }
                }
            }
            for _ in 0..8 {
                let target = list(mc, 2, &drops);
                weaks.push(mc.root(mc.alloc(GcWeak::new(mc, target))));
            }
        });
    }
    assert!(collector.stop() > 0);
    assert!(
        !revived.is_empty(),
        "no upgrade ran during a concurrent mark"
    );
    m.collect();
    m.runtime().wait_for_drops();
    m.mutate(|mc| {
        for r in &revived {
            assert_eq!(sum(Some(r.get(mc))), (1, 2));
        }
    });
}

#[test]
#[should_panic(expected = "mutate calls of two runtimes cannot nest")]
fn nested_mutate_calls_of_two_runtimes_panic() {
    let (a, b) = (rt(1).build(), rt(1).build());
    let (mut ma, mut mb) = (a.attach(), b.attach());
    ma.mutate(|_| mb.mutate(|_| ()));
}

/// Collecting another runtime inside a `mutate` call could wait for a cycle
/// that waits for this call (one cycle runs at a time process-wide).
#[test]
#[should_panic(expected = "collect called inside a mutate closure")]
fn collecting_another_runtime_inside_mutate_panics() {
    let (a, b) = (rt(1).build(), rt(1).build());
    let mut ma = a.attach();
    ma.mutate(|_| b.collect());
}

/// A structure built in one call from an empty heap is marked by the first
/// cycle after it, a minor one: it began with no old object, so it marked
/// everything reachable and measured the live size as a full cycle does.
/// The cycles after it, which find only young garbage, stay minor: taken
/// for promoted garbage, the structure made a full cycle due at once
/// (old past half the headroom of a goal set for nothing live), which
/// marked it all again (binary-trees' long-lived tree, 96 MB at depth 21).
#[test]
fn a_structure_built_from_an_empty_heap_is_marked_once() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let rt = {
        let events = events.clone();
        rt(1)
            .min_heap(1 << 20)
            .on_cycle(move |e| events.lock().unwrap().push((e.forced, e.minor, e.bytes_marked)))
            .build()
    };
    let mut m = rt.attach();
    // The first cycle: full, and nothing is live.
    m.collect();
    type Structure = Rootable!['gc => Vec<Gc<'gc, [u64; 14]>>];
    let kept: Root<Structure> =
        m.mutate(|mc| mc.root(mc.alloc((0..65_536).map(|i| mc.alloc([i; 14])).collect())));
    // Garbage, until three cycles have run since.
    let since = rt.stats().cycles;
    while rt.stats().cycles < since + 3 {
        m.mutate(|mc| {
            for i in 0..1000_u64 {
                std::hint::black_box(mc.alloc([i; 14]));
            }
        });
    }
    rt.wait_for_cycle();
    let events = events.lock().unwrap().clone();
    let after: Vec<_> = events.iter().filter(|e| !e.0).collect();
    assert!(after.len() >= 3, "{events:?}");
    assert!(after.iter().all(|e| e.1), "a full cycle after the structure: {events:?}");
    // The first of them marked it (65,536 objects of 112 bytes and the
    // array), and every one after found it old.
    assert!(after[0].2 >= 7 << 20, "{events:?}");
    assert_eq!(m.mutate(|mc| kept.get(mc).len()), 65_536);
}
