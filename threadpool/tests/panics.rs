//! A panic in a task reaches whoever waits on it (join, scope, install,
//! broadcast) after the other work is done, spawned-task panics go to the
//! panic handler, and the pool keeps serving either way.
#![cfg(not(loom))]

mod support;

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

use loam_threadpool::ThreadPoolBuilder;

fn message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

fn pool(threads: usize) -> loam_threadpool::ThreadPool {
    ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

#[test]
fn join_resumes_a_panic_of_either_side_after_both_finish() {
    let pool = pool(2);
    let b_ran = AtomicBool::new(false);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        pool.join(
            || panic!("left"),
            || {
                b_ran.store(true, Ordering::SeqCst);
            },
        )
    }));
    assert_eq!(message(caught.unwrap_err()), "left");
    assert!(b_ran.load(Ordering::SeqCst), "b finished before the unwind");

    let caught = panic::catch_unwind(AssertUnwindSafe(|| pool.join(|| 1, || panic!("right"))));
    assert_eq!(message(caught.unwrap_err()), "right");

    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        pool.join(|| panic!("both-a"), || panic!("both-b"))
    }));
    assert_eq!(message(caught.unwrap_err()), "both-a");

    assert_eq!(pool.join(|| 1, || 2), (1, 2));
}

#[test]
fn panic_in_nested_join_reaches_the_outermost_caller() {
    let pool = pool(2);
    fn dive(depth: u32) -> u32 {
        if depth == 0 {
            panic!("deep");
        }
        let (a, b) = loam_threadpool::join(|| dive(depth - 1), || depth);
        a + b
    }
    let caught = panic::catch_unwind(AssertUnwindSafe(|| pool.install(|| dive(8))));
    assert_eq!(message(caught.unwrap_err()), "deep");
    assert_eq!(pool.install(|| 5), 5);
}

#[test]
fn scope_resumes_the_first_panic_after_all_tasks_finish() {
    let pool = pool(2);
    let finished = AtomicUsize::new(0);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        pool.scope(|s| {
            for i in 0..100 {
                let finished = &finished;
                s.spawn(move |_| {
                    if i == 50 {
                        panic!("task 50");
                    }
                    finished.fetch_add(1, Ordering::SeqCst);
                });
            }
        })
    }));
    assert_eq!(message(caught.unwrap_err()), "task 50");
    assert_eq!(finished.load(Ordering::SeqCst), 99);

    let finished = AtomicUsize::new(0);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        pool.scope(|s| {
            s.spawn(|_| {
                finished.fetch_add(1, Ordering::SeqCst);
            });
            panic!("body");
        })
    }));
    assert_eq!(message(caught.unwrap_err()), "body");
    assert_eq!(finished.load(Ordering::SeqCst), 1);
}

#[test]
fn install_resumes_a_panic_and_the_pool_keeps_serving() {
    let pool = pool(2);
    for _ in 0..10 {
        let caught = panic::catch_unwind(AssertUnwindSafe(|| pool.install(|| panic!("install"))));
        assert_eq!(message(caught.unwrap_err()), "install");
    }
    assert_eq!(pool.install(|| 42), 42);
}

#[test]
fn broadcast_resumes_a_panic_after_every_worker_ran() {
    let pool = pool(3);
    let ran = AtomicUsize::new(0);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        pool.broadcast(|ctx| {
            ran.fetch_add(1, Ordering::SeqCst);
            if ctx.index() == 1 {
                panic!("worker 1");
            }
        })
    }));
    assert_eq!(message(caught.unwrap_err()), "worker 1");
    assert_eq!(ran.load(Ordering::SeqCst), 3);
    assert_eq!(pool.broadcast(|ctx| ctx.index()), vec![0, 1, 2]);
}

