//! Runs the paper's small programs and checks what they print.

mod common;

use common::{assert_has, run};

#[test]
fn ping_pong() {
    let out = run(env!("CARGO_BIN_EXE_ping_pong"), &["--rounds", "2000"]);
    assert_has(&out, "ping_pong: 2000 round trips");
    assert_has(&out, "stopped (normal)");
}

#[test]
fn apply_worker() {
    let out = run(env!("CARGO_BIN_EXE_apply_worker"), &[]);
    assert_has(&out, "runs on b@127.0.0.1");
    assert_has(
        &out,
        "(\\x -> x + offset) 41 = 42 (computed on b@127.0.0.1)",
    );
    assert_has(&out, "(3 + 2x^2) at 5 = 53 (computed on b@127.0.0.1)");
    assert_has(&out, "worker stopped (normal)");
}

#[test]
fn div_server() {
    let out = run(env!("CARGO_BIN_EXE_div_server"), &[]);
    // Good requests are served first, in order, though `Shutdown` came
    // before the last one; the divisions by zero wait in the mailbox.
    let served: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("div_server: ") && l.contains(" = "))
        .collect();
    assert_eq!(
        served,
        [
            "div_server: 10 / 2 = 5",
            "div_server: 9 / 3 = 3",
            "div_server: 100 / 7 = 14"
        ],
        "{out}"
    );
    assert_has(&out, "div_server: 7 / 0 left in the mailbox");
    assert_has(
        &out,
        "div_server: shutting down after 2 leftover request(s)",
    );
    assert_has(&out, "client: 1 / 0 -> error: division by zero");
    assert_has(&out, "client: 100 / 7 -> 14");
    assert_has(&out, "client: server stopped (normal)");
    let stop = out.find("shutting down").unwrap();
    assert!(out.find("100 / 7 = 14").unwrap() < stop, "{out}");
}

#[test]
fn monitor_cascade() {
    let out = run(env!("CARGO_BIN_EXE_monitor_cascade"), &["--length", "4"]);
    assert_has(&out, "chain p0 - p1 - p2 - p3 - guard");
    for (k, p) in ["p0", "p1", "p2", "p3"].iter().enumerate() {
        assert_has(&out, &format!("death {}: {p} (killed)", k + 1));
    }
    assert!(!out.contains("death 5"), "{out}");
    assert_has(
        &out,
        "guard trapped an exit from p3 (killed) and lives on: true",
    );
    assert_has(&out, "guard ended (normal)");
}
