//! dist_pingpong: round trips to a process on a node in another OS process
//! (127.0.0.1). Figure: us_per_roundtrip.

use graft::*;
use graft_benches::{report, with_peer};
use std::time::Instant;

const N: u64 = 100_000;

fn main() {
    env_logger::init();
    with_peer(|node, peer| {
        node.run(move || {
            let pong = spawn_on(peer, (), |()| loop {
                let from: Pid = expect();
                send(from, ());
            })
            .expect("remote spawn");
            let me = self_pid();
            for _ in 0..1000 {
                send(pong, me);
                expect::<()>();
            }
            let t0 = Instant::now();
            for _ in 0..N {
                send(pong, me);
                expect::<()>();
            }
            let t1 = Instant::now();
            exit(pong, ExitReason::Kill);
            report(
                "dist_pingpong",
                "us_per_roundtrip",
                "us",
                (t1 - t0).as_secs_f64() * 1e6 / N as f64,
            );
        })
        .expect("bench");
    });
}
