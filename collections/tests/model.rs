//! Each collection against its std model (Vec, HashMap, String), through
//! random operation sequences, one `mutate` call per step with a forced
//! full collection between steps (verify mode on) and paced minor cycles
//! inside them (a 64 KiB heap), compared after every step.
//!
//! `PROPTEST_CASES` sets the number of sequences (default 48).

use loam_collections::{GcDictionary, GcList, GcString, GcStringBuilder, SipHash};
use loam_runtime::{Gc, Mutator, Root, Rootable, Runtime};
use proptest::prelude::*;
use std::collections::HashMap;

fn runtime() -> Runtime {
    Runtime::builder()
        .gc_threads(2)
        .ignore_env()
        .verify(true)
        // Below the floor on purpose: cycles between most steps.
        .__stress_min_heap(64 << 10)
        .build()
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// A full cycle between every two steps, and a check that it ran (a
/// cycle counted since the step before). The small heap's pacing runs
/// minor cycles inside the steps, while they change the collections.
fn between_steps(m: &mut Mutator, _step: usize) {
    let before = m.runtime().stats().cycles;
    m.collect();
    assert!(m.runtime().stats().cycles > before, "no cycle ran");
}

#[derive(Clone, Debug)]
enum ListOp {
    Push(u64),
    Pop,
    Insert(usize, u64),
    Remove(usize),
    SwapRemove(usize),
    Set(usize, u64),
    Truncate(usize),
    RetainOdd,
    Sort,
    SortByKeyRev,
    Extend(Vec<u64>),
    /// `try_extend` with an iterator of unknown length.
    TryExtendFiltered(Vec<u64>),
    Reserve(usize),
    Clear,
    /// Through one `ListWriter`: `Some` pushes, `None` pops.
    WriterRun(Vec<Option<u64>>),
    /// `n` more elements (past 512: the mark traces such a list's slots
    /// in parts, and its array is large).
    ExtendMany(usize),
    /// `get`, `at`, `first` and `last` at index `i` (in range or not).
    Read(usize),
    /// `contains` and `index_of` of a value in the list (its `i`th) or not.
    Find(usize, u64),
    /// Sorts, then `binary_search` for a value in the list or not.
    SortedSearch(usize, u64),
}

fn list_op() -> impl Strategy<Value = ListOp> {
    prop_oneof![
        6 => any::<u64>().prop_map(ListOp::Push),
        2 => Just(ListOp::Pop),
        2 => (0..40_usize, any::<u64>()).prop_map(|(i, v)| ListOp::Insert(i, v)),
        2 => (0..40_usize).prop_map(ListOp::Remove),
        1 => (0..40_usize).prop_map(ListOp::SwapRemove),
        2 => (0..40_usize, any::<u64>()).prop_map(|(i, v)| ListOp::Set(i, v)),
        1 => (0..40_usize).prop_map(ListOp::Truncate),
        1 => Just(ListOp::RetainOdd),
        1 => Just(ListOp::Sort),
        1 => Just(ListOp::SortByKeyRev),
        1 => proptest::collection::vec(any::<u64>(), 0..20).prop_map(ListOp::Extend),
        1 => proptest::collection::vec(any::<u64>(), 0..20).prop_map(ListOp::TryExtendFiltered),
        1 => (0..70_usize).prop_map(ListOp::Reserve),
        1 => Just(ListOp::Clear),
        2 => proptest::collection::vec(proptest::option::weighted(0.7, any::<u64>()), 0..40).prop_map(ListOp::WriterRun),
        1 => (300..700_usize).prop_map(ListOp::ExtendMany),
        2 => (0..1000_usize).prop_map(ListOp::Read),
        2 => (0..1000_usize, any::<u64>()).prop_map(|(i, v)| ListOp::Find(i, v)),
        1 => (0..1000_usize, any::<u64>()).prop_map(|(i, v)| ListOp::SortedSearch(i, v)),
    ]
}

type ListRoot = Rootable!['gc => GcList<'gc, Gc<'gc, u64>>];

/// Runs `f`, which must panic for index `i` of a list of `len`, with the
/// index and then the length in its message.
fn out_of_range(i: usize, len: usize, f: impl FnOnce()) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    let (at_i, at_len) = (
        msg.find(&format!("(is {i})")),
        msg.rfind(&format!("(is {len})")),
    );
    assert!(
        matches!((at_i, at_len), (Some(a), Some(b)) if a < b),
        "{msg}"
    );
}

proptest! {
    #![proptest_config(config())]

    /// A list of managed values, against a `Vec<u64>`.
    #[test]
    fn a_list_behaves_as_a_vec(ops in proptest::collection::vec(list_op(), 1..60)) {
        let rt = runtime();
        let mut m = rt.attach();
        let list: Root<ListRoot> = m.mutate(|mc| mc.root(mc.alloc(GcList::new(mc))));
        let mut model: Vec<u64> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            m.mutate(|mc| {
                let l = *list.get(mc);
                let len = model.len();
                match op {
                    ListOp::Push(v) => { l.push(mc, mc.alloc(v)); model.push(v); }
                    ListOp::Pop => assert_eq!(l.pop(mc).map(|g| *g), model.pop()),
                    ListOp::Insert(i, v) if i <= len => { l.insert(mc, i, mc.alloc(v)); model.insert(i, v); }
                    ListOp::Remove(i) if i < len => assert_eq!(*l.remove(mc, i), model.remove(i)),
                    ListOp::SwapRemove(i) if i < len => assert_eq!(*l.swap_remove(mc, i), model.swap_remove(i)),
                    ListOp::Set(i, v) if i < len => {
                        assert_eq!(*l.set(mc, i, mc.alloc(v)), model[i]);
                        model[i] = v;
                    }
                    ListOp::Truncate(n) => { l.truncate(mc, n); model.truncate(n); }
                    ListOp::RetainOdd => { l.retain(mc, |x| *x % 2 == 1); model.retain(|x| x % 2 == 1); }
                    ListOp::Sort => { l.sort(mc); model.sort(); }
                    ListOp::SortByKeyRev => {
                        l.sort_by_key(mc, |x| std::cmp::Reverse(**x >> 60));
                        model.sort_by_key(|x| std::cmp::Reverse(*x >> 60));
                    }
                    ListOp::Extend(v) => {
                        l.extend(mc, v.iter().map(|&x| mc.alloc(x)));
                        model.extend(v);
                    }
                    ListOp::TryExtendFiltered(v) => {
                        l.try_extend(mc, v.iter().filter(|&&x| x % 3 != 0).map(|&x| mc.alloc(x))).unwrap();
                        model.extend(v.iter().filter(|&&x| x % 3 != 0));
                    }
                    ListOp::Reserve(n) => {
                        l.reserve(mc, n);
                        assert!(l.capacity() >= len + n, "{} < {len} + {n}", l.capacity());
                    }
                    ListOp::Clear => { l.clear(mc); model.clear(); }
                    ListOp::WriterRun(run) => {
                        let w = l.writer(mc);
                        for x in run {
                            match x {
                                Some(v) => { w.push(mc.alloc(v)); model.push(v); }
                                None => assert_eq!(w.pop().map(|g| *g), model.pop()),
                            }
                            assert_eq!(w.len(), model.len());
                        }
                        assert_eq!(w.get(model.len().wrapping_sub(1)).map(|g| *g), model.last().copied());
                    }
                    ListOp::ExtendMany(n) => {
                        let from = model.len() as u64;
                        l.extend(mc, (from..from + n as u64).map(|x| mc.alloc(x)));
                        model.extend(from..from + n as u64);
                    }
                    ListOp::Read(i) => {
                        assert_eq!(l.get(i).map(|g| *g), model.get(i).copied());
                        if i < len {
                            assert_eq!(*l.at(i), model[i]);
                        } else {
                            out_of_range(i, len, || {
                                l.at(i);
                            });
                        }
                        assert_eq!(l.first().map(|g| *g), model.first().copied());
                        assert_eq!(l.last().map(|g| *g), model.last().copied());
                    }
                    ListOp::Find(i, v) => {
                        // A value in the list half the time, when it has one.
                        let v = if i % 2 == 0 && len > 0 { model[i % len] } else { v };
                        let x = mc.alloc(v);
                        assert_eq!(l.contains(&x), model.contains(&v));
                        assert_eq!(l.index_of(&x), model.iter().position(|&y| y == v));
                    }
                    ListOp::SortedSearch(i, v) => {
                        l.sort(mc);
                        model.sort();
                        let v = if i % 2 == 0 && len > 0 { model[i % len] } else { v };
                        let got = l.binary_search_by(|x| (**x).cmp(&v));
                        match (got, model.binary_search(&v)) {
                            // Either match of a value held more than once.
                            (Ok(a), Ok(_)) => assert_eq!(model[a], v),
                            (got, want) => assert_eq!(got, want),
                        }
                        assert_eq!(l.binary_search(&mc.alloc(v)).is_ok(), model.contains(&v));
                    }
                    // Out of range: the list panics as a Vec does, with the
                    // index and then the length, and is unchanged (each
                    // operation its own call: they check apart).
                    ListOp::Insert(i, v) => out_of_range(i, len, || l.insert(mc, i, mc.alloc(v))),
                    ListOp::Remove(i) => out_of_range(i, len, || {
                        l.remove(mc, i);
                    }),
                    ListOp::SwapRemove(i) => out_of_range(i, len, || {
                        l.swap_remove(mc, i);
                    }),
                    ListOp::Set(i, v) => out_of_range(i, len, || {
                        l.set(mc, i, mc.alloc(v));
                    }),
                }
            });
            between_steps(&mut m, step);
            m.mutate(|mc| {
                let l = *list.get(mc);
                l.assert_valid();
                assert_eq!(l.len(), model.len());
                assert!(l.capacity() >= l.len());
                assert_eq!(l.iter().map(|g| *g).collect::<Vec<_>>(), model);
                if let Some(&x) = model.first() {
                    assert_eq!(l.index_of(&l.at(0)), model.iter().position(|&y| y == x));
                }
            });
        }
    }
}

