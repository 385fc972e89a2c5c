// Every traced field's type must implement `Trace`.
use loam_runtime::Trace;

struct Opaque;

#[derive(Trace)]
struct Holder {
    fine: Vec<u8>,
    opaque: Opaque,
}

#[derive(Trace)]
enum Either {
    Left(u8),
    Right { opaque: Option<Opaque> },
}

fn main() {}
