//! loam-runtime: managed objects, sound rooting and the concurrent mark-sweep
//! collector.
//!
//! A managed heap on `loam-heap`'s pages, with sound rooting enforced by the
//! borrow checker, dedicated GC threads that mark in parallel (concurrently
//! with the mutators, behind a snapshot barrier, the mark begun and ended
//! with per-mutator handshakes that stop no one by default, `cycle/ragged.rs`,
//! or with short stops of the world), and a concurrent parallel sweep that
//! hands free blocks back to their owning threads (mutators that pacing
//! holds sweep too). This header is the design and its reasons; each
//! module's docs hold the details (`handshake`, `mark`, `sweep`,
//! `collector`, `weak`); `runtime/HACKING.md` holds the lock order, what
//! may run during a cycle, and which tests and loom models cover what.
//!
//! ```
//! use loam_runtime::{Gc, GcCell, Root, Rootable, Runtime, Trace};
//!
//! #[derive(Trace)]
//! struct Node<'gc> {
//!     value: u32,
//!     next: GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>,
//! }
//!
//! let rt = Runtime::new();
//! let mut m = rt.attach();
//! // Build a list in one `mutate` call and keep its head in a root.
//! let head: Root<Rootable!['gc => Node<'gc>]> = m.mutate(|mc| {
//!     let mut head = mc.alloc(Node { value: 0, next: GcCell::new(None) });
//!     for value in 1..100 {
//!         head = mc.alloc(Node { value, next: GcCell::new(Some(head)) });
//!     }
//!     mc.root(head)
//! });
//! m.collect(); // a safepoint: only rooted objects survive
//! let sum = m.mutate(|mc| {
//!     let mut sum = 0;
//!     let mut cur = Some(head.get(mc));
//!     while let Some(n) = cur {
//!         sum += n.value;
//!         cur = n.next.get();
//!     }
//!     sum
//! });
//! assert_eq!(sum, 4950);
//! ```
//!
//! # Object model
//! An object is a header word (a `&'static TypeDesc`: size, payload offset,
//! trace and drop functions) followed by the payload, in `loam-heap`'s size-class
//! pages (large objects in spans of their own). The heap gives every page side
//! bitmaps (`loam_heap::PageRef`); the runtime needs two per page:
//! - an *allocated* bit, set when an object is allocated and cleared when its
//!   block comes back to its owner. The sweeper cannot tell a dead object from a free block
//!   any other way: a free block's first word is the heap's free-list link, in
//!   the place of the header, and the owner's free lists are not readable from
//!   another thread. Only the page's owning thread writes these bits (a
//!   plain store when allocating; it clears them when the sweeper's page run
//!   comes back), and the cycle copies them as of its stop for the sweep
//!   (`loam_heap::SealEpoch`), so objects allocated after the stop are
//!   simply not in its copy; the
//!   blocks of a run not yet back are *pending* (a bitmap the run's sender
//!   sets), and the copy leaves them out;
//! - a *mark* bit, set by the marker with `fetch_or`, cleared for every page
//!   by a full cycle before its stop, with the mutators running (the stop
//!   clears the few the barrier set meanwhile; `barrier.rs`). Marking never
//!   writes into objects a mutator may be using.
//!
//! # Minor cycles: sticky mark bits
//! Between full cycles, a *minor* cycle keeps the marks (a non-moving
//! generational scheme): objects that survived a cycle stay marked, so
//! marking from the roots stops at them and traces only what was allocated
//! since; the sweep is unchanged (allocated and unmarked: young and dead).
//! This holds because of one invariant between cycles: every object a
//! marked object points to is marked, or remembered. An object's own fields
//! are fixed at allocation, when it is young; only the barrier cells change
//! them later, and a [`GcCell`] store marks the stored objects and records
//! the ones it newly marked for the next minor cycle to trace. A [`GcLock`]
//! write may change any number of pointers, so it records the object the
//! lock is in (which the markers told the lock), and the next minor cycle
//! traces that object again: O(1) per write (`cell.rs`, "Recording the
//! object written"). Only a lock shared by two objects through an `Arc`
//! makes the next cycle full. The same record is a field of its own,
//! [`GcLog`], for types that change many cells (the managed collections):
//! stores after a record skip the generational barrier
//! ([`GcCell::set_recorded`]), so nothing they store is promoted (`log.rs`). Old garbage waits for a full cycle, which
//! runs once old objects fill half the headroom the last one left, and on
//! every `collect`. On binary-trees (3 MB live) this took the mark from 380
//! to 50 ms over twelve runs and the pause p99 from 8 to 4 ms. One more
//! thing keeps a minor pause small when the old generation is large: a page
//! whose every block is marked is flagged old by the sweep and left out of
//! minor cycles' snapshots and sweeps until the next full cycle (nothing on
//! it can change until then). What a minor cycle marks only brings the
//! next full cycle closer: it is not all live (the barrier marked every
//! young object stored into a cell, and a later store may have cut it off
//! again), so it never re-bases the heap goal; a program that stores a
//! fresh structure over the last one in every call would otherwise double
//! its heap every cycle on promoted garbage.
//!
//! Both live in the segment header (one slice each, resident only where
//! touched). The header word also carries the owning runtime's id in its top
//! 16 bits: runtimes share the heap's pages, and a sweep must only free its
//! own objects. For the same reason one cycle runs at a time per process.
//!
//! # Rooting: branded lifetimes with scoped mutation (gc-arena's model)
//! The two known-good designs were weighed:
//! - *Root handles in a per-thread table* (V8 handle scopes, SpiderMonkey's
//!   `Rooted`) make every pointer on the Rust stack a handle. Sound, but a
//!   field type that holds a managed pointer inside an object (`Member<T>`)
//!   can be built on the Rust stack and kept across a safepoint, invisible to
//!   the collector; closing that hole needs lifetimes anyway.
//! - *Branded lifetimes* make the hole a compile error. Chosen:
//!   - `Mutator` (one per attached thread, `!Send`) owns the thread's state.
//!   - `mutator.mutate(|mc: &Mutation<'gc>| ...)`: inside, `'gc` is a fresh
//!     higher-ranked lifetime. `Gc<'gc, T>` is a `Copy` pointer that cannot
//!     leave the closure. Object types are generic over `'gc`
//!     (`struct Node<'gc> { next: Option<Gc<'gc, Node<'gc>>> }`).
//!   - Safepoints happen only between `mutate` calls (the call takes
//!     `&mut Mutator`, so no `Gc<'gc>` can be alive across one): the collector
//!     never has to find a pointer it cannot see. A mutator outside `mutate`
//!     is *blocked* by construction, so an idle or busy-elsewhere thread never
//!     holds a collection up. Entering `mutate` is the safepoint poll: a
//!     store, a fence and a load of the stop flag (the fence is the price of
//!     not having to wait for threads outside; a thread inside a `mutate`
//!     call pays nothing). A long computation is a loop of short `mutate`
//!     calls carrying its state in roots, so a loop that allocates for
//!     minutes never stalls a collection; `Mutation::collection_pending`
//!     tells a long call to return early.
//!   - Values that live across safepoints are held by `Root<R>` (a slot in the
//!     mutator's root table, `!Send`) or `GlobalRoot<R>` (`Send + Sync`, a slot
//!     in the runtime's table), where `R: for<'a> Rootable<'a>` names the
//!     object type with its `'gc` abstracted (`Rootable!['gc => Node<'gc>]`);
//!     `root.get(mc)` gives back a `Gc<'gc, _>` for the current scope.
//!   - An unrooted pointer cannot reach another thread: `thread::spawn` needs
//!     `'static`, and `Gc<'gc, _>` is not. (Scoped threads inside one `mutate`
//!     may share it: the mutator cannot reach a safepoint until they end.
//!     They may read what it points to, and attach and run `mutate` calls
//!     of their own, but not write the outer call's objects: see below.)
//!   - The barrier cells carry the brand too (`GcCell<'gc, T>`,
//!     `GcLock<'gc, T>`), and a write takes the `&Mutation<'gc>` of the same
//!     brand. A write through another call's `Mutation` (a scoped thread's,
//!     of this runtime or another) does not compile: its barrier would serve
//!     the wrong marking epoch, generations and remembered set.
//! - Managed objects are `Send + Sync` (their drop glue runs on a GC thread,
//!   and a global root shares them): interior mutability goes through the
//!   runtime's barrier cells, which are thread-safe (`GcCell` for a
//!   pointer-sized value on an atomic word, `GcLock` for anything else), and
//!   are the only way to store a managed pointer into an existing object, so
//!   the write barrier cannot be skipped.
//! - `unsafe trait Trace` with `#[derive(Trace)]`; the derive rejects a plain
//!   `impl Drop` on a traced type (a destructor could reach an object the same
//!   sweep already freed) unless the type opts in with an unsafe attribute.
//!
//! # Collector: parallel mark, concurrent past a pause budget; concurrent sweep
//! 1. A cycle starts when the managed heap reaches its trigger: the goal,
//!    `gc_percent` over the last live size (never below the minimum heap,
//!    unless a heap limit keeps it lower: see "Pacing past the heap
//!    limit"), less how far the heap grew past the trigger during recent
//!    cycles (no lower than halfway from the live size; `Generations::
//!    trigger_lead`), so that the heap peaks near the goal; or on
//!    `collect()`; or sooner once the large objects (past 128 KiB) made
//!    since the last mark pass an eighth of the goal, while the last cycle
//!    freed at least half that of them (`Mutator::count_large`: the sweep's freed
//!    arrays are then reused while in the cache). Mutators take heap budget
//!    in 64 KiB chunks, so pacing and the heap limit cost nothing per
//!    object.
//! 2. (This step and the next describe a stopped cycle: `collect()`, a
//!    `GlobalAlloc` space, `ragged_handshakes(false)`, or a concurrent mark
//!    turned off. By default a cycle over loam's pages begins and ends its
//!    mark with per-mutator handshakes instead, with no stop:
//!    `cycle/ragged.rs` and `docs/handshakes.md`.) The coordinator raises the
//!    stop flag and waits for the mutators inside `mutate` to return (the
//!    handshake; loom-checked). Mutators outside are
//!    blocked by construction: the collector reads their root tables. It
//!    raises the heap's seal epoch: from then on, each allocation seals its
//!    page (copies its allocated bits) before it sets a bit there,
//!    so the sweep's copy of the bits as of the stop is taken after the
//!    pause, with the mutators running (`loam_heap::SealEpoch`). A full
//!    cycle clears the marks before its stop, with the mutators running
//!    (the barrier's remembered objects tell the stop which bits were set
//!    meanwhile; `barrier.rs`).
//! 3. GC threads mark in parallel: crossbeam-deque work stealing over
//!    explicit mark stacks (a 10,000,000-node list overflows nothing).
//!    A mark that outlasts the pause budget (150 µs by default) goes on
//!    concurrently: the mutators resume, every `mutate` call that begins
//!    then sees `marking` and runs the barrier cells as a snapshot barrier
//!    (a store shades the value it overwrites, and the one it stores
//!    unless the cell lies in a young object, whose trace will read it; a
//!    `GcLock` write shades the old contents once per mark; a weak upgrade
//!    shades its target). The markers trace from the pause's gray objects,
//!    then from what the barriers shaded, in a few rounds; then the world
//!    stops again, briefly, for the rest. Why this is enough: at a
//!    safepoint no mutator holds an unrooted pointer, so the roots the
//!    first pause copied are the whole snapshot; an object reachable then
//!    is marked unless its last path is cut first, and every cut goes
//!    through a barrier that shades it; what a mutator reaches otherwise was
//!    allocated since (not in the sweep's copy of the allocated bits, so
//!    never freed by this cycle) or handed out by an upgrade (shaded).
//!    Objects are allocated white: black allocation would count all that a
//!    long mark sees allocated as old, and at binary-trees depth 21 turned
//!    every later cycle full. A marker reads objects the mutators may be
//!    using without a data race: after allocation an object changes only
//!    through the barrier cells, read atomically or under their lock.
//! 4. Weak cells with unmarked targets are cleared; mutators resume; this is
//!    the end of the (last) pause. Each pause is measured.
//! 5. GC threads sweep each page (`allocated & !marked`, from the copy of
//!    the allocated bits as of the stop) and send each page's dead blocks to the
//!    owning thread heap as one page run
//!    (`loam_heap::FreeBatch::push_page_run`, one atomic operation; a page
//!    that is all garbage goes back without a write to its blocks). The
//!    owner takes runs back at its next `mutate`: a run that empties its page
//!    resets the page in O(1), and allocation bumps through it again. A
//!    page's dead objects with drop glue among them are held as a run
//!    instead (their blocks pending, left out of later cycles' copies) and
//!    go to the runtime's finalizer thread, which runs the destructors and
//!    then sends the run (`finalize.rs`): nothing the collector waits for
//!    runs user code that may block, so `collect` returns without waiting
//!    for destructors (`Runtime::wait_for_drops` does). Memory a
//!    destructor lets go of (a `GlobalRoot` it drops) is garbage for the
//!    next cycle: `wait_for_drops`, then `collect`, frees it. The objects
//!    waiting for their destructors count against pacing and the heap
//!    limit, and mutators that outrun the finalizer wait for it, for as
//!    long as it makes progress (`finalize.rs`, "The brake").
//!
//! # What user code may do on the collector's threads
//! Every call into user code there is contained (`panics.rs`): a panic is
//! caught (its payload too, should dropping it panic), counted in
//! `GcStats::user_panics` and reported on stderr once per type and cycle.
//! What the collector writes on stderr (the trace, these reports) is lost
//! if stderr is gone, never a panic, and is written with no lock held. A
//! panic that still reaches the top of the coordinator, the finalizer or a
//! GC thread's part of a mark is the collector's own bug: the process stops
//! with a `loam:` message naming the thread, rather than leave its
//! mutators waiting for a cycle that will not come (`collector.rs`,
//! `or_stop` and `StopIfUnwinding`).
//! - Destructors run on the finalizer thread, holding no lock a cycle
//!   needs: they may collect, build or drop runtimes and take locks. They
//!   must not wait for the finalizer (`wait_for_drops` of their own runtime
//!   panics there) and must not dereference managed pointers (`Trace`,
//!   safety rule 4).
//! - `Trace` impls run on GC threads during the cycle: one that panics
//!   leaves the marks incomplete, so that cycle frees nothing and the next
//!   is full. So does one that panics as a `GcLock` write shades its
//!   contents for the mark under way; in a call that ran on past its
//!   mark's end, it fails no cycle (it is reported with the next one).
//! - The `on_cycle` hook runs on the coordinator after the cycle lock is
//!   released: it must not wait for a cycle of any runtime (`collect`,
//!   `wait_for_cycle`, `wait_for_drops`, `wait_final` panic there: two
//!   runtimes whose hooks collected each other waited for each other for
//!   ever); hand such work to a thread of your own.
//! - Refused with a clear panic, because each would wait for itself:
//!   `collect` inside `mutate` or on a GC thread. Building a runtime on a
//!   GC thread is refused too (a `Trace` impl must not block). Dropping a
//!   runtime's last handle inside `mutate` or on a collector thread does
//!   not wait for its collector, nor once another runtime's cycle has
//!   found a call stuck for a second (it may be waiting for the dropping
//!   thread).
//! - A thread that a `mutate` call waits for (a scoped thread it joins, a
//!   thread holding a lock it wants) must not call `collect`,
//!   `wait_for_cycle` or `wait_for_drops`, of that call's runtime or of
//!   another: they wait for a cycle, which waits for every call under way
//!   (or, for another runtime, for the process's cycle lock, which the
//!   call's cycle holds), so that wait cannot end. On Linux it
//!   panics instead, a clear message rather than a hang, once the
//!   collector has waited 10 s for calls that wait for other threads
//!   while no thread of the process can wake another: all wait for
//!   threads, none runs or waits on I/O, a sleep or a child, none wakes
//!   (Go's deadlock rule; `thread_state.rs`, `Stall`). Entering `mutate` there is fine:
//!   a stop that waits past its patience for a call whose thread is
//!   blocked lets waiting mutators in (`handshake.rs`, "The gate").
//!
//! # Object spaces
//! The above is the default object space, loam's pages. A runtime built
//! with [`RuntimeBuilder::global_alloc`] keeps its objects in any
//! `GlobalAlloc` instead: each object gets a 16-byte prefix (its
//! allocation size, and its mark as the number of the full cycle that set
//! it, so a full cycle unmarks everything by counting up), and its address
//! goes into its mutator's registry chunk, which the pause takes in place
//! of the pages' allocated bits; the sweep frees dead objects one by one
//! through the allocator. The mark, the barriers, weak references, the
//! snapshot, the sweep and the finalizer reach memory only through
//! `space.rs`, so everything else is the same collector.
//!
//! # The managed pool
//! [`ManagedPool`] is a `loam-threadpool` pool whose workers attach when they
//! start and detach when they exit; a task gets its worker's `&mut Mutator`,
//! and forks with [`join`] and [`scope`], which lend that mutator to the tasks
//! the worker runs while it waits (`pool.rs`). A worker waiting on a pool
//! inside `mutate` would deadlock against a pause (the pause waits for it, the
//! job it waits for may be waiting for the pause), so `mutate` forbids pool
//! waits on its thread (`loam_threadpool::forbid_waits`): they panic. A
//! parked worker lends its heap (`loam_heap::lend_idle`, in the pool's
//! park hooks), so that what the sweeps free into it serves the workers
//! that run.
//!
//! Why page runs (measured on binary-trees, loam/Box time): sending dead
//! blocks one by one through the owner's remote queue cost a cache miss per
//! block on each side (2.9x); runs with page resets brought it to 1.6x,
//! owner-only allocated bits (no atomic per allocation) and whole-page runs
//! to 1.2x, with the 32 MiB minimum heap 1.16x.
//!
//! Pacing past the heap limit: an allocation that does not fit waits for a
//! sweep under way, then fails (`try_alloc` returns `Err`, `alloc` panics);
//! the mutator's next `mutate` call first runs a full collection, and until
//! an allocation succeeds again, every later call that follows something
//! that may have freed memory (a root dropped or moved, or, while a mutator
//! is at the limit, any write through a barrier cell, a lock or a logged
//! collection) does too, so a retry after letting data go succeeds even
//! with read-only calls in between. A `mutate` call cannot be
//! interrupted by a collection (that is the rooting design), so that is
//! where it can happen. The heap stays within twice the goal plus, per
//! mutator, 128 KiB (allocation credit and slack) and what two calls
//! allocate, plus a sixteenth of what the mark traces: past twice the goal
//! a mutator owes sixteen bytes of marking for each byte it allocates,
//! paid as it allocates and before its next call, and waits for the cycle
//! (one at most) when there is no mark to help (`Mutator::pace`). "The
//! goal" here is the pace goal: the last full cycle's, raised while a mark
//! finds live data past it (`Shared::saw_live`: a structure built in one
//! call is paid for by the marks that find it, not by every allocation
//! until a full cycle has measured it). Under a
//! limit, the goal is kept at most halfway from the live size to the
//! limit, and no higher than seven eighths of it while the live data is
//! below that (`cycle::goal_under_limit`), and pacing begins at seven
//! eighths at the latest (`Shared::pace_at`): cycles start early enough
//! to run between calls before an allocation meets the limit. The heap
//! stays within that point plus the slack above, so a program whose live
//! data fits under seven eighths of the limit, and whose slack fits in the
//! last eighth, never meets the `Err`.
//!
//! Why the pause budget rather than always concurrent: a concurrent mark
//! costs a second stop, which waits for every `mutate` call under way to
//! return, and most minor cycles mark in well under a millisecond. Both
//! pauses still wait for `mutate` calls to return, so a mutator that stays
//! inside one for long delays a cycle's start (not its pauses).

