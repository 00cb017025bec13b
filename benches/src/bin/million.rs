//! million: 1,000,000 processes alive at once, each parked in receive; then
//! all exit. Figures: bytes_per_idle_proc_rss, total_ms (to start them all).
//!
//! A million guarded stacks need two million kernel mappings: this bench
//! raises `vm.max_map_count` through `graft::ensure_map_count` (logged; it
//! needs root) and reports a clear error otherwise.

use graft::*;
use graft_benches::{report, rss_bytes, wait_all_waiting};
use std::time::Instant;

const N: usize = 1_000_000;

fn main() {
    env_logger::init();
    if let Err(e) = ensure_map_count(N) {
        eprintln!(
            "million: vm.max_map_count is {:?} and cannot be raised ({e}); \
             run `sysctl -w vm.max_map_count=2100000` as root",
            max_map_count()
        );
        std::process::exit(2);
    }
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node");
    node.run(|| {
        let me = self_pid();
        let rss0 = rss_bytes();
        let t0 = Instant::now();
        let mut pids = Vec::with_capacity(N);
        for _ in 0..N {
            match spawn_opts().spawn(move || {
                expect::<()>();
                send(me, ());
            }) {
                Ok(p) => pids.push(p),
                Err(e) => {
                    eprintln!("million: spawn failed after {} processes: {e}", pids.len());
                    std::process::exit(1);
                }
            }
        }
        wait_all_waiting(&pids);
        let t1 = Instant::now();
        let rss1 = rss_bytes();
        for &p in &pids {
            send(p, ());
        }
        for _ in 0..N {
            expect::<()>();
        }
        let t2 = Instant::now();
        report(
            "million",
            "bytes_per_idle_proc_rss",
            "bytes",
            (rss1 - rss0) as f64 / N as f64,
        );
        report("million", "total_ms", "ms", (t1 - t0).as_secs_f64() * 1e3);
        report("million", "exit_ms", "ms", (t2 - t1).as_secs_f64() * 1e3);
    })
    .expect("bench");
    node.shutdown();
}
