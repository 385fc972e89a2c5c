//! The collector tests (`cases/collector.rs`) over loam's own pages, with
//! stopped cycles: every mark begins and ends with the world stopped
//! (`collector_ragged.rs` runs the same cases with the default, ragged
//! handshakes).

mod support;

fn space(builder: loam_runtime::RuntimeBuilder) -> loam_runtime::RuntimeBuilder {
    builder.ragged_handshakes(false)
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

/// In loam's pages a cycle records what was allocated before its stop
/// after the pause, with the mutators running (the pages sealed at their
/// first allocation after the stop, `loam_heap::SealEpoch`); a full cycle
/// clears the marks before its stop, with the mutators running too. The
/// young lists that survive are intact: what the mutator allocated while
/// the walk ran was not swept.
#[test]
fn a_cycles_snapshot_is_taken_after_the_pause() {
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
                    .push((e.minor, e.snapshot_concurrent, e.mark_clear))
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
    assert!(events.iter().any(|e| !e.0), "a full cycle ran: {events:?}");
    assert!(
        events
            .iter()
            .all(|&(minor, concurrent, clear)| concurrent && minor == clear.is_zero()),
        "every cycle takes its snapshot after the pause, and full ones clear \
         the marks before their stop: {events:?}"
    );
    m.mutate(|mc| {
        assert_eq!(sum(Some(kept.get(mc))), (99 * 100 / 2, 100));
        for r in &young {
            assert_eq!(sum(Some(r.get(mc))).1, 4);
        }
    });
}

/// A full cycle clears the marks before its stop, with the mutators
/// running. A store into an old object meanwhile marks what it stores and
/// remembers it (for the next minor cycle to trace), so the stop must
/// clear those marks as well: a marked object is not traced, and what it
/// alone points to would be swept while reachable. One thread stores fresh
/// two-node chains into an old array of cells while another forces full
/// cycles; verify mode aborts on a reachable object left unmarked, and
/// the chains are read back. (With the stop's clear left out, the process
/// aborts within the first few cycles.)
#[test]
fn stores_while_a_full_cycle_clears_the_marks_keep_what_they_store() {
    type Slots = Rootable!['gc => [GcCell<'gc, Option<Gc<'gc, Node<'gc>>>>]];
    const SLOTS: usize = 4096;
    let drops = Arc::new(AtomicUsize::new(0));
    let cleared = Arc::new(AtomicUsize::new(0));
    let rt = {
        let cleared = cleared.clone();
        Runtime::builder()
            .gc_threads(2)
            .ignore_env()
            .verify(true)
            .on_cycle(move |e| {
                if !e.mark_clear.is_zero() {
                    cleared.fetch_add(1, Ordering::Relaxed);
                }
            })
            .build()
    };
    let mut m = rt.attach();
    let slots: Root<Slots> = m.mutate(|mc| mc.root(mc.alloc_slice_fill(SLOTS, GcCell::new(None))));
    m.collect(); // the array is old (marked) now
    let cycles = support::knob("LOAM_PRECLEAR_CYCLES", 40, 1);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..cycles {
                rt.collect();
            }
            done.store(true, Ordering::Relaxed);
        });
        let mut round = 0_u64;
        while !done.load(Ordering::Relaxed) {
            m.mutate(|mc| {
                let a = slots.get(mc);
                for k in 0..256_u64 {
                    let stamp = round * 256 + k;
                    let chain = list(mc, 2, &drops);
                    // Overwrite the tail's value through a fresh pair, so
                    // that the tail is reachable only through the head.
                    let head = mc.alloc(Node {
                        value: stamp,
                        next: GcCell::new(chain.next.get()),
                        _drops: Counted(drops.clone()),
                    });
                    a[stamp as usize % SLOTS].set(mc, Some(head));
                }
            });
            round += 1;
        }
    });
    assert!(
        cleared.load(Ordering::Relaxed) >= cycles,
        "every forced cycle cleared its marks before its stop"
    );
    m.collect();
    m.mutate(|mc| {
        for (i, slot) in slots.get(mc).iter().enumerate() {
            if let Some(head) = slot.get() {
                assert_eq!(head.value as usize % SLOTS, i);
                // The tail: value 1 of its list, its only path the head.
                assert_eq!(sum(Some(head)), (head.value + 1, 2));
            }
        }
    });
}

