//! Two transports over real TCP on 127.0.0.1: exchange, ordering,
//! compression, duplicate connections, disconnect.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::*;
use graft_net::{NetError, RawClient, FIRST_USER_KIND};

const N: u32 = 100_000;

fn payload(i: u32) -> Vec<u8> {
    // Sizes vary from 4 to 67 bytes; the first 4 bytes are the sequence number.
    let mut p = i.to_be_bytes().to_vec();
    p.extend(std::iter::repeat_n((i % 251) as u8, (i % 64) as usize));
    p
}

fn kind_of(i: u32) -> u8 {
    FIRST_USER_KIND + (i % 240) as u8
}

fn check_in_order(got: &[(u8, Vec<u8>)]) {
    assert_eq!(got.len(), N as usize, "frames lost or duplicated");
    for (i, (k, p)) in got.iter().enumerate() {
        let i = i as u32;
        assert_eq!(
            (*k, p),
            (kind_of(i), &payload(i)),
            "frame {i} out of order or corrupt"
        );
    }
}

#[test]
fn hundred_thousand_frames_each_way_in_order() {
    init_log();
    let (a, ra) = start(config("a", "cookie"));
    let (b, rb) = start(config("b", "cookie"));
    let pb = a.connect(b.local_addr()).unwrap();
    assert_eq!(pb.name, "b");
    rb.wait_for("b sees a", |ev| ups(ev).len() == 1);
    let pa = rb.ups()[0].clone();
    assert_eq!(pa.name, "a");
    assert_eq!(pa.listen_addr, a.local_addr());
    assert_eq!(ra.ups(), vec![pb.clone()]);

    let senders = [(a.clone(), pb.id), (b.clone(), pa.id)].map(|(t, to)| {
        thread::spawn(move || {
            for i in 0..N {
                t.send(to, kind_of(i), &payload(i)).unwrap();
            }
        })
    });
    for s in senders {
        s.join().unwrap();
    }
    ra.wait_for("a receives all", |ev| count_frames(ev) >= N as usize);
    rb.wait_for("b receives all", |ev| count_frames(ev) >= N as usize);
    check_in_order(&ra.frames_from(pb.id));
    check_in_order(&rb.frames_from(pa.id));
    assert!(ra.downs().is_empty() && rb.downs().is_empty());

    a.shutdown();
    rb.wait_for("b sees a go", |ev| downs(ev).len() == 1);
    b.shutdown();
    assert_lifecycles(&ra.events());
    assert_lifecycles(&rb.events());
    let (da, db) = (ra.downs(), rb.downs());
    assert_eq!(da.len(), 1);
    assert!(matches!(da[0].1, NetError::Shutdown), "{:?}", da[0].1);
    assert_eq!(db.len(), 1);
    assert!(matches!(db[0].1, NetError::Closed), "{:?}", db[0].1);
}

/// A deterministic, incompressible byte stream.
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn large_payloads_round_trip_compressed() {
    init_log();
    let (a, _ra) = start(config("a", "c").compress_threshold(1024));
    let (b, rb) = start(config("b", "c").compress_threshold(1024));
    let pb = a.connect(b.local_addr()).unwrap();
    let text: Vec<u8> = b"graft moves processes between nodes. "
        .iter()
        .copied()
        .cycle()
        .take(8 << 20)
        .collect();
    let random = noise(3 << 20);
    a.send(pb.id, 200, &text).unwrap();
    a.send(pb.id, 201, &random).unwrap();
    a.send(pb.id, 202, b"small").unwrap();
    rb.wait_for("three frames", |ev| count_frames(ev) == 3);
    let got = rb.frames_from(rb.ups()[0].id);
    assert_eq!(got[0], (200, text.clone()));
    assert_eq!(got[1], (201, random));
    assert_eq!(got[2], (202, b"small".to_vec()));

    // On the wire, the compressible payload really is compressed.
    let probe_cfg = config("probe", "c");
    let (mut raw, _) = RawClient::connect(a.local_addr(), &probe_cfg).unwrap();
    // The acceptor announces a peer after the initiator's connect returned.
    wait_until("probe listed", || {
        a.peers().iter().any(|p| p.name == "probe")
    });
    let probe = a.peers().into_iter().find(|p| p.name == "probe").unwrap();
    a.send(probe.id, 203, &text).unwrap();
    let (kind, flags, wire) = loop {
        let f = raw
            .recv_frame(GUARD)
            .unwrap()
            .expect("frame within the guard");
        if f.0 != 4 {
            break f; // skip heartbeats
        }
    };
    assert_eq!((kind, flags), (203, 1));
    assert!(
        wire.len() < text.len() / 20,
        "{} bytes on the wire",
        wire.len()
    );
    a.shutdown();
    b.shutdown();
}

