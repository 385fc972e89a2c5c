//! The heap's options, in one table, with their environment overrides.
//!
//! | option | type | default | environment |
//! |---|---|---|---|
//! | purge delay | milliseconds | 10 | `LOAM_PURGE_DELAY_MS` |
//! | huge pages | 0 or 1 | huge blocks only; every segment once a runtime is built over loam's pages ([`prefer_huge_pages`]) | `LOAM_HUGE_PAGES` |
//! | guard pages | 0 or 1 | 1 with the `secure` feature, else 0 | `LOAM_GUARD_PAGES` |
//!
//! The purge delay is how long a freed slice stays resident before it is
//! decommitted: long enough that a program which frees and re-allocates in
//! quick succession does not pay for `madvise` and page faults each time,
//! short enough that an idle program's resident size falls back.
//!
//! Huge pages: which memory asks the kernel for transparent huge pages
//! (`MADV_HUGEPAGE`; a kernel in THP's `madvise` mode, the common default,
//! backs nothing else with them). By default the whole 2 MiB units inside
//! a huge block (one of its own mapping: past a segment's room, about
//! 4 MiB, or aligned past 64 KiB): a managed array of a million elements
//! read at random missed the TLB on nearly every read in 4 KiB pages, and
//! took 1.2x – 1.6x the time of a `Vec` that mimalloc (which advises its
//! arenas so) backed with huge pages, against 1.2x – 1.35x with them; a
//! growing list's copies fault 2 MiB at a time (`docs/perf-log.md`, "Huge
//! blocks' mappings on transparent huge pages by default"). Only units
//! inside the block: a segment header or an alignment's padding would
//! otherwise be resident 2 MiB at a time. The cost is a block used
//! sparsely (a large `alloc_zeroed` written here and there), resident in
//! 2 MiB units where it is touched. Small and large pages' segments are
//! left to the kernel's 4 KiB pages: a 2 MiB page there would be resident
//! for a few blocks in use (a heap of 2 MiB in use would take 4 MiB a
//! thread). `LOAM_HUGE_PAGES=1` asks for every segment, whole; `0` for
//! nothing. A program that builds loam's runtime gets every segment too
//! ([`prefer_huge_pages`], which the variable overrides): there the heap
//! is a managed heap, large and read all over.
//!
//! Guard pages: the last 4 KiB of every page and span is made inaccessible,
//! so that a write running off the end of the last block faults at once
//! (mimalloc's secure mode does the same). Read once, when the first heap
//! is made: every page's geometry depends on it. See `guard.rs`.

use crate::sync::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::ffi::CStr;

const DEFAULT_PURGE_DELAY_MS: u64 = 10;

static PURGE_DELAY_MS: AtomicU64 = AtomicU64::new(DEFAULT_PURGE_DELAY_MS);
/// The floor a client that frees in bursts set ([`hold_freed_memory`]).
static HOLD_MS: AtomicU64 = AtomicU64::new(0);
/// [`HugePages`] as a number (its discriminant).
static HUGE_PAGES: AtomicU8 = AtomicU8::new(HugePages::HugeBlocks as u8);
/// Whether `LOAM_HUGE_PAGES` set [`HUGE_PAGES`]: [`prefer_huge_pages`]
/// then leaves it.
static HUGE_PAGES_FROM_ENV: AtomicBool = AtomicBool::new(false);
static GUARD_PAGES: AtomicBool = AtomicBool::new(cfg!(feature = "secure"));
/// Read once, and every caller returns after the reading: a thread that
/// came second used to return at once, before the values were stored, and
/// make its first pages with the defaults (guard pages laid out for a
/// setting the first thread was about to change).
/// `Once` allocates nothing, as this must not (it runs inside the
/// allocator).
static READ_ENV: std::sync::Once = std::sync::Once::new();

/// Reads the environment once (the first time a heap is created). Uses
/// `getenv` because `std::env` allocates, and this runs inside the allocator.
pub(crate) fn init() {
    READ_ENV.call_once(read_env);
}

