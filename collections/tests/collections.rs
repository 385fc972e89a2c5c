//! The collections with the collector: what only a collection holds
//! survives, what it lets go of is freed (drop counts), a collection shared
//! through a `GlobalRoot` and changed from two threads stays consistent,
//! and bad input gets a clear panic or an `Err` that changes nothing.

use loam_collections::{gc_format, GcDictionary, GcList, GcString, GcStringBuilder};
use loam_runtime::{Gc, GlobalRoot, Root, Rootable, Runtime, RuntimeBuilder, Trace};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One runtime at a time: drop counts after `collect` (see the runtime's
/// tests/collector.rs).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn rt() -> RuntimeBuilder {
    Runtime::builder().gc_threads(2).ignore_env().verify(true)
}

/// A runtime whose every mark goes on concurrently (no pause budget), with
/// a small heap: cycles often, and changes made during marks.
fn concurrent_rt() -> Runtime {
    rt().mark_pause_budget(std::time::Duration::ZERO)
        .min_heap(256 << 10)
        .build()
}

/// The tests' random numbers (xorshift64).
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

struct Tick(Arc<AtomicUsize>);

impl Drop for Tick {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Trace)]
struct Record {
    key: u64,
    #[trace(skip)]
    _tick: Tick,
}

fn record<'gc>(
    mc: &loam_runtime::Mutation<'gc>,
    key: u64,
    drops: &Arc<AtomicUsize>,
) -> Gc<'gc, Record> {
    mc.alloc(Record {
        key,
        _tick: Tick(drops.clone()),
    })
}

fn collect(m: &mut loam_runtime::Mutator) {
    m.collect();
    m.runtime().wait_for_drops();
}

#[test]
fn a_list_keeps_what_it_holds_and_frees_what_it_lets_go() {
    let _serial = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt().build();
    let mut m = rt.attach();
    type L = Rootable!['gc => GcList<'gc, Gc<'gc, Record>>];
    let list: Root<L> = m.mutate(|mc| {
        let l = GcList::new(mc);
        for k in 0..1000 {
            l.push(mc, record(mc, k, &drops));
        }
        mc.root(mc.alloc(l))
    });
    collect(&mut m);
    assert_eq!(
        drops.load(Ordering::Relaxed),
        0,
        "held only by the list, and kept"
    );
    let mut removed = 0;
    m.mutate(|mc| {
        let l = *list.get(mc);
        assert_eq!(l.iter().map(|r| r.key).sum::<u64>(), 999 * 1000 / 2);
        l.pop(mc);
        l.remove(mc, 0);
        l.swap_remove(mc, 10);
        l.retain(mc, |r| r.key % 2 == 0);
        l.truncate(mc, 100);
        l.set(mc, 5, record(mc, 5000, &drops));
        removed = 1000 - l.len();
    });
    collect(&mut m);
    // The one `set` replaced an element: 1000 + 1 made, `len` left.
    let left = m.mutate(|mc| list.get(mc).len());
    assert_eq!(left, 100);

    assert_eq!(drops.load(Ordering::Relaxed), removed + 1);
    m.mutate(|mc| list.get(mc).clear(mc));
    collect(&mut m);
    assert_eq!(drops.load(Ordering::Relaxed), 1001);
}

#[test]
fn a_dictionary_keeps_what_it_holds_and_frees_what_it_lets_go() {
    let _serial = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt().build();
    let mut m = rt.attach();
    type D = Rootable!['gc => GcDictionary<'gc, GcString<'gc>, Gc<'gc, Record>>];
    let dict: Root<D> = m.mutate(|mc| {
        let d = GcDictionary::new(mc);
        for k in 0..1000 {
            d.insert(mc, gc_format!(mc, "k{k}"), record(mc, k, &drops));
        }
        mc.root(mc.alloc(d))
    });
    collect(&mut m);
    assert_eq!(drops.load(Ordering::Relaxed), 0);
    m.mutate(|mc| {
        let d = *dict.get(mc);
        for k in (0..1000).step_by(2) {
            assert_eq!(
                d.remove(mc, format!("k{k}").as_str()).map(|r| r.key),
                Some(k)
            );
        }
        // Replacing a value lets the old one go.
        d.insert(mc, GcString::new(mc, "k1"), record(mc, 1, &drops));
        d.retain(mc, |_, r| r.key < 500);
    });
    collect(&mut m);
    assert_eq!(drops.load(Ordering::Relaxed), 500 + 1 + 250);
    m.mutate(|mc| {
        let d = *dict.get(mc);
        assert_eq!(d.len(), 250);
        for k in (1..500).step_by(2) {
            assert_eq!(d.get(format!("k{k}").as_str()).map(|r| r.key), Some(k));
        }
        d.clear(mc);
    });
    collect(&mut m);
    assert_eq!(drops.load(Ordering::Relaxed), 1001);
}

#[test]
fn collections_survive_minor_cycles_while_old_and_changed() {
    let _serial = serial();
    let minors = Arc::new(AtomicUsize::new(0));
    let rt = {
        let minors = minors.clone();
        rt().min_heap(512 << 10)
            .on_cycle(move |e| {
                minors.fetch_add(usize::from(e.minor), Ordering::Relaxed);
            })
            .build()
    };
    let mut m = rt.attach();
    type D = Rootable!['gc => GcDictionary<'gc, u64, GcList<'gc, GcString<'gc>>>];
    let dict: Root<D> = m.mutate(|mc| mc.root(mc.alloc(GcDictionary::new(mc))));
    const ROUNDS: u64 = 20_000;
    for round in 0..ROUNDS {
        m.mutate(|mc| {
            let d = *dict.get(mc);
            let list = d.entry(mc, round % 64).or_insert_with(|| GcList::new(mc));
            list.push(mc, gc_format!(mc, "{round}"));
            if list.len() > 8 {
                list.remove(mc, 0);
            }
            for _ in 0..4 {
                mc.alloc([round; 16]); // garbage
            }
        });
    }
    let s = rt.stats();
    assert!(
        minors.load(Ordering::Relaxed) >= 3,
        "{} minor cycles of {}",
        s.minor_cycles,
        s.cycles
    );
    m.collect();
    m.mutate(|mc| {
        let d = *dict.get(mc);
        for (k, list) in d.iter() {
            let want: Vec<String> = (0..ROUNDS)
                .filter(|r| r % 64 == k)
                .map(|r| r.to_string())
                .collect();
            let got: Vec<String> = list.iter().map(|s| s.to_string()).collect();
            assert_eq!(got, want[want.len() - 8..]);
        }
    });
}

#[test]
fn a_collection_shared_between_two_threads_stays_consistent() {
    let _serial = serial();
    let rt = rt().min_heap(256 << 10).build();
    type L = Rootable!['gc => GcList<'gc, u64>];
    type D = Rootable!['gc => GcDictionary<'gc, GcString<'gc>, u64>];
    type B = Rootable!['gc => GcStringBuilder<'gc>];
    let (list, dict, builder): (GlobalRoot<L>, GlobalRoot<D>, GlobalRoot<B>) = {
        let mut m = rt.attach();
        m.mutate(|mc| {
            (
                mc.global_root(mc.alloc(GcList::new(mc))),
                mc.global_root(mc.alloc(GcDictionary::new(mc))),
                mc.global_root(mc.alloc(GcStringBuilder::new(mc))),
            )
        })
    };
    const N: u64 = 5000;
    std::thread::scope(|s| {
        for t in 0..2_u64 {
            let (rt, list, dict, builder) = (&rt, &list, &dict, &builder);
            s.spawn(move || {
                let mut m = rt.attach();
                for i in 0..N {
                    m.mutate(|mc| {
                        let v = t * N + i;
                        list.get(mc).push(mc, v);
                        dict.get(mc).insert(mc, gc_format!(mc, "{v}"), v);
                        if i % 3 == 0 {
                            dict.get(mc)
                                .remove(mc, format!("{}", t * N + i / 2).as_str());
                        }
                        builder.get(mc).push_str(mc, if t == 0 { "a" } else { "b" });
                    });
                }
            });
        }
    });
    let mut m = rt.attach();
    m.collect();
    m.mutate(|mc| {
        let l = *list.get(mc);
        let mut all = l.to_vec();
        assert_eq!(all.len(), 2 * N as usize);
        all.sort_unstable();
        assert!(all.iter().copied().eq(0..2 * N), "every push landed once");
        let d = *dict.get(mc);
        let mut model = std::collections::HashMap::new();
        for t in 0..2 {
            for i in 0..N {
                model.insert(t * N + i, ());
                if i % 3 == 0 {
                    model.remove(&(t * N + i / 2));
                }
            }
        }
        assert_eq!(d.len(), model.len());
        for (k, v) in d.iter() {
            assert_eq!(k.parse::<u64>().unwrap(), v);
            assert!(model.contains_key(&v));
        }
        let text = builder.get(mc).to_gc_string(mc);
        assert_eq!(text.len(), 2 * N as usize);
        assert_eq!(text.bytes().filter(|&b| b == b'a').count(), N as usize);
    });
}

/// The thread that writes a list first takes its writer lock without an
/// atomic read-modify-write (the lock's bias); another thread that writes
/// it revokes the bias, and must wait for the owner's run of changes under
/// way: that run stays contiguous in the list.
#[test]
fn a_second_writer_waits_for_the_owners_run_of_changes() {
    let _serial = serial();
    let rt = rt().build();
    type L = Rootable!['gc => GcList<'gc, u64>];
    for round in 0..20_u64 {
        let list: GlobalRoot<L> = rt
            .attach()
            .mutate(|mc| mc.global_root(mc.alloc(GcList::new(mc))));
        let owner_in = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            let (rt, list, owner_in) = (&rt, &list, &owner_in);
            s.spawn(move || {
                let mut m = rt.attach();
                m.mutate(|mc| {
                    let l = *list.get(mc);
                    l.push(mc, 0); // takes the bias
                    let w = l.writer(mc);
                    owner_in.wait();
                    for i in 1..=500 {
                        w.push(i);
                        if i % 50 == 0 {
                            std::thread::yield_now();
                        }
                    }
                });
            });
            s.spawn(move || {
                let mut m = rt.attach();
                owner_in.wait();
                for i in 0..200 {
                    m.mutate(|mc| list.get(mc).push(mc, 1_000_000 + i));
                }
            });
        });
        rt.attach().mutate(|mc| {
            let all = list.get(mc).to_vec();
            assert_eq!(all.len(), 701, "round {round}: every push landed");
            let first = all.iter().position(|&v| v == 1).unwrap();
            assert!(
                all[first..first + 500].iter().copied().eq(1..=500),
                "round {round}: the owner's run was interleaved with another writer's pushes"
            );
            let mut others: Vec<u64> = all.iter().copied().filter(|&v| v >= 1_000_000).collect();
            others.sort_unstable();
            assert!(others.into_iter().eq(1_000_000..1_000_200));
        });
    }
}