#[test]
fn send_refuses_reserved_kinds_and_oversized_frames() {
    init_log();
    let (a, _ra) = start(
        config("a", "c")
            .max_message_size(1000)
            .compress_threshold(usize::MAX),
    );
    let (b, _rb) = start(config("b", "c"));
    let pb = a.connect(b.local_addr()).unwrap();
    for k in 0..FIRST_USER_KIND {
        assert!(matches!(
            a.send(pb.id, k, b"x"),
            Err(NetError::ReservedKind(_))
        ));
    }
    assert!(matches!(
        a.send(pb.id, 20, &[0; 1001]),
        Err(NetError::MessageTooLarge {
            size: 1001,
            max: 1000
        })
    ));
    a.send(pb.id, 20, &[0; 1000]).unwrap();
    a.shutdown();
    b.shutdown();
}

#[test]
fn simultaneous_connects_keep_one_connection() {
    init_log();
    for round in 0..20 {
        let (a, ra) = start(config(&format!("a{round}"), "c"));
        let (b, rb) = start(config(&format!("b{round}"), "c"));
        let go = Arc::new(Barrier::new(2));
        let calls = [(a.clone(), b.local_addr()), (b.clone(), a.local_addr())].map(|(t, to)| {
            let go = go.clone();
            thread::spawn(move || {
                go.wait();
                t.connect(to)
            })
        });
        let [from_a, from_b] = calls.map(|h| h.join().unwrap().expect("connect"));
        assert_eq!(from_a.name, b.name());
        assert_eq!(from_b.name, a.name());
        assert_eq!(a.peers(), vec![from_a.clone()], "round {round}");
        assert_eq!(b.peers(), vec![from_b.clone()], "round {round}");
        assert_eq!(ra.ups(), vec![from_a.clone()], "round {round}");
        assert_eq!(rb.ups(), vec![from_b.clone()], "round {round}");
        a.send(from_a.id, 30, b"ping").unwrap();
        b.send(from_b.id, 31, b"pong").unwrap();
        rb.wait_for("ping", |ev| count_frames(ev) == 1);
        ra.wait_for("pong", |ev| count_frames(ev) == 1);
        assert!(
            ra.downs().is_empty() && rb.downs().is_empty(),
            "round {round}"
        );
        a.shutdown();
        b.shutdown();
    }
}

#[test]
fn connecting_again_returns_the_existing_peer() {
    init_log();
    let (a, ra) = start(config("a", "c"));
    let (b, rb) = start(config("b", "c"));
    let p1 = a.connect(b.local_addr()).unwrap();
    let p2 = a.connect(b.local_addr()).unwrap();
    assert_eq!(p1, p2);
    // The other direction finds the same connection by name.
    rb.wait_for("b sees a", |ev| ups(ev).len() == 1);
    let back = b.connect(a.local_addr()).unwrap();
    assert_eq!(back.name, "a");
    assert_eq!(b.peers().len(), 1);
    assert_eq!((ra.ups().len(), rb.ups().len()), (1, 1));
    a.shutdown();
    b.shutdown();
}