fn read_env() {
    // Guard pages, decommits, page runs and aligned spans' headers are laid
    // out in 4 KiB pages: on a kernel with larger ones (16 KiB on some
    // AArch64 machines) a `munmap` or `mprotect` of a 4 KiB piece fails, and
    // memory leaked or allocations failed without a word.
    // SAFETY: `sysconf` has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page != crate::os::OS_PAGE as libc::c_long {
        crate::fatal("loam-heap needs 4 KiB OS pages, and this kernel's page size is another");
    }
    if let Some(v) = getenv(c"LOAM_PURGE_DELAY_MS") {
        match v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(ms) => PURGE_DELAY_MS.store(ms, Ordering::Relaxed),
            None => warn_value(b"LOAM_PURGE_DELAY_MS", v, b"not a number of milliseconds"),
        }
    }
    if let Some(v) = getenv(c"LOAM_HUGE_PAGES") {
        match v.to_str().ok().and_then(parse_flag) {
            Some(on) => {
                let mode = if on { HugePages::All } else { HugePages::Never };
                HUGE_PAGES.store(mode as u8, Ordering::Relaxed);
                HUGE_PAGES_FROM_ENV.store(true, Ordering::Relaxed);
            }
            None => warn_value(b"LOAM_HUGE_PAGES", v, FLAG_VALUES),
        }
    }
    if let Some(v) = getenv(c"LOAM_GUARD_PAGES") {
        match v.to_str().ok().and_then(parse_flag) {
            Some(on) => GUARD_PAGES.store(on, Ordering::Relaxed),
            None => warn_value(b"LOAM_GUARD_PAGES", v, FLAG_VALUES),
        }
    }
}

/// Parses an on/off setting the way every `LOAM_*` variable is read:
/// `1`, `true`, `on`, `yes` or `0`, `false`, `off`, `no`, in any case, with
/// spaces around allowed. Anything else is `None`. Allocates nothing (the
/// heap reads its settings inside the allocator).
///
/// # Examples
/// ```
/// assert_eq!(loam_heap::parse_flag("On"), Some(true));
/// assert_eq!(loam_heap::parse_flag(" 0 "), Some(false));
/// assert_eq!(loam_heap::parse_flag("maybe"), None);
/// assert_eq!(loam_heap::parse_flag(""), None);
/// ```
pub fn parse_flag(s: &str) -> Option<bool> {
    let s = s.trim();
    const ON: [&str; 4] = ["1", "true", "on", "yes"];
    const OFF: [&str; 4] = ["0", "false", "off", "no"];
    if ON.iter().any(|w| w.eq_ignore_ascii_case(s)) {
        Some(true)
    } else if OFF.iter().any(|w| w.eq_ignore_ascii_case(s)) {
        Some(false)
    } else {
        None
    }
}

/// Parses a byte size the way every `LOAM_*` size is read: a whole number,
/// then optionally a unit, `B`, `K`/`KB`/`KiB`, `M`/`MB`/`MiB`,
/// `G`/`GB`/`GiB` or `T`/`TB`/`TiB`, in any case, with spaces allowed
/// between and around. Every unit is a power of 1024 (as the JVM's `-Xmx`
/// reads `512m`). A sign, a fraction, an unknown unit or an overflow is
/// `None`. Allocates nothing.
///
/// # Examples
/// ```
/// use loam_heap::parse_size;
/// assert_eq!(parse_size("512"), Some(512));
/// assert_eq!(parse_size("64M"), Some(64 << 20));
/// assert_eq!(parse_size("16MiB"), Some(16 << 20));
/// assert_eq!(parse_size("2 gb"), Some(2 << 30));
/// assert_eq!(parse_size("-5"), None);
/// assert_eq!(parse_size("lots"), None);
/// ```
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let n: usize = s[..digits].parse().ok()?;
    let unit = s[digits..].trim();
    const UNITS: [(&str, u32); 14] = [
        ("", 0),
        ("b", 0),
        ("k", 10),
        ("kb", 10),
        ("kib", 10),
        ("m", 20),
        ("mb", 20),
        ("mib", 20),
        ("g", 30),
        ("gb", 30),
        ("gib", 30),
        ("t", 40),
        ("tb", 40),
        ("tib", 40),
    ];
    let shift = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit))?.1;
    n.checked_mul(1usize << shift)
}

