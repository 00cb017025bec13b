//! Parallel lanes per peer (`NetConfig::lanes`): frames of one order key in
//! order across lanes, several connections really used, a lane lost takes
//! the whole peer down once, lanes=1 and lanes=4 interoperate, and forged,
//! replayed, unknown, duplicate and out-of-range lanes are refused.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use graft_net::{IoMode, NetConfig, NetError, PeerId, RawClient, FIRST_USER_KIND};

fn lanes_config(name: &str, lanes: usize) -> NetConfig {
    config(name, "lanes-cookie").io(IoMode::Poller).lanes(lanes)
}

/// `(key, seq)` frames sent by `senders` threads, `per` each, some of them
/// large (fragmented), all arrive complete and in order per key.
fn check_sequences(rec: &Recorder, from: PeerId, senders: u64, per: u64) {
    let mut next: HashMap<u64, u64> = HashMap::new();
    for (_, d) in rec.frames_from(from) {
        let key = u64::from_be_bytes(d[..8].try_into().unwrap());
        let seq = u64::from_be_bytes(d[8..16].try_into().unwrap());
        let want = next.entry(key).or_insert(0);
        assert_eq!(seq, *want, "key {key}: frame {seq} where {want} was due");
        *want += 1;
    }
    for key in 1..=senders {
        assert_eq!(next.get(&key).copied(), Some(per), "key {key} incomplete");
    }
}

fn payload(key: u64, seq: u64) -> Vec<u8> {
    // Every 50th frame is over a fragment (64 KiB), so it travels in
    // fragments with frames of its key behind it.
    let len = if seq % 50 == 7 { 100 << 10 } else { 16 };
    let mut v = vec![(key as u8) ^ (seq as u8); len];
    v[..8].copy_from_slice(&key.to_be_bytes());
    v[8..16].copy_from_slice(&seq.to_be_bytes());
    v
}

#[test]
fn four_lanes_keep_each_senders_order_and_use_every_lane() {
    init_log();
    let (a, ra) = start(lanes_config("a", 4));
    let (b, rb) = start(lanes_config("b", 4));
    let peer = a.connect(b.local_addr()).expect("connect");
    rb.wait_for("b sees a", |ev| !ups(ev).is_empty());
    let s = a.sender(peer.id).unwrap();
    assert_eq!(s.lanes(), 4);
    let back = b.sender(rb.ups()[0].id).unwrap();
    assert_eq!(back.lanes(), 4, "the acceptor has the same lanes");
    const SENDERS: u64 = 8;
    const PER: u64 = 400;
    std::thread::scope(|sc| {
        for key in 1..=SENDERS {
            let s = s.clone();
            sc.spawn(move || {
                for seq in 0..PER {
                    s.send_keyed(key, FIRST_USER_KIND, payload(key, seq), false)
                        .unwrap();
                }
            });
        }
        // The other way too, at the same time.
        let back = back.clone();
        sc.spawn(move || {
            for seq in 0..PER {
                back.send_keyed(3, FIRST_USER_KIND, payload(3, seq), seq % 3 == 0)
                    .unwrap();
                back.flush();
            }
        });
    });
    let total = (SENDERS * PER) as usize;
    rb.wait_for("every frame at b", |ev| count_frames(ev) >= total);
    ra.wait_for("every frame at a", |ev| count_frames(ev) >= PER as usize);
    let a_at_b = rb.ups()[0].id;
    check_sequences(&rb, a_at_b, SENDERS, PER);
    let mut next = 0;
    for (_, d) in ra.frames_from(peer.id) {
        assert_eq!(u64::from_be_bytes(d[8..16].try_into().unwrap()), next);
        next += 1;
    }
    assert_eq!(next, PER);
    let per_lane = s.lane_frames();
    assert_eq!(per_lane.len(), 4);
    for (i, n) in per_lane.iter().enumerate() {
        // Keys 1..=8 over 4 lanes: two keys per lane.
        assert_eq!(*n, 2 * PER, "lane {i}: {per_lane:?}");
    }
    assert_eq!(back.lane_frames()[3], PER, "key 3 on lane 3");
    assert_lifecycles(&ra.events());
    assert_lifecycles(&rb.events());
    assert_eq!(ra.ups().len(), 1);
    assert_eq!(rb.ups().len(), 1);
    a.shutdown();
    b.shutdown();
    ra.wait_for("one down at a", |ev| downs(ev).len() == 1);
    rb.wait_for("one down at b", |ev| downs(ev).len() == 1);
}