#[derive(Clone, Debug)]
enum DictOp {
    Insert(u8, u64),
    Remove(u8),
    Update(u8),
    EntryOrInsert(u8, u64),
    RetainEven,
    Clear,
    Reserve(u16),
    RemoveEntry(u8),
    /// Through the occupied entry: `Some` stores the value, `None` removes.
    Occupied(u8, Option<u64>),
    Extend(Vec<(u8, u64)>),
    Lookups(u8),
}

fn dict_op() -> impl Strategy<Value = DictOp> {
    prop_oneof![
        8 => (any::<u8>(), any::<u64>()).prop_map(|(k, v)| DictOp::Insert(k, v)),
        4 => any::<u8>().prop_map(DictOp::Remove),
        2 => any::<u8>().prop_map(DictOp::Update),
        2 => (any::<u8>(), any::<u64>()).prop_map(|(k, v)| DictOp::EntryOrInsert(k, v)),
        1 => Just(DictOp::RetainEven),
        1 => Just(DictOp::Clear),
        1 => any::<u16>().prop_map(|n| DictOp::Reserve(n % 600)),
        2 => any::<u8>().prop_map(DictOp::RemoveEntry),
        2 => (any::<u8>(), proptest::option::of(any::<u64>())).prop_map(|(k, v)| DictOp::Occupied(k, v)),
        1 => proptest::collection::vec((any::<u8>(), any::<u64>()), 0..40).prop_map(DictOp::Extend),
        2 => any::<u8>().prop_map(DictOp::Lookups),
    ]
}

