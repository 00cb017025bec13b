//! The poller transport ([`IoMode::Poller`]) explicitly, whatever
//! `GRAFT_NET_IO` says: a peer that stops reading does not stall the
//! others; heartbeats keep idle peers up and find silent ones; a handler
//! that holds the I/O thread past the dead window takes no peer down;
//! several I/O threads share the peers.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use graft_net::{Handler, IoMode, NetError, PeerInfo, RawClient, Transport};

fn poller(name: &str) -> graft_net::NetConfig {
    config(name, "c").io(IoMode::Poller)
}

#[test]
fn a_peer_that_stops_reading_does_not_stall_the_others() {
    init_log();
    let (hub, rh) = start(poller("hub"));
    let (b, rb) = start(poller("b"));
    // `slow` completes the handshake, then never reads: far more than the
    // socket buffers hold was sent to it, and the rest stays queued.
    let (_slow, slow, _) = stalled_peer(&hub, "slow");

    // Round trips with b meanwhile, on the same I/O thread as `slow`.
    let pb = hub.connect(b.local_addr()).unwrap();
    wait_until("b up", || b.peers().len() == 1);
    let pa = b.peers()[0].clone();
    for i in 0..200u32 {
        hub.send(pb.id, 51, &i.to_be_bytes()).unwrap();
        rb.wait_for("ping", |ev| frames_of(ev, pa.id) == i as usize + 1);
        b.send(pa.id, 52, &i.to_be_bytes()).unwrap();
        rh.wait_for("pong", |ev| frames_of(ev, pb.id) == i as usize + 1);
    }
    assert!(
        slow.queued_bytes() > 0,
        "the slow peer was meant to be stuck"
    );
    assert!(hub.peer_named("slow").is_some());
    hub.shutdown();
    b.shutdown();
}

#[test]
fn heartbeats_keep_idle_peers_up_and_find_silent_ones() {
    init_log();
    // Ticks long enough that a loaded machine does not stall a thread for
    // a whole window (this test is about the mechanism, not the speed).
    let tick = Duration::from_millis(100);
    let (a, ra) = start(poller("a").heartbeat(tick).heartbeat_misses(3));
    let (b, rb) = start(poller("b").heartbeat(tick).heartbeat_misses(3));
    let pb = a.connect(b.local_addr()).unwrap();
    let since = Instant::now();
    let (mut mute, _) =
        RawClient::connect(a.local_addr(), &config("mute", "c").heartbeat(tick)).unwrap();
    // The node's heartbeats reach the mute peer ("a" is the smaller name:
    // a ping, with tag, stamp and last round trip).
    let (kind, _, payload) = mute.recv_frame(GUARD).unwrap().expect("a heartbeat");
    assert_eq!((kind, payload.len()), (4, 17));
    ra.wait_for("mute declared dead", |ev| {
        downs(ev).iter().any(|(p, _)| p.name == "mute")
    });
    let window = tick * 3;
    assert!(since.elapsed() >= window - Duration::from_millis(20));
    match &ra.downs()[0] {
        (p, NetError::HeartbeatTimeout(silent)) if p.name == "mute" => {
            assert!(*silent >= window, "{silent:?}")
        }
        d => panic!("expected mute's heartbeat timeout, got {d:?}"),
    }
    // Ten windows with no user traffic: b stays up, and the round trip is
    // measured from the heartbeats.
    std::thread::sleep(tick * 15);
    assert_eq!(ra.downs().len(), 1, "{:?}", ra.downs());
    assert!(rb.downs().is_empty(), "{:?}", rb.downs());
    assert!(a.sender(pb.id).unwrap().heartbeat_rtt().is_some());
    a.send(pb.id, 50, b"still here").unwrap();
    rb.wait_for("frame", |ev| count_frames(ev) == 1);
    a.shutdown();
    b.shutdown();
    assert_lifecycles(&ra.events());
}

#[test]
fn several_io_threads_share_the_peers_and_large_messages_arrive_whole() {
    init_log();
    let (hub, rh) = start(poller("hub").io_threads(3));
    let peers: Vec<_> = (0..5)
        .map(|i| start(poller(&format!("p{i}")).io_threads(2)))
        .collect();
    let big: Vec<u8> = (0..(3 << 20) + 17).map(|i: u32| (i % 251) as u8).collect();
    for (t, _) in &peers {
        let p = t.connect(hub.local_addr()).unwrap();
        let s = t.sender(p.id).unwrap();
        s.send_keyed(1, 60, big.clone(), false).unwrap();
        s.send_keyed(1, 61, b"after".to_vec(), false).unwrap();
    }
    rh.wait_for("all frames", |ev| count_frames(ev) == 10);
    for p in hub.peers() {
        let f = rh.frames_from(p.id);
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].0, f[0].1.len()), (60, big.len()));
        assert!(f[0].1 == big);
        assert_eq!(f[1], (61, b"after".to_vec()));
    }
    hub.shutdown();
    for (t, _) in &peers {
        t.shutdown();
    }
    assert_eq!(rh.downs().len(), 5);
}

