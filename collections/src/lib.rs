//! loam-collections: managed-heap collections for loam. [`GcString`],
//! [`GcStringBuilder`], [`GcList`] and [`GcDictionary`].
//!
//! # What they are
//! Each collection is a handle (`Copy`, one word) to a small managed object
//! whose state is in barrier cells, and which points, through a cell, to
//! managed arrays (`Gc<'gc, [T]>`): a list's elements, a dictionary's
//! entries and index, a builder's bytes. Growth allocates a new array and
//! leaves the old one to the collector, which frees it on its own threads
//! and returns the memory to the thread that allocated it: the
//! allocate-here, free-there pattern of the seeds' framework (a list's
//! array past 1 MiB lengthens in place instead, into room it was made
//! with: `Mutation::try_grow_in_place`). A string is one allocation
//! (length, cached hash, bytes).
//!
//! The crate uses only `loam-runtime`'s public API (never `loam-heap`): it
//! is also the example of how to write a managed collection of your own
//! (`examples/custom_collection.rs` writes one from scratch).
//!
//! # Elements
//! Elements, keys and values are [`CellValue`](loam_runtime::CellValue)s:
//! values one word wide that a barrier cell stores atomically: `Gc<'gc, R>`
//! for a record of any size, the collections' own handles (a `GcString`, a
//! `GcList` of lists), `Option<Gc<..>>`, and the primitives. Every store
//! goes through the write barrier in O(1), so a large old collection
//! changed in place keeps the collector's cycles minor.
//!
//! # Invariants
//! - A collection's object traces the elements in use and nothing past
//!   them: the backing arrays' slots report nothing themselves (`list.rs`,
//!   "What the collector sees"). A slot past the length may hold a value
//!   the collector has freed; it is never read as an element, and the
//!   store that brings it back into use does not shade what it overwrites
//!   (`GcCell::set_unreported`).
//! - Elements cut off the end during a concurrent mark get the deletion
//!   barrier (`GcCell::cut`), which shades them for the mark's snapshot
//!   unless they were allocated after the mark's stop.
//! - Every change takes the collection's writer lock (`lock.rs`), allocates
//!   first and changes state after, so a heap-limit `Err` from a `try_`
//!   method leaves the collection as it was.
//! - Readers load the length before the arrays: every value a reader can
//!   see was an element after that load, so within its `mutate` call.
//!
//! # Reads and writes from several threads
//! Collections are `Send + Sync` like every managed value, and may be
//! shared through a `GlobalRoot`. Writes from several threads are
//! serialised by the writer lock; each operation lands whole. Reads take no
//! lock. A read racing another thread's write loads each cell atomically
//! and only ever sees values that were elements during its `mutate` call
//! (the collector frees nothing such a call could still reach), so it is
//! memory-safe. A dictionary lookup is also exact: removals, which move
//! entries, bracket their moves with a counter that lookups check, and
//! look again across (a seqlock on moves alone), so a lookup never returns
//! another key's value nor misses a key that stays present. Other reads
//! are not snapshots: a list's `len` and an element, or an iteration, may
//! come from either side of a concurrent write. Synchronise the threads
//! yourself when such a read must see a write whole.
//!
//! A callback runs under its collection's writer lock (a `sort_by`
//! comparator, a `retain` predicate, a key's `Hash` or `Eq` impl during an
//! insert). One that changes its own collection panics; one that changes
//! another collection takes that one's lock too, so two threads doing it
//! in opposite orders (a callback of `a` writing `b` on one thread, of `b`
//! writing `a` on the other) wait for each other for good, as with any two
//! locks taken in opposite orders. Write other collections after the call
//! that runs the callback returns.
//!
//! # Minor cycles
//! A collection's object carries a `GcLog`: a change records the object
//! once per cycle, and its stores skip the generational barrier
//! (`GcCell::set_recorded`), so nothing stored into a collection is
//! promoted by it: the elements of a collection made and dropped between
//! two cycles die young. A change also touches the card of each slot it
//! writes (`loam_runtime::GcCards`: 52 cards, scaled to the capacity), so
//! a long old collection changed in place costs the next minor cycle a
//! retrace of the changed cards only (a list of a million `Gc`s: 1/32 of
//! it a changed card).
//!
//! # Long collections and the mark
//! A list or dictionary of more than 512 elements is traced in parts
//! (`Trace::TRACE_IN_PARTS`): its own fields, then 256 elements a part
//! (parts grow past a million elements, to 32,768 elements past 130
//! million),
//! each part a step of the mark that any GC thread or mark assist takes
//! and that the mark's deadlines and slices fall between, as they do
//! between chunks of a long managed array. Each part reads the collection
//! as it is then; every change in the meantime goes through the
//! collection's log and barriers, which shade what a store overwrites, a
//! cut removes or a move relocates once a marker has met the collection,
//! so no element is missed. (A rooted list of four million `Gc`s, changed
//! once a call, `cargo run --release --example long_list -- 4000000`:
//! traced whole, as one step, it held the mutator up to 25 ms, p99 20 ms;
//! in parts, 4 ms, p99 0.02 ms.)
//!
//! # Example
//! ```
//! use loam_collections::{gc_format, GcDictionary, GcList, GcString};
//! use loam_runtime::{Gc, Root, Rootable, Runtime, Trace};
//!
//! #[derive(Trace)]
//! struct Record {
//!     key: u64,
//!     index: i32,
//! }
//!
//! let rt = Runtime::builder().gc_threads(1).build();
//! let mut m = rt.attach();
//! // A list rooted across calls (and so across collections).
//! let list: Root<Rootable!['gc => GcList<'gc, Gc<'gc, Record>>]> = m.mutate(|mc| {
//!     let list = GcList::new(mc);
//!     for i in 0..100 {
//!         list.push(mc, mc.alloc(Record { key: (i * 37) % 100, index: i as i32 }));
//!     }
//!     mc.root(mc.alloc(list))
//! });
//! m.collect();
//! m.mutate(|mc| {
//!     let list = *list.get(mc);
//!     list.sort_by_key(mc, |r| r.key);
//!     assert!(list.iter().zip(list.iter().skip(1)).all(|(a, b)| a.key <= b.key));
//!     let names = GcDictionary::new(mc);
//!     for r in list.iter().take(3) {
//!         names.insert(mc, gc_format!(mc, "r{}", r.index), r.key);
//!     }
//!     assert_eq!(names.get("r0"), Some(0));
//! });
//! ```

