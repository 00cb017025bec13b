//! The paper's distributed work pool: counting primes over an interval.
//!
//! The master splits `[0, N)` into units of work. A unit is a mobile
//! function (`MobileFnOnce<u64>`: code plus its `(lo, hi)` environment),
//! the paper's "unit of work modelled as a `ProcessM a` computation". The
//! master spawns one worker process on each worker node with `spawn_on`;
//! each worker asks for work, runs the unit it is handed, and asks again
//! with its result, until the master answers `Done`. The master monitors the
//! workers and hands a lost worker's unit to another one.
//!
//! Worker nodes are OS processes running *this* executable (mobile code
//! only runs on an identical build): the master re-executes itself as
//! `work_pool --worker --join MASTER --cookie C`, waits until all of them
//! are connected, runs the pool on 1, 2, ..., K nodes, checks every answer
//! against a sequential count, prints a speedup table, and kills and waits
//! for its children.
//!
//! ```text
//! work_pool [--nodes K] [--to N] [--units U]
//! ```

use graft::graph::MobileFnOnce;
use graft_otp::prelude::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A worker's request for work, carrying the result of its previous unit.
#[derive(Debug, Clone, Mobile)]
struct Ask {
    /// The worker.
    worker: Pid,
    /// `(unit, primes found)` of the unit it just finished.
    done: Option<(u32, u64)>,
}

/// The master's answer to an [`Ask`].
#[derive(Debug, Mobile)]
enum Work {
    /// Run this unit.
    Unit(u32, MobileFnOnce<u64>),
    /// No work left: stop.
    Done,
}

/// Is `n` prime? (Trial division: the point is to burn CPU evenly.)
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

/// The number of primes in `[lo, hi)`.
fn count_primes(lo: u64, hi: u64) -> u64 {
    (lo..hi).filter(|&n| is_prime(n)).count() as u64
}

/// A worker: asks the master for units until told `Done`.
fn worker(master: Pid) {
    let me = self_pid();
    let mut done = None;
    loop {
        send(master, Ask { worker: me, done });
        match expect::<Work>() {
            Work::Unit(id, unit) => done = Some((id, unit.call())),
            Work::Done => return,
        }
    }
}

/// Runs the pool on `nodes`: returns the total count.
fn pool(nodes: &[NodeId], to: u64, units: u32) -> u64 {
    let step = to.div_ceil(u64::from(units)).max(1);
    let mut queue: Vec<(u32, u64, u64)> = (0..units)
        .map(|i| (i, u64::from(i) * step, (u64::from(i + 1) * step).min(to)))
        .filter(|&(_, lo, hi)| lo < hi)
        .rev()
        .collect();
    let total_units = queue.len();
    let master = self_pid();
    let mut workers = Vec::new();
    for &n in nodes {
        let w = graft::spawn_on(n, master, worker).expect("spawn a worker");
        workers.push((w, monitor(w), None::<(u32, u64, u64)>));
    }
    let (mut sum, mut finished) = (0u64, 0usize);
    while finished < total_units {
        let msg = receive()
            .on(|a: Ask| Ok(a))
            .on(|d: ProcessDied| Err(d))
            .wait();
        match msg {
            Ok(Ask { worker, done }) => {
                let slot = workers.iter_mut().find(|w| w.0 == worker);
                let Some(slot) = slot else { continue };
                if let Some((_, count)) = done {
                    sum += count;
                    finished += 1;
                }
                slot.2 = queue.pop();
                match slot.2 {
                    Some((id, lo, hi)) => {
                        let unit = MobileFnOnce::new((lo, hi), |(lo, hi)| count_primes(lo, hi));
                        send(worker, Work::Unit(id, unit));
                    }
                    None => send(worker, Work::Done),
                }
            }
            Err(died) => {
                if let Some(i) = workers.iter().position(|w| w.1 == died.monitor) {
                    let (pid, _, unit) = workers.swap_remove(i);
                    if let Some(u) = unit {
                        eprintln!(
                            "work_pool: worker {pid} died ({}); unit {} goes back",
                            died.reason, u.0
                        );
                        queue.push(u);
                    }
                    assert!(!workers.is_empty(), "work_pool: every worker died");
                }
            }
        }
    }
    for (w, m, _) in workers {
        demonitor(m);
        send(w, Work::Done);
    }
    sum
}

/// Worker mode: join the master and serve until it goes away.
fn serve(args: &graft_examples::NodeArgs) -> ! {
    let join = args.join.expect("--worker needs --join");
    let node = Node::start(args.config().workers(1)).expect("worker node starts");
    let master = node.connect(join).unwrap_or_else(|e| {
        eprintln!("work_pool worker: cannot join {join}: {e}");
        std::process::exit(1)
    });
    // A worker never outlives its master (nor an hour).
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
    let args = graft_examples::NodeArgs::parse(std::env::args().skip(1)).unwrap_or_else(|e| {
        eprintln!("work_pool: {e}");
        std::process::exit(2)
    });
    if args.get("--worker").is_some() {
        serve(&args);
    }
    let num = |flag: &str, default: u64| -> u64 {
        args.get(flag)
            .and_then(|s| s.replace('_', "").parse().ok())
            .unwrap_or(default)
    };
    let k = num("--nodes", 2).max(1) as usize;
    let to = num("--to", 2_000_000);
    let units = num("--units", 64).clamp(1, u64::from(u32::MAX)) as u32;
    let cookie = format!("work-pool-{}", std::process::id());
    let node = Node::start(
        NodeConfig::new("127.0.0.1:0")
            .name("master@127.0.0.1")
            .cookie(&cookie),
    )
    .expect("master node starts");
    let exe = std::env::current_exe().expect("current_exe");
    let mut children = Children(Vec::new());
    for i in 0..k {
        let child = Command::new(&exe)
            .args(["--worker", "--join", &node.addr().to_string()])
            .args([
                "--cookie",
                &cookie,
                "--name",
                &format!("worker{i}@127.0.0.1"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start a worker process");
        children.0.push(child);
    }
    let t = Instant::now();
    while node.nodes().len() < k {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "work_pool: only {} of {k} worker nodes joined",
            node.nodes().len()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut workers = node.nodes();
    workers.sort();
    println!("work_pool: {k} worker node(s) joined; counting primes below {to} in {units} units");

    let mut rows = Vec::new();
    for n in 1..=k {
        let on = workers[..n].to_vec();
        let t = Instant::now();
        let count = node
            .run(move || pool(&on, to, units))
            .expect("the master finishes");
        rows.push((n, count, t.elapsed()));
    }
    let t = Instant::now();
    let expected = count_primes(0, to);
    let seq = t.elapsed();
    println!(
        "work_pool: sequential count {expected} in {} ms",
        seq.as_millis()
    );
    println!("work_pool: nodes  primes  time_ms  speedup");
    let base = rows[0].2.as_secs_f64();
    let mut ok = true;
    for (n, count, time) in &rows {
        println!(
            "work_pool: {n:>5}  {count:>6}  {:>7}  {:>7.2}",
            time.as_millis(),
            base / time.as_secs_f64()
        );
        ok &= *count == expected;
    }
    node.shutdown();
    drop(children);
    if ok {
        println!("work_pool: every result matches the sequential count");
    } else {
        println!("work_pool: MISMATCH against the sequential count {expected}");
        std::process::exit(1);
    }
}
