//! pingpong: 1,000,000 round trips between two processes.
//! Figure: ns_per_roundtrip. `PINGPONG_N` sets the round trips (for
//! instruction counts under callgrind).

use graft::*;
use graft_benches::report;
use std::time::Instant;

const N: u64 = 1_000_000;

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node");
    node.run(|| {
        let pong = spawn(|| loop {
            let from: Pid = expect();
            send(from, ());
        });
        let me = self_pid();
        let n = std::env::var("PINGPONG_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(N);
        let t0 = Instant::now();
        for _ in 0..n {
            send(pong, me);
            expect::<()>();
        }
        let t1 = Instant::now();
        exit(pong, ExitReason::Kill);
        report(
            "pingpong",
            "ns_per_roundtrip",
            "ns",
            (t1 - t0).as_secs_f64() * 1e9 / n as f64,
        );
    })
    .expect("bench");
    node.shutdown();
}
