//! What a mutator sees of the collector: every interval it is held, in
//! `GcStats::mutator_pauses`, `Mutator::pauses` and the cycle events; the
//! final statistics of a dropped runtime; waiting for a cycle under way.

use loam_runtime::{Root, Rootable, Runtime, Trace};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn builder() -> loam_runtime::RuntimeBuilder {
    Runtime::builder().ignore_env().gc_threads(1)
}

#[test]
fn a_wait_for_memory_at_the_heap_limit_is_a_hold() {
    let rt = builder().heap_limit(4 << 20).min_heap(1 << 20).build();
    let mut m = rt.attach();
    let failed = m.mutate(|mc| (0..100_000).any(|_| mc.try_alloc([0_u64; 128]).is_err()));
    assert!(failed, "4 MiB limit never reached");
    // The next call first collects, for memory: the mutator is held.
    m.mutate(|mc| {
        mc.alloc(1_u8);
    });
    let held = m.pauses();
    assert!(held.count() >= 1, "{held:?}");
    let s = rt.stats();
    assert!(s.held_for_memory > Duration::ZERO, "{s:?}");
    assert_eq!(s.mutator_pauses.count(), held.count());
    assert_eq!(
        s.held_at_safepoint
            + s.held_by_pacing
            + s.held_for_memory
            + s.held_assisting
            + s.held_for_drops,
        s.mutator_pauses.total()
    );
}

#[test]
fn a_collect_the_program_asks_for_is_not_a_hold() {
    let rt = builder().build();
    let mut m = rt.attach();
    for _ in 0..3 {
        m.mutate(|mc| {
            mc.alloc([0_u64; 16]);
        });
        m.collect();
    }
    assert_eq!(m.pauses().count(), 0);
    assert_eq!(rt.stats().mutator_pauses.count(), 0);
}

#[test]
fn the_holds_of_a_detached_mutator_stay_counted() {
    let rt = builder().heap_limit(4 << 20).min_heap(1 << 20).build();
    let t = {
        let rt = rt.clone();
        std::thread::spawn(move || {
            let mut m = rt.attach();
            m.mutate(|mc| while mc.try_alloc([0_u64; 128]).is_ok() {});
            m.mutate(|_| ());
            m.pauses().count()
        })
    };
    let held = t.join().unwrap();
    assert!(held >= 1);
    assert_eq!(rt.stats().mutator_pauses.count(), held);
}

#[derive(Trace)]
struct Counted {
    #[trace(skip)]
    _c: Bump,
}
struct Bump(Arc<AtomicUsize>);
impl Drop for Bump {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn the_final_stats_of_a_dropped_runtime_count_its_last_cycle() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = builder().build();
    let handle = rt.stats_handle();
    let mut m = rt.attach();
    let root: Root<Rootable![Counted]> = m.mutate(|mc| {
        for _ in 0..999 {
            mc.alloc(Counted {
                _c: Bump(drops.clone()),
            });
        }
        mc.root(mc.alloc(Counted {
            _c: Bump(drops.clone()),
        }))
    });
    rt.collect();
    let before = handle.get();
    assert!(!handle.is_final());
    assert_eq!(before.objects_freed, 999);
    drop((root, m, rt));
    let last = handle.wait_final();
    assert!(handle.is_final());
    assert_eq!(last.objects_freed, 1000, "the rooted object too");
    assert!(last.cycles > before.cycles, "the last cycle counted");
    assert_eq!(drops.load(Ordering::Relaxed), 1000, "every destructor ran");
    assert_eq!(handle.get().cycles, last.cycles);
}

#[test]
fn wait_for_cycle_waits_for_the_one_under_way_and_forces_none() {
    // Marks past their first pause, over a live array that takes them a
    // while: calls end with one under way.
    let rt = builder()
        .min_heap(1 << 20)
        .mark_pause_budget(Duration::ZERO)
        .build();
    let mut m = rt.attach();
    rt.wait_for_cycle();
    assert_eq!(rt.stats().cycles, 0, "no cycle was under way, none forced");
    let _live: Root<Rootable!['gc => [loam_runtime::Gc<'gc, u64>]]> = m.mutate(|mc| {
        let items: Vec<_> = (0..100_000_u64).map(|i| mc.alloc(i)).collect();
        mc.root(mc.alloc_slice(&items))
    });
    // Outgrow the goal: pacing asks for cycles; each wait returns with the
    // cycle it found under way or asked for done, and forces none.
    // At least 50 calls, and until three ended with a cycle under way.
    // (5,000 calls at most let one run in twelve beside a busy loop meet
    // none: descheduled in a call, the mutator found each cycle done.)
    let (mut waited, mut calls) = (0, 0);
    while calls < 50 || (waited < 3 && calls < 50_000) {
        calls += 1;
        let (under_way, seen) = m.mutate(|mc| {
            for _ in 0..1000 {
                mc.alloc([0_u64; 16]);
            }
            (
                mc.is_marking() || mc.collection_pending(),
                rt.stats().cycles,
            )
        });
        let before = rt.stats().cycles;
        rt.wait_for_cycle();
        let after = rt.stats().cycles;
        assert!(after <= before + 2, "{before} -> {after}");
        if under_way {
            // The cycle seen under way (or asked for) as the call ended
            // is done: the wait waited for it, if it had to.
            assert!(
                after > seen,
                "a cycle under way at {seen}, {after} after the wait"
            );
            waited += 1;
        }
    }
    assert!(
        waited > 0,
        "no call ended with a cycle under way: case not met"
    );
    assert!(rt.stats().cycles >= 1);
    let s = rt.stats();
    assert!(s.cycles < calls * 2, "{} cycles in {calls} calls", s.cycles);
}

#[test]
fn the_trace_line_names_the_cycle_and_what_mutators_saw() {
    let rt = builder().build();
    rt.collect();
    let e = rt.stats().last.unwrap();
    let line = e.to_string();
    assert!(line.starts_with("gc 1 full @"), "{line}");
    assert!(
        line.contains("(forced)") && line.contains("held 0x"),
        "{line}"
    );
}
