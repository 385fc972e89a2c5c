// A `GcLog` of runtime A cannot be recorded through runtime B's `Mutation`
// (a scoped thread of A's call attached to B): B's barrier would record A's
// object in B's remembered list, and A's next minor cycle would miss what
// the stores after the record put in it. The log carries A's brand.
use loam_runtime::{GcLog, Runtime, Trace};

#[derive(Trace)]
struct Obj<'gc> {
    log: GcLog<'gc>,
}

fn main() {
    let (a, b) = (Runtime::new(), Runtime::new());
    let mut ma = a.attach();
    ma.mutate(|mc| {
        let obj = mc.alloc(Obj { log: GcLog::new() });
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut mb = b.attach();
                mb.mutate(|mcb| obj.log.record(mcb));
            });
        });
    });
}
