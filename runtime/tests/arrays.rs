//! Managed arrays and strings (`Gc<[T]>`, `Gc<str>`), and the `GcLock`
//! barrier that records the object written: what an array holds survives,
//! each element is dropped once, filling stops cleanly, the heap limit is an
//! `Err`, and lock writes into old objects keep minor cycles minor.

mod support;

use loam_runtime::{
    AllocErrorKind, CycleEvent, Gc, GcCell, GcLock, Mutation, Root, Rootable, Runtime,
    RuntimeBuilder, Trace,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
// One runtime at a time: drop counts after `collect` (see collector.rs).
use support::serial;

fn rt() -> RuntimeBuilder {
    Runtime::builder().gc_threads(2).ignore_env().verify(true)
}

/// Counts its drops in a shared counter.
#[derive(Clone)]
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Trace, Clone)]
struct Item<'gc> {
    value: u64,
    leaf: Option<Gc<'gc, u64>>,
    #[trace(skip)]
    _drops: Counted,
}

#[test]
fn an_array_keeps_its_elements_and_drops_each_once() {
    let _serial = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt().build();
    let mut m = rt.attach();
    const N: u64 = 3000;
    let items: Root<Rootable!['gc => [Item<'gc>]]> = m.mutate(|mc| {
        let a = mc.alloc_from_iter((0..N as usize).map(|i| Item {
            value: i as u64,
            leaf: Some(mc.alloc(i as u64 * 2)),
            _drops: Counted(drops.clone()),
        }));
        mc.root(a)
    });
    // Garbage arrays beside it, some of them large.
    m.mutate(|mc| {
        for len in [0, 1, 7, 100, 5000] {
            mc.alloc_slice_fill(
                len,
                Item {
                    value: 0,
                    leaf: None,
                    _drops: Counted(drops.clone()),
                },
            );
        }
    });
    m.collect();
    m.runtime().wait_for_drops();
    // The five fill values were dropped when filling, and every element of
    // the garbage arrays by the sweep.
    assert_eq!(drops.load(Ordering::Relaxed), 5 + 1 + 7 + 100 + 5000);
    m.mutate(|mc| {
        let a = items.get(mc);
        assert_eq!(a.len(), N as usize);
        for (i, item) in a.iter().enumerate() {
            assert_eq!(item.value, i as u64);
            assert_eq!(*item.leaf.unwrap(), 2 * i as u64);
        }
    });
    drop(items);
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        5 + 1 + 7 + 100 + 5000 + N as usize
    );
}

#[test]
fn strings_and_copies_of_slices_are_one_object_each() {
    let _serial = serial();
    let rt = rt().build();
    let mut m = rt.attach();
    let kept: Root<Rootable!['gc => str]> = m.mutate(|mc| {
        let s = mc.alloc_str("grüße, 世界");
        assert_eq!(&*s, "grüße, 世界");
        assert_eq!(mc.alloc_str("").len(), 0);
        let big = "x".repeat(1 << 20);
        assert_eq!(&*mc.alloc_str(&big), big);
        let words: Gc<[u32]> = mc.alloc_slice(&[1, 2, 3]);
        assert_eq!(&words[..], &[1, 2, 3]);
        mc.root(s)
    });
    for _ in 0..3 {
        m.collect();
    }
    m.mutate(|mc| assert_eq!(&*kept.get(mc), "grüße, 世界"));
    assert!(
        rt.stats().bytes_freed >= 1 << 20,
        "the large string was freed"
    );
}

#[test]
fn concatenations_copy_every_byte_of_every_length() {
    let _serial = serial();
    let rt = rt().build();
    let mut m = rt.attach();
    // Short parts are copied with overlapping word loads and stores: every
    // length around those widths, each part of distinct bytes in its place
    // (a store before the start would show in the length word). A store
    // past the end lands in the block's slack, which this cannot see.
    let text: Vec<u8> = (0..64_u8)
        .map(|b| b.wrapping_mul(37).wrapping_add(11))
        .collect();
    m.mutate(|mc| {
        for a in 0..=20 {
            for b in 0..=20 {
                let (x, y) = (&text[..a], &text[a..a + b]);
                let both = mc.alloc_concat(&[x, y]);
                let next = mc.alloc_concat(&[y, x]);
                assert_eq!(both.len(), a + b);
                assert_eq!(&both[..a], x, "first part, lengths {a} and {b}");
                assert_eq!(&both[a..], y, "second part, lengths {a} and {b}");
                assert_eq!([&next[..b], &next[b..]], [y, x], "lengths {b} and {a}");
                let words = mc.alloc_concat(&[&[7_u32; 3][..], &[9; 2][..]]);
                assert_eq!(&words[..], &[7, 7, 7, 9, 9]);
            }
        }
    });
}

