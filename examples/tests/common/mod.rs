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
    // Read both pipes while the child runs: a child that writes more than
    // a pipe holds would otherwise block, and be reported as hung.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let t = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{path} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    assert!(
        status.success(),
        "{path} failed: {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
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
