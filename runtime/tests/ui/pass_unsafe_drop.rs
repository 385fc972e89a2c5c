// `#[trace(unsafe_drop)]` allows a destructor (which must not dereference a
// managed pointer), generics included.
use loam_runtime::Trace;

#[derive(Trace)]
#[trace(unsafe_drop)]
struct Plain {
    value: u32,
}

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

impl<'a, T: Clone> Drop for Generic<'a, T> {
    fn drop(&mut self) {}
}

fn assert_trace<T: Trace>() {}

fn main() {
    assert_trace::<Plain>();
    assert_trace::<Generic<'_, u8>>();
    drop(Plain { value: 1 });
}
