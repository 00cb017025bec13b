//! skynet: a 10-ary tree of 1,111,111 processes summing 0..999,999.
//! Figure: total_ms. `SKYNET_SIZE` (a power of 10) sets the leaves (for
//! instruction counts under callgrind).

use graft::*;
use graft_benches::report;
use std::time::Instant;

fn skynet(parent: Pid, num: u64, size: u64, div: u64) {
    if size == 1 {
        send(parent, num);
    } else {
        let me = self_pid();
        let sub = size / div;
        for i in 0..div {
            let n = num + i * sub;
            spawn(move || skynet(me, n, sub, div));
        }
        let mut sum = 0u64;
        for _ in 0..div {
            sum += expect::<u64>();
        }
        send(parent, sum);
    }
}

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0").max_processes(1_100_000)).expect("node");
    node.run(|| {
        let me = self_pid();
        let size: u64 = std::env::var("SKYNET_SIZE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let t0 = Instant::now();
        spawn(move || skynet(me, 0, size, 10));
        let sum = expect::<u64>();
        let t1 = Instant::now();
        assert_eq!(sum, size * (size - 1) / 2);
        report("skynet", "total_ms", "ms", (t1 - t0).as_secs_f64() * 1e3);
    })
    .expect("bench");
    node.shutdown();
}