#[test]
fn spawn_panics_go_to_the_configured_handler() {
    let (sender, receiver) = mpsc::channel();
    let sender = Mutex::new(sender);
    let pool = ThreadPoolBuilder::new()
        .num_threads(2)
        .panic_handler(move |payload| sender.lock().unwrap().send(message(payload)).unwrap())
        .build()
        .unwrap();
    for i in 0..5 {
        pool.spawn(move || panic!("spawned {i}"));
    }
    let mut messages: Vec<String> = (0..5).map(|_| receiver.recv().unwrap()).collect();
    messages.sort();
    assert_eq!(
        messages,
        [
            "spawned 0",
            "spawned 1",
            "spawned 2",
            "spawned 3",
            "spawned 4"
        ]
    );
    assert_eq!(pool.install(|| 3), 3);
}

/// In a child process, whose stderr the test reads: the report is the
/// pool's line naming the panic's message, once per panic.
#[test]
fn spawn_panics_without_a_handler_are_reported_and_the_pool_continues() {
    const CHILD: &str = "LOAM_POOL_REPORTED_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let pool = pool(1);
        let (sender, receiver) = mpsc::channel();
        for i in 0..3 {
            pool.spawn(move || panic!("reported on stderr {i}"));
        }
        pool.spawn(move || sender.send("after").unwrap());
        assert_eq!(receiver.recv().unwrap(), "after");
        assert_eq!(pool.install(|| 1), 1);
        println!("the pool served on");
        return;
    }
    let child = support::spawn_alone(
        "spawn_panics_without_a_handler_are_reported_and_the_pool_continues",
        &[(CHILD, "1")],
    );
    let out = support::output_within(
        child,
        std::time::Duration::from_secs(120),
        "the child hung: a spawned task's panic stopped the pool",
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("the pool served on"),
        "the child failed ({}); stdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for i in 0..3 {
        let line = format!(
            "loam-threadpool: a spawned task panicked (reported on stderr {i}); the pool continues"
        );
        assert_eq!(
            stderr.matches(&line).count(),
            1,
            "the pool's report of panic {i}, once; stderr:\n{stderr}"
        );
    }
}

/// As above with stderr gone (its reader closed, as `prog 2>&1 | head`
/// leaves it): the report is lost and the pool goes on. It was written
/// with `eprintln!`, which panicked on the worker, out of the job that
/// was to keep the pool serving. In a child process, whose stderr this
/// test closes.
#[test]
fn spawn_panics_without_a_handler_and_without_stderr_leave_the_pool_serving() {
    const CHILD: &str = "LOAM_POOL_PANICS_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let pool = pool(1);
        for i in 0..20 {
            pool.spawn(move || panic!("reported nowhere {i}"));
        }
        let (sender, receiver) = mpsc::channel();
        pool.spawn(move || sender.send("after").unwrap());
        assert_eq!(receiver.recv().unwrap(), "after");
        assert_eq!(pool.install(|| 1), 1);
        println!("the pool served on");
        return;
    }
    let mut child = support::spawn_alone(
        "spawn_panics_without_a_handler_and_without_stderr_leave_the_pool_serving",
        &[(CHILD, "1")],
    );
    drop(child.stderr.take());
    let out = support::output_within(
        child,
        std::time::Duration::from_secs(120),
        "the child hung: a worker died reporting a panic",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child failed ({}); stdout:\n{stdout}",
        out.status
    );
    assert!(stdout.contains("the pool served on"), "stdout:\n{stdout}");
}

/// A panic payload whose destructor panics too (`panic_any` takes any
/// type).
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a payload whose destructor panics");
    }
}

/// [`support::within`], two minutes.
fn within(what: &str, f: impl FnOnce() + Send + 'static) {
    support::within(what, std::time::Duration::from_secs(120), f);
}

