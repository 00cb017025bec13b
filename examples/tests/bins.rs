//! Runs the example programs and checks what they print.

mod common;

use common::assert_has;

fn run(path: &str) -> String {
    common::run(path, &[])
}

#[test]
fn counter() {
    let out = run(env!("CARGO_BIN_EXE_counter"));
    assert_has(&out, "counter: started as");
    assert_has(&out, "counter: 10 clients added 1000");
    assert_has(&out, "counter: value = 1000");
    assert_has(&out, "counter: reset from 1000");
    assert_has(&out, "counter: value = 0");
    assert_has(&out, "counter: stopping (normal) at 0");
    assert_has(
        &out,
        "counter: after stop, a call fails: no such gen_server",
    );
    assert_has(&out, "counter: remote counter runs on the other node: true");
    assert_has(&out, "counter: remote value = 155");
}

#[test]
fn supervision_tree() {
    let out = run(env!("CARGO_BIN_EXE_supervision_tree"));
    for line in [
        "starting the tree",
        "+ counter started",
        "+ db started",
        "+ cache started",
        "counter is at 4",
        "injecting a crash into counter",
        "- counter stopped: counter was told to crash",
        "the caller saw: gen_server died during the call: counter was told to crash",
        "counter restarted with fresh state: 1",
        "injecting a crash into storage/db",
        "- cache stopped: shutdown",
        "injecting a crash into storage/cache",
        "storage now runs: db, cache",
        "the tree survived 3 crashes; shutting it down",
        "root stopped: shutdown",
        "done",
    ] {
        assert_has(&out, line);
    }
    // Started three times each by the end: db (twice), cache (three times).
    assert_eq!(out.matches("+ cache started").count(), 3, "{out}");
    assert_eq!(out.matches("+ db started").count(), 2, "{out}");
}

#[test]
fn demo() {
    let out = run(env!("CARGO_BIN_EXE_demo"));
    for line in [
        "alpha sees 2 peers (full mesh)",
        "alpha got: hello from beta (3/3)",
        "interesting numbers in 1..=1,000,000: 12987",
        "gamma applied |x| x*3+1 to 14: 43",
        "on beta counts 42",
        "died: counter told to crash",
        "the supervisor restarted it as",
        "reason: noconnection }",
        "alpha's monitor on",
        "fired: noconnection",
        "rejoined: the same counter",
        "demo finished",
    ] {
        assert_has(&out, line);
    }
}
