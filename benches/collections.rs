//! The managed collections against their std counterparts, same run:
//! `GcList` against `Vec`, `GcDictionary` against `HashMap` (SipHash, and
//! the same fast hasher, foldhash), `GcStringBuilder`/`GcString` against
//! `String`. Allocation and collection are part of the time: every case
//! makes its objects inside the timed region and leaves them to the
//! collector (std frees them as it goes); in the paired rounds a loam run
//! ends when the cycles it started have swept (`Runtime::wait_for_cycle`),
//! so that no collection of its garbage runs in its peer's time.
//!
//! The cases:
//! - `push_iter`: push 1,000,000 `u64`, then iterate and sum;
//! - `writer_push`: the same pushes through one `GcList::writer` (the
//!   list's writer lock taken once, not per push);
//! - `extend_iter`: one `extend` of 1,000,000, against `Vec::extend`;
//! - `refill`: clear a list kept across rounds and push 1,000,000 `u64`
//!   into it one `push` at a time, then sum (its array is reused: no
//!   growth, no fresh memory), against a kept `Vec`;
//! - `random_get`: 1,000,000 random reads of a 1,000,000-element list;
//! - `sort_records`: allocate 100,000 records {u64 key, i32 index, i32 tag}
//!   (managed `Gc`s against `Box`es), push them, sort by key (stable);
//! - `dict`: insert 1,000,000 string keys of the form `k<i>_<hex>`, look
//!   each up, remove each (keys made as `GcString`s against `String`s);
//!   `chained` is the dictionary's other candidate shape, .NET's buckets
//!   with chained entries, prototyped here on the same API (`mod chained`);
//! - `old_locks`: 200,000 writes through the `GcLock`s of a 100,000-bucket
//!   structure made old before the case (the oldest item of a random bucket
//!   out, a fresh one in, in calls of 1,000), against `Vec`s of `Box`es: the
//!   cycles the writes start must stay minor;
//! - `strings`: 1,000 times, build a string of 200 pieces `item<i>=<n>;`,
//!   split it on `;` and each piece on `=` (into managed strings against
//!   `String`s), join each value and name again (`GcString::concat`
//!   against `str`'s `concat`, one allocation each), compare each name
//!   with the previous;
//! - `dict_get` (last: its tables stay live): look up each of the `dict`
//!   keys once, in a fixed shuffled order, in a rooted dictionary built in
//!   the case's warm-up, against `HashMap`s with SipHash and with foldhash
//!   built the same way: the look-ups alone, which `dict` times together
//!   with inserts and removals.
//!
//! Run: `cargo bench --bench collections` (criterion), or
//! `LOAM_BENCH_PAIRED=<rounds> cargo bench --bench collections` for
//! interleaved rounds (loam and std alternating, which goes first rotating)
//! with the median of per-round ratios and each case's minor and full
//! cycle counts, the figures the README quotes. `LOAM_BENCH_CASES=dict,sort_records`
//! runs some cases only. std runs on mimalloc, or on the system's
//! allocator with `--features bench-std-system` ([`GLOBAL`]).

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

#[path = "support/mod.rs"]
mod support;

use support::median;

use criterion::{criterion_group, Criterion};
use loam::collections::{GcDictionary, GcList, GcString, GcStringBuilder};
use loam::runtime::{Gc, Mutator, Root, Rootable, Runtime, Trace};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

/// The process's global allocator: mimalloc, or the system's (glibc's)
/// with the `bench-std-system` feature (`cargo bench --bench collections
/// --features bench-std-system`), a program's default. It serves std's
/// side, the bench's own buffers and loam's own Rust allocations (the
/// collector's scratch, a builder's formatting), not the managed objects,
/// which live in loam's pages. The two differ most on the push loop:
/// glibc grows a large block in place (with `mremap` while it is a
/// mapping of its own; at the top of its heap once a freed one has raised
/// its mmap threshold) where mimalloc copies it, so `Vec`'s million
/// pushes take about two thirds of the time (README, "Collections"). A
/// feature, not a variable read at run time: a global allocator that
/// chose between the two on every call (one load and a branch, inlined)
/// made the `GcLock` case's `Vec`s of `Box`es take 29 – 30 ms against 18
/// – 19.5 with mimalloc alone, for a reason not found.
#[cfg(not(feature = "bench-std-system"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(feature = "bench-std-system")]
#[global_allocator]
static GLOBAL: std::alloc::System = std::alloc::System;

