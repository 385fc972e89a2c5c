//! The managed pool as a user drives it: tasks get their worker's mutator,
//! fork with `join` and `scope`, collections never wait for idle or busy
//! workers, what workers allocate is freed (drop counts balance, also after
//! the workers exit), panics reach their waiters and the workers stay
//! attached, and misuse panics with a message instead of deadlocking.

mod support;

use loam_runtime::{
    Gc, GcCell, GlobalRoot, ManagedPool, Mutator, Root, Rootable, Runtime, RuntimeBuilder, Trace,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use support::serial;

fn rt() -> RuntimeBuilder {
    Runtime::builder().gc_threads(2).ignore_env().verify(true)
}

/// Waits until `n` managed-pool workers (threads named `loam-mutator-*`:
/// the tests hold `serial`, so they are this test's) sleep in the kernel,
/// parked; elsewhere than Linux, 100 ms. No deadline of its own: callers
/// run it under `support::within`, which turns a hang into a failure.
fn wait_parked(n: usize) {
    #[cfg(target_os = "linux")]
    {
        let parked = || {
            let mut asleep = 0;
            for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                let path = task.path();
                let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
                if !comm.starts_with("loam-mutator-") {
                    continue;
                }
                let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
                // The state follows the name's closing parenthesis.
                if stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('S'))
                {
                    asleep += 1;
                }
            }
            asleep >= n
        };
        while !parked() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = n;
        std::thread::sleep(Duration::from_millis(100));
    }
}

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
type CellRoot = Rootable!['gc => GcCell<'gc, Option<Gc<'gc, u64>>>];

/// A list of `n` counted nodes, built in one `mutate` call; returns the sum.
fn list_sum(m: &mut Mutator, n: u64, drops: &Arc<AtomicUsize>) -> u64 {
    m.mutate(|mc| {
        let mut head = None;
        for value in 0..n {
            head = Some(mc.alloc(Node {
                value,
                next: GcCell::new(head),
                _drops: Counted(drops.clone()),
            }));
        }
        let mut sum = 0;
        while let Some(node) = head {
            sum += node.value;
            head = node.next.get();
        }
        sum
    })
}

/// Fibonacci by `join`, each leaf a managed allocation on its worker.
fn fib(m: &mut Mutator, n: u64) -> u64 {
    if n < 12 {
        return m.mutate(|mc| {
            let (mut a, mut b) = (0_u64, 1_u64);
            for _ in 0..n {
                let next = mc.alloc(a + b);
                a = b;
                b = *next;
            }
            a
        });
    }
    let (a, b) = loam_runtime::join(m, |m| fib(m, n - 1), |m| fib(m, n - 2));
    a + b
}

#[test]
fn join_and_scope_compute_on_every_worker() {
    let _serial = serial();
    let rt = rt().build();
    for threads in [1, 2, 4] {
        let pool = ManagedPool::builder(&rt)
            .num_threads(threads)
            .build()
            .unwrap();
        assert_eq!(pool.num_threads(), threads);
        assert_eq!(pool.install(|m| fib(m, 24)), 46_368);
        assert_eq!(pool.join(|m| fib(m, 15), |m| fib(m, 16)), (610, 987));
        let seen = Mutex::new(vec![0_u64; 64]);
        pool.scope(|s, _m| {
            for i in 0..64 {
                let seen = &seen;
                s.spawn(move |s, m| {
                    // Nested: a join inside a scope task, and a spawn back
                    // into the scope from it.
                    let (a, _) = loam_runtime::join(m, |m| fib(m, i % 20), |m| fib(m, 3));
                    seen.lock().unwrap()[i as usize] = a;
                    if i == 0 {
                        s.spawn(|_, m| assert_eq!(fib(m, 20), 6_765));
                    }
                });
            }
        });
        let seen = seen.into_inner().unwrap();
        for (i, &value) in seen.iter().enumerate() {
            assert_eq!(value, fib_plain(i as u64 % 20), "task {i}");
        }
        let indices = pool.broadcast(|_m, ctx| ctx.index());
        assert_eq!(indices, (0..threads).collect::<Vec<_>>());
    }
}

fn fib_plain(n: u64) -> u64 {
    let (mut a, mut b) = (0, 1);
    for _ in 0..n {
        (a, b) = (b, a + b);
    }
    a
}

#[test]
fn a_collection_completes_while_every_worker_is_parked() {
    let _serial = serial();
    let rt = rt().build();
    let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    pool.broadcast(|m, _| list_sum(m, 1000, &drops));
    // Both workers out of spins, parked.
    support::within("the workers to park", || wait_parked(2));
    let before = rt.stats().cycles;
    let rt2 = rt.clone();
    support::within("a collection with parked workers", move || {
        rt2.collect();
        rt2.wait_for_drops();
    });
    assert!(rt.stats().cycles > before);
    assert_eq!(drops.load(Ordering::Relaxed), 2000);
}

#[test]
fn a_collection_completes_while_a_worker_runs_a_long_task() {
    let _serial = serial();
    let rt = rt().build();
    let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    {
        let (stop, calls) = (stop.clone(), calls.clone());
        pool.spawn(move |m| {
            let kept: Root<CellRoot> = m.mutate(|mc| mc.root(mc.alloc(GcCell::new(None))));
            let mut i = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                m.mutate(|mc| {
                    let cell = kept.get(mc);
                    cell.set(mc, Some(mc.alloc(i)));
                    let _garbage = mc.alloc([i; 8]);
                });
                i += 1;
                calls.fetch_add(1, Ordering::Relaxed);
            }
            let last = m.mutate(|mc| *kept.get(mc).get().unwrap());
            done_tx.send((i, last)).unwrap();
        });
    }
    while calls.load(Ordering::Relaxed) < 1000 {
        std::thread::yield_now();
    }
    let rt2 = rt.clone();
    let cycles = support::within("collections beside a long task", move || {
        let before = rt2.stats().cycles;
        for _ in 0..5 {
            rt2.collect();
        }
        rt2.stats().cycles - before
    });
    assert!(cycles >= 5);
    stop.store(true, Ordering::Relaxed);
    let (i, last) = done_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(last, i - 1, "the rooted cell kept its last store");
}