#[test]
fn disconnect_reports_down_once_on_both_sides() {
    init_log();
    let (a, ra) = start(config("a", "c"));
    let (b, rb) = start(config("b", "c"));
    let pb = a.connect(b.local_addr()).unwrap();
    rb.wait_for("b sees a", |ev| ups(ev).len() == 1);
    let sender = a.sender(pb.id).unwrap();
    assert!(sender.is_connected());
    a.disconnect(pb.id);
    assert!(!sender.is_connected());
    assert!(matches!(sender.send(20, b"x"), Err(NetError::NotConnected(id)) if id == pb.id));
    ra.wait_for("a down", |ev| downs(ev).len() == 1);
    rb.wait_for("b down", |ev| downs(ev).len() == 1);
    assert!(matches!(ra.downs()[0].1, NetError::Disconnected));
    assert!(matches!(rb.downs()[0].1, NetError::Closed));
    assert!(matches!(
        a.send(pb.id, 20, b"x"),
        Err(NetError::NotConnected(_))
    ));
    assert!(a.peers().is_empty());
    wait_until("b forgets a", || b.peers().is_empty());
    a.disconnect(pb.id); // unknown now: ignored

    // Reconnecting makes a new peer id.
    let again = a.connect(b.local_addr()).unwrap();
    assert_ne!(again.id, pb.id);
    a.send(again.id, 20, b"after").unwrap();
    rb.wait_for("frame after reconnect", |ev| count_frames(ev) == 1);
    a.shutdown();
    b.shutdown();
    assert_eq!(ra.downs().len(), 2);
    assert_eq!(rb.downs().len(), 2);
    assert_lifecycles(&ra.events());
    assert_lifecycles(&rb.events());
}

#[test]
fn restarted_node_replaces_its_old_connection() {
    init_log();
    let (a, ra) = start(config("a", "c"));
    let (b1, rb1) = start(config("b", "c").creation(1));
    let old = b1.connect(a.local_addr()).unwrap();
    ra.wait_for("a sees b1", |ev| ups(ev).len() == 1);
    // A new incarnation of "b" (new creation) connects while the old
    // connection still looks alive.
    let (b2, _rb2) = start(config("b", "c").creation(2));
    b2.connect(a.local_addr()).unwrap();
    ra.wait_for("old b replaced", |ev| {
        ups(ev).len() == 2 && downs(ev).len() == 1
    });
    let (gone, why) = ra.downs()[0].clone();
    assert_eq!(gone.creation, 1);
    assert!(matches!(why, NetError::Replaced), "{why:?}");
    // `peers()` lists a peer once its `peer_up` has returned.
    wait_until("a lists b2", || a.peers().len() == 1);
    assert_eq!(a.peers()[0].creation, 2);
    rb1.wait_for("b1 sees the close", |ev| downs(ev).len() == 1);
    assert!(b1.peers().is_empty());
    let _ = old;
    a.shutdown();
    b1.shutdown();
    b2.shutdown();
}

/// Sends a welcome frame from inside `peer_up`.
struct Greeter {
    rec: Arc<Recorder>,
    me: std::sync::OnceLock<graft_net::Transport>,
}

impl graft_net::Handler for Greeter {
    fn peer_up(&self, p: &graft_net::PeerInfo) {
        self.rec.peer_up(p);
        self.me.get().unwrap().send(p.id, 77, b"welcome").unwrap();
    }
    fn frame(&self, p: &graft_net::PeerInfo, k: u8, d: Vec<u8>) {
        self.rec.frame(p, k, d);
    }
    fn peer_down(&self, p: &graft_net::PeerInfo, r: &NetError) {
        self.rec.peer_down(p, r);
    }
}

