//! The examples' command lines as a user meets them: bad input prints what
//! is wrong and the usage and exits with status 2, `--help` exits with 0,
//! and the smallest valid sizes run. `cargo test` builds the package's
//! examples beside its tests (`target/<profile>/examples/`), so each case
//! runs the real binary; every case here exits at once or runs a tiny size.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The example `name`, as `cargo test` built it.
fn example(name: &str) -> Command {
    // target/<profile>/deps/<this test> → target/<profile>/examples/<name>
    let exe = std::env::current_exe().expect("the test's own path");
    let dir: PathBuf = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a target directory")
        .join("examples");
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} was not built: `cargo test -p loam` builds the examples (a run filtered \
         to this test alone with `--test` does not; `cargo build --examples` first)",
        path.display()
    );
    Command::new(path)
}

fn run(name: &str, args: &[&str]) -> Output {
    run_with(name, args, None)
}

/// `name` with `args`, and `LOAM_HEAP_LIMIT` set to `limit` (else unset).
fn run_with(name: &str, args: &[&str], limit: Option<&str>) -> Output {
    let mut command = example(name);
    command.args(args).env_remove("LOAM_HEAP_LIMIT");
    if let Some(limit) = limit {
        command.env("LOAM_HEAP_LIMIT", limit);
    }
    command
        .output()
        .unwrap_or_else(|e| panic!("{name} {args:?}: {e}"))
}

/// Exits with status 2, saying `what` and the usage on stderr.
fn refuses(name: &str, args: &[&str], what: &str) {
    let out = run(name, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{name} {args:?}: {stderr}");
    assert!(stderr.contains(what), "{name} {args:?}: stderr:\n{stderr}");
    assert!(
        stderr.to_lowercase().contains("usage"),
        "{name} {args:?}: no usage:\n{stderr}"
    );
}

#[test]
fn gc_speed_tester_refuses_bad_flags_with_the_usage() {
    refuses("gc_speed_tester", &["--seconds", "0"], "--seconds");
    refuses("gc_speed_tester", &["--seconds", "inf"], "--seconds");
    refuses("gc_speed_tester", &["--workers", "0"], "--workers");
    refuses("gc_speed_tester", &["--heap", "nope"], "--heap");
    refuses("gc_speed_tester", &["--cpus", "99999"], "--cpus");
    refuses("gc_speed_tester", &["--cpus", "1-0"], "--cpus");
    refuses(
        "gc_speed_tester",
        &["--svg", "/nonexistent-loam-dir/chart.svg"],
        "cannot write",
    );
}

#[test]
fn a_bad_heap_limit_in_the_environment_is_an_error_not_a_panic() {
    let out = run_with(
        "gc_speed_tester",
        &["--heap", "loam", "--seconds", "0.1"],
        Some("abc"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("LOAM_HEAP_LIMIT"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn the_churn_examples_and_custom_collection_check_their_arguments() {
    for name in ["long_list", "many_weak"] {
        refuses(name, &["0"], "not a count");
        refuses(name, &["10", "inf"], "seconds");
        refuses(name, &["10", "1", "extra"], "unexpected argument");
        let help = run(name, &["--help"]);
        assert_eq!(help.status.code(), Some(0), "{name} --help");
        assert!(
            String::from_utf8_lossy(&help.stdout).contains("usage"),
            "{name} --help"
        );
    }
    refuses("custom_collection", &["1500"], "multiple of 1000");
    refuses("custom_collection", &["999"], "multiple of 1000");
    refuses("custom_collection", &["1000", "2"], "unexpected argument");
    let help = run("custom_collection", &["--help"]);
    assert_eq!(help.status.code(), Some(0));
}

#[test]
fn alloc_bench_and_tree_sum_refuse_bad_flags() {
    refuses("alloc_bench", &["--workload", "nope"], "nope");
    refuses("alloc_bench", &["--scale", "0"], "--scale");
    refuses("tree_sum", &["--nodes", "2"], "--nodes");
    refuses("tree_sum", &["--threads", "0"], "--threads");
}

/// The smallest tree `tree_sum` takes runs every version (it overflowed
/// the stack below the parallel sums' frontier depth).
#[test]
fn tree_sum_runs_the_smallest_trees() {
    for nodes in ["3", "10", "100"] {
        let out = run(
            "tree_sum",
            &["--nodes", nodes, "--rounds", "1", "--threads", "2"],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "tree_sum --nodes {nodes}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("OptimizedParallelSumTree"), "{stdout}");
    }
}
