//! Heartbeats: a silent peer is declared dead; an idle one is not.

mod common;

use std::time::{Duration, Instant};

use common::*;
use graft_net::{NetError, RawClient};

#[test]
fn silent_peer_is_declared_dead() {
    init_log();
    let tick = Duration::from_millis(100);
    let cfg = config("a", "c").heartbeat(tick).heartbeat_misses(3);
    let window = cfg.dead_after();
    let (a, ra) = start(cfg);

    // A raw client completes the handshake, then never sends a byte.
    let since = Instant::now();
    let (mut raw, _) = RawClient::connect(a.local_addr(), &config("mute", "c")).unwrap();
    // Meanwhile the node's writer sends it heartbeats.
    let (kind, _, payload) = raw.recv_frame(GUARD).unwrap().expect("a heartbeat");
    // (A ping, "a" being the smaller name: a tag, a stamp for the round
    // trip, and the last round trip.)
    assert_eq!((kind, payload.len()), (4, 17));

    ra.wait_for("mute declared dead", |ev| !downs(ev).is_empty());
    let took = since.elapsed();
    let downs = ra.downs();
    assert_eq!(downs.len(), 1);
    assert_eq!(downs[0].0.name, "mute");
    match downs[0].1 {
        NetError::HeartbeatTimeout(silent) => assert!(silent >= window, "{silent:?}"),
        ref e => panic!("expected a heartbeat timeout, got {e:?}"),
    }
    // Not before the window (the upper side is only guarded, not asserted).
    assert!(
        took >= window - Duration::from_millis(20),
        "declared dead after {took:?}"
    );
    log::info!("silent peer declared dead after {took:?} (window {window:?})");
    assert!(a.peers().is_empty());
    a.shutdown();
    assert_eq!(ra.downs().len(), 1, "peer_down exactly once");
}

#[test]
fn idle_peers_stay_up_on_heartbeats() {
    init_log();
    let tick = Duration::from_millis(30);
    let (a, ra) = start(config("a", "c").heartbeat(tick).heartbeat_misses(3));
    let (b, rb) = start(config("b", "c").heartbeat(tick).heartbeat_misses(3));
    let pb = a.connect(b.local_addr()).unwrap();
    // Ten windows with no user traffic.
    std::thread::sleep(tick * 30);
    assert!(ra.downs().is_empty(), "{:?}", ra.downs());
    assert!(rb.downs().is_empty(), "{:?}", rb.downs());
    a.send(pb.id, 50, b"still here").unwrap();
    rb.wait_for("frame", |ev| count_frames(ev) == 1);
    a.shutdown();
    b.shutdown();
    assert_lifecycles(&ra.events());
}

#[test]
fn a_peer_with_a_longer_tick_is_allowed_its_own_ticks() {
    init_log();
    let (a, ra) = start(config("a", "c").heartbeat(Duration::from_millis(20)));
    let (b, rb) = start(config("b", "c").heartbeat(Duration::from_millis(200)));
    let pb = a.connect(b.local_addr()).unwrap();
    // Several of a's windows (60 ms) without a byte from b; b's tick is 200 ms.
    std::thread::sleep(Duration::from_millis(700));
    assert!(ra.downs().is_empty(), "{:?}", ra.downs());
    assert!(rb.downs().is_empty(), "{:?}", rb.downs());
    a.send(pb.id, 50, b"still here").unwrap();
    rb.wait_for("frame", |ev| count_frames(ev) == 1);
    a.shutdown();
    b.shutdown();
    assert_lifecycles(&ra.events());
}
