//! `loam_heap::lend`: a thread that waits lends its heap, and the threads
//! that run meanwhile drain it and take its memory instead of mapping
//! their own; the lender takes its heap back when it runs again, on every
//! path out. The tests share the process's heap figures: they take turns.
//! The churn's size is `LOAM_LEND_TEST_ROUNDS` (default 200).

mod support;

use loam_heap::LoamAlloc;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[global_allocator]
static GLOBAL: LoamAlloc = LoamAlloc;

/// One test at a time: the heap's figures are the whole process's.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the purge delay for a test, and back to what it was when dropped,
/// failed test or not.
struct PurgeDelay(Duration);

impl PurgeDelay {
    fn set(d: Duration) -> PurgeDelay {
        let was = loam_heap::purge_delay();
        loam_heap::set_purge_delay(d);
        PurgeDelay(was)
    }
}

impl Drop for PurgeDelay {
    fn drop(&mut self) {
        loam_heap::set_purge_delay(self.0);
    }
}

/// A barrier that a thread's panic breaks: its waiters panic too instead
/// of waiting for ever for the thread that will not come (the threads hold
/// a [`Breaks`] while they run).
struct Barrier {
    state: Mutex<(usize, u64)>,
    cv: Condvar,
    n: usize,
    broken: std::sync::atomic::AtomicBool,
}