fn getenv(name: &CStr) -> Option<&'static CStr> {
    // SAFETY: `name` is NUL-terminated; getenv returns null or a string that
    // lives as long as the environment is not modified (we only read it once,
    // at start-up).
    let p = unsafe { libc::getenv(name.as_ptr()) };
    // SAFETY: non-null results of getenv are NUL-terminated strings.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// What a flag may read.
const FLAG_VALUES: &[u8] = b"expected 1/0, true/false, on/off or yes/no";

/// Says that variable `name`'s `value` is ignored and what was `expected`,
/// as the runtime's warnings do, without allocating: the value's bytes as
/// they are (up to 64 of them), between quotes.
fn warn_value(name: &[u8], value: &CStr, expected: &[u8]) {
    let bytes = value.to_bytes();
    let shown = &bytes[..bytes.len().min(64)];
    let more: &[u8] = if shown.len() < bytes.len() { b"...\"" } else { b"\"" };
    for part in [b"loam-heap: ignoring ", name, b"=\"", shown, more, b": ", expected, b"\n"] {
        warn(part);
    }
}

/// Counts a refusal of the kernel's in `counter` and says `msg` on stderr
/// the first time (`said`), without allocating.
pub(crate) fn refused(counter: &AtomicU64, said: &AtomicBool, msg: &[u8]) {
    counter.fetch_add(1, Ordering::Relaxed);
    if !said.swap(true, Ordering::Relaxed) {
        warn(msg);
    }
}

/// Writes a message to stderr without allocating.
pub(crate) fn warn(msg: &[u8]) {
    // SAFETY: writing a valid buffer to fd 2.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// Which mappings ask for transparent huge pages (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HugePages {
    /// None (`LOAM_HUGE_PAGES=0`).
    Never = 0,
    /// The 2 MiB units inside a huge block (the default).
    HugeBlocks = 1,
    /// Every segment, whole (`LOAM_HUGE_PAGES=1`).
    All = 2,
}

fn huge_mode() -> u8 {
    HUGE_PAGES.load(Ordering::Relaxed)
}

/// Whether every fresh segment asks for transparent huge pages, whole
/// (`LOAM_HUGE_PAGES=1`).
#[inline]
pub(crate) fn huge_pages_everywhere() -> bool {
    huge_mode() == HugePages::All as u8
}

