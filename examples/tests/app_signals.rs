//! The application runner under real signals: SIGTERM and SIGINT to the
//! `kv_app` bin stop its trees in reverse start order (every `terminate`
//! runs, in order, then each application's `stop`) and it exits 0; a child
//! stuck in `terminate` is killed after its shutdown time.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Starts `kv_app`, waits for its "ready" line, sends `signal`, and returns
/// every line it printed and its exit code (hang guards: 60 s each).
fn run_and_signal(signal: &str, stuck: bool) -> (Vec<String>, Option<i32>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kv_app"));
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    if stuck {
        cmd.env("KV_APP_STUCK", "1");
    }
    let mut child = cmd.spawn().expect("kv_app starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => {
                let ready = l.starts_with("ready:");
                lines.push(l);
                if ready {
                    break;
                }
            }
            Err(_) => {
                let _ = child.kill();
                panic!("kv_app never got ready: {lines:?}");
            }
        }
    }
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill runs");
    assert!(status.success());
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(60)) {
        lines.push(l);
    }
    for _ in 0..600 {
        if let Some(status) = child.try_wait().expect("wait") {
            return (lines, status.code());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("kv_app did not exit after SIG{signal}: {lines:?}");
}

const ORDER: [&str; 5] = [
    "terminate audit (shutdown)",
    "terminate front (shutdown)",
    "application api stopped",
    "terminate kv (shutdown, 1 keys)",
    "application store stopped",
];

#[test]
fn sigterm_stops_the_trees_in_reverse_order_and_exits_0() {
    let (lines, code) = run_and_signal("TERM", false);
    assert_eq!(&lines[1..], ORDER, "{lines:?}");
    assert_eq!(code, Some(0), "{lines:?}");
}

#[test]
fn sigint_does_the_same() {
    let (lines, code) = run_and_signal("INT", false);
    assert_eq!(&lines[1..], ORDER, "{lines:?}");
    assert_eq!(code, Some(0), "{lines:?}");
}

#[test]
fn a_stuck_child_is_killed_after_its_shutdown_time() {
    let (lines, code) = run_and_signal("TERM", true);
    // The stuck child (started last) is stopped first; its terminate never
    // returns, it is killed, and the rest stops in order.
    let mut want = vec!["terminate stuck (shutdown)"];
    want.extend(ORDER);
    assert_eq!(&lines[1..], want, "{lines:?}");
    assert_eq!(code, Some(0), "{lines:?}");
}