/// A pause budget of zero sends every mark past its roots to the
/// concurrent phase, and the stops that end a mark still trace: each
/// termination stop traces for 50 µs at least. (Its deadline had passed
/// before its first scan, so it handed everything back: seven stops that
/// traced nothing, then an unbounded one, in every cycle whose barriers
/// shaded something.) A mutator stores young objects into an old array
/// during the marks, so that their ends have shaded objects to trace.
#[test]
fn termination_stops_trace_with_a_zero_pause_budget() {
    let rt = space(Runtime::builder())
        .ignore_env()
        .gc_threads(2)
        .mark_pause_budget(std::time::Duration::ZERO)
        .min_heap(1 << 20)
        .build();
    let mut m = rt.attach();
    type Cells = Rootable!['gc => [GcCell<'gc, Option<Gc<'gc, u64>>>]];
    let cells: Root<Cells> = m.mutate(|mc| {
        let a = mc.alloc_from_iter((0..4096).map(|_| GcCell::new(None)));
        mc.root(a)
    });
    m.collect();
    let before = rt.stats();
    let mut x = 0x9e37_79b9_u64;
    for i in 0..3_000_u64 {
        m.mutate(|mc| {
            let a = cells.get(mc);
            for _ in 0..8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                a[(x % 4096) as usize].set(mc, Some(mc.alloc(i)));
            }
            for k in 0..256_u64 {
                mc.alloc([k; 8]);
            }
        });
    }
    let s = rt.stats();
    let cycles = s.cycles - before.cycles;
    let pauses = s.pauses.count() - before.pauses.count();
    assert!(
        cycles >= 10 && s.concurrent_cycles > before.concurrent_cycles,
        "{s:?}"
    );
    // A start and an end each (two a cycle here; an end preempted past
    // its 50 µs takes another, and a busy machine preempts often): nine a
    // cycle when the ends traced nothing (288 in 32 cycles, 278 in 34).
    assert!(
        pauses <= 6 * cycles,
        "{pauses} pauses in {cycles} cycles with a zero pause budget: {s:?}"
    );
}

/// Each mutator holds up to a chunk (64 KiB) of allocation credit, which
/// the heap counts as used: the goal's floor leaves room for it. With a
/// small minimum heap and many attached mutators the credit alone met the
/// goal, and every chunk one mutator took asked for a cycle (then, past
/// twice the goal, every call waited for one), with nothing live.
#[test]
fn many_mutators_credit_does_not_make_cycles_run_back_to_back() {
    let rt = space(Runtime::builder())
        .ignore_env()
        .gc_threads(1)
        .min_heap(256 << 10)
        .build();
    let idle = Arc::new(std::sync::Barrier::new(17));
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (rt, idle) = (rt.clone(), idle.clone());
            std::thread::spawn(move || {
                let mut m = rt.attach();
                // Takes a chunk of credit, and keeps it while it waits.
                m.mutate(|mc| *mc.alloc(1_u64));
                idle.wait();
                idle.wait();
            })
        })
        .collect();
    idle.wait();
    let mut m = rt.attach();
    let before = rt.stats().cycles;
    // 8 MiB of garbage, a KiB a call.
    for _ in 0..8192 {
        m.mutate(|mc| {
            mc.alloc([0_u64; 128]);
        });
    }
    let cycles = rt.stats().cycles - before;
    idle.wait();
    for t in threads {
        t.join().unwrap();
    }
    // Room for 17 chunks of credit above a goal of 256 KiB: a cycle every
    // 300 KiB or so of garbage, 6 - 27 of them in runs here (8,192, one a
    // call, without the room).
    assert!(
        cycles <= 64,
        "{cycles} cycles for 8 MiB of garbage with 16 idle mutators"
    );
}
