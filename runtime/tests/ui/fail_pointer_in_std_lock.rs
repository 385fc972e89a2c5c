// Nor can a std lock or cell stand in for the barrier cell: a `Mutex` of a
// non-'static value and a `Cell` are not `Trace`.
use loam_runtime::{Gc, Trace};
use std::cell::Cell;
use std::sync::Mutex;

#[derive(Trace)]
struct ViaMutex<'gc> {
    next: Mutex<Option<Gc<'gc, u32>>>,
}

#[derive(Trace)]
struct ViaCell<'gc> {
    next: Cell<Option<Gc<'gc, u32>>>,
}

fn main() {}
