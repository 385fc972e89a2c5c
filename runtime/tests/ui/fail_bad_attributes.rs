// Misplaced or unknown `#[trace(...)]` options, and unions.
use loam_runtime::Trace;

#[derive(Trace)]
#[trace(skip)]
struct SkipOnType(u8);

#[derive(Trace)]
struct DropOnField(#[trace(unsafe_drop)] u8);

#[derive(Trace)]
struct Unknown {
    #[trace(ignore)]
    value: u8,
}

#[derive(Trace)]
enum OnVariant {
    #[trace(skip)]
    A(u8),
}

#[derive(Trace)]
union Bits {
    int: u32,
    float: f32,
}

fn main() {}
