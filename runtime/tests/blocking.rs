//! `Mutator::blocking` first gives back the memory the collector freed into
//! this thread's heap, which only this thread can take back. Its own
//! process: the heap's figures are the whole process's.

use loam_runtime::Runtime;

const MIB: u64 = 1 << 20;

#[test]
fn blocking_gives_back_what_the_sweeps_freed_for_this_thread() {
    let rt = Runtime::builder().ignore_env().gc_threads(1).build();
    let mut m = rt.attach();
    // About 40 MiB of garbage in this thread's pages (a header word and
    // 32 bytes an object). This binary's one test: the heap's figures are
    // the process's.
    m.mutate(|mc| {
        for i in 0..(1_u64 << 20) {
            mc.alloc([i; 4]);
        }
    });
    // Its sweep sends the pages' dead blocks back to this thread as page
    // runs; they stay committed here until this thread deals with them.
    rt.collect();
    let before = loam_heap::stats().committed_bytes;
    let during = m.blocking(|| loam_heap::stats().committed_bytes);
    assert!(
        before >= during + 24 * MIB,
        "committed {} MiB before, {} MiB inside blocking",
        before / MIB,
        during / MIB
    );
    // The mutator goes on as before.
    let sum = m.mutate(|mc| *mc.alloc(20_u64) + 22);
    assert_eq!(sum, 42);
}
