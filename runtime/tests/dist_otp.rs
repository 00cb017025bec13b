//! Node monitors, monitors by name, aliases and requests, connect by name,
//! auto-connect, forwarding unknown mail, and the partition hook.

use graft::*;
use std::time::{Duration, Instant};

fn config(cookie: &str) -> NodeConfig {
    let _ = env_logger::builder().is_test(true).try_init();
    NodeConfig::new("127.0.0.1:0")
        .cookie(cookie)
        .workers(2)
        .heartbeat(Duration::from_millis(300))
}

fn node(cookie: &str) -> Node {
    Node::start(config(cookie)).expect("node")
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

const LONG: Duration = Duration::from_secs(20);

#[test]
fn monitor_nodes_sees_up_and_down_in_order() {
    let a = node("nm1");
    let b = node("nm1");
    let (b_addr, b_id) = (b.addr(), b.id());
    a.run(move || {
        monitor_nodes(true);
        let id = connect(b_addr).unwrap();
        assert_eq!(id, b_id);
        let up = receive().on(|u: NodeUp| u).timeout(LONG).expect("NodeUp");
        assert_eq!(up.node, b_id);
        monitor_node(b_id, true);
        monitor_node(b_id, true);
        monitor_node(b_id, false); // one of the two cancelled
        assert!(disconnect(b_id));
        // One from monitor_node, one from monitor_nodes.
        for _ in 0..2 {
            let d = receive()
                .on(|d: NodeDown| d)
                .timeout(LONG)
                .expect("NodeDown");
            assert_eq!((d.node, d.reason.as_str()), (b_id, "disconnect"));
        }
        assert!(receive()
            .on(|d: NodeDown| d)
            .timeout(Duration::from_millis(100))
            .is_none());
        // Up again.
        connect(b_addr).unwrap();
        let up = receive().on(|u: NodeUp| u).timeout(LONG).expect("NodeUp");
        assert_eq!(up.node, b_id);
        monitor_nodes(false);
        disconnect(b_id);
        assert!(receive()
            .on(|d: NodeDown| d)
            .timeout(Duration::from_millis(200))
            .is_none());
    })
    .unwrap();
}

#[test]
fn monitor_node_of_an_unconnected_node_fires_at_once() {
    let a = Node::start(config("nm2").auto_connect(AutoConnect::Never)).unwrap();
    a.run(|| {
        let other = NodeId::from_name("ghost@127.0.0.1:1");
        monitor_node(other, true);
        let d = receive()
            .on(|d: NodeDown| d)
            .timeout(LONG)
            .expect("NodeDown");
        assert_eq!((d.node, d.reason.as_str()), (other, "noconnection"));
    })
    .unwrap();
}

#[test]
fn monitors_on_names_across_nodes() {
    let a = node("mn");
    let b = node("mn");
    let b_addr = b.addr();
    let done = b
        .run(|| {
            let p = spawn(|| {
                let _ = expect::<u8>();
                exit_self(ExitReason::Other("bye".into()));
            });
            register("svc", p).unwrap();
            p
        })
        .unwrap();
    let got = a
        .run(move || {
            let b = connect(b_addr).unwrap();
            // Not registered there: NoProc, with the placeholder pid.
            let m = monitor_name("nobody", b);
            let d: ProcessDied = receive()
                .when(move |d: &ProcessDied| d.monitor == m, |d| d)
                .timeout(LONG)
                .expect("NoProc");
            assert_eq!(d.reason, ExitReason::NoProc);
            assert_eq!(d.pid, Pid::new(b, 0, 0));
            // Registered: its real end, and its pid.
            let m = monitor_name("svc", b);
            // A second one, cancelled: nothing from it.
            let m2 = monitor_name("svc", b);
            demonitor(m2);
            // Let the monitor land before the message that ends it.
            sleep(Duration::from_millis(50));
            send_to(("svc", b), 1u8).unwrap();
            let d: ProcessDied = receive()
                .when(move |d: &ProcessDied| d.monitor == m, |d| d)
                .timeout(LONG)
                .expect("died");
            assert!(receive()
                .on(|d: ProcessDied| d)
                .timeout(Duration::from_millis(100))
                .is_none());
            // Locally too.
            let m = monitor_name("nobody", this_node());
            let l: ProcessDied = expect();
            assert_eq!((l.monitor, l.reason), (m, ExitReason::NoProc));
            // Lost connection.
            let keeper = spawn(|| {
                let _ = expect::<u8>();
            });
            let _ = keeper;
            (d, b)
        })
        .unwrap();
    assert_eq!(got.0.reason, ExitReason::Other("bye".into()));
    assert_eq!(got.0.pid, done);
    // A name monitor sees the connection go.
    let b_id = got.1;
    b.run(|| {
        let p = spawn(|| loop {
            let _ = expect::<u8>();
        });
        register("stay", p).unwrap();
    })
    .unwrap();
    let reason = a
        .run(move || {
            let m = monitor_name("stay", b_id);
            sleep(Duration::from_millis(50));
            disconnect(b_id);
            receive()
                .when(move |d: &ProcessDied| d.monitor == m, |d| d.reason)
                .timeout(LONG)
                .expect("NoConnection")
        })
        .unwrap();
    assert_eq!(reason, ExitReason::NoConnection);
}

#[derive(Mobile, Debug)]
struct Ask {
    n: u64,
    wait_ms: u64,
    from: Alias,
}

/// A server that answers `Ask` with `2n`, after `wait_ms`; a slow answer
/// is followed by a plain message `"replied"` to the asker (it arrives
/// after the answer, which it follows on the same path).
fn doubler() {
    loop {
        let Ask { n, wait_ms, from } = expect();
        if wait_ms > 0 {
            sleep(Duration::from_millis(wait_ms));
        }
        reply(from, n * 2);
        if wait_ms > 0 {
            send(from.owner(), String::from("replied"));
        }
    }
}

#[test]
fn aliases_locally_and_remotely() {
    let a = node("al");
    let b = node("al");
    let b_addr = b.addr();
    a.run(move || {
        let b = connect(b_addr).unwrap();
        let al = alias();
        assert_eq!(al.owner(), self_pid());
        // Through a process on the other node, which sends to the alias.
        spawn_on(b, al, |al| al.send(String::from("remote"))).unwrap();
        assert_eq!(
            receive().on(|s: String| s).timeout(LONG).as_deref(),
            Some("remote")
        );
        send_to(al, 5u32).unwrap();
        assert_eq!(expect::<u32>(), 5);
        assert!(unalias(al));
        assert!(!unalias(al));
        al.send(6u32);
        spawn_on(b, al, |al| al.send(String::from("late"))).unwrap();
        // Both dropped: nothing arrives.
        assert!(receive()
            .any(|_u: Unknown| ())
            .timeout(Duration::from_millis(300))
            .is_none());
    })
    .unwrap();
}

#[test]
fn a_remote_request_is_one_frame_each_way_and_a_late_reply_is_dropped() {
    let a = node("rq");
    let b = node("rq");
    let b_addr = b.addr();
    let server = b.run(|| spawn(doubler)).unwrap();
    let id = a.connect(b_addr).unwrap();
    assert_eq!(id, b.id());
    // Warm up (the first message of a type may take other paths).
    a.run(move || {
        let r: Result<u64, _> = request(
            server,
            |from| Ask {
                n: 1,
                wait_ms: 0,
                from,
            },
            Some(LONG),
        );
        assert_eq!(r, Ok(2));
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (a0, b0) = (testing::frames_received(&a), testing::frames_received(&b));
    let r = a
        .run(move || {
            let mut sum = 0;
            for n in 0..10 {
                let r: u64 = request(
                    server,
                    |from| Ask {
                        n,
                        wait_ms: 0,
                        from,
                    },
                    Some(LONG),
                )
                .unwrap();
                sum += r;
            }
            sum
        })
        .unwrap();
    assert_eq!(r, 90);
    std::thread::sleep(Duration::from_millis(100));
    let (a1, b1) = (testing::frames_received(&a), testing::frames_received(&b));
    // The server's node got ten requests and nothing else; the caller's
    // node ten replies and nothing else: no monitor, demonitor or other
    // control frame.
    assert_eq!(
        (b1.request - b0.request, b1.total() - b0.total()),
        (10, 10),
        "server side: {b0:?} -> {b1:?}"
    );
    assert_eq!(
        (a1.alias - a0.alias, a1.total() - a0.total()),
        (10, 10),
        "caller side: {a0:?} -> {a1:?}"
    );
    // A late reply: dropped at the alias, never in the mailbox.
    let before = testing::frames_received(&a).alias;
    let a_ref = &a;
    let left = a
        .run(move || {
            let r: Result<u64, _> = request(
                server,
                |from| Ask {
                    n: 7,
                    wait_ms: 300,
                    from,
                },
                Some(Duration::from_millis(20)),
            );
            assert_eq!(r, Err(RequestError::Timeout));
            // Once "replied" is here, the late answer has been handled.
            let note = receive().on(|s: String| s).timeout(LONG);
            assert_eq!(note.as_deref(), Some("replied"));
            // Anything else in the mailbox?
            receive()
                .any(|_u: Unknown| ())
                .timeout(Duration::ZERO)
                .is_some()
        })
        .unwrap();
    assert!(!left, "the late reply reached the mailbox");
    // And it did arrive at the node (so it was dropped there).
    eventually("the late reply frame", || {
        testing::frames_received(a_ref).alias > before
    });
}

#[test]
fn requests_fail_as_their_target_does() {
    let a = node("rf");
    let b = node("rf");
    let b_addr = b.addr();
    let dead = b.run(|| spawn(|| ())).unwrap();
    let stuck = b
        .run(|| {
            spawn(|| {
                let _ = expect::<Ask>();
                sleep(Duration::from_secs(60));
            })
        })
        .unwrap();
    let dies = b
        .run(|| {
            spawn(|| {
                let _ = expect::<Ask>();
                exit_self(ExitReason::Other("gone".into()));
            })
        })
        .unwrap();
    a.run(move || {
        let b = connect(b_addr).unwrap();
        let ask = |from| Ask {
            n: 1,
            wait_ms: 0,
            from,
        };
        sleep(Duration::from_millis(50));
        let r: Result<u64, _> = request(dead, ask, Some(LONG));
        assert_eq!(r, Err(RequestError::NoProc));
        let r: Result<u64, _> = request(dies, ask, Some(LONG));
        assert_eq!(r, Err(RequestError::Died(ExitReason::Other("gone".into()))));
        // Local ones too.
        let local = spawn(doubler);
        let r: Result<u64, _> = request(
            local,
            |from| Ask {
                n: 4,
                wait_ms: 0,
                from,
            },
            Some(LONG),
        );
        assert_eq!(r, Ok(8));
        let gone = spawn(|| ());
        sleep(Duration::from_millis(20));
        let r: Result<u64, _> = request(gone, ask, Some(LONG));
        assert_eq!(r, Err(RequestError::NoProc));
        // Lost connection.
        let req = send_request(stuck, ask).unwrap();
        sleep(Duration::from_millis(50));
        disconnect(b);
        let r: Result<u64, _> = receive_response(req, Some(LONG));
        assert_eq!(r, Err(RequestError::NoConnection(b)));
        // Nothing is left behind in the mailbox.
        assert!(receive()
            .any(|_u: Unknown| ())
            .timeout(Duration::from_millis(50))
            .is_none());
    })
    .unwrap();
}

#[test]
fn connect_by_a_name_that_carries_the_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let name = format!("kv@127.0.0.1:{port}");
    let kv = Node::start(
        NodeConfig::new(&format!("127.0.0.1:{port}"))
            .name(&name)
            .cookie("cn"),
    )
    .unwrap();
    let a = node("cn");
    assert_eq!(a.connect_name(&name).unwrap(), kv.id());
    let (kv_id, name2) = (kv.id(), name.clone());
    a.run(move || {
        assert_eq!(connect_name(&name2).unwrap(), kv_id);
        // The wrong name for that address.
        let wrong = format!("other@127.0.0.1:{port}");
        assert!(matches!(connect_name(&wrong), Err(Error::Remote(_))));
        assert!(matches!(connect_name("no-at-sign"), Err(Error::Io(_))));
        assert!(connect_name("x@nowhere.invalid:1").is_err());
    })
    .unwrap();
    // A name without its address, of a node met before.
    let plain = Node::start(config("cn").name("plain@127.0.0.1")).unwrap();
    let plain_id = plain.id();
    assert!(a.connect_name("plain@127.0.0.1").is_err(), "never met");
    a.connect(plain.addr()).unwrap();
    assert!(a.disconnect(plain_id));
    eventually("gone", || !a.nodes().contains(&plain_id));
    assert_eq!(a.connect_name("plain@127.0.0.1").unwrap(), plain_id);
}

#[test]
fn auto_connect_on_first_use_once_and_always() {
    let b = node("ac");
    let keeper = b
        .run(|| {
            spawn(|| loop {
                let (from, s): (Pid, String) = expect();
                send(from, s);
            })
        })
        .unwrap();
    for mode in [AutoConnect::Always, AutoConnect::Once, AutoConnect::Never] {
        let a = Node::start(config("ac").auto_connect(mode)).unwrap();
        a.connect(b.addr()).unwrap();
        let b_id = b.id();
        assert!(a.disconnect(b_id));
        eventually("disconnected", || !b.nodes().contains(&a.id()));
        let got = a
            .run(move || {
                send(keeper, (self_pid(), String::from("hi")));
                // Long enough for a connection when one is made; a short
                // look for the modes that must not make one.
                let wait = if mode == AutoConnect::Always {
                    LONG
                } else {
                    Duration::from_millis(500)
                };
                receive().on(|s: String| s).timeout(wait)
            })
            .unwrap();
        match mode {
            AutoConnect::Always => {
                assert_eq!(got.as_deref(), Some("hi"));
                assert!(a.nodes().contains(&b_id));
                // A request connects before it is sent.
                let server = b.run(|| spawn(doubler)).unwrap();
                assert!(a.disconnect(b_id));
                eventually("disconnected", || !b.nodes().contains(&a.id()));
                let r = a
                    .run(move || {
                        request::<_, u64>(
                            server,
                            |from| Ask {
                                n: 3,
                                wait_ms: 0,
                                from,
                            },
                            Some(LONG),
                        )
                    })
                    .unwrap();
                assert_eq!(r, Ok(6));
            }
            _ => {
                assert_eq!(got, None, "{mode:?}");
                assert!(!a.nodes().contains(&b_id));
            }
        }
        a.shutdown();
    }
}

/// Messages held while auto-connect runs go out before any sent once the
/// connection is up. A process keeps sending through the connect: its
/// first messages are held, the later ones find the connection. Every
/// message arrives, in order. (Publishing the connection before queuing
/// the held frames let a send overtake them; seen as a message arriving
/// early in `dist_overlay`'s idle-close streams.)
#[test]
fn held_frames_go_before_the_sends_that_find_the_connection() {
    let a = node("held");
    let b = node("held");
    let b_id = b.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen2 = seen.clone();
    let recv = b
        .spawn(move || {
            let mut want = 0u32;
            loop {
                seen2.store(want, std::sync::atomic::Ordering::Relaxed);
                let k: u32 = expect();
                if k == u32::MAX {
                    let _ = tx.send(Ok(want));
                    return;
                }
                if k != want {
                    let _ = tx.send(Err((want, k)));
                    return;
                }
                want += 1;
            }
        })
        .unwrap();
    let mut next = 0u32;
    for _ in 0..40 {
        // A disconnect drops what is still queued: all came first.
        eventually("all arrived", || {
            if let Ok(Err((want, got))) = rx.try_recv() {
                panic!("message {got} arrived where {want} was due");
            }
            seen.load(std::sync::atomic::Ordering::Relaxed) == next
        });
        a.connect(b.addr()).unwrap();
        assert!(a.disconnect(b_id));
        eventually("disconnected", || !b.nodes().contains(&a.id()));
        next = a
            .run(move || {
                // Until the connection is up (held), then a few hundred
                // more (straight onto it, while the held ones are queued).
                let (mut k, mut after, t) = (next, 0, Instant::now());
                while after < 300 {
                    assert!(t.elapsed() < LONG, "never connected");
                    send(recv, k);
                    k += 1;
                    if nodes().contains(&b_id) {
                        after += 1;
                    }
                }
                k
            })
            .unwrap();
    }
    a.run(move || send(recv, u32::MAX)).unwrap();
    match rx.recv_timeout(LONG).expect("the receiver reports") {
        Ok(n) => assert_eq!(n, next),
        Err((want, got)) => panic!("message {got} arrived where {want} was due"),
    }
}

#[test]
fn an_unknown_message_is_forwarded_unchanged() {
    let a = node("fw");
    let b = node("fw");
    let b_addr = b.addr();
    a.run(move || {
        let b = connect(b_addr).unwrap();
        let me = self_pid();
        // A proxy on the other node that knows no types: forwards whatever
        // comes back to us.
        let proxy = spawn_on(b, me, |me| loop {
            receive().any(|u: Unknown| u.forward(me).unwrap()).wait();
        })
        .unwrap();
        send(proxy, String::from("one"));
        send(proxy, (7u32, vec![1u8, 2]));
        assert_eq!(
            receive().on(|s: String| s).timeout(LONG).as_deref(),
            Some("one")
        );
        assert_eq!(
            receive().on(|t: (u32, Vec<u8>)| t).timeout(LONG),
            Some((7, vec![1, 2]))
        );
        // A local proxy forwards a local message to the remote one
        // (encoded on the way, without naming its type).
        let local = spawn(move || loop {
            receive().any(|u: Unknown| u.forward(proxy).unwrap()).wait();
        });
        send(local, 99u64);
        assert_eq!(receive().on(|n: u64| n).timeout(LONG), Some(99));
        // A local-only message cannot go to another node.
        let (tx, rx) = channel::<u8>();
        let r = spawn(move || {
            let r = receive().any(move |u: Unknown| u.forward(proxy)).wait();
            tx.send(u8::from(matches!(r, Err(Error::NotMobile(_)))))
                .unwrap();
        });
        send(r, Local(5u8));
        assert_eq!(rx.recv().unwrap(), 1);
    })
    .unwrap();
}

#[test]
fn a_partition_cuts_two_halves_until_healed() {
    let ns: Vec<Node> = (0..4).map(|_| node("pt")).collect();
    for n in &ns[1..] {
        ns[0].connect(n.addr()).unwrap();
    }
    eventually("full mesh", || ns.iter().all(|n| n.nodes().len() == 3));
    let watcher = {
        let c_id = ns[2].id();
        ns[0]
            .run(move || {
                let me = self_pid();
                spawn(move || {
                    monitor_node(c_id, true);
                    let d: NodeDown = expect();
                    send(me, d.node);
                });
                sleep(Duration::from_millis(50));
                me
            })
            .unwrap()
    };
    let _ = watcher;
    testing::partition(&[&ns[0], &ns[1]], &[&ns[2], &ns[3]]);
    assert_eq!(
        ns[0].nodes(),
        vec![ns[1].id()].into_iter().collect::<Vec<_>>()
    );
    assert_eq!(ns[3].nodes(), vec![ns[2].id()]);
    // Reconnects across the cut are refused, the mesh gossip's too.
    let _ = ns[0].connect(ns[2].addr());
    std::thread::sleep(Duration::from_millis(200));
    assert!(!ns[0].nodes().contains(&ns[2].id()));
    assert!(!ns[2].nodes().contains(&ns[0].id()));
    testing::heal(&[&ns[0], &ns[1]], &[&ns[2], &ns[3]]);
    eventually("mesh again", || ns.iter().all(|n| n.nodes().len() == 3));
}

/// A peer that speaks the transport but not the runtime's rules.
struct Rogue;
impl graft_net::Handler for Rogue {
    fn peer_up(&self, _: &graft_net::PeerInfo) {}
    fn frame(&self, _: &graft_net::PeerInfo, _: u8, _: Vec<u8>) {}
    fn peer_down(&self, _: &graft_net::PeerInfo, _: &graft_net::NetError) {}
}

fn pid_bytes(p: Pid) -> Vec<u8> {
    let mut v = p.node().0.to_le_bytes().to_vec();
    v.extend_from_slice(&p.creation().to_le_bytes());
    v.extend_from_slice(&p.serial().to_le_bytes());
    v
}

#[test]
fn forged_truncated_and_stale_alias_and_request_frames_are_refused() {
    let a = node("rogue");
    let (tx, rx) = std::sync::mpsc::channel::<(Pid, Alias, Alias)>();
    let (got_tx, got_rx) = std::sync::mpsc::channel::<u64>();
    a.spawn(move || {
        let live = alias();
        let dead = alias();
        unalias(dead);
        tx.send((self_pid(), live, dead)).unwrap();
        loop {
            let n: u64 = expect();
            got_tx.send(n).unwrap();
        }
    })
    .unwrap();
    let (target, live, dead) = rx.recv().unwrap();
    let name = "rogue@127.0.0.1:1";
    let rogue_node = NodeId::from_name(name);
    let cookie = graft_net::resolve_cookie(Some("rogue")).unwrap();
    let t = graft_net::Transport::start(
        graft_net::NetConfig::new(name, "127.0.0.1:0".parse().unwrap()).cookie(cookie),
        std::sync::Arc::new(Rogue),
    )
    .unwrap();
    let peer = t.connect(a.addr()).unwrap();
    let desc = graft::graph::descriptor_of::<u64>().hash();
    let alias_frame = |owner: Pid, id: u64, n: u64| {
        let mut f = pid_bytes(owner);
        f.extend_from_slice(&id.to_le_bytes());
        f.extend_from_slice(&desc.to_le_bytes());
        f.extend_from_slice(&graft::graph::encode(&n));
        f
    };
    let request_frame = |to: Pid, owner: Pid, r: u64, n: u64| {
        let mut f = pid_bytes(to);
        f.extend_from_slice(&pid_bytes(owner));
        f.extend_from_slice(&r.to_le_bytes());
        f.extend_from_slice(&desc.to_le_bytes());
        f.extend_from_slice(&graft::graph::encode(&n));
        f
    };
    let kind_alias = graft_net::FIRST_USER_KIND + 2;
    let kind_request = graft_net::FIRST_USER_KIND + 3;
    let other_node_pid = Pid::new(NodeId::from_name("elsewhere@127.0.0.1:2"), 1, 5);
    let rogue_pid = Pid::new(rogue_node, peer.creation.wrapping_add(1), 9);
    let id_of = |a: Alias| a.reference().id();
    // Refused: truncated frames of both kinds, an inactive alias, an alias
    // id the process never made, an owner not on this node, a request
    // whose caller claims another node.
    for f in [
        (
            kind_alias,
            alias_frame(target, id_of(live), 1)[..10].to_vec(),
        ),
        (
            kind_request,
            request_frame(target, rogue_pid, 1, 2)[..30].to_vec(),
        ),
        (kind_alias, alias_frame(target, id_of(dead), 3)),
        (kind_alias, alias_frame(target, 999_999, 4)),
        (kind_alias, alias_frame(other_node_pid, id_of(live), 5)),
        (kind_request, request_frame(target, other_node_pid, 7, 6)),
        (kind_alias, Vec::new()),
        (kind_request, Vec::new()),
    ] {
        t.send(peer.id, f.0, &f.1).unwrap();
    }
    // Accepted: the live alias, and a well-formed request (its monitor
    // lands on the target and goes with the connection).
    t.send(peer.id, kind_alias, &alias_frame(target, id_of(live), 100))
        .unwrap();
    t.send(
        peer.id,
        kind_request,
        &request_frame(target, rogue_pid, 8, 101),
    )
    .unwrap();
    assert_eq!(got_rx.recv_timeout(LONG).unwrap(), 100);
    assert_eq!(got_rx.recv_timeout(LONG).unwrap(), 101);
    assert!(got_rx.recv_timeout(Duration::from_millis(200)).is_err());
    let watchers = |a: &Node| {
        a.run(move || process_info(target).unwrap().monitored_by)
            .unwrap()
    };
    assert_eq!(watchers(&a), vec![rogue_pid]);
    t.shutdown();
    eventually("the rogue's monitor gone with it", || {
        watchers(&a).is_empty()
    });
}

#[test]
fn node_up_and_down_alternate_through_fast_reconnects() {
    let a = node("alt");
    let b = node("alt");
    let (b_addr, b_id) = (b.addr(), b.id());
    let seen = a
        .run(move || {
            monitor_nodes(true);
            connect(b_addr).unwrap();
            for _ in 0..20 {
                disconnect(b_id);
                // Connect again at once: the new connection may come up
                // before the node loop has handled the old one's loss.
                let t = Instant::now();
                while connect(b_addr).is_err() {
                    assert!(t.elapsed() < LONG);
                }
            }
            sleep(Duration::from_millis(300));
            let mut seen = Vec::new();
            while let Some(e) = receive()
                .when(move |u: &NodeUp| u.node == b_id, |_| 'u')
                .when(move |d: &NodeDown| d.node == b_id, |_| 'd')
                .timeout(Duration::ZERO)
            {
                seen.push(e);
            }
            seen
        })
        .unwrap();
    assert!(!seen.is_empty());
    for (i, e) in seen.iter().enumerate() {
        assert_eq!(*e, if i % 2 == 0 { 'u' } else { 'd' }, "{seen:?}");
    }
    // Connected at the end: the last one is an up.
    if a.nodes().contains(&b_id) {
        assert_eq!(seen.last(), Some(&'u'), "{seen:?}");
    }
}
