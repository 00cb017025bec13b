//! cluster: N nodes on loopback in a few OS processes (the cluster's shape,
//! not its messages). For each N (16 and 64; `GRAFT_CLUSTER_N=16,64,128`
//! to choose) it prints, with the N in the metric's name:
//!
//! - `formation_ms_nN`: from starting the OS processes until every node
//!   sees the N-1 others (they find each other through discovery: static
//!   seeds naming the first node of each hosting process, as a DNS name
//!   lists a few pods, then the mesh's own transitive connects; those first
//!   nodes themselves join through the first host's, so that one cluster
//!   forms);
//! - `started_ms_nN`: from starting the OS processes until every host has
//!   started all its nodes (each host starts its nodes one after another,
//!   so at N = 1,000 on two cores a good part of `formation_ms` is this:
//!   see "where the formation time goes" in `docs/decisions.md`);
//! - `connections_per_node_nN`, `threads_per_node_nN`, `rss_mb_per_node_nN`
//!   (threads and RSS of the hosting processes, divided by their nodes);
//! - `heartbeat_cpu_percent_nN`: CPU of the idle cluster over 2 s
//!   (`GRAFT_CLUSTER_IDLE_S`), per node, in percent of one core;
//! - `detect_ms_nN`: a node is killed (`SIGKILL` of a hosting process that
//!   holds that one node: the kernel closes its sockets at once), until
//!   every other node has dropped it;
//! - `detect_silent_ms_nN`: a node halts with its sockets open (`SIGSTOP`
//!   of another one-node host: its kernel still accepts and acknowledges,
//!   nothing answers, as a hung machine), until every other node has
//!   dropped it: the dead window, the probe and the flood;
//! - `detect_host_ms_nN`: a hosting process of N/4 nodes is killed
//!   (`SIGKILL`), until every other node has dropped all of them. At
//!   N = 1,000 its kernel takes about 5 s to tear down 250 nodes before it
//!   closes their sockets, so most are found as silent peers, all at once.
//!
//! `GRAFT_CLUSTER_TOPOLOGY=partial` runs the nodes on the partial overlay
//! (`Topology::Partial`; the metric names then end in `_partial`); the
//! default is the full mesh. With the overlay, "sees" means membership
//! (`Node::nodes`) and the connections are what each node holds.
//! `GRAFT_CLUSTER_HEARTBEAT_MS=2000` gives the nodes that heartbeat tick
//! (`NodeConfig::heartbeat`; the names then end in `_hb2000`): on this
//! two-core VM an idle 1,000-node cluster takes about one core, half of it
//! heartbeats at the default 1 s tick (see "What an idle overlay costs" in
//! `docs/decisions.md`).
//!
//! The parent re-executes itself as `cluster --host K --nodes M --seeds
//! ADDR,... --n N`: each host starts M nodes, prints `started <unix ms>`
//! once they are started and `ready <unix ms>` once all its
//! nodes see N-1 peers, then answers `stats` and `watch G` (report once
//! every node has G fewer peers) on stdin. The first `HOSTS` hosts hold
//! the nodes, their first nodes the seeds; `LONE` more hold one node each,
//! the victims of the first two detection figures.

use graft::discovery::StaticSeeds;
use graft::{Node, NodeConfig};
use graft_benches::{report, rss_bytes};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Hosts of many nodes each.
const HOSTS: usize = 4;
/// Hosts of one node each (killed, then halted, for the detection
/// figures), beside the `HOSTS`.
const LONE: usize = 2;

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--host") {
        host(&args[1..]);
        return;
    }
    let sizes: Vec<usize> = std::env::var("GRAFT_CLUSTER_N")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![16, 64]);
    for n in sizes {
        run(n.max(HOSTS + LONE));
    }
}

struct Host {
    child: Child,
    stdin: ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

/// A host outlives neither a finished run nor a failed one (a panic here
/// unwinds through this): one left behind holds hundreds of nodes' threads
/// and would load every later run on the machine.
impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Host {
    fn expect(&self, prefix: &str) -> String {
        loop {
            let l = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("a host never said {prefix:?}"));
            if let Some(rest) = l.strip_prefix(prefix) {
                return rest.trim().to_string();
            }
        }
    }
    fn say(&mut self, what: &str) {
        writeln!(self.stdin, "{what}").expect("the host reads");
        self.stdin.flush().expect("the host reads");
    }
}