fn key(k: u8) -> String {
    format!("k{k}_{:x}", u32::from(k).wrapping_mul(2_654_435_761))
}

type DictRoot = Rootable!['gc => GcDictionary<'gc, GcString<'gc>, Gc<'gc, u64>>];
type SipRoot = Rootable!['gc => GcDictionary<'gc, GcString<'gc>, Gc<'gc, u64>, SipHash>];

/// Applies `op` to a dictionary of either hasher and to the model.
/// `reserved` is the last reserve's promise, `(len + n, capacity)`: until
/// the length passes its mark, the capacity stays (no growth).
macro_rules! dict_step {
    ($mc:expr, $d:expr, $model:expr, $op:expr, $reserved:expr) => {{
        let (mc, d, model, reserved): (_, _, _, &mut Option<(usize, usize)>) =
            ($mc, $d, $model, $reserved);
        match $op {
            DictOp::Insert(k, v) => {
                let old = d.insert(mc, GcString::new(mc, &key(k)), mc.alloc(v));
                assert_eq!(old.map(|g| *g), model.insert(key(k), v));
            }
            DictOp::Remove(k) => {
                assert_eq!(
                    d.remove(mc, key(k).as_str()).map(|g| *g),
                    model.remove(&key(k))
                );
            }
            DictOp::Update(k) => {
                let new = d.update(mc, key(k).as_str(), |v| mc.alloc(v.wrapping_add(1)));
                let m = model.get_mut(&key(k)).map(|v| {
                    *v = v.wrapping_add(1);
                    *v
                });
                assert_eq!(new.map(|g| *g), m);
            }
            DictOp::EntryOrInsert(k, v) => {
                let got = d
                    .entry(mc, GcString::new(mc, &key(k)))
                    .or_insert(mc.alloc(v));
                assert_eq!(*got, *model.entry(key(k)).or_insert(v));
            }
            DictOp::RetainEven => {
                d.retain(mc, |_, v| *v % 2 == 0);
                model.retain(|_, v| *v % 2 == 0);
            }
            DictOp::Clear => {
                d.clear(mc);
                model.clear();
            }
            DictOp::RemoveEntry(k) => {
                let got = d.remove_entry(mc, key(k).as_str());
                assert_eq!(
                    got.map(|(k, v)| (k.to_string(), *v)),
                    model.remove_entry(&key(k))
                );
            }
            DictOp::Occupied(k, v) => {
                let got = match d.entry(mc, GcString::new(mc, &key(k))) {
                    loam_collections::DictEntry::Occupied(o) => {
                        assert_eq!(o.key(), key(k).as_str());
                        Some(match v {
                            Some(v) => *o.insert(mc.alloc(v)),
                            None => *o.remove().1,
                        })
                    }
                    loam_collections::DictEntry::Vacant(_) => None,
                };
                let want = match (model.entry(key(k)), v) {
                    (std::collections::hash_map::Entry::Occupied(mut o), Some(v)) => {
                        Some(o.insert(v))
                    }
                    (std::collections::hash_map::Entry::Occupied(o), None) => Some(o.remove()),
                    (std::collections::hash_map::Entry::Vacant(_), _) => None,
                };
                assert_eq!(got, want);
            }
            DictOp::Extend(pairs) => {
                d.extend(
                    mc,
                    pairs
                        .iter()
                        .map(|&(k, v)| (GcString::new(mc, &key(k)), mc.alloc(v))),
                );
                model.extend(pairs.iter().map(|&(k, v)| (key(k), v)));
            }
            DictOp::Lookups(k) => {
                assert_eq!(d.contains_key(key(k).as_str()), model.contains_key(&key(k)));
                assert_eq!(
                    d.get_key_value(key(k).as_str())
                        .map(|(k, v)| (k.to_string(), *v)),
                    model.get_key_value(&key(k)).map(|(k, v)| (k.clone(), *v))
                );
            }
            DictOp::Reserve(n) => {
                d.reserve(mc, usize::from(n));
                assert!(d.capacity() >= d.len() + usize::from(n));
                model.reserve(usize::from(n));
                // The promise of this reserve replaces the last one's;
                // none on an empty dictionary, whose first insert makes
                // its array.
                *reserved = (!d.is_empty()).then(|| (d.len() + usize::from(n), d.capacity()));
            }
        }
        if let Some((mark, cap)) = *reserved {
            if d.len() <= mark {
                assert_eq!(
                    d.capacity(),
                    cap,
                    "grew before {mark} entries, at {}",
                    d.len()
                );
            } else {
                *reserved = None;
            }
        }
    }};
}

