//! Dropping a pool finishes its queued work, joins its threads, and never
//! deadlocks: idle pools, busy pools, pools dropped from their own workers.
#![cfg(not(loom))]

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use loam_threadpool::ThreadPoolBuilder;

/// A pool of two whose workers count their exits.
fn pool_counting_exits() -> (loam_threadpool::ThreadPool, Arc<AtomicUsize>) {
    let exited = Arc::new(AtomicUsize::new(0));
    let counter = exited.clone();
    let pool = ThreadPoolBuilder::new()
        .num_threads(2)
        .exit_handler(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    (pool, exited)
}

#[test]
fn drop_finishes_queued_work_including_work_it_spawns() {
    let done = Arc::new(AtomicUsize::new(0));
    let (pool, exited) = pool_counting_exits();
    for _ in 0..1000 {
        let done = done.clone();
        pool.spawn(move || {
            done.fetch_add(1, Ordering::SeqCst);
            let done = done.clone();
            loam_threadpool::spawn(move || {
                done.fetch_add(1, Ordering::SeqCst);
            });
        });
    }
    drop(pool);
    assert_eq!(done.load(Ordering::SeqCst), 2000);
    assert_eq!(exited.load(Ordering::SeqCst), 2, "threads joined");
}

#[test]
fn dropping_idle_and_fresh_pools_does_not_deadlock() {
    for threads in [1, 2, 4] {
        for _ in 0..20 {
            let pool = ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            drop_within_a_minute(pool, "dropping a fresh pool");
        }
        let pool = ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| ());
        drop_within_a_minute(pool, "dropping an idle pool");
    }
}

#[test]
fn dropping_the_last_handle_on_its_own_worker_does_not_deadlock() {
    let (exit_sender, exit_receiver) = mpsc::channel();
    let exit_sender = Mutex::new(exit_sender);
    let pool = Arc::new(
        ThreadPoolBuilder::new()
            .num_threads(2)
            .exit_handler(move |i| exit_sender.lock().unwrap().send(i).unwrap())
            .build()
            .unwrap(),
    );
    let (go_sender, go_receiver) = mpsc::channel::<()>();
    let handle = pool.clone();
    pool.spawn(move || {
        go_receiver.recv().unwrap();
        drop(handle); // the last handle, dropped on a worker
    });
    drop(pool);
    go_sender.send(()).unwrap();
    // A deadlock fails the test after a minute instead of hanging it.
    let patience = std::time::Duration::from_secs(60);
    let mut exits = [(); 2].map(|()| {
        exit_receiver
            .recv_timeout(patience)
            .expect("deadlock: a worker never exited after the last handle dropped on a worker")
    });
    exits.sort();
    assert_eq!(exits, [0, 1]);
}

#[test]
fn drop_waits_for_a_long_join_tree_in_flight() {
    fn count(depth: u32, counter: &AtomicUsize) {
        if depth == 0 {
            counter.fetch_add(1, Ordering::Relaxed);
            return;
        }
        loam_threadpool::join(|| count(depth - 1, counter), || count(depth - 1, counter));
    }
    let counter = Arc::new(AtomicUsize::new(0));
    let pool = ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let c = counter.clone();
    pool.spawn(move || count(12, &c));
    drop(pool);
    assert_eq!(counter.load(Ordering::Relaxed), 1 << 12);
}

/// Runs test `name` again alone in a child process with `var` set (the
/// half of a test that forks: `fork` copies only the calling thread, and a
/// lock another test's thread held at that instant would stay held in the
/// forked child), and asserts that it passed.
#[cfg(unix)]
fn in_a_process_of_its_own(name: &str, var: &str) {
    let out = support::alone(name, &[(var, "1")]).output().unwrap();
    assert!(
        out.status.success(),
        "the child failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `r` is the refusal a pool gives in a child forked after it was
/// built: a panic naming the fork.
#[cfg(unix)]
fn refused_after_fork<T>(r: std::thread::Result<T>) -> bool {
    match r {
        Err(p) => p
            .downcast_ref::<&str>()
            .copied()
            .or(p.downcast_ref::<String>().map(String::as_str))
            .is_some_and(|s| s.contains("forked after the pool was built")),
        Ok(_) => false,
    }
}

/// Forks; the child runs `check` and leaves with `_exit`, 0 if it returned
/// true, 3 if not (it runs nothing of the parent's: the system allocator is
/// fork-safe). In the parent, waits up to two minutes for the child
/// (killing it and failing after: a hang) and asserts that it exited with
/// 0, or fails with `what`.
#[cfg(unix)]
fn in_a_forked_child(check: impl FnOnce() -> bool, what: &str) {
    // `fork` takes no pointers; the child is as just said.
    // SAFETY: as just said.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let passed = check();
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(if passed { 0 } else { 3 }) };
    }
    let mut status = 0;
    let mut ended = false;
    for _ in 0..1200 {
        // SAFETY: `status` is a valid out-pointer; `pid` is our child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            ended = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if !ended {
        // SAFETY: `kill` takes no pointers; `pid` is our child, not waited for.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("deadlock: the forked child hung");
    }
    assert!(
        libc::WIFEXITED(status),
        "the child did not exit (status {status:#x}): it aborted?"
    );
    assert_eq!(libc::WEXITSTATUS(status), 0, "{what}");
}