fn partial() -> bool {
    std::env::var("GRAFT_CLUSTER_TOPOLOGY").is_ok_and(|v| v == "partial")
}

/// The heartbeat tick asked for with `GRAFT_CLUSTER_HEARTBEAT_MS` (the
/// node's default, 1 s, otherwise).
fn heartbeat_ms() -> Option<u64> {
    std::env::var("GRAFT_CLUSTER_HEARTBEAT_MS").ok().map(|ms| {
        ms.parse()
            .expect("GRAFT_CLUSTER_HEARTBEAT_MS: milliseconds")
    })
}

/// The metric's name: `what_nN`, `_partial` added on the overlay, and
/// `_hbMS` with a heartbeat tick other than the default.
fn metric(what: &str, n: usize) -> String {
    let topology = if partial() { "_partial" } else { "" };
    let tick = heartbeat_ms().map_or_else(String::new, |ms| format!("_hb{ms}"));
    format!("{what}_n{n}{topology}{tick}")
}

fn run(n: usize) {
    let held = seed_listeners();
    let seeds = held
        .iter()
        .map(|l| l.local_addr().expect("an address").to_string())
        .collect::<Vec<_>>()
        .join(",");
    drop(held);
    let exe = std::env::current_exe().expect("current_exe");
    let t0 = unix_ms();
    let many = n - LONE;
    let mut hosts: Vec<Host> = (0..HOSTS + LONE)
        .map(|k| {
            let per = if k < HOSTS {
                many / HOSTS + usize::from(k < many % HOSTS)
            } else {
                1
            };
            let mut child = Command::new(&exe)
                .args(["--host", &k.to_string(), "--nodes", &per.to_string()])
                .args(["--seeds", &seeds, "--n", &n.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a host process");
            let stdin = child.stdin.take().expect("stdin");
            let out = BufReader::new(child.stdout.take().expect("stdout"));
            let (tx, lines) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for l in out.lines().map_while(Result::ok) {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
            Host {
                child,
                stdin,
                lines,
            }
        })
        .collect();
    let last = |what: &str| {
        hosts
            .iter()
            .map(|h| h.expect(what).parse::<f64>().expect("a time"))
            .fold(0.0, f64::max)
    };
    let started = last("started");
    let ready = last("ready");
    report("cluster", &metric("formation_ms", n), "ms", ready - t0);
    report("cluster", &metric("started_ms", n), "ms", started - t0);
    // Idle for 2 s (`GRAFT_CLUSTER_IDLE_S` to choose), then each host
    // tells what it holds.
    let idle_s = std::env::var("GRAFT_CLUSTER_IDLE_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(2.0);
    std::thread::sleep(Duration::from_secs_f64(idle_s));
    let (mut conns, mut threads, mut rss, mut cpu) = (0.0, 0.0, 0.0, 0.0);
    for h in &mut hosts {
        h.say("stats");
        let v: Vec<f64> = h
            .expect("stats")
            .split_whitespace()
            .map(|x| x.parse().expect("a figure"))
            .collect();
        conns += v[0];
        threads += v[1];
        rss += v[2];
        cpu += v[3];
    }
    let nf = n as f64;
    report(
        "cluster",
        &metric("connections_per_node", n),
        "count",
        conns / nf,
    );
    report(
        "cluster",
        &metric("threads_per_node", n),
        "count",
        threads / nf,
    );
    report(
        "cluster",
        &metric("rss_mb_per_node", n),
        "MB",
        rss / nf / 1e6,
    );
    report(
        "cluster",
        &metric("heartbeat_cpu_percent", n),
        "%",
        cpu / nf,
    );
    // A lone node killed, then one halted, then a host of many killed;
    // the hosts left report when they no longer see the victims.
    let halted = hosts.pop().expect("a lone host");
    let killed = hosts.pop().expect("a lone host");
    let detect = |hosts: &mut [Host], gone: usize, strike: &dyn Fn()| {
        for h in hosts.iter_mut() {
            h.say(&format!("watch {gone}"));
            h.expect("watching");
        }
        let t = unix_ms();
        strike();
        let detected = hosts
            .iter()
            .map(|h| h.expect("detected").parse::<f64>().expect("a time"))
            .fold(0.0, f64::max);
        detected - t
    };
    let signal = |h: &Host, sig: libc::c_int| {
        // SAFETY: `kill` with the pid of a child this process started and
        // has not waited for (so the pid is still that child's).
        unsafe { libc::kill(h.child.id() as libc::pid_t, sig) };
    };
    let ms = detect(&mut hosts, 1, &|| signal(&killed, libc::SIGKILL));
    report("cluster", &metric("detect_ms", n), "ms", ms);
    let ms = detect(&mut hosts, 1, &|| signal(&halted, libc::SIGSTOP));
    report("cluster", &metric("detect_silent_ms", n), "ms", ms);
    drop((killed, halted));
    let victim = hosts.pop().expect("a host");
    let gone = many / HOSTS;
    let ms = detect(&mut hosts, gone, &|| signal(&victim, libc::SIGKILL));
    report("cluster", &metric("detect_host_ms", n), "ms", ms);
    drop(victim);
    for mut h in hosts {
        h.say("exit");
        let _ = h.child.wait();
    }
}

/// One seed address per host, free when chosen (the listeners are held
/// together, so the ports differ), and below the kernel's ephemeral range:
/// a port from that range could be taken, between the choice and the seed's
/// bind, by another host's node listening on port 0 or by an outbound
/// connect's source port (one run lost a whole host so: `AddrInUse`).
fn seed_listeners() -> Vec<std::net::TcpListener> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    // A start that differs from run to run (the process id), so that two
    // benches at once, or ports still in TIME_WAIT, are stepped over.
    let span = low.saturating_sub(10_000).max(1);
    let mut port = 10_000 + (std::process::id() % u32::from(span)) as u16;
    let mut held = Vec::new();
    for _ in 0..span {
        if held.len() == HOSTS {
            break;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
        port = if port + 1 >= low { 10_000 } else { port + 1 };
    }
    while held.len() < HOSTS {
        held.push(std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"));
    }
    held
}

fn flag<'a>(args: &'a [String], name: &str) -> &'a str {
    let i = args.iter().position(|a| a == name).expect(name);
    &args[i + 1]
}

fn cpu_seconds() -> f64 {
    // SAFETY: `getrusage` writes into the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn threads() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// One hosting OS process.
fn host(args: &[String]) {
    let k: usize = flag(args, "--host").parse().expect("--host K");
    let m: usize = flag(args, "--nodes").parse().expect("--nodes M");
    let n: usize = flag(args, "--n").parse().expect("--n N");
    let seeds: Vec<&str> = flag(args, "--seeds").split(',').collect();
    let cfg = |listen: &str, seeds: &[&str]| {
        let c = NodeConfig::new(listen)
            .cookie("cluster-bench")
            .workers(1)
            .default_logger(std::env::var_os("GRAFT_CLUSTER_LOG").is_some())
            .discovery(StaticSeeds::parse(seeds.iter().copied()).expect("the seeds"))
            .discovery_interval(Duration::from_millis(100));
        let c = match heartbeat_ms() {
            Some(ms) => c.heartbeat(Duration::from_millis(ms)),
            None => c,
        };
        if partial() {
            c.topology(graft::Topology::Partial)
                .max_pending_per_address(1024)
                .max_pending_handshakes(1024)
        } else {
            c
        }
    };
    let nodes: Vec<Node> = (0..m)
        .map(|i| {
            // The first node is this host's seed, and joins through the
            // first host's; the others know every host's seed.
            let node = match i {
                0 if k < HOSTS => cfg(seeds[k], &seeds[..1]),
                _ => cfg("127.0.0.1:0", &seeds),
            };
            Node::start(node).expect("a node")
        })
        .collect();
    let start = Instant::now();
    let mut out = std::io::stdout();
    let _ = writeln!(out, "started {}", unix_ms());
    let _ = out.flush();
    let nodes = std::sync::Arc::new(nodes);
    let formed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Progress on stderr, from a thread of its own: it takes every node's
    // overlay lock, and at N = 1,000 on two cores one pass took over two
    // minutes (a host printed at 16 s, then at 165 s; its main thread
    // waited on one node's overlay lock). On this thread it delayed the
    // check below, so a cluster that had formed was seen late, or not
    // within the limit.
    {
        let (nodes, formed) = (nodes.clone(), formed.clone());
        // It ends within 50 ms of formation (the stats count threads).
        std::thread::spawn(move || loop {
            for _ in 0..100 {
                std::thread::sleep(Duration::from_millis(50));
                if formed.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
            }
            progress(k, m, &nodes, start);
        });
    }
    // `node_count`, not `nodes().len()`: no node's overlay lock is taken.
    while !nodes.iter().all(|x| x.node_count() >= n - 1) {
        assert!(
            start.elapsed() < Duration::from_secs(110),
            "no full cluster"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    formed.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = writeln!(out, "ready {}", unix_ms());
    let _ = out.flush();
    let (cpu0, mut t0) = (cpu_seconds(), Instant::now());
    let mut cpu_start = cpu0;
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        match line.trim() {
            "stats" => {
                let conns: usize = nodes
                    .iter()
                    .map(|x| conns_of(x, x.overlay_view().as_ref()))
                    .sum();
                let cpu = (cpu_seconds() - cpu_start) / t0.elapsed().as_secs_f64() * 100.0;
                let _ = writeln!(out, "stats {conns} {} {} {cpu}", threads(), rss_bytes());
                (cpu_start, t0) = (cpu_seconds(), Instant::now());
            }
            watch if watch.starts_with("watch ") => {
                let gone: usize = watch[6..].parse().expect("watch G");
                let before: Vec<usize> = nodes.iter().map(Node::node_count).collect();
                let _ = writeln!(out, "watching");
                let _ = out.flush();
                while !nodes
                    .iter()
                    .zip(&before)
                    .all(|(x, b)| x.node_count() <= b - gone)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = writeln!(out, "detected {}", unix_ms());
            }
            _ => break,
        }
        let _ = out.flush();
    }
    // The progress thread may still hold the nodes: the process exits.
    if let Ok(nodes) = std::sync::Arc::try_unwrap(nodes) {
        for x in nodes {
            x.shutdown();
        }
    }
}

/// Connections of a node: of its overlay (`view`, taken already), or of
/// the mesh.
fn conns_of(x: &Node, view: Option<&graft::overlay::OverlayView>) -> usize {
    view.map_or_else(|| x.nodes().len(), |v| v.connections)
}

/// One progress line of host `k` (of `m` nodes): members seen, active
/// views, connections, and the node that knows least.
fn progress(k: usize, m: usize, nodes: &[Node], start: Instant) {
    let mut seen: Vec<usize> = nodes.iter().map(Node::node_count).collect();
    seen.sort_unstable();
    // Each node's overlay lock once per pass: on a saturated machine a
    // pass took minutes.
    let views: Vec<_> = nodes.iter().map(Node::overlay_view).collect();
    let conns: usize = nodes
        .iter()
        .zip(&views)
        .map(|(x, v)| conns_of(x, v.as_ref()))
        .sum();
    let views: Vec<_> = views.into_iter().flatten().collect();
    let active: usize = views.iter().map(|v| v.active.len()).sum();
    let lonely = views.iter().filter(|v| v.active.is_empty()).count();
    let least = views
        .iter()
        .min_by_key(|v| v.members.len())
        .map(|v| format!("{}/{}/{}", v.active.len(), v.passive.len(), v.connections))
        .unwrap_or_default();
    eprintln!(
        "host {k} at {:?}: members min {} median {} max {}, active {:.1}, connections {:.1} per node; \
         {lonely} without a neighbour; least-known active/passive/connections {least}",
        start.elapsed(),
        seen[0],
        seen[seen.len() / 2],
        seen[seen.len() - 1],
        active as f64 / m as f64,
        conns as f64 / m as f64
    );
}
