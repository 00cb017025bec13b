//! `graft-node --observer` and `graft-node top` (issue 14): a node in
//! another OS process serves its observer, and `top` lists its processes.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn graft_node_serves_an_observer_and_top_lists_its_processes() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_graft-node"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--cookie",
            "cli",
            "--observer",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start graft-node");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || lines.next().expect("a line").expect("readable");
    let listen = next()
        .strip_prefix("listening on ")
        .expect("listening")
        .to_string();
    let _name = next();
    let observer = next();
    let web = observer
        .strip_prefix("observer on http://")
        .and_then(|a| a.strip_suffix('/'))
        .unwrap_or_else(|| panic!("{observer}"))
        .to_string();
    // Its metrics, over HTTP.
    let mut s = std::net::TcpStream::connect(&web).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(
        body.starts_with("HTTP/1.1 200") && body.contains("graft_processes{"),
        "{body}"
    );
    // top: one screen of its busiest processes; `keeper` is one.
    let out = common::run(
        env!("CARGO_BIN_EXE_graft-node"),
        &[
            "top", "--node", &listen, "--cookie", "cli", "--count", "2", "--every", "100",
        ],
    );
    assert!(out.contains("PID") && out.contains("INITIAL CALL"), "{out}");
    assert!(out.contains("keeper"), "{out}");
    assert!(out.contains("processes "), "{out}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn top_without_a_node_says_so() {
    let out = Command::new(env!("CARGO_BIN_EXE_graft-node"))
        .args(["top"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--node ADDR is required"));
}