#[test]
fn frames_sent_from_peer_up_arrive_first() {
    init_log();
    for round in 0..10 {
        let mk = |name: &str| {
            let g = Arc::new(Greeter {
                rec: Recorder::new(),
                me: Default::default(),
            });
            let t = graft_net::Transport::start(config(name, "c"), g.clone()).unwrap();
            g.me.set(t.clone()).unwrap();
            (t, g)
        };
        let (a, ga) = mk("a");
        let (b, gb) = mk("b");
        let pb = a.connect(b.local_addr()).unwrap();
        a.send(pb.id, 78, b"after connect").unwrap();
        ga.rec
            .wait_for("welcome from b", |ev| count_frames(ev) == 1);
        gb.rec
            .wait_for("two frames from a", |ev| count_frames(ev) == 2);
        assert_eq!(
            ga.rec.frames_from(pb.id),
            vec![(77, b"welcome".to_vec())],
            "round {round}"
        );
        let pa = gb.rec.ups()[0].id;
        assert_eq!(
            gb.rec.frames_from(pa),
            vec![(77, b"welcome".to_vec()), (78, b"after connect".to_vec())],
            "round {round}"
        );
        a.shutdown();
        b.shutdown();
        assert_lifecycles(&ga.rec.events());
        assert_lifecycles(&gb.rec.events());
    }
}

#[test]
fn racing_closes_report_down_exactly_once() {
    init_log();
    for _ in 0..10 {
        let (a, ra) = start(config("a", "c"));
        let (b, rb) = start(config("b", "c"));
        let pb = a.connect(b.local_addr()).unwrap();
        rb.wait_for("b sees a", |ev| ups(ev).len() == 1);
        let pa = rb.ups()[0].id;
        // Both ends disconnect at once while traffic flows, then both shut down.
        let go = Arc::new(Barrier::new(3));
        let hs = [(a.clone(), pb.id), (b.clone(), pa)].map(|(t, p)| {
            let go = go.clone();
            thread::spawn(move || {
                for i in 0..1000u32 {
                    let _ = t.send(p, 20, &i.to_be_bytes());
                }
                go.wait();
                t.disconnect(p);
                let _ = t.send(p, 20, b"late");
            })
        });
        go.wait();
        a.shutdown();
        for h in hs {
            h.join().unwrap();
        }
        b.shutdown();
        assert_eq!(ra.downs().len(), 1);
        assert_eq!(rb.downs().len(), 1);
        assert_lifecycles(&ra.events());
        assert_lifecycles(&rb.events());
    }
}

