// Objects are dropped on the runtime's finalizer thread: a field that must
// stay on its thread (`Send` missing: a `MutexGuard`, which would be
// unlocked there) keeps the type from being `Trace`, even skipped.
use loam_runtime::{Runtime, Trace};

static M: std::sync::Mutex<u8> = std::sync::Mutex::new(0);

#[derive(Trace)]
struct Guarded {
    #[trace(skip)]
    guard: std::sync::MutexGuard<'static, u8>,
}

fn main() {
    let rt = Runtime::new();
    let mut m = rt.attach();
    m.mutate(|mc| {
        mc.alloc(Guarded { guard: M.lock().unwrap() });
    });
}
