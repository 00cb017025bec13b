//! On the poller, a node's thread count does not depend on its peers: a
//! hub with 16 peers runs on its one I/O thread (and its tick thread). One test in this binary,
//! so that the process's thread count is ours to read.

mod common;

use common::*;
use graft_net::IoMode;

/// This process's threads (`Threads:` of /proc/self/status), less the
/// handshake key pool's (one per OS process, started at the first handshake
/// and kept: not a node's).
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let n: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let keys = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim() == "graft-net-keys")
        })
        .count();
    n - keys
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
fn a_node_with_16_peers_has_as_many_threads_as_with_none() {
    init_log();
    const PEERS: usize = 16;
    let before = threads();
    let (hub, rh) = start(config("hub", "c").io(IoMode::Poller));
    let peers: Vec<_> = (0..PEERS)
        .map(|i| start(config(&format!("p{i}"), "c").io(IoMode::Poller)))
        .collect();
    // One I/O thread and one tick thread per node, nothing else.
    wait_until("I/O threads", || threads() >= before + 2 * (1 + PEERS));
    let started = threads();
    assert_eq!(started, before + 2 * (1 + PEERS));

    for (t, _) in &peers {
        t.connect(hub.local_addr()).unwrap();
    }
    wait_until("all up", || hub.peers().len() == PEERS);
    // Frames both ways on every connection.
    for (t, r) in &peers {
        let p = t.peers()[0].clone();
        t.send(p.id, 40, b"to the hub").unwrap();
        r.wait_for("peer up", |ev| !ups(ev).is_empty());
    }
    for p in hub.peers() {
        hub.send(p.id, 41, b"from the hub").unwrap();
    }
    rh.wait_for("frames at the hub", |ev| count_frames(ev) == PEERS);
    for (_, r) in &peers {
        r.wait_for("frame from the hub", |ev| count_frames(ev) == 1);
    }
    assert_eq!(
        threads(),
        started,
        "connections must not start threads on the poller"
    );

    hub.shutdown();
    for (t, r) in &peers {
        r.wait_for("hub down", |ev| downs(ev).len() == 1);
        t.shutdown();
    }
    assert_eq!(rh.downs().len(), PEERS);
    assert_eq!(
        threads_settled(before),
        before,
        "threads left after shutdown"
    );
}