// Under `--cfg loom` the crate is reduced to its models and what they use
// (`not_under_loom!`): the rest of what those modules hold is dead there.
#![cfg_attr(loom, allow(dead_code, unused_variables, unused_assignments))]

// Lets `#[derive(Trace)]`, whose output names `::loam_runtime`, be used inside
// this crate too.
extern crate self as loam_runtime;

/// Items compiled only outside loom: under `--cfg loom` the crate is reduced
/// to its models and the real code some of them run (the handshake, the
/// calls word, a log's owner, the mark stack's sharing, the registry,
/// the root slots, the cards, the runtime count).
macro_rules! not_under_loom {
    ($($item:item)*) => { $(#[cfg(not(loom))] $item)* };
}

#[cfg(all(test, loom))]
mod assist_model;
#[cfg(all(test, loom))]
mod call_entry_model;
mod calls;
mod cards;
#[cfg(all(test, loom))]
mod grow_model;
mod handshake;
mod log_owner;
#[cfg(all(test, loom))]
mod log_owner_model;
mod mark_stack;
#[cfg(all(test, loom))]
mod preclear_model;
#[cfg(all(test, loom))]
mod ragged_model;
mod registry;
mod root_slots;
mod runtime_count;
#[cfg(all(test, loom))]
mod runtime_count_model;
#[cfg(all(test, loom))]
mod snapshot_model;
#[cfg(all(test, loom))]
mod sweep_help_model;
mod sync;
mod thread_state;
mod trace;
#[cfg(all(test, loom))]
mod young_store_model;

not_under_loom! {
    mod alloc_space;
    mod array;
    mod barrier;
    mod cell;
    mod collector;
    mod cycle;
    mod finalize;
    mod forked;
    mod gc;
    mod held;
    mod held_cpus;
    mod histogram;
    mod log;
    mod mark;
    mod mutator;
    mod options;
    mod panics;
    mod pool;
    mod root;
    #[allow(clippy::module_inception)]
    mod runtime;
    mod space;
    mod stats;
    mod sweep;
    mod weak;

    pub use cell::{CellValue, GcCell, GcLock};
    pub use gc::{Gc, Managed};
    pub use log::GcLog;
    pub use mutator::{AllocError, AllocErrorKind, Mutation, Mutator};
    pub use options::ConfigError;
    pub use pool::{join, scope, spawn, with_mutator, ManagedPool, ManagedPoolBuilder, ManagedScope};
    pub use root::{GlobalRoot, Rebrand, Root, Rootable};
    pub use runtime::{Runtime, RuntimeBuilder};
    pub use histogram::PauseHistogram;
    pub use stats::{CycleEvent, GcStats, StatsHandle};
    pub use weak::GcWeak;
}

pub mod fence;
pub use cards::GcCards;
pub use loam_derive::Trace;
#[doc(hidden)]
pub use trace::__private;
pub use trace::{Trace, Tracer, UnsafeDrop, MAX_TRACE_PARTS};
