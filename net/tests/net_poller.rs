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
    // `slow` completes the handshake, then never reads.
    let (_slow, _) = RawClient::connect(hub.local_addr(), &config("slow", "c")).unwrap();
    wait_until("slow up", || hub.peer_named("slow").is_some());
    let slow = hub.sender(hub.peer_named("slow").unwrap().id).unwrap();
    // Far more than the socket buffers hold: the rest stays queued.
    let chunk = vec![7u8; 60 << 10];
    for _ in 0..256 {
        slow.send(50, &chunk).unwrap();
    }
    wait_until("the slow peer's socket full", || {
        let q = slow.queued_bytes();
        std::thread::sleep(Duration::from_millis(20));
        q > 0 && q == slow.queued_bytes()
    });

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
    // The node's heartbeats reach the mute peer (a ping: tag and stamp).
    let (kind, _, payload) = mute.recv_frame(GUARD).unwrap().expect("a heartbeat");
    assert_eq!((kind, payload.len()), (4, 9));
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

/// TCP states in `/proc/net/tcp` (hex) of the connections whose either end
/// is `port` on 127.0.0.1, listeners left out.
fn tcp_states(port: u16) -> Vec<String> {
    let port = format!("{port:04X}");
    let mut v = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(s) = std::fs::read_to_string(file) else {
            continue;
        };
        for l in s.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 4 || f[3] == "0A" {
                continue;
            }
            let p = |a: &str| a.rsplit(':').next().unwrap_or("").to_string();
            if p(f[1]) == port || p(f[2]) == port {
                v.push(f[3].to_string());
            }
        }
    }
    v
}

/// How a connection is busy when one side closes it.
#[derive(Debug, Clone, Copy)]
enum Busy {
    Idle,
    /// The closer has megabytes queued for the peer.
    Writing,
    /// The peer streams frames to the closer.
    PeerWrites,
}

/// Closes a connection locally (`disconnect`) in state `busy`, on `mode`,
/// from the initiator or the acceptor; then it is gone on both sides:
/// `peer_down` once each, out of `peers()`, sends refused, and no socket of
/// it left open (no ESTABLISHED, CLOSE_WAIT or FIN_WAIT on its port, only
/// the closer's TIME_WAIT): the close was carried out, not only counted.
fn closed_locally(mode: IoMode, busy: Busy, by_acceptor: bool) {
    let what = format!("{mode:?} {busy:?} by_acceptor {by_acceptor}");
    let (a, ra) = start(config("a", "c").io(mode));
    let (b, rb) = start(config("b", "c").io(mode));
    let pb = a.connect(b.local_addr()).unwrap();
    wait_until("b up", || b.peers().len() == 1);
    let pa = b.peers()[0].clone();
    let port = b.local_addr().port();
    // The check below sees this connection's sockets (ESTABLISHED, 01).
    assert!(tcp_states(port).iter().any(|s| s == "01"), "{what}");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writer = None;
    match busy {
        Busy::Idle => {}
        Busy::Writing => {
            let chunk = vec![3u8; 1 << 20];
            let (t, p) = if by_acceptor {
                (&b, pa.id)
            } else {
                (&a, pb.id)
            };
            for _ in 0..32 {
                t.send(p, 60, &chunk).unwrap();
            }
        }
        Busy::PeerWrites => {
            // The peer of the closer streams until its sends are refused.
            let t = if by_acceptor {
                a.sender(pb.id).unwrap()
            } else {
                b.sender(pa.id).unwrap()
            };
            let stop = stop.clone();
            writer = Some(std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if t.send(61, &[7u8; 512]).is_err() {
                        break;
                    }
                    n += 1;
                }
                n
            }));
            let r = if by_acceptor { &rb } else { &ra };
            r.wait_for("frames flowing", |ev| count_frames(ev) > 100);
        }
    }
    if by_acceptor {
        b.disconnect(pa.id);
    } else {
        a.disconnect(pb.id);
    }
    ra.wait_for("a's peer_down", |ev| downs(ev).len() == 1);
    rb.wait_for("b's peer_down", |ev| downs(ev).len() == 1);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(w) = writer {
        w.join().unwrap();
    }
    let (closer, other) = if by_acceptor { (&rb, &ra) } else { (&ra, &rb) };
    assert!(
        matches!(closer.downs()[0].1, NetError::Disconnected),
        "{what}: {:?}",
        closer.downs()
    );
    assert!(
        !matches!(other.downs()[0].1, NetError::Disconnected),
        "{what}"
    );
    assert!(a.peers().is_empty() && b.peers().is_empty(), "{what}");
    assert!(a.send(pb.id, 62, b"x").is_err(), "{what}");
    assert!(b.send(pa.id, 62, b"x").is_err(), "{what}");
    // TIME_WAIT (06) on the closer's side is all that may stay.
    let t = Instant::now();
    loop {
        let open: Vec<String> = tcp_states(port).into_iter().filter(|s| s != "06").collect();
        if open.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < GUARD,
            "{what}: sockets left in states {open:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_lifecycles(&ra.events());
    assert_lifecycles(&rb.events());
    // Nothing counted twice, and the pair connects again.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!((ra.downs().len(), rb.downs().len()), (1, 1), "{what}");
    let again = a.connect(b.local_addr()).unwrap();
    wait_until("b up again", || b.peers().len() == 1);
    a.send(again.id, 63, b"again").unwrap();
    rb.wait_for("a frame on the new connection", |ev| {
        ev.iter()
            .any(|e| matches!(e, common::Event::Frame(_, 63, p) if p == b"again"))
    });
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_connection_closed_locally_is_gone_on_both_sides_and_counted_once() {
    init_log();
    for mode in [IoMode::Poller, IoMode::Threads] {
        for busy in [Busy::Idle, Busy::Writing, Busy::PeerWrites] {
            for by_acceptor in [false, true] {
                closed_locally(mode, busy, by_acceptor);
            }
        }
    }
}