/// Compares a dictionary with the model, entry by entry and by lookups.
macro_rules! dict_check {
    ($d:expr, $model:expr) => {{
        let (d, model) = ($d, $model);
        d.assert_valid();
        assert_eq!(d.len(), model.len());
        let mut seen = 0;
        for (k, v) in d.iter() {
            assert_eq!(model.get(k.as_str()), Some(&*v), "entry {k}");
            seen += 1;
        }
        assert_eq!(seen, model.len());
        let mut keys: Vec<String> = d.keys().map(|k| k.to_string()).collect();
        let mut want: Vec<&String> = model.keys().collect();
        keys.sort();
        want.sort();
        assert!(keys.iter().eq(want), "keys");
        let mut values: Vec<u64> = d.values().map(|v| *v).collect();
        let mut want: Vec<u64> = model.values().copied().collect();
        values.sort_unstable();
        want.sort_unstable();
        assert_eq!(values, want, "values");
        for k in 0..=255_u8 {
            assert_eq!(
                d.get(key(k).as_str()).map(|g| *g),
                model.get(&key(k)).copied()
            );
        }
    }};
}

proptest! {
    #![proptest_config(config())]

    /// A dictionary of `GcString` keys and managed values, against a
    /// `HashMap<String, u64>`, with the default hasher and with SipHash.
    #[test]
    fn a_dictionary_behaves_as_a_hash_map(ops in proptest::collection::vec(dict_op(), 1..80)) {
        let rt = runtime();
        let mut m = rt.attach();
        let fast: Root<DictRoot> = m.mutate(|mc| mc.root(mc.alloc(GcDictionary::new(mc))));
        let sip: Root<SipRoot> =
            m.mutate(|mc| mc.root(mc.alloc(GcDictionary::with_hasher(mc, SipHash::default()))));
        let mut model: HashMap<String, u64> = HashMap::new();
        let mut model2: HashMap<String, u64> = HashMap::new();
        let (mut reserved, mut reserved2) = (None, None);
        for (step, op) in ops.into_iter().enumerate() {
            m.mutate(|mc| {
                dict_step!(mc, *fast.get(mc), &mut model, op.clone(), &mut reserved);
                dict_step!(mc, *sip.get(mc), &mut model2, op, &mut reserved2);
            });
            between_steps(&mut m, step);
            m.mutate(|mc| {
                dict_check!(*fast.get(mc), &model);
                dict_check!(*sip.get(mc), &model2);
            });
        }
    }
}

