//! loom model of a mutator helping the sweep (`sweep::Work`, "Helpers";
//! `Shared::offer_sweep`, `withdraw_sweep`, `help_sweep`), under
//! `--cfg loom`.
//!
//! Two pages, claimed one at a time from the work's counter. The
//! coordinator offers the work under the control mutex, claims pages as
//! its GC threads do until none is left, withdraws the offer under the
//! mutex and waits until no helper is registered; then it reads what the
//! helpers reported and takes the pages' vectors back (here: marks the
//! work reused). A mutator registers under the mutex only while the work
//! is offered and has pages, claims pages, reports them, and leaves the
//! count (release). In every interleaving each page is swept exactly once,
//! every sweep is counted in the totals the coordinator reads, and no page
//! is swept after the coordinator has taken the work back. Registering
//! outside the mutex (after reading the offer) makes the model fail
//! (`a_helper_registered_late_is_caught`).

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};

const PAGES: usize = 2;

struct Work {
    next: AtomicUsize,
    helpers: AtomicUsize,
    swept: [AtomicUsize; PAGES],
    /// What helpers reported (`Work::helped`).
    helped: Mutex<usize>,
    /// Set once the coordinator has taken the work back.
    reused: AtomicBool,
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
        assert!(
            !self.reused.load(Ordering::Relaxed),
            "a page swept after the sweep was over"
        );
        self.swept[i].fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// The control mutex's `sweep` field.
struct Control {
    sweep: Mutex<Option<Arc<Work>>>,
}

/// `Shared::help_sweep`, registering under the mutex (`late`: after it,
/// the bug the model catches).
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
    work.helpers.fetch_sub(1, Ordering::Release);
}

/// `Cycle::sweep`: offer, claim, withdraw, wait for the helpers.
fn coordinator(control: &Control, work: &Arc<Work>) {
    *control.sweep.lock().unwrap() = Some(work.clone());
    let mut mine = 0;
    while work.claim() {
        mine += 1;
    }
    *control.sweep.lock().unwrap() = None;
    while work.helpers.load(Ordering::Acquire) != 0 {
        loom::thread::yield_now();
    }
    let helped = *work.helped.lock().unwrap();
    work.reused.store(true, Ordering::Relaxed);
    assert_eq!(mine + helped, PAGES, "a sweep not counted in the totals");
    for page in &work.swept {
        assert_eq!(
            page.load(Ordering::Relaxed),
            1,
            "a page swept twice or never"
        );
    }
}

fn run(late: bool) {
    loom::model(move || {
        let control = Arc::new(Control {
            sweep: Mutex::new(None),
        });
        let work = Arc::new(Work {
            next: AtomicUsize::new(0),
            helpers: AtomicUsize::new(0),
            swept: Default::default(),
            helped: Mutex::new(0),
            reused: AtomicBool::new(false),
        });
        let helper = {
            let control = control.clone();
            loom::thread::spawn(move || help(&control, late))
        };
        coordinator(&control, &work);
        helper.join().unwrap();
    });
}

#[test]
fn every_page_is_swept_once_and_counted() {
    run(false);
}

#[test]
#[should_panic]
fn a_helper_registered_late_is_caught() {
    run(true);
}
