//! loam: a garbage-collected managed runtime for Rust with its own scalable heap.
//!
//! This facade re-exports the workspace's crates so an application depends on
//! one package:
//!
//! - [`heap`] (`loam-heap`): the scalable size-class allocator, usable alone as
//!   a `#[global_allocator]` ([`heap::LoamAlloc`]).
//! - [`threadpool`] (`loam-threadpool`): the work-stealing pool whose workers
//!   are the runtime's mutators.
//! - [`runtime`] (`loam-runtime`): managed objects and the collector.
//! - [`collections`] (`loam-collections`): managed strings, lists, dictionaries.
//!
//! The examples (`examples/`) reproduce the seed benchmarks; each crate's
//! `tests/` holds its integration and torture tests; `benches/` the
//! criterion benches.

pub use loam_collections as collections;
pub use loam_heap as heap;
pub use loam_runtime as runtime;
pub use loam_threadpool as threadpool;

/// The README's Rust examples, compiled and run as doctests, so that what
/// users copy from it works.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;
