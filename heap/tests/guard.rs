//! Guard pages (`LOAM_GUARD_PAGES=1`, the default with the `secure`
//! feature): a write one byte past the end of a page's last block, of a
//! large block or of a huge block faults at once, and everything inside
//! the blocks stays usable, through page reuse, in-place growth and the
//! huge-mapping cache. The setting is read when the first heap is made, so
//! each case runs in a child process (this test binary again) with the
//! variable set; the parent reads how the child ended.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

/// Runs `test` again in a child with `LOAM_GUARD_PAGES=guards` and
/// `LOAM_GUARD_CASE=case`.
fn child(test: &str, guards: &str, case: &str) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env("LOAM_GUARD_PAGES", guards)
        .env("LOAM_GUARD_CASE", case)
        .output()
        .unwrap()
}

/// The last block the heap carves from a fresh page of 4 KiB blocks: with
/// guards, blocks 0 – 14 of a 64 KiB page (its last 4 KiB is the guard);
/// without, blocks 0 – 15.
fn last_block_of_a_page() -> *mut u8 {
    const SIZE: usize = 4096;
    let l = Layout::from_size_align(SIZE, 8).unwrap();
    let mut held = Vec::new();
    loop {
        // SAFETY: a non-zero size; the blocks are never freed (the child
        // ends soon).
        let p = unsafe { LoamAlloc.alloc(l) };
        assert!(!p.is_null());
        held.push(p);
        let offset = p as usize % loam_heap::SLICE_SIZE;
        let next = offset + SIZE;
        // The block after this one would not fit before the page's end
        // (or its guard).
        let room = if std::env::var("LOAM_GUARD_PAGES").as_deref() == Ok("1") {
            loam_heap::SLICE_SIZE - 4096
        } else {
            loam_heap::SLICE_SIZE
        };
        if next + SIZE > room {
            std::mem::forget(held);
            return p;
        }
        assert!(held.len() < 10_000, "never reached the end of a page");
    }
}

/// What the child does for `case`: a write at `end`, one byte past a
/// block, which must fault with guards on.
fn overrun(case: &str) {
    // SAFETY: non-zero sizes; `usable_size` of a live block; the write
    // past it is the misuse under test.
    unsafe {
        let end = match case {
            "small" => last_block_of_a_page().add(4096),
            "large" => {
                let p = LoamAlloc.alloc(Layout::from_size_align(200_000, 8).unwrap());
                p.add(loam_heap::usable_size(p))
            }
            "huge" => {
                let p = LoamAlloc.alloc(Layout::from_size_align(5 << 20, 8).unwrap());
                p.add(loam_heap::usable_size(p))
            }
            "huge_cached" => {
                // A huge block freed goes to the mapping cache; a smaller
                // one is then cut from the same mapping, and still ends at
                // the guard.
                let l = Layout::from_size_align(6 << 20, 8).unwrap();
                let p = LoamAlloc.alloc(l);
                LoamAlloc.dealloc(p, l);
                let q = LoamAlloc.alloc(Layout::from_size_align(5 << 20, 8).unwrap());
                q.add(loam_heap::usable_size(q))
            }
            "grown" => {
                // Grown in place over the slices after it: the old guard is
                // inside the block now (writable), the new one past it.
                let l = Layout::from_size_align(140_000, 8).unwrap();
                let p = LoamAlloc.alloc(l);
                let old = loam_heap::usable_size(p);
                let q = LoamAlloc.realloc(p, l, 400_000);
                assert_eq!(p, q, "not grown in place: the case tests nothing");
                let new = loam_heap::usable_size(q);
                assert!(new >= 400_000 && new > old);
                q.write_bytes(0xab, new);
                q.add(new)
            }
            other => panic!("unknown case {other}"),
        };
        eprintln!("writing past the block");
        end.write_volatile(1);
    }
    eprintln!("the write past the block returned");
}

const CASES: [&str; 5] = ["small", "large", "huge", "huge_cached", "grown"];

#[test]
fn a_write_past_a_block_hits_the_guard_page() {
    const TEST: &str = "a_write_past_a_block_hits_the_guard_page";
    if let Ok(case) = std::env::var("LOAM_GUARD_CASE") {
        overrun(&case);
        return;
    }
    for case in CASES {
        let out = child(TEST, "1", case);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSEGV),
            "{case}: the child did not fault on the guard page: {stderr}"
        );
        assert!(
            stderr.contains("writing past the block"),
            "{case}: died early: {stderr}"
        );
    }
    // Without guards the same writes land in memory of the heap's (the
    // next block, or the page's unused tail): the cases fault only
    // because of the guard.
    for case in ["small", "large", "grown"] {
        let out = child(TEST, "0", case);
        assert!(
            out.status.success(),
            "{case}: failed without guards: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// With guards on, a churn of every kind of block (small classes of one
/// and many slices, large spans grown and shrunk in place and moved, huge
/// blocks through the cache, remote frees), each written end to end, runs
/// clean: no block reaches into a guard, and pages set up again over
/// other pages' guards have them removed.
fn churn() {
    let sizes = [
        8,
        24,
        100,
        1000,
        4096,
        9000,
        40_000,
        131_072,
        140_000,
        300_000,
        1 << 20,
        5 << 20,
    ];
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let mut live: Vec<(*mut u8, Layout)> = Vec::new();
    for round in 0..4000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = sizes[(x % sizes.len() as u64) as usize];
        let l = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: non-zero sizes; every block is written within its usable
        // size and freed once with its layout.
        unsafe {
            let p = LoamAlloc.alloc(l);
            assert!(!p.is_null());
            p.write_bytes(round as u8, loam_heap::usable_size(p));
            live.push((p, l));
            if live.len() > 64 || x % 3 == 0 {
                let (p, l) = live.swap_remove((x as usize / 7) % live.len());
                if x % 5 == 0 && l.size() > 50_000 {
                    // Grow or shrink, then write it all.
                    let new = if x % 2 == 0 {
                        l.size() * 2
                    } else {
                        l.size() / 3
                    };
                    let q = LoamAlloc.realloc(p, l, new);
                    assert!(!q.is_null());
                    q.write_bytes(7, loam_heap::usable_size(q));
                    live.push((q, Layout::from_size_align(new, 8).unwrap()));
                } else if x % 7 == 0 {
                    // Freed by another thread.
                    let (p, l) = (p as usize, l);
                    std::thread::spawn(move || LoamAlloc.dealloc(p as *mut u8, l))
                        .join()
                        .unwrap();
                } else {
                    LoamAlloc.dealloc(p, l);
                }
            }
        }
    }
    for (p, l) in live {
        // SAFETY: live blocks with their layouts.
        unsafe { LoamAlloc.dealloc(p, l) };
    }
}

#[test]
fn every_block_stays_usable_with_guards() {
    const TEST: &str = "every_block_stays_usable_with_guards";
    if std::env::var("LOAM_GUARD_CASE").is_ok() {
        churn();
        return;
    }
    let out = child(TEST, "1", "churn");
    assert!(
        out.status.success(),
        "the churn failed with guards on: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