#[test]
fn an_array_of_cells_is_written_in_place_through_the_barrier() {
    let _serial = serial();
    let minors = Arc::new(AtomicUsize::new(0));
    let rt = {
        let minors = minors.clone();
        rt().min_heap(256 << 10)
            .on_cycle(move |e: &CycleEvent| {
                minors.fetch_add(usize::from(e.minor), Ordering::Relaxed);
            })
            .build()
    };
    let mut m = rt.attach();
    type Slots = Rootable!['gc => [GcCell<'gc, Option<Gc<'gc, u64>>>]];
    const SLOTS: usize = 20_000;
    let slots: Root<Slots> = m.mutate(|mc| mc.root(mc.alloc_slice_fill(SLOTS, GcCell::new(None))));
    // The array is old now.
    m.collect();
    // 4,000 rounds, and on until three minor cycles ran among them (one
    // run in about fifteen of the whole file had fewer in 4,000: the
    // values stored turn old, and once they take half the headroom the
    // cycles due are full ones).
    let mut rounds = 0;
    while rounds < 4000 || (minors.load(Ordering::Relaxed) < 3 && rounds < 400_000) {
        let round = rounds;
        m.mutate(|mc| {
            let a = slots.get(mc);
            for k in 0..8 {
                let i = (round * 8 + k) % SLOTS;
                a[i].set(mc, Some(mc.alloc((round * 8 + k) as u64)));
                mc.alloc([0_u64; 16]); // garbage
            }
        });
        rounds += 1;
    }
    assert!(minors.load(Ordering::Relaxed) >= 3, "minor cycles ran");
    m.collect();
    m.mutate(|mc| {
        let a = slots.get(mc);
        let written = (rounds * 8).min(SLOTS);
        for (i, slot) in a.iter().enumerate().take(written) {
            let v = *slot.get().expect("written");
            assert_eq!(v as usize % SLOTS, i);
        }
    });
}

/// An iterator that lies about its length: `size_hint` says exactly the
/// second field, whatever the first yields.
struct Short<I>(I, usize);

impl<I: Iterator> Iterator for Short<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        self.0.next()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.1, Some(self.1))
    }
}

#[test]
fn an_iterator_that_panics_or_runs_short_leaves_no_array() {
    let _serial = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt().build();
    let mut m = rt.attach();
    let item = |value| Item {
        value,
        leaf: None,
        _drops: Counted(drops.clone()),
    };
    m.mutate(|mc| {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            mc.alloc_from_iter((0..10_usize).map(|i| {
                assert!(i < 6, "the iterator gives up at 6");
                item(i as u64)
            }))
        }));
        assert!(r.is_err());
        // One that gives fewer items than its exact hint promised panics,
        // as one that gives up: handed out cut, a large one kept its
        // whole span under the charge of its cut length, past the heap
        // limit's sight. Its items are dropped with the array.
        let short = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            mc.alloc_from_iter(Short((0..3).map(item), 100))
        }));
        let Err(panic) = short else {
            panic!("an array cut short was handed out")
        };
        let message = *panic.downcast::<String>().unwrap();
        assert!(
            message.contains("gave 3 items where its exact size_hint promised 100"),
            "{message}"
        );
        let large = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            mc.try_alloc_from_iter(Short(0..3_u64, 1 << 20))
        }));
        let Err(panic) = large else {
            panic!("a large array cut short was handed out")
        };
        let message = *panic.downcast::<String>().unwrap();
        assert!(message.contains("promised 1048576"), "{message}");
    });
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 6 + 3);
}

#[test]
fn the_heap_limit_is_an_err_from_every_array_constructor() {
    let _serial = serial();
    let rt = rt().heap_limit(4 << 20).build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let e = mc.try_alloc_slice_fill(1 << 20, 0_u64).unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
        let limit = AllocErrorKind::HeapLimit { limit: 4 << 20 };
        assert_eq!(e.kind(), limit);
        assert!(e.size() >= 8 << 20, "{}", e.size());
        assert_eq!(e.into_inner(), 0);
        let kind = |e: loam_runtime::AllocError<()>| e.kind();
        assert_eq!(
            mc.try_alloc_from_iter(0..(1_u64 << 20))
                .map_err(kind)
                .unwrap_err(),
            limit
        );
        // An iterator of unknown length: gathered, then refused.
        assert_eq!(
            mc.try_alloc_from_iter((0..(1_u64 << 20)).filter(|_| true))
                .map_err(kind)
                .unwrap_err(),
            limit
        );
        assert_eq!(
            mc.try_alloc_str(&"y".repeat(8 << 20))
                .map_err(kind)
                .unwrap_err(),
            limit
        );
        assert_eq!(
            mc.try_alloc_slice(&vec![1_u8; 8 << 20])
                .map_err(kind)
                .unwrap_err(),
            limit
        );
        assert_eq!(
            mc.try_alloc_concat(&[&vec![1_u8; 8 << 20][..]])
                .map_err(kind)
                .unwrap_err(),
            limit
        );
        // Small ones still fit.
        assert_eq!(mc.alloc_slice(&[1_u8, 2])[1], 2);
    });
}