#[derive(Clone, Debug)]
enum StrOp {
    Push(String),
    PushChar(char),
    /// A number's digits, so that some finished strings parse.
    PushNum(u32),
    Finish,
}

fn str_op() -> impl Strategy<Value = StrOp> {
    prop_oneof![
        5 => "[a-zé=; 世]{0,12}".prop_map(StrOp::Push),
        2 => any::<char>().prop_map(StrOp::PushChar),
        1 => any::<u32>().prop_map(StrOp::PushNum),
        1 => Just(StrOp::Finish),
    ]
}

type BuilderRoot = Rootable!['gc => GcStringBuilder<'gc>];
type StringsRoot = Rootable!['gc => GcList<'gc, GcString<'gc>>];

proptest! {
    #![proptest_config(config())]

    /// A builder against a `String`; each finished string, and what the
    /// string methods make of it, against `str`'s.
    #[test]
    fn builders_and_strings_behave_as_std_strings(ops in proptest::collection::vec(str_op(), 1..60)) {
        let rt = runtime();
        let mut m = rt.attach();
        let b: Root<BuilderRoot> = m.mutate(|mc| mc.root(mc.alloc(GcStringBuilder::new(mc))));
        let done: Root<StringsRoot> = m.mutate(|mc| mc.root(mc.alloc(GcList::new(mc))));
        let mut model = String::new();
        let mut finished: Vec<String> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            m.mutate(|mc| {
                let b = *b.get(mc);
                match op {
                    StrOp::Push(s) => { b.push_str(mc, &s); model.push_str(&s); }
                    StrOp::PushChar(c) => { b.push(mc, c); model.push(c); }
                    StrOp::PushNum(n) => {
                        b.push_fmt(mc, format_args!("{n}"));
                        model.push_str(&n.to_string());
                    }
                    StrOp::Finish => {
                        let s = b.finish(mc);
                        assert_eq!(s, model.as_str());
                        done.get(mc).push(mc, s);
                        finished.push(std::mem::take(&mut model));
                    }
                }
                assert_eq!(b.len(), model.len());
            });
            between_steps(&mut m, step);
            m.mutate(|mc| {
                assert_eq!(b.get(mc).to_gc_string(mc), model.as_str());
                let done = *done.get(mc);
                assert_eq!(done.len(), finished.len());
                for (s, want) in done.iter().zip(&finished) {
                    assert_eq!(s, want.as_str());
                    assert_eq!(s.hash_code(), GcString::new(mc, want).hash_code());
                    assert_eq!(s.trim(mc), want.trim());
                    assert_eq!(s.to_uppercase(mc), want.to_uppercase());
                    assert_eq!(s.to_lowercase(mc), want.to_lowercase());
                    assert_eq!(s.concat(mc, "x;"), format!("{want}x;"));
                    let parts: Vec<String> = s.split(mc, ';').iter().map(|p| p.to_string()).collect();
                    assert_eq!(parts, want.split(';').collect::<Vec<_>>());
                    let parts: Vec<String> = s.split_str(mc, "=;").iter().map(|p| p.to_string()).collect();
                    assert_eq!(parts, want.split("=;").collect::<Vec<_>>());
                    // The `try_` forms build their lists another way.
                    let parts: Vec<String> = s.try_split(mc, ';').unwrap().iter().map(|p| p.to_string()).collect();
                    assert_eq!(parts, want.split(';').collect::<Vec<_>>());
                    let parts: Vec<String> =
                        s.try_split_str(mc, "=;").unwrap().iter().map(|p| p.to_string()).collect();
                    assert_eq!(parts, want.split("=;").collect::<Vec<_>>());
                    if let Some(i) = want.find('=') {
                        assert_eq!(s.substring(mc, ..i), &want[..i]);
                        assert_eq!(s.substring(mc, i + 1..), &want[i + 1..]);
                    }
                    assert_eq!(s.cmp(&GcString::new(mc, "m")), want.as_str().cmp("m"));
                    assert_eq!(s.parse::<u64>().ok(), want.parse::<u64>().ok());
                    // Separators, patterns and ranges from the string
                    // itself: its first three chars, and the text from
                    // each of them to two chars on; and a pattern it may
                    // not hold.
                    let bounds: Vec<usize> =
                        want.char_indices().map(|(i, _)| i).chain([want.len()]).collect();
                    for (n, c) in want.chars().take(3).enumerate() {
                        let parts: Vec<String> = s.split(mc, c).iter().map(|p| p.to_string()).collect();
                        assert_eq!(parts, want.split(c).collect::<Vec<_>>());
                        let (from, to) = (bounds[n], bounds[(n + 2).min(bounds.len() - 1)]);
                        let pat = &want[from..to];
                        assert_eq!(s.find(pat), want.find(pat));
                        assert_eq!(s.substring(mc, from..to), pat);
                        assert_eq!(s.substring(mc, from..), &want[from..]);
                        assert!(s.starts_with(&want[..to]) && s.ends_with(&want[from..]));
                        let absent = format!("{pat};=");
                        assert_eq!(s.find(absent.as_str()), want.find(absent.as_str()));
                        assert_eq!(s.starts_with(pat), want.starts_with(pat));
                        assert_eq!(s.ends_with(pat), want.ends_with(pat));
                        let other = GcString::new(mc, pat);
                        assert_eq!(s == other, want == pat);
                        assert_eq!(s.cmp(&other), want.as_str().cmp(pat));
                        assert_eq!(s.concat(mc, pat), format!("{want}{pat}"));
                    }
                }
            });
        }
    }
}