#[test]
fn what_workers_allocate_is_freed_also_after_they_exit() {
    let _serial = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt().build();
    let abandoned_before = loam_heap::stats().pages_abandoned;
    let roots: Vec<GlobalRoot<NodeRoot>> = {
        let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
        // Garbage on every worker, freed by the GC threads back to its heap.
        for _ in 0..10 {
            pool.broadcast(|m, _| list_sum(m, 500, &drops));
        }
        // Live objects that outlive the workers.
        let roots = pool.broadcast(|m, ctx| {
            m.mutate(|mc| {
                let mut head = None;
                for value in 0..100 {
                    head = Some(mc.alloc(Node {
                        value: value + 1000 * ctx.index() as u64,
                        next: GcCell::new(head),
                        _drops: Counted(drops.clone()),
                    }));
                }
                mc.global_root(head.unwrap())
            })
        });
        rt.collect();
        rt.wait_for_drops();
        assert_eq!(drops.load(Ordering::Relaxed), 10 * 2 * 500);
        roots
    }; // the workers detach and exit here, leaving their pages
    assert!(loam_heap::stats().pages_abandoned > abandoned_before);
    let mut m = rt.attach();
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        10 * 2 * 500,
        "rooted nodes survive"
    );
    for (index, root) in roots.iter().enumerate() {
        let (sum, count) = m.mutate(|mc| {
            let mut cur = Some(root.get(mc));
            let (mut sum, mut count) = (0, 0);
            while let Some(n) = cur {
                sum += n.value;
                count += 1;
                cur = n.next.get();
            }
            (sum, count)
        });
        assert_eq!(count, 100);
        assert_eq!(sum, 4950 + 100_000 * index as u64);
    }
    drop(roots);
    m.collect();
    m.runtime().wait_for_drops();
    assert_eq!(drops.load(Ordering::Relaxed), 10 * 2 * 500 + 200);
    assert_eq!(rt.stats().live_size, 0);
}