/// What the paired table's header says std runs on.
const STD_ON: &str = if cfg!(feature = "bench-std-system") {
    "the system's allocator (feature bench-std-system)"
} else {
    "mimalloc"
};

const PUSHES: u64 = 1_000_000;
const GETS: usize = 1_000_000;
const RECORDS: u64 = 100_000;
const KEYS: usize = 1_000_000;
const STRINGS: usize = 1_000;
const PIECES: usize = 200;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

// ---- push_iter

fn std_push_iter() -> u64 {
    let mut v = Vec::new();
    for i in 0..PUSHES {
        v.push(i);
    }
    v.iter().sum()
}

fn loam_push_iter(m: &mut Mutator) -> u64 {
    m.mutate(|mc| {
        let l = GcList::new(mc);
        for i in 0..PUSHES {
            l.push(mc, i);
        }
        l.iter().sum()
    })
}

fn loam_writer_iter(m: &mut Mutator) -> u64 {
    m.mutate(|mc| {
        let l = GcList::new(mc);
        let w = l.writer(mc);
        for i in 0..PUSHES {
            w.push(i);
        }
        drop(w);
        l.iter().sum()
    })
}

fn loam_refill(m: &mut Mutator, list: &Root<U64List>) -> u64 {
    m.mutate(|mc| {
        let l = *list.get(mc);
        l.clear(mc);
        for i in 0..PUSHES {
            l.push(mc, i);
        }
        l.iter().sum()
    })
}

fn std_refill(v: &mut Vec<u64>) -> u64 {
    v.clear();
    for i in 0..PUSHES {
        v.push(i);
    }
    v.iter().sum()
}

fn std_extend_iter() -> u64 {
    let mut v = Vec::new();
    v.extend(0..PUSHES);
    v.iter().sum()
}

fn loam_extend_iter(m: &mut Mutator) -> u64 {
    m.mutate(|mc| {
        let l = GcList::new(mc);
        l.extend(mc, 0..PUSHES);
        l.iter().sum()
    })
}

// ---- random_get

type U64List = Rootable!['gc => GcList<'gc, u64>];

fn std_random_get(v: &[u64]) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15;
    let mut sum = 0_u64;
    for _ in 0..GETS {
        sum = sum.wrapping_add(v[(xorshift(&mut x) % v.len() as u64) as usize]);
    }
    sum
}

fn loam_random_get(m: &mut Mutator, list: &Root<U64List>) -> u64 {
    m.mutate(|mc| {
        let l = *list.get(mc);
        let n = l.len() as u64;
        let mut x = 0x9e37_79b9_7f4a_7c15;
        let mut sum = 0_u64;
        for _ in 0..GETS {
            sum = sum.wrapping_add(l.at((xorshift(&mut x) % n) as usize));
        }
        sum
    })
}

// ---- sort_records

#[derive(Trace)]
struct Record {
    key: u64,
    index: i32,
    tag: i32,
}

fn std_sort_records() -> u64 {
    let mut x = 0x2545_f491_4f6c_dd1d;
    let mut v: Vec<Box<Record>> = Vec::new();
    for i in 0..RECORDS {
        v.push(Box::new(Record {
            key: xorshift(&mut x) % 1_000_000,
            index: i as i32,
            tag: (i % 7) as i32,
        }));
    }
    v.sort_by_key(|r| r.key);
    v.iter()
        .enumerate()
        .map(|(i, r)| r.key ^ (i as u64) ^ r.index as u64 ^ r.tag as u64)
        .fold(0, u64::wrapping_add)
}

fn loam_sort_records(m: &mut Mutator) -> u64 {
    m.mutate(|mc| {
        let mut x = 0x2545_f491_4f6c_dd1d;
        let l: GcList<Gc<Record>> = GcList::new(mc);
        for i in 0..RECORDS {
            l.push(
                mc,
                mc.alloc(Record {
                    key: xorshift(&mut x) % 1_000_000,
                    index: i as i32,
                    tag: (i % 7) as i32,
                }),
            );
        }
        l.sort_by_key(mc, |r| r.key);
        l.iter()
            .enumerate()
            .map(|(i, r)| r.key ^ (i as u64) ^ r.index as u64 ^ r.tag as u64)
            .fold(0, u64::wrapping_add)
    })
}

// ---- dict