/// Lists first written on one thread and then on another, many times over:
/// each is a revocation (a storm of them turns biasing off for a while);
/// whatever the lock's state, no push is lost.
#[test]
fn lists_handed_from_thread_to_thread_lose_no_push() {
    let _serial = serial();
    let rt = rt().build();
    type Ls = Rootable!['gc => GcList<'gc, GcList<'gc, u64>>];
    let lists: GlobalRoot<Ls> = rt.attach().mutate(|mc| {
        let all = GcList::new(mc);
        for _ in 0..400 {
            let l = GcList::new(mc);
            l.push(mc, 1); // this thread's bias
            all.push(mc, l);
        }
        mc.global_root(mc.alloc(all))
    });
    std::thread::scope(|s| {
        for t in 0..2 {
            let (rt, lists) = (&rt, &lists);
            s.spawn(move || {
                let mut m = rt.attach();
                for i in 0..400 {
                    m.mutate(|mc| {
                        let l = lists.get(mc).at(if t == 0 { i } else { 399 - i });
                        for _ in 0..10 {
                            l.push(mc, 1);
                        }
                    });
                }
            });
        }
    });
    rt.attach().mutate(|mc| {
        for l in lists.get(mc).iter() {
            assert_eq!(l.len(), 21);
        }
    });
}

/// An iterator whose size hint is wrong: `extend` still appends exactly
/// what it yields, whether the hint promised more (a lower bound that is
/// too high), less, or nothing at all.
#[test]
fn extend_appends_what_the_iterator_yields_whatever_its_hint() {
    struct Hinted {
        left: u64,
        hint: (usize, Option<usize>),
    }
    impl Iterator for Hinted {
        type Item = u64;
        fn next(&mut self) -> Option<u64> {
            self.left = self.left.checked_sub(1)?;
            Some(self.left)
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            self.hint
        }
    }
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        for (yields, hint) in [
            (5, (10, Some(10))),  // promises more than it gives
            (50, (10, Some(10))), // promises less
            (40, (0, None)),      // promises nothing
            (3, (1000, None)),    // a lower bound far too high
        ] {
            for start in [0_u64, 3, 8] {
                let l = GcList::new(mc);
                for i in 0..start {
                    l.push(mc, 1000 + i);
                }
                l.extend(mc, Hinted { left: yields, hint });
                let mut want: Vec<u64> = (0..start).map(|i| 1000 + i).collect();
                want.extend((0..yields).rev());
                assert_eq!(
                    l.to_vec(),
                    want,
                    "{yields} items hinted {hint:?} after {start}"
                );
                l.assert_valid();
            }
        }
    });
}

/// Extends lists cut to 0, 3 and 9 of 10 elements (slots a truncation
/// left written) and a fresh one with `make()`'s items, and `Vec`s the
/// same way: they must agree.
fn extend_matches_vec<I: Iterator<Item = u64>>(make: impl Fn() -> I) {
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        for cut in [0, 3, 9] {
            let l = GcList::new(mc);
            l.extend(mc, 0..10_u64);
            l.truncate(mc, cut);
            let mut v: Vec<u64> = (0..10).collect();
            v.truncate(cut);
            l.extend(mc, make());
            v.extend(make());
            assert_eq!(l.to_vec(), v, "after a cut to {cut}");
            l.assert_valid();
        }
        let fresh = GcList::from_iter(mc, make());
        assert_eq!(fresh.to_vec(), make().collect::<Vec<_>>());
    });
}

/// An iterator that yields again after a `None` (`Iterator` does not
/// promise fusing): `extend` stops at the first `None`, as `Vec::extend`
/// does, also into slots a truncation left written (where a later item
/// stored plainly would race with a reader holding the longer length).
#[test]
fn extend_stops_at_the_first_none_of_an_iterator_that_is_not_fused() {
    // Some(100), None, Some(102), None, ...
    extend_matches_vec(|| {
        let mut i = 99_u64;
        std::iter::from_fn(move || {
            i += 1;
            (i % 2 == 0).then_some(i)
        })
    });
}

/// The same with an iterator that claims `FusedIterator` (a safe trait) and
/// still yields after a `None`: `Iterator::fuse` trusts the claim, and the
/// list's fill went on past the `None`, writing into slots a reader may
/// load.
#[test]
fn extend_stops_at_the_first_none_of_an_iterator_that_lies_about_being_fused() {
    /// 1, None, 3, 4, 5, None, ...
    struct Liar(u64);
    impl Iterator for Liar {
        type Item = u64;
        fn next(&mut self) -> Option<u64> {
            self.0 += 1;
            (self.0 != 2 && self.0 < 6).then_some(self.0)
        }
    }
    impl std::iter::FusedIterator for Liar {}
    extend_matches_vec(|| Liar(0));
}

/// An iterator that panics partway: the items it gave before stay in the
/// list, as `Vec::extend` keeps them (they were written past the length
/// and lost), into a fresh list, after a truncation (slots written
/// before), and across a growth; `from_iter`'s list is gone with its
/// panic. A mark runs over the list after, with verify on.
#[test]
fn extend_keeps_what_a_panicking_iterator_gave() {
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        for (start, cut, fail_at) in [(0, 0, 5), (10, 3, 7), (10, 10, 30), (4, 4, 0)] {
            let l = GcList::with_capacity(mc, 16);
            l.extend(mc, 0..start as u64);
            l.truncate(mc, cut);
            let mut v: Vec<u64> = (0..start as u64).collect();
            v.truncate(cut);
            let failing = || {
                (100..200_u64)
                    .inspect(move |&i| assert!(i != 100 + fail_at, "an iterator that panics"))
            };
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.extend(mc, failing())));
            assert!(r.is_err());
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| v.extend(failing())));
            assert!(r.is_err());
            assert_eq!(
                l.to_vec(),
                v,
                "start {start}, cut {cut}, failing at {fail_at}"
            );
            l.assert_valid();
            l.push(mc, 7);
            v.push(7);
            assert_eq!(l.to_vec(), v);
        }
    });
    m.collect();
}

#[test]
fn out_of_range_indices_panic_with_the_index_and_the_length() {
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let l = GcList::from_slice(mc, &[1_u64, 2, 3]);
        let msg = |f: &dyn Fn()| {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
            e.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        assert_eq!(
            msg(&|| {
                l.at(3);
            }),
            "GcList::at index (is 3) should be < len (is 3)"
        );
        assert!(msg(&|| {
            l.remove(mc, 7);
        })
        .contains("(is 7)"));
        assert!(msg(&|| {
            l.set(mc, 3, 0);
        })
        .contains("len (is 3)"));
        assert!(msg(&|| l.insert(mc, 5, 0)).contains("should be <= len (is 3)"));
        let s = GcString::new(mc, "héllo");
        assert!(msg(&|| {
            s.substring(mc, 0..2);
        })
        .contains("char boundary"));
        // Bounds at `usize::MAX` are out of range, not wrapped around:
        // they panic (`msg` fails the test if not), in `str`'s own words,
        // which differ between Rust versions.
        msg(&|| {
            s.substring(
                mc,
                (
                    std::ops::Bound::Excluded(usize::MAX),
                    std::ops::Bound::Unbounded,
                ),
            );
        });
        // Past the end: the range and the length (6 bytes).
        let past = msg(&|| {
            s.substring(mc, ..=usize::MAX);
        });
        assert!(past.contains("length 6"), "{past}");
        let past = msg(&|| {
            s.substring(mc, 3..400);
        });
        assert!(
            past.contains("Excluded(400)") && past.contains("length 6"),
            "{past}"
        );
        assert!(msg(&|| {
            s.substring(mc, 7..);
        })
        .contains("length 6"));
        assert_eq!(s.substring(mc, 6..), "");
        assert_eq!(s.substring(mc, ..=5), "héllo");
        // A callback that changes its own collection is refused, not a hang.
        assert!(msg(&|| l.sort_by(mc, |a, b| {
            l.push(mc, 9);
            a.cmp(b)
        }))
        .contains("changed from inside one of its own callbacks"));
        assert_eq!(l.to_vec(), [1, 2, 3], "the list is unchanged");
    });
}

/// A `push` (the one change that skips the re-entrance check on its fast
/// path) from inside each operation that runs the caller's code under the
/// list's lock panics, leaves the list as the operation left it, and the
/// lock works after, on its fast path and from another thread.
#[test]
fn a_push_from_inside_the_lists_own_callbacks_panics() {
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let msg = |f: &dyn Fn()| {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
            e.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        const REFUSED: &str = "changed from inside one of its own callbacks";
        let l = GcList::from_slice(mc, &[3_u64, 1, 2]);
        l.push(mc, 4); // this thread owns the bias
        let pushing = |what: &str, op: &dyn Fn()| {
            let before = l.to_vec();
            let m = msg(op);
            assert!(m.contains(REFUSED), "{what}: {m}");
            assert_eq!(l.to_vec(), before, "{what}: the list is unchanged");
            l.push(mc, 5);
            assert_eq!(l.pop(mc), Some(5), "{what}: the lock works after");
        };
        pushing("sort_by", &|| {
            l.sort_by(mc, |a, b| {
                l.push(mc, 9);
                a.cmp(b)
            })
        });
        pushing("sort_by_key", &|| {
            l.sort_by_key(mc, |a| {
                l.push(mc, 9);
                *a
            })
        });
        pushing("retain", &|| {
            l.retain(mc, |_| {
                l.push(mc, 9);
                true
            })
        });
        pushing("a writer", &|| {
            let w = l.writer(mc);
            l.push(mc, 9);
            drop(w);
        });
        pushing("a writer's own push, then the list's", &|| {
            let w = l.writer(mc);
            w.push(8);
            w.pop();
            l.push(mc, 9);
        });
        let pushing_extend = |what: &str, op: &dyn Fn()| {
            // The iterator pushes before it yields: nothing is appended.
            let before = l.to_vec();
            let m = msg(op);
            assert!(m.contains(REFUSED), "{what}: {m}");
            assert_eq!(l.to_vec()[..before.len()], before[..], "{what}");
            l.truncate(mc, before.len());
        };
        pushing_extend("extend", &|| {
            l.extend(mc, (0..3_u64).inspect(|_| l.push(mc, 9)));
        });
        pushing_extend("try_extend", &|| {
            let _ = l.try_extend(mc, (0..3_u64).inspect(|_| l.push(mc, 9)));
        });
        // Nested operations that call out, too.
        pushing("retain inside sort_by", &|| {
            l.sort_by(mc, |a, b| {
                l.retain(mc, |_| true);
                a.cmp(b)
            })
        });
        // A push from a callback of another list is no re-entrance.
        let other = GcList::from_slice(mc, &[1_u64, 2]);
        other.push(mc, 3);
        l.sort_by(mc, |a, b| {
            other.push(mc, 0);
            a.cmp(b)
        });
        assert!(other.len() > 3);
        assert_eq!(l.to_vec(), [1, 2, 3, 4]);
    });
    // And another thread can still take the lock (revoking the bias).
    type L = Rootable!['gc => GcList<'gc, u64>];
    let kept: GlobalRoot<L> = m.mutate(|mc| {
        let l = GcList::from_slice(mc, &[1_u64]);
        l.push(mc, 2);
        mc.global_root(mc.alloc(l))
    });
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut m2 = rt.attach();
            m2.mutate(|mc| kept.get(mc).push(mc, 3));
        });
    });
    m.mutate(|mc| {
        let l = kept.get(mc);
        l.push(mc, 4);
        assert_eq!(l.to_vec(), [1, 2, 3, 4]);
    });
}