#[test]
fn a_panicking_task_reaches_its_waiter_and_the_worker_stays_attached() {
    let _serial = serial();
    let rt = rt().build();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let pool = ManagedPool::builder(&rt)
        .num_threads(2)
        .panic_handler(move |payload| {
            let message = payload.downcast_ref::<&str>().copied().unwrap_or("?");
            tx.lock().unwrap().send(message.to_owned()).unwrap();
        })
        .build()
        .unwrap();
    for round in 0..10 {
        // Outside `mutate`, inside `mutate`, and in a stolen join half.
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.install(|_m| panic!("install {round}"))
        }));
        assert_eq!(
            *r.unwrap_err().downcast::<String>().unwrap(),
            format!("install {round}")
        );
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.install(|m| {
                m.mutate(|mc| {
                    mc.alloc(round);
                    panic!("inside mutate")
                })
            })
        }));
        assert!(r.is_err());
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.join(
                |m| fib(m, 18),
                |m| {
                    fib(m, 14);
                    panic!("second half")
                },
            )
        }));
        assert_eq!(*r.unwrap_err().downcast::<&str>().unwrap(), "second half");
        pool.spawn(|_m| panic!("spawned"));
        assert_eq!(rx.recv_timeout(Duration::from_secs(60)).unwrap(), "spawned");
        // Every worker still has its mutator, and collections go on.
        let sums = pool.broadcast(|m, _| m.mutate(|mc| *mc.alloc(2_u64)));
        assert_eq!(sums, vec![2, 2]);
        let rt2 = rt.clone();
        support::within("a collection after panics", move || rt2.collect());
    }
    assert_eq!(pool.install(|m| fib(m, 22)), 17_711);
}

#[test]
fn waiting_on_a_pool_inside_mutate_panics_instead_of_deadlocking() {
    let _serial = serial();
    let rt = rt().build();
    let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
    let message = |r: std::thread::Result<()>| support::panic_message(r.unwrap_err().as_ref());
    // A worker inside `mutate` forking with the plain pool calls.
    let r = pool.install(|m| {
        catch_unwind(AssertUnwindSafe(|| {
            m.mutate(|_| {
                loam_threadpool::join(|| 1, || 2);
            })
        }))
    });
    assert!(message(r).contains("inside `mutate`"));
    // A thread outside the pool, inside `mutate`, calling into it.
    let mut m = rt.attach();
    let r = catch_unwind(AssertUnwindSafe(|| {
        m.mutate(|_| {
            pool.install(|_| ());
        })
    }));
    assert!(message(r).contains("inside `mutate`"));
    // A task calling back into its own pool while it holds the mutator.
    let r = pool.install(|_m| catch_unwind(AssertUnwindSafe(|| pool.install(|_| ()))));
    assert!(message(r).contains("in use"));
    // The mutator of another thread is not a worker's.
    let r = catch_unwind(AssertUnwindSafe(|| {
        loam_runtime::join(&mut m, |_| (), |_| ());
    }));
    assert!(message(r).contains("current managed worker"));
    let r = catch_unwind(|| loam_runtime::with_mutator(|_| ()));
    assert!(message(r).contains("outside a managed pool"));
    // All of it left the pool working.
    assert_eq!(pool.install(|m| fib(m, 20)), 6_765);
    support::within("a collection after refused calls", move || rt.collect());
}

#[test]
fn plain_pool_calls_on_a_managed_pool_get_the_mutator_where_they_need_it() {
    let _serial = serial();
    let rt = rt().build();
    let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
    let total = pool.install_plain(|| {
        let (a, b) = loam_threadpool::join(
            || loam_runtime::with_mutator(|m| fib(m, 20)),
            || loam_runtime::with_mutator(|m| fib(m, 19)),
        );
        a + b
    });
    assert_eq!(total, 10_946);
}

