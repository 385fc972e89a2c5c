// `#[trace(unsafe_drop)]` alone takes no `unsafe` keyword: without an
// `unsafe impl UnsafeDrop` for the type, the derive's `Trace` does not hold
// (here the destructor reads through a `Gc`, which a sweep may have freed).
use loam_runtime::{Gc, Trace};

#[derive(Trace)]
#[trace(unsafe_drop)]
struct Reads<'gc> {
    next: Option<Gc<'gc, u64>>,
}

impl Drop for Reads<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.next {
            println!("{}", *n);
        }
    }
}

#[derive(Trace)]
#[trace(unsafe_drop)]
struct Plain {
    value: u32,
}

impl Drop for Plain {
    fn drop(&mut self) {}
}

#[derive(Trace)]
#[trace(unsafe_drop)]
struct Generic<T> {
    items: Vec<T>,
}

impl<T> Drop for Generic<T> {
    fn drop(&mut self) {}
}

fn assert_trace<T: Trace>() {}

fn each<'gc>() {
    assert_trace::<Reads<'gc>>();
    assert_trace::<Generic<u8>>();
}

fn main() {
    each();
}
