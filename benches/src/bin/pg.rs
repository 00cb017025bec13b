//! pg: how long a join on one node takes to be seen on three nodes (the
//! joining node and two others, three nodes in this OS process over
//! 127.0.0.1). Figure: us_to_converge (mean over the rounds; each round
//! joins a new group and polls `get_members` on the two other nodes).

use graft::*;
use graft_benches::report;
use graft_otp::pg;
use std::time::{Duration, Instant};

const ROUNDS: usize = 300;
const WARMUP: usize = 20;

fn main() {
    env_logger::init();
    let cfg = || NodeConfig::new("127.0.0.1:0").cookie("pg-bench").workers(2);
    let nodes: Vec<Node> = (0..3).map(|_| Node::start(cfg()).expect("node")).collect();
    for n in &nodes[1..] {
        nodes[0].connect(n.addr()).expect("connect");
    }
    let t = Instant::now();
    while nodes.iter().any(|n| n.nodes().len() < 2) {
        assert!(t.elapsed() < Duration::from_secs(20), "no mesh");
        std::thread::sleep(Duration::from_millis(5));
    }
    for n in &nodes {
        n.run(|| pg::start().map(|_| ()))
            .expect("run")
            .expect("pg scope");
    }
    // Let the scopes discover each other.
    std::thread::sleep(Duration::from_millis(200));
    let member = nodes[0]
        .spawn(|| loop {
            expect::<()>();
        })
        .expect("member");
    let (tx, rx) = std::sync::mpsc::channel::<Instant>();
    let mut total = Duration::ZERO;
    for round in 0..WARMUP + ROUNDS {
        let group = format!("g{round}");
        for n in &nodes[1..] {
            let (g, tx) = (group.clone(), tx.clone());
            n.spawn(move || {
                while pg::get_members(pg::DEFAULT_SCOPE, &g).is_empty() {
                    yield_now();
                }
                let _ = tx.send(Instant::now());
            })
            .expect("poller");
        }
        let g = group.clone();
        let t0 = nodes[0]
            .run(move || {
                let t0 = Instant::now();
                pg::join(pg::DEFAULT_SCOPE, &g, member).expect("join");
                t0
            })
            .expect("join");
        let seen = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(20)).expect("seen"))
            .max()
            .expect("two");
        if round >= WARMUP {
            total += seen.saturating_duration_since(t0);
        }
    }
    report(
        "pg",
        "us_to_converge",
        "us",
        total.as_secs_f64() * 1e6 / ROUNDS as f64,
    );
    for n in nodes {
        n.shutdown();
    }
}
