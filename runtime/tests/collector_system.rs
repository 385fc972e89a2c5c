//! The collector tests (`cases/collector.rs`) over the system allocator as
//! the object space.

fn space(builder: loam_runtime::RuntimeBuilder) -> loam_runtime::RuntimeBuilder {
    builder.global_alloc(std::alloc::System)
}

/// The allocation and its 16-byte prefix.
fn charged(bytes: usize, _align: usize) -> usize {
    bytes + 16
}

/// What `Runtime::object_space` says.
const SPACE: &str = "std::alloc::System";

include!("cases/collector.rs");
