//! Helpers shared by the runtime's integration tests.

// Each test binary takes the helpers it needs.
#![allow(dead_code)]

/// One test at a time in a binary whose tests it serves: runtimes in one
/// process take turns at their cycles (one cycle lock), so a test whose
/// runtime holds a call open, or collects slowly (a debug build beside a
/// busy machine), holds up every other test's cycles, and their heaps
/// grow past any bound they check; and drop counts after `collect` are
/// exact only if no other test's thread holds a page run of ours (see
/// `collector.rs`).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long a test's step may take before it counts as deadlocked.
pub const WATCHDOG: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs `f` on a thread of its own and returns its result, or its panic
/// (resumed here); fails the test if it has not finished within
/// [`WATCHDOG`]: a deadlock is a failure, not a hung suite.
pub fn within<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(Ok(r)) => r,
        Ok(Err(payload)) => resume_unwind(payload),
        Err(_) => panic!("deadlock: {what} did not finish within {WATCHDOG:?}"),
    }
}

/// Runs a collection of `rt` on a thread of its own and panics unless it
/// completes within `timeout` (after a stall the tests provoke: the runtime
/// goes on).
pub fn assert_collects_within(rt: &loam_runtime::Runtime, timeout: std::time::Duration) {
    let before = rt.stats().cycles;
    let (tx, rx) = std::sync::mpsc::channel();
    let rt2 = rt.clone();
    std::thread::spawn(move || {
        rt2.collect();
        let _ = tx.send(());
    });
    rx.recv_timeout(timeout)
        .expect("a collection after the stall did not complete");
    assert!(rt.stats().cycles > before);
}

/// `sched_setaffinity` for the calling thread: it and the threads it starts
/// afterwards (a runtime's GC threads included) run on CPU `cpu` only.
#[cfg(target_os = "linux")]
pub fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed `cpu_set_t` is an empty set; `CPU_SET` writes within
    // it; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let r = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(
            r,
            0,
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The lowest-numbered CPU the calling thread may run on (CPU 0 is not in
/// every cpuset, or under `taskset -c 1`).
#[cfg(target_os = "linux")]
pub fn first_allowed_cpu() -> usize {
    // SAFETY: a zeroed `cpu_set_t` is an empty set that `sched_getaffinity`
    // fills (pid 0: the calling thread); `CPU_ISSET` reads within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let r = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        assert_eq!(
            r,
            0,
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        );
        (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .expect("the calling thread may run on some CPU")
    }
}

/// The text of a panic's payload: `panic!` with arguments gives a
/// `String`, without them a `&str`.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// This test binary again, to run test `name` alone in a child process
/// (`--exact`, one test thread, its output not captured) with the
/// environment `env`: the half of a test that needs a process of its own
/// (a fork, a closed or full pipe, a count of its stderr). The caller
/// chooses the child's stdio and how long to wait for it.
pub fn alone(name: &str, env: &[(&str, &str)]) -> std::process::Command {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .envs(env.iter().copied());
    child
}

/// Asserts that a child process (from [`alone`]) succeeded and said `want`
/// on its stdout; the failure shows what it said on both.
pub fn assert_child_says(out: &std::process::Output, want: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child failed ({}):\n{stderr}",
        out.status
    );
    assert!(stdout.contains(want), "{stdout}\n{stderr}");
}

#[path = "../../../heap/tests/support/knob.rs"]
mod knob;
#[allow(unused_imports)]
pub use knob::{flag_knob, knob};

/// This process's address space limited (`RLIMIT_AS`) to what it maps now
/// plus some room, until [`restore`](Self::restore) or the drop: where a
/// test makes the OS refuse memory or threads. Run such a test in a child
/// process ([`alone`]): the limit is the process's.
#[cfg(target_os = "linux")]
pub struct AddressLimit(libc::rlimit);

#[cfg(target_os = "linux")]
impl AddressLimit {
    /// Limits the address space to what the process maps now and `room`
    /// bytes more.
    pub fn tighten(room: u64) -> AddressLimit {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        let mut saved = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `saved` is a valid out-pointer.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut saved) }, 0);
        let tight = libc::rlimit {
            rlim_cur: ((vm_kib << 10) + room).min(saved.rlim_max),
            rlim_max: saved.rlim_max,
        };
        // SAFETY: `tight` is a valid rlimit for the call to read.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &tight) }, 0);
        AddressLimit(saved)
    }

    /// Puts the limit back as it was (again at the drop, harmlessly).
    pub fn restore(&self) {
        // SAFETY: the saved rlimit is valid for the call to read.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &self.0) }, 0);
    }
}

#[cfg(target_os = "linux")]
impl Drop for AddressLimit {
    fn drop(&mut self) {
        self.restore();
    }
}

/// A managed object whose destructor counts itself in the counter it
/// names: what a test reads to see which objects were freed.
#[derive(loam_runtime::Trace)]
#[trace(unsafe_drop)]
pub struct Counted(#[trace(skip)] pub &'static std::sync::atomic::AtomicUsize);

// SAFETY: the destructor touches no managed pointer.
unsafe impl loam_runtime::UnsafeDrop for Counted {}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the lending tests ask of another thread: it attaches to `rt` and
/// allocates about 24 MiB in one call, live until the call ends, then
/// returns the segments the process has mapped in all
/// (`loam_heap::HeapStats::segments_mapped_total`).
pub fn another_thread_allocates(rt: &loam_runtime::Runtime) -> u64 {
    let rt = rt.clone();
    std::thread::spawn(move || {
        let mut w = rt.attach();
        w.mutate(|mc| {
            let mut sum = 0;
            for i in 0..600_000_u64 {
                sum += mc.alloc([i; 4])[3];
            }
            assert_eq!(sum, 600_000 * 599_999 / 2);
        });
        loam_heap::stats().segments_mapped_total
    })
    .join()
    .unwrap()
}
