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
        assert_eq!((kind, p.len()), (4, 9), "{p:?}");
        if p == [PONG, 1, 2, 3, 4, 5, 6, 7, 8] {
            break;
        }
        // One of the node's own pings, left unanswered for now.
        assert_eq!(p[0], PING, "{p:?}");
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
            if p.len() == 9 && p[0] == PING {
                latest = Some(p);
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
