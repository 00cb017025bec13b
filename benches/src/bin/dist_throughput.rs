//! dist_throughput: 1,000,000 small messages one way to a process on a node
//! in another OS process; the receiver acks after the last one.
//! Figures: msgs_per_s, sender_done_ms.

use graft::*;
use graft_benches::{report, with_peer};
use std::time::Instant;

/// Messages sent; `GRAFT_BENCH_TICKS` overrides it (fewer, under valgrind).
fn ticks() -> u64 {
    std::env::var("GRAFT_BENCH_TICKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

fn main() {
    env_logger::init();
    with_peer(|node, peer| {
        let n = ticks();
        node.run(move || {
            let me = self_pid();
            let rcv = spawn_on(peer, me, |report_to| {
                for _ in 0..ticks() {
                    let _tick: u64 = expect();
                }
                send(report_to, String::from("ticks_done"));
            })
            .expect("remote spawn");
            let t0 = Instant::now();
            for i in 0..n {
                send(rcv, i);
            }
            let t1 = Instant::now();
            assert_eq!(expect::<String>(), "ticks_done");
            let t2 = Instant::now();
            report(
                "dist_throughput",
                "msgs_per_s",
                "msg_per_s",
                n as f64 / (t2 - t0).as_secs_f64(),
            );
            report(
                "dist_throughput",
                "sender_done_ms",
                "ms",
                (t1 - t0).as_secs_f64() * 1e3,
            );
        })
        .expect("bench");
    });
}
