//! loam-runtime: managed objects, sound rooting and the concurrent mark-sweep collector.
//!
//! Not yet built: issue #4 fills this crate. The plan is in the workspace's
//! DESIGN.md: objects are a header (a pointer to a static type descriptor)
//! before the payload, placed in `loam-heap`'s size-class pages with mark bits
//! in the heap's per-page side bitmaps; the collector marks on dedicated GC
//! threads and sweeps by handing dead blocks back to their owning thread's
//! remote queue (`loam_heap::FreeBatch`).