/// An array larger than any allocation can hold: the `try_` constructors
/// return it as their `Err`, as `Vec::try_reserve` does, and the others
/// panic saying so; the heap is unchanged. (The `try_` ones panicked, and
/// a concatenation whose lengths overflowed spoke of an array of
/// `usize::MAX` elements.)
#[test]
fn an_array_past_isize_max_bytes_is_an_err_from_the_try_constructors() {
    let _serial = serial();
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let e = mc.try_alloc_slice_fill(1 << 61, 7_u64).unwrap_err();
        assert!(e.to_string().contains("capacity overflow"), "{e}");
        assert_eq!(e.kind(), AllocErrorKind::CapacityOverflow);
        assert_eq!(e.into_inner(), 7);
        let e = mc
            .try_alloc_from_iter((0..1_usize << 61).map(|_| 0_u64))
            .unwrap_err();
        assert!(e.to_string().contains("capacity overflow"), "{e}");
        // Zero-sized elements: a slice of `usize::MAX` of them is real.
        let many = [(); usize::MAX];
        let e = mc.try_alloc_concat(&[&many[..], &many[..]]).unwrap_err();
        assert!(e.to_string().contains("capacity overflow"), "{e}");
        assert_eq!(e.kind(), AllocErrorKind::CapacityOverflow);
        assert_eq!(mc.alloc_concat(&[&many[..1], &many[..2]]).len(), 3);
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            mc.alloc_slice_fill(1 << 61, 0_u64);
        }))
        .unwrap_err();
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("capacity overflow"), "{text}");
        assert_eq!(mc.alloc_slice(&[1_u8, 2])[1], 2);
    });
    assert!(rt.stats().heap_size < 1 << 30);
}

#[derive(Trace)]
struct Bucket<'gc> {
    items: GcLock<'gc, Vec<Gc<'gc, u64>>>,
}

/// Counts the minor and full cycles of a runtime.
#[derive(Clone, Default)]
struct Cycles {
    minor: Arc<AtomicUsize>,
    full: Arc<AtomicUsize>,
}

impl Cycles {
    fn hook(&self) -> impl Fn(&CycleEvent) + Send + Sync + 'static {
        let c = self.clone();
        move |e| {
            if e.minor {
                c.minor.fetch_add(1, Ordering::Relaxed);
            } else {
                c.full.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn get(&self) -> (usize, usize) {
        (
            self.minor.load(Ordering::Relaxed),
            self.full.load(Ordering::Relaxed),
        )
    }
}

/// Builds `buckets` old buckets of `per` items each, rooted as one array.
fn buckets<'gc>(mc: &Mutation<'gc>, buckets: usize, per: u64) -> Gc<'gc, [Gc<'gc, Bucket<'gc>>]> {
    mc.alloc_from_iter((0..buckets).map(|b| {
        mc.alloc(Bucket {
            items: GcLock::new((0..per).map(|i| mc.alloc((b as u64) << 32 | i)).collect()),
        })
    }))
}

type Buckets = Rootable!['gc => [Gc<'gc, Bucket<'gc>>]];

/// One round of writes: four random buckets each lose their oldest item
/// and get a fresh one (`first + round`, tagged with the bucket), then
/// `garbage` small objects die young.
fn write_round<'gc>(
    mc: &Mutation<'gc>,
    all: Gc<'gc, [Gc<'gc, Bucket<'gc>>]>,
    rng: &mut u64,
    first: u64,
    round: u64,
    garbage: usize,
) {
    for _ in 0..4 {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let b = (*rng % all.len() as u64) as usize;
        all[b].items.write(mc, |v| {
            v.remove(0);
            v.push(mc.alloc((b as u64) << 32 | (first + round)));
        });
    }
    for _ in 0..garbage {
        mc.alloc([round; 8]);
    }
}

/// A large old structure changed through its locks: each write records the
/// bucket written, so the cycles the writes' garbage starts stay minor, and
/// what the writes stored into old buckets survives them (verify mode).
#[test]
fn lock_writes_into_old_objects_keep_minor_cycles_minor() {
    let _serial = serial();
    let cycles = Cycles::default();
    let rt = rt().min_heap(1 << 20).on_cycle(cycles.hook()).build();
    let mut m = rt.attach();
    const B: usize = 2000;
    let root: Root<Buckets> = m.mutate(|mc| mc.root(buckets(mc, B, 8)));
    m.collect();
    let (_, full_before) = cycles.get();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    for round in 0..3000_u64 {
        m.mutate(|mc| write_round(mc, root.get(mc), &mut rng, 8, round, 64));
    }
    // How many cycles run depends on how the collector is scheduled (a
    // busy machine gets fewer, larger ones); with every write forcing a full
    // cycle, as before writes recorded their object, all would be full.
    let (minor, full) = cycles.get();
    assert!(minor >= 3, "{minor} minor cycles");
    assert!(
        full - full_before <= 1 + minor / 4,
        "{} full cycles against {minor} minor ones",
        full - full_before
    );
    m.collect();
    m.mutate(|mc| {
        for (b, bucket) in root.get(mc).iter().enumerate() {
            let v = bucket.items.read();
            assert_eq!(v.len(), 8);
            for x in v.iter() {
                assert_eq!(**x >> 32, b as u64, "bucket {b} holds {:#x}", **x);
            }
        }
    });
}

