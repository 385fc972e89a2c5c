//! `Mutator::blocking` first gives up the memory the collector freed into
//! this thread's heap, which only this thread could otherwise reuse: its
//! wholly free segments go to the heap's process-wide cache, where another
//! thread takes them before it maps new memory, and the collector gives
//! back to the OS what nobody takes. Its own process, and one test: the
//! heap's figures are the whole process's.

use loam_runtime::Runtime;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// About 40 MiB of garbage in the calling thread's pages (a header word
/// and 32 bytes an object), swept: its sweep sends the pages' dead blocks
/// back to this thread as page runs, which stay here until this thread
/// deals with them.
fn garbage_here(rt: &Runtime, m: &mut loam_runtime::Mutator) {
    m.mutate(|mc| {
        for i in 0..(1_u64 << 20) {
            mc.alloc([i; 4]);
        }
    });
    rt.collect();
}

#[test]
fn blocking_gives_what_the_sweeps_freed_here_to_the_other_threads() {
    let rt = Runtime::builder().ignore_env().gc_threads(1).build();
    let mut m = rt.attach();

    // Another thread that needs memory while this one waits takes it. An
    // hour's purge delay: nothing goes back to the OS meanwhile, however
    // slowly the other thread runs.
    loam_heap::set_purge_delay(Duration::from_secs(3600));
    garbage_here(&rt, &mut m);
    let mapped_before = loam_heap::stats().segments_mapped_total;
    let (cached, mapped) = m.blocking(|| {
        let cached = loam_heap::stats().segment_cached_bytes;
        let rt = rt.clone();
        std::thread::spawn(move || {
            // About 24 MiB, live until the call ends.
            let mut w = rt.attach();
            w.mutate(|mc| {
                for i in 0..600_000_u64 {
                    mc.alloc([i; 4]);
                }
            });
        })
        .join()
        .unwrap();
        (cached, loam_heap::stats().segments_mapped_total)
    });
    assert!(
        cached >= 24 * MIB,
        "blocking gave up {} MiB of whole segments",
        cached / MIB
    );
    assert!(
        mapped <= mapped_before + 1,
        "the other thread mapped {} segments with {} MiB given up",
        mapped - mapped_before,
        cached / MIB
    );

    // With nobody to take it, it goes back to the OS: the collector gives
    // back what has waited ten purge delays, at most a second, after each
    // cycle. No deadline: the wait is a lower bound (a sleep never ends
    // early), and the second collection cannot begin before the
    // coordinator has trimmed after the first.
    loam_heap::set_purge_delay(Duration::from_millis(10));
    garbage_here(&rt, &mut m);
    let before = loam_heap::stats().committed_bytes;
    let (cached, during) = m.blocking(|| {
        let cached = loam_heap::stats().segment_cached_bytes;
        std::thread::sleep(Duration::from_millis(1200));
        rt.collect();
        rt.collect();
        let s = loam_heap::stats();
        assert_eq!(
            s.segment_cached_bytes / MIB,
            0,
            "MiB still cached 1.2 s and two cycles after the hand-over"
        );
        (cached, s.committed_bytes)
    });
    assert!(
        cached >= 24 * MIB,
        "blocking gave up {} MiB of whole segments",
        cached / MIB
    );
    assert!(
        before >= during + 24 * MIB,
        "committed {} MiB before, {} MiB once the cache was given back",
        before / MIB,
        during / MIB
    );
    // The mutator goes on as before.
    let sum = m.mutate(|mc| *mc.alloc(20_u64) + 22);
    assert_eq!(sum, 42);
}
