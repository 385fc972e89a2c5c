//! loam-heap: placeholder until the heap lands.

/// The global allocator (placeholder: the real one lands with issue #2).
#[derive(Debug, Clone, Copy, Default)]
pub struct LoamAlloc;
