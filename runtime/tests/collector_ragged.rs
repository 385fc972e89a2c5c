//! The collector tests (`cases/collector.rs`) over loam's own pages, with
//! ragged handshakes: paced cycles begin and end their marks without
//! stopping the world (`RuntimeBuilder::ragged_handshakes`).

fn space(builder: loam_runtime::RuntimeBuilder) -> loam_runtime::RuntimeBuilder {
    builder.ragged_handshakes(true)
}

/// Heap blocks: a 4104-byte object takes a 5120-byte one.
fn charged(bytes: usize, align: usize) -> usize {
    loam_heap::good_size(bytes, align)
}

/// What `Runtime::object_space` says.
const SPACE: &str = "loam pages";

include!("cases/collector.rs");
