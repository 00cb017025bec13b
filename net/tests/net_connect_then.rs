//! `Transport::connect_then`: outbound handshakes driven by the first I/O
//! thread, no thread per connect; written as a careless caller and an
//! attacker on the other end would try it.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use graft_net::{IoMode, NetError};

#[test]
fn a_connect_runs_on_the_io_thread_and_carries_frames_both_ways() {
    init_log();
    let (a, ra) = start(config("a", "c"));
    let (b, rb) = start(config("b", "c"));
    let (r, who) = connect_then(&a, b.local_addr());
    let info = r.unwrap();
    assert_eq!(info.name, "b");
    assert_eq!(who, "graft-net-io");
    // Announced before `done`: the table has it.
    assert_eq!(a.peer_named("b").unwrap().id, info.id);
    a.send(info.id, 40, b"ab").unwrap();
    rb.wait_for("a's frame", |ev| count_frames(ev) == 1);
    let back = b.peer_named("a").unwrap();
    b.send(back.id, 41, b"ba").unwrap();
    ra.wait_for("b's frame", |ev| count_frames(ev) == 1);
    assert_eq!(ra.frames_from(info.id), vec![(41, b"ba".to_vec())]);
    // A second connect to the same address is the same connection.
    let (again, _) = connect_then(&a, b.local_addr());
    assert_eq!(again.unwrap().id, info.id);
    a.shutdown();
    b.shutdown();
}

#[test]
fn many_connects_at_once_all_finish_on_the_one_io_thread() {
    init_log();
    const N: usize = 24;
    let (a, _ra) = start(config("hub", "c"));
    let peers: Vec<_> = (0..N)
        .map(|i| start(config(&format!("p{i}"), "c")))
        .collect();
    let (tx, rx) = mpsc::channel();
    for (p, _) in &peers {
        let tx = tx.clone();
        a.connect_then(
            p.local_addr(),
            Box::new(move |r| {
                let who = std::thread::current().name().unwrap_or("").to_string();
                let _ = tx.send((r.map(|i| i.name), who));
            }),
        );
    }
    let mut names: Vec<String> = (0..N)
        .map(|_| {
            let (r, who) = rx.recv_timeout(GUARD).expect("every connect answered");
            assert_eq!(who, "graft-net-io");
            r.unwrap()
        })
        .collect();
    names.sort();
    let mut want: Vec<String> = (0..N).map(|i| format!("p{i}")).collect();
    want.sort();
    assert_eq!(names, want);
    assert_eq!(a.peers().len(), N);
    for (p, _) in &peers {
        p.shutdown();
    }
    a.shutdown();
}

#[test]
fn the_threads_transport_connects_the_same_way() {
    init_log();
    let (a, _ra) = start(config("ta", "c").io(IoMode::Threads));
    let (b, rb) = start(config("tb", "c").io(IoMode::Threads));
    let (r, who) = connect_then(&a, b.local_addr());
    let info = r.unwrap();
    assert_eq!(who, "graft-net-accpt");
    a.send(info.id, 40, b"x").unwrap();
    rb.wait_for("the frame", |ev| count_frames(ev) == 1);
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_closed_port_fails_and_a_wrong_cookie_is_refused() {
    init_log();
    let (a, _ra) = start(config("a", "c"));
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    match connect_then(&a, closed).0 {
        Err(NetError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused),
        r => panic!("expected a refused connect, got {r:?}"),
    }
    let (other, _ro) = start(config("other", "not-c"));
    match connect_then(&a, other.local_addr()).0 {
        Err(NetError::Auth { .. }) => {}
        r => panic!("expected an authentication failure, got {r:?}"),
    }
    assert!(other.peers().is_empty() && a.peers().is_empty());
    other.shutdown();
    a.shutdown();
}

/// A listener that accepts and then does `then` with each socket, on a
/// thread of the test's.
fn fake_peer(then: impl Fn(std::net::TcpStream) + Send + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            then(s);
        }
    });
    addr
}

