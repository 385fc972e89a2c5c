//! The heap's options, in one table, with their environment overrides.
//!
//! | option | type | default | environment |
//! |---|---|---|---|
//! | purge delay | milliseconds | 10 | `LOAM_PURGE_DELAY_MS` |
//! | huge pages | 0 or 1 | 0 | `LOAM_HUGE_PAGES` |
//!
//! The purge delay is how long a freed slice stays resident before it is
//! decommitted: long enough that a program which frees and re-allocates in
//! quick succession does not pay for `madvise` and page faults each time,
//! short enough that an idle program's resident size falls back.

use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::ffi::CStr;

const DEFAULT_PURGE_DELAY_MS: u64 = 10;

static PURGE_DELAY_MS: AtomicU64 = AtomicU64::new(DEFAULT_PURGE_DELAY_MS);
/// The floor a client that frees in bursts set ([`hold_freed_memory`]).
static HOLD_MS: AtomicU64 = AtomicU64::new(0);
static HUGE_PAGES: AtomicBool = AtomicBool::new(false);
static READ_ENV: AtomicBool = AtomicBool::new(false);

/// Reads the environment once (the first time a heap is created). Uses
/// `getenv` because `std::env` allocates, and this runs inside the allocator.
pub(crate) fn init() {
    if READ_ENV.swap(true, Ordering::Relaxed) {
        return;
    }
    if let Some(v) = getenv(c"LOAM_PURGE_DELAY_MS") {
        match v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(ms) => PURGE_DELAY_MS.store(ms, Ordering::Relaxed),
            None => {
                warn(b"loam-heap: ignoring LOAM_PURGE_DELAY_MS: not a number of milliseconds\n")
            }
        }
    }
    if let Some(v) = getenv(c"LOAM_HUGE_PAGES") {
        match v.to_bytes() {
            b"0" => HUGE_PAGES.store(false, Ordering::Relaxed),
            b"1" => HUGE_PAGES.store(true, Ordering::Relaxed),
            _ => warn(b"loam-heap: ignoring LOAM_HUGE_PAGES: expected 0 or 1\n"),
        }
    }
}

fn getenv(name: &CStr) -> Option<&'static CStr> {
    // SAFETY: `name` is NUL-terminated; getenv returns null or a string that
    // lives as long as the environment is not modified (we only read it once,
    // at start-up).
    let p = unsafe { libc::getenv(name.as_ptr()) };
    // SAFETY: non-null results of getenv are NUL-terminated strings.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// Writes a message to stderr without allocating.
pub(crate) fn warn(msg: &[u8]) {
    // SAFETY: writing a valid buffer to fd 2.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// Whether segments ask for transparent huge pages.
#[inline]
pub(crate) fn huge_pages() -> bool {
    HUGE_PAGES.load(Ordering::Relaxed)
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
/// garbage collector sets it to about twice its cycle interval, so that
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
    std::time::Duration::from_millis(PURGE_DELAY_MS.load(Ordering::Relaxed))
}
