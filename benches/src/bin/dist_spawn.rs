//! dist_spawn: 10,000 remote spawns, each replying to its spawner.
//! Figure: us_per_remote_spawn_reply.

use graft::*;
use graft_benches::{report, with_peer};
use std::time::Instant;

const N: u64 = 10_000;

fn rspawn(peer: NodeId, n: u64) {
    let me = self_pid();
    for _ in 0..n {
        let pid = spawn_on(peer, me, |to| send(to, self_pid())).expect("remote spawn");
        let got: Pid = expect();
        assert_eq!(got, pid);
    }
}

fn main() {
    env_logger::init();
    with_peer(|node, peer| {
        node.run(move || {
            rspawn(peer, 100);
            let t0 = Instant::now();
            rspawn(peer, N);
            let t1 = Instant::now();
            report(
                "dist_spawn",
                "us_per_remote_spawn_reply",
                "us",
                (t1 - t0).as_secs_f64() * 1e6 / N as f64,
            );
        })
        .expect("bench");
    });
}