#[test]
fn a_heap_limit_err_leaves_the_collection_unchanged() {
    let _serial = serial();
    let rt = rt().heap_limit(8 << 20).build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let l = GcList::new(mc);
        let err = loop {
            match l.try_push(mc, l.len() as u64) {
                Ok(()) => {}
                Err(e) => break e,
            }
        };
        let n = l.len();
        assert!(n > 1000, "{n}");
        assert_eq!(err.into_inner(), n as u64, "the value comes back");
        assert!(l.iter().eq(0..n as u64), "nothing lost, nothing added");
        // The array is full: an insert needs the same growth.
        let err = l.try_insert(mc, 0, 7).unwrap_err();
        assert_eq!(err.into_inner(), 7, "the value comes back");
        assert!(
            l.iter().eq(0..n as u64),
            "insert: nothing lost, nothing added"
        );
        // Every way to grow it fails alike, and takes nothing.
        let cap = l.capacity();
        assert!(l.try_reserve(mc, 1).is_err());
        assert!(l.writer(mc).try_reserve(1).is_err());
        let mut more = n as u64..n as u64 + 10;
        assert!(l.try_extend(mc, more.by_ref()).is_err());
        assert_eq!(
            more.next(),
            Some(n as u64),
            "an exact-size iterator keeps its items"
        );
        let mut taken = 0;
        let filtered = (0..10_u64).inspect(|_| taken += 1).filter(|_| true);
        assert!(l.try_extend(mc, filtered).is_err());
        assert_eq!(
            taken, 1,
            "growth waits for an item when the size is unknown"
        );
        assert_eq!(l.capacity(), cap, "capacity unchanged");
        assert!(
            l.iter().eq(0..n as u64),
            "try_ forms: nothing lost, nothing added"
        );
        let overflow = l.try_reserve(mc, usize::MAX).unwrap_err();
        assert_eq!(
            overflow.kind(),
            loam_runtime::AllocErrorKind::CapacityOverflow
        );
        let panic =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.reserve(mc, usize::MAX)));
        let panic = *panic.unwrap_err().downcast::<String>().unwrap();
        assert!(panic.contains("GcList::reserve"), "{panic}");
        assert!(
            l.iter().eq(0..n as u64),
            "a refused reserve changes nothing"
        );
        assert!(GcList::try_from_slice(mc, &vec![1_u64; 1 << 20]).is_err());
        assert!(GcList::try_from_iter(mc, 0..1_u64 << 20).is_err());
        // The writer lock was let go on the way out.
        assert_eq!(l.pop(mc), Some(n as u64 - 1));
        // After a pop, room for the one element fails too: a push needs
        // none, and the list is unchanged again.
        assert!(l.try_reserve(mc, 1).is_ok());
        assert!(l.try_reserve(mc, 2).is_err());
        assert!(l.try_extend(mc, [7, 8]).is_err());
        assert!(l.iter().eq(0..n as u64 - 1), "after a pop: unchanged");
        // An extend that fits only after growth it cannot have gives the
        // items it appended back: the list as it was.
        let mut k = 0;
        let err = l.try_extend(
            mc,
            std::iter::from_fn(|| {
                (k < 5).then(|| {
                    k += 1;
                    100 + k
                })
            }),
        );
        assert!(err.is_err());
        assert!(
            l.iter().eq(0..n as u64 - 1),
            "a partial extend is cut off again"
        );
        let d = GcDictionary::new(mc);
        let mut i = 0_u64;
        let err = loop {
            match d.try_insert(mc, i, i) {
                Ok(_) => i += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(err.into_inner(), (i, i));
        assert!(i > 0, "no insert fitted");
        assert_eq!(d.len(), i as usize);
        assert!(d.iter().all(|(k, v)| k == v && k < i));
        // A reserve past the limit leaves it as it was, its capacity too.
        let cap = d.capacity();
        assert!(d.try_reserve(mc, 1 << 20).is_err());
        let overflow = d.try_reserve(mc, usize::MAX).unwrap_err();
        assert_eq!(
            overflow.kind(),
            loam_runtime::AllocErrorKind::CapacityOverflow
        );
        assert_eq!((d.len(), d.capacity()), (i as usize, cap));
        d.assert_valid();
        assert!((0..i).all(|k| d.get(&k) == Some(k)));
        assert!(GcString::try_new(mc, &"z".repeat(16 << 20)).is_err());
        let b = GcStringBuilder::new(mc);
        b.push_str(mc, "kept");
        assert!(b.try_push_str(mc, &"z".repeat(16 << 20)).is_err());
        assert_eq!(b.to_gc_string(mc), "kept");
    });
    // Nothing was rooted: the next call collects first, and has room.
    m.mutate(|mc| GcList::from_slice(mc, &[1_u64; 1000]).len());
}

/// The `try_` forms of a string's derived operations and of a dictionary
/// entry's inserts give the heap limit's `Err` (the entry its value back)
/// where the plain forms panic, and change nothing; an operation that
/// needs no memory (a whole-string substring, a case conversion that
/// changes no byte, a present key) still succeeds at the limit.
#[test]
fn string_and_entry_try_forms_give_the_limit_err() {
    let _serial = serial();
    let rt = rt().heap_limit(8 << 20).build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let text = format!(" {} ", "ab".repeat(3 << 19));
        let s = GcString::new(mc, &text);
        // Upper case, to go lower; not ASCII, for the Unicode mapping.
        let upper = GcString::new(mc, "AB");
        let accents = GcString::new(mc, "été");
        let d = GcDictionary::new(mc);
        let mut k = 0_u64;
        while d.len() < d.capacity() || d.is_empty() {
            d.insert(mc, k, k);
            k += 1;
        }
        // Fill the heap to the limit: arrays of smaller and smaller sizes,
        // then 16-byte objects until one fails (what is left then is less
        // than any string or dictionary growth needs, whichever check runs
        // first).
        let mut held = Vec::new();
        for chunk in [1 << 20, 64 << 10, 4 << 10, 1 << 10] {
            while let Ok(a) = mc.try_alloc_slice_fill(chunk, 0_u8) {
                held.push(a);
            }
        }
        assert!(!held.is_empty());
        let mut words = Vec::new();
        while let Ok(w) = mc.try_alloc(0_u64) {
            words.push(w);
        }
        let limited = |e: loam_runtime::AllocErrorKind| {
            matches!(e, loam_runtime::AllocErrorKind::HeapLimit { .. })
        };
        assert!(limited(
            s.try_substring(mc, 1..s.len() - 1).unwrap_err().kind()
        ));
        assert!(limited(s.try_trim(mc).unwrap_err().kind()));
        assert!(limited(s.try_trim_start(mc).unwrap_err().kind()));
        assert!(limited(s.try_trim_end(mc).unwrap_err().kind()));
        assert!(limited(s.try_to_uppercase(mc).unwrap_err().kind()));
        assert!(limited(s.try_split(mc, 'b').unwrap_err().kind()));
        assert!(limited(s.try_split_str(mc, "ab").unwrap_err().kind()));
        assert!(limited(upper.try_to_lowercase(mc).unwrap_err().kind()));
        assert!(limited(accents.try_to_uppercase(mc).unwrap_err().kind()));
        let e = GcString::try_format(mc, format_args!("{}{}", text, 7)).unwrap_err();
        assert!(limited(e.kind()));
        let e = GcString::try_format(mc, format_args!("a literal")).unwrap_err();
        assert!(limited(e.kind()));
        // No memory needed: the string itself.
        assert!(GcString::ptr_eq(s.try_substring(mc, ..).unwrap(), s));
        assert!(GcString::ptr_eq(s.try_to_lowercase(mc).unwrap(), s));
        // A vacant entry of a full dictionary needs growth: its value
        // comes back; a present key needs nothing.
        let (len, cap) = (d.len(), d.capacity());
        let e = d.entry(mc, k).try_or_insert(99).unwrap_err();
        assert!(limited(e.kind()));
        assert_eq!(e.into_inner(), 99);
        let e = d.entry(mc, k).try_or_insert_with(|| 98).unwrap_err();
        assert!(limited(e.kind()));
        assert_eq!(e.into_inner(), 98);
        match d.entry(mc, k) {
            loam_collections::DictEntry::Vacant(v) => {
                let e = v.try_insert(97).unwrap_err();
                assert!(limited(e.kind()));
                assert_eq!(e.into_inner(), 97)
            }
            loam_collections::DictEntry::Occupied(_) => panic!("key {k} present"),
        }
        assert_eq!((d.len(), d.capacity()), (len, cap));
        assert_eq!(d.entry(mc, 0).try_or_insert(5).unwrap(), 0);
        d.assert_valid();
        assert!((0..k).all(|i| d.get(&i) == Some(i)));
        // The plain forms panic with the limit's message (and let the
        // dictionary's lock go: the checks after use it).
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.trim(mc)));
        let panic = *panic.unwrap_err().downcast::<String>().unwrap();
        assert!(panic.contains("limit"), "{panic}");
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            d.entry(mc, k).or_insert(96)
        }));
        let panic = *panic.unwrap_err().downcast::<String>().unwrap();
        assert!(
            panic.contains("GcDictionary::entry") && panic.contains("limit"),
            "{panic}"
        );
        assert_eq!(d.get(&k), None);
        assert_eq!(d.entry(mc, 1).or_insert(5), 1);
        drop((held, words));
    });
}