#[test]
fn idle_lanes_stay_up_on_their_heartbeats() {
    init_log();
    let tick = Duration::from_millis(40);
    let (a, ra) = start(lanes_config("a", 3).heartbeat(tick));
    let (b, rb) = start(lanes_config("b", 3).heartbeat(tick));
    let peer = a.connect(b.local_addr()).unwrap();
    // Twelve ticks of silence: each lane must keep itself alive (a lane
    // that heard nothing for three would be declared dead).
    std::thread::sleep(tick * 12);
    assert!(
        ra.downs().is_empty() && rb.downs().is_empty(),
        "{:?}",
        ra.downs()
    );
    let s = a.sender(peer.id).unwrap();
    for key in 0..6 {
        s.send_keyed(key, FIRST_USER_KIND, key.to_be_bytes().to_vec(), false)
            .unwrap();
    }
    rb.wait_for("six frames", |ev| count_frames(ev) == 6);
    a.shutdown();
    b.shutdown();
}

#[test]
fn one_lane_lost_takes_the_whole_peer_down_once() {
    init_log();
    for lane in [2usize, 0] {
        let (a, ra) = start(lanes_config("a", 4));
        let (b, rb) = start(lanes_config("b", 4));
        let peer = a.connect(b.local_addr()).unwrap();
        rb.wait_for("b sees a", |ev| !ups(ev).is_empty());
        let s = a.sender(peer.id).unwrap();
        for key in 0..8u64 {
            s.send_keyed(key, FIRST_USER_KIND, vec![key as u8; 8], false)
                .unwrap();
        }
        rb.wait_for("eight frames", |ev| count_frames(ev) == 8);
        s.shutdown_lane_socket(lane);
        ra.wait_for("a: peer down", |ev| downs(ev).len() == 1);
        rb.wait_for("b: peer down", |ev| downs(ev).len() == 1);
        // Every lane is closed: sends on any key fail.
        wait_until("sends fail", || {
            (0..8u64).all(|k| s.send_keyed(k, FIRST_USER_KIND, vec![1], false).is_err())
        });
        assert!(!s.is_connected());
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(ra.downs().len(), 1, "lane {lane}: one peer_down at a");
        assert_eq!(rb.downs().len(), 1, "lane {lane}: one peer_down at b");
        assert!(a.peers().is_empty());
        assert_lifecycles(&ra.events());
        assert_lifecycles(&rb.events());
        // And it comes back.
        let again = a.connect(b.local_addr()).unwrap();
        assert_eq!(a.sender(again.id).unwrap().lanes(), 4);
        a.shutdown();
        b.shutdown();
    }
}

#[test]
fn one_lane_and_four_lanes_interoperate() {
    init_log();
    for (ia, ib) in [(1usize, 4usize), (4, 1), (2, 4)] {
        let (a, ra) = start(lanes_config("a", ia));
        let (b, rb) = start(lanes_config("b", ib));
        let peer = a.connect(b.local_addr()).unwrap();
        rb.wait_for("b sees a", |ev| !ups(ev).is_empty());
        let s = a.sender(peer.id).unwrap();
        let want = ia.min(ib);
        assert_eq!(s.lanes(), want, "{ia} with {ib}");
        assert_eq!(b.sender(rb.ups()[0].id).unwrap().lanes(), want);
        for key in 0..16u64 {
            s.send_keyed(key, FIRST_USER_KIND, payload(key, 0), false)
                .unwrap();
        }
        rb.wait_for("sixteen frames", |ev| count_frames(ev) == 16);
        assert!(ra.downs().is_empty());
        a.shutdown();
        b.shutdown();
    }
}

