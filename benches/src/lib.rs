//! Shared helpers for the benchmark bins.

/// Prints one figure as a JSON line in the shape of the Erlang anchors.
///
/// ```
/// graft_benches::report("ring", "ns_per_hop", "ns", 212.4);
/// ```
pub fn report(bench: &str, metric: &str, unit: &str, value: f64) {
    use std::io::Write;
    // A reader that went away (`| head -1`) is not the bench failing.
    let _ = writeln!(
        std::io::stdout(),
        "{{\"system\":\"graft\",\"bench\":\"{bench}\",\"metric\":\"{metric}\",\"unit\":\"{unit}\",\"value\":{value:.1}}}"
    );
}

/// Resident set size of this process, from `/proc/self/status`.
pub fn rss_bytes() -> i64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// For the distributed benches: this program started again as a second OS
/// process, running a plain node (the peer), connected to a node here.
///
/// Call it first thing in `main`. In the peer process it serves until its
/// standard input closes (the parent exited) and never returns; in the
/// parent it starts the peer, connects, runs `f(local node, peer id)` and
/// stops the peer. Both run the same executable, so functions may be
/// spawned across.
pub fn with_peer<R>(f: impl FnOnce(&graft::Node, graft::NodeId) -> R) -> R {
    use std::io::{BufRead, BufReader, Read};
    const PEER_ENV: &str = "GRAFT_BENCH_PEER";
    // GRAFT_BENCH_ENCRYPT=1: the same bench with encrypted distribution.
    let encrypt = std::env::var_os("GRAFT_BENCH_ENCRYPT").is_some_and(|v| v == "1");
    let config = move || {
        graft::NodeConfig::new("127.0.0.1:0")
            .cookie("graftbench")
            .encrypt(encrypt)
    };
    if std::env::var_os(PEER_ENV).is_some() {
        let node = graft::Node::start(config()).expect("peer node");
        println!("listening on {}", node.addr());
        // Serve until the parent goes away.
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        node.shutdown();
        std::process::exit(0);
    }
    let exe = std::env::current_exe().expect("current exe");
    let mut child = std::process::Command::new(exe)
        .env(PEER_ENV, "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the peer process");
    let out = child.stdout.take().expect("peer stdout");
    let line = BufReader::new(out)
        .lines()
        .next()
        .expect("peer says where it listens")
        .expect("readable");
    let addr: std::net::SocketAddr = line
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .expect("peer address");
    let node = graft::Node::start(config()).expect("node");
    let peer = node.connect(addr).expect("connect to the peer");
    let r = f(&node, peer);
    node.shutdown();
    drop(child.stdin.take());
    let _ = child.wait();
    r
}