fn keys() -> Vec<String> {
    (0..KEYS)
        .map(|i| format!("k{i}_{:x}", (i as u64).wrapping_mul(0x9e37_79b9)))
        .collect()
}

fn std_dict<S: std::hash::BuildHasher + Default>(keys: &[String]) -> u64 {
    let mut d: HashMap<String, u64, S> = HashMap::default();
    for (i, k) in keys.iter().enumerate() {
        d.insert(k.clone(), i as u64);
    }
    let mut sum = 0;
    for k in keys {
        sum += d[k.as_str()];
    }
    for k in keys {
        sum += d.remove(k.as_str()).unwrap();
    }
    assert!(d.is_empty());
    sum
}

fn loam_dict(m: &mut Mutator, keys: &[String]) -> u64 {
    m.mutate(|mc| {
        let d = GcDictionary::new(mc);
        for (i, k) in keys.iter().enumerate() {
            d.insert(mc, GcString::new(mc, k), i as u64);
        }
        let mut sum = 0;
        for k in keys {
            sum += d.get(k.as_str()).unwrap();
        }
        for k in keys {
            sum += d.remove(mc, k.as_str()).unwrap();
        }
        assert!(d.is_empty());
        sum
    })
}

/// The other shape the dictionary could have had, for the `dict` case's
/// comparison: .NET's buckets with chained entries and a free list (the
/// shape `GcDictionary`'s module docs weigh against dense entries with an
/// open-addressed index). Written on the same public API (`GcLog`,
/// `set_recorded`), single-threaded, insert/get/remove only.
mod chained {
    use loam::collections::GcString;
    use loam::runtime::{Gc, GcCell, GcLog, Mutation, Trace, Tracer};
    use std::hash::BuildHasher;

