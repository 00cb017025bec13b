//! With no logger installed, a program's crashes, its supervisors' restarts
//! and give-ups, and nodes coming and going are printed to stderr.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the bin (hang guard 60 s); returns (stdout, stderr).
fn run(path: &str) -> (String, String) {
    let mut child = Command::new(path)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
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
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{path} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "{status}\n{out}\n{err}");
    (out, err)
}

#[test]
fn crashes_restarts_and_nodes_are_reported_on_stderr_with_no_logger() {
    let (out, err) = run(env!("CARGO_BIN_EXE_crash_report"));
    assert!(out.contains("worker died: boom"), "{out}");
    assert!(out.contains("done"), "{out}");
    // The plain process: one crash report with pid, name, initial call,
    // reason and panic location.
    let first = err
        .split("=CRASH REPORT====")
        .find(|r| r.contains("\"worker\""))
        .unwrap_or_else(|| panic!("no crash report for the worker:\n{err}"));
    for want in [
        "process: <",
        "initial call: examples/src/bin/crash_report.rs:",
        "ancestors: [<",
        "reason: boom",
        "panicked at: examples/src/bin/crash_report.rs:",
    ] {
        assert!(first.contains(want), "{want:?} missing in:\n{first}");
    }
    assert_eq!(
        err.matches("reason: boom").count(),
        1,
        "one report per crash:\n{err}"
    );
    // The supervised worker: three crashes, each reported once, and the
    // supervisor's own reports of the crashes and of giving up.
    assert_eq!(
        err.matches("reason: flaky worker failed").count(),
        3,
        "{err}"
    );
    assert!(err.contains("=SUPERVISOR REPORT===="), "{err}");
    assert!(err.contains("crashed: flaky worker failed"), "{err}");
    assert!(err.contains("max restart intensity"), "{err}");
    // Nodes up and down.
    assert!(err.contains(" connected to "), "{err}");
    assert!(err.contains(" lost "), "{err}");
}