impl Barrier {
    fn new(n: usize) -> Barrier {
        Barrier {
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
            n,
            broken: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn wait(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let generation = s.1;
        s.0 += 1;
        if s.0 == self.n {
            *s = (0, generation + 1);
            self.cv.notify_all();
            return;
        }
        while s.1 == generation {
            assert!(
                !self.broken.load(std::sync::atomic::Ordering::Relaxed),
                "another thread panicked"
            );
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// About 32 MiB of 64-byte blocks, each stamped with its index (boxed
/// one by one: each its own block).
#[allow(clippy::vec_box)]
fn stamped() -> Vec<Box<[u64; 8]>> {
    (0..500_000_u64).map(|i| Box::new([i; 8])).collect()
}

/// Breaks its barrier if dropped by a panic.
struct Breaks<'a>(&'a Barrier);

impl Drop for Breaks<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _s = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            self.0
                .broken
                .store(true, std::sync::atomic::Ordering::Relaxed);
            self.0.cv.notify_all();
        }
    }
}

#[test]
fn what_others_free_to_a_lent_heap_serves_the_threads_that_run() {
    let _t = turn();
    // Nothing goes back to the OS while the test runs.
    let _delay = PurgeDelay::set(Duration::from_secs(3600));
    let (tx, rx) = mpsc::channel::<Vec<Box<[u64; 8]>>>();
    let freer = std::thread::spawn(move || {
        for (i, b) in rx.recv().unwrap().into_iter().enumerate() {
            assert_eq!(b[7], i as u64);
        }
    });
    let blocks = stamped();
    let before = loam_heap::stats();
    let (lent, mapped) = loam_heap::lend(|| {
        let lent = loam_heap::stats().heaps_lent;
        // Freed by another thread while this one waits: the blocks go back
        // to this thread's heap, which it does not run.
        tx.send(blocks).unwrap();
        freer.join().unwrap();
        // A thread that needs 24 MiB takes them rather than map its own.
        std::thread::spawn(|| {
            let v: Vec<Box<[u64; 8]>> = (0..400_000_u64).map(|i| Box::new([i; 8])).collect();
            assert!(v.iter().enumerate().all(|(i, b)| b[0] == i as u64));
        })
        .join()
        .unwrap();
        (lent, loam_heap::stats().segments_mapped_total)
    });
    assert_eq!(lent, 1, "the heap was not lent");
    assert!(loam_heap::stats().lent_borrows > before.lent_borrows);
    assert!(
        mapped <= before.segments_mapped_total + 1,
        "the other thread mapped {} segments beside a lent heap of 32 MiB freed",
        mapped - before.segments_mapped_total
    );
    // Back, this thread allocates as before, wherever its memory went.
    assert_eq!(loam_heap::stats().heaps_lent, 0);
    let again = stamped();
    assert!(again.iter().enumerate().all(|(i, b)| b[3] == i as u64));
    drop(again);
    loam_heap::assert_valid();
}

#[test]
fn the_lender_takes_its_heap_back_on_every_way_out() {
    let _t = turn();
    // Warm: the thread has a heap to lend.
    drop(std::hint::black_box(vec![1_u8; 100]));
    // A plain allocation inside takes the heap back for its time, and
    // lends it again; a collector's object takes it back for good (its
    // allocated bit is out, and once set, the heap stays the thread's
    // until `lend` returns).
    let (inside, after_alloc, after_object) = loam_heap::lend(|| {
        let inside = loam_heap::stats().heaps_lent;
        let v = vec![7_u8; 1000];
        assert_eq!(v[999], 7);
        let after_alloc = loam_heap::stats().heaps_lent;
        let (p, bit) = loam_heap::alloc_object(48, 8, 0, 0);
        assert!(!p.is_null());
        bit.unwrap().set();
        (inside, after_alloc, loam_heap::stats().heaps_lent)
    });
    assert_eq!((inside, after_alloc, after_object), (1, 1, 0));
    // A free inside does not: it goes to the heap's queue, as another
    // thread's would, and the heap stays lent.
    let v = vec![3_u64; 4096];
    let (before_free, after_free) = loam_heap::lend(|| {
        let before = loam_heap::stats().heaps_lent;
        drop(v);
        (before, loam_heap::stats().heaps_lent)
    });
    assert_eq!((before_free, after_free), (1, 1));
    assert_eq!(loam_heap::stats().heaps_lent, 0);
    // Lending twice over lends once.
    let nested = loam_heap::lend(|| loam_heap::lend(|| loam_heap::stats().heaps_lent));
    assert_eq!(nested, 1);
    assert_eq!(loam_heap::stats().heaps_lent, 0);
    // A panic inside: taken back as it unwinds (`catch_unwind` allocates
    // the payload's box, after the guard ran or before it: both take it
    // back).
    let r = std::panic::catch_unwind(|| loam_heap::lend(|| panic!("inside lend")));
    assert!(r.is_err());
    assert_eq!(loam_heap::stats().heaps_lent, 0);
    // The heap is this thread's again: its pages are seen from here.
    let keep = vec![5_u8; 200];
    let mut pages = 0;
    loam_heap::for_each_local_page(|p| pages += usize::from(p.used > 0));
    assert!(pages > 0);
    drop(keep);
    loam_heap::assert_valid();
}

#[test]
fn an_idle_lend_lasts_until_taken_back_and_leaves_an_enclosing_lend_alone() {
    let _t = turn();
    let lent = || loam_heap::stats().heaps_lent;
    // Warm: the thread has a heap to lend.
    drop(std::hint::black_box(vec![1_u8; 100]));
    // Lent until taken back, once however often asked.
    loam_heap::lend_idle();
    loam_heap::lend_idle();
    assert_eq!(lent(), 1);
    // A plain allocation takes it back for its length only, and a `lend`
    // inside finds it lent and leaves it so.
    let v = vec![7_u8; 1000];
    assert_eq!(lent(), 1);
    assert_eq!(loam_heap::lend(lent), 1);
    assert_eq!(lent(), 1);
    loam_heap::take_back_idle();
    assert_eq!(lent(), 0);
    loam_heap::take_back_idle(); // nothing lent: nothing to do
    assert_eq!(lent(), 0);
    // Inside `lend`, an idle lend lends nothing more and takes back
    // nothing: the heap is `lend`'s until it returns.
    let inside = loam_heap::lend(|| {
        loam_heap::lend_idle();
        loam_heap::take_back_idle();
        lent()
    });
    assert_eq!(inside, 1);
    assert_eq!(lent(), 0);
    // A collector's object takes the heap back for good: a later take-back
    // has nothing of the idle lend's to take, and leaves a `lend` alone.
    loam_heap::lend_idle();
    let (p, bit) = loam_heap::alloc_object(48, 8, 0, 0);
    assert!(!p.is_null());
    bit.unwrap().set();
    assert_eq!(lent(), 0);
    let inside = loam_heap::lend(|| {
        loam_heap::take_back_idle();
        lent()
    });
    assert_eq!(inside, 1);
    assert_eq!(lent(), 0);
    // Frees while lent are remote (the heap's queue), and the heap is
    // whole.
    loam_heap::lend_idle();
    let sent = loam_heap::stats().remote_frees_sent;
    drop(v);
    assert_eq!(lent(), 1);
    assert!(loam_heap::stats().remote_frees_sent > sent);
    loam_heap::take_back_idle();
    let w = vec![9_u8; 1000];
    assert!(w.iter().all(|&b| b == 9));
    assert_eq!(lent(), 0);
    loam_heap::assert_valid();
    // (The object's block is leaked: a block whose bit is set goes back
    // through a collector's page run.)
}

#[test]
fn a_thread_with_an_allocated_bit_unset_lends_nothing() {
    let _t = turn();
    let (p, bit) = loam_heap::alloc_object(64, 8, 0, 0);
    assert!(!p.is_null());
    // The bit's word is this thread's to write until it is set: no other
    // thread may drain or adopt its page meanwhile.
    assert_eq!(loam_heap::lend(|| loam_heap::stats().heaps_lent), 0);
    bit.unwrap().set();
    assert_eq!(loam_heap::lend(|| loam_heap::stats().heaps_lent), 1);
    // One bit of a class, counted too.
    let class = loam_heap::ObjectClass::of(32, 8).unwrap();
    let (q, bit) = loam_heap::alloc_object_in(class, 0, 0);
    assert!(!q.is_null());
    assert_eq!(loam_heap::lend(|| loam_heap::stats().heaps_lent), 0);
    bit.unwrap().set();
    assert_eq!(loam_heap::lend(|| loam_heap::stats().heaps_lent), 1);
    // (Both blocks are leaked: a block whose bit is set goes back through a
    // collector's page run.)
}

/// Four threads in a ring, in two shifts: in each round the threads of one
/// parity check and free the blocks the previous thread sent them (into
/// its heap, lent: it waits in the other shift) and allocate a new batch
/// of 1 to 8 MiB for the next, while the others wait in `lend`. A batch
/// larger than the last one needs memory the thread's own heap lacks, and
/// the lent heaps have it: borrowed, drained and adopted while their
/// owners come and go. Every block is checked before it is freed, and the
/// heaps' invariants at the end.
#[test]
fn lent_heaps_drained_and_adopted_under_churn_stay_whole() {
    let _t = turn();
    let rounds = support::knob("LOAM_LEND_TEST_ROUNDS", 200, 2);
    // Nothing goes back to the OS meanwhile: the memory the threads find
    // is what the others freed.
    let _delay = PurgeDelay::set(Duration::from_secs(3600));
    // Nor is any left from the tests before, in the cache or in exited
    // threads' heaps: the threads would take it before they borrow, and
    // a run after a test that left enough borrowed nothing.
    loam_heap::collect();
    let before = loam_heap::stats();
    const THREADS: usize = 4;
    type Batch = (u32, Vec<Vec<u32>>);
    let barrier = Arc::new(Barrier::new(THREADS));
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<Batch>()).unzip();
    let mut rxs: Vec<_> = rxs.into_iter().map(Some).collect();
    let check = |(stamp, blocks): Batch| {
        assert!(
            blocks.iter().all(|b| b.iter().all(|&x| x == stamp)),
            "a block of batch {stamp:#x} changed"
        );
    };
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let barrier = barrier.clone();
            let next = txs[(t + 1) % THREADS].clone();
            let rx = rxs[t].take().unwrap();
            s.spawn(move || {
                let _breaks = Breaks(&barrier);
                for r in 0..rounds {
                    if t % 2 != r % 2 {
                        loam_heap::lend(|| barrier.wait());
                        continue;
                    }
                    if r > 0 {
                        check(rx.recv().unwrap());
                    }
                    let stamp = (t << 16 | r) as u32;
                    let mib = 1 + (r * 5) % 8;
                    let mut bytes = 0;
                    let mut blocks = Vec::new();
                    let mut i = 0_usize;
                    while bytes < mib << 20 {
                        let len = 4 + (i * 7919 + r * 31) % 1024;
                        blocks.push(vec![stamp; len]);
                        bytes += len * 4;
                        i += 1;
                    }
                    next.send((stamp, blocks)).unwrap();
                    barrier.wait();
                }
                // The last batch sent to this thread, if any.
                barrier.wait();
                if let Ok(batch) = rx.try_recv() {
                    check(batch);
                }
                loam_heap::assert_valid();
            });
        }
    });
    drop(txs);
    let after = loam_heap::stats();
    assert_eq!(after.heaps_lent, 0);
    // Borrowed, and adopted: 26 – 40 borrows and 6 – 14 adoptions in four
    // runs of 40 rounds, 43 – 83 and 12 – 43 in six of 200 (a scaled-down
    // run checks the blocks only).
    if rounds >= 40 {
        assert!(
            after.lent_borrows > before.lent_borrows
                && after.lent_adoptions > before.lent_adoptions,
            "{} borrows, {} adoptions of lent heaps, {} segments mapped",
            after.lent_borrows - before.lent_borrows,
            after.lent_adoptions - before.lent_adoptions,
            after.segments_mapped_total - before.segments_mapped_total
        );
    }
    loam_heap::collect();
    loam_heap::assert_valid();
}