    /// Free entries keep their last key (or the filler) until reused: a
    /// cell cannot hold `Option<GcString>`, and the case ends with the
    /// dictionary anyway.
    #[derive(Trace)]
    pub struct Entry<'gc> {
        hash: GcCell<'gc, u64>,
        /// The next entry of the chain (or of the free list) plus one; 0 ends it.
        next: GcCell<'gc, u32>,
        key: GcCell<'gc, GcString<'gc>>,
        value: GcCell<'gc, u64>,
        live: GcCell<'gc, bool>,
    }

    pub struct Obj<'gc> {
        log: GcLog<'gc>,
        buckets: GcCell<'gc, Gc<'gc, [GcCell<'gc, u32>]>>,
        entries: GcCell<'gc, Gc<'gc, [Entry<'gc>]>>,
        count: GcCell<'gc, usize>,
        free: GcCell<'gc, u32>,
        filler: GcString<'gc>,
        hasher: foldhash::fast::RandomState,
    }

    // SAFETY: traces the log, both arrays (whose entries trace their keys)
    // and the filler; no `Drop`.
    unsafe impl Trace for Obj<'_> {
        fn trace(&self, t: &mut Tracer) {
            self.log.trace(t);
            self.buckets.trace(t);
            self.entries.trace(t);
            self.filler.trace(t);
        }
    }

    fn entry<'gc>(h: u64, next: u32, key: GcString<'gc>, value: u64, live: bool) -> Entry<'gc> {
        Entry {
            hash: GcCell::new(h),
            next: GcCell::new(next),
            key: GcCell::new(key),
            value: GcCell::new(value),
            live: GcCell::new(live),
        }
    }

    #[derive(Clone, Copy)]
    pub struct Dict<'gc>(Gc<'gc, Obj<'gc>>);

    impl<'gc> Dict<'gc> {
        pub fn new(mc: &Mutation<'gc>) -> Self {
            let filler = GcString::new(mc, "");
            Dict(mc.alloc(Obj {
                log: GcLog::new(),
                buckets: GcCell::new(mc.alloc_slice_fill(8, GcCell::new(0))),
                entries: GcCell::new(
                    mc.alloc_from_iter((0..8).map(|_| entry(0, 0, filler, 0, false))),
                ),
                count: GcCell::new(0),
                free: GcCell::new(0),
                filler,
                hasher: Default::default(),
            }))
        }

        fn find(&self, key: &str, h: u64) -> Option<usize> {
            let buckets = self.0.buckets.get();
            let entries = self.0.entries.get();
            let mut i = buckets[h as usize & (buckets.len() - 1)].get();
            while i != 0 {
                let e = &entries[i as usize - 1];
                if e.hash.get() == h && e.live.get() && e.key.get() == key {
                    return Some(i as usize - 1);
                }
                i = e.next.get();
            }
            None
        }

        pub fn get(&self, key: &str) -> Option<u64> {
            let h = self.0.hasher.hash_one(key);
            self.find(key, h)
                .map(|e| self.0.entries.get()[e].value.get())
        }

        pub fn insert(&self, mc: &Mutation<'gc>, key: GcString<'gc>, value: u64) {
            let o = &self.0;
            o.log.record(mc);
            let h = o.hasher.hash_one(key.as_str());
            if let Some(e) = self.find(&key, h) {
                // SAFETY: recorded above; an entry in use, traced.
                unsafe { o.entries.get()[e].value.set_recorded(mc, value) };
                return;
            }
            let mut entries = o.entries.get();
            let slot = if o.free.get() != 0 {
                let i = o.free.get() as usize - 1;
                o.free.set(mc, entries[i].next.get());
                i
            } else {
                let n = o.count.get();
                if n == entries.len() {
                    // Grow both arrays, re-chaining every entry.
                    let cap = entries.len() * 2;
                    let grown = mc.alloc_from_iter((0..cap).map(|i| match entries.get(i) {
                        Some(e) => entry(e.hash.get(), 0, e.key.get(), e.value.get(), true),
                        None => entry(0, 0, o.filler, 0, false),
                    }));
                    let buckets = mc.alloc_slice_fill(cap, GcCell::new(0_u32));
                    for (i, e) in grown.iter().enumerate().take(n) {
                        let b = &buckets[e.hash.get() as usize & (cap - 1)];
                        e.next.set(mc, b.get());
                        b.set(mc, i as u32 + 1);
                    }
                    // SAFETY: recorded above; both cells are traced.
                    unsafe {
                        o.entries.set_recorded(mc, grown);
                        o.buckets.set_recorded(mc, buckets);
                    }
                    entries = grown;
                }
                o.count.set(mc, n + 1);
                n
            };
            let buckets = o.buckets.get();
            let b = &buckets[h as usize & (buckets.len() - 1)];
            let e = &entries[slot];
            e.hash.set(mc, h);
            e.next.set(mc, b.get());
            e.live.set(mc, true);
            // SAFETY: recorded above; entries are traced whole.
            unsafe {
                e.key.set_recorded(mc, key);
                e.value.set_recorded(mc, value);
            }
            b.set(mc, slot as u32 + 1);
        }

        pub fn remove(&self, mc: &Mutation<'gc>, key: &str) -> Option<u64> {
            let o = &self.0;
            o.log.record(mc);
            let h = o.hasher.hash_one(key);
            let buckets = o.buckets.get();
            let entries = o.entries.get();
            let b = &buckets[h as usize & (buckets.len() - 1)];
            let mut prev: Option<usize> = None;
            let mut i = b.get();
            while i != 0 {
                let e = &entries[i as usize - 1];
                if e.hash.get() == h && e.live.get() && e.key.get() == key {
                    match prev {
                        None => b.set(mc, e.next.get()),
                        Some(p) => entries[p].next.set(mc, e.next.get()),
                    }
                    let v = e.value.get();
                    e.next.set(mc, o.free.get());
                    e.live.set(mc, false);
                    o.free.set(mc, i);
                    return Some(v);
                }
                prev = Some(i as usize - 1);
                i = e.next.get();
            }
            None
        }
    }
}

fn loam_dict_chained(m: &mut Mutator, keys: &[String]) -> u64 {
    m.mutate(|mc| {
        let d = chained::Dict::new(mc);
        for (i, k) in keys.iter().enumerate() {
            d.insert(mc, GcString::new(mc, k), i as u64);
        }
        let mut sum = 0;
        for k in keys {
            sum += d.get(k).unwrap();
        }
        for k in keys {
            sum += d.remove(mc, k).unwrap();
        }
        sum
    })
}

// ---- dict_get: look-ups alone

