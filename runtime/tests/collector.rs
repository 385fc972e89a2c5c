//! The collector tests (`cases/collector.rs`) over loam's own pages.

fn space(builder: loam_runtime::RuntimeBuilder) -> loam_runtime::RuntimeBuilder {
    builder
}

/// Heap blocks: a 4104-byte object takes a 5120-byte one.
fn charged(bytes: usize, align: usize) -> usize {
    loam_heap::good_size(bytes, align)
}

#[test]
fn a_4104_byte_object_is_charged_a_5120_byte_block() {
    assert_eq!(charged(4104, 8), 5120);
}

/// What `Runtime::object_space` says.
const SPACE: &str = "loam pages";

include!("cases/collector.rs");

/// In loam's pages a minor cycle records what was allocated before its
/// stop after the pause, with the mutators running (the pages sealed at
/// their first allocation after the stop, `loam_heap::SealEpoch`); a full
/// cycle records it in the pause, where it clears the marks. The young
/// lists that survive are intact: what the mutator allocated while the
/// walk ran was not swept.
#[test]
fn a_minor_cycles_snapshot_is_taken_after_the_pause() {
    let drops = Arc::new(AtomicUsize::new(0));
    let events = Arc::new(Mutex::new(Vec::new()));
    let rt = {
        let events = events.clone();
        // Not verify mode: it takes the snapshot in the pause when the mark
        // ended there, to read it.
        Runtime::builder()
            .gc_threads(2)
            .ignore_env()
            .min_heap(256 << 10)
            .on_cycle(move |e| {
                events
                    .lock()
                    .unwrap()
                    .push((e.minor, e.snapshot_concurrent))
            })
            .build()
    };
    let mut m = rt.attach();
    let kept: Root<NodeRoot> = m.mutate(|mc| mc.root(list(mc, 100, &drops)));
    let mut young = Vec::new();
    for i in 0..4000_u64 {
        let r: Root<NodeRoot> = m.mutate(|mc| {
            for j in 0..8 {
                mc.alloc([i + j; 8]);
            }
            mc.root(list(mc, 4, &drops))
        });
        young.push(r);
        if young.len() > 32 {
            young.remove(0);
        }
    }
    m.collect();
    let events = events.lock().unwrap().clone();
    let minor = events.iter().filter(|e| e.0).count();
    assert!(minor >= 3, "{minor} minor cycles of {}", events.len());
    assert!(
        events
            .iter()
            .all(|&(minor, concurrent)| minor == concurrent),
        "minor cycles take the snapshot after the pause, full ones in it: {events:?}"
    );
    m.mutate(|mc| {
        assert_eq!(sum(Some(kept.get(mc))), (99 * 100 / 2, 100));
        for r in &young {
            assert_eq!(sum(Some(r.get(mc))).1, 4);
        }
    });
}
