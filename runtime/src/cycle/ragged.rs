//! Ragged cycles: a mark that begins and ends without stopping the world.
//!
//! A stopped world waits for every `mutate` call under way, so one long
//! call held every other mutator at its next entry (issue #15: a call that
//! builds a 4 M-node tree held the other thread for up to 121 ms). A
//! ragged cycle waits for each call under way to end *once*, while every
//! mutator goes on entering and leaving `mutate`: no mutator waits for
//! another (`Handshake::wait_for_calls`). What the stops were for, and
//! what holds instead, is argued in `barrier.rs` ("Ragged cycles"); the
//! design and its history in `docs/handshakes.md`. In short:
//!
//! 1. *Start.* Set `marking` and `window` with a new remember epoch in one
//!    word (`Shared::calls`): every call that begins from now on shades.
//!    Wait for the calls that began before to end (they run with the
//!    barrier off). Once they have (point *T*), raise the seal epoch, take
//!    their remembered lists (the old epoch's parity) and read the root
//!    tables; then close the window. Calls that began in the window may
//!    hold, unshaded, what an old call then overwrote: they shade
//!    everything they hand out of their stack for as long as they run.
//! 2. *Mark* from the roots and the remembered objects concurrently, with
//!    assists, as a stopped cycle's concurrent mark does, and take the
//!    snapshot of allocated bits meanwhile.
//! 3. *End.* Trace what was shaded; wait for the calls that began in the
//!    window to end (the first time), and for the barriers under way to
//!    finish shading (every time: a bracket lasts one barrier, not a
//!    call); look at what they shaded meanwhile: nothing at the first
//!    look, and at a later one nothing but young objects that calls which
//!    began after the window closed made, and the mark is complete. (The
//!    objects window calls make carry a flag in their headers, and shade
//!    nothing as they are made: `barrier.rs`, "Ragged cycles", 6.) A call
//!    that began after the window closed runs on through the end. The
//!    look happens under the weak gate's write lock, which also clears
//!    the weak cells and `marking`, so an upgrade shades before the look
//!    or sees the mark over.
//!
//! Each wait tells the mutators that may be the scoped threads of a call
//! it waits for to stop waiting for the collector (pacing, the heap
//! limit), as a stop's gate does: that call may be joining them.
//!
//! Forced cycles (`collect` promises every unreachable object freed, and a
//! ragged full cycle keeps what the barrier marked since phase 0 as
//! floating garbage), `GlobalAlloc` spaces (their registry chunks are
//! taken in a pause) and a minor cycle that a `GcLock` write of unknown
//! owner made full before *T* still stop the world; so does a termination
//! that has not converged after `RAGGED_TRIES` waits. Verify mode checks a
//! ragged mark with the world stopped after it ended.

use super::{concurrently, roots_of, Cycle, Marking, SHADED_ROUNDS};
use crate::calls::CallState;
use crate::mark;
use crate::mutator::MutatorShared;
use crate::runtime::{Phase, Shared};
use crate::space::Space;
use loam_threadpool::ThreadPool;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Looks a ragged termination takes before it stops the world instead: a
/// mutator that keeps shading objects of the snapshot can keep the looks
/// finding something.
const RAGGED_TRIES: u32 = 8;

/// Sets `Shared::marked_through` and wakes the paced mutators; clears it
/// when dropped (the mark's end, or an unwind).
struct MarkedThrough<'a>(&'a Shared);

impl<'a> MarkedThrough<'a> {
    fn set(shared: &'a Shared) -> Self {
        shared.marked_through.store(true, Ordering::Relaxed);
        shared.wake_pacers();
        MarkedThrough(shared)
    }
}

impl Drop for MarkedThrough<'_> {
    fn drop(&mut self) {
        self.0.marked_through.store(false, Ordering::Relaxed);
    }
}

