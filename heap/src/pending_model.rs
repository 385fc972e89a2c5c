//! Loom models of the pending bits (`local_heap/runs.rs`,
//! `PageRef::pending_words`): a collector's snapshot copies a page's
//! allocated words less its pending words while the page's owner takes a
//! run back and hands the block out again, and while the finalizer sends a
//! run for a page it held. One block stands for the page; its words are
//! one bit each. The protocol is copied here (the heap's pages need the OS
//! and are not built under loom), step for step:
//! - sender: pending bit set (relaxed), then the run counted out
//!   (`runs_out += 1`, release), then the finalizer's flag cleared
//!   (release), if it held the page;
//! - owner taking the run back: allocated bit cleared, then pending bit
//!   cleared (release), then the count taken back (release); then the
//!   block may be handed out again, its object written before its
//!   allocated bit is set (release);
//! - snapshot: flags (acquire; a page the finalizer holds is skipped), the
//!   count (acquire), the pending word (acquire, only with a run out), then
//!   the allocated word (acquire); the block is in the copy if allocated
//!   and not pending.
//!
//! In every interleaving a block in the copy holds an object written before
//! its allocated bit (so the sweep may read its header), never the freed
//! object of the run. The variants that clear the pending bit before the
//! allocated bit, or read the allocated word before the pending word, or
//! count the run out after the finalizer's flag is cleared, fail.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use loom::sync::Arc;
use loom::thread;

/// The finalizer holds the page (`FINALIZING`).
const HELD: u8 = 1;
/// The freed object the run carries.
const DEAD: u32 = 1;
/// An object allocated in the block after the run came back.
const FRESH: u32 = 2;

struct Page {
    flags: AtomicU8,
    runs_out: AtomicU32,
    pending: AtomicU64,
    allocated: AtomicU64,
    /// Which object the block holds, for the check: written with the
    /// header (relaxed, before the allocated bit's release).
    object: AtomicU32,
    /// The block's contents (its object's header), which loom checks for
    /// races: the sweep reads the header of every block in the copy.
    header: UnsafeCell<u32>,
}

/// Which step the model gets wrong, if any.
#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    /// The owner clears the pending bit before the allocated bit.
    PendingFirst,
    /// The snapshot reads the allocated word before the pending word.
    AllocatedFirst,
    /// The finalizer clears its flag before it counts the run out.
    FlagFirst,
}

/// The owner takes the run back and hands the block out again.
fn owner(p: &Page, bug: Bug) {
    if p.runs_out.load(Ordering::Acquire) == 0 {
        return; // not sent yet (the finalizer's model): nothing to take
    }
    if bug == Bug::PendingFirst {
        p.pending.fetch_and(!1, Ordering::Release);
        p.allocated.store(0, Ordering::Relaxed);
    } else {
        p.allocated.store(0, Ordering::Relaxed);
        p.pending.fetch_and(!1, Ordering::Release);
    }
    p.runs_out.fetch_sub(1, Ordering::Release);
    // Allocated again: the object first, then its bit.
    // SAFETY: the block is the owner's again (its run came back); readers
    // read it only after this bit's release (what the model checks).
    p.header.with_mut(|h| unsafe { *h = FRESH });
    p.object.store(FRESH, Ordering::Relaxed);
    p.allocated.store(1, Ordering::Release);
}

/// The snapshot's copy of the block's bit; reads the header of a copied
/// block, as the sweep does.
fn snapshot(p: &Page, bug: Bug) -> Option<u32> {
    if p.flags.load(Ordering::Acquire) & HELD != 0 {
        return None;
    }
    let copied = if p.runs_out.load(Ordering::Acquire) != 0 {
        if bug == Bug::AllocatedFirst {
            let allocated = p.allocated.load(Ordering::Acquire);
            allocated & !p.pending.load(Ordering::Acquire)
        } else {
            let pending = p.pending.load(Ordering::Acquire);
            p.allocated.load(Ordering::Acquire) & !pending
        }
    } else {
        p.allocated.load(Ordering::Acquire)
    };
    if copied == 0 {
        return None;
    }
    let object = p.object.load(Ordering::Relaxed);
    if bug == Bug::None {
        // The sweep's read of the header; a race here is a loom failure.
        // SAFETY: the model checks that this read is ordered after the
        // header's last write.
        let header = p.header.with(|h| unsafe { *h });
        assert_eq!(header, object);
    }
    Some(object)
}

/// A sweep's run already out: the owner takes it back while a snapshot
/// copies the page.
fn run_out_model(bug: Bug) {
    loom::model(move || {
        let p = Arc::new(Page {
            flags: AtomicU8::new(0),
            runs_out: AtomicU32::new(1),
            pending: AtomicU64::new(1),
            allocated: AtomicU64::new(1),
            object: AtomicU32::new(DEAD),
            header: UnsafeCell::new(DEAD),
        });
        let o = {
            let p = p.clone();
            thread::spawn(move || owner(&p, bug))
        };
        let seen = snapshot(&p, bug);
        o.join().unwrap();
        assert_ne!(
            seen,
            Some(DEAD),
            "the snapshot copied a block its run had freed"
        );
    });
}

/// The finalizer sends the run of a page it held, while the owner may take
/// it back and a snapshot copies the page.
fn finalizer_model(bug: Bug) {
    loom::model(move || {
        let p = Arc::new(Page {
            flags: AtomicU8::new(HELD),
            runs_out: AtomicU32::new(0),
            pending: AtomicU64::new(0),
            allocated: AtomicU64::new(1),
            object: AtomicU32::new(DEAD),
            header: UnsafeCell::new(DEAD),
        });
        let f = {
            let p = p.clone();
            thread::spawn(move || {
                p.pending.fetch_or(1, Ordering::Relaxed);
                if bug == Bug::FlagFirst {
                    p.flags.fetch_and(!HELD, Ordering::Release);
                    p.runs_out.fetch_add(1, Ordering::Release);
                } else {
                    p.runs_out.fetch_add(1, Ordering::Release);
                    p.flags.fetch_and(!HELD, Ordering::Release);
                }
            })
        };
        let o = {
            let p = p.clone();
            thread::spawn(move || owner(&p, bug))
        };
        let seen = snapshot(&p, bug);
        f.join().unwrap();
        o.join().unwrap();
        assert_ne!(
            seen,
            Some(DEAD),
            "the snapshot copied a block the finalizer had freed"
        );
    });
}

#[test]
fn a_snapshot_never_copies_a_block_of_a_run_being_taken_back() {
    run_out_model(Bug::None);
}

#[test]
fn a_snapshot_never_copies_a_block_the_finalizer_is_sending() {
    finalizer_model(Bug::None);
}

#[test]
#[should_panic(expected = "copied a block its run had freed")]
fn clearing_the_pending_bit_first_lets_the_snapshot_copy_a_freed_block() {
    run_out_model(Bug::PendingFirst);
}

#[test]
#[should_panic(expected = "copied a block its run had freed")]
fn reading_the_allocated_word_first_lets_the_snapshot_copy_a_freed_block() {
    run_out_model(Bug::AllocatedFirst);
}

#[test]
#[should_panic(expected = "copied a block the finalizer had freed")]
fn clearing_the_finalizers_flag_first_lets_the_snapshot_copy_a_freed_block() {
    finalizer_model(Bug::FlagFirst);
}