/// `GcDictionary::reserve` makes room for what it is asked: on a
/// dictionary with entries both arrays at once, so that the inserts it
/// was made for allocate nothing; on an empty one (new or cleared) the
/// index now and the entries array at the first insert (its spares are
/// copies of an entry). A collection between the cases. (Concurrent
/// readers and marks: `collections_changed_during_concurrent_marks_lose_nothing`.)
#[test]
fn reserve_makes_room_for_the_inserts_it_was_asked_for() {
    let rt = rt().build();
    let mut m = rt.attach();
    for start in [0_u64, 1, 5, 100] {
        for additional in [0_usize, 1, 7, 1000, 5000] {
            m.mutate(|mc| {
                let d = GcDictionary::new(mc);
                for k in 0..start {
                    d.insert(mc, k, k + 1);
                }
                d.reserve(mc, additional);
                let need = start as usize + additional;
                assert!(
                    d.capacity() >= need,
                    "{start} + {additional}: {}",
                    d.capacity()
                );
                d.assert_valid();
                // The first insert into an empty dictionary makes its
                // entries array, as big as was reserved.
                let mut cap = d.capacity();
                for k in start..need as u64 {
                    d.insert(mc, k, k + 1);
                    if k == 0 {
                        cap = d.capacity();
                        assert!(cap >= need, "{additional}: {cap}");
                    }
                    assert_eq!(d.capacity(), cap, "{start} + {additional}: grew at {k}");
                }
                d.assert_valid();
                assert!((0..need as u64).all(|k| d.get(&k) == Some(k + 1)));
            });
            m.collect();
        }
    }
    // A cleared dictionary keeps its arrays; a reserve past them makes
    // the entries array at the first insert past the old one.
    m.mutate(|mc| {
        let d = GcDictionary::from_iter(mc, (0..10_u64).map(|k| (k, k)));
        d.clear(mc);
        d.reserve(mc, 3000);
        assert!(d.capacity() >= 3000);
        let cap = d.capacity();
        for k in 0..3000_u64 {
            d.insert(mc, k, k);
            assert_eq!(d.capacity(), cap, "grew at {k}");
        }
        d.assert_valid();
        assert!((0..3000).all(|k| d.get(&k) == Some(k)));
    });
}

/// What `try_reserve` promises at the heap limit: on a dictionary with
/// entries, an `Ok` means the reserved inserts need no memory, so they
/// all succeed with the heap otherwise full; on an empty one, the first
/// insert makes the entries array, and then the rest need none either.
#[test]
fn after_try_reserve_the_inserts_need_no_memory() {
    let _serial = serial();
    let rt = rt().heap_limit(8 << 20).build();
    let mut m = rt.attach();
    // `None`: a dictionary of 10 entries, cleared (its arrays kept, too
    // small for the reserve).
    for start in [Some(0_u64), Some(1), Some(40), None] {
        m.mutate(|mc| {
            let d = GcDictionary::new(mc);
            for k in 0..start.unwrap_or(10) {
                d.insert(mc, k, k);
            }
            if start.is_none() {
                d.clear(mc);
            }
            let start = start.unwrap_or(0);
            d.try_reserve(mc, 20_000).expect("room for 20,000 entries");
            if start == 0 {
                d.insert(mc, 0, 0);
            }
            // The rest of the heap, to the last small block (kept live by
            // being allocated in this call).
            let mut filler = 0;
            while mc.try_alloc(0_u64).is_ok() {
                filler += 1;
            }
            assert!(filler > 0 && mc.try_alloc(0_u64).is_err());
            for k in start.max(1)..start + 20_000 {
                assert!(
                    d.try_insert(mc, k, k).is_ok(),
                    "{start}: insert {k} needed memory"
                );
            }
            d.assert_valid();
            assert_eq!(d.len() as u64, start + 20_000);
            assert!((0..start + 20_000).all(|k| d.get(&k) == Some(k)));
        });
    }
}

/// `GcDictionary::retain` at the heap limit: it compacts in place, as
/// `HashMap::retain` does, where it had rebuilt the kept entries into new
/// arrays and panicked with the heap full.
#[test]
fn retain_needs_no_memory_at_the_heap_limit() {
    let _serial = serial();
    let rt = rt().heap_limit(8 << 20).build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let d = GcDictionary::new(mc);
        let mut n = 0_u64;
        while d.try_insert(mc, n, n * 10).is_ok() {
            n += 1;
        }
        // The rest of the heap, to the last small block (kept live by
        // being allocated in this call).
        let mut filler = 0;
        while mc.try_alloc(0_u64).is_ok() {
            filler += 1;
        }
        assert!(filler > 0 && mc.try_alloc(0_u64).is_err());
        d.retain(mc, |k, v| {
            assert_eq!(v, k * 10);
            k % 3 != 0
        });
        d.assert_valid();
        assert_eq!(d.len() as u64, n - n.div_ceil(3));
        assert!(
            d.iter().map(|(k, _)| k).eq((0..n).filter(|k| k % 3 != 0)),
            "kept, in order"
        );
        for k in 0..n {
            assert_eq!(d.get(&k), (k % 3 != 0).then_some(k * 10), "{k}");
        }
        // The room it made takes the removed keys back without memory.
        for k in (0..n).filter(|k| k % 3 == 0) {
            assert!(d.try_insert(mc, k, k * 10).is_ok(), "{k}");
        }
        d.assert_valid();
        assert_eq!(d.len() as u64, n);
    });
}

/// Holds the marker that traces it, while armed, until the test says a
/// call has met the mark: a concurrent mark then lasts until a mutator's
/// call begins inside it, however the scheduler treats the threads.
/// Without it, on a busy 2-core machine, the marks often ended before the
/// mutator ran again: a test that needed a push inside one failed in 3 – 6
/// runs of 12 beside a busy loop. The wait gives up after `GATE_YIELDS`
/// yields, so that a gate met where no call can begin (a stopped world)
/// only slows that cycle; nothing is timed, and the test's outcome never
/// depends on it.
struct MarkGate;

/// Yields a held marker makes before it goes on anyway.
const GATE_YIELDS: u32 = 1_000_000;

static GATE_ARMED: AtomicBool = AtomicBool::new(false);
static GATE_MET: AtomicBool = AtomicBool::new(false);

// SAFETY: holds no managed pointer, so it reports nothing (1, 2); traced
// (3) only to hold its marker for a while; no `Drop` (4).
unsafe impl Trace for MarkGate {
    fn trace(&self, _: &mut loam_runtime::Tracer) {
        for _ in 0..GATE_YIELDS {
            if !GATE_ARMED.load(Ordering::Acquire) || GATE_MET.load(Ordering::Acquire) {
                break;
            }
            std::thread::yield_now();
        }
    }
}

/// A push into a slot whose old value the collector has freed, during a
/// concurrent mark: the old value must not be shaded (verify mode aborts on
/// a freed object reached; without it, the mark would read a free block).
/// The freed values are of another size class than what is allocated
/// after, so their blocks stay free (and poisoned) meanwhile.
#[test]
fn a_push_into_a_freed_slot_during_a_mark_does_not_touch_the_old_value() {
    let _serial = serial();
    let rt = concurrent_rt();
    let mut m = rt.attach();
    type L = Rootable!['gc => GcList<'gc, Gc<'gc, [u64]>>];
    type Big = Rootable!['gc => [Gc<'gc, u64>]];
    let list: Root<L> = m.mutate(|mc| mc.root(mc.alloc(GcList::new(mc))));
    // Live objects, so that every mark has work to do concurrently.
    let _big: Root<Big> =
        m.mutate(|mc| mc.root(mc.alloc_from_iter((0..20_000_u64).map(|i| mc.alloc(i)))));
    // Keeps each mark of the pushing phase open until a push has met it.
    let _gate: Root<Rootable![MarkGate]> = m.mutate(|mc| mc.root(mc.alloc(MarkGate)));
    let keep: Root<L> = m.mutate(|mc| mc.root(mc.alloc(GcList::new(mc))));
    let mut pushed_over_freed = 0;
    for _ in 0..50 {
        // Slots 0..4 get 256-byte arrays, cut off with no mark under way
        // (no shading), and a full cycle frees them.
        // (A cycle the allocations started may be marking: wait it out.)
        while !m.mutate(|mc| {
            if mc.is_marking() {
                return false;
            }
            let l = *list.get(mc);
            for k in 0..4 {
                l.push(mc, mc.alloc_slice_fill(32, k));
            }
            l.truncate(mc, 0);
            // One kept beside them holds their page in its size class.
            keep.get(mc).push(mc, mc.alloc_slice_fill(32, 9));
            true
        }) {}
        m.collect();
        // Then small arrays pushed over them while another thread's
        // collection marks.
        // Tries until a push lands in a mark, or the other thread has run
        // 20 cycles without one (counted, not timed: on a busy machine the
        // collecting thread may not run at all for a while, and a fixed
        // number of tries ran out before it did).
        let stop = std::sync::atomic::AtomicBool::new(false);
        let cycles = std::sync::atomic::AtomicU32::new(0);
        GATE_MET.store(false, Ordering::Release);
        GATE_ARMED.store(true, Ordering::Release);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    rt.collect();
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            });
            while cycles.load(Ordering::Relaxed) < 20 {
                std::thread::yield_now();
                let pushed = m.mutate(|mc| {
                    if !mc.is_marking() {
                        return false;
                    }
                    let l = *list.get(mc);
                    for k in 0..4 {
                        l.push(mc, mc.alloc_slice(&[k]));
                    }
                    l.truncate(mc, 0);
                    true
                });
                if pushed {
                    pushed_over_freed += 1;
                    break;
                }
            }
            GATE_MET.store(true, Ordering::Release);
            stop.store(true, Ordering::Relaxed);
        });
        GATE_ARMED.store(false, Ordering::Release);
    }
    assert!(
        pushed_over_freed > 0,
        "no push ran during a concurrent mark"
    );
}

/// Readers on one thread, a writer removing and re-inserting on another: a
/// lookup that finds its key returns that key's value, never the value of
/// an entry a removal moved into its place, and a key that is never
/// removed is always found (removals move entries and index slots).
#[test]
fn a_lookup_racing_removals_returns_its_own_keys_value() {
    let _serial = serial();
    let rt = rt().verify(false).build();
    type D = Rootable!['gc => GcDictionary<'gc, u64, u64>];
    let dict: GlobalRoot<D> = {
        let mut m = rt.attach();
        m.mutate(|mc| {
            let d = GcDictionary::new(mc);
            // 0..64 come and go; 64..96 stay throughout.
            for k in 0..96_u64 {
                d.insert(mc, k, k * 1000);
            }
            mc.global_root(mc.alloc(d))
        })
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut m = rt.attach();
            for round in 0..20_000_u64 {
                m.mutate(|mc| {
                    let d = *dict.get(mc);
                    for k in (round % 7..64).step_by(7) {
                        d.remove(mc, &k);
                    }
                    for k in (round % 7..64).step_by(7) {
                        d.insert(mc, k, k * 1000);
                    }
                });
            }
            stop.store(true, Ordering::Relaxed);
        });
        let mut m = rt.attach();
        let mut found = 0_u64;
        while !stop.load(Ordering::Relaxed) {
            m.mutate(|mc| {
                let d = *dict.get(mc);
                for k in 0..96_u64 {
                    match d.get(&k) {
                        Some(v) => {
                            assert_eq!(v, k * 1000, "key {k}");
                            found += 1;
                        }
                        None => assert!(k < 64, "key {k}, never removed, was missed"),
                    }
                }
            });
        }
        assert!(found > 0);
    });
}

