//! The collector tests (`cases/collector.rs`) over mimalloc as the object
//! space.

fn space(builder: loam_runtime::RuntimeBuilder) -> loam_runtime::RuntimeBuilder {
    builder.global_alloc(mimalloc::MiMalloc)
}

/// The allocation and its 16-byte prefix.
fn charged(bytes: usize, _align: usize) -> usize {
    bytes + 16
}

/// What `Runtime::object_space` says.
const SPACE: &str = "mimalloc::MiMalloc";

include!("cases/collector.rs");