type KeyDict = Rootable!['gc => GcDictionary<'gc, GcString<'gc>, u64>];

/// The `dict_get` case's tables: the keys of `keys()` mapped to their
/// index in a rooted `GcDictionary` and in `HashMap`s with SipHash and with
/// foldhash, and the order of the look-ups, a fixed shuffle (in insertion
/// order the dictionary's dense entries would be read one after another,
/// which no `HashMap`'s layout matches). Built by the case's first run, in
/// its warm-up, and the case runs last: made with the other inputs, their
/// 80 MB of live managed data raised the heap goal under every other case,
/// and with it the point at which a case's arrays ask for a cycle (a
/// quarter of the cycles in `extend_iter`, whose arrays then came from
/// fresh memory: 2.2x - 2.9x `Vec`'s time against 1.4x - 1.9x).
struct Lookups {
    dict: Root<KeyDict>,
    sip: HashMap<String, u64>,
    fold: HashMap<String, u64, foldhash::fast::RandomState>,
    order: Vec<usize>,
}

fn make_lookups(m: &mut Mutator, keys: &[String]) -> Lookups {
    let n = keys.len();
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for i in (1..n).rev() {
        order.swap(i, (xorshift(&mut x) % (i as u64 + 1)) as usize);
    }
    let dict = m.mutate(|mc| {
        let d = GcDictionary::new(mc);
        for (i, k) in keys.iter().enumerate() {
            d.insert(mc, GcString::new(mc, k), i as u64);
        }
        mc.root(mc.alloc(d))
    });
    let entries = || keys.iter().cloned().zip(0..n as u64);
    Lookups {
        dict,
        sip: entries().collect(),
        fold: entries().collect(),
        order,
    }
}

fn loam_dict_get(m: &mut Mutator, keys: &[String], l: &Lookups) -> u64 {
    m.mutate(|mc| {
        let d = *l.dict.get(mc);
        let mut sum = 0_u64;
        for &i in &l.order {
            sum = sum.wrapping_add(d.get(keys[i].as_str()).unwrap());
        }
        sum
    })
}

fn std_dict_get<S: std::hash::BuildHasher>(
    d: &HashMap<String, u64, S>,
    keys: &[String],
    order: &[usize],
) -> u64 {
    let mut sum = 0_u64;
    for &i in order {
        sum = sum.wrapping_add(d[keys[i].as_str()]);
    }
    sum
}

// ---- strings

fn std_strings() -> u64 {
    let mut checks = 0_u64;
    // One buffer for every string, and each string copied out of it, as
    // loam's builder and `finish` do (a fresh `String` per string grew
    // from empty, about ten reallocations each, which loam's side did not
    // pay).
    let mut b = String::new();
    for s in 0..STRINGS {
        b.clear();
        for i in 0..PIECES {
            write!(b, "item{i}={};", i * 7 + s).unwrap();
        }
        let text = b.clone();
        let parts: Vec<String> = text.split(';').map(str::to_string).collect();
        let mut prev: Option<String> = None;
        for p in parts.iter().filter(|p| !p.is_empty()) {
            let eq = p.find('=').unwrap();
            let (name, value) = (p[..eq].to_string(), p[eq + 1..].to_string());
            // The two joined again, in one allocation as `concat`.
            // `black_box`: only its length is read, and the compiler could
            // otherwise drop the allocation and the copy.
            let joined = black_box([value.as_str(), name.as_str()].concat());
            checks += joined.len() as u64 + u64::from(prev.as_ref() == Some(&name));
            prev = Some(name);
        }
    }
    checks
}

fn loam_strings(m: &mut Mutator) -> u64 {
    m.mutate(|mc| {
        let mut checks = 0_u64;
        let b = GcStringBuilder::new(mc);
        for s in 0..STRINGS {
            for i in 0..PIECES {
                b.push_fmt(mc, format_args!("item{i}={};", i * 7 + s));
            }
            let text = b.finish(mc);
            let parts = text.split(mc, ';');
            let mut prev: Option<GcString> = None;
            for p in parts.iter().filter(|p| !p.is_empty()) {
                let eq = p.find('=').unwrap();
                let (name, value) = (p.substring(mc, ..eq), p.substring(mc, eq + 1..));
                let joined = value.concat(mc, &name);
                checks += joined.len() as u64 + u64::from(prev == Some(name));
                prev = Some(name);
            }
        }
        checks
    })
}

// ---- old_locks: a large old structure changed through `GcLock`s

const BUCKETS: usize = 100_000;
const LOCK_WRITES: u64 = 200_000;

#[derive(Trace)]
struct Bucket<'gc> {
    items: loam::runtime::GcLock<'gc, Vec<Gc<'gc, u64>>>,
}