/// The same during concurrent marks (a zero pause budget), with a second
/// thread writing: a write that meets a marker, before or after it traced
/// the bucket, must not lose what it stored.
#[test]
fn lock_writes_during_concurrent_marks_keep_what_they_store() {
    let _serial = serial();
    let cycles = Cycles::default();
    let rt = rt()
        .min_heap(1 << 20)
        .mark_pause_budget(std::time::Duration::ZERO)
        .on_cycle(cycles.hook())
        .build();
    const B: usize = 3000;
    let root = {
        let mut m = rt.attach();
        let r = m.mutate(|mc| mc.global_root::<Buckets>(buckets(mc, B, 4)));
        m.collect();
        r
    };
    let marking_calls = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..2_u64 {
            let (rt, root, marking_calls) = (&rt, &root, &marking_calls);
            s.spawn(move || {
                let mut m = rt.attach();
                let mut rng = 0x2545_f491_4f6c_dd1d_u64 + t;
                // 4,000 rounds, and on until some call met a mark (the
                // case this test is for; not met, it passed all the same).
                let mut round = 0_u64;
                while round < 4000
                    || (marking_calls.load(Ordering::Relaxed) == 0 && round < 400_000)
                {
                    m.mutate(|mc| {
                        marking_calls.fetch_add(usize::from(mc.is_marking()), Ordering::Relaxed);
                        write_round(mc, root.get(mc), &mut rng, 4, round, 32);
                    });
                    round += 1;
                }
            });
        }
    });
    let mut m = rt.attach();
    m.collect();
    m.mutate(|mc| {
        for (b, bucket) in root.get(mc).iter().enumerate() {
            let v = bucket.items.read();
            assert_eq!(v.len(), 4);
            for x in v.iter() {
                assert_eq!(**x >> 32, b as u64);
            }
        }
    });
    let (minor, _) = cycles.get();
    assert!(minor >= 2, "{minor} minor cycles");
    assert!(
        rt.stats().concurrent_cycles > 0,
        "some marks ran concurrently"
    );
    assert!(
        marking_calls.load(Ordering::Relaxed) > 0,
        "no write met a concurrent mark"
    );
}

/// A lock shared by two objects (through an `Arc`) has no one owner to
/// record: its writes make the next cycle full, and lose nothing.
#[test]
fn a_lock_shared_by_two_objects_falls_back_to_full_cycles() {
    let _serial = serial();
    #[derive(Trace)]
    struct Holder<'gc> {
        lock: Arc<GcLock<'gc, Vec<Gc<'gc, u64>>>>,
    }
    // Enough garbage for several cycles at a goal of 256 KiB and a chunk
    // of room for the mutator's credit.
    const ROUNDS: u64 = 4000;
    let cycles = Cycles::default();
    let rt = rt().min_heap(256 << 10).on_cycle(cycles.hook()).build();
    let mut m = rt.attach();
    type Pair = Rootable!['gc => [Gc<'gc, Holder<'gc>>]];
    let pair: Root<Pair> = m.mutate(|mc| {
        let lock = Arc::new(GcLock::new(Vec::new()));
        let a = mc.alloc(Holder { lock: lock.clone() });
        let b = mc.alloc(Holder { lock });
        mc.root(mc.alloc_slice(&[a, b]))
    });
    m.collect();
    let (_, full_before) = cycles.get();
    for round in 0..ROUNDS {
        m.mutate(|mc| {
            let p = pair.get(mc);
            p[(round % 2) as usize]
                .lock
                .write(mc, |v| v.push(mc.alloc(round)));
            for _ in 0..16 {
                mc.alloc([round; 8]);
            }
        });
    }
    let (_, full) = cycles.get();
    assert!(
        full > full_before + 3,
        "writes to a shared lock force full cycles"
    );
    m.collect();
    m.mutate(|mc| {
        let v = Gc::get(pair.get(mc))[0].lock.read();
        assert_eq!(v.len() as u64, ROUNDS);
        assert!(v.iter().enumerate().all(|(i, x)| **x == i as u64));
    });
}

/// An array too large for the machine fails as out of memory, and gives
/// its charge back: the heap's accounting does not stay at the size asked
/// for (every later call would pace and every cycle be full).
#[test]
fn a_failed_huge_array_leaves_the_accounting_as_it_was() {
    let _serial = serial();
    let rt = rt().build();
    let mut m = rt.attach();
    let e = m.mutate(|mc| {
        let e = mc.try_alloc_slice_fill(1 << 50, 0_u8).unwrap_err();
        assert_eq!(e.kind(), AllocErrorKind::OutOfMemory);
        assert!(e.size() >= 1 << 50, "{}", e.size());
        e.to_string()
    });
    assert!(e.contains("out of memory"), "{e}");
    m.collect();
    let heap = rt.stats().heap_size;
    assert!(heap < 1 << 30, "the heap counts {heap} bytes");
    m.mutate(|mc| assert_eq!(mc.alloc_slice(&[3_u8])[0], 3));
}

/// Makes `n` arrays of 1 MiB, a large object each (past the heap's largest
/// size class, 128 KiB), dropped at once.
fn dead_large_arrays(m: &mut loam_runtime::Mutator, n: usize) {
    for _ in 0..n {
        m.mutate(|mc| assert_eq!(mc.alloc_slice_fill(1 << 20, 1_u8).len(), 1 << 20));
    }
}

