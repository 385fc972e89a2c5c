//! loam-runtime: managed objects, sound rooting and the concurrent mark-sweep
//! collector.
//!
//! **Not yet built** (issue #4). This header records the design chosen so far
//! and why, so the implementation starts from a settled plan. Nothing below is
//! code yet; the crate exports nothing.
//!
//! Built so far: the foundation the rest stands on, the [`Trace`](trait@Trace) trait with
//! its `#[derive(Trace)]` (crate `loam-derive`, re-exported here under the
//! same name) and the opaque [`Tracer`] it reports to, in `trace.rs`. Its
//! `# Safety` section is the contract every managed type meets; impls cover
//! the std types found in object payloads. The derive also enforces two
//! rules stated below: no plain `impl Drop` on a traced type, and
//! `#[trace(skip)]` only for `'static` fields (which cannot hold a `Gc<'gc, _>`).
//!
//! # Object model
//! An object is a header word (a `&'static TypeDesc`: size, payload offset,
//! trace and drop functions) followed by the payload, in `loam-heap`'s size-class
//! pages (large objects in spans of their own). The heap gives every page side
//! bitmaps (`loam_heap::PageRef`); the runtime needs two per page:
//! - an *allocated* bit, set when an object is allocated and cleared when the
//!   sweeper frees it. The sweeper cannot tell a dead object from a free block
//!   any other way: a free block's first word is the heap's free-list link, in
//!   the place of the header, and the owner's free lists are not readable from
//!   another thread. Objects allocated while a sweep is under way are
//!   allocated black (both bits set), so the sweeper leaves them alone;
//! - a *mark* bit, set by the marker with `fetch_or`. Marking never writes into
//!   objects a mutator may be using.
//!
//! The heap now offers one bitmap per page; it will grow a second (a third
//! header slice per segment, resident only where touched).
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
//!     never has to find a pointer it cannot see. A long computation is a loop
//!     of short `mutate` calls; each boundary is a safepoint poll (one relaxed
//!     load), so a loop that allocates for minutes never stalls a collection.
//!   - Values that live across safepoints are held by `Root<R>` (a slot in the
//!     mutator's root table, `!Send`) or `GlobalRoot<R>` (`Send + Sync`, a slot
//!     in the runtime's table), where `R: for<'a> Rootable<'a>` names the
//!     object type with its `'gc` abstracted (`Rootable!['gc => Node<'gc>]`);
//!     `root.get(mc)` gives back a `Gc<'gc, _>` for the current scope.
//!   - An unrooted pointer cannot reach another thread: `thread::spawn` needs
//!     `'static`, and `Gc<'gc, _>` is not. (Scoped threads inside one `mutate`
//!     may share it: the mutator cannot reach a safepoint until they end.)
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
//! # Collector (this issue: stop-the-world mark, concurrent sweep)
//! 1. A cycle starts when allocation since the last cycle exceeds
//!    `gc_percent` of the last live size (with a minimum heap), or on
//!    `collect()`.
//! 2. Running mutators stop at their next safepoint and hand over their roots;
//!    blocked mutators (`blocking(f)`, parked pool workers) do not stop: their
//!    roots are read by the collector, since they cannot touch the heap.
//! 3. Dedicated GC threads mark in parallel: crossbeam-deque work stealing,
//!    explicit mark stacks (a 10,000,000-node list must overflow nothing).
//! 4. Mutators resume; GC threads sweep each page (`allocated & !marked`),
//!    run the dead objects' drop glue, and send the blocks to their owners
//!    through `loam_heap::FreeBatch`.
//!
//! The next issue makes step 3 concurrent behind a snapshot barrier (the
//! barrier cells already carry it).

// Lets `#[derive(Trace)]`, whose output names `::loam_runtime`, be used inside
// this crate too.
extern crate self as loam_runtime;

mod trace;

pub use loam_derive::Trace;
#[doc(hidden)]
pub use trace::__private;
pub use trace::{Trace, Tracer};