/// A frame with this payload holds the handler (so its I/O thread) for
/// `Slow::hold`.
const SLOW: &[u8] = b"slow";

/// A [`Recorder`] whose handler takes long on one payload, as user code
/// might (a slow decode, a panic printing its backtrace).
struct Slow {
    rec: Arc<Recorder>,
    hold: Duration,
}

impl Handler for Slow {
    fn peer_up(&self, peer: &PeerInfo) {
        self.rec.peer_up(peer)
    }
    fn frame(&self, peer: &PeerInfo, kind: u8, payload: Vec<u8>) {
        if payload == SLOW {
            std::thread::sleep(self.hold);
        }
        self.rec.frame(peer, kind, payload)
    }
    fn peer_down(&self, peer: &PeerInfo, reason: &NetError) {
        self.rec.peer_down(peer, reason)
    }
}

#[test]
fn a_handler_holding_the_io_thread_past_the_dead_window_takes_no_peer_down() {
    init_log();
    // Windows long enough that a loaded machine does not stall a thread
    // for one (the hold is what must not take anyone down).
    let tick = Duration::from_millis(200);
    let cfg = |name: &str| poller(name).heartbeat(tick).heartbeat_misses(3);
    let rh = Recorder::new();
    let hold = tick * 3 * 5;
    let hub = Transport::start(
        cfg("hub"),
        Arc::new(Slow {
            rec: rh.clone(),
            hold,
        }),
    )
    .unwrap();
    let (p1, r1) = start(cfg("p1"));
    let (p2, r2) = start(cfg("p2"));
    let h1 = p1.connect(hub.local_addr()).unwrap();
    let h2 = p2.connect(hub.local_addr()).unwrap();
    wait_until("both up on the hub", || hub.peers().len() == 2);
    // The hub's one I/O thread spends five dead windows in p1's handler;
    // p2 keeps sending heartbeats meanwhile, which wait in its socket.
    p1.send(h1.id, 50, SLOW).unwrap();
    rh.wait_for("the slow frame handled", |ev| count_frames(ev) == 1);
    // Some scans later, every peer is still up, on both sides.
    std::thread::sleep(tick * 10);
    assert!(rh.downs().is_empty(), "{:?}", rh.downs());
    assert!(r1.downs().is_empty() && r2.downs().is_empty());
    for (t, h) in [(&p1, &h1), (&p2, &h2)] {
        t.send(h.id, 51, b"after").unwrap();
    }
    rh.wait_for("both frames after", |ev| count_frames(ev) == 3);
    hub.shutdown();
    p1.shutdown();
    p2.shutdown();
    assert_eq!(rh.downs().len(), 2);
    assert_lifecycles(&rh.events());
}

#[test]
fn helpers_beside_the_io_threads_deliver_every_frame_once_and_in_order() {
    init_log();
    let (hub, rh) = start(poller("hub").io_threads(2));
    let hub = Arc::new(hub);
    // Two threads serve the hub's sockets as idle workers do, from before
    // the peers connect (their connections join the I/O threads' inboxes
    // while the helpers poll) until after the hub shuts down.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let helpers: Vec<_> = (0..2)
        .map(|_| {
            let (hub, stop) = (hub.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut served = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if hub.poll_ready() {
                        served += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
                served
            })
        })
        .collect();
    const N: u32 = 20_000;
    let big: Vec<u8> = (0..(1 << 20) + 3).map(|i: u32| (i % 251) as u8).collect();
    let peers: Vec<_> = (0..3).map(|i| start(poller(&format!("p{i}")))).collect();
    let senders: Vec<_> = peers
        .iter()
        .map(|(t, _)| {
            let p = t.connect(hub.local_addr()).unwrap();
            t.sender(p.id).unwrap()
        })
        .collect();
    for i in 0..N {
        for s in &senders {
            if i % 5_000 == 0 {
                // Fragments interleaved with the small frames (one key).
                s.send_keyed(1, 61, big.clone(), false).unwrap();
            }
            s.send_keyed(1, 60, i.to_be_bytes().to_vec(), false)
                .unwrap();
        }
    }
    let each = N as usize + (N as usize).div_ceil(5_000);
    rh.wait_for("every frame", |ev| count_frames(ev) == 3 * each);
    for p in hub.peers() {
        let small: Vec<u32> = rh
            .frames_from(p.id)
            .into_iter()
            .filter_map(|(k, d)| match k {
                60 => Some(u32::from_be_bytes(d.try_into().unwrap())),
                _ => {
                    assert!(d == big, "a large frame arrived changed");
                    None
                }
            })
            .collect();
        assert_eq!(small, (0..N).collect::<Vec<_>>(), "{} out of order", p.name);
    }
    hub.shutdown();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let served: u64 = helpers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(served > 0, "the helpers were meant to serve some events");
    for (t, _) in &peers {
        t.shutdown();
    }
    assert_eq!(rh.downs().len(), 3);
}
