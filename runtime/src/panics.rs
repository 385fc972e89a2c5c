//! User code the collector runs on its own threads (destructors, `Trace`
//! impls, the `on_cycle` hook) never takes the collector down: each call is
//! contained here, and what panicked is reported once per type and cycle,
//! with a count, instead of once per object.
//!
//! A contained panic's payload is dropped inside a second `catch_unwind`
//! (a payload whose own `Drop` panics is leaked), and the process-wide
//! panic hook is told to stay quiet while a contained call runs on this
//! thread: ten thousand panicking destructors are one line on stderr, not
//! forty thousand. A program that installs its own panic hook after the
//! first runtime starts gets every message again, through its hook.

use parking_lot::Mutex;
use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

/// What kind of user code panicked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A destructor run by the sweep: the object is freed all the same.
    Drop,
    /// A `Trace` impl run by a marker: the cycle's marks are incomplete, so
    /// it frees nothing, and the next cycle is a full one.
    Trace,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Drop => "destructor(s) of",
            Kind::Trace => "Trace impl(s) of",
        })
    }
}

/// Panics of one kind and type since the last report.
#[derive(Debug)]
struct Entry {
    kind: Kind,
    type_name: &'static str,
    /// The mark epoch a call's shading panicked for (`record_for_mark`);
    /// 0 for the cycle's own threads and the finalizer.
    mark: u64,
    count: u64,
    first: String,
}

/// Contained panics not yet reported, by kind and type.
#[derive(Debug, Default)]
pub(crate) struct PanicLog {
    entries: Mutex<Vec<Entry>>,
}

/// Panics of `Trace` impls during the cycle under way. One cycle runs at a
/// time process-wide (`collector::CycleState`), and only its GC threads
/// and its own runtime's mutators (in assists, while its mark runs) mark,
/// so one log serves every runtime: the cycle's coordinator drains it
/// before it releases the cycle lock. A call's shading of a `GcLock`'s
/// contents is not bounded by its runtime's cycle (a mark's end may stop
/// waiting for the call) and records into its runtime's own log instead
/// (`Shared::shade_panics`). (Destructors run on each runtime's
/// finalizer thread, which keeps a log of its own.)
///
/// One per fork generation (`forked::PerFork`): a child forked while a GC
/// thread of the parent held it, or while a parent's cycle had logged a
/// panic, would have its runtimes' cycles wait for the lock for ever, or
/// take the parent's panic for their own.
pub(crate) fn cycle_log() -> &'static PanicLog {
    static CYCLE_LOG: crate::forked::PerFork<PanicLog> = crate::forked::PerFork::new(|| PanicLog {
        entries: Mutex::new(Vec::new()),
    });
    CYCLE_LOG.get()
}

thread_local! {
    /// A contained call runs on this thread: the panic hook stays quiet.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// Wraps the process's panic hook (once) so that it says nothing about
/// panics this module contains. Not on a panicking thread, where
/// `std::panic::take_hook` panics (a runtime built in a destructor while a
/// panic unwinds: the process aborted): the runtime's own threads, where
/// nearly everything is contained, call it as they start (a new thread is
/// never unwinding), and so does the next runtime's build.
pub(crate) fn install_quiet_hook() {
    if std::thread::panicking() {
        return;
    }
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                prev(info)
            }
        }));
    });
}

/// The message of a panic payload, as the default hook would print it.
fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a payload that is not a string)".to_string()
    }
}

/// Runs `f`; if it panics, returns the panic's message instead, having
/// dropped the payload (or leaked it, if dropping it panicked too).
pub(crate) fn contain<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let was_quiet = QUIET.with(|q| q.replace(true));
    let r = catch_unwind(AssertUnwindSafe(f)).map_err(dispose);
    QUIET.with(|q| q.set(was_quiet));
    r
}

/// The message of a caught panic's payload, which is dropped (or leaked,
/// if dropping it panics too).
pub(crate) fn dispose(payload: Box<dyn Any + Send>) -> String {
    let msg = message(&*payload);
    let was_quiet = QUIET.with(|q| q.replace(true));
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        // The payload's destructor panicked: its own payload is not
        // dropped at all (it could panic again, for ever).
        std::mem::forget(again);
    }
    QUIET.with(|q| q.set(was_quiet));
    msg
}

impl PanicLog {
    /// Records a contained panic of `kind` in user code of type `type_name`.
    pub(crate) fn record(&self, kind: Kind, type_name: &'static str, msg: String) {
        self.record_for_mark(kind, type_name, msg, 0);
    }

    /// As [`record`](Self::record), for a panic of a call's shading for
    /// the mark of epoch `mark`: only that mark's cycle reads it as its
    /// failure ([`trace_panicked_for`](Self::trace_panicked_for)). The
    /// call may run on past that mark's end (nothing waits for a call
    /// that began after a ragged start's window), and its panic, logged
    /// after the mark's cycle ended, would fail the next cycle instead,
    /// or the runtime's last one, which then left every object behind.
    pub(crate) fn record_for_mark(&self, kind: Kind, type_name: &'static str, msg: String, mark: u64) {
        let mut log = self.entries.lock();
        match log
            .iter_mut()
            .find(|e| e.kind == kind && e.type_name == type_name && e.mark == mark)
        {
            Some(e) => e.count += 1,
            None => log.push(Entry {
                kind,
                type_name,
                mark,
                count: 1,
                first: msg,
            }),
        }
    }

    /// Prints one line per kind and type recorded since the last call,
    /// naming `when` (a cycle, or the finalizer), and returns how many
    /// panics there were.
    pub(crate) fn report(&self, when: &str) -> u64 {
        let (total, lines) = self.take_report(when);
        for line in lines {
            crate::collector::say(format_args!("{line}"));
        }
        total
    }

    /// [`report`](Self::report)'s lines and count, for a caller that holds
    /// a lock another thread may need to print them after letting it go:
    /// stderr may block (a pipe nobody reads).
    pub(crate) fn take_report(&self, when: &str) -> (u64, Vec<String>) {
        self.take_report_for_mark(when, 0)
    }

    /// [`take_report`](Self::take_report) by the cycle of the mark of
    /// epoch `mark`, which a call's shading panic for another mark did not
    /// fail ([`record_for_mark`](Self::record_for_mark)).
    pub(crate) fn take_report_for_mark(&self, when: &str, mark: u64) -> (u64, Vec<String>) {
        let entries = std::mem::take(&mut *self.entries.lock());
        let mut total = 0;
        let mut lines = Vec::with_capacity(entries.len());
        for e in &entries {
            total += e.count;
            let what = match e.kind {
                Kind::Drop => "the objects were freed all the same",
                Kind::Trace if e.mark != 0 && e.mark != mark => {
                    "in a call, for an earlier mark whose cycle had ended; no cycle failed"
                }
                Kind::Trace => "this cycle freed nothing; the next one marks the whole heap",
            };
            lines.push(format!(
                "loam: {when}: {} {} {} panicked ({what}); the first said: {}",
                e.count, e.kind, e.type_name, e.first
            ));
        }
        (total, lines)
    }

    /// Whether a `Trace` impl panicked since the last report (the cycle's
    /// marks are then incomplete).
    pub(crate) fn trace_panicked(&self) -> bool {
        self.entries.lock().iter().any(|e| e.kind == Kind::Trace)
    }

    /// Whether a call's shading for the mark of epoch `mark` panicked.
    pub(crate) fn trace_panicked_for(&self, mark: u64) -> bool {
        self.entries
            .lock()
            .iter()
            .any(|e| e.kind == Kind::Trace && e.mark == mark)
    }
}