/// `fork` from inside `lend`, while another thread lends and borrows: the
/// child, whose heap is lent (and whose lent lock the other thread may
/// have held at the fork), allocates and frees, taking its heap back, and
/// exits. (Without the fork handlers' hold of the lent lock, a child
/// forked while the other thread held it spins for ever: its alarm kills
/// it, and the parent sees the signal.)
#[test]
fn a_child_forked_inside_lend_allocates() {
    let _t = turn();
    drop(std::hint::black_box(vec![1_u8; 100]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut kept: Vec<Vec<u8>> = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                loam_heap::lend(|| {
                    // A thread's memory freed and taken while lent.
                    let v: Vec<Vec<u8>> = (0..200).map(|i| vec![i as u8; 5_000]).collect();
                    drop(v);
                });
                kept.push(vec![7; 70_000]);
                if kept.len() > 64 {
                    kept.clear();
                }
            }
        })
    };
    for _ in 0..support::knob("LOAM_LEND_TEST_FORKS", 50, 1) {
        let status = loam_heap::lend(|| {
            // SAFETY: the child only allocates, frees and `_exit`s.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                // SAFETY: `alarm` only schedules a signal for this process.
                unsafe { libc::alarm(30) };
                let v: Vec<Vec<u8>> = (0..1000).map(|i| vec![i as u8; 16 + i % 500]).collect();
                let ok = v.iter().enumerate().all(|(i, b)| b[0] == i as u8);
                drop(v);
                // SAFETY: ends the child without the parent's atexit handlers.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) };
            }
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            status
        });
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child status {status}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
}
