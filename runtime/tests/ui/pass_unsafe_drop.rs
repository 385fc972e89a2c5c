// `#[trace(unsafe_drop)]` with an `unsafe impl UnsafeDrop` allows a
// destructor (which must not dereference a managed pointer), generics
// included.
use loam_runtime::{Trace, UnsafeDrop};

#[derive(Trace)]
#[trace(unsafe_drop)]
struct Plain {
    value: u32,
}

// SAFETY: the destructor touches only the plain field.
unsafe impl UnsafeDrop for Plain {}

impl Drop for Plain {
    fn drop(&mut self) {
        self.value = 0;
    }
}

#[derive(Trace)]
#[trace(unsafe_drop)]
enum Generic<'a, T: Clone> {
    Items(Vec<T>),
    Borrowed(std::marker::PhantomData<&'a ()>),
}

// SAFETY: the destructor does nothing.
unsafe impl<'a, T: Clone> UnsafeDrop for Generic<'a, T> {}

impl<'a, T: Clone> Drop for Generic<'a, T> {
    fn drop(&mut self) {}
}

fn assert_trace<T: Trace>() {}

fn main() {
    assert_trace::<Plain>();
    assert_trace::<Generic<'_, u8>>();
    drop(Plain { value: 1 });
}
