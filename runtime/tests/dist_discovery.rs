//! Discovery: static seeds, DNS through a stub resolver on several
//! 127.0.0.x addresses (re-resolved: a node added later is found), a seed
//! file rewritten while the nodes run, and bad sources (garbage lines, a
//! port that is not a graft node, a resolver that fails) that cost nothing
//! but a log line. Real nodes, real TCP on 127.0.0.x.

use graft::discovery::{Dns, Resolve, Seed, SeedFile, StaticSeeds};
use graft::{Node, NodeConfig, NodeId};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(50);

fn cfg(listen: &str) -> NodeConfig {
    let _ = env_logger::builder().is_test(true).try_init();
    NodeConfig::new(listen).cookie("discovery").workers(1)
}

/// Waits (hang guard 20 s) until `node` is connected to every one of `ids`.
fn until_connected(node: &Node, ids: &[NodeId]) {
    let start = Instant::now();
    loop {
        let have = node.nodes();
        if ids.iter().all(|i| have.contains(i)) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} sees {have:?}, wants {ids:?}",
            node.name()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A free port on every one of `ips` (the nodes of a DNS cluster share one).
fn common_port(ips: &[IpAddr]) -> u16 {
    'next: for _ in 0..50 {
        let first = TcpListener::bind(SocketAddr::new(ips[0], 0)).unwrap();
        let port = first.local_addr().unwrap().port();
        for ip in &ips[1..] {
            if TcpListener::bind(SocketAddr::new(*ip, port)).is_err() {
                continue 'next;
            }
        }
        return port;
    }
    panic!("no port free on all of {ips:?}");
}

#[test]
fn static_seeds_connect_a_node_to_each_seed_by_address_and_by_name() {
    let a = Node::start(cfg("127.0.0.1:0")).unwrap();
    let b = Node::start(cfg("127.0.0.1:0").name("seed-b@127.0.0.1")).unwrap();
    let seeds = StaticSeeds(vec![
        Seed::Addr(a.addr()),
        Seed::Name(format!("seed-b@{}", b.addr())),
    ]);
    let c = Node::start(cfg("127.0.0.1:0").discovery(seeds).discovery_interval(POLL)).unwrap();
    until_connected(&c, &[a.id(), b.id()]);
    // Polls go on without reconnecting what is connected.
    std::thread::sleep(POLL * 4);
    assert_eq!(c.nodes().len(), 2, "{:?}", c.nodes());
    for n in [c, a, b] {
        n.shutdown();
    }
}

/// A resolver stub: whatever the test says the name resolves to now.
#[derive(Clone)]
struct Stub(Arc<Mutex<io::Result<Vec<IpAddr>>>>);