/// A forked child has none of a pool's workers: `install` there panics
/// with a message naming fork, and dropping the pool returns (it leaks).
/// Before, the injected job never ran and `install` waited for ever, as
/// did the drop's join of the workers.
#[cfg(unix)]
#[test]
fn a_pool_in_a_forked_child_refuses_with_a_message_and_its_drop_returns() {
    const CHILD: &str = "LOAM_POOL_FORK_CHILD";
    if std::env::var_os(CHILD).is_none() {
        in_a_process_of_its_own(
            "a_pool_in_a_forked_child_refuses_with_a_message_and_its_drop_returns",
            CHILD,
        );
        return;
    }
    let pool = loam_threadpool::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    assert_eq!(pool.install(|| 1 + 1), 2);
    in_a_forked_child(
        || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pool.install(|| 3)));
            let refused = refused_after_fork(r);
            drop(pool);
            refused
        },
        "install in the forked child did not refuse",
    );
}

/// A child forked on a worker (inside `install`): its one thread is that
/// worker, and a `broadcast` there went straight to the workers' inboxes
/// under the in-flight guard, which turned the documented refusal into an
/// abort. It panics with the message now, before anything is queued.
#[cfg(unix)]
#[test]
fn a_broadcast_in_a_child_forked_on_a_worker_refuses_with_a_message() {
    const CHILD: &str = "LOAM_POOL_FORK_WORKER_CHILD";
    if std::env::var_os(CHILD).is_none() {
        in_a_process_of_its_own(
            "a_broadcast_in_a_child_forked_on_a_worker_refuses_with_a_message",
            CHILD,
        );
        return;
    }
    let pool = loam_threadpool::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    pool.install(|| {
        in_a_forked_child(
            || {
                refused_after_fork(std::panic::catch_unwind(|| {
                    loam_threadpool::broadcast(|_| 1)
                }))
                // `spawn` too (a worker's push never checked: the job was
                // queued for no worker), and `join` runs both halves on
                // the thread that forked, waking none of the parent's
                // workers (whose sleep mutexes may have been held at the
                // fork).
                    && refused_after_fork(std::panic::catch_unwind(|| loam_threadpool::spawn(|| ())))
                    && loam_threadpool::join(|| 1, || 2) == (1, 2)
            },
            "broadcast or spawn in the forked child did not refuse, or join did not run",
        )
    });
}

/// Drops `pool` on a thread of its own and waits for the drop to return,
/// failing the test after a minute (a hang, not a slow machine).
fn drop_within_a_minute(pool: loam_threadpool::ThreadPool, what: &str) {
    support::within(what, std::time::Duration::from_secs(60), move || drop(pool));
}

