//! The collector tests (`cases/collector.rs`) over loam's own pages.

fn space(builder: loam_runtime::RuntimeBuilder) -> loam_runtime::RuntimeBuilder {
    builder
}

/// Heap blocks: a 4104-byte object takes a 5120-byte one.
fn charged(bytes: usize, align: usize) -> usize {
    loam_heap::good_size(bytes, align)
}

#[test]
fn a_4104_byte_object_is_charged_a_5120_byte_block() {
    assert_eq!(charged(4104, 8), 5120);
}

/// What `Runtime::object_space` says.
const SPACE: &str = "loam pages";

include!("cases/collector.rs");
