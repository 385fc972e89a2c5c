//! What the seed examples that compare memory managers share: the managers
//! as `GlobalAlloc` values, a child-process run per manager (a process's
//! peak memory cannot be split between managers), and medians.

use std::alloc::{GlobalAlloc, System};

// The benches' helpers: one median, one peak-memory reading.
#[allow(dead_code)]
#[path = "../../benches/support/mod.rs"]
mod common;
pub use common::{median, round_order};

/// This process's peak resident set in KiB (0 where `/proc` does not say).
pub fn peak_rss_kb() -> u64 {
    common::peak_rss_kb().unwrap_or(0)
}

/// A memory manager the examples allocate through.
#[derive(Clone, Copy)]
pub struct Heap {
    pub name: &'static str,
    pub alloc: &'static (dyn GlobalAlloc + Sync),
}

static LOAM_HEAP: loam::heap::LoamAlloc = loam::heap::LoamAlloc;
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
static SNMALLOC: snmalloc_rs::SnMalloc = snmalloc_rs::SnMalloc;

/// The system allocator first (the seeds' baseline), then loam's heap and
/// the scalable peers.
pub const HEAPS: [Heap; 5] = [
    Heap {
        name: "system",
        alloc: &System,
    },
    Heap {
        name: "loam heap",
        alloc: &LOAM_HEAP,
    },
    Heap {
        name: "mimalloc",
        alloc: &MIMALLOC,
    },
    Heap {
        name: "jemalloc",
        alloc: &JEMALLOC,
    },
    Heap {
        name: "snmalloc",
        alloc: &SNMALLOC,
    },
];

/// The heap named `name`.
pub fn heap(name: &str) -> Option<Heap> {
    HEAPS.iter().copied().find(|h| h.name == name)
}

/// Runs this example again as a child with `args`, and returns the
/// numbers of the `key value` lines it printed.
pub fn child(args: &[String]) -> Result<Vec<(String, f64)>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(args)
        .output()
        .map_err(|e| format!("cannot start a child run: {e}"))?;
    if !out.status.success() {
        // The status too: a child the OS killed printed nothing.
        return Err(format!(
            "a child run ({}) failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect())
}

/// The command line as `C`, or, where it is wrong, clap's message and the
/// whole usage on stderr and exit status 2 (clap alone names the usage
/// only for some mistakes). `--help` and `--version` print as clap does.
pub fn parse_args<C: clap::Parser>() -> C {
    match C::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            eprintln!("\n{}", C::command().render_usage());
            std::process::exit(2)
        }
        Err(e) => e.exit(),
    }
}

/// Lets a write to a closed stdout end the process quietly, as `head`
/// expects of the program before it (`prog | head -3`): Rust ignores
/// SIGPIPE, and `println!` then panics with "failed printing to stdout".
pub fn quiet_sigpipe() {
    // SAFETY: restores the default action of one signal; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Restricts this process (and the threads it starts after) to `cpus`.
#[allow(dead_code)] // not every example pins
pub fn set_affinity(cpus: &[usize]) -> Result<(), String> {
    // A zeroed cpu_set_t is the empty set; CPU_SET and
    // sched_setaffinity take a valid pointer to it.
    // SAFETY: as just said.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(format!("CPU {c} is out of range"));
            }
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            return Err(format!(
                "cannot run on {cpus:?}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// The CPUs this process may run on.
#[allow(dead_code)]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: as in `set_affinity`; CPU_ISSET reads the set it was given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}