/// Large objects ask for a cycle once those made since the last mark pass
/// an eighth of the goal (4 MiB under the default 32 MiB minimum heap),
/// while the last cycle found large garbage; small objects wait for the
/// goal itself. Every amount here is under the goal, so no other trigger
/// starts a cycle.
#[test]
fn large_arrays_ask_for_a_cycle_before_the_goal_once_a_cycle_found_some_dead() {
    let _serial = serial();
    let events = Arc::new(Mutex::new(Vec::<CycleEvent>::new()));
    let log = events.clone();
    let rt = Runtime::builder()
        .gc_threads(2)
        .ignore_env()
        .on_cycle(move |e: &CycleEvent| log.lock().unwrap().push(e.clone()))
        .build();
    let mut m = rt.attach();
    // No cycle has found large garbage yet: 8 MiB of it starts none.
    dead_large_arrays(&mut m, 8);
    rt.wait_for_cycle();
    assert_eq!(
        rt.stats().cycles,
        0,
        "large arrays started a cycle before any found them dead"
    );
    m.collect();
    let cycles = rt.stats().cycles;
    // 16 MiB of small arrays (100 KiB; 17.5 MiB in their 112 KiB class)
    // start none either.
    for _ in 0..160 {
        m.mutate(|mc| assert_eq!(mc.alloc_slice_fill(100 << 10, 1_u8).len(), 100 << 10));
    }
    rt.wait_for_cycle();
    assert_eq!(
        rt.stats().cycles,
        cycles,
        "16 MiB of small arrays started a cycle"
    );
    // 8 MiB of large ones do, and it frees them.
    dead_large_arrays(&mut m, 8);
    rt.wait_for_cycle();
    let stats = rt.stats();
    assert!(
        stats.cycles > cycles,
        "8 MiB of large arrays started no cycle"
    );
    assert!(
        stats.heap_size < 16 << 20,
        "the cycle left {} bytes of dead arrays",
        stats.heap_size
    );
    // The trace says why: the forced cycle is not the large objects', the
    // next one is.
    let events = events.lock().unwrap();
    assert!(
        events[0].forced && !events[0].large_objects,
        "{:?}",
        events[0]
    );
    assert!(
        events[1].large_objects && !events[1].forced,
        "{:?}",
        events[1]
    );
    assert!(
        events[1].to_string().ends_with(" (large objects)"),
        "{}",
        events[1]
    );
}

/// A cycle that finds no large garbage turns the large-object trigger off:
/// large arrays that live (a data set loaded in pieces) are not collected
/// every few MiB for nothing.
#[test]
fn large_arrays_that_live_ask_for_no_cycle_of_their_own() {
    type Arrays = Rootable!['gc => GcLock<'gc, Vec<Gc<'gc, [u8]>>>];
    let _serial = serial();
    let rt = Runtime::builder().gc_threads(2).ignore_env().build();
    let mut m = rt.attach();
    dead_large_arrays(&mut m, 8);
    m.collect();
    let kept: Root<Arrays> = m.mutate(|mc| mc.root(mc.alloc(GcLock::new(Vec::new()))));
    for _ in 0..8 {
        m.mutate(|mc| {
            let a = mc.alloc_slice_fill(1 << 20, 2_u8);
            kept.get(mc).write(mc, |v| v.push(a));
        });
    }
    // Finds the kept arrays live and no large garbage.
    m.collect();
    let cycles = rt.stats().cycles;
    dead_large_arrays(&mut m, 8);
    rt.wait_for_cycle();
    assert_eq!(
        rt.stats().cycles,
        cycles,
        "large arrays asked for a cycle after one found none dead"
    );
    m.mutate(|mc| assert_eq!(kept.get(mc).read().len(), 8));
}

/// A runtime whose every cycle is full and marks concurrently from its
/// start (no pause budget), ragged or stopped, cycling often.
fn full_marks(ragged: bool) -> RuntimeBuilder {
    rt().min_heap(1 << 20)
        .gc_percent(50)
        .generational(false)
        .ragged_handshakes(ragged)
        .mark_pause_budget(std::time::Duration::ZERO)
}

/// Calls per thread of [`write_from_two_threads`].
const ROUNDS: u64 = 1500;

/// Two threads, each in [`ROUNDS`] calls: `write(mc, i, value)` at
/// `writes` random indices `i` below `n`, `value` fresh and holding `i` in
/// its remainder by `n`, then 256 small objects of garbage.
fn write_from_two_threads(
    rt: &Runtime,
    n: usize,
    writes: u64,
    write: impl Fn(&Mutation<'_>, usize, u64) + Sync,
) {
    std::thread::scope(|s| {
        for t in 0..2_u64 {
            let write = &write;
            s.spawn(move || {
                let mut m = rt.attach();
                let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ t;
                for round in 0..ROUNDS {
                    m.mutate(|mc| {
                        for _ in 0..writes {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            let i = (rng % n as u64) as usize;
                            write(mc, i, (round + 1) * n as u64 + i as u64);
                        }
                        for _ in 0..256 {
                            mc.alloc([round; 8]);
                        }
                    });
                }
            });
        }
    });
}

/// An item holding `value`, and a leaf holding it again.
fn item<'gc>(
    mc: &Mutation<'gc>,
    value: u64,
    drops: &Arc<AtomicUsize>,
) -> Option<Gc<'gc, Item<'gc>>> {
    Some(mc.alloc(Item {
        value,
        leaf: Some(mc.alloc(value)),
        _drops: Counted(drops.clone()),
    }))
}

/// A long array is marked a chunk at a time (`mark.rs`, "Long arrays"),
/// by the GC threads and by assists, while two threads overwrite its cells:
/// every full mark, stopped or ragged, reaches each element's value as it
/// stands (verify mode re-marks single-threaded and aborts on a
/// difference), and what was overwritten is freed.
#[test]
fn a_long_array_marked_in_chunks_keeps_what_its_cells_hold() {
    for ragged in [true, false] {
        let _serial = serial();
        let drops = Arc::new(AtomicUsize::new(0));
        let cycles = Cycles::default();
        let rt = full_marks(ragged).on_cycle(cycles.hook()).build();
        type Cells = Rootable!['gc => [GcCell<'gc, Option<Gc<'gc, Item<'gc>>>>]];
        const N: usize = 50_000;
        let root = {
            let mut m = rt.attach();
            m.mutate(|mc| {
                let cells =
                    mc.alloc_from_iter((0..N).map(|i| GcCell::new(item(mc, i as u64, &drops))));
                mc.global_root::<Cells>(cells)
            })
        };
        const WRITES: u64 = 16;
        write_from_two_threads(&rt, N, WRITES, |mc, i, value| {
            root.get(mc)[i].set(mc, item(mc, value, &drops));
        });
        let mut m = rt.attach();
        m.collect();
        m.mutate(|mc| {
            for (i, cell) in root.get(mc).iter().enumerate() {
                let it = cell.get().expect("every cell holds an item");
                assert_eq!(it.value % N as u64, i as u64, "cell {i}");
                assert_eq!(*it.leaf.expect("a leaf"), it.value, "cell {i}'s leaf");
            }
        });
        let (_, full) = cycles.get();
        assert!(full >= 3, "ragged {ragged}: {full} full cycles");
        assert!(
            rt.stats().concurrent_cycles > 0,
            "ragged {ragged}: marks ran concurrently"
        );
        // Every item made but the N the cells hold now was overwritten.
        m.collect();
        m.collect();
        rt.wait_for_drops();
        let made = N + 2 * (ROUNDS * WRITES) as usize;
        assert_eq!(
            drops.load(Ordering::Relaxed),
            made - N,
            "ragged {ragged}: overwritten items freed"
        );
        drop(root);
    }
}

