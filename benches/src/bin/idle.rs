//! idle: the CPU an idle node uses (the issue asks for < 1% of a core).
//! Starts a node, runs a burst of work, then measures the process's CPU time
//! over 3 s of idleness. Figures: cpu_percent, and wakeups_per_s (context
//! switches of all the process's threads over the same 3 s, a finer figure
//! than the CPU time's 10 ms ticks; `GRAFT_IDLE_THREADS=1` prints them per
//! thread on stderr).

use graft::*;
use graft_benches::{cpu_seconds, report};
use std::time::{Duration, Instant};

/// Context switches (voluntary and not) of each thread of this process,
/// by thread name.
fn switches() -> Vec<(String, u64)> {
    let mut v = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return v;
    };
    for e in dir.flatten() {
        let st = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let field = |k: &str| {
            st.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|x| x.trim().to_string())
                .unwrap_or_default()
        };
        let n = field("voluntary_ctxt_switches:")
            .parse::<u64>()
            .unwrap_or(0)
            + field("nonvoluntary_ctxt_switches:")
                .parse::<u64>()
                .unwrap_or(0);
        v.push((field("Name:"), n));
    }
    v
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
    let (s0, c0, t0) = (switches(), cpu_seconds(), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let (s1, c1, t1) = (switches(), cpu_seconds(), Instant::now());
    let secs = (t1 - t0).as_secs_f64();
    // Threads are matched by name and order (the same threads both times);
    // the measuring thread's own two sleeps are left out.
    let mut by_name: std::collections::BTreeMap<String, u64> = Default::default();
    for (i, (name, n)) in s1.iter().enumerate() {
        let before = s0.get(i).filter(|(m, _)| m == name).map_or(0, |x| x.1);
        if i > 0 {
            *by_name.entry(name.clone()).or_default() += n.saturating_sub(before);
        }
    }
    if std::env::var_os("GRAFT_IDLE_THREADS").is_some() {
        for (name, n) in &by_name {
            eprintln!("{name}: {:.1} wake-ups/s", *n as f64 / secs);
        }
    }
    let wakeups: u64 = by_name.values().sum();
    node.shutdown();
    report("idle", "cpu_percent", "%", 100.0 * (c1 - c0) / secs);
    report("idle", "wakeups_per_s", "count", wakeups as f64 / secs);
}