#[test]
fn a_panicking_retain_predicate_leaves_a_consistent_list() {
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let l = GcList::from_slice(mc, &(0..10_u64).collect::<Vec<_>>());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            l.retain(mc, |x| {
                assert!(x != 6, "no sixes");
                x % 2 == 0
            })
        }));
        assert!(r.is_err());
        // Asked about 0..6 (kept the even ones), panicked on 6: 6.. stay.
        assert_eq!(l.to_vec(), [0, 2, 4, 6, 7, 8, 9]);
    });
}

/// What a collection stores is not promoted by the store (its `GcLog`
/// records the collection instead): collections made and dropped between
/// cycles die with their elements in minor cycles. (With a barrier that
/// marks each stored object, every element would survive to the next full
/// cycle.)
#[test]
fn elements_of_short_lived_collections_die_in_minor_cycles() {
    let _serial = serial();
    let freed_by_minor = Arc::new(AtomicUsize::new(0));
    let minors = Arc::new(AtomicUsize::new(0));
    let rt = {
        let (freed, minors) = (freed_by_minor.clone(), minors.clone());
        rt().min_heap(512 << 10)
            .on_cycle(move |e| {
                if e.minor {
                    minors.fetch_add(1, Ordering::Relaxed);
                    freed.fetch_add(e.objects_freed as usize, Ordering::Relaxed);
                }
            })
            .build()
    };
    let mut m = rt.attach();
    const ROUNDS: u64 = 3000;
    const PER: u64 = 150; // elements per round
    for round in 0..ROUNDS {
        m.mutate(|mc| {
            let l = GcList::new(mc);
            for i in 0..100 {
                l.push(mc, mc.alloc(round + i));
            }
            let d = GcDictionary::new(mc);
            for i in 0..50 {
                d.insert(mc, i, mc.alloc(round * i));
            }
            assert_eq!(l.len() + d.len(), PER as usize);
        });
    }
    let minors = minors.load(Ordering::Relaxed);
    let freed = freed_by_minor.load(Ordering::Relaxed) as u64;
    assert!(minors >= 3, "{minors} minor cycles");
    // Each minor cycle frees what was made since the last one, elements
    // included: most of the elements made overall.
    assert!(
        freed > ROUNDS * PER / 2,
        "minor cycles freed {freed} objects of the {} elements made",
        ROUNDS * PER
    );
}

/// Runs `work` in `mutate` calls while another thread forces cycles whose
/// marks all run concurrently (no pause budget), until 20 calls ran during
/// a mark; returns the objects the marks marked beyond the rooted data
/// (200,000 objects, for the marks to last), and the calls during marks.
/// `work` makes `ELEMENTS` young objects a call and lets them go: a mark
/// that marks them is a barrier promoting them.
fn marked_by(work: impl Fn(&loam_runtime::Mutation<'_>)) -> (u64, u64) {
    let marked = Arc::new(Mutex::new(Vec::new()));
    let rt = {
        let marked = marked.clone();
        Runtime::builder()
            .gc_threads(1)
            .ignore_env()
            .mark_pause_budget(std::time::Duration::ZERO)
            .min_heap(256 << 20)
            .on_cycle(move |e| {
                marked
                    .lock()
                    .unwrap()
                    .push((e.concurrent, e.objects_marked))
            })
            .build()
    };
    let mut m = rt.attach();
    type Chain = Rootable!['gc => GcList<'gc, Gc<'gc, u64>>];
    let chain: Root<Chain> = m.mutate(|mc| {
        let l = GcList::new(mc);
        for i in 0..200_000 {
            l.push(mc, mc.alloc(i));
        }
        mc.root(mc.alloc(l))
    });
    // What a mark of the rooted data alone marks.
    m.collect();
    let base = marked.lock().unwrap().last().unwrap().1;
    marked.lock().unwrap().clear();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut in_marks = 0_u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rt.collect();
            }
        });
        let mut calls = 0;
        while in_marks < 20 && calls < 200_000 {
            calls += 1;
            m.mutate(|mc| {
                in_marks += u64::from(mc.is_marking());
                work(mc);
            });
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(in_marks >= 20, "{in_marks} calls ran during a mark");
    m.mutate(|mc| assert_eq!(chain.get(mc).len(), 200_000));
    let marked = marked.lock().unwrap();
    assert!(marked.iter().any(|(c, _)| *c), "no concurrent cycle ran");
    let extra = marked.iter().map(|&(_, n)| n.saturating_sub(base)).sum();
    (extra, in_marks)
}

const ELEMENTS: u64 = 500;