impl Resolve for Stub {
    fn resolve(&mut self, host: &str) -> io::Result<Vec<IpAddr>> {
        assert_eq!(host, "graft-headless.test");
        match &*self.0.lock().unwrap() {
            Ok(v) => Ok(v.clone()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
    }
}

#[test]
fn dns_finds_every_address_of_a_name_and_a_node_added_later() {
    let ips: Vec<IpAddr> = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let port = common_port(&ips);
    // The name resolves to three nodes at first (the fourth is not up).
    let stub = Stub(Arc::new(Mutex::new(Ok(ips[..3].to_vec()))));
    let start = |ip: IpAddr| {
        Node::start(
            cfg(&SocketAddr::new(ip, port).to_string())
                .discovery(Dns::with_resolver(
                    "graft-headless.test",
                    port,
                    stub.clone(),
                ))
                .discovery_interval(POLL),
        )
        .unwrap()
    };
    let nodes: Vec<Node> = ips[..3].iter().map(|ip| start(*ip)).collect();
    let ids: Vec<NodeId> = nodes.iter().map(Node::id).collect();
    for n in &nodes {
        let others: Vec<NodeId> = ids.iter().copied().filter(|i| *i != n.id()).collect();
        until_connected(n, &others);
    }
    // A failing resolver costs a log line, and the cluster stays.
    *stub.0.lock().unwrap() = Err(io::Error::other("SERVFAIL"));
    std::thread::sleep(POLL * 3);
    assert_eq!(nodes[0].nodes().len(), 2);
    // A fourth node comes up and its address appears in the records.
    let late = start(ips[3]);
    *stub.0.lock().unwrap() = Ok(ips.clone());
    for n in &nodes {
        until_connected(n, &[late.id()]);
    }
    until_connected(&late, &ids);
    late.shutdown();
    for n in nodes {
        n.shutdown();
    }
}

#[test]
fn a_seed_file_is_read_at_every_poll_and_its_bad_lines_are_skipped() {
    let dir = std::env::temp_dir().join(format!("graft-seeds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("seeds");
    let a = Node::start(cfg("127.0.0.1:0")).unwrap();
    let b = Node::start(cfg("127.0.0.1:0")).unwrap();
    // Something that listens but is no graft node: its handshake fails.
    let stranger = TcpListener::bind("127.0.0.1:0").unwrap();
    let stranger_addr = stranger.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in stranger.incoming().take(64) {
            drop(s);
        }
    });
    std::fs::write(
        &path,
        format!(
            "# the cluster\n{}\n\nnot a seed at all\n@\n{stranger_addr}  # a stranger\n",
            a.addr()
        ),
    )
    .unwrap();
    let c = Node::start(
        cfg("127.0.0.1:0")
            .discovery(SeedFile::new(&path))
            .discovery_interval(POLL),
    )
    .unwrap();
    until_connected(&c, &[a.id()]);
    assert_eq!(c.nodes(), vec![a.id()]);
    // The file is rewritten: b appears.
    std::fs::write(&path, format!("{}\n{}\n", a.addr(), b.addr())).unwrap();
    until_connected(&c, &[a.id(), b.id()]);
    // A file that is gone is an error each poll, nothing more.
    std::fs::remove_file(&path).unwrap();
    std::thread::sleep(POLL * 3);
    assert_eq!(c.nodes().len(), 2);
    for n in [c, a, b] {
        n.shutdown();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_node_that_finds_itself_among_its_seeds_skips_itself() {
    let ip: IpAddr = "127.0.0.6".parse().unwrap();
    let port = common_port(&[ip]);
    let addr = SocketAddr::new(ip, port);
    let seeds = StaticSeeds(vec![Seed::Addr(addr)]);
    let n = Node::start(
        cfg(&addr.to_string())
            .discovery(seeds)
            .discovery_interval(POLL),
    )
    .unwrap();
    std::thread::sleep(POLL * 4);
    assert!(n.nodes().is_empty(), "{:?}", n.nodes());
    n.shutdown();
}

#[test]
fn seeds_parse_with_clear_errors() {
    assert_eq!(
        "127.0.0.9:5000".parse::<Seed>().unwrap(),
        Seed::Addr("127.0.0.9:5000".parse().unwrap())
    );
    assert_eq!(
        "kv@127.0.0.9".parse::<Seed>().unwrap(),
        Seed::Name(format!("kv@127.0.0.9:{}", graft::discovery::DEFAULT_PORT))
    );
    assert_eq!(
        "::1".parse::<Seed>().unwrap(),
        Seed::Addr(SocketAddr::new(
            "::1".parse().unwrap(),
            graft::discovery::DEFAULT_PORT
        ))
    );
    for bad in [
        "",
        "@",
        "kv@",
        "@host",
        "a b:1",
        "x\u{0}y",
        &"h".repeat(300),
    ] {
        let e = bad.parse::<Seed>().unwrap_err().to_string();
        assert!(e.contains("seed"), "{bad:?}: {e}");
    }
    let e = StaticSeeds::parse(["127.0.0.1:1", "kv@"]).unwrap_err();
    assert!(e.to_string().contains("kv@"), "{e}");
}

#[test]
fn connect_name_without_a_port_tries_the_fixed_port() {
    // A name without its port, never met: the fixed port is tried (nothing
    // listens there in the test, so the error is the connection's).
    let n = Node::start(cfg("127.0.0.1:0")).unwrap();
    let r = n.connect_name("nobody@127.0.0.7");
    assert!(r.is_err());
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains(&graft::discovery::DEFAULT_PORT.to_string()),
        "{e}"
    );
    n.shutdown();
}

/// A source that counts its polls and returns `seeds`.
struct Counting {
    seeds: Vec<Seed>,
    polls: Arc<std::sync::atomic::AtomicUsize>,
}

impl graft::discovery::Discovery for Counting {
    fn seeds(&mut self) -> Result<Vec<Seed>, String> {
        self.polls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(self.seeds.clone())
    }
}

#[test]
fn polls_that_find_nothing_to_do_back_off_and_a_failing_seed_is_retried_at_the_interval() {
    let every = Duration::from_millis(20);
    let count = |polls: &Arc<std::sync::atomic::AtomicUsize>, over: Duration| {
        let before = polls.load(std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(over);
        polls.load(std::sync::atomic::Ordering::SeqCst) - before
    };
    // Connected: each poll finds nothing to do and waits twice as long as
    // the last (20, 40, 80 ms, ...): a handful of polls in 2 s, not 100.
    let a = Node::start(cfg("127.0.0.1:0")).unwrap();
    let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seeds = vec![Seed::Addr(a.addr())];
    let b = Node::start(
        cfg("127.0.0.1:0")
            .discovery(Counting {
                seeds,
                polls: polls.clone(),
            })
            .discovery_interval(every),
    )
    .unwrap();
    until_connected(&b, &[a.id()]);
    let idle = count(&polls, Duration::from_secs(2));
    assert!(idle <= 12, "{idle} polls in 2 s while connected");
    b.shutdown();
    a.shutdown();

    // A seed that refuses: every poll has work, so none backs off.
    let refused = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = Node::start(
        cfg("127.0.0.1:0")
            .discovery(Counting {
                seeds: vec![Seed::Addr(refused)],
                polls: polls.clone(),
            })
            .discovery_interval(every),
    )
    .unwrap();
    let busy = count(&polls, Duration::from_secs(1));
    assert!(busy >= 15, "{busy} polls in 1 s with a seed to reach");
    c.shutdown();
}

/// Two partial-overlay clusters that formed apart ({a, x} and {b, y}, as
/// when nodes join one seed before that seed has joined the other) become
/// one when a node whose seeds name both joins: it joins through the seed
/// it does not know as a member even though it has neighbours, and the
/// join links the two. With discovery looking at no seed once the node
/// has neighbours (the rule before), the second cluster stayed apart.
/// (The join's own rule, `State::wants_join`, has a unit test: once the
/// node is connected to the stranger, other overlay traffic over that
/// connection also merges the two here.)
#[test]
fn a_seed_of_another_cluster_is_joined_and_the_two_become_one() {
    let partial = |listen: &str| cfg(listen).topology(graft::Topology::Partial);
    let a = Node::start(partial("127.0.0.1:0")).unwrap();
    let b = Node::start(partial("127.0.0.1:0")).unwrap();
    let seeds = |s: &[&Node]| StaticSeeds(s.iter().map(|n| Seed::Addr(n.addr())).collect());
    let x = Node::start(
        partial("127.0.0.1:0")
            .discovery(seeds(&[&a]))
            .discovery_interval(POLL),
    )
    .unwrap();
    let y = Node::start(
        partial("127.0.0.1:0")
            .discovery(seeds(&[&b]))
            .discovery_interval(POLL),
    )
    .unwrap();
    until_connected(&a, &[x.id()]);
    until_connected(&b, &[y.id()]);
    assert!(!a.nodes().contains(&b.id()), "a and b apart at first");
    let z = Node::start(
        partial("127.0.0.1:0")
            .discovery(seeds(&[&a, &b]))
            .discovery_interval(POLL),
    )
    .unwrap();
    let all = [&a, &b, &x, &y, &z];
    for n in all {
        let others: Vec<NodeId> = all
            .iter()
            .filter(|o| o.id() != n.id())
            .map(|o| o.id())
            .collect();
        until_connected(n, &others);
    }
    for n in all {
        n.shutdown();
    }
}