#[test]
fn silent_slow_and_garbage_peers_cost_a_bounded_wait_and_an_error() {
    init_log();
    let cfg = config("a", "c").connect_timeout(Duration::from_millis(400));
    let (a, _ra) = start(cfg);
    // Accepts, reads, never answers.
    let silent = fake_peer(|mut s| {
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        });
    });
    assert!(matches!(connect_then(&a, silent).0, Err(NetError::Timeout)));
    // Announces a small frame, then sends it a byte at a time, slower
    // than the deadline allows.
    let slow = fake_peer(|mut s| {
        std::thread::spawn(move || {
            if s.write_all(&[0, 0, 0, 100, 1, 0]).is_err() {
                return;
            }
            for _ in 0..100 {
                if s.write_all(b"G").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
    });
    let r = connect_then(&a, slow).0;
    assert!(matches!(r, Err(NetError::Timeout)), "{r:?}");
    // Answers garbage: a frame header claiming a huge length.
    let garbage = fake_peer(|mut s| {
        let _ = s.write_all(&[0xff; 64]);
        std::thread::sleep(Duration::from_millis(200));
    });
    match connect_then(&a, garbage).0 {
        Err(NetError::Handshake(_) | NetError::Protocol(_)) => {}
        r => panic!("expected a handshake error, got {r:?}"),
    }
    // Hangs up at once.
    let rude = fake_peer(drop);
    assert!(connect_then(&a, rude).0.is_err());
    // None of it is left over: a real peer still connects.
    let (b, _rb) = start(config("b", "c"));
    assert_eq!(connect_then(&a, b.local_addr()).0.unwrap().name, "b");
    b.shutdown();
    a.shutdown();
}

#[test]
fn both_sides_connecting_at_once_end_with_one_connection() {
    init_log();
    for round in 0..10 {
        let (a, _ra) = start(config(&format!("x{round}"), "c"));
        let (b, _rb) = start(config(&format!("y{round}"), "c"));
        let (tx, rx) = mpsc::channel();
        for (from, to) in [(&a, b.local_addr()), (&b, a.local_addr())] {
            let tx = tx.clone();
            from.connect_then(to, Box::new(move |r| tx.send(r).unwrap()));
        }
        let results: Vec<_> = (0..2).map(|_| rx.recv_timeout(GUARD).unwrap()).collect();
        for r in &results {
            assert!(
                matches!(r, Ok(_) | Err(NetError::Duplicate)),
                "round {round}: {r:?}"
            );
        }
        wait_until("one connection each way", || {
            a.peers().len() == 1 && b.peers().len() == 1
        });
        // The one kept is the same on both sides.
        let pa = a.peers()[0].clone();
        let pb = b.peers()[0].clone();
        assert_eq!(pa.name, format!("y{round}"));
        assert_eq!(pb.name, format!("x{round}"));
        a.shutdown();
        b.shutdown();
    }
}

#[test]
fn a_connect_in_flight_at_shutdown_and_one_after_are_told_so() {
    init_log();
    let (a, _ra) = start(config("a", "c"));
    let silent = fake_peer(|s| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            drop(s);
        });
    });
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    a.connect_then(silent, Box::new(move |r| tx.send(r).unwrap()));
    std::thread::sleep(Duration::from_millis(100));
    a.shutdown();
    assert!(matches!(
        rx.recv_timeout(GUARD).unwrap(),
        Err(NetError::Shutdown)
    ));
    a.connect_then(silent, Box::new(move |r| tx2.send(r).unwrap()));
    assert!(matches!(
        rx.recv_timeout(GUARD).unwrap(),
        Err(NetError::Shutdown)
    ));
}

#[test]
fn a_panicking_completion_leaves_the_io_thread_serving() {
    init_log();
    let (a, _ra) = start(config("a", "c"));
    let (b, _rb) = start(config("b", "c"));
    let (c, _rc) = start(config("c", "c"));
    a.connect_then(b.local_addr(), Box::new(|_| panic!("a careless callback")));
    wait_until("b up", || a.peer_named("b").is_some());
    assert_eq!(connect_then(&a, c.local_addr()).0.unwrap().name, "c");
    for t in [&a, &b, &c] {
        t.shutdown();
    }
}