/// Asserts that `work` (a call's worth of young objects, `ELEMENTS` of
/// them) is not marked by the marks it runs in: a barrier that promoted
/// them would mark `ELEMENTS` a call; a tenth of that is allowed.
fn assert_marks_nothing(what: &str, work: impl Fn(&loam_runtime::Mutation<'_>)) {
    let (extra, in_marks) = marked_by(work);
    assert!(
        extra < in_marks * ELEMENTS / 10,
        "{what}: {extra} objects marked beyond the rooted data, {in_marks} calls during marks"
    );
}

/// A young list sorted during a concurrent mark is not marked by the sort
/// (`GcLog::moving`): no marker has met the list, so the sort's stores
/// shade nothing, and its elements stay young. (Each store of a sort
/// through the barrier shaded the value it overwrote and the one it
/// stored: every element of every list sorted during a mark was marked,
/// and with sticky marks old.)
#[test]
fn a_young_list_sorted_during_a_mark_marks_nothing() {
    let _serial = serial();
    assert_marks_nothing("sort", |mc| {
        // Made at its size: growth's arrays would be shaded.
        let l = GcList::with_capacity(mc, ELEMENTS as usize);
        for i in (0..ELEMENTS).rev() {
            l.push(mc, mc.alloc(i));
        }
        l.sort_by_key(mc, |v| **v);
        assert_eq!(*l.at(0), 0);
    });
}

/// Young elements cut off a list or a dictionary during a concurrent mark
/// (pop, truncate, remove) are not marked: the deletion barrier skips
/// objects allocated after the mark began (`GcCell::cut`), which this
/// cycle's sweep does not free. (It stored each value again through the
/// barrier, which marked it twice over.)
#[test]
fn young_elements_cut_during_a_mark_are_not_marked() {
    let _serial = serial();
    assert_marks_nothing("pop and truncate", |mc| {
        let l = GcList::with_capacity(mc, ELEMENTS as usize);
        for i in 0..ELEMENTS {
            l.push(mc, mc.alloc(i));
        }
        for _ in 0..ELEMENTS / 2 {
            l.pop(mc);
        }
        l.truncate(mc, 0);
        assert!(l.is_empty());
    });
    assert_marks_nothing("dictionary removals", |mc| {
        let d = GcDictionary::new(mc);
        for i in 0..ELEMENTS / 2 {
            d.insert(mc, i, mc.alloc(i));
        }
        for i in 0..ELEMENTS / 2 {
            assert_eq!(d.remove(mc, &i).map(|v| *v), Some(i));
        }
    });
}

/// The arrays a young list or dictionary grows into during a concurrent
/// mark are not marked (`GcCell::set_unshaded`, then the shade only if a
/// marker has met the collection): the elements are counted in the
/// allowance, the arrays would be 40 or so objects a call, and their
/// elements are not marked either.
#[test]
fn young_collections_grown_during_a_mark_are_not_marked() {
    let _serial = serial();
    assert_marks_nothing("list growth", |mc| {
        let l = GcList::new(mc);
        for i in 0..ELEMENTS {
            l.push(mc, mc.alloc(i));
        }
        let m = GcList::new(mc);
        m.extend(mc, (0..ELEMENTS / 4).map(|i| mc.alloc(i)));
        assert_eq!(l.len() + m.len(), (ELEMENTS + ELEMENTS / 4) as usize);
    });
    assert_marks_nothing("dictionary growth", |mc| {
        let d = GcDictionary::new(mc);
        for i in 0..ELEMENTS / 2 {
            d.insert(mc, i, mc.alloc(i));
        }
        assert_eq!(d.len(), (ELEMENTS / 2) as usize);
    });
}

/// Two threads change a shared list and dictionary of managed values
/// (pushes, pops, removals, retains, sorts, growth) while a third forces
/// cycles whose marks all run concurrently (a zero pause budget), in
/// verify mode: a value a change cut or stored without the barrier seeing
/// it would be reported as reachable and unmarked. Afterwards every value
/// left is whole.
#[test]
fn collections_changed_during_concurrent_marks_lose_nothing() {
    let _serial = serial();
    let rt = concurrent_rt();
    type L = Rootable!['gc => GcList<'gc, Gc<'gc, [u64]>>];
    type D = Rootable!['gc => GcDictionary<'gc, GcString<'gc>, Gc<'gc, [u64]>>];
    let (list, dict): (GlobalRoot<L>, GlobalRoot<D>) = {
        let mut m = rt.attach();
        m.mutate(|mc| {
            (
                mc.global_root(mc.alloc(GcList::new(mc))),
                mc.global_root(mc.alloc(GcDictionary::new(mc))),
            )
        })
    };
    // Old data for each mark to spend a while on: a mark of a few objects
    // ends in microseconds (the coordinator traces small rounds alone),
    // and the changes below must meet marks under way.
    type Ballast = Rootable!['gc => GcList<'gc, Gc<'gc, u64>>];
    let _ballast: GlobalRoot<Ballast> = rt.attach().mutate(|mc| {
        let l = GcList::new(mc);
        l.extend(mc, (0..100_000).map(|i| mc.alloc(i)));
        mc.global_root(mc.alloc(l))
    });
    type Values = Rootable!['gc => [u64]];
    // A value checks itself: [k, k + 1, k + 2].
    fn value<'gc>(mc: &loam_runtime::Mutation<'gc>, k: u64) -> Gc<'gc, [u64]> {
        mc.alloc_slice(&[k, k + 1, k + 2])
    }
    fn whole(v: &[u64]) -> bool {
        v.len() == 3 && v[1] == v[0] + 1 && v[2] == v[0] + 2
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let marking = AtomicUsize::new(0);
    let cycles = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rt.collect();
                cycles.fetch_add(1, Ordering::Relaxed);
            }
        });
        let workers: Vec<_> = (0..2_u64)
            .map(|t| {
                let (rt, list, dict, marking, cycles) = (&rt, &list, &dict, &marking, &cycles);
                s.spawn(move || {
                    let mut m = rt.attach();
                    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ t;
                    // Values taken out of the list and kept: a pop during a
                    // mark must shade what it cuts, as a root made during
                    // the mark is not read by it.
                    let mut held: Vec<Root<Values>> = Vec::new();
                    // 3,000 rounds, and more until a change ran during a
                    // mark or the collecting thread ran 500 cycles (on a
                    // busy machine it may not have run at all by then).
                    let mut round = 0_u64;
                    while round < 3000
                        || (marking.load(Ordering::Relaxed) == 0
                            && cycles.load(Ordering::Relaxed) < 500)
                    {
                        round += 1;
                        m.mutate(|mc| {
                            marking.fetch_add(usize::from(mc.is_marking()), Ordering::Relaxed);
                            let (l, d) = (*list.get(mc), *dict.get(mc));
                            xorshift(&mut x);
                            let k = (t << 40) | (round << 8);
                            match x % 8 {
                                0..=2 => {
                                    for i in 0..8 {
                                        l.push(mc, value(mc, k + i * 4));
                                    }
                                }
                                3 => {
                                    for _ in 0..6 {
                                        if let Some(v) = l.pop(mc) {
                                            held.push(mc.root(v));
                                        }
                                    }
                                    if held.len() > 64 {
                                        for r in held.drain(..32) {
                                            assert!(whole(&r.get(mc)), "a held value");
                                        }
                                    }
                                }
                                4 => l.retain(mc, |v| v[0] % 3 != 0),
                                5 => l.sort_by_key(mc, |v| std::cmp::Reverse(v[0])),
                                6 => {
                                    if round % 8 == 0 {
                                        // New arrays installed under
                                        // the other thread's reads.
                                        d.reserve(mc, (x >> 40) as usize % 300);
                                    }
                                    for i in 0..4 {
                                        let key = gc_format!(mc, "{}", (x >> (i * 8)) % 512);
                                        d.insert(mc, key, value(mc, k + i * 4));
                                    }
                                }
                                _ => {
                                    for i in 0..4 {
                                        let key = format!("{}", (x >> (i * 8)) % 512);
                                        // A lock-free read first.
                                        if let Some(v) = d.get(key.as_str()) {
                                            assert!(whole(&v), "a value read");
                                        }
                                        if let Some(v) = d.remove(mc, key.as_str()) {
                                            held.push(mc.root(v));
                                        }
                                    }
                                    if round % 64 == 0 {
                                        d.retain(mc, |_, v| v[0] % 2 == 0);
                                    }
                                }
                            }
                            if l.len() > 2000 {
                                l.truncate(mc, 1000);
                            }
                            for v in l.iter().take(16) {
                                assert!(whole(&v), "list value {v:?}");
                            }
                        });
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        marking.load(Ordering::Relaxed) > 0,
        "no change ran during a concurrent mark"
    );
    let mut m = rt.attach();
    m.collect();
    m.mutate(|mc| {
        assert!(list.get(mc).iter().all(|v| whole(&v)));
        assert!(dict
            .get(mc)
            .iter()
            .all(|(k, v)| whole(&v) && k.parse::<u64>().is_ok()));
    });
}

/// A grown list's spare slots are left unwritten, and a slot a pop freed is
/// written again by the next push while a reader on another thread may
/// still hold the longer length: readers (and the collector's trace) must
/// only ever meet values the list held. One thread pushes, pops, reserves
/// over the slots the pops left, extends, truncates and starts fresh lists
/// (so arrays grow from nothing again);
/// another reads every element of whatever list is current, and of the
/// slots around its length, during concurrent marks, in verify mode.
#[test]
fn readers_racing_pops_and_growth_meet_only_values_the_list_held() {
    let _serial = serial();
    let rt = concurrent_rt();
    #[derive(Trace)]
    struct Holder<'gc> {
        list: loam_runtime::GcCell<'gc, GcList<'gc, Gc<'gc, [u64]>>>,
    }
    type H = Rootable!['gc => Holder<'gc>];
    let holder: GlobalRoot<H> = rt.attach().mutate(|mc| {
        let list = GcList::new(mc);
        mc.global_root(mc.alloc(Holder {
            list: loam_runtime::GcCell::new(list),
        }))
    });
    fn value<'gc>(mc: &loam_runtime::Mutation<'gc>, k: u64) -> Gc<'gc, [u64]> {
        mc.alloc_slice(&[k, !k])
    }
    fn whole(v: &[u64]) -> bool {
        v.len() == 2 && v[1] == !v[0]
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let read = AtomicUsize::new(0);
    let marking = AtomicUsize::new(0);
    let reserved = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let (rt, holder, done, read, marking) = (&rt, &holder, &done, &read, &marking);
        let reserved = &reserved;
        s.spawn(move || {
            let mut m = rt.attach();
            let mut x = 0x2545_f491_4f6c_dd1d_u64;
            for round in 0..40_000_u64 {
                m.mutate(|mc| {
                    let h = holder.get(mc);
                    let l = h.list.get();
                    xorshift(&mut x);
                    let k = round << 16;
                    match x % 6 {
                        0 | 1 => {
                            for i in 0..(x >> 8) % 40 {
                                l.push(mc, value(mc, k + i));
                            }
                        }
                        2 => {
                            for _ in 0..(x >> 8) % 30 {
                                l.pop(mc);
                            }
                            // A new array over the slots the pops left,
                            // which a reader may still read (each doubles
                            // the capacity at least: a few only).
                            if x & (1 << 20) != 0 && l.capacity() < 512 && l.len() < l.capacity() {
                                l.reserve(mc, l.capacity() - l.len() + 1 + (x >> 24) as usize % 64);
                                reserved.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        3 if x & (1 << 20) != 0 => {
                            let more = (0..(x >> 8) % 50).map(|i| value(mc, k + 100 + i));
                            l.try_extend(mc, more.filter(|_| true)).unwrap();
                        }
                        3 => l.extend(mc, (0..(x >> 8) % 50).map(|i| value(mc, k + 100 + i))),
                        4 => l.truncate(mc, l.len() / 2),
                        _ if round % 16 == 0 => h.list.set(mc, GcList::new(mc)),
                        _ => l.insert(mc, l.len() / 2, value(mc, k + 1000)),
                    }
                });
            }
            done.store(true, Ordering::Relaxed);
        });
        s.spawn(move || {
            let mut m = rt.attach();
            // Until the writer is done, at least 500 passes, and at least
            // one pass during a mark (its garbage keeps cycles coming
            // after the writer is done).
            let mut pass = 0;
            while (pass < 500
                || !done.load(Ordering::Relaxed)
                || marking.load(Ordering::Relaxed) == 0)
                && pass < 1_000_000
            {
                pass += 1;
                m.mutate(|mc| {
                    marking.fetch_add(usize::from(mc.is_marking()), Ordering::Relaxed);
                    for k in 0..16_u64 {
                        mc.alloc([k; 16]);
                    }
                    let l = holder.get(mc).list.get();
                    let len = l.len();
                    for v in l.iter() {
                        assert!(whole(&v), "a list value {v:?}");
                    }
                    // Around the length as this thread saw it: the writer
                    // may have popped and pushed there since.
                    for i in len.saturating_sub(4)..len + 4 {
                        if let Some(v) = l.get(i) {
                            assert!(whole(&v), "element {i}: {v:?}");
                        }
                    }
                    read.fetch_add(len, Ordering::Relaxed);
                });
            }
        });
    });
    assert!(read.load(Ordering::Relaxed) > 0, "the reader read nothing");
    assert!(
        marking.load(Ordering::Relaxed) > 0,
        "no read ran during a concurrent mark"
    );
    assert!(
        reserved.load(Ordering::Relaxed) > 100,
        "{reserved:?} reserves after pops"
    );
    let mut m = rt.attach();
    m.collect();
    m.mutate(|mc| assert!(holder.get(mc).list.get().iter().all(|v| whole(&v))));
}

/// A list past 1 MiB of slots grows in place into room its array was made
/// with (`Mutation::try_grow_in_place`) rather than by copying: its values
/// keep their indices, and a reader on another thread, during concurrent
/// marks, in verify mode, meets only values the list held, its pops and
/// pushes near the end included. Holds managed values (slots the list
/// traces, with cards rescaled as the array grows) and ends near 400,000.
#[test]
fn a_large_list_grows_in_place_under_readers_and_marks() {
    let _serial = serial();
    let rt = concurrent_rt();
    #[derive(Trace)]
    struct Holder<'gc> {
        list: GcList<'gc, Gc<'gc, [u64]>>,
    }
    type H = Rootable!['gc => Holder<'gc>];
    let holder: GlobalRoot<H> = rt.attach().mutate(|mc| {
        mc.global_root(mc.alloc(Holder {
            list: GcList::new(mc),
        }))
    });
    fn value<'gc>(mc: &loam_runtime::Mutation<'gc>, k: u64) -> Gc<'gc, [u64]> {
        mc.alloc_slice(&[k, !k])
    }
    fn whole(v: &[u64]) -> bool {
        v.len() == 2 && v[1] == !v[0]
    }
    const END: usize = 400_000;
    let done = std::sync::atomic::AtomicBool::new(false);
    let marking = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let (rt, holder, done, marking) = (&rt, &holder, &done, &marking);
        s.spawn(move || {
            let mut m = rt.attach();
            let mut x = 0x9e37_79b9_7f4a_7c15_u64;
            while m.mutate(|mc| holder.get(mc).list.len()) < END {
                m.mutate(|mc| {
                    let l = holder.get(mc).list;
                    xorshift(&mut x);
                    for _ in 0..(x >> 8) % 20 {
                        l.pop(mc);
                    }
                    for _ in 0..2000 {
                        let k = l.len() as u64;
                        l.push(mc, value(mc, k));
                    }
                });
            }
            done.store(true, Ordering::Relaxed);
        });
        s.spawn(move || {
            let mut m = rt.attach();
            let mut pass = 0;
            while (!done.load(Ordering::Relaxed) || marking.load(Ordering::Relaxed) == 0)
                && pass < 1_000_000
            {
                pass += 1;
                m.mutate(|mc| {
                    marking.fetch_add(usize::from(mc.is_marking()), Ordering::Relaxed);
                    let l = holder.get(mc).list;
                    let len = l.len();
                    // Every 97th element, and those around the length.
                    for i in (0..len).step_by(97).chain(len.saturating_sub(8)..len + 8) {
                        if let Some(v) = l.get(i) {
                            assert!(
                                whole(&v) && (i >= len || v[0] == i as u64),
                                "element {i} of {len}: {v:?}"
                            );
                        }
                    }
                });
            }
        });
    });
    assert!(
        marking.load(Ordering::Relaxed) > 0,
        "no read ran during a concurrent mark"
    );
    let mut m = rt.attach();
    m.collect();
    m.mutate(|mc| {
        let l = holder.get(mc).list;
        assert!(l.len() >= END);
        assert!(l
            .iter()
            .enumerate()
            .all(|(i, v)| whole(&v) && v[0] == i as u64));
    });
}

