//! ring: 3,000 processes in a ring, a token around it 100 times.
//! Figures: ns_per_hop, setup_ms_total. `RING_M` sets the laps (for
//! instruction counts under callgrind).

use graft::*;
use graft_benches::report;
use std::time::Instant;

const RING_N: usize = 3_000;
const RING_M: u64 = 100;

fn laps() -> u64 {
    std::env::var("RING_M")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RING_M)
}

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node");
    node.run(|| {
        let main = self_pid();
        let t0 = Instant::now();
        let pids: Vec<Pid> = (0..RING_N)
            .map(|_| {
                spawn(move || {
                    let next: Pid = expect();
                    loop {
                        match expect::<u64>() {
                            0 => send(main, "ring_done"),
                            k => send(next, k - 1),
                        }
                    }
                })
            })
            .collect();
        for (i, &p) in pids.iter().enumerate() {
            send(p, pids[(i + 1) % RING_N]);
        }
        let t1 = Instant::now();
        let hops = RING_N as u64 * laps();
        send(pids[0], hops);
        assert_eq!(expect::<&str>(), "ring_done");
        let t2 = Instant::now();
        for &p in &pids {
            exit(p, ExitReason::Kill);
        }
        report(
            "ring",
            "setup_us_per_proc",
            "us",
            (t1 - t0).as_secs_f64() * 1e6 / RING_N as f64,
        );
        report(
            "ring",
            "setup_ms_total",
            "ms",
            (t1 - t0).as_secs_f64() * 1e3,
        );
        report(
            "ring",
            "ns_per_hop",
            "ns",
            (t2 - t1).as_secs_f64() * 1e9 / hops as f64,
        );
    })
    .expect("bench");
    node.shutdown();
}
