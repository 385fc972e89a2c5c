//! loam-threadpool: the work-stealing pool whose workers are the runtime's mutators.
//!
//! Not yet built: issue #3 fills this crate (crossbeam-deque worker deques, a
//! global injector, random-victim stealing, parking without spinning, and the
//! safepoint and parking hooks the runtime needs).