type Buckets = Rootable!['gc => [Gc<'gc, Bucket<'gc>>]];

fn make_buckets(m: &mut Mutator) -> Root<Buckets> {
    let root = m.mutate(|mc| {
        mc.root(mc.alloc_from_iter((0..BUCKETS).map(|b| {
            mc.alloc(Bucket {
                items: loam::runtime::GcLock::new((0..4).map(|i| mc.alloc(b as u64 + i)).collect()),
            })
        })))
    });
    m.collect(); // old from here on
    root
}

/// 200,000 writes into random buckets (the oldest item out, a fresh one
/// in), in calls of 1,000, with four short-lived objects a write: the
/// cycles these start must stay minor (each write records its bucket).
fn loam_old_locks(m: &mut Mutator, root: &Root<Buckets>) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut sum = 0_u64;
    for _ in 0..LOCK_WRITES / 1000 {
        sum = sum.wrapping_add(m.mutate(|mc| {
            let all = root.get(mc);
            let mut s = 0_u64;
            for _ in 0..1000 {
                let b = (xorshift(&mut x) % BUCKETS as u64) as usize;
                let fresh = mc.alloc(x);
                for _ in 0..4 {
                    black_box(mc.alloc([x; 4])); // garbage
                }
                s = s.wrapping_add(all[b].items.write(mc, |v| {
                    let old = *v.remove(0);
                    v.push(fresh);
                    old
                }));
            }
            s
        }));
    }
    sum
}

// Boxes on purpose: each item its own allocation, as a `Gc` is.
#[allow(clippy::vec_box)]
fn std_old_locks(buckets: &mut [Vec<Box<u64>>]) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut sum = 0_u64;
    for _ in 0..LOCK_WRITES {
        let b = (xorshift(&mut x) % BUCKETS as u64) as usize;
        let fresh = Box::new(x);
        for _ in 0..4 {
            black_box(Box::new([x; 4])); // garbage
        }
        let v = &mut buckets[b];
        sum = sum.wrapping_add(*v.remove(0));
        v.push(fresh);
    }
    sum
}

// ---- harness

/// A case: its name, and its contenders, each a name and one timed run
/// returning a check value that must agree between them.
type Contenders<'a> = Vec<(&'static str, Box<dyn FnMut() -> u64 + 'a>)>;

fn wanted(case: &str) -> bool {
    std::env::var("LOAM_BENCH_CASES")
        .map(|v| {
            let mut names = v
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .peekable();
            names.peek().is_none() || names.any(|c| c == case)
        })
        .unwrap_or(true)
}

#[allow(clippy::type_complexity)]
fn cases<'a>(
    m: &'a std::cell::RefCell<Mutator>,
    locks: &'a (Root<Buckets>, std::cell::RefCell<Vec<Vec<Box<u64>>>>),
    list: &'a Root<U64List>,
    refill: &'a (Root<U64List>, std::cell::RefCell<Vec<u64>>),
    v: &'a [u64],
    keys: &'a [String],
    lookups: &'a std::cell::OnceCell<Lookups>,
) -> Vec<(&'static str, Contenders<'a>)> {
    // `dict_get`'s tables, made by whichever of its contenders runs first.
    let tables = move || lookups.get_or_init(|| make_lookups(&mut m.borrow_mut(), keys));
    let all: Vec<(&'static str, Contenders<'a>)> = vec![
        (
            "push_iter",
            vec![
                (
                    "loam",
                    Box::new(move || loam_push_iter(&mut m.borrow_mut())),
                ),
                ("std", Box::new(std_push_iter)),
            ],
        ),
        (
            "writer_push",
            vec![
                (
                    "loam",
                    Box::new(move || loam_writer_iter(&mut m.borrow_mut())),
                ),
                ("std", Box::new(std_push_iter)),
            ],
        ),
        (
            "refill",
            vec![
                (
                    "loam",
                    Box::new(move || loam_refill(&mut m.borrow_mut(), &refill.0)),
                ),
                (
                    "std",
                    Box::new(move || std_refill(&mut refill.1.borrow_mut())),
                ),
            ],
        ),
        (
            "extend_iter",
            vec![
                (
                    "loam",
                    Box::new(move || loam_extend_iter(&mut m.borrow_mut())),
                ),
                ("std", Box::new(std_extend_iter)),
            ],
        ),
        (
            "random_get",
            vec![
                (
                    "loam",
                    Box::new(move || loam_random_get(&mut m.borrow_mut(), list)),
                ),
                ("std", Box::new(move || std_random_get(v))),
            ],
        ),
        (
            "sort_records",
            vec![
                (
                    "loam",
                    Box::new(move || loam_sort_records(&mut m.borrow_mut())),
                ),
                ("std", Box::new(std_sort_records)),
            ],
        ),
        (
            "dict",
            vec![
                (
                    "loam",
                    Box::new(move || loam_dict(&mut m.borrow_mut(), keys)),
                ),
                (
                    "chained",
                    Box::new(move || loam_dict_chained(&mut m.borrow_mut(), keys)),
                ),
                (
                    "std-sip",
                    Box::new(move || std_dict::<std::collections::hash_map::RandomState>(keys)),
                ),
                (
                    "std-fold",
                    Box::new(move || std_dict::<foldhash::fast::RandomState>(keys)),
                ),
            ],
        ),
        (
            "old_locks",
            vec![
                (
                    "loam",
                    Box::new(move || loam_old_locks(&mut m.borrow_mut(), &locks.0)),
                ),
                (
                    "std",
                    Box::new(move || std_old_locks(&mut locks.1.borrow_mut())),
                ),
            ],
        ),
        (
            "strings",
            vec![
                ("loam", Box::new(move || loam_strings(&mut m.borrow_mut()))),
                ("std", Box::new(std_strings)),
            ],
        ),
        (
            "dict_get",
            vec![
                (
                    "loam",
                    Box::new(move || {
                        // The tables first: their first making borrows `m`.
                        let l = tables();
                        loam_dict_get(&mut m.borrow_mut(), keys, l)
                    }),
                ),
                (
                    "std-sip",
                    Box::new(move || std_dict_get(&tables().sip, keys, &tables().order)),
                ),
                (
                    "std-fold",
                    Box::new(move || std_dict_get(&tables().fold, keys, &tables().order)),
                ),
            ],
        ),
    ];
    assert!(
        all.iter().map(|(c, _)| *c).eq(CASES),
        "CASES lists every case"
    );
    all.into_iter().filter(|(c, _)| wanted(c)).collect()
}

