//! idle: the CPU an idle node uses (the issue asks for < 1% of a core).
//! Starts a node, runs a burst of work, then measures the process's CPU time
//! over 3 s of idleness. Figure: cpu_percent.

use graft::*;
use graft_benches::report;
use std::time::{Duration, Instant};

/// utime + stime of this process, in seconds (from /proc/self/stat).
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses).
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 here.
    // USER_HZ is 100 on Linux.
    let hz = 100.0;
    (ticks(11) + ticks(12)) / hz
}

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node");
    node.run(|| {
        let me = self_pid();
        for i in 0..10_000u64 {
            spawn(move || send(me, i));
        }
        for _ in 0..10_000 {
            expect::<u64>();
        }
    })
    .expect("burst");
    std::thread::sleep(Duration::from_millis(200));
    let (c0, t0) = (cpu_seconds(), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let (c1, t1) = (cpu_seconds(), Instant::now());
    node.shutdown();
    report(
        "idle",
        "cpu_percent",
        "%",
        100.0 * (c1 - c0) / (t1 - t0).as_secs_f64(),
    );
}
