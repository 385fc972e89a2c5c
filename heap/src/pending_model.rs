//! Loom models of the pending bits (`local_heap/runs.rs`,
//! `PageRef::pending_words`): a collector's snapshot copies a page's
//! allocated words less its pending words while the page's owner takes a
//! run back and hands the block out again, and while a collector's
//! finalizer runs the destructor of a block it holds
//! (`FreeBatch::hold_page_run`) and then sends its run. One block stands
//! for the page; its words are one bit each. The protocol is copied here
//! (the heap's pages need the OS and are not built under loom), step for
//! step:
//! - sender: pending bit set (relaxed), then the run counted out
//!   (`runs_out += 1`, release); a held run does both when it is held (in
//!   the sweep, before the cycle lock passes to the next snapshot: the
//!   model's initial state), and its send later changes nothing on the
//!   page;
//! - owner taking the run back: allocated bit cleared, then pending bit
//!   cleared (release), then the count taken back (release); then the
//!   block may be handed out again, its object written before its
//!   allocated bit is set (release);
//! - snapshot: the count (acquire), the pending word (acquire, only with a
//!   run out), then the allocated word (acquire); the block is in the copy
//!   if allocated and not pending.
//!
//! In every interleaving a block in the copy holds an object written before
//! its allocated bit (so the sweep may read its header), never the freed
//! object of the run, and never one whose destructor is running. The
//! variants that clear the pending bit before the allocated bit, or read
//! the allocated word before the pending word, or hand a block to the
//! finalizer without holding its run (sending it, pending and counted,
//! only after the destructor), fail. (The last fails in the plainest
//! interleaving, the snapshot before the finalizer does anything: what it
//! shows is that the hold must come before the page can be snapshotted
//! again, not an ordering.) That no page reset clears a held run's
//! pending bits is the owner's alone (held blocks count as used, so no
//! other run accounts for all of them): `heap/tests/held_run.rs`.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// The freed object the run carries.
const DEAD: u32 = 1;
/// An object allocated in the block after the run came back.
const FRESH: u32 = 2;

struct Page {
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
    /// The sweep hands the block to the finalizer without holding its run:
    /// the finalizer sets the pending bit and counts the run out when it
    /// sends it, after the destructor.
    NotHeld,
}

/// The owner takes the run back and hands the block out again.
fn owner(p: &Page, sent: &AtomicBool, bug: Bug) {
    if !sent.load(Ordering::Acquire) {
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
    crate::sync::model(move || {
        let p = Arc::new(Page {
            runs_out: AtomicU32::new(1),
            pending: AtomicU64::new(1),
            allocated: AtomicU64::new(1),
            object: AtomicU32::new(DEAD),
            header: UnsafeCell::new(DEAD),
        });
        let o = {
            let p = p.clone();
            thread::spawn(move || owner(&p, &AtomicBool::new(true), bug))
        };
        let s = {
            let p = p.clone();
            thread::spawn(move || snapshot(&p, bug))
        };
        let seen = s.join().unwrap();
        o.join().unwrap();
        assert_ne!(
            seen,
            Some(DEAD),
            "the snapshot copied a block its run had freed"
        );
    });
}

/// The finalizer runs the destructor of a block whose run the sweep held
/// (in an earlier cycle), then sends the run, while the owner may take it
/// back and a snapshot copies the page.
fn finalizer_model(bug: Bug) {
    crate::sync::model(move || {
        let held = bug != Bug::NotHeld;
        let p = Arc::new(Page {
            runs_out: AtomicU32::new(u32::from(held)),
            pending: AtomicU64::new(u64::from(held)),
            allocated: AtomicU64::new(1),
            object: AtomicU32::new(DEAD),
            header: UnsafeCell::new(DEAD),
        });
        let sent = Arc::new(AtomicBool::new(false));
        let f = {
            let (p, sent) = (p.clone(), sent.clone());
            thread::spawn(move || {
                // The destructor writes the object.
                // SAFETY: the finalizer owns the dead object; the model
                // checks that no sweep reads it meanwhile.
                p.header.with_mut(|h| unsafe { *h = DEAD });
                if !held {
                    p.pending.fetch_or(1, Ordering::Relaxed);
                    p.runs_out.fetch_add(1, Ordering::Release);
                }
                // Sent: the owner's queue (a release push, an acquire take).
                sent.store(true, Ordering::Release);
            })
        };
        let o = {
            let (p, sent) = (p.clone(), sent.clone());
            thread::spawn(move || owner(&p, &sent, bug))
        };
        let s = {
            let p = p.clone();
            thread::spawn(move || snapshot(&p, bug))
        };
        let seen = s.join().unwrap();
        f.join().unwrap();
        o.join().unwrap();
        assert_ne!(
            seen,
            Some(DEAD),
            "the snapshot copied a block the finalizer holds"
        );
    });
}

#[test]
fn a_snapshot_never_copies_a_block_of_a_run_being_taken_back() {
    run_out_model(Bug::None);
}

#[test]
fn a_snapshot_never_copies_a_block_the_finalizer_holds() {
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
#[should_panic(expected = "copied a block the finalizer holds")]
fn a_block_handed_to_the_finalizer_unheld_can_be_copied_by_the_snapshot() {
    finalizer_model(Bug::NotHeld);
}
