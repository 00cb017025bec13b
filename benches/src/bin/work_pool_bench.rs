//! work_pool: the paper's distributed work pool (prime counting) on 1 and 2
//! worker nodes, each a separate OS process running this executable.
//! Figures: ms_1_node, ms_2_nodes, speedup_2_nodes (best of 3 runs each).
//!
//! The bin is `work_pool_bench` (the example it measures is `work_pool`).
//! The master re-executes itself as `work_pool_bench --worker --join ADDR
//! --cookie C` (mobile code only runs on an identical build), waits until
//! both workers are connected, and hands out units one at a time: a worker
//! asks, the master answers with a unit (a `MobileFnOnce<u64>` counting the
//! primes in a range) or `Done`. Units are coarse (about 40 ms each at one
//! node) so messaging stays well under 1% of the time.
//!
//! ```text
//! work_pool_bench [--to N] [--units U] [--runs R]
//! ```

use graft::*;
use graft_benches::report;
use graft_examples::work_pool;
use std::time::Instant;

fn main() {
    env_logger::init();
    let args = graft_examples::NodeArgs::from_env("work_pool");
    if args.get("--worker").is_some() {
        work_pool::serve(&args);
    }
    let to = args.num("--to").unwrap_or(12_000_000);
    let units = args.num("--units").unwrap_or(48u32).max(1);
    let runs = args.num("--runs").unwrap_or(3u64).max(1);
    let cookie = format!("work-pool-bench-{}", std::process::id());
    let node = Node::start(NodeConfig::new("127.0.0.1:0").cookie(&cookie)).expect("node");
    let (nodes, children) = work_pool::start_workers(&node, 2, &cookie);
    let mut best = [f64::INFINITY; 2];
    let mut counts = Vec::new();
    for _ in 0..runs {
        for (k, slot) in best.iter_mut().enumerate() {
            let on = nodes[..=k].to_vec();
            let t = Instant::now();
            counts.push(
                node.run(move || work_pool::pool(&on, to, units))
                    .expect("pool"),
            );
            *slot = slot.min(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    assert!(
        counts.windows(2).all(|w| w[0] == w[1]),
        "counts differ: {counts:?}"
    );
    node.shutdown();
    drop(children);
    report("work_pool", "ms_1_node", "ms", best[0]);
    report("work_pool", "ms_2_nodes", "ms", best[1]);
    report("work_pool", "speedup_2_nodes", "x", best[0] / best[1]);
}
