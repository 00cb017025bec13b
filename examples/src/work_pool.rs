//! The paper's distributed work pool: counting primes over an interval (used
//! by the `work_pool` bin and the `work_pool` bench).
//!
//! The master splits `[0, N)` into units of work. A unit is a mobile
//! function (`MobileFnOnce<u64>`: code plus its `(lo, hi)` environment),
//! the paper's "unit of work modelled as a `ProcessM a` computation". The
//! master spawns one worker process on each worker node with `spawn_on`;
//! each worker asks for work, runs the unit it is handed, and asks again
//! with its result, until the master answers `Done`. The master monitors the
//! workers and hands a lost worker's unit to another one.
//!
//! Worker nodes are OS processes running *the same* executable (mobile code
//! only runs on an identical build): [`start_workers`] re-executes the
//! program as `PROGRAM --worker --join MASTER --cookie C`, whose `main`
//! calls [`serve`].

use graft::graph::MobileFnOnce;
use graft_otp::prelude::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A worker's request for work, carrying the result of its previous unit.
#[derive(Debug, Clone, Mobile)]
pub struct Ask {
    /// The worker.
    pub worker: Pid,
    /// `(unit, primes found)` of the unit it just finished.
    pub done: Option<(u32, u64)>,
}

/// The master's answer to an [`Ask`].
#[derive(Debug, Mobile)]
pub enum Work {
    /// Run this unit.
    Unit(u32, MobileFnOnce<u64>),
    /// No work left: stop.
    Done,
}

/// Is `n` prime? (Trial division: the point is to burn CPU evenly.)
pub fn is_prime(n: u64) -> bool {
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
pub fn count_primes(lo: u64, hi: u64) -> u64 {
    (lo..hi).filter(|&n| is_prime(n)).count() as u64
}

/// A worker: asks the master for units until told `Done`.
pub fn worker(master: Pid) {
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

/// Runs the pool on `nodes` (from inside a process): returns the number of
/// primes below `to`, counted in `units` units of work.
pub fn pool(nodes: &[NodeId], to: u64, units: u32) -> u64 {
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

/// Worker mode: join the master (`--join`) and serve until it goes away.
pub fn serve(args: &crate::NodeArgs) -> ! {
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
#[derive(Debug)]
pub struct Children(Vec<Child>);

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

/// Starts `k` worker OS processes (this executable, `--worker`) that join
/// `node`, and waits until all have joined. Returns their node ids (sorted)
/// and the processes, which are killed when the handle is dropped.
///
/// # Panics
///
/// When a worker cannot be started or the workers do not join in 30 s.
pub fn start_workers(node: &Node, k: usize, cookie: &str) -> (Vec<NodeId>, Children) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut children = Children(Vec::new());
    for i in 0..k {
        let child = Command::new(&exe)
            .args(["--worker", "--join", &node.addr().to_string()])
            .args([
                "--cookie",
                cookie,
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
    let mut nodes = node.nodes();
    nodes.sort();
    (nodes, children)
}