/// Three panics in a scope, each payload a `Bomb`: one reaches the caller,
/// and the two the scope drops do not unwind out of the pool. The loser's
/// drop panicked inside `record_panic`: in a task, out of the job before
/// the scope's latch fell (the owner waited for ever); in the owner,
/// out of the frame the tasks still pointed into.
#[test]
fn scope_panics_whose_payloads_panic_when_dropped_leave_the_pool_serving() {
    within("a scope whose panics' payloads panic when dropped", || {
        let pool = pool(2);
        for _ in 0..20 {
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                pool.scope(|s| {
                    s.spawn(|_| panic::panic_any(Bomb));
                    s.spawn(|_| panic::panic_any(Bomb));
                    panic::panic_any(Bomb);
                })
            }));
            let payload = r.expect_err("the scope's panic reaches its caller");
            assert!(payload.is::<Bomb>());
            // Not dropped here: it would panic in this test.
            std::mem::forget(payload);
        }
        assert_eq!(pool.install(|| 7), 7);
    });
}

/// A spawned task's `Bomb` without a handler: reported, dropped without
/// an unwind, and the one worker goes on. Its drop panicked out of the
/// job and ended the worker.
#[test]
fn a_spawned_panic_whose_payload_panics_when_dropped_leaves_the_worker_serving() {
    within("a spawned panic whose payload panics when dropped", || {
        let pool = pool(1);
        pool.spawn(|| panic::panic_any(Bomb));
        let (sender, receiver) = mpsc::channel();
        pool.spawn(move || sender.send("after").unwrap());
        assert_eq!(receiver.recv().unwrap(), "after");
        assert_eq!(pool.install(|| 1), 1);
    });
}

#[test]
fn panics_in_inline_and_boxed_spawned_closures_are_caught() {
    let pool = pool(2);
    // A capture-free body travels inline; one with a big capture is boxed.
    let big = [7u64; 16];
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        pool.scope(|s| {
            s.spawn(|_| panic!("inline"));
        })
    }));
    assert_eq!(message(caught.unwrap_err()), "inline");
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        pool.scope(|s| {
            s.spawn(move |_| panic!("boxed {}", big.iter().sum::<u64>()));
        })
    }));
    assert_eq!(message(caught.unwrap_err()), "boxed 112");
    assert_eq!(pool.install(|| 9), 9);
}

/// Both halves of a `join` panic, each payload a `Bomb`: `a`'s reaches the
/// caller, `b`'s is dropped without an unwind. It was dropped by the
/// unwind of `a`'s panic, and its own panic there aborted the process.
/// The same for a `broadcast` whose every share panics.
#[test]
fn join_and_broadcast_panics_whose_payloads_panic_when_dropped_reach_the_caller() {
    within(
        "joins and broadcasts whose panics' payloads panic when dropped",
        || {
            let pool = pool(2);
            for _ in 0..20 {
                let r = panic::catch_unwind(AssertUnwindSafe(|| {
                    pool.join(|| panic::panic_any(Bomb), || panic::panic_any(Bomb))
                }));
                let payload = r.expect_err("the join's panic reaches its caller");
                assert!(payload.is::<Bomb>());
                std::mem::forget(payload);
                let r = panic::catch_unwind(AssertUnwindSafe(|| {
                    pool.broadcast(|_| panic::panic_any(Bomb))
                }));
                let payload = r.expect_err("the broadcast's panic reaches its caller");
                assert!(payload.is::<Bomb>());
                std::mem::forget(payload);
            }
            assert_eq!(pool.install(|| 7), 7);
        },
    );
}

/// A scope whose task panics and whose body returned a value that panics
/// when dropped: the task's panic reaches the caller. The value was
/// dropped by that panic's unwind, and its panic there aborted the process.
#[test]
fn a_scopes_result_that_panics_when_dropped_during_a_tasks_panic_is_dropped_quietly() {
    within("a scope whose result panics when dropped", || {
        struct PanicsOnDrop;
        impl Drop for PanicsOnDrop {
            fn drop(&mut self) {
                panic!("the scope's result panics as it is dropped");
            }
        }
        let pool = pool(2);
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.scope(|s| {
                s.spawn(|_| panic!("a task's panic"));
                PanicsOnDrop
            })
        }));
        let payload = match r {
            Ok(_) => panic!("the scope returned with a task's panic"),
            Err(p) => p,
        };
        assert_eq!(message(payload), "a task's panic");
        assert_eq!(pool.install(|| 7), 7);
    });
}