/// A job still running when the pool drops broadcasts after the other
/// worker ran out of work. That worker used to exit at its first empty
/// look-up, the broadcast waited for ever for its share, and so did the
/// drop. The job waits until the other worker, after the drop began, has
/// exited (before the fix) or parked in the exit protocol (with it); it
/// waited a fixed 200 ms before, which let the test pass without the drop
/// having begun.
#[test]
fn a_broadcast_while_the_pool_drops_reaches_every_worker() {
    let ran = Arc::new(AtomicUsize::new(0));
    let exited = Arc::new(AtomicUsize::new(0));
    let dropping = Arc::new(AtomicBool::new(false));
    let parked_since = Arc::new(AtomicUsize::new(0));
    let pool = {
        let (exited, dropping, parked_since) =
            (exited.clone(), dropping.clone(), parked_since.clone());
        ThreadPoolBuilder::new()
            .num_threads(2)
            .exit_handler(move |_| {
                exited.fetch_add(1, Ordering::SeqCst);
            })
            .before_park(move |_| {
                if dropping.load(Ordering::SeqCst) {
                    parked_since.fetch_add(1, Ordering::SeqCst);
                }
            })
            .build()
            .unwrap()
    };
    let (started_tx, started_rx) = mpsc::channel();
    let met = Arc::new(AtomicBool::new(false));
    let (exited2, ran2, parked2, met2) = (
        exited.clone(),
        ran.clone(),
        parked_since.clone(),
        met.clone(),
    );
    pool.spawn(move || {
        started_tx.send(()).unwrap();
        // Only the other worker parks meanwhile (this one runs the job).
        for _ in 0..10_000 {
            if exited2.load(Ordering::SeqCst) > 0 || parked2.load(Ordering::SeqCst) > 0 {
                met2.store(true, Ordering::SeqCst);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        loam_threadpool::broadcast(|_| {
            ran2.fetch_add(1, Ordering::SeqCst);
        });
    });
    started_rx.recv().unwrap();
    dropping.store(true, Ordering::SeqCst);
    drop_within_a_minute(pool, "a broadcast from a job while the pool drops");
    assert!(
        met.load(Ordering::SeqCst),
        "the other worker neither parked nor exited once the drop began"
    );
    assert_eq!(
        ran.load(Ordering::SeqCst),
        2,
        "the broadcast ran on both workers"
    );
    assert_eq!(exited.load(Ordering::SeqCst), 2);
}

/// A worker waiting on a join's latch while the pool drops sleeps: it
/// used to take termination for work and spin (park and wake at once,
/// for as long as the job it waited for ran). Counted by the park hook:
/// a handful of parks, not thousands, while the other half blocks. The
/// count starts 100 ms after the dropping thread has run up to the drop
/// (a flag it sets just before), so a dropper the machine has not run at
/// all cannot pass it.
#[test]
fn a_join_waiting_while_the_pool_drops_sleeps() {
    let parks = Arc::new(AtomicUsize::new(0));
    let counter = parks.clone();
    let pool = ThreadPoolBuilder::new()
        .num_threads(2)
        .before_park(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (blocked_tx, blocked_rx) = mpsc::channel();
    let (stolen_tx, stolen_rx) = mpsc::channel();
    let (release_rx, stolen_rx) = (Mutex::new(release_rx), Mutex::new(stolen_rx));
    pool.spawn(move || {
        loam_threadpool::join(
            // Returns once the other worker took the second half: this
            // worker then waits on the join's latch.
            move || stolen_rx.lock().unwrap().recv().unwrap(),
            move || {
                stolen_tx.send(()).unwrap();
                blocked_tx.send(()).unwrap();
                let _ = release_rx.lock().unwrap().recv();
            },
        );
    });
    blocked_rx.recv().unwrap();
    let dropping = Arc::new(AtomicBool::new(false));
    let dropper = std::thread::spawn({
        let dropping = dropping.clone();
        move || {
            dropping.store(true, Ordering::SeqCst);
            drop(pool)
        }
    });
    while !dropping.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let before = parks.load(Ordering::SeqCst);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let during = parks.load(Ordering::SeqCst) - before;
    release_tx.send(()).unwrap();
    dropper.join().unwrap();
    assert!(during < 50, "{during} parks in 100 ms of one join's wait");
}

/// A `thread_name` that panics unwinds out of `build` before any thread
/// starts: the names used to be made one per spawn, and the workers
/// started before the panic stayed parked for the process's life.
#[test]
fn a_thread_name_that_panics_starts_no_thread() {
    let (started_tx, started_rx) = mpsc::channel();
    let started_tx = Mutex::new(started_tx);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ThreadPoolBuilder::new()
            .num_threads(3)
            .thread_name(|i| {
                assert!(i < 2, "no name for worker {i}");
                format!("named-{i}")
            })
            .start_handler(move |i| {
                let _ = started_tx.lock().unwrap().send(i);
            })
            .build()
    }));
    assert!(r.is_err(), "the name's panic reaches the caller");
    // Workers 0 and 1 were started before the panic: each ran its start
    // handler at once. Half a second is ample for that to show.
    assert_eq!(
        started_rx.recv_timeout(std::time::Duration::from_millis(500)),
        Err(mpsc::RecvTimeoutError::Disconnected),
        "a worker started"
    );
}