#[test]
fn many_short_bursts_on_fresh_pools() {
    let _serial = serial();
    let rt = rt().build();
    for round in 0..20 {
        let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
        assert_eq!(pool.install(|m| fib(m, 18)), 2_584, "round {round}");
        if round % 5 == 0 {
            support::within("the workers to park", || wait_parked(2));
            assert_eq!(pool.join(|m| fib(m, 16), |m| fib(m, 15)), (987, 610));
        }
    }
    support::within("a collection after the pools", move || rt.collect());
}

#[test]
fn dropping_a_pool_inside_mutate_does_not_wait_for_its_workers() {
    let _serial = serial();
    let rt = rt().build();
    let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        pool.spawn(move |m| {
            while !stop.load(Ordering::Relaxed) {
                m.mutate(|mc| {
                    mc.alloc([0_u64; 8]);
                });
            }
        });
    }
    // Collections keep asking to stop the world meanwhile: a worker that
    // attached before the call below blocks at `mutate` entry while one is
    // pending, and the call below holds every pause up until it returns.
    let collecting = Arc::new(AtomicBool::new(true));
    let collector = {
        let (rt, collecting) = (rt.clone(), collecting.clone());
        std::thread::spawn(move || {
            while collecting.load(Ordering::Relaxed) {
                rt.collect();
            }
        })
    };
    let rt2 = rt.clone();
    support::within("dropping a pool inside mutate", move || {
        let mut m = rt2.attach();
        m.mutate(move |mc| {
            // A stop is pending (it waits for this call), and the worker,
            // calling `mutate` in a loop, is held at its entry.
            while !mc.collection_pending() {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::Relaxed);
            drop(pool);
        });
    });
    collecting.store(false, Ordering::Relaxed);
    collector.join().unwrap();
}

/// A managed task that waits through the plain pool calls while it holds
/// its worker's mutator is refused at the wait, every time: the worker
/// would run other tasks meanwhile, and one that needed the mutator (a
/// task another thread spawned, say) panicked in its stead and never ran.
/// The lending calls still wait, and the tasks run.
#[test]
fn a_plain_wait_from_a_task_holding_the_mutator_is_refused_at_the_wait() {
    let _serial = serial();
    let rt = rt().build();
    let pool = ManagedPool::builder(&rt).num_threads(2).build().unwrap();
    let message =
        |r: std::thread::Result<(u32, u32)>| support::panic_message(r.unwrap_err().as_ref());
    for _ in 0..20 {
        let (tx, rx) = std::sync::mpsc::channel();
        let r = pool.install(|_m| {
            // Another caller's task, queued while this one waits.
            let tx = tx.clone();
            pool.spawn(move |m| tx.send(m.mutate(|mc| *mc.alloc(9_u32))).unwrap());
            catch_unwind(AssertUnwindSafe(|| loam_threadpool::join(|| 1, || 2)))
        });
        assert!(message(r).contains("holds its worker's Mutator"));
        // The same after a `mutate` call, whose own ban (ended) it named.
        let r = pool.install(|m| {
            m.mutate(|mc| *mc.alloc(1_u8));
            catch_unwind(AssertUnwindSafe(|| loam_threadpool::join(|| 1, || 2)))
        });
        assert!(message(r).contains("holds its worker's Mutator"));
        assert_eq!(rx.recv_timeout(Duration::from_secs(60)).unwrap(), 9);
    }
    // The lending calls wait; a task they run meanwhile gets the mutator,
    // and the ban is back once they return.
    let r = pool.install(|m| {
        let (a, b) = loam_runtime::join(m, |m| fib(m, 15), |m| fib(m, 14));
        let again = catch_unwind(AssertUnwindSafe(|| loam_threadpool::join(|| 1, || 2)));
        (a + b, again.is_err())
    });
    assert_eq!(r, (987, true));
    // Forking from install_plain holds nothing.
    assert_eq!(
        pool.install_plain(|| loam_threadpool::join(|| 1, || 2)),
        (1, 2)
    );
}
