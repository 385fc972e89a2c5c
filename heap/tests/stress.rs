//! Cross-thread stress (after mimalloc's test-stress): threads allocate blocks
//! of random sizes and alignments, fill them with a pattern, and hand them to
//! other threads — including threads of later generations, after their
//! allocator has exited — which check the pattern and free them. Threads start
//! and exit throughout. At the end every byte handed out has come back.
//!
//! The process's global allocator stays the system's, so the heap's
//! statistics count exactly this test's blocks.
//!
//! Size: `LOAM_STRESS_SCALE` (default 1, a few seconds in CI; try 50 by hand).

mod support;

use support::Rng;

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::Mutex;

#[derive(Clone, Copy)]
struct Obj {
    ptr: usize,
    size: usize,
    align: usize,
    tag: u64,
}

fn scale() -> usize {
    support::knob("LOAM_STRESS_SCALE", 1, 1)
}

fn random_layout(r: &mut Rng) -> Layout {
    let size = match r.below(100) {
        0..=58 => 1 + r.below(16) as usize,
        59..=81 => 17 + r.below(16) as usize,
        82..=95 => 33 + r.below(96) as usize,
        96..=97 => 129 + r.below(8 * 1024) as usize,
        98 => 8 * 1024 + r.below(300 * 1024) as usize,
        _ => {
            if r.below(20) == 0 {
                5 << 20 // huge: a segment of its own
            } else {
                1 + r.below(1 << 20) as usize
            }
        }
    };
    let align = match r.below(50) {
        0 => 16,
        1 => 64,
        2 => 4096,
        3 => 65536,
        _ => 8,
    };
    Layout::from_size_align(size, align).unwrap()
}

fn make(r: &mut Rng) -> Obj {
    let layout = random_layout(r);
    // SAFETY: non-zero size.
    let p = unsafe { LoamAlloc.alloc(layout) };
    assert!(!p.is_null(), "allocation failed for {layout:?}");
    assert_eq!(
        p as usize % layout.align(),
        0,
        "misaligned block for {layout:?}"
    );
    let tag = r.next();
    let obj = Obj {
        ptr: p as usize,
        size: layout.size(),
        align: layout.align(),
        tag,
    };
    fill(obj);
    obj
}

fn pattern(tag: u64, i: usize) -> u8 {
    (tag as usize).wrapping_add(i.wrapping_mul(31)) as u8
}

fn fill(o: Obj) {
    // Fill the first and last 64 bytes (all of small blocks).
    let p = o.ptr as *mut u8;
    for i in (0..o.size.min(64)).chain(o.size.saturating_sub(64)..o.size) {
        // SAFETY: within the block we own.
        unsafe { *p.add(i) = pattern(o.tag, i) };
    }
}

fn check_and_free(o: Obj) {
    let p = o.ptr as *mut u8;
    for i in (0..o.size.min(64)).chain(o.size.saturating_sub(64)..o.size) {
        // SAFETY: within the live block we own.
        let b = unsafe { *p.add(i) };
        assert_eq!(
            b,
            pattern(o.tag, i),
            "block {:#x} size {} corrupted at {i}",
            o.ptr,
            o.size
        );
    }
    // SAFETY: allocated with this layout and now dead.
    unsafe { LoamAlloc.dealloc(p, Layout::from_size_align(o.size, o.align).unwrap()) };
}

#[test]
fn cross_thread_alloc_free_with_thread_churn() {
    const THREADS: usize = 4;
    let generations = 6 * scale();
    let iters = 20_000;
    // Blocks in transit: one mailbox per thread slot, read by whichever
    // thread of any later generation runs in that slot.
    let mailboxes: Vec<Mutex<Vec<Obj>>> = (0..THREADS).map(|_| Mutex::new(Vec::new())).collect();
    let before = loam_heap::stats();

    for generation in 0..generations {
        std::thread::scope(|s| {
            let mut threads = Vec::new();
            for t in 0..THREADS {
                let mailboxes = &mailboxes;
                threads.push(s.spawn(move || {
                    let mut r =
                        Rng(0x9E37_79B9_7F4A_7C15 ^ ((generation * THREADS + t) as u64 + 1));
                    let mut live: Vec<Obj> = Vec::new();
                    for i in 0..iters {
                        match r.below(10) {
                            0..=4 => live.push(make(&mut r)),
                            5..=6 => {
                                if !live.is_empty() {
                                    let k = r.below(live.len() as u64) as usize;
                                    check_and_free(live.swap_remove(k));
                                }
                            }
                            7..=8 => {
                                if !live.is_empty() {
                                    let k = r.below(live.len() as u64) as usize;
                                    let o = live.swap_remove(k);
                                    let to = r.below(THREADS as u64) as usize;
                                    mailboxes[to].lock().unwrap().push(o);
                                }
                            }
                            _ => {
                                let got = std::mem::take(&mut *mailboxes[t].lock().unwrap());
                                for o in got {
                                    check_and_free(o);
                                }
                            }
                        }
                        if i % 4096 == 0 && r.below(4) == 0 {
                            loam_heap::assert_valid();
                        }
                    }
                    // Leave some live blocks behind for later generations
                    // (their allocator will have exited by then).
                    let keep = live.len() / 2;
                    let mut mine = mailboxes[(t + 1) % THREADS].lock().unwrap();
                    mine.extend(live.drain(..keep));
                    drop(mine);
                    for o in live {
                        check_and_free(o);
                    }
                }));
            }
            // Joined one by one, not left to the scope's end: the scope
            // returns once the closures are done, with the threads' exit
            // hooks (which abandon their heaps) perhaps still running, and
            // the next generation's threads then found no orphan to reuse
            // and made heaps of their own (the bound on heaps below
            // depended on the scheduler). A join waits for the thread's
            // exit, its thread-local destructors included.
            for t in threads {
                t.join().unwrap();
            }
        });
        assert!(
            loam_heap::stats().heaps_abandoned
                >= before.heaps_abandoned + ((generation + 1) * THREADS) as u64,
            "a joined thread's heap was not abandoned"
        );
    }
    for m in &mailboxes {
        for o in std::mem::take(&mut *m.lock().unwrap()) {
            check_and_free(o);
        }
    }
    loam_heap::collect();
    loam_heap::assert_valid();
    let after = loam_heap::stats();
    assert_eq!(
        after.allocated_bytes, 0,
        "every block came back: {after:#?}"
    );
    assert_eq!(after.large_count, 0);
    assert!(
        after.remote_frees_sent > before.remote_frees_sent,
        "the test exercised remote frees"
    );
    assert_eq!(
        after.remote_frees_sent, after.remote_frees_drained,
        "every remote free was drained"
    );
    assert!(after.heaps_abandoned >= before.heaps_abandoned + (generations * THREADS) as u64);
    assert!(
        after.pages_adopted > 0,
        "exited threads' pages were adopted"
    );
    // Threads are reused: far fewer heaps than threads ever started.
    assert!(
        after.heaps_created <= 3 * THREADS as u64 + 2,
        "heaps are recycled: {}",
        after.heaps_created
    );
}