/// The elements of a long array are locks, written by two threads while
/// full marks trace the array a chunk at a time, the locks learning their
/// owner from a chunk's trace: every mark reaches what each lock holds
/// (verify mode). (A chunk met while a writer held one of its locks is
/// traced again alone; that window is too narrow for this test to hit at
/// will: `snapshot_model.rs` models the retrace.)
#[test]
fn a_long_array_of_locks_keeps_what_its_writers_store() {
    for ragged in [true, false] {
        let _serial = serial();
        let rt = full_marks(ragged).build();
        type Locks = Rootable!['gc => [GcLock<'gc, Vec<Gc<'gc, u64>>>]];
        const N: usize = 20_000;
        let root = {
            let mut m = rt.attach();
            m.mutate(|mc| {
                let locks =
                    mc.alloc_from_iter((0..N).map(|i| GcLock::new(vec![mc.alloc(i as u64)])));
                mc.global_root::<Locks>(locks)
            })
        };
        write_from_two_threads(&rt, N, 8, |mc, i, value| {
            root.get(mc)[i].write(mc, |v| {
                // Room made, then the fresh value.
                if v.len() >= 3 {
                    v.remove(0);
                }
                v.push(mc.alloc(value));
            });
        });
        let mut m = rt.attach();
        m.collect();
        m.mutate(|mc| {
            for (i, lock) in root.get(mc).iter().enumerate() {
                let v = lock.read();
                assert!(!v.is_empty() && v.len() <= 3, "lock {i} holds {}", v.len());
                for x in v.iter() {
                    assert_eq!(**x % N as u64, i as u64, "lock {i}");
                }
            }
        });
        assert!(
            rt.stats().concurrent_cycles > 0,
            "ragged {ragged}: marks ran concurrently"
        );
        drop(root);
    }
}

/// An element that needs no tracing, of arrays that grow in place, and
/// counts its drops.
struct Dropped {
    _drops: Counted,
}

// SAFETY: holds no managed pointer; reports nothing.
unsafe impl Trace for Dropped {
    const NEEDS_TRACE: bool = false;
    const GROWS_IN_PLACE: bool = true;
    fn trace(&self, _: &mut loam_runtime::Tracer) {}
}

/// A number, of arrays that grow in place.
#[derive(Clone, Copy, Debug, PartialEq)]
struct W(u64);

// SAFETY: holds no managed pointer; reports nothing.
unsafe impl Trace for W {
    const NEEDS_TRACE: bool = false;
    const GROWS_IN_PLACE: bool = true;
    fn trace(&self, _: &mut loam_runtime::Tracer) {}
}

/// `W`s from a range.
fn ws(r: std::ops::Range<u64>) -> impl Iterator<Item = W> + Clone {
    r.map(W)
}

type Words = Rootable!['gc => [W]];

/// An array made with room grows into it in place, as often as it fits:
/// its elements stay, the new ones are what `fill` made, a slice taken
/// before keeps its length; past the room, or for elements that need
/// tracing, it does not grow. The heap is charged for the length alone,
/// and the sweep credits back exactly what was charged.
#[test]
fn an_array_made_with_room_grows_in_place() {
    let _serial = serial();
    let rt = rt().build();
    let mut m = rt.attach();
    m.collect();
    let before = rt.stats().heap_size;
    let kept: Root<Words> = m.mutate(|mc| {
        let a = mc
            .try_alloc_from_iter_with_room(ws(0..1000), 1 << 20)
            .unwrap();
        assert_eq!(a.len(), 1000);
        let early: &[W] = &a;
        let mut next = 1000;
        for len in [4000, 100_000, 1 << 20] {
            let grown = mc.try_grow_in_place(a, len, || {
                next += 1;
                W(next - 1)
            });
            assert!(grown.unwrap(), "to {len}");
            assert_eq!(a.len(), len);
        }
        assert_eq!(early.len(), 1000, "a slice keeps the length it had");
        assert!(a.iter().copied().eq(ws(0..1 << 20)));
        // Past the room (a block holds what was asked for, up to the end
        // of its last page, or of a cached mapping up to twice its size);
        // shorter (nothing to do); elements that need tracing, or that do
        // not say they grow in place.
        assert!(!mc.try_grow_in_place(a, 3 << 20, || W(0)).unwrap());
        assert!(mc.try_grow_in_place(a, 10, || W(0)).unwrap());
        assert_eq!(a.len(), 1 << 20);
        let traced = mc
            .try_alloc_from_iter_with_room((0..10).map(|_| mc.alloc(1_u8)), 1 << 20)
            .unwrap();
        assert!(!mc.try_grow_in_place(traced, 20, || mc.alloc(2)).unwrap());
        let fixed = mc
            .try_alloc_from_iter_with_room(0..10_u64, 1 << 20)
            .unwrap();
        assert!(!mc.try_grow_in_place(fixed, 20, || 0).unwrap());
        mc.root(a)
    });
    m.collect();
    let held = rt.stats().heap_size;
    assert!(
        held >= before + (8 << 20),
        "{held} bytes held, {before} before"
    );
    assert!(
        held < before + (9 << 20),
        "{held} bytes held, {before} before: the room charged?"
    );
    m.mutate(|mc| assert!(kept.get(mc).iter().copied().eq(ws(0..1 << 20))));
    drop(kept);
    m.collect();
    let after = rt.stats().heap_size;
    assert!(
        after.abs_diff(before) < 64 << 10,
        "{after} bytes after, {before} before: growth charged what the sweep did not credit"
    );
}

/// Room is for large blocks: a small array made "with room" is a plain
/// one (room only its size class's), and so is every array in a
/// `GlobalAlloc` space, which grows in place only within its allocation.
#[test]
fn room_is_for_large_blocks_of_the_heap() {
    let _serial = serial();
    for space in [false, true] {
        let mut b = rt();
        if space {
            b = b.global_alloc(std::alloc::System);
        }
        let rt = b.build();
        let mut m = rt.attach();
        m.mutate(|mc| {
            let small = mc.try_alloc_from_iter_with_room(ws(0..3), 100).unwrap();
            assert!(small.iter().copied().eq(ws(0..3)));
            assert!(!mc.try_grow_in_place(small, 100, || W(0)).unwrap());
            let large = mc.try_alloc_from_iter_with_room(ws(0..3), 1 << 20).unwrap();
            let grew = mc.try_grow_in_place(large, 1 << 20, || W(7)).unwrap();
            assert_eq!(grew, !space, "in a GlobalAlloc space: {space}");
            assert_eq!(large.len(), if space { 3 } else { 1 << 20 });
        });
    }
}

/// At the heap limit a lengthening is the limit's `Err`, and the array is
/// as it was; what fits still grows.
#[test]
fn growing_in_place_past_the_heap_limit_is_an_err() {
    let _serial = serial();
    let rt = rt().heap_limit(16 << 20).build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let a = mc
            .try_alloc_from_iter_with_room(ws(0..1000), 4 << 20)
            .unwrap();
        let e = mc.try_grow_in_place(a, 3 << 20, || W(1)).unwrap_err();
        assert_eq!(e.kind(), AllocErrorKind::HeapLimit { limit: 16 << 20 });
        assert_eq!(a.len(), 1000);
        assert!(a.iter().copied().eq(ws(0..1000)));
        assert!(mc.try_grow_in_place(a, 1 << 20, || W(1)).unwrap());
        assert_eq!(a.len(), 1 << 20);
        // The room is not charged: a second such array fits.
        let b = mc
            .try_alloc_from_iter_with_room(ws(0..1000), 4 << 20)
            .unwrap();
        assert_eq!(b.len(), 1000);
    });
}

