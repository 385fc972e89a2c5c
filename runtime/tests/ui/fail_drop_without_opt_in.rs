// A traced type may not implement `Drop` unless it says `#[trace(unsafe_drop)]`.
use loam_runtime::Trace;

#[derive(Trace)]
struct Plain {
    value: u32,
}

impl Drop for Plain {
    fn drop(&mut self) {}
}

#[derive(Trace)]
struct Generic<'a, T> {
    items: Vec<T>,
    name: &'static str,
    _marker: std::marker::PhantomData<&'a ()>,
}

impl<'a, T> Drop for Generic<'a, T> {
    fn drop(&mut self) {}
}

fn main() {}
