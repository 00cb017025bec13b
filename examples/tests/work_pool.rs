//! Runs the distributed work pool with worker nodes as OS processes.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn work_pool_counts_primes_on_two_nodes() {
    let path = env!("CARGO_BIN_EXE_work_pool");
    let mut child = Command::new(path)
        .args(["--nodes", "2", "--to", "300000", "--units", "24"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("work_pool starts");
    let t = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("work_pool hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "work_pool failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // pi(300 000) = 25 997.
    assert!(stdout.contains("2 worker node(s) joined"), "{stdout}");
    assert!(stdout.contains("sequential count 25997"), "{stdout}");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" 25997 ") && !l.contains("sequential"))
        .collect();
    assert_eq!(rows.len(), 2, "one row per node count:\n{stdout}");
    assert!(
        stdout.contains("every result matches the sequential count"),
        "{stdout}"
    );
}