/// A `fill` that panics leaves the array as long as the elements it made,
/// each dropped once with the array.
#[test]
fn a_fill_that_panics_leaves_the_elements_it_made() {
    let _serial = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let d = || Dropped {
            _drops: Counted(drops.clone()),
        };
        let a = mc
            .try_alloc_from_iter_with_room((0..100).map(|_| d()), 1 << 16)
            .unwrap();
        let mut made = 0;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            mc.try_grow_in_place(a, 1000, || {
                made += 1;
                assert!(made <= 10, "fill gives up");
                d()
            })
        }));
        assert!(r.is_err());
        assert_eq!(a.len(), 110);
        // Lengthening goes on from there.
        assert!(mc.try_grow_in_place(a, 200, d).unwrap());
        assert_eq!(a.len(), 200);
    });
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 200);
}

/// Two threads lengthen one array while a third reads it: every element
/// below a length read is one a lengthening wrote (none is zero), and the
/// lengthenings take turns (each writes its run of the same number).
#[test]
fn threads_lengthening_one_array_take_turns_and_readers_see_written_elements() {
    let _serial = serial();
    let rt = rt().build();
    const ROOM: usize = 1 << 21;
    let root = {
        let mut m = rt.attach();
        m.mutate(|mc| {
            mc.global_root::<Words>(mc.try_alloc_from_iter_with_room([W(0)], ROOM).unwrap())
        })
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    // The three start together: the lengthenings alone took less time
    // than the reader's first pass.
    let start = std::sync::Barrier::new(3);
    std::thread::scope(|s| {
        let grower = |t: u64| {
            let (rt, root, start) = (&rt, &root, &start);
            move || {
                let mut m = rt.attach();
                start.wait();
                let mut run = 0_u64;
                loop {
                    let full = m.mutate(|mc| {
                        let a = root.get(mc);
                        let len = a.len();
                        if len + 100 > ROOM {
                            return true;
                        }
                        run += 1;
                        // Each element says its index: a reader that met
                        // an unwritten one (a dirty reused block holds
                        // old values) would find another.
                        let mut i = len as u64;
                        let _ = mc
                            .try_grow_in_place(a, len + 100, || {
                                i += 1;
                                W((t << 56) | (run << 32) | (i - 1))
                            })
                            .unwrap();
                        false
                    });
                    if full {
                        break;
                    }
                }
            }
        };
        let a = s.spawn(grower(1));
        let b = s.spawn(grower(2));
        let (rt, root, done, start) = (&rt, &root, &done, &start);
        let reader = s.spawn(move || {
            let mut m = rt.attach();
            let mut reads = 0_u64;
            start.wait();
            // One read at least, however late this thread runs.
            loop {
                m.mutate(|mc| {
                    let a = root.get(mc);
                    let len = a.len();
                    assert!(
                        a[1..len]
                            .iter()
                            .enumerate()
                            .all(|(i, &x)| x.0 & 0xffff_ffff == i as u64 + 1),
                        "an element read unwritten"
                    );
                });
                reads += 1;
                if done.load(Ordering::Relaxed) {
                    break;
                }
            }
            reads
        });
        a.join().unwrap();
        b.join().unwrap();
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
    let mut m = rt.attach();
    m.collect();
    m.mutate(|mc| {
        let a = root.get(mc);
        assert!(a.len() + 100 > ROOM);
        // Runs of 100 of one lengthening, after the first element, each
        // element saying its index.
        for (i, x) in a.iter().enumerate().skip(1) {
            assert_eq!(x.0 & 0xffff_ffff, i as u64, "element {i}");
        }
        for run in a[1..].chunks(100) {
            assert!(
                run.iter().all(|&x| x.0 >> 32 == run[0].0 >> 32),
                "two lengthenings interleaved"
            );
        }
    });
}

/// Arrays made with room, lengthened, cut short by an iterator that gave
/// fewer items than it promised, and dropped: the heap's accounting comes
/// back to where it was (a cut room array gives back the charge of what it
/// did not fill, whose sweep credits only its length). Sixteen rounds, so
/// that a drift of a round's worth shows past the mutator's credit.
#[test]
fn room_arrays_grown_or_cut_leave_the_accounting_as_it_was() {
    let _serial = serial();
    let rt = rt().build();
    let mut m = rt.attach();
    m.collect();
    let before = rt.stats().heap_size;
    for _ in 0..16 {
        m.mutate(|mc| {
            let a = mc
                .try_alloc_from_iter_with_room(ws(0..1000), 1 << 20)
                .unwrap();
            assert!(mc.try_grow_in_place(a, 1 << 19, || W(1)).unwrap());
            let cut = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                mc.try_alloc_from_iter_with_room(Short(ws(0..10), 10_000), 1 << 20)
            }));
            assert!(cut.is_err(), "an array cut short was handed out");
        });
        m.collect();
    }
    m.collect();
    let after = rt.stats().heap_size;
    // The heap counts the mutator's unspent credit, up to 64 KiB; a cut
    // that kept its charge would leave 16 times 80 KB.
    assert!(
        after.abs_diff(before) <= 128 << 10,
        "{after} bytes after, {before} before"
    );
}
