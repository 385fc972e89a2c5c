//! `fork` while other threads allocate, free, start and exit: each child
//! allocates and frees through the heap and exits; none may hang on a lock
//! another thread held at the fork. (Without the heap's `pthread_atfork`
//! handlers, children spun for ever in the orphan list's lock.) The scale
//! is `LOAM_FORK_TEST_FORKS` (default 300).

mod support;

use loam_heap::LoamAlloc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[global_allocator]
static GLOBAL: LoamAlloc = LoamAlloc;

/// Churn in the parent: threads that allocate a mix of sizes (huge ones
/// too, for the huge-segment cache), free them, and exit, so that their
/// heaps become orphans that new threads adopt.
fn churn(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut round = 0_usize;
        while !stop.load(Ordering::Relaxed) {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut kept: Vec<Vec<u8>> = Vec::new();
                for i in 0..2_000 {
                    let size = [24, 200, 3_000, 70_000][i % 4] + round % 7;
                    kept.push(vec![i as u8; size]);
                    if kept.len() > 64 {
                        kept.swap_remove(i % 64);
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                if round % 16 == 0 {
                    drop(vec![0_u8; 8 << 20]); // a huge segment, cached
                }
            })
            .join()
            .unwrap();
            round += 1;
        }
    })
}

/// What a child does: allocate and free through the heap, then `_exit`.
/// A child stuck on a lock is ended by its own alarm (SIGALRM), which the
/// parent sees in its status: the parent measures no time.
fn child() -> ! {
    // SAFETY: `alarm` only schedules a signal for this process.
    unsafe { libc::alarm(30) };
    let mut v: Vec<Box<[u8]>> = (0..1_000)
        .map(|i| vec![i as u8; 16 + i % 300].into_boxed_slice())
        .collect();
    v.truncate(10);
    let big = vec![1_u8; 8 << 20];
    let ok = v.len() == 10 && big[12345] == 1;
    drop((v, big));
    // SAFETY: `_exit` ends the child without running the parent's atexit
    // handlers or destructors.
    unsafe { libc::_exit(if ok { 0 } else { 3 }) }
}

#[test]
fn children_forked_while_threads_allocate_can_allocate() {
    let forks = support::knob("LOAM_FORK_TEST_FORKS", 300, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let churners: Vec<_> = (0..2).map(|_| churn(stop.clone())).collect();
    let mut hung = 0;
    for _ in 0..forks {
        // SAFETY: the child calls only the heap and `_exit` (`child`).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            child();
        }
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid, "waitpid failed");
        if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM {
            hung += 1;
            continue;
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a child failed: status {status:#x}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for c in churners {
        c.join().unwrap();
    }
    assert_eq!(hung, 0, "{hung} of {forks} children hung after fork");
}

/// A child forked while another thread walks the pages (a collector's
/// snapshot, `for_each_page`, which keeps the segments that die during it
/// mapped until it ends) still gives back the segments that die in it:
/// the walk is on a thread the child does not have. Seen through the huge
/// cache: a huge block freed in the child is cached and serves the next
/// one of its size, rather than waiting unmapped-later for a walk that
/// never ends there.
#[test]
fn a_child_forked_during_a_page_walk_releases_its_segments() {
    let keep = Box::new(7_u64); // a page for the walk to meet
    let entered = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let walker = {
        let (entered, done) = (entered.clone(), done.clone());
        std::thread::spawn(move || {
            let mut first = true;
            // SAFETY: the closure keeps no PageRef; it waits, which the walk
            // allows.
            unsafe {
                loam_heap::for_each_page(|_| {
                    if std::mem::take(&mut first) {
                        entered.store(true, Ordering::Release);
                        while !done.load(Ordering::Acquire) {
                            std::thread::yield_now();
                        }
                    }
                })
            };
        })
    };
    while !entered.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    // SAFETY: the child calls only the heap, `stats` and `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: `alarm` only schedules a signal for this process.
        unsafe { libc::alarm(30) };
        // Larger than anything the cache could hold from the parent.
        let size = 40 << 20;
        drop(vec![1_u8; size]);
        let mapped = loam_heap::stats().segments_mapped_total;
        let again = vec![2_u8; size];
        let reused = loam_heap::stats().segments_mapped_total == mapped;
        drop(again);
        // SAFETY: ends the child without the parent's atexit handlers.
        unsafe { libc::_exit(if reused { 0 } else { 4 }) }
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    done.store(true, Ordering::Release);
    walker.join().unwrap();
    drop(keep);
    assert_eq!(r, pid, "waitpid failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's freed huge segment was not cached (status {status:#x}; 4: it waited \
         for a walk the child does not have)"
    );
}
