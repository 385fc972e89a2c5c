//! Each public entry point does what its docs say: join, scope, spawn,
//! broadcast, install, thread indices, builder options and hooks.
#![cfg(not(loom))]

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};

use loam_threadpool::{ThreadPool, ThreadPoolBuilder};

fn pool(threads: usize) -> ThreadPool {
    ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

fn fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = loam_threadpool::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

#[test]
fn join_returns_both_results_in_order() {
    let pool = pool(2);
    assert_eq!(pool.join(|| "a", || 2), ("a", 2));
    assert_eq!(pool.install(|| loam_threadpool::join(|| 1, || 2)), (1, 2));
}

#[test]
fn join_outside_any_pool_uses_the_global_pool() {
    let (a, b) = loam_threadpool::join(
        loam_threadpool::current_thread_index,
        loam_threadpool::current_thread_index,
    );
    assert!(a.is_some() && b.is_some());
}

#[test]
fn nested_join_computes_fib_on_one_two_and_four_threads() {
    for threads in [1, 2, 4] {
        assert_eq!(pool(threads).install(|| fib(18)), 2584);
    }
}

#[test]
fn join_sides_run_in_parallel_when_a_worker_is_free() {
    // Both sides wait for each other: completes only if `b` is stolen by the
    // second worker while `a` blocks, which needs the parked worker woken.
    let pool = pool(2);
    for _ in 0..50 {
        let barrier = Barrier::new(2);
        pool.join(|| barrier.wait(), || barrier.wait());
    }
}

#[test]
fn join_borrows_from_the_stack() {
    let pool = pool(2);
    let mut left = vec![1u64; 1000];
    let mut right = vec![2u64; 1000];
    pool.join(
        || left.iter_mut().for_each(|x| *x += 1),
        || right.iter_mut().for_each(|x| *x *= 3),
    );
    assert!(left.iter().all(|&x| x == 2));
    assert!(right.iter().all(|&x| x == 6));
}

#[test]
fn scope_waits_for_every_task_including_nested_spawns() {
    let pool = pool(2);
    let count = AtomicUsize::new(0);
    pool.scope(|s| {
        for _ in 0..100 {
            s.spawn(|s| {
                count.fetch_add(1, Ordering::Relaxed);
                for _ in 0..10 {
                    s.spawn(|_| {
                        count.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    assert_eq!(count.load(Ordering::Relaxed), 100 * 11);
}

#[test]
fn scope_tasks_write_disjoint_borrowed_slices() {
    let pool = pool(3);
    let mut data = vec![0usize; 10_000];
    pool.scope(|s| {
        for (i, chunk) in data.chunks_mut(100).enumerate() {
            s.spawn(move |_| chunk.iter_mut().for_each(|x| *x = i));
        }
    });
    assert!(data.iter().enumerate().all(|(j, &x)| x == j / 100));
}

#[test]
fn scope_returns_the_body_result_and_nests_with_join() {
    let pool = pool(2);
    let total = AtomicUsize::new(0);
    let result = pool.scope(|s| {
        s.spawn(|_| {
            let (a, b) = loam_threadpool::join(|| fib(12), || fib(13));
            total.fetch_add((a + b) as usize, Ordering::Relaxed);
        });
        loam_threadpool::scope(|inner| {
            inner.spawn(|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        "body"
    });
    assert_eq!(result, "body");
    assert_eq!(total.load(Ordering::Relaxed), 144 + 233 + 1);
}

#[test]
fn scope_outside_any_pool_runs_on_the_global_pool() {
    let seen = Mutex::new(Vec::new());
    loam_threadpool::scope(|s| {
        s.spawn(|_| {
            seen.lock()
                .unwrap()
                .push(loam_threadpool::current_thread_index())
        });
    });
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].is_some());
}

#[test]
fn spawn_runs_static_tasks_on_the_pool() {
    let pool = pool(2);
    let (sender, receiver) = mpsc::channel();
    for i in 0..100 {
        let sender = sender.clone();
        pool.spawn(move || {
            sender
                .send((i, loam_threadpool::current_thread_index()))
                .unwrap()
        });
    }
    let mut seen: Vec<_> = (0..100).map(|_| receiver.recv().unwrap()).collect();
    seen.sort();
    for (i, (j, index)) in seen.into_iter().enumerate() {
        assert_eq!(i, j);
        assert!(matches!(index, Some(0 | 1)));
    }
}

#[test]
fn spawn_inside_a_worker_stays_in_that_pool() {
    let pool = ThreadPoolBuilder::new()
        .num_threads(2)
        .thread_name(|i| format!("spawn-test-{i}"))
        .build()
        .unwrap();
    let (sender, receiver) = mpsc::channel();
    pool.install(move || {
        loam_threadpool::spawn(move || {
            let name = std::thread::current().name().map(String::from);
            sender.send(name).unwrap();
        })
    });
    assert!(receiver.recv().unwrap().unwrap().starts_with("spawn-test-"));
}

#[test]
fn broadcast_runs_once_on_every_worker() {
    let pool = pool(4);
    let results = pool.broadcast(|ctx| {
        assert_eq!(loam_threadpool::current_thread_index(), Some(ctx.index()));
        (ctx.index(), ctx.num_threads(), std::thread::current().id())
    });
    assert_eq!(results.len(), 4);
    let threads: HashSet<_> = results.iter().map(|r| r.2).collect();
    assert_eq!(threads.len(), 4);
    for (i, (index, n, _)) in results.into_iter().enumerate() {
        assert_eq!((index, n), (i, 4));
    }
}

#[test]
fn broadcast_from_inside_a_busy_worker() {
    let pool = pool(2);
    let results = pool.install(|| {
        let (a, b) =
            loam_threadpool::join(|| loam_threadpool::broadcast(|ctx| ctx.index()), || fib(15));
        assert_eq!(b, 610);
        a
    });
    assert_eq!(results, vec![0, 1]);
}

#[test]
fn install_runs_inside_the_pool_and_inline_when_nested() {
    let pool = pool(2);
    assert_eq!(loam_threadpool::current_thread_index(), None);
    assert_eq!(pool.current_thread_index(), None);
    let (outer, inner) = pool.install(|| {
        let outer = pool.current_thread_index();
        let inner = pool.install(|| pool.current_thread_index());
        (outer, inner)
    });
    assert!(outer.is_some());
    assert_eq!(outer, inner);
    assert_eq!(pool.install(loam_threadpool::current_num_threads), 2);
}

#[test]
fn install_on_another_pool_from_a_worker() {
    let a = pool(2);
    let b = pool(2);
    let sum = a.install(|| {
        let from_a = a.current_thread_index().is_some();
        let in_b = b.install(|| (a.current_thread_index(), b.current_thread_index()));
        assert!(from_a);
        assert_eq!(in_b.0, None);
        assert!(in_b.1.is_some());
        b.install(|| fib(15)) + a.install(|| fib(15))
    });
    assert_eq!(sum, 1220);
}

#[test]
fn builder_names_threads_and_sets_stack_size() {
    let pool = ThreadPoolBuilder::new()
        .num_threads(2)
        .stack_size(4 << 20)
        .thread_name(|i| format!("named-{i}"))
        .build()
        .unwrap();
    let mut names = pool.broadcast(|_| std::thread::current().name().unwrap().to_owned());
    names.sort();
    assert_eq!(names, ["named-0", "named-1"]);
    // A deep but bounded recursion fits the 4 MiB stack.
    assert_eq!(pool.install(|| fib(20)), 6765);
}

#[test]
fn start_and_exit_handlers_run_once_per_worker() {
    let started = Arc::new(Mutex::new(Vec::new()));
    let exited = Arc::new(Mutex::new(Vec::new()));
    let (s, e) = (started.clone(), exited.clone());
    let pool = ThreadPoolBuilder::new()
        .num_threads(3)
        .start_handler(move |i| s.lock().unwrap().push(i))
        .exit_handler(move |i| e.lock().unwrap().push(i))
        .build()
        .unwrap();
    pool.install(|| ());
    drop(pool);
    let mut started = started.lock().unwrap().clone();
    let mut exited = exited.lock().unwrap().clone();
    started.sort();
    exited.sort();
    assert_eq!(started, [0, 1, 2]);
    assert_eq!(exited, [0, 1, 2]);
}

#[test]
fn between_tasks_hook_fires_after_every_top_level_task() {
    let safepoints = Arc::new(AtomicUsize::new(0));
    let counter = safepoints.clone();
    let pool = ThreadPoolBuilder::new()
        .num_threads(2)
        .between_tasks(move |index| {
            assert!(index < 2);
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    // Nobody waits inside a task here, so every task runs at top level.
    for _ in 0..500 {
        pool.spawn(|| {});
    }
    drop(pool);
    assert_eq!(safepoints.load(Ordering::SeqCst), 500);
}

#[test]
fn between_tasks_hook_never_fires_inside_a_task() {
    thread_local! {
        /// Tasks open on this thread's stack.
        static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    let safepoints = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let (c, i) = (safepoints.clone(), inside.clone());
    let pool = ThreadPoolBuilder::new()
        .num_threads(2)
        .between_tasks(move |_| {
            if DEPTH.with(|d| d.get()) != 0 {
                i.fetch_add(1, Ordering::SeqCst);
            }
            c.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    // The install body is an outer task; while its scope waits, its worker
    // runs scope tasks, and those must not count as "between tasks".
    for _ in 0..20 {
        pool.install(|| {
            DEPTH.with(|d| d.set(d.get() + 1));
            loam_threadpool::scope(|s| {
                for _ in 0..100 {
                    s.spawn(|_| {});
                }
            });
            DEPTH.with(|d| d.set(d.get() - 1));
        });
    }
    drop(pool);
    assert_eq!(inside.load(Ordering::SeqCst), 0, "safepoint inside a task");
    assert!(
        safepoints.load(Ordering::SeqCst) >= 20,
        "one per install job"
    );
}

#[test]
fn park_hooks_fire_in_pairs_around_parking() {
    let (sender, receiver) = mpsc::channel();
    let parked = Arc::new(AtomicUsize::new(0));
    let unparked = Arc::new(AtomicUsize::new(0));
    let (p, u) = (parked.clone(), unparked.clone());
    let sender = Mutex::new(sender);
    let pool = ThreadPoolBuilder::new()
        .num_threads(2)
        .before_park(move |index| {
            p.fetch_add(1, Ordering::SeqCst);
            let _ = sender.lock().unwrap().send(index);
        })
        .after_unpark(move |_| {
            u.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    // Both idle workers go to park.
    let mut first = [receiver.recv().unwrap(), receiver.recv().unwrap()];
    first.sort();
    assert!(first[0] < 2 && first[1] < 2);
    // Work wakes them; running it means they unparked.
    assert_eq!(pool.install(|| fib(15)), 610);
    assert!(unparked.load(Ordering::SeqCst) >= 1);
    drop(pool);
    assert_eq!(
        parked.load(Ordering::SeqCst),
        unparked.load(Ordering::SeqCst)
    );
}

#[test]
fn one_thread_pool_handles_deep_nesting() {
    let pool = pool(1);
    let count = AtomicUsize::new(0);
    pool.install(|| {
        loam_threadpool::scope(|s| {
            for _ in 0..10 {
                s.spawn(|_| {
                    let (a, b) = loam_threadpool::join(|| fib(10), || fib(11));
                    count.fetch_add((a + b) as usize, Ordering::Relaxed);
                });
            }
        })
    });
    assert_eq!(count.load(Ordering::Relaxed), 10 * 144);
}

#[test]
fn pools_calling_into_each_other_do_not_deadlock() {
    // One thread each: if the waiting worker of `a` blocked instead of
    // serving `a`, the innermost `a.install` could never run.
    // A deadlock fails the test after two minutes instead of hanging it.
    support::within(
        "pools calling into each other",
        std::time::Duration::from_secs(120),
        || {
            let a = pool(1);
            let b = pool(1);
            let value = a.install(|| b.install(|| a.install(|| b.install(|| fib(10)))));
            assert_eq!(value, 55);
            let (x, y) = a.install(|| b.join(|| a.install(|| 1), || a.install(|| 2)));
            assert_eq!((x, y), (1, 2));
        },
    );
}

#[test]
fn spawned_closures_small_and_large_run_once_and_drop_once() {
    // Two words or less travel inline in the queue, bigger ones are boxed:
    // either way each closure runs once and its captures drop once.
    let pool = pool(2);
    let token = Arc::new(());
    let sum = Arc::new(AtomicUsize::new(0));
    pool.scope(|s| {
        for i in 0..1000usize {
            let (small_token, sum) = (token.clone(), &sum);
            s.spawn(move |_| {
                let _token = small_token;
                sum.fetch_add(i, Ordering::Relaxed);
            });
            let (big_token, big) = (token.clone(), [i; 8]);
            s.spawn(move |_| {
                let _token = big_token;
                sum.fetch_add(big.iter().sum::<usize>() / 8, Ordering::Relaxed);
            });
        }
    });
    assert_eq!(sum.load(Ordering::Relaxed), 2 * (0..1000).sum::<usize>());
    let (sender, receiver) = mpsc::channel();
    for i in 0..1000usize {
        let (small, big) = (token.clone(), token.clone());
        let (s1, s2) = (sender.clone(), sender.clone());
        pool.spawn(move || {
            let _small = small;
            s1.send(i).unwrap();
        });
        let payload = [i; 8];
        pool.spawn(move || {
            let _big = big;
            s2.send(payload.iter().sum::<usize>() / 8).unwrap();
        });
    }
    let mut got: Vec<usize> = (0..2000).map(|_| receiver.recv().unwrap()).collect();
    got.sort();
    let mut want: Vec<usize> = (0..1000).chain(0..1000).collect();
    want.sort();
    assert_eq!(got, want);
    drop(pool);
    assert_eq!(Arc::strong_count(&token), 1, "every capture dropped once");
}