/// `with_capacity` sizes what the first inserts fill: a dictionary's
/// entries array as well as its index (the entries grew from 4, nine
/// times, on the way to 1,000), with either hasher; a capacity no address
/// space holds panics at once, as `Vec::with_capacity` does.
#[test]
fn with_capacity_holds_that_many_before_growing() {
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let d: GcDictionary<u64, u64> = GcDictionary::with_capacity(mc, 1000);
        assert_eq!(d.capacity(), 1000);
        for i in 0..1000 {
            d.insert(mc, i, i);
        }
        assert_eq!(d.capacity(), 1000, "the entries grew");
        d.insert(mc, 1000, 0);
        assert!(d.capacity() > 1000);
        let sip: GcDictionary<u64, u64, loam_collections::SipHash> =
            GcDictionary::with_capacity_and_hasher(mc, 100, Default::default());
        for i in 0..100 {
            sip.insert(mc, i, i);
        }
        assert_eq!(sip.capacity(), 100);
        assert_eq!(sip.get(&99), Some(99));
        // A list's capacity before its first push is what it was made with
        // (it said 0), and a dictionary's counts its index too: after five
        // inserts into a new one, the entries had room for 8 and the index
        // for 6.
        let l = GcList::<u64>::with_capacity(mc, 16);
        assert_eq!(l.capacity(), 16);
        l.push(mc, 1);
        assert_eq!(l.capacity(), 16);
        let d: GcDictionary<u64, u64> = GcDictionary::new(mc);
        for i in 0..5 {
            d.insert(mc, i, i);
        }
        assert!((5..=6).contains(&d.capacity()), "{}", d.capacity());
        // The last: room for the elements, not for the array's header (it
        // passed, and the first `try_push` panicked).
        for huge in [usize::MAX, isize::MAX as usize / 2, isize::MAX as usize / 8] {
            let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                GcList::<u64>::with_capacity(mc, huge)
            }))
            .map(|_| ())
            .expect_err("a list of that capacity");
            assert!(panic_text(&msg).contains("capacity overflow"));
            let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                GcDictionary::<u64, u64>::with_capacity(mc, huge)
            }))
            .map(|_| ())
            .expect_err("a dictionary of that capacity");
            assert!(panic_text(&msg).contains("capacity overflow"));
        }
        // An index slot names its entry in 32 bits: no more entries than
        // that (lookups went wrong past them).
        let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            GcDictionary::<u64, u64>::with_capacity(mc, u32::MAX as usize)
        }))
        .map(|_| ())
        .expect_err("a dictionary of 2^32 - 1 entries");
        assert!(panic_text(&msg).contains("capacity overflow"));
    });
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// `GcString` compares with `str`, `&str` and `String` both ways, with
/// `==` and with `<`, as `String` does.
#[test]
fn strings_compare_with_str_and_string_both_ways() {
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let s = GcString::new(mc, "mid");
        let owned = String::from("mid");
        assert!(s == "mid");
        assert!("mid" == s);
        assert!(s == owned);
        assert!(owned == s);
        assert!(s == *"mid");
        assert!(*"mid" == s);
        assert!(s < "zzz");
        assert!("aaa" < s);
        let (n, a) = (String::from("n"), String::from("a"));
        assert!(s < n);
        assert!(a < s);
        assert!(*"a" < s);
        assert!(s > *"a");
        assert!(s <= owned);
        assert!(owned >= s);
    });
}

/// `for` over a list or a dictionary by reference or by handle, and the
/// entry API's `or_default`, as with `Vec` and `HashMap`.
#[test]
fn lists_and_dictionaries_iterate_in_for_loops() {
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let l = GcList::from_slice(mc, &[1_u64, 2, 3]);
        let mut sum = 0;
        for x in &l {
            sum += x;
        }
        assert_eq!(sum, 6);
        let d: GcDictionary<u64, u64> = GcDictionary::new(mc);
        for k in [5, 6, 5] {
            let n = d.entry(mc, k).or_default();
            d.insert(mc, k, n + 1);
        }
        let mut pairs: Vec<(u64, u64)> = Vec::new();
        for (k, v) in &d {
            pairs.push((k, v));
        }
        assert_eq!(pairs, [(5, 2), (6, 1)]);
        assert_eq!(d.into_iter().count(), 2);
    });
}

/// Runs `f` in a call with a fresh builder holding `text`.
fn with_builder_holding(
    text: &str,
    f: impl for<'gc> FnOnce(&loam_runtime::Mutation<'gc>, GcStringBuilder<'gc>),
) {
    let _s = serial();
    let rt = rt().build();
    let mut m = rt.attach();
    m.mutate(|mc| {
        let b = GcStringBuilder::new(mc);
        b.push_str(mc, text);
        f(mc, b);
    });
}

/// What `b.push_fmt(args)` panicked with; it must panic.
fn push_fmt_panic<'gc>(
    mc: &loam_runtime::Mutation<'gc>,
    b: GcStringBuilder<'gc>,
    args: std::fmt::Arguments<'_>,
) -> String {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.push_fmt(mc, args)))
        .unwrap_err();
    panic_text(&e)
}

#[test]
fn push_fmt_panics_as_format_does_when_a_display_impl_fails_and_keeps_what_came_before() {
    struct Fails;
    impl std::fmt::Display for Fails {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("half")?;
            Err(std::fmt::Error)
        }
    }
    with_builder_holding("a=", |mc, b| {
        let msg = push_fmt_panic(mc, b, format_args!("{}{}", 1, Fails));
        assert!(
            msg.contains("GcStringBuilder::push_fmt") && msg.contains("returned an error"),
            "{msg}"
        );
        assert_eq!(b.finish(mc), "a=1half");
        b.push_fmt(mc, format_args!("{}", 2));
        assert_eq!(b.finish(mc), "2", "the builder works on after the panic");
    });
}

#[test]
fn push_fmt_lets_a_display_impl_append_to_its_own_builder() {
    struct Noisy<'a, 'gc> {
        b: GcStringBuilder<'gc>,
        mc: &'a loam_runtime::Mutation<'gc>,
    }
    impl std::fmt::Display for Noisy<'_, '_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            // Reads and appends to the builder being formatted into.
            let before = self.b.len();
            self.b.push_fmt(self.mc, format_args!("<{before}>"));
            f.write_str("noisy")
        }
    }
    struct Panics;
    impl std::fmt::Display for Panics {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("lost")?;
            panic!("a Display impl that panics")
        }
    }
    with_builder_holding("ab", |mc, b| {
        b.push_fmt(mc, format_args!("[{}]", Noisy { b, mc }));
        assert_eq!(b.finish(mc), "ab<2>[noisy]", "the inner text lands first");
        b.push_str(mc, "x");
        let msg = push_fmt_panic(mc, b, format_args!("{}{}", 1, Panics));
        assert!(msg.contains("a Display impl that panics"), "{msg}");
        assert_eq!(b.finish(mc), "x", "nothing of the call that panicked");
    });
}

/// Lists and dictionaries longer than two parts are traced in parts
/// (`Trace::TRACE_IN_PARTS`), each read as the collection is when it runs,
/// on any GC thread or assist, while a mutator changes it: inserts and
/// removals that shift elements from parts not yet read into parts read
/// already, sorts, growth into new arrays, a dictionary's removal that
/// moves its last entry into the hole. Every mark is concurrent (verify
/// mode on: a reachable object left unmarked stops the process), and what
/// the collections hold stays theirs, checked against a model at the end;
/// once they are dropped every record is freed once.
#[test]
fn long_collections_traced_in_parts_keep_what_they_hold_through_changes_during_marks() {
    let _serial = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = concurrent_rt();
    let mut m = rt.attach();
    const START: u64 = 3_000;
    let (list, dict) = records_in_both(&mut m, START, &drops);
    let mut model: Vec<u64> = (0..START).collect();
    let mut keys: std::collections::BTreeSet<u64> = (0..START).collect();
    let (mut next, mut x, mut made) = (START, 0x9e37_79b9_7f4a_7c15_u64, 2 * START as usize);
    let before = rt.stats();
    for step in 0..6_000_u64 {
        let r = xorshift(&mut x);
        m.mutate(|mc| {
            let l = *list.get(mc);
            let d = *dict.get(mc);
            let at = (r >> 8) as usize % (model.len() + 1);
            match r % 8 {
                0 | 1 => {
                    l.insert(mc, at, record(mc, next, &drops));
                    model.insert(at, next);
                    made += 1;
                }
                2 | 3 if !model.is_empty() => {
                    let i = at.min(model.len() - 1);
                    assert_eq!(l.remove(mc, i).key, model.remove(i));
                }
                4 if !model.is_empty() => {
                    let i = at.min(model.len() - 1);
                    l.set(mc, i, record(mc, next, &drops));
                    model[i] = next;
                    made += 1;
                }
                5 if step % 64 == 5 => {
                    // Reversed, then sorted back: every element moves.
                    l.sort_by_key(mc, |rec| std::cmp::Reverse(rec.key));
                    model.sort_unstable_by_key(|&k| std::cmp::Reverse(k));
                }
                _ => {
                    l.push(mc, record(mc, next, &drops));
                    model.push(next);
                    made += 1;
                }
            }
            // The dictionary: a new key, and the removal of an old one
            // (its last entry moves into the hole).
            d.insert(mc, next, record(mc, next, &drops));
            keys.insert(next);
            made += 1;
            if let Some(&old) = keys.iter().nth((r >> 32) as usize % keys.len()) {
                assert_eq!(d.remove(mc, &old).map(|rec| rec.key), Some(old));
                keys.remove(&old);
            }
            next += 1;
            // Garbage, so that cycles come while the changes go on.
            for k in 0..64_u64 {
                mc.alloc([k; 8]);
            }
        });
    }
    let s = rt.stats();
    assert!(
        s.cycles - before.cycles >= 10 && s.concurrent_cycles > before.concurrent_cycles,
        "too few marks ran beside the changes: {s:?}"
    );
    let keys = keys.into_iter().map(|k| (k, k)).collect();
    hold_then_free(&mut m, (list, dict), (&model, &keys), &drops, made);
}

