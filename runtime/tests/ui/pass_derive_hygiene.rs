// The derive in the places a program puts it: inside a `macro_rules!` (the
// field types come from the macro's caller, the derive from its body), next
// to a type named like one the generated code uses (`bool`), and on a type whose parameter
// only a skipped field names (it needs no `Trace`).
#![allow(non_camel_case_types, non_upper_case_globals, dead_code)]
use loam_runtime::{Gc, Trace};

macro_rules! leaf {
    ($name:ident, $ty:ty) => {
        #[derive(Trace)]
        struct $name {
            value: $ty,
        }
    };
}
leaf!(Count, u64);

macro_rules! item {
    ($item:item) => {
        #[derive(Trace)]
        $item
    };
}
item!(struct Pair<'gc> { a: Gc<'gc, u32>, b: u32 });

mod shadowed {
    use loam_runtime::Trace;

    struct bool;

    #[derive(Trace)]
    pub struct Point {
        x: u32,
        y: u32,
    }
}

/// `Instant` is not `Trace`: the skipped field's parameter needs no bound.
#[derive(Trace)]
struct Tagged<M: 'static> {
    #[trace(skip)]
    meta: M,
    n: u32,
}

fn is_trace<T: Trace>() {}

fn main() {
    is_trace::<Count>();
    is_trace::<Pair<'static>>();
    is_trace::<shadowed::Point>();
    is_trace::<Tagged<std::time::Instant>>();
}