#[test]
fn lanes_over_threads_are_refused_at_start() {
    let cfg = config("t", "c").io(IoMode::Threads).lanes(2);
    let e = graft_net::Transport::start(cfg, Recorder::new()).unwrap_err();
    assert!(e.to_string().contains("IoMode::Poller"), "{e}");
    let cfg = config("t", "c").lanes(0);
    assert!(graft_net::Transport::start(cfg, Recorder::new()).is_err());
}

fn refused(r: Result<RawClient, NetError>, why: &str) {
    match r {
        Err(NetError::Handshake(m)) => assert!(m.contains(why), "{m:?} should say {why:?}"),
        Err(e) => panic!("refused for the wrong reason: {e} (want {why:?})"),
        Ok(_) => panic!("a lane that should be refused ({why}) was taken"),
    }
}

#[test]
fn forged_replayed_unknown_duplicate_and_out_of_range_lanes_are_refused() {
    init_log();
    let (b, rb) = start(lanes_config("b", 4));
    let (c, rc) = start(lanes_config("c", 4));
    let real = c.connect(b.local_addr()).unwrap();
    rb.wait_for("b sees c", |ev| ups(ev).len() == 1);
    let addr = b.local_addr();
    let xcfg = lanes_config("x", 4);
    let (x, _) = RawClient::connect(addr, &xcfg).expect("x's first connection");
    assert_eq!(x.lanes(), 4);
    refused(
        x.open_lane(addr, &xcfg, 1, graft_net::LaneClaim::Token([7; 32])),
        "bad lane token",
    );
    refused(
        x.open_lane(addr, &xcfg, 1, graft_net::LaneClaim::Session([9; 8])),
        "unknown session",
    );
    refused(
        x.open_lane(addr, &xcfg, 4, graft_net::LaneClaim::Genuine),
        "out of range",
    );
    refused(
        x.open_lane(addr, &xcfg, 200, graft_net::LaneClaim::Genuine),
        "out of range",
    );
    let l1 = x
        .open_lane(addr, &xcfg, 1, graft_net::LaneClaim::Genuine)
        .expect("a genuine lane");
    refused(
        x.open_lane(addr, &xcfg, 1, graft_net::LaneClaim::Genuine),
        "up already",
    );
    // Lane 1's token, replayed on lane 2 (another index, another
    // handshake): it verifies nowhere else.
    let token = l1.lane_token();
    refused(
        x.open_lane(addr, &xcfg, 2, graft_net::LaneClaim::Token(token)),
        "bad lane token",
    );
    assert!(
        !rb.ups().iter().any(|p| p.name == "x"),
        "not up before its lanes"
    );
    let _l2 = x
        .open_lane(addr, &xcfg, 2, graft_net::LaneClaim::Genuine)
        .unwrap();
    let _l3 = x
        .open_lane(addr, &xcfg, 3, graft_net::LaneClaim::Genuine)
        .unwrap();
    rb.wait_for("x up with its lanes", |ev| {
        ups(ev).iter().any(|p| p.name == "x")
    });
    // The session is complete: another lane has nothing to join.
    refused(
        x.open_lane(addr, &xcfg, 3, graft_net::LaneClaim::Genuine),
        "unknown session",
    );
    // A lane claiming the real peer's session (its id is never sent, so a
    // stranger can only guess) is refused too.
    let ccfg = lanes_config("c", 4);
    let (probe, _) = RawClient::connect(addr, &lanes_config("y", 4)).unwrap();
    refused(
        probe.open_lane(addr, &ccfg, 1, graft_net::LaneClaim::Genuine),
        "unknown session",
    );
    // The real peer never noticed.
    let s = c.sender(real.id).unwrap();
    for key in 0..12u64 {
        s.send_keyed(key, FIRST_USER_KIND, payload(key, 0), false)
            .unwrap();
    }
    rb.wait_for("c's frames", |ev| {
        let c_id = ups(ev)[0].id;
        frames_of(ev, c_id) == 12
    });
    assert!(rc.downs().is_empty(), "{:?}", rc.downs());
    assert!(!rb.downs().iter().any(|(p, _)| p.name == "c"));
    assert!(b.handshake_stats().failed >= 8, "{:?}", b.handshake_stats());
    c.shutdown();
    b.shutdown();
}

