// `#[trace(skip)]` needs a `'static` field type: one that mentions a lifetime
// (as `Gc<'gc, T>` does) could hold a managed pointer.
use loam_runtime::Trace;

#[derive(Trace)]
struct Borrowing<'gc> {
    #[trace(skip)]
    target: &'gc u32,
}

#[derive(Trace)]
struct Generic<T> {
    #[trace(skip)]
    value: T,
}

fn main() {}
