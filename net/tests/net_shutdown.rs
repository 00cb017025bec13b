//! Shutdown joins every thread the transport started. One test in this
//! binary, so that the process's thread count is ours to read.

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::*;
use graft_net::{IoMode, NetError};

/// This process's threads, less the handshake key pool's (one per OS
/// process, started at the first handshake and kept: not a node's).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .map_or(true, |c| c.trim() != "graft-net-keys")
        })
        .count()
}

/// The thread count once it has settled back to `want`, or what it is after
/// 2 s (a hang guard): `join` returns when the kernel clears the thread's
/// id, a moment before the kernel takes it out of `/proc/self/task`.
fn threads_settled(want: usize) -> usize {
    let t = std::time::Instant::now();
    while threads() != want && t.elapsed() < std::time::Duration::from_secs(2) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    threads()
}

#[test]
fn shutdown_joins_all_threads_and_reports_each_peer_down_once() {
    init_log();
    let before = threads();

    let nodes: Vec<_> = ["x", "y", "z"]
        .iter()
        .map(|n| start(config(n, "c")))
        .collect();
    for i in 0..3 {
        for j in 0..3 {
            if i != j {
                nodes[i].0.connect(nodes[j].0.local_addr()).unwrap();
            }
        }
    }
    for (t, r) in &nodes {
        wait_until("full mesh", || t.peers().len() == 2);
        assert_eq!(r.ups().len(), 2);
        for p in t.peers() {
            t.send(p.id, 60, b"hi").unwrap();
        }
    }
    for (_, r) in &nodes {
        r.wait_for("frames", |ev| count_frames(ev) == 2);
    }
    // A client stuck in the handshake and one that sent half a frame.
    let _idle = TcpStream::connect(nodes[0].0.local_addr()).unwrap();
    let mut half = TcpStream::connect(nodes[1].0.local_addr()).unwrap();
    half.write_all(&[0, 0, 0, 50, 1, 0, 1]).unwrap();
    // Threads: 1 acceptor per node, 1 reader + 1 writer per peer. Poller:
    // 1 I/O thread and 1 tick thread per node. The two pending handshakes hold no thread
    // (the acceptor drives them).
    wait_until("handshakes pending", || {
        nodes[0].0.handshake_stats().pending == 1 && nodes[1].0.handshake_stats().pending == 1
    });
    let per_node = match config("q", "c").io_mode() {
        IoMode::Threads => 1 + 2 * 2,
        _ => 2,
    };
    wait_until("threads started", || threads() >= before + 3 * per_node);
    assert_eq!(threads(), before + 3 * per_node);

    for (t, _) in &nodes {
        t.shutdown();
    }
    assert_eq!(
        threads_settled(before),
        before,
        "threads left after shutdown"
    );
    for (t, r) in &nodes {
        let downs = r.downs();
        assert_eq!(downs.len(), 2, "one peer_down per peer");
        let mut ids: Vec<_> = downs.iter().map(|(p, _)| p.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), 2);
        assert!(t.peers().is_empty());
        assert!(matches!(
            t.connect(nodes[0].0.local_addr()),
            Err(NetError::Shutdown)
        ));
        t.shutdown(); // idempotent
    }

    // Dropping the last handle shuts down as well.
    let (t, _r) = start(config("w", "c"));
    assert!(threads() > before);
    drop(t);
    assert_eq!(threads_settled(before), before);
}