#[test]
fn outbound_handshakes_in_flight_are_bounded_and_the_rest_wait_their_turn() {
    init_log();
    let cfg = config("a", "c")
        .max_pending_handshakes(1)
        .connect_timeout(Duration::from_millis(500));
    let (a, _ra) = start(cfg);
    let peers: Vec<_> = (0..4)
        .map(|i| start(config(&format!("q{i}"), "c")))
        .collect();
    // One at a time, all of them up in the end.
    let (tx, rx) = mpsc::channel();
    for (p, _) in &peers {
        let tx = tx.clone();
        a.connect_then(p.local_addr(), Box::new(move |r| tx.send(r).unwrap()));
    }
    for _ in &peers {
        assert!(rx.recv_timeout(GUARD).unwrap().is_ok());
    }
    // A silent peer holds the one slot: a live node queued behind it is
    // not started before its own deadline passes.
    let silent = fake_peer(|s| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            drop(s);
        });
    });
    let (b, _rb) = start(config("b", "c"));
    let (tx1, tx2) = (tx.clone(), tx);
    a.connect_then(silent, Box::new(move |r| tx1.send(r).unwrap()));
    a.connect_then(b.local_addr(), Box::new(move |r| tx2.send(r).unwrap()));
    for _ in 0..2 {
        let r = rx.recv_timeout(GUARD).unwrap();
        assert!(matches!(r, Err(NetError::Timeout)), "{r:?}");
    }
    assert!(b.peers().is_empty());
    for (p, _) in &peers {
        p.shutdown();
    }
    b.shutdown();
    a.shutdown();
}

/// With extra lanes the first connection and every lane are dialled on
/// the I/O thread; the peer is announced once all are up, and frames of
/// several senders (on their lanes) arrive, each sender's in order.
#[test]
fn with_extra_lanes_every_lane_is_dialled_on_the_io_thread() {
    init_log();
    let (a, _ra) = start(config("la", "c").lanes(3));
    let (b, rb) = start(config("lb", "c").lanes(3));
    let (r, who) = connect_then(&a, b.local_addr());
    let info = r.unwrap();
    assert_eq!((info.name.as_str(), who.as_str()), ("lb", "graft-net-io"));
    // Announced with its lanes: nothing is half up.
    assert_eq!(a.peer_named("lb").unwrap().id, info.id);
    let s = a.sender(info.id).unwrap();
    assert_eq!(s.lanes(), 3, "every lane up before `done`");
    for i in 0..300u32 {
        s.send_keyed(u64::from(i % 3), 40, i.to_be_bytes().to_vec(), false)
            .unwrap();
    }
    rb.wait_for("every frame", |ev| count_frames(ev) == 300);
    let got = rb.frames_from(rb.ups()[0].id);
    for key in 0..3u32 {
        let mine: Vec<u32> = (got.iter())
            .map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()))
            .filter(|i| i % 3 == key)
            .collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "key {key} out of order"
        );
        assert_eq!(mine.len(), 100);
    }
    a.shutdown();
    b.shutdown();
}

/// A relay that passes the first connection through to `to` and hangs up
/// every later one at once: a first connection that comes up, and lanes
/// that cannot.
fn first_only_relay(to: SocketAddr) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (first, _) = l.accept().unwrap();
        let back = std::net::TcpStream::connect(to).unwrap();
        for (mut from, mut into) in [
            (first.try_clone().unwrap(), back.try_clone().unwrap()),
            (back, first),
        ] {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from, &mut into);
                let _ = into.shutdown(std::net::Shutdown::Both);
            });
        }
        for s in l.incoming() {
            drop(s);
        }
    });
    addr
}

/// A lane that cannot connect fails the whole connect, as `connect`
/// does: an error, no peer left on either side, and the I/O thread goes on
/// (a good peer connects after it).
#[test]
fn a_lane_that_fails_fails_the_connect_and_leaves_nothing() {
    init_log();
    let (a, ra) = start(config("la", "c").lanes(2));
    let (b, rb) = start(
        config("lb", "c")
            .lanes(2)
            .handshake_timeout(Duration::from_millis(500)),
    );
    let (r, who) = connect_then(&a, first_only_relay(b.local_addr()));
    let e = r.expect_err("no lane");
    assert_eq!(who, "graft-net-io");
    eprintln!("lanes refused: {e}");
    assert!(a.peers().is_empty());
    assert!(ra.ups().is_empty(), "never announced");
    wait_until("b drops the first connection", || b.peers().is_empty());
    assert!(rb.ups().is_empty());
    let (c, _rc) = start(config("lc", "c").lanes(2));
    assert_eq!(connect_then(&a, c.local_addr()).0.unwrap().name, "lc");
    a.shutdown();
    b.shutdown();
    c.shutdown();
}
