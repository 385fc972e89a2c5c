// A packed type cannot derive `Trace`: tracing takes a reference to each
// field. The error says so at the attribute.
use loam_runtime::Trace;

#[derive(Trace)]
#[repr(C, packed)]
struct Header {
    tag: u8,
    len: u32,
}

fn main() {}
