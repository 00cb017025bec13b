//! Running example programs from tests.
#![allow(dead_code, unreachable_pub)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs a bin with `args` (a hang guard kills it after `limit`); returns its
/// stdout, failing the test unless it exited successfully.
pub fn run_for(path: &str, args: &[&str], limit: Duration) -> String {
    let mut child = Command::new(path)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let t = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{path} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{path} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// [`run_for`] with a 60 s hang guard.
pub fn run(path: &str, args: &[&str]) -> String {
    run_for(path, args, Duration::from_secs(60))
}

/// Fails the test unless `out` contains `line`.
pub fn assert_has(out: &str, line: &str) {
    assert!(out.contains(line), "missing {line:?} in:\n{out}");
}