/// The shared inputs: a rooted 1,000,000-element list and its `Vec`, the
/// refilled list and `Vec`, the dictionary's key texts and a cell for
/// `dict_get`'s tables (made by its first run); each left empty when `LOAM_BENCH_CASES`
/// leaves out the case that reads it (making a million keys is a third of
/// a profile of another case).
type Inputs = (
    Root<U64List>,
    Vec<u64>,
    Vec<String>,
    (Root<Buckets>, std::cell::RefCell<Vec<Vec<Box<u64>>>>),
    (Root<U64List>, std::cell::RefCell<Vec<u64>>),
    std::cell::OnceCell<Lookups>,
);

fn inputs(m: &mut Mutator) -> Inputs {
    let gets = if wanted("random_get") { GETS as u64 } else { 0 };
    let v: Vec<u64> = (0..gets).map(|i| i * 3).collect();
    let list = m.mutate(|mc| mc.root(mc.alloc(GcList::from_slice(mc, &v))));
    let std_buckets = (0..BUCKETS)
        .map(|b| (0..4).map(|i| Box::new(b as u64 + i)).collect())
        .collect();
    let locks = (make_buckets(m), std::cell::RefCell::new(std_buckets));
    let keys = if wanted("dict") || wanted("dict_get") {
        keys()
    } else {
        Vec::new()
    };
    let lookups = std::cell::OnceCell::new();
    let room = if wanted("refill") { PUSHES as usize } else { 0 };
    let refill = (
        m.mutate(|mc| mc.root(mc.alloc(GcList::with_capacity(mc, room)))),
        std::cell::RefCell::new(Vec::with_capacity(room)),
    );
    (list, v, keys, locks, refill, lookups)
}

fn benches(c: &mut Criterion) {
    support::check_names("LOAM_BENCH_CASES", &CASES);
    let rt = Runtime::new();
    let mut m = rt.attach();
    let (list, v, keys, locks, refill, lookups) = inputs(&mut m);
    let m = std::cell::RefCell::new(m);
    for (case, contenders) in cases(&m, &locks, &list, &refill, &v, &keys, &lookups) {
        let mut g = c.benchmark_group(case);
        g.sample_size(10);
        for (name, mut run) in contenders {
            g.bench_function(name, |b| b.iter(|| black_box(run())));
        }
        g.finish();
    }
}

criterion_group!(collections, benches);

