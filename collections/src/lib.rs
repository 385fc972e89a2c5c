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
//! allocate-here, free-there pattern of the seeds' framework. A string is
//! one allocation (length, cached hash, bytes).
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
//! - Every slot of a backing array holds a valid value: the elements in
//!   use, then copies of element 0 (or of the value the array was grown
//!   for). Slots freed by a removal are overwritten so that they keep
//!   nothing alive; a collection that becomes empty drops its arrays. (A
//!   managed array's elements are always initialised and always traced.)
//! - Every change takes the collection's writer lock (`lock.rs`), allocates
//!   first and changes state after, so a heap-limit `Err` from a `try_`
//!   method leaves the collection as it was.
//!
//! # Reads and writes from several threads
//! Collections are `Send + Sync` like every managed value, and may be
//! shared through a `GlobalRoot`. Writes from several threads are
//! serialised by the writer lock; each operation lands whole. Reads take no
//! lock: a read racing another thread's write loads each cell atomically
//! and sees values that were in the collection during its `mutate` call
//! (the collector frees nothing a running call could still reach), so it
//! is memory-safe, but not a snapshot (a `len` and an element may come from
//! either side of the write). Synchronise the threads yourself when a read
//! must see a write whole.
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

mod builder;
mod dictionary;
mod list;
mod lock;
mod string;

pub use builder::GcStringBuilder;
pub use dictionary::{
    DictEntry, FastHash, GcDictionary, Iter as DictIter, OccupiedEntry, SipHash, VacantEntry,
};
pub use list::{GcList, Iter as ListIter};
pub use string::GcString;