/// The second of four workers cannot start (256 MiB stacks under an
/// address space limit with room for one): `build` returns the error. The one
/// started worker used to wait for a termination count of four, for
/// ever, and so did `build`, joining it. In a child process of its own,
/// for the limit.
#[cfg(target_os = "linux")]
#[test]
fn a_pool_whose_second_worker_cannot_start_returns_the_error() {
    const CHILD: &str = "LOAM_POOL_SPAWN_FAIL_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let child = support::spawn_alone(
            "a_pool_whose_second_worker_cannot_start_returns_the_error",
            &[(CHILD, "1")],
        );
        let out = support::output_within(
            child,
            std::time::Duration::from_secs(60),
            "deadlock: build hung after its second worker failed to start",
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the child failed:\n{err}");
        // The case met and checked, or said not to be met here (it passed
        // without a word before, either way).
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains("one worker started and was joined") || err.contains("case not met"),
            "the child checked nothing:\n{said}\n{err}"
        );
        return;
    }
    let vm_kib: u64 = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    // Room for one 256 MiB stack and what a thread reserves besides (a
    // malloc arena, 64 MiB), not for two stacks. Only the soft limit, under
    // the hard one, which an unprivileged process cannot raise.
    let mut rlimit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rlimit` is a valid out-pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rlimit) }, 0);
    let limit = ((vm_kib << 10) + (400 << 20)).min(rlimit.rlim_max);
    rlimit.rlim_cur = limit;
    // SAFETY: `rlimit` is a valid rlimit for the call to read.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rlimit) }, 0);
    let started = Arc::new(AtomicUsize::new(0));
    let counter = started.clone();
    let r = ThreadPoolBuilder::new()
        .num_threads(4)
        .stack_size(256 << 20)
        .start_handler(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .build();
    let Err(e) = r else {
        panic!("four 256 MiB stacks under a limit with room for one all started");
    };
    assert!(
        matches!(e.kind(), loam_threadpool::ThreadPoolBuildErrorKind::Spawn),
        "{e:?}"
    );
    if started.load(Ordering::SeqCst) == 0 {
        // Strict overcommit, or a hard limit below the room asked for:
        // not even one started, and the case was not met.
        eprintln!("no worker could start under the limit here: case not met");
        return;
    }
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "one worker started, and was joined"
    );
    println!("one worker started and was joined");
}

/// A worker name with a NUL byte: `build` panics with a message before any
/// worker starts (`thread::Builder::spawn` panicked on it with the workers
/// before it started and stranded).
#[test]
fn a_thread_name_with_a_nul_byte_starts_no_thread() {
    let (started_tx, started_rx) = mpsc::channel();
    let started_tx = Mutex::new(started_tx);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ThreadPoolBuilder::new()
            .num_threads(3)
            .thread_name(|i| {
                if i == 2 {
                    "bad\0name".into()
                } else {
                    format!("ok-{i}")
                }
            })
            .start_handler(move |i| {
                let _ = started_tx.lock().unwrap().send(i);
            })
            .build()
    }));
    let msg = match r {
        Ok(_) => panic!("a NUL in a thread name was accepted"),
        Err(e) => e.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(msg.contains("NUL"), "{msg}");
    assert_eq!(
        started_rx.recv_timeout(std::time::Duration::from_millis(500)),
        Err(mpsc::RecvTimeoutError::Disconnected),
        "a worker started"
    );
}

/// The last handle of pool A dropped by a job of pool B that a worker of A
/// waits for (A's job `install`s into B). The drop joined A's workers, one
/// of which waited for the drop's own thread: a deadlock. On a worker of
/// any pool the drop now tells the workers to exit and does not wait.
#[test]
fn dropping_a_pool_on_a_worker_of_another_pool_it_waits_for_does_not_deadlock() {
    support::within(
        "a pool dropped by the other pool's job it waits for",
        std::time::Duration::from_secs(60),
        || {
            let (exit_sender, exit_receiver) = mpsc::channel();
            let exit_sender = Mutex::new(exit_sender);
            let a = ThreadPoolBuilder::new()
                .num_threads(1)
                .exit_handler(move |i| exit_sender.lock().unwrap().send(i).unwrap())
                .build()
                .unwrap();
            let b = Arc::new(ThreadPoolBuilder::new().num_threads(1).build().unwrap());
            let slot = Arc::new(Mutex::new(Some(a)));
            let (done_sender, done_receiver) = mpsc::channel();
            {
                // The job's `take` waits for this guard: A is in the slot.
                let a = slot.lock().unwrap();
                let slot = slot.clone();
                let b = b.clone();
                a.as_ref().unwrap().spawn(move || {
                    // On A's worker: wait for a job of B that drops A.
                    b.install(|| drop(slot.lock().unwrap().take()));
                    done_sender.send(()).unwrap();
                });
            }
            done_receiver.recv().unwrap();
            assert_eq!(exit_receiver.recv().unwrap(), 0, "A's worker exits");
        },
    );
}

/// Work queued in an exit handler: every worker has stopped taking work,
/// so a spawned task was lost without a word (its closure never run nor
/// dropped), and a broadcast waited for ever for the workers that had
/// left, and the pool's drop with it. Both now panic with a message,
/// which aborts (a hook must not panic). In child processes.
#[test]
fn work_queued_in_an_exit_handler_stops_the_process_with_a_message() {
    const CHILD: &str = "LOAM_POOL_EXIT_HOOK_CHILD";
    if let Some(what) = std::env::var_os(CHILD) {
        let spawns = what == "spawn";
        let pool = ThreadPoolBuilder::new()
            .num_threads(2)
            .exit_handler(move |_| {
                if spawns {
                    loam_threadpool::spawn(|| println!("ran"));
                } else {
                    loam_threadpool::broadcast(|_| ());
                }
            })
            .build()
            .unwrap();
        drop(pool);
        println!("dropped");
        return;
    }
    for (what, message) in [
        (
            "spawn",
            "a task spawned in a pool's exit handler would never run",
        ),
        ("broadcast", "in a pool's exit handler"),
    ] {
        child_stops_with(
            "work_queued_in_an_exit_handler_stops_the_process_with_a_message",
            (CHILD, what),
            message,
            "ran",
        );
    }
}

/// Runs this binary's test `test` alone in a child process with `env`
/// set, and checks that it stopped (not a success) with `message` on
/// stderr, never having printed `not_printed`.
fn child_stops_with(test: &str, env: (&str, &str), message: &str, not_printed: &str) {
    let what = env.1;
    let child = support::spawn_alone(test, &[env]);
    let out = support::output_within(
        child,
        std::time::Duration::from_secs(60),
        &format!("{what}: the child hung"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what}: the child went on");
    assert!(stderr.contains(message), "{what}: stderr:\n{stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(not_printed),
        "{what}: printed {not_printed:?}"
    );
}

/// Work spawned from a park hook (`before_park`, `after_unpark`): in a
/// pool being dropped, a worker that counted itself out of work ran the
/// hook, its job went on its own deque, and the last worker's exit could
/// leave it there, never run nor dropped. Such a spawn panics with a
/// message, which aborts (a hook must not panic). In child processes.
#[test]
fn work_spawned_in_a_park_hook_stops_the_process_with_a_message() {
    const CHILD: &str = "LOAM_POOL_PARK_HOOK_CHILD";
    if let Some(which) = std::env::var_os(CHILD) {
        let builder = ThreadPoolBuilder::new().num_threads(2);
        let builder = if which == "before_park" {
            builder.before_park(|_| loam_threadpool::spawn(|| println!("ran")))
        } else if which == "after_unpark" {
            builder.after_unpark(|_| loam_threadpool::spawn(|| println!("ran")))
        } else {
            // A scope's spawn: refused before the scope's count rises, or
            // the scope waited (parking, so running the hook again) for a
            // task never queued.
            builder.before_park(|_| loam_threadpool::scope(|s| s.spawn(|_| println!("ran"))))
        };
        let pool = builder.build().unwrap();
        // Idle workers park, and each job wakes one (`after_unpark`);
        // for up to 30 s, should the hooks never run.
        for _ in 0..3_000 {
            pool.spawn(|| ());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        drop(pool);
        println!("dropped");
        return;
    }
    for which in ["before_park", "after_unpark", "scope"] {
        child_stops_with(
            "work_spawned_in_a_park_hook_stops_the_process_with_a_message",
            (CHILD, which),
            "spawned on a pool from its own before_park or after_unpark hook",
            "dropped",
        );
    }
}

/// A refused `spawn` drops its closure: a job that was made and then
/// refused leaked it, and a receiver waiting for its `Sender` to go
/// waited for ever.
#[cfg(unix)]
#[test]
fn a_spawn_refused_in_a_forked_child_drops_its_closure() {
    const CHILD: &str = "LOAM_POOL_FORK_SPAWN_DROP_CHILD";
    if std::env::var_os(CHILD).is_none() {
        in_a_process_of_its_own("a_spawn_refused_in_a_forked_child_drops_its_closure", CHILD);
        return;
    }
    let pool = loam_threadpool::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    in_a_forked_child(
        || {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let refused = refused_after_fork(std::panic::catch_unwind(
                std::panic::AssertUnwindSafe(|| pool.spawn(move || drop(tx))),
            ));
            refused && rx.recv().is_err()
        },
        "a refused spawn kept its closure",
    );
}