// Under `--cfg loom` the crate is reduced to its models and what they use
// (`not_under_loom!`): the rest of what those modules hold is dead there.
#![cfg_attr(loom, allow(dead_code))]

/// Items compiled only outside loom: under `--cfg loom` (where
/// `loam-runtime` is reduced to its own models) the crate is the writer
/// lock and its model.
macro_rules! not_under_loom {
    ($($item:item)*) => { $(#[cfg(not(loom))] $item)* };
}

#[cfg(all(test, loom))]
mod dictionary_model;
#[cfg(all(test, loom))]
mod list_model;
mod lock;

not_under_loom! {
    mod builder;
    mod dictionary;
    mod list;
    mod string;

    pub use builder::GcStringBuilder;
    pub use dictionary::{
        DictEntry, FastHash, GcDictionary, Iter as DictIter, OccupiedEntry, SipHash, VacantEntry,
    };
    pub use list::{GcList, Iter as ListIter, ListWriter};
    pub use string::GcString;
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::mem::needs_drop;

    /// The collections' objects and arrays have no drop glue (with
    /// `u64` and managed values), so the sweep frees them without running
    /// any: a dictionary's entries array needed it per entry while a
    /// `GcCell` had `AtomicCell`'s `Drop` impl.
    #[test]
    fn collection_objects_need_no_drop() {
        type G = loam_runtime::Gc<'static, u64>;
        assert!(!needs_drop::<crate::list::ListObj<'static, u64>>());
        assert!(!needs_drop::<crate::list::ListObj<'static, G>>());
        assert!(!needs_drop::<crate::list::Slot<'static, G>>());
        assert!(!needs_drop::<
            crate::dictionary::DictObj<'static, u64, G, crate::FastHash>,
        >());
        assert!(!needs_drop::<crate::dictionary::Entry<'static, G, G>>());
        assert!(!needs_drop::<crate::builder::BuilderObj<'static>>());
    }
}