/// Asks for transparent huge pages for every segment mapped from now on,
/// whole, as `LOAM_HUGE_PAGES=1` does, unless `LOAM_HUGE_PAGES` says
/// otherwise, or guard pages are on (`secure`: a guard every 64 KiB page
/// splits every 2 MiB unit, so the advice would buy nothing and cost the
/// header's unit). loam's runtime calls it as it is built over loam's
/// pages: a managed heap is large and read all over by its collector and
/// its program, and on 4 KiB pages it missed the TLB where `Box`es and
/// `String`s on mimalloc (which advises its arenas) did not.
///
/// On this repository's 2-core VM, in a phase where page walks were slow:
/// binary-trees at one thread took 0.83x – 0.95x `Box`'s time with them
/// against 1.16x – 1.26x without (depths 16 and 21); the collections
/// bench's small-object cases took 15 – 57% less time. The cost is
/// resident memory:
/// - every thread that allocates has its first segment's header unit
///   resident, 2 MiB, where 4 KiB pages held a few pages;
/// - peak RSS 5 – 8% more at depth 21, 11 – 27% at depth 16 with two
///   threads (`docs/perf-log.md`, "Huge pages for every segment under a
///   runtime");
/// - freed slices are still decommitted after the purge delay, which
///   splits the huge page they are in, but the kernel's `khugepaged` may
///   later collapse a mostly free 2 MiB range into a huge page again.
///
/// The setting is the process's, for good: it outlives the runtime that
/// asked, a forked child inherits it, and with `LoamAlloc` as the global
/// allocator the program's own blocks share the runtime's segments, and
/// so its huge pages. A program that uses the heap alone keeps the
/// default, huge blocks only, for its resident size. Segments mapped
/// before the call keep their pages. `LOAM_HUGE_PAGES=0` turns it off.
///
/// # Examples
/// ```
/// loam_heap::prefer_huge_pages();
/// let v = vec![0_u8; 64]; // on whatever global allocator the program has
/// assert_eq!(v.len(), 64);
/// ```
pub fn prefer_huge_pages() {
    init();
    if !HUGE_PAGES_FROM_ENV.load(Ordering::Relaxed) && !guard_pages() {
        HUGE_PAGES.store(HugePages::All as u8, Ordering::Relaxed);
    }
}

/// Whether a huge block (a huge segment's, an aligned span's) asks for
/// them for its whole 2 MiB units (`os::advise_huge_inside`): unless
/// `LOAM_HUGE_PAGES=0`.
#[inline]
pub(crate) fn huge_pages_for_blocks() -> bool {
    huge_mode() != HugePages::Never as u8
}

/// Whether pages and spans end in a guard page (`guard.rs`). Constant once
/// the first heap exists (`init` runs before its first page).
#[inline]
pub(crate) fn guard_pages() -> bool {
    GUARD_PAGES.load(Ordering::Relaxed)
}

/// The purge delay in effect, in milliseconds: the larger of the purge delay
/// and the hold.
#[inline]
pub(crate) fn purge_delay_ms() -> u64 {
    PURGE_DELAY_MS
        .load(Ordering::Relaxed)
        .max(HOLD_MS.load(Ordering::Relaxed))
}

/// Keeps freed memory resident for at least `hold`, whatever the purge delay
/// (which stays as set; the larger of the two is in effect). For a client
/// that frees in bursts and reuses the memory before the next burst: loam's
/// garbage collector sets it to about ten times its cycle interval, so that
/// memory one sweep frees is not decommitted and faulted in again before
/// the mutators reuse it. `Duration::ZERO` lifts the hold.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// loam_heap::hold_freed_memory(Duration::from_millis(200));
/// assert_eq!(loam_heap::purge_delay(), Duration::from_millis(10)); // as set
/// loam_heap::hold_freed_memory(Duration::ZERO);
/// ```
pub fn hold_freed_memory(hold: std::time::Duration) {
    init();
    HOLD_MS.store(
        hold.as_millis().min(u64::MAX as u128) as u64,
        Ordering::Relaxed,
    );
}

/// Sets how long freed memory stays resident before it is returned to the OS
/// (default 10 ms; `LOAM_PURGE_DELAY_MS` overrides the default at start-up).
///
/// # Examples
/// ```
/// loam_heap::set_purge_delay(std::time::Duration::from_millis(50));
/// assert_eq!(loam_heap::purge_delay(), std::time::Duration::from_millis(50));
/// ```
pub fn set_purge_delay(delay: std::time::Duration) {
    init();
    PURGE_DELAY_MS.store(
        delay.as_millis().min(u64::MAX as u128) as u64,
        Ordering::Relaxed,
    );
}

/// The purge delay as set (a [`hold_freed_memory`] may lengthen the one in
/// effect).
pub fn purge_delay() -> std::time::Duration {
    // `LOAM_PURGE_DELAY_MS` too before any heap exists (it read 10 ms).
    init();
    std::time::Duration::from_millis(PURGE_DELAY_MS.load(Ordering::Relaxed))
}
