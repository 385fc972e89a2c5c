//! Mutators that pacing holds while a sweep runs sweep its pages instead
//! of waiting for it (`Mutator::pace`, `sweep::Work::help`), and free only
//! garbage.
//!
//! One test in its own binary: it moves every GC thread of the process to
//! `SCHED_IDLE`, which must not slow other tests' runtimes. Linux only
//! (`sched_setscheduler`, `/proc/self/task`).
#![cfg(target_os = "linux")]

mod support;

use loam_runtime::{Gc, Root, Rootable, Runtime, Trace, Tracer};

/// A list node whose value is checked against its place in the list.
struct Node<'gc> {
    value: u64,
    next: Option<Gc<'gc, Node<'gc>>>,
}

// SAFETY: reports its one pointer (1), the same each time, touching nothing
// managed (2); needs tracing (3); no `Drop` (4).
unsafe impl<'gc> Trace for Node<'gc> {
    fn trace(&self, tracer: &mut Tracer) {
        self.next.trace(tracer)
    }
}

/// Every thread of this process whose name says it is a GC thread
/// (`loam-gc-<runtime>` and `loam-gc-<runtime>-<i>`) moves to `SCHED_IDLE`:
/// it runs only when the CPU it shares with the mutator has nothing else
/// to run, so the mutator does most of the collector's work.
fn idle_gc_threads() -> usize {
    let mut moved = 0;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let task = task.expect("a task entry");
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !name.starts_with("loam-gc-") {
            continue;
        }
        let tid: libc::pid_t = task
            .file_name()
            .to_string_lossy()
            .parse()
            .expect("a thread id");
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: a thread of this process; `param` is a valid
        // `sched_param` for `SCHED_IDLE` (priority 0).
        let r = unsafe { libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) };
        assert_eq!(
            r,
            0,
            "sched_setscheduler: {}",
            std::io::Error::last_os_error()
        );
        moved += 1;
    }
    moved
}

#[test]
fn mutators_held_by_pacing_sweep_and_free_only_garbage() {
    let t = std::thread::spawn(|| {
        // The mutator and (started after this) the GC threads on one CPU.
        support::pin_to_cpu(support::first_allowed_cpu());
        let rt = Runtime::builder()
            .ignore_env()
            .gc_threads(1)
            .min_heap(1 << 20)
            .verify(true)
            .build();
        let mut m = rt.attach();
        // Live data: a list whose values are checked after every cycle
        // (verify mode poisons what a sweep frees, so a live node freed by
        // a helper would show).
        const LIVE: u64 = 2000;
        let list: Root<Rootable!['gc => Node<'gc>]> = m.mutate(|mc| {
            let mut head = None;
            for value in (0..LIVE).rev() {
                head = Some(mc.alloc(Node { value, next: head }));
            }
            mc.root(head.expect("LIVE > 0"))
        });
        rt.collect();
        assert!(
            idle_gc_threads() >= 2,
            "the runtime's GC threads were not found"
        );
        for i in 0..3000_u64 {
            m.mutate(|mc| {
                for j in 0..64 {
                    mc.alloc([i + j; 16]);
                }
            });
            if i % 100 == 0 {
                m.mutate(|mc| {
                    let mut node = Some(list.get(mc));
                    let mut expected = 0;
                    while let Some(n) = node {
                        assert_eq!(n.value, expected, "a live node changed");
                        expected += 1;
                        node = n.next;
                    }
                    assert_eq!(expected, LIVE, "the live list lost nodes");
                });
            }
        }
        drop(m);
        rt.stats()
    });
    let s = t.join().unwrap();
    assert!(
        s.cycles >= 5,
        "{} cycles for 24 MiB over a 1 MiB goal",
        s.cycles
    );
    assert!(
        s.bytes_swept_by_mutators > 0,
        "no mutator swept, with the GC threads idle-class on its CPU: {s:?}"
    );
    assert!(s.bytes_swept_by_mutators <= s.bytes_freed, "{s:?}");
}
