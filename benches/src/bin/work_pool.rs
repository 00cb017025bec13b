//! work_pool: the paper's distributed work pool (prime counting) on 1 and 2
//! worker nodes, each a separate OS process running this executable.
//! Figures: ms_1_node, ms_2_nodes, speedup_2_nodes (best of 3 runs each).
//!
//! The master re-executes itself as `work_pool --worker --join ADDR
//! --cookie C` (mobile code only runs on an identical build), waits until
//! both workers are connected, and hands out units one at a time: a worker
//! asks, the master answers with a unit (a `MobileFnOnce<u64>` counting the
//! primes in a range) or `Done`. Units are coarse (about 40 ms each at one
//! node) so messaging stays well under 1% of the time.
//!
//! ```text
//! work_pool [--to N] [--units U] [--runs R]
//! ```

use graft::graph::MobileFnOnce;
use graft::*;
use graft_benches::report;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A worker's request for work, with the result of its previous unit.
#[derive(Debug, Clone, Mobile)]
struct Ask {
    worker: Pid,
    done: Option<u64>,
}

/// The master's answer to an [`Ask`].
#[derive(Debug, Mobile)]
enum Work {
    Unit(MobileFnOnce<u64>),
    Done,
}

fn is_prime(n: u64) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n.is_multiple_of(2) {
        return false;
    }
    let mut d = 3;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

fn count_primes(lo: u64, hi: u64) -> u64 {
    (lo..hi).filter(|&n| is_prime(n)).count() as u64
}

fn worker(master: Pid) {
    let me = self_pid();
    let mut done = None;
    loop {
        send(master, Ask { worker: me, done });
        match expect::<Work>() {
            Work::Unit(unit) => done = Some(unit.call()),
            Work::Done => return,
        }
    }
}

/// Runs the pool on `nodes` and returns the total count.
fn pool(nodes: &[NodeId], to: u64, units: u64) -> u64 {
    let step = to.div_ceil(units).max(1);
    let mut queue: Vec<(u64, u64)> = (0..units)
        .map(|i| (i * step, ((i + 1) * step).min(to)))
        .filter(|&(lo, hi)| lo < hi)
        .rev()
        .collect();
    let total = queue.len();
    let master = self_pid();
    let workers: Vec<Pid> = nodes
        .iter()
        .map(|&n| spawn_on(n, master, worker).expect("spawn a worker"))
        .collect();
    let (mut sum, mut finished) = (0, 0);
    while finished < total {
        let Ask { worker, done } = expect_timeout(Duration::from_secs(120)).expect("a worker asks");
        if let Some(c) = done {
            sum += c;
            finished += 1;
        }
        match queue.pop() {
            Some((lo, hi)) => send(
                worker,
                Work::Unit(MobileFnOnce::new((lo, hi), |(lo, hi)| count_primes(lo, hi))),
            ),
            None => send(worker, Work::Done),
        }
    }
    for w in workers {
        send(w, Work::Done);
    }
    sum
}

fn flag(args: &[String], name: &str) -> Option<String> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

/// Worker mode: join the master and serve until it goes away.
fn serve(args: &[String]) -> ! {
    let join = flag(args, "--join").expect("--join").parse().expect("addr");
    let cookie = flag(args, "--cookie").unwrap_or_default();
    let node = Node::start(NodeConfig::new("127.0.0.1:0").cookie(&cookie).workers(1))
        .expect("worker node");
    let master = node.connect(join).expect("join the master");
    let start = Instant::now();
    while node.nodes().contains(&master) && start.elapsed() < Duration::from_secs(3600) {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::process::exit(0)
}

/// Kills and reaps the worker processes, even on a panic.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

fn main() {
    env_logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--worker") {
        serve(&args);
    }
    let num = |name: &str, default: u64| {
        flag(&args, name)
            .and_then(|s| s.replace('_', "").parse().ok())
            .unwrap_or(default)
    };
    let to = num("--to", 12_000_000);
    let units = num("--units", 48).max(1);
    let runs = num("--runs", 3).max(1);
    let cookie = format!("work-pool-bench-{}", std::process::id());
    let node = Node::start(NodeConfig::new("127.0.0.1:0").cookie(&cookie)).expect("node");
    let exe = std::env::current_exe().expect("current_exe");
    let mut children = Children(Vec::new());
    for _ in 0..2 {
        children.0.push(
            Command::new(&exe)
                .args(["--worker", "--join", &node.addr().to_string()])
                .args(["--cookie", &cookie])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("start a worker process"),
        );
    }
    let t = Instant::now();
    while node.nodes().len() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "workers did not join"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut nodes = node.nodes();
    nodes.sort();
    let mut best = [f64::INFINITY; 2];
    let mut counts = Vec::new();
    for _ in 0..runs {
        for (k, slot) in best.iter_mut().enumerate() {
            let on = nodes[..=k].to_vec();
            let t = Instant::now();
            counts.push(node.run(move || pool(&on, to, units)).expect("pool"));
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
