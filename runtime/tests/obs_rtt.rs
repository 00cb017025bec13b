//! The heartbeat round trip per peer (issue 14): measured between two real
//! nodes, shown in the node statistics and in `/metrics`.

use graft::*;
use std::time::{Duration, Instant};

fn node(observer: bool) -> Node {
    let mut c = NodeConfig::new("127.0.0.1:0")
        .workers(1)
        .cookie("rtt")
        .heartbeat(Duration::from_millis(50));
    if observer {
        c = c.observer("127.0.0.1:0");
    }
    Node::start(c).unwrap()
}

/// Waits (hang guard only) until `n` has a round trip to its one peer.
fn rtt_of(n: &Node) -> u64 {
    let t = Instant::now();
    loop {
        let s = n.stats();
        assert_eq!(s.peers.len(), 1, "{s:?}");
        if let Some(us) = s.peers[0].heartbeat_rtt_us {
            return us;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no round trip after 60 s: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn both_ends_measure_a_plausible_heartbeat_round_trip() {
    let (a, b) = (node(true), node(false));
    a.connect(b.addr()).unwrap();
    // Both directions ping, also while traffic flows.
    let (tx, rx) = std::sync::mpsc::channel();
    let target = b.id();
    a.spawn(move || {
        let echo = spawn_on(target, (), |()| loop {
            let (from, n): (Pid, u32) = receive().on(|m: (Pid, u32)| m).wait();
            send(from, n);
        })
        .unwrap();
        for i in 0..200u32 {
            send(echo, (self_pid(), i));
            receive().on(|_: u32| ()).wait();
        }
        let _ = tx.send(());
    })
    .unwrap();
    rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let (ra, rb) = (rtt_of(&a), rtt_of(&b));
    // Plausible: more than nothing, less than the time a dead peer has
    // (a loopback round trip on a loaded machine, far from either bound).
    eprintln!("heartbeat round trip: {ra} µs one way round, {rb} µs the other");
    let dead_after_us = 3 * 50_000 * 20;
    for r in [ra, rb] {
        assert!(r >= 1 && r < dead_after_us, "{ra} µs / {rb} µs");
    }
    // In `/metrics`, as seconds, labelled with the peer.
    let text = observer::metrics_text(&a);
    let line = text
        .lines()
        .find(|l| l.starts_with("graft_dist_heartbeat_rtt_seconds{"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(&format!("peer=\"{}\"", b.name())), "{line}");
    let secs: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(secs > 0.0 && secs < 3.0, "{line}");
    a.shutdown();
    b.shutdown();
}