#[test]
fn four_senders_to_one_peer_keep_fifo_per_sender() {
    init_log();
    const PER: u32 = 100_000;
    let (a, _ra) = start(config("a", "c"));
    let (b, rb) = start(config("b", "c"));
    let pb = a.connect(b.local_addr()).unwrap();
    let hs: Vec<_> = (0..4u8)
        .map(|s| {
            let a = a.clone();
            thread::spawn(move || {
                let sender = a.sender(pb.id).unwrap();
                for i in 0..PER {
                    let mut p = vec![s];
                    p.extend_from_slice(&i.to_be_bytes());
                    sender.send(FIRST_USER_KIND + s, &p).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    rb.wait_for("all frames", |ev| count_frames(ev) == 4 * PER as usize);
    let mut next = [0u32; 4];
    for (k, p) in rb.frames_from(rb.ups()[0].id) {
        let s = p[0];
        assert_eq!(k, FIRST_USER_KIND + s);
        let i = u32::from_be_bytes(p[1..5].try_into().unwrap());
        assert_eq!(i, next[s as usize], "sender {s} out of order");
        next[s as usize] += 1;
    }
    assert_eq!(next, [PER; 4]);
    a.shutdown();
    b.shutdown();
}

/// Blocks in `frame` until the gate opens, so the socket between the nodes
/// fills up.
struct Gated {
    rec: Arc<Recorder>,
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl graft_net::Handler for Gated {
    fn peer_up(&self, p: &graft_net::PeerInfo) {
        self.rec.peer_up(p);
    }
    fn frame(&self, p: &graft_net::PeerInfo, k: u8, d: Vec<u8>) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
        drop(open);
        self.rec.frame(p, k, d);
    }
    fn peer_down(&self, p: &graft_net::PeerInfo, r: &NetError) {
        self.rec.peer_down(p, r);
    }
}

#[test]
fn a_slow_reader_fills_the_socket_and_nothing_is_lost() {
    init_log();
    let gated = Arc::new(Gated {
        rec: Recorder::new(),
        open: Default::default(),
        cv: Default::default(),
    });
    let (a, _ra) = start(config("a", "c").compress_threshold(usize::MAX));
    let b = graft_net::Transport::start(config("b", "c"), gated.clone()).unwrap();
    let pb = a.connect(b.local_addr()).unwrap();
    let sender = a.sender(pb.id).unwrap();
    // Spaced sends (so senders try to write directly) of far more than the
    // socket buffers hold, while the receiver is stuck.
    let chunk = vec![0xabu8; 64 << 10];
    for i in 0..300u32 {
        let mut p = chunk.clone();
        p[..4].copy_from_slice(&i.to_be_bytes());
        sender.send(20, &p).unwrap();
        if i % 10 == 0 {
            thread::sleep(std::time::Duration::from_micros(50));
        }
    }
    assert!(
        sender.queued_bytes() > 0,
        "the socket should be full by now"
    );
    *gated.open.lock().unwrap() = true;
    gated.cv.notify_all();
    gated
        .rec
        .wait_for("all chunks", |ev| count_frames(ev) == 300);
    let got = gated.rec.frames_from(gated.rec.ups()[0].id);
    for (i, (_, p)) in got.iter().enumerate() {
        assert_eq!(&p[..4], &(i as u32).to_be_bytes(), "chunk {i}");
        assert_eq!(p.len(), chunk.len());
    }
    a.shutdown();
    b.shutdown();
}

#[test]
fn held_frames_leave_on_flush_with_a_later_send_or_past_the_cap() {
    init_log();
    // An hour's tick: a's writer never wakes on its own, so what leaves
    // before a flush was not held.
    let (a, _ra) = start(
        config("a", "c")
            .compress_threshold(usize::MAX)
            .heartbeat(Duration::from_secs(3600)),
    );
    let (b, rb) = start(config("b", "c"));
    let pb = a.connect(b.local_addr()).unwrap();
    rb.wait_for("b sees a", |ev| ups(ev).len() == 1);
    let pa = rb.ups()[0].id;
    let sender = a.sender(pb.id).unwrap();
    // Frames of kind 19 are probes: sent until one is held, which says
    // a's writer has parked after the handshake.
    const PROBE: u8 = 19;
    let mut probes = 0;
    loop {
        probes += 1;
        if sender.send_held(PROBE, b"probe").unwrap() {
            sender.flush();
            break;
        }
        assert!(probes < 2000, "a's writer never parked");
        std::thread::sleep(Duration::from_millis(5));
    }
    let frames = || {
        let mut f = rb.frames_from(pa);
        f.retain(|(k, _)| *k != PROBE);
        f
    };
    rb.wait_for("the probes", |ev| count_frames(ev) == probes);

    // Held, then flushed: both leave, in order, and only then.
    assert!(sender.send_held(20, b"one").unwrap(), "held");
    assert!(sender.send_held(21, b"two").unwrap(), "held");
    assert!(sender.queued_bytes() > 0, "nothing leaves before the flush");
    sender.flush();
    sender.flush(); // nothing held: no effect
    rb.wait_for("one, two", |ev| count_frames(ev) == probes + 2);

    // Held, then an ordinary send: it takes the held frame along.
    assert!(sender.send_held(22, b"three").unwrap(), "held");
    sender.send(23, b"four").unwrap();
    rb.wait_for("three, four", |ev| count_frames(ev) == probes + 4);

    // Held past the cap, never flushed: the writer takes over.
    let big = vec![7u8; 1000];
    for _ in 0..100 {
        let _ = sender.send_held(24, &big).unwrap();
    }
    rb.wait_for("the held burst", |ev| count_frames(ev) >= probes + 4 + 33);
    sender.flush();
    rb.wait_for("all of it", |ev| count_frames(ev) == probes + 104);

    let got = frames();
    let kinds: Vec<u8> = got.iter().map(|(k, _)| *k).collect();
    assert_eq!(&kinds[..4], &[20, 21, 22, 23]);
    assert_eq!(got[0].1, b"one");
    assert_eq!(got[3].1, b"four");
    assert!(got[4..].iter().all(|(k, p)| *k == 24 && *p == big));
    a.shutdown();
    b.shutdown();
}