#[test]
fn a_lane_to_a_one_lane_node_finds_no_session_and_a_half_formed_peer_expires() {
    init_log();
    let (b, rb) = start(lanes_config("b", 1).handshake_timeout(Duration::from_millis(300)));
    let xcfg = lanes_config("x", 4);
    let (x, _) = RawClient::connect(b.local_addr(), &xcfg).unwrap();
    assert_eq!(x.lanes(), 1, "b takes no extra lanes");
    refused(
        x.open_lane(b.local_addr(), &xcfg, 1, graft_net::LaneClaim::Genuine),
        "unknown session",
    );
    b.shutdown();
    assert_eq!(rb.ups().len(), 1, "x is up on one connection");

    let (b, rb) = start(lanes_config("b", 4).handshake_timeout(Duration::from_millis(300)));
    let (mut x, _) = RawClient::connect(b.local_addr(), &xcfg).unwrap();
    let _l1 = x
        .open_lane(b.local_addr(), &xcfg, 1, graft_net::LaneClaim::Genuine)
        .unwrap();
    // Lanes 2 and 3 never come: the half-formed peer is dropped, never
    // announced.
    let deadline = std::time::Instant::now() + GUARD;
    loop {
        match x.recv_frame(Duration::from_millis(100)) {
            Err(_) => break,
            Ok(_) => assert!(std::time::Instant::now() < deadline, "never dropped"),
        }
    }
    assert!(rb.ups().is_empty() && rb.downs().is_empty());
    b.shutdown();
}

/// A recording relay: forwards connections to `to`, keeping what each
/// client sent.
fn relay(
    to: std::net::SocketAddr,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log2 = log.clone();
    std::thread::spawn(move || {
        for cl in l.incoming() {
            let Ok(mut cl) = cl else { return };
            let Ok(mut up) = std::net::TcpStream::connect(to) else {
                return;
            };
            let i = {
                let mut g = log2.lock().unwrap();
                g.push(Vec::new());
                g.len() - 1
            };
            let (mut cl2, mut up2) = (cl.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut up2, &mut cl2);
                let _ = cl2.shutdown(std::net::Shutdown::Both);
            });
            let log3 = log2.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = cl.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    // The handshake is the first few hundred bytes. Logged
                    // before it is forwarded, so that once the lane is up
                    // the log holds all the initiator sent for it.
                    {
                        let mut g = log3.lock().unwrap();
                        if g[i].len() < 4096 {
                            g[i].extend_from_slice(&buf[..n]);
                        }
                    }
                    if up.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = up.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (addr, log)
}

#[test]
fn a_lane_handshake_replayed_from_the_wire_is_refused() {
    use std::io::{Read, Write};
    init_log();
    let (b, rb) = start(lanes_config("b", 2));
    let (a, ra) = start(lanes_config("a", 2));
    let (via, log) = relay(b.local_addr());
    let peer = a.connect(via).unwrap();
    rb.wait_for("a up at b", |ev| ups(ev).len() == 1);
    assert_eq!(a.sender(peer.id).unwrap().lanes(), 2);
    let failed = b.handshake_stats().failed;
    // Everything the lane's initiator sent, replayed on a new connection.
    let lane = log.lock().unwrap()[1].clone();
    let mut s = std::net::TcpStream::connect(b.local_addr()).unwrap();
    s.write_all(&lane).unwrap();
    s.set_read_timeout(Some(GUARD)).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    wait_until("the replay counted as failed", || {
        b.handshake_stats().failed > failed
    });
    assert_eq!(rb.ups().len(), 1);
    assert!(ra.downs().is_empty() && rb.downs().is_empty());
    let s = a.sender(peer.id).unwrap();
    s.send_keyed(1, FIRST_USER_KIND, payload(1, 0), false)
        .unwrap();
    rb.wait_for("a frame on lane 1", |ev| count_frames(ev) == 1);
    a.shutdown();
    b.shutdown();
}
