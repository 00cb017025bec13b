//! The heartbeat round trip: a ping is echoed, an echo is timed only when
//! it answers the last ping (a forged or replayed echo is ignored), and an
//! odd heartbeat payload is harmless.

mod common;

use std::time::{Duration, Instant};

use common::*;
use graft_net::RawClient;

const PING: u8 = 1;
const PONG: u8 = 2;

#[test]
fn pings_are_echoed_and_only_a_true_echo_is_timed() {
    init_log();
    let tick = Duration::from_millis(50);
    let (a, ra) = start(config("a", "c").heartbeat(tick).heartbeat_misses(100));
    let (mut raw, _) = RawClient::connect(a.local_addr(), &config("raw", "c")).unwrap();
    // (`peers` lists it once `peer_up` has returned, after the recorder saw it.)
    wait_until("raw up", || !a.peers().is_empty());
    let peer = a.peers()[0].id;
    let sender = a.sender(peer).unwrap();
    // Our ping is echoed with its stamp.
    raw.send_frame(4, &[PING, 1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    let t = Instant::now();
    loop {
        let (kind, _, p) = raw.recv_frame(GUARD).unwrap().expect("a frame");
        if p == [PONG, 1, 2, 3, 4, 5, 6, 7, 8] {
            break;
        }
        // One of the node's own pings ("a" is the smaller name: it pings),
        // with its last round trip (none yet), left unanswered for now.
        assert_eq!((kind, p.len(), p[0]), (4, 17, PING), "{p:?}");
        assert_eq!(p[9..], [0; 8], "no round trip yet");
        assert!(t.elapsed() < GUARD);
    }
    // Forged echoes (any stamp but the last ping's), junk payloads and an
    // empty heartbeat time nothing and close nothing.
    for p in [
        &[PONG, 0, 0, 0, 0, 0, 0, 0, 0][..],
        &[PONG, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        &[PONG, 9, 9, 9, 9, 9, 9, 9, 9],
        &[7, 1, 1, 1, 1, 1, 1, 1, 1],
        &[PONG],
        &[0u8; 100],
        &[],
    ] {
        raw.send_frame(4, p).unwrap();
    }
    std::thread::sleep(tick * 3);
    assert_eq!(sender.heartbeat_rtt(), None);
    assert!(ra.downs().is_empty(), "{:?}", ra.downs());
    // Echo the node's latest ping: now it knows a round trip. (A newer
    // ping may leave before the echo lands, making it stale: try again.)
    let t = Instant::now();
    let (rtt, pong) = 'timed: loop {
        assert!(t.elapsed() < GUARD, "no echo was timed");
        let mut latest = None;
        while let Ok(Some((_, _, p))) = raw.recv_frame(tick / 5) {
            if p.len() == 17 && p[0] == PING {
                latest = Some(p[..9].to_vec());
            }
        }
        let Some(mut pong) = latest else { continue };
        pong[0] = PONG;
        raw.send_frame(4, &pong).unwrap();
        for _ in 0..20 {
            if let Some(r) = sender.heartbeat_rtt() {
                break 'timed (r, pong);
            }
            std::thread::sleep(tick / 10);
        }
    };
    assert!(rtt > Duration::ZERO && rtt < GUARD, "{rtt:?}");
    std::thread::sleep(Duration::from_millis(20));
    raw.send_frame(4, &pong).unwrap();
    std::thread::sleep(tick);
    // (Either the replay was ignored, or a true echo of a later ping: the
    // raw client sends none, so the replay was ignored.)
    assert_eq!(sender.heartbeat_rtt(), Some(rtt));
    assert!(ra.downs().is_empty(), "{:?}", ra.downs());
    a.shutdown();
}

/// Only the side with the smaller node name pings; the other answers, and
/// learns the round trip from the pings. Here the raw client ("0raw") is
/// the pinging side: the node sends it no ping of its own over several
/// ticks, only pongs, takes the round trip the pings carry; once the
/// client's pings stop it pings itself, and still finds the client silent.
#[test]
fn one_side_pings_and_the_other_learns_the_round_trip() {
    init_log();
    let tick = Duration::from_millis(50);
    let (a, ra) = start(config("a", "c").heartbeat(tick).heartbeat_misses(4));
    let (mut raw, _) = RawClient::connect(a.local_addr(), &config("0raw", "c")).unwrap();
    wait_until("raw up", || !a.peers().is_empty());
    let sender = a.sender(a.peers()[0].id).unwrap();
    let told: u64 = 1_234_567; // ns
    let t = Instant::now();
    let mut pongs = 0;
    while t.elapsed() < tick * 8 {
        let mut ping = vec![PING];
        ping.extend_from_slice(&(t.elapsed().as_nanos() as u64 + 1).to_be_bytes());
        ping.extend_from_slice(&told.to_be_bytes());
        raw.send_frame(4, &ping).unwrap();
        while let Ok(Some((kind, _, p))) = raw.recv_frame(tick / 2) {
            assert_eq!(kind, 4);
            assert_eq!(p[0], PONG, "the answering side sent a ping: {p:?}");
            assert_eq!(p[1..], ping[1..9], "an echo of the ping");
            pongs += 1;
        }
    }
    assert!(pongs >= 4, "{pongs} pongs");
    assert_eq!(sender.heartbeat_rtt(), Some(Duration::from_nanos(told)));
    assert!(ra.downs().is_empty(), "{:?}", ra.downs());
    // The pings stop: after two silent ticks the answering side pings
    // itself (the pinging side may only be starved), and its dead window
    // still closes a peer that answers nothing.
    let quiet = Instant::now();
    let ping = loop {
        let (_, _, p) = raw.recv_frame(GUARD).unwrap().expect("a frame");
        if p[0] == PING {
            break p;
        }
    };
    assert_eq!(ping.len(), 17);
    assert!(
        quiet.elapsed() >= tick,
        "pinged after {:?}",
        quiet.elapsed()
    );
    ra.wait_for("the silent pinger dropped", |ev| !downs(ev).is_empty());
    a.shutdown();
}