/// The cases, as `LOAM_BENCH_CASES` names them.
const CASES: [&str; 10] = [
    "push_iter",
    "writer_push",
    "refill",
    "extend_iter",
    "random_get",
    "sort_records",
    "dict",
    "old_locks",
    "strings",
    "dict_get",
];

/// `LOAM_BENCH_PAIRED=<rounds>`: each case's contenders back to back,
/// rotating which goes first; prints median times, the median per-round
/// ratio of loam to each std contender, and the collector's cycles.
///
/// Each case first runs both contenders, alternating, for a warm-up of
/// `LOAM_BENCH_WARMUP_MS` (default 300 ms; criterion's is 3 s), untimed:
/// the figures are of the steady state. A collected heap reaches it only
/// after a few cycles (until then every round's arrays are fresh memory,
/// faulted in, where `Vec` on mimalloc gets last round's buffer back), so
/// one warm-up round measured a start-up cost instead.
fn paired(rounds: usize) {
    support::check_names("LOAM_BENCH_CASES", &CASES);
    let rt = Runtime::new();
    let mut m = rt.attach();
    let (list, v, keys, locks, refill, lookups) = inputs(&mut m);
    let m = std::cell::RefCell::new(m);
    let warmup = std::time::Duration::from_millis(
        support::env(
            "LOAM_BENCH_WARMUP_MS",
            "milliseconds from 0 to 600000",
            |v| v.parse().ok().filter(|ms| *ms <= 600_000),
        )
        .unwrap_or(300),
    );
    println!(
        "{rounds} rounds after {} ms of warm-up, std on {STD_ON}; median ms, median per-round ratio loam/std and ratio of the rounds' totals (lower is better)",
        warmup.as_millis()
    );
    for (case, mut contenders) in cases(&m, &locks, &list, &refill, &v, &keys, &lookups) {
        let n = contenders.len();
        let mut times = vec![Vec::new(); n];
        let start = Instant::now();
        while start.elapsed() < warmup {
            for c in contenders.iter_mut() {
                black_box((c.1)());
            }
        }
        let before = rt.stats();
        for round in 0..=rounds {
            // Checked within a round: a case may change its inputs (the
            // contenders' each the same way, one run per round).
            let mut want = None;
            let mut t = vec![0.0; n];
            for i in support::round_order(round, n) {
                let start = Instant::now();
                let got = black_box((contenders[i].1)());
                // A loam run ends when the cycles it asked for have swept:
                // they start as its call returns, and ran into the next
                // contender's timed run otherwise (std's, on a CPU the GC
                // threads shared).
                if !contenders[i].0.starts_with("std") {
                    rt.wait_for_cycle();
                }
                t[i] = start.elapsed().as_secs_f64() * 1e3;
                assert_eq!(
                    *want.get_or_insert(got),
                    got,
                    "{case}: {} disagrees",
                    contenders[i].0
                );
            }
            if round > 0 {
                for i in 0..n {
                    times[i].push(t[i]);
                }
            }
        }
        let after = rt.stats();
        let minor = after.minor_cycles - before.minor_cycles;
        let full = after.cycles - before.cycles - minor;
        let mut line = format!("{case:13} loam {:8.1}", median(times[0].clone()));
        for i in 1..n {
            let ratio = median(times[0].iter().zip(&times[i]).map(|(a, b)| a / b).collect());
            // And the ratio of the rounds' totals: a cycle falls in some
            // rounds only (the one whose call asked for it waits for it),
            // so the median round may have none; the totals carry every
            // cycle's cost.
            let total = times[0].iter().sum::<f64>() / times[i].iter().sum::<f64>();
            line += &format!(
                "  {} {:8.1} ({ratio:.2}x, totals {total:.2}x)",
                contenders[i].0,
                median(times[i].clone())
            );
        }
        println!(
            "{line}  cycles: {minor} minor, {full} full ({} rounds)",
            rounds + 1
        );
    }
    let s = rt.stats();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    println!(
        "loam: {} cycles ({} minor); mutators held p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms, {} times; \
         the collector's stops p99 {:.3} ms, max {:.3} ms",
        s.cycles,
        s.minor_cycles,
        ms(s.mutator_pauses.p50()),
        ms(s.mutator_pauses.p99()),
        ms(s.mutator_pauses.max()),
        s.mutator_pauses.count(),
        ms(s.pauses.p99()),
        ms(s.pauses.max()),
    );
}

fn main() {
    support::main(paired, collections);
}
