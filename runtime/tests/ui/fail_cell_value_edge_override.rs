// The barrier takes a cell value's one object from `CellValue::__edge`
// without tracing it: an impl outside the crate that overrode it could
// hide the pointer it holds from the barrier. The argument's type cannot
// be named outside the crate (its module is private), so no impl can.
// (This checks the one path there is to it; a public re-export of the
// token would need a case of its own.)
use loam_runtime::{CellValue, Gc, Trace, Tracer};

#[derive(Clone, Copy)]
#[repr(transparent)]
struct Handle<'gc>(Gc<'gc, u64>);

// SAFETY: a transparent newtype of `Gc`.
unsafe impl CellValue for Handle<'_> {
    fn __edge(&self, _: loam_runtime::cell::sealed::Token) -> Option<usize> {
        Some(0)
    }
}

// SAFETY: reports the one pointer it holds.
unsafe impl Trace for Handle<'_> {
    fn trace(&self, tracer: &mut Tracer) {
        self.0.trace(tracer)
    }
}

fn main() {}
