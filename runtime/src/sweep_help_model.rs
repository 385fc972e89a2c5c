//! loom models of mutators helping the sweep (`sweep::Work`, "Helpers";
//! `sweep::Helper`; `Shared::offer_sweep`, `withdraw_sweep`,
//! `help_sweep`) and of the sweep's accounting as it goes
//! (`Shared::sweep_freed` against `Shared::sweep_brings_under_pace`),
//! under `--cfg loom`.
//!
//! *Helpers.* Two pages, claimed one at a time from the work's counter.
//! The coordinator offers the work under the control mutex, claims pages
//! as its GC threads do until none is left, withdraws the offer under the
//! mutex, and waits on the condition variable until no helper is
//! registered; then it reads what the helpers reported. Two mutators each
//! register under the mutex only while the work is offered and has pages,
//! claim pages, report them, and deregister (release; the last notifies
//! under the report's mutex). In every interleaving each page is swept
//! exactly once and every sweep is in the totals the coordinator reads.
//! Registering after the mutex is released (`a_helper_registered_late_is_caught`):
//! the helper may claim a page the coordinator's last claim then counts
//! as taken, while the coordinator, with no order to its increment, reads
//! no helper and takes totals without that page.
//!
//! *Accounting.* A sweep of 4 bytes of a 10-byte heap frees them in two
//! claims, each off `sweep_frees` first and then off the heap (release); a
//! pacer reads the heap (acquire), then `sweep_frees`: what it computes as
//! the heap after the sweep is never below the true 6 (a byte counted
//! twice would let it pass the pace point on frees that are already
//! gone). Reading `sweep_frees` first fails
//! (`reading_the_frees_first_counts_twice`).

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};

const PAGES: usize = 2;

struct Work {
    next: AtomicUsize,
    helpers: AtomicUsize,
    swept: [AtomicUsize; PAGES],
    /// What helpers reported (`Work::helped`).
    helped: Mutex<usize>,
    /// `Work::gone`.
    gone: Condvar,
}

impl Work {
    fn has_pages(&self) -> bool {
        self.next.load(Ordering::Relaxed) < PAGES
    }

    /// `Work::claim`: sweeps the next page; false if none was left.
    fn claim(&self) -> bool {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= PAGES {
            return false;
        }
        self.swept[i].fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// The control mutex's `sweep` field.
struct Control {
    sweep: Mutex<Option<Arc<Work>>>,
}

/// `Shared::help_sweep`, `Helper::register`, `Helper::help` and `Helper`'s
/// drop (`late`: registering after the mutex, the bug the model catches).
fn help(control: &Control, late: bool) {
    let work = {
        let c = control.sweep.lock().unwrap();
        match &*c {
            Some(w) if w.has_pages() => {
                if !late {
                    w.helpers.fetch_add(1, Ordering::Relaxed);
                }
                w.clone()
            }
            _ => return,
        }
    };
    if late {
        work.helpers.fetch_add(1, Ordering::Relaxed);
    }
    let mut mine = 0;
    while work.claim() {
        mine += 1;
    }
    *work.helped.lock().unwrap() += mine;
    if work.helpers.fetch_sub(1, Ordering::Release) == 1 {
        let _h = work.helped.lock().unwrap();
        work.gone.notify_all();
    }
}

/// `Cycle::sweep`: offer, claim, withdraw, `Work::wait_for_helpers`.
fn coordinator(control: &Control, work: &Arc<Work>) {
    *control.sweep.lock().unwrap() = Some(work.clone());
    let mut mine = 0;
    while work.claim() {
        mine += 1;
    }
    *control.sweep.lock().unwrap() = None;
    let helped = {
        let mut h = work.helped.lock().unwrap();
        while work.helpers.load(Ordering::Acquire) != 0 {
            h = work.gone.wait(h).unwrap();
        }
        *h
    };
    assert_eq!(mine + helped, PAGES, "a sweep not counted in the totals");
    for page in &work.swept {
        assert_eq!(
            page.load(Ordering::Relaxed),
            1,
            "a page swept twice or never"
        );
    }
}

fn helpers(late: bool) {
    loom::model(move || {
        let control = Arc::new(Control {
            sweep: Mutex::new(None),
        });
        let work = Arc::new(Work {
            next: AtomicUsize::new(0),
            helpers: AtomicUsize::new(0),
            swept: Default::default(),
            helped: Mutex::new(0),
            gone: Condvar::new(),
        });
        let mutators: Vec<_> = (0..2)
            .map(|_| {
                let control = control.clone();
                loom::thread::spawn(move || help(&control, late))
            })
            .collect();
        coordinator(&control, &work);
        for m in mutators {
            m.join().unwrap();
        }
    });
}

#[test]
fn every_page_is_swept_once_and_counted() {
    helpers(false);
}

#[test]
#[should_panic(expected = "a sweep not counted in the totals")]
fn a_helper_registered_late_is_caught() {
    helpers(true);
}

/// `Shared::sweep_freed` against `Shared::sweep_brings_under_pace`.
fn accounting(frees_first: bool) {
    loom::model(move || {
        const HEAP: usize = 10;
        const FREES: usize = 4;
        let heap = Arc::new(AtomicUsize::new(HEAP));
        let frees = Arc::new(AtomicUsize::new(FREES));
        let sweeper = {
            let (heap, frees) = (heap.clone(), frees.clone());
            loom::thread::spawn(move || {
                for _ in 0..2 {
                    frees.fetch_sub(FREES / 2, Ordering::Relaxed);
                    heap.fetch_sub(FREES / 2, Ordering::Release);
                }
            })
        };
        let (used, left) = if frees_first {
            let left = frees.load(Ordering::Relaxed);
            (heap.load(Ordering::Acquire), left)
        } else {
            let used = heap.load(Ordering::Acquire);
            (used, frees.load(Ordering::Relaxed))
        };
        assert!(used - left >= HEAP - FREES, "freed bytes counted twice");
        sweeper.join().unwrap();
    });
}

#[test]
fn the_sweeps_frees_are_never_counted_twice() {
    accounting(false);
}

#[test]
#[should_panic(expected = "freed bytes counted twice")]
fn reading_the_frees_first_counts_twice() {
    accounting(true);
}
