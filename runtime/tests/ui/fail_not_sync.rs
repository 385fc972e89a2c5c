// Managed objects are `Send + Sync`: `Cell` and `RefCell` cannot be in one,
// traced or skipped (use the runtime's barrier cells).
use loam_runtime::Trace;
use std::cell::{Cell, RefCell};

#[derive(Trace)]
struct Counter {
    #[trace(skip)]
    hits: Cell<i32>,
}

#[derive(Trace)]
struct Buffer {
    bytes: RefCell<Vec<u8>>,
}

fn main() {}
