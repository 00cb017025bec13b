//! spawn: 100,000 processes parked in receive, then told to stop.
//! Figures: us_per_spawn, bytes_per_idle_proc_rss, us_per_exit.
//! `SPAWN_N=<n>` changes the count (for instruction counts under callgrind).

use graft::*;
use graft_benches::{perf_ctl, report, rss_bytes, wait_all_waiting};
use std::time::Instant;

fn main() {
    env_logger::init();
    let n: usize = std::env::var("SPAWN_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let node = Node::start(NodeConfig::new("127.0.0.1:0").max_processes(1_100_000)).expect("node");
    node.run(move || {
        let me = self_pid();
        let rss0 = rss_bytes();
        let t0 = Instant::now();
        let pids: Vec<Pid> = (0..n)
            .map(|_| {
                spawn(move || {
                    expect::<()>();
                    send(me, ());
                })
            })
            .collect();
        let t1 = Instant::now();
        // Make sure every process has run and is parked in receive.
        wait_all_waiting(&pids);
        let rss1 = rss_bytes();
        perf_ctl("enable");
        let t2 = Instant::now();
        for &p in &pids {
            send(p, ());
        }
        for _ in 0..n {
            expect::<()>();
        }
        let t3 = Instant::now();
        perf_ctl("disable");
        report(
            "spawn",
            "us_per_spawn",
            "us",
            (t1 - t0).as_secs_f64() * 1e6 / n as f64,
        );
        report(
            "spawn",
            "bytes_per_idle_proc_rss",
            "bytes",
            (rss1 - rss0) as f64 / n as f64,
        );
        report(
            "spawn",
            "us_per_exit",
            "us",
            (t3 - t2).as_secs_f64() * 1e6 / n as f64,
        );
    })
    .expect("bench");
    node.shutdown();
}
