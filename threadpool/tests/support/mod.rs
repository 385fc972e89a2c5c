//! Helpers shared by the pool's integration tests.

// Each test binary takes the helpers it needs.
#![allow(dead_code)]

/// This test binary again, to run test `name` alone in a child process
/// (`--exact`, one test thread, its output not captured) with the
/// environment `env`: the half of a test that needs a process of its own
/// (a fork, a resource limit, a closed stderr). The caller chooses the
/// child's stdio and how long to wait for it.
pub fn alone(name: &str, env: &[(&str, &str)]) -> std::process::Command {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .envs(env.iter().copied());
    child
}

/// [`alone`], started with its stdout and stderr piped for the caller to
/// read ([`output_within`]).
pub fn spawn_alone(name: &str, env: &[(&str, &str)]) -> std::process::Child {
    alone(name, env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `f` on a thread of its own; fails the test if `f` has not
/// returned within `patience` (a hang, not a slow machine) or panicked.
pub fn within(what: &str, patience: std::time::Duration, f: impl FnOnce() + Send + 'static) {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = sender.send(());
    });
    match receiver.recv_timeout(patience) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("deadlock: {what} hung"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
    }
}

/// Waits for the started `child`'s output, killing it and failing the test
/// as `hung` if it has not exited within `patience`.
pub fn output_within(
    child: std::process::Child,
    patience: std::time::Duration,
    hung: &str,
) -> std::process::Output {
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    let Ok(out) = receiver.recv_timeout(patience) else {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
        panic!("{hung}");
    };
    out.unwrap()
}
