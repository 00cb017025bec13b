//! Shared helpers for the benchmark bins.

mod placement;
pub use placement::core_to_core_ns;

/// Erlang's `wait_all_waiting`: until each of `pids` is parked in a
/// receive with an empty mailbox, or gone. One table lookup for each of
/// the two fields, as Erlang polls `process_info(P, status)` and
/// `process_info(P, message_queue_len)` (a full [`graft::process_info`]
/// would time the poll, not the processes).
pub fn wait_all_waiting(pids: &[graft::Pid]) {
    use graft::{mailbox_len, process_status, yield_now, Status};
    for &p in pids {
        while process_status(p).is_some_and(|s| s != Status::Waiting)
            || mailbox_len(p).is_some_and(|n| n != 0)
        {
            yield_now();
        }
    }
}

/// Prints one figure as a JSON line in the shape of the Erlang anchors.
///
/// ```
/// graft_benches::report("ring", "ns_per_hop", "ns", 212.4);
/// ```
pub fn report(bench: &str, metric: &str, unit: &str, value: f64) {
    use std::io::Write;
    // GRAFT_BENCH_TLS=1: the distributed benches are their `_tls` twins.
    let tls = bench.starts_with("dist_") && tls_wanted();
    let mut bench = if tls {
        format!("{bench}_tls")
    } else {
        bench.to_string()
    };
    // GRAFT_BENCH_LANES=n (n > 1): the distributed benches over n lanes.
    let lanes = lanes_wanted();
    if lanes > 1 && (bench.starts_with("dist_") || bench.starts_with("growth_dist")) {
        bench = format!("{bench}_lanes{lanes}");
    }
    let bench = &bench;
    // Small figures keep three decimals, as Erlang's anchors print them: a
    // spawn of 0.46 µs against 0.94 is a ratio, 0.5 is not.
    let prec = if value.abs() < 10.0 { 3 } else { 1 };
    // A reader that went away (`| head -1`) is not the bench failing.
    let _ = writeln!(
        std::io::stdout(),
        "{{\"system\":\"graft\",\"bench\":\"{bench}\",\"metric\":\"{metric}\",\"unit\":\"{unit}\",\"value\":{value:.prec$}}}"
    );
}

/// With `GRAFT_PERF_CTL=<fifo>` set (perf record's `--control=fifo:<fifo>`,
/// started with `-D -1`), tells perf to start (`"enable"`) or stop
/// (`"disable"`) sampling, so that a profile covers only a bench's timed
/// phase. Does nothing otherwise.
///
/// ```
/// graft_benches::perf_ctl("enable"); // no GRAFT_PERF_CTL: nothing happens
/// ```
pub fn perf_ctl(cmd: &str) {
    if let Some(path) = std::env::var_os("GRAFT_PERF_CTL") {
        if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(path) {
            use std::io::Write;
            let _ = writeln!(f, "{cmd}");
        }
    }
}

/// utime + stime of this process, in seconds, from `/proc/self/stat`'s
/// clock ticks (10 ms), as `growth.erl`'s `cpu_seconds` reads them.
///
/// ```
/// assert!(graft_benches::cpu_seconds() >= 0.0);
/// ```
pub fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses).
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 here;
    // USER_HZ is 100 on Linux.
    (ticks(11) + ticks(12)) / 100.0
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

/// `GRAFT_BENCH_LANES`: connections per peer of the distributed benches
/// (`NodeConfig::lanes`; default 1).
///
/// ```
/// assert!(graft_benches::lanes_wanted() >= 1);
/// ```
pub fn lanes_wanted() -> usize {
    std::env::var("GRAFT_BENCH_LANES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

fn tls_wanted() -> bool {
    std::env::var_os("GRAFT_BENCH_TLS").is_some_and(|v| v == "1")
}

const TLS_DIR_ENV: &str = "GRAFT_BENCH_TLS_DIR";

/// Certificates for a TLS bench: a CA and one node certificate naming
/// 127.0.0.1 (both nodes' names are `graft-…@127.0.0.1`), written to a
/// fresh directory so that the peer process can load them.
///
/// ```no_run
/// let (dir, tls) = graft_benches::make_tls();
/// # let _ = (dir, tls);
/// ```
pub fn make_tls() -> (std::path::PathBuf, graft::TlsConfig) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_der = ca.self_signed(&ca_key).expect("CA").der().to_vec();
    let key = KeyPair::generate().expect("a key");
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &Issuer::from_params(&ca, &ca_key))
        .expect("a node certificate");
    let dir = std::env::temp_dir().join(format!("graft-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    std::fs::write(dir.join("ca.der"), &ca_der).expect("write");
    std::fs::write(dir.join("node.der"), leaf.der()).expect("write");
    std::fs::write(dir.join("node.key"), key.serialize_der()).expect("write");
    let tls = load_tls(&dir);
    (dir, tls)
}

fn load_tls(dir: &std::path::Path) -> graft::TlsConfig {
    let r = |f: &str| std::fs::read(dir.join(f)).expect("a bench certificate file");
    graft::TlsConfig::new(vec![r("node.der")], r("node.key"), vec![r("ca.der")])
        .expect("a TLS configuration")
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
    // Encrypted distribution is the default; GRAFT_BENCH_ENCRYPT=0 measures
    // the authenticated-only mode.
    let encrypt = std::env::var_os("GRAFT_BENCH_ENCRYPT").is_none_or(|v| v != "0");
    let tls = if let Some(dir) = std::env::var_os(TLS_DIR_ENV) {
        Some((
            std::path::PathBuf::from(dir.clone()),
            load_tls(dir.as_ref()),
        ))
    } else if tls_wanted() {
        Some(make_tls())
    } else {
        None
    };
    let tls_cfg = tls.as_ref().map(|t| t.1.clone());
    let config = move || {
        let c = graft::NodeConfig::new("127.0.0.1:0")
            .cookie("graftbench")
            .encrypt(encrypt)
            .lanes(lanes_wanted());
        match tls_cfg.clone() {
            Some(t) => c.tls(t),
            None => c,
        }
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
    let mut cmd = std::process::Command::new(exe);
    if let Some((dir, _)) = &tls {
        cmd.env(TLS_DIR_ENV, dir);
    }
    let mut child = cmd
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
    if let Some((dir, _)) = tls {
        let _ = std::fs::remove_dir_all(dir);
    }
    r
}