type RecordList = Rootable!['gc => GcList<'gc, Gc<'gc, Record>>];
type RecordDict = Rootable!['gc => GcDictionary<'gc, u64, Gc<'gc, Record>>];

/// A rooted list and dictionary of records `0..n` each (keys `0..n`).
fn records_in_both(
    m: &mut loam_runtime::Mutator,
    n: u64,
    drops: &Arc<AtomicUsize>,
) -> (Root<RecordList>, Root<RecordDict>) {
    m.mutate(|mc| {
        let l = GcList::new(mc);
        let d = GcDictionary::new(mc);
        for k in 0..n {
            l.push(mc, record(mc, k, drops));
            d.insert(mc, k, record(mc, k, drops));
        }
        (mc.root(mc.alloc(l)), mc.root(mc.alloc(d)))
    })
}

/// The end of the tests of long collections of records: after a full
/// cycle the list holds `model`'s records and the dictionary `dmodel`'s
/// (key to record key); once both are dropped, every record made (`made`)
/// is freed once.
fn hold_then_free(
    m: &mut loam_runtime::Mutator,
    (list, dict): (Root<RecordList>, Root<RecordDict>),
    (model, dmodel): (&[u64], &std::collections::BTreeMap<u64, u64>),
    drops: &AtomicUsize,
    made: usize,
) {
    collect(m);
    m.mutate(|mc| {
        let got: Vec<u64> = list.get(mc).iter().map(|rec| rec.key).collect();
        assert_eq!(got, model, "the list's records");
        let d = *dict.get(mc);
        assert_eq!(d.len(), dmodel.len());
        for (&k, &v) in dmodel {
            assert_eq!(
                d.get(&k).map(|rec| rec.key),
                Some(v),
                "the dictionary's record {k}"
            );
        }
    });
    drop((list, dict));
    collect(m);
    collect(m);
    assert_eq!(
        drops.load(Ordering::Relaxed),
        made,
        "every record freed once"
    );
}

/// A minor cycle traces again only the cards of a long old collection that
/// changed (`loam_runtime::GcCards`): every kind of change must touch the
/// cards it writes. Each phase makes one kind of change to an old list and
/// an old dictionary of 5,000 records, a young record stored each time,
/// between stopped minor cycles (no mark runs beside the changes, so no
/// barrier shades what they store: the cards alone bring it to the next
/// cycle). Verify mode re-marks after every cycle and stops the process
/// if a reachable record was left unmarked; the contents are checked
/// against a model, and every record is freed once at the end. In loam's
/// pages, and in a `GlobalAlloc` space (whose full cycles clear the marks
/// with a new epoch: a take after one must take every card).
#[test]
fn minor_cycles_trace_every_card_a_change_wrote() {
    let _serial = serial();
    every_kind_of_change_between_minor_cycles(rt());
}

#[test]
fn minor_cycles_trace_every_card_a_change_wrote_in_a_global_alloc() {
    let _serial = serial();
    every_kind_of_change_between_minor_cycles(rt().global_alloc(std::alloc::System));
}

fn every_kind_of_change_between_minor_cycles(rt: RuntimeBuilder) {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt.concurrent(false).min_heap(256 << 10).build();
    let mut m = rt.attach();
    const START: u64 = 5_000;
    let (list, dict) = records_in_both(&mut m, START, &drops);
    // Old, their cards taken by a full cycle.
    collect(&mut m);
    let mut model: Vec<u64> = (0..START).collect();
    let mut dmodel: std::collections::BTreeMap<u64, u64> = (0..START).map(|k| (k, k)).collect();
    let (mut next, mut x, mut made) = (START, 0x2545_f491_4f6c_dd1d_u64, 2 * START as usize);
    let before = rt.stats();
    const PHASES: u64 = 12;
    const STEPS: u64 = 200;
    for step in 0..PHASES * STEPS {
        let r = xorshift(&mut x);
        m.mutate(|mc| {
            let l = *list.get(mc);
            let d = *dict.get(mc);
            let i = (r >> 8) as usize % model.len();
            let key = *dmodel
                .keys()
                .nth((r >> 32) as usize % dmodel.len())
                .unwrap();
            let mut fresh = || {
                made += 1;
                next += 1;
                (next, record(mc, next, &drops))
            };
            match step / STEPS {
                0 => {
                    let (k, rec) = fresh();
                    l.set(mc, i, rec);
                    model[i] = k;
                    let (k, rec) = fresh();
                    d.insert(mc, key, rec); // an existing key's value
                    dmodel.insert(key, k);
                }
                1 => {
                    // Eight pops, then pushes into the slots they left and
                    // past every slot filled, each in a call of its own.
                    if step % 16 == 0 {
                        for _ in 0..8 {
                            l.pop(mc);
                            model.pop();
                        }
                    } else {
                        let (k, rec) = fresh();
                        l.push(mc, rec);
                        model.push(k);
                    }
                    let (k, rec) = fresh();
                    d.insert(mc, k, rec); // a new key
                    dmodel.insert(k, k);
                }
                2 => {
                    let (k, rec) = fresh();
                    l.insert(mc, i, rec);
                    model.insert(i, k);
                    let (k, rec) = fresh();
                    d.update(mc, &key, |_| rec);
                    dmodel.insert(key, k);
                }
                3 => {
                    assert_eq!(l.remove(mc, i).key, model.remove(i));
                    // A young last entry, moved into the removed one's
                    // place.
                    let (k, rec) = fresh();
                    d.insert(mc, k, rec);
                    dmodel.insert(k, k);
                    assert_eq!(d.remove(mc, &key).map(|rec| rec.key), dmodel.remove(&key));
                    let (k, rec) = fresh();
                    l.set(mc, model.len() - 1, rec);
                    *model.last_mut().unwrap() = k;
                }
                4 => {
                    // Young records set near the end, then moved all over.
                    let (k, rec) = fresh();
                    let near_end = model.len() - 1 - i % 16;
                    l.set(mc, near_end, rec);
                    model[near_end] = k;
                    if step % 4 == 0 {
                        let flip = step % 8 == 0;
                        l.sort_by_key(mc, |rec| if flip { u64::MAX - rec.key } else { rec.key });
                        model.sort_unstable_by_key(|&k| if flip { u64::MAX - k } else { k });
                    }
                    let (k, rec) = fresh();
                    d.entry(mc, key).and_modify(|_| rec);
                    dmodel.insert(key, k);
                }
                5 => {
                    // Extends past the filled slots, and into slots a
                    // truncation left.
                    if step % 2 == 0 {
                        l.truncate(mc, model.len() - 3);
                        model.truncate(model.len() - 3);
                    }
                    let recs: Vec<_> = (0..3).map(|_| fresh()).collect();
                    model.extend(recs.iter().map(|&(k, _)| k));
                    l.extend(mc, recs.into_iter().map(|(_, rec)| rec));
                    let (k, rec) = fresh();
                    d.entry(mc, k).or_insert(rec);
                    dmodel.insert(k, k);
                }
                6 => {
                    // Through a writer: a set and a push.
                    let w = l.writer(mc);
                    let (k, rec) = fresh();
                    w.set(i, rec);
                    model[i] = k;
                    let (k, rec) = fresh();
                    w.push(rec);
                    model.push(k);
                    drop(w);
                    if let loam_collections::DictEntry::Occupied(o) = d.entry(mc, key) {
                        let (k, rec) = fresh();
                        o.insert(rec);
                        dmodel.insert(key, k);
                    }
                }
                7 => {
                    // A young record stored near the end, then a retain that
                    // moves the kept ones down.
                    let (k, rec) = fresh();
                    let near_end = model.len() - 1 - i % 16;
                    l.set(mc, near_end, rec);
                    model[near_end] = k;
                    let (k, rec) = fresh();
                    d.insert(mc, key, rec);
                    dmodel.insert(key, k);
                    if step % 8 == 0 {
                        let cut = r % 97;
                        l.retain(mc, |rec| rec.key % 97 != cut);
                        model.retain(|k| k % 97 != cut);
                        d.retain(mc, |k, _| k % 97 != cut);
                        dmodel.retain(|k, _| k % 97 != cut);
                    }
                }
                8 => {
                    // Grown: a new array, the cards rescaled.
                    let recs: Vec<_> = (0..40).map(|_| fresh()).collect();
                    model.extend(recs.iter().map(|&(k, _)| k));
                    l.extend(mc, recs.into_iter().map(|(_, rec)| rec));
                    for _ in 0..20 {
                        let (k, rec) = fresh();
                        d.insert(mc, k, rec);
                        dmodel.insert(k, k);
                    }
                }
                _ => {
                    // After the growth: single stores again, old and new
                    // slots alike, and inserts at the end (the one change
                    // of the tail's card).
                    let (k, rec) = fresh();
                    if step % 4 == 0 {
                        l.insert(mc, model.len(), rec);
                        model.push(k);
                    } else {
                        l.set(mc, i, rec);
                        model[i] = k;
                    }
                    let (k, rec) = fresh();
                    d.insert(mc, key, rec);
                    dmodel.insert(key, k);
                }
            }
            // Garbage: a stopped minor cycle every few steps.
            for g in 0..2048_u64 {
                mc.alloc([g; 16]);
            }
        });
    }
    let s = rt.stats();
    assert!(
        s.minor_cycles - before.minor_cycles >= PHASES * STEPS / 20,
        "too few minor cycles between the changes: {s:?}"
    );
    hold_then_free(&mut m, (list, dict), (&model, &dmodel), &drops, made);
}

/// A string formatted in a thread-local destructor at the thread's exit,
/// after the formatting scratch buffer's own thread local was destroyed
/// (the thread formatted before it first used the destructor's): the
/// scratch buffer's `with` panicked in a thread-local destructor, which
/// aborts the process. In a child process (this test binary run again).
#[test]
fn strings_format_in_a_thread_local_destructor_at_thread_exit() {
    if std::env::var_os("LOAM_COLLECTIONS_CHILD").is_some() {
        thread_local!(static M: std::cell::RefCell<Option<loam_runtime::Mutator>> = const { std::cell::RefCell::new(None) });
        struct Late;
        impl Drop for Late {
            fn drop(&mut self) {
                let _ = M.try_with(|m| {
                    if let Some(m) = m.borrow_mut().as_mut() {
                        let s = m.mutate(|mc| {
                            let (x, y) = std::hint::black_box((4, 2));
                            let a = gc_format!(mc, "{x}-{y}");
                            let b = a.try_concat(mc, "!").map(|s| s.to_string());
                            format!("{a} {b:?} {}", a.to_uppercase(mc))
                        });
                        println!("formatted at exit: {s}");
                    }
                });
            }
        }
        thread_local!(static LATE: Late = const { Late });
        let rt = rt().build();
        let rt2 = rt.clone();
        std::thread::spawn(move || {
            // The mutator and the heap's thread state first (destroyed
            // after `LATE`, so that it can allocate), then `LATE`.
            M.with(|m| *m.borrow_mut() = Some(rt2.attach()));
            M.with(|m| {
                m.borrow_mut()
                    .as_mut()
                    .unwrap()
                    .mutate(|mc| *mc.alloc(1_u8))
            });
            LATE.with(|_| {});
            // The scratch buffer's first use: destroyed before `LATE`.
            M.with(|m| {
                m.borrow_mut().as_mut().unwrap().mutate(|mc| {
                    // A value, not a literal (which `format_args!` inlines
                    // into its text, needing no scratch buffer).
                    let n = std::hint::black_box(1);
                    assert_eq!(gc_format!(mc, "{n}"), "1");
                })
            });
        })
        .join()
        .unwrap();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "strings_format_in_a_thread_local_destructor_at_thread_exit",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LOAM_COLLECTIONS_CHILD", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the child failed ({}):\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("formatted at exit: 4-2 Ok(\"4-2!\") 4-2"),
        "{stdout}\n{stderr}"
    );
}
