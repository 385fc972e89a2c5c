//! The stop/resume handshake between the collector and the mutators.
//!
//! A mutator is *inside* while it runs a `mutate` closure (it may hold
//! pointers the collector cannot see) and *outside* otherwise (between
//! calls, or blocked in code that cannot touch the heap). To stop the world
//! the collector raises `stop` and waits until no slot is inside; a mutator
//! entering while `stop` is up steps back out and waits for `resume`.
//!
//! The protocol is Dekker's: each side stores its own flag, issues a
//! sequentially consistent fence, then loads the other's flag, so at least
//! one of them sees the other. (Fences rather than `SeqCst` accesses: the
//! fences are what the C++ model, and loom, guarantee a total order for.) Either the collector sees the mutator inside (and waits for it to
//! leave), or the mutator sees `stop` (and backs out): never both missed.
//! The mutator's fast path is one store and one load; the waits use a mutex
//! and condvars, and every wake-up is issued under the mutex after the flag
//! it announces is set, so none is lost. `loom` checks it (`handshake_model`).

#[cfg(loom)]
use loom::sync::{
    atomic::{fence, AtomicBool, Ordering},
    Condvar, Mutex, MutexGuard,
};
#[cfg(not(loom))]
use parking_lot::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, Ordering};

/// One mutator's side of the handshake.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    inside: AtomicBool,
}

/// The collector's side, shared by all mutators of a runtime.
#[derive(Debug, Default)]
pub(crate) struct Handshake {
    stop: AtomicBool,
    lock: Mutex<()>,
    /// Mutators wait here for the world to resume.
    resumed: Condvar,
    /// The collector waits here for inside mutators to leave.
    left: Condvar,
}

#[cfg(not(loom))]
fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    m.lock()
}
#[cfg(loom)]
fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    m.lock().unwrap()
}
#[cfg(not(loom))]
fn wait<'a>(c: &Condvar, mut g: MutexGuard<'a, ()>) -> MutexGuard<'a, ()> {
    c.wait(&mut g);
    g
}
#[cfg(loom)]
fn wait<'a>(c: &Condvar, g: MutexGuard<'a, ()>) -> MutexGuard<'a, ()> {
    c.wait(g).unwrap()
}

impl Handshake {
    /// Marks `slot` inside, first waiting out any stop in progress.
    #[inline]
    pub(crate) fn enter(&self, slot: &Slot) {
        slot.inside.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // The safepoint poll.
        if self.stop.load(Ordering::Acquire) {
            self.enter_slow(slot);
        }
    }

    #[cold]
    #[inline(never)]
    fn enter_slow(&self, slot: &Slot) {
        loop {
            self.leave(slot);
            let mut g = lock(&self.lock);
            while self.stop.load(Ordering::Acquire) {
                g = wait(&self.resumed, g);
            }
            drop(g);
            slot.inside.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if !self.stop.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// Marks `slot` outside, waking a collector that waits for it.
    #[inline]
    pub(crate) fn leave(&self, slot: &Slot) {
        // Release: the collector that sees `false` sees every write made
        // inside.
        slot.inside.store(false, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.stop.load(Ordering::Relaxed) {
            let _g = lock(&self.lock);
            self.left.notify_all();
        }
    }

    /// Whether a stop is requested (relaxed: a hint for mutators that may
    /// want to return from `mutate` early).
    #[inline]
    pub(crate) fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Raises `stop`. Slots registered after this call returns see `stop`
    /// when they enter (the caller takes its registry lock after raising
    /// it), so the caller then waits for the registered ones only.
    pub(crate) fn raise(&self) {
        self.stop.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Waits until `slot` is outside; call after [`raise`](Self::raise).
    pub(crate) fn wait_outside(&self, slot: &Slot) {
        if !slot.inside.load(Ordering::Acquire) {
            return;
        }
        let mut g = lock(&self.lock);
        while slot.inside.load(Ordering::Acquire) {
            g = wait(&self.left, g);
        }
    }

    /// Lowers `stop` and wakes the mutators waiting to enter.
    pub(crate) fn resume(&self) {
        // Release: a mutator that sees `false` sees what the pause wrote.
        self.stop.store(false, Ordering::Release);
        let _g = lock(&self.lock);
        self.resumed.notify_all();
    }
}

#[cfg(all(test, loom))]
mod handshake_model {
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;

    /// Two mutators enter and leave while the collector stops the world and
    /// resumes it: while stopped, no mutator is ever inside. (Dropping the
    /// fence in `enter` makes this fail.)
    #[test]
    fn stopped_world_has_no_mutator_inside() {
        loom::model(|| {
            let hs = Arc::new(Handshake::default());
            let slots = Arc::new([Slot::default(), Slot::default()]);
            // Mutators inside right now, counted by the mutators themselves.
            let running = Arc::new(AtomicUsize::new(0));
            let world_stopped = Arc::new(AtomicBool::new(false));
            let mut threads = Vec::new();
            for i in 0..2 {
                let (hs, slots, running, stopped) = (
                    hs.clone(),
                    slots.clone(),
                    running.clone(),
                    world_stopped.clone(),
                );
                threads.push(loom::thread::spawn(move || {
                    hs.enter(&slots[i]);
                    running.fetch_add(1, Ordering::SeqCst);
                    assert!(
                        !stopped.load(Ordering::SeqCst),
                        "ran while the world was stopped"
                    );
                    running.fetch_sub(1, Ordering::SeqCst);
                    hs.leave(&slots[i]);
                }));
            }
            hs.raise();
            for s in slots.iter() {
                hs.wait_outside(s);
            }
            world_stopped.store(true, Ordering::SeqCst);
            assert_eq!(
                running.load(Ordering::SeqCst),
                0,
                "a mutator is inside a stopped world"
            );
            world_stopped.store(false, Ordering::SeqCst);
            hs.resume();
            for t in threads {
                t.join().unwrap();
            }
        });
    }
}