/// Whether a cycle may be ragged (module docs).
pub(super) fn eligible(shared: &Shared, forced: bool) -> bool {
    shared.config.ragged
        && shared.config.concurrent
        && !forced
        && matches!(shared.space, Space::Pages)
}

impl<'a> Cycle<'a> {
    /// Step 1, the ragged start (module docs). Returns the cycle, the
    /// mutators and the remembered objects as `Cycle::stop` does; `Err`
    /// when it had to stop the world after all (a minor cycle that a
    /// `GcLock` write of unknown owner made full): the world is then
    /// stopped, `marking` off, and the caller goes on with `Cycle::stop`,
    /// given when this start began and the heap then (`Begun`), so that
    /// the cycle's stop and start count the wait for calls made here.
    pub(super) fn start_ragged(
        shared: &'a Shared,
        pool: &'a ThreadPool,
        mark_clear: Option<Duration>,
    ) -> Result<super::Started<'a>, super::Begun> {
        let begun = super::Begun::now(shared);
        let (start, heap_before) = (begun.start, begun.heap_before);
        // Phase 0 ran for every cycle that will be full (`full_ahead`).
        let full = mark_clear.is_some();
        if full {
            // This cycle marks everything: writes from here on are the
            // next cycle's business.
            shared.lock_written.store(false, Ordering::Relaxed);
        }
        // Before `calls` below: a call that reads that word reads this
        // epoch or a later one, and keeps one cycle's pair (`calls.rs`).
        let epoch = shared.calls.next_epoch();
        let before = shared.calls.now();
        let remember = before.remember + 1;
        shared.live_seen.store(0, Ordering::Relaxed);
        {
            let mut c = shared.control.lock();
            c.phase = Phase::Mark;
            c.ragged_epoch = epoch;
        }
        // Release: a call that sees it sees the epochs stored before.
        shared.calls.set(CallState {
            marking: true,
            window: true,
            clearing: false,
            remember,
        });
        // Read after the store (the registry's mutex orders it before a
        // later attach): a mutator missing from this list makes its first
        // call after attaching, and sees `marking`.
        let mutators = shared.mutators.lock().clone();
        shared.handshake.wait_for_calls(&mutators);
        // The registry below counts references: gone mutators are those
        // it alone holds.
        drop(mutators);
        // T: every call that began without the barrier has ended. The
        // window stays open until the roots are read (`mark_ragged`).
        let stop_time = start.elapsed();
        // The seal epoch rises only now, with no old call left: what old
        // calls allocated is all in the sweep's copy, so an object missing
        // from the copy (young, `Snapshot::holds`) was allocated by a call
        // with the barrier on (`barrier.rs`, "Ragged cycles", 6). Window
        // calls may allocate on either side of it.
        // SAFETY: under the process-wide cycle lock, which this cycle
        // holds until its sweep, after its walk: no other walk runs.
        let seal = unsafe { loam_heap::SealEpoch::raise() };
        let heap_at_stop = shared.heap_used.load(Ordering::Relaxed);
        if !full && shared.lock_written.load(Ordering::Relaxed) {
            // A write of a lock whose object is unknown, by a call that
            // perhaps began before the mark (so unshaded): this cycle must
            // be full, and only a stopped one can clear the marks now.
            super::stop_world(shared, None);
            shared.control.lock().phase = Phase::Stop;
            shared.calls.set(CallState {
                marking: false,
                window: false,
                clearing: false,
                remember,
            });
            return Err(begun);
        }
        let mut remembered = Vec::new();
        let mutators = {
            let mut list = shared.mutators.lock();
            list.retain(|m| {
                // The old epoch's objects, whose calls have all ended.
                remembered.append(&mut m.remembered_in(before.remember).lock());
                // Gone (detached, no root left): nothing adds to its lists
                // any more. Forgotten once its new epoch's list, which is
                // the next cycle's, and its shade queue are empty too.
                let gone = m.detached.load(Ordering::Acquire) && Arc::strong_count(m) == 1;
                !(gone && m.remembered_in(remember).lock().is_empty() && m.shaded_is_empty())
            });
            list.clone()
        };
        shared
            .live_counting
            .store(full || remembered.is_empty(), Ordering::Relaxed);
        let cycle = Cycle {
            full,
            marks_cleared: full,
            heap_at_stop,
            // Every cell: the mark shades those made during it.
            weak_at_stop: usize::MAX,
            concurrent: true,
            ragged: true,
            ..Cycle::new(shared, pool, start, heap_before, seal, stop_time, mark_clear)
        };
        Ok((cycle, mutators, remembered))
    }

    /// Step 2 and 3: marks from the roots and `remembered` with the
    /// mutators running, takes the snapshot, and ends the mark raggedly
    /// (or, past `RAGGED_TRIES`, with the stopped termination: the world
    /// is then stopped on return, as after `Cycle::terminate`).
    pub(super) fn mark_ragged(
        &mut self,
        gen: &super::Generations,
        mutators: Vec<Arc<MutatorShared>>,
        remembered: &[usize],
        snap: &mut super::Snapshot,
    ) -> Marking {
        let shared = self.shared;
        let mark_start = Instant::now();
        let not_marking = self.not_marking();
        // The roots as the tables hold them now: a root made or pointed
        // elsewhere since a table was read shades its object
        // (`Mutation::barrier_root`), and what a root held at T and lost
        // since is kept by the barrier that cut it (`barrier.rs`).
        let roots = roots_of(shared, &mutators);
        // The window closes: calls that begin now read what the tables
        // held or were shaded into them since, so they need the snapshot
        // barrier only (and the end counts on no window call being left
        // after its first wait).
        shared.calls.set(CallState {
            window: false,
            ..shared.calls.now()
        });
        // The calls that began in the window: the end's first look waits
        // for them (`terminate_ragged`). Every other call read the window
        // closed, or reads it closed as it confirms (Dekker,
        // `Handshake::confirm_window`); the registry's mutex orders a
        // later attach after this read.
        let registry = shared.mutators.lock().clone();
        let window_calls = shared.handshake.calls_under_way(&registry, true);
        // The runtime's one mutator may be waiting for this close
        // (`Mutator::wait_out_window`). On its CPU, this thread runs
        // because the mutator yielded it, and the scheduler lets the
        // thread that woke with credit run on: pinned to one CPU,
        // binary-trees at depth 16 was held 0.3 - 0.9 ms a time for a
        // close that takes 0.04 ms, while the mark went on (a yield here
        // did not hand the CPU back: the mutator had spent its share).
        // Stepping off the CPU for a moment lets the mutator go on; the
        // mark then shares the CPU with it as any concurrent mark does.
        shared.held_cpus.window_closed();
        shared.held_cpus.step_aside();
        // As in `mark_concurrently`: the work expected over the headroom
        // (in a minor cycle, what survives of the young heap is unknown:
        // a quarter of it, guessed).
        let expected = if self.full {
            gen.live
        } else {
            self.heap_at_stop.saturating_sub(gen.old) / 4
        }
        .max(1 << 20);
        let ratio = super::set_assist_ratio(shared, gen, expected);
        let mut rest = Vec::new();
        // What the window's calls shaded so far is traced in this round
        // too (taken as remembered: traced though marked). It is often
        // most of the mark: a structure built in the window and rooted
        // there is shaded whole by its root, and its root's mark then
        // keeps the roots' pass from tracing it. Left to the rounds
        // below, it waited for the snapshot's walk, and a mutator paced
        // at the window's close waited with it (1.3 ms, binary-trees at
        // depth 21).
        let mut shaded = Vec::new();
        shared.drain_shaded(&mut shaded);
        let remembered = if self.full {
            // A full cycle traces a remembered or shaded object only for
            // its mark: a marked object is not traced again, so what it
            // points to would be missed. The marks phase 0 cleared are
            // nothing the mark needs (the lists stored over each other
            // since the last cycle, the last ragged cycle's young objects
            // left for this one, shades of calls that ran on after its
            // mark ended), and one traced anyway keeps everything it
            // reaches, counted as live. Whatever a shade pushed since, it
            // marked first. A stopped cycle clears these marks in its
            // pause instead (`barrier.rs`, "Clearing the marks with the
            // mutators running", 4).
            shaded.extend_from_slice(remembered);
            shaded.retain(|&o| {
                // Remembered and shaded objects are allocated, in loam's
                // pages: they were reachable when remembered or shaded,
                // during or after the last cycle's mark, so that cycle's
                // sweep kept them (marked, or allocated after its stop),
                // and only this cycle's sweep frees again.
                // SAFETY: as just said.
                unsafe { shared.space.is_marked(o) }
            });
            &shaded[..]
        } else if shaded.is_empty() {
            remembered
        } else {
            shaded.extend_from_slice(remembered);
            &shaded[..]
        };
        // Every object a marked object points to is marked, or queued by
        // this call (roots, `remembered`, what was shaded), or in
        // `shared.gray` or a mutator's shade queue (shaded since; both
        // taken by `Shared::drain_shaded`), which the rounds below trace; in a
        // full cycle the marks phase 0 left are those of remembered and
        // shaded objects (`barrier.rs`).
        // SAFETY: no sweep runs until this cycle's; roots, remembered and
        // shaded objects are allocated (rooted, reachable since the last
        // cycle, or reachable when shaded); every call under way shades
        // (T has passed).
        let marked = unsafe {
            mark::parallel(&shared.space, self.pool, &roots, remembered, concurrently(shared), &mut rest)
        };
        // (What it found live, it and its GC threads and assists have
        // reported as they went: `Shared::saw_live`, via `concurrently`.)
        self.marked.add(marked);
        // Traced through: paced mutators go on until the end
        // (`Shared::outruns_mark_end`), and are held at the gate if it
        // falls back to a stopped termination.
        let _through = MarkedThrough::set(shared);
        self.snapshot(snap, false);
        let mut m = Marking {
            mutators,
            roots,
            gray: Vec::new(),
            end_start: None,
        };
        let pause_mark = if self.terminate_ragged(&mut rest, snap, (&registry, &window_calls)) {
            Duration::ZERO
        } else {
            // Not converged: end it as a stopped cycle does.
            self.terminate(ratio, rest, &mut m)
        };
        self.concurrent_mark = self.mark_time_since(mark_start, not_marking, pause_mark);
        self.mark_time = self.concurrent_mark + pause_mark;
        m
    }

    /// Step 3: traces what was shaded, waits for the window's calls (the
    /// first time) and for the shading brackets under way (every time),
    /// and ends the mark if nothing that matters was shaded meanwhile. True
    /// when it ended (`marking` off, the weak cells cleared, the world
    /// running); false after `RAGGED_TRIES` waits, with `rest` holding
    /// what is left.
    ///
    /// What matters: at the first look, anything (the window's calls may
    /// have handed out, during the first wait, what no marker has seen).
    /// From then on, the objects of the snapshot (`Snapshot::holds`), and
    /// the objects window calls made (`gc::WINDOW_MADE`), whose contents
    /// may be objects of the snapshot that only they reach (a window
    /// call's fresh objects shade nothing as they are made). Calls that
    /// began after the window closed shade young objects whenever they
    /// store one into an old object (the barrier's new value), so a look
    /// that waited for none of those would seldom end the mark while a
    /// mutator stores, and tracing them could keep the markers busy for
    /// as long as it does.
    /// Such an object is not swept by this cycle, and what it points to is
    /// marked or on its way to `gray`, or made by a window call and then
    /// traced when shaded, or young too (the call read it from a root or
    /// the heap, where nothing unmarked of the snapshot is left but through
    /// what the barriers shade, or allocated it): it goes back to `gray`,
    /// marked, for the next cycle to trace (`barrier.rs`, "Ragged cycles",
    /// 3 and 6). The window calls have all ended by the first look, so
    /// what they made is a fixed set, and the looks converge as before.
    fn terminate_ragged(
        &mut self,
        rest: &mut Vec<usize>,
        snap: &super::Snapshot,
        (registry, window_calls): (&[Arc<MutatorShared>], &[(usize, u64)]),
    ) -> bool {
        let shared = self.shared;
        let index = snap.index();
        let later_made = |o: &usize| {
            // SAFETY: shaded objects are allocated, in loam's pages (a
            // ragged cycle's space), and no sweep runs.
            !unsafe { snap.holds(&index, *o) || crate::gc::made_in_window(*o) }
        };
        // Objects shaded after the first look that calls which began after
        // the window closed made since T: marked, left for the next cycle.
        let mut later = Vec::new();
        let mut first_look = true;
        let mut batch = Vec::new();
        let ended = 'tries: {
            for _ in 0..RAGGED_TRIES {
                for _ in 0..SHADED_ROUNDS {
                    shared.drain_shaded(&mut batch);
                    if !first_look {
                        // Shaded after the first look, so by calls that
                        // began after the window closed. (What the first
                        // look found, and what tracing it left in `rest`,
                        // is traced whole.)
                        let (y, old): (Vec<usize>, Vec<usize>) = batch.drain(..).partition(later_made);
                        later.extend(y);
                        batch = old;
                    }
                    batch.append(rest);
                    if batch.is_empty() {
                        break;
                    }
                    let work = std::mem::take(&mut batch);
                    // SAFETY: shaded and left objects are marked and
                    // allocated (reachable when shaded; no sweep runs); the
                    // invariant as in `mark_ragged`.
                    let marked = unsafe {
                        mark::parallel(&shared.space, self.pool, &[], &work, concurrently(shared), rest)
                    };
                    // Reported as found, as above.
                    self.marked.add(marked);
                }
                let wait = Instant::now();
                if first_look {
                    // A window call may still hold an object it has not
                    // handed out; once each has ended, whatever it handed
                    // out was shaded (into its mutator's shade queue).
                    shared.handshake.wait_for_listed(registry, window_calls, true);
                }
                // Every other call under way began after the window
                // closed: what it overwrites after the markers read it
                // is shaded, and a shade begun before this wait is in its
                // mutator's shade queue after it (`Shared::drain_shaded`;
                // `barrier.rs`, "Ragged cycles", 3). A
                // bracket lasts one barrier (or one sort's moves and
                // shade, `GcLog::moving`), not a call.
                let mutators = shared.mutators.lock().clone();
                shared.handshake.wait_for_shades(&mutators);
                self.stop_time += wait.elapsed();
                let gate = shared.weak_gate.write();
                // Under the gate: no upgrade shades between this look and
                // the clearing below.
                shared.drain_shaded(&mut batch);
                let done = rest.is_empty()
                    && if first_look {
                        batch.is_empty()
                    } else {
                        batch.iter().all(later_made)
                    };
                first_look = false;
                if !done {
                    drop(gate);
                    rest.append(&mut batch);
                    continue;
                }
                later.append(&mut batch);
                // The mark is complete (`barrier.rs`, "Ragged cycles": every
                // object of the snapshot that a root, an object or a call
                // can still reach is marked).
                if !shared.trace_panicked(shared.calls.mark_epoch()) {
                    super::mark_weak(shared, usize::MAX, self.full);
                }
                shared.assist_ratio.store(0, Ordering::Relaxed);
                let calls = shared.calls.now();
                shared.calls.set(CallState {
                    marking: false,
                    ..calls
                });
                drop(gate);
                break 'tries true;
            }
            false
        };
        if ended {
            for o in later {
                shared.gray.push(o);
            }
        } else {
            // The stopped termination traces them all.
            rest.append(&mut later);
        }
        ended
    }
}
