//! A thread-local destructor that runs after the heap's exit hook still gets
//! memory (from the shared fallback heap), and what it frees is not lost.
//! The process allocator stays the system's, so this thread-local can be set
//! up before the thread's loam heap exists, and its destructor runs last.

use loam_heap::LoamAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::RefCell;

struct LateUser {
    early: Vec<usize>,
}

const L: Layout = match Layout::from_size_align(100, 8) {
    Ok(l) => l,
    Err(_) => panic!(),
};

impl Drop for LateUser {
    fn drop(&mut self) {
        // SAFETY: blocks from LoamAlloc with layout L, freed once; the new
        // ones are written, checked and freed.
        unsafe {
            for &p in &self.early {
                LoamAlloc.dealloc(p as *mut u8, L);
            }
            let late: Vec<*mut u8> = (0..500).map(|_| LoamAlloc.alloc(L)).collect();
            for (i, &p) in late.iter().enumerate() {
                assert!(!p.is_null());
                p.write_bytes(i as u8, 100);
            }
            for (i, &p) in late.iter().enumerate() {
                assert_eq!(*p.add(99), i as u8);
                LoamAlloc.dealloc(p, L);
            }
        }
    }
}

thread_local! {
    static LATE: RefCell<Option<LateUser>> = const { RefCell::new(None) };
}

#[test]
fn destructors_after_heap_exit_use_the_fallback_heap() {
    let before = loam_heap::stats();
    let kept = std::thread::spawn(|| {
        // Registered before the loam heap of this thread exists, so it is
        // destroyed after the heap's exit hook has run.
        LATE.with(|l| *l.borrow_mut() = Some(LateUser { early: Vec::new() }));
        let early: Vec<usize> = (0..300)
            // SAFETY: non-zero size.
            .map(|_| unsafe { LoamAlloc.alloc(L) } as usize)
            .collect();
        LATE.with(|l| l.borrow_mut().as_mut().unwrap().early = early);
        // Blocks that outlive the thread: its heap's segment is not empty
        // when the destructor allocates.
        (0..300)
            // SAFETY: non-zero size.
            .map(|_| unsafe { LoamAlloc.alloc(L) } as usize)
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    let after = loam_heap::stats();
    assert!(
        after.fallback_allocs >= before.fallback_allocs + 500,
        "{after:#?}"
    );
    // The fallback heap took none of the exited heap's segments: it never
    // drains or tidies as a thread's heap does, so they would stay with it,
    // out of reach of the thread that takes the exited heap next.
    assert_eq!(
        after.pages_adopted, before.pages_adopted,
        "the fallback heap adopted an exited thread's segments"
    );
    for p in kept {
        // SAFETY: live blocks from LoamAlloc with layout L, freed once.
        unsafe { LoamAlloc.dealloc(p as *mut u8, L) };
    }
    loam_heap::collect();
    loam_heap::assert_valid();
    assert_eq!(loam_heap::stats().allocated_bytes, 0);
}
