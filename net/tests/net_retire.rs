//! Retiring a connection loses nothing either way (`Transport::retire`,
//! conn.rs "Retiring"): both sides stream frames while one retires with a
//! last frame and the other, on reading it, retires with `fin`; every frame
//! sent before each side's retirement arrives, in order, then each side
//! sees the connection down once, and sends are refused after retiring.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use graft_net::{IoMode, NetError, PeerId, Transport, FIRST_USER_KIND};

const DATA: u8 = FIRST_USER_KIND;
const LAST: u8 = FIRST_USER_KIND + 1;

/// Two transports on `mode`, connected: each with its recorder and its
/// id of the other.
fn pair(
    mode: IoMode,
) -> (
    Transport,
    Arc<Recorder>,
    PeerId,
    Transport,
    Arc<Recorder>,
    PeerId,
) {
    init_log();
    let (a, ra) = start(config("a", "c").io(mode));
    let (b, rb) = start(config("b", "c").io(mode));
    let pb = a.connect(b.local_addr()).unwrap().id;
    wait_until("b up", || b.peers().len() == 1);
    let pa = b.peers()[0].id;
    (a, ra, pb, b, rb, pa)
}

/// Sends numbered frames to `peer` until a send fails or `stop`; the
/// number sent. At most about 1 MiB ahead of the reader: unthrottled, the
/// sender queued millions of frames, which a retirement (rightly) writes
/// out before it ends, longer than the tests' hang guard on a loaded
/// machine.
fn stream(t: &Transport, peer: PeerId, stop: &AtomicBool) -> u64 {
    let s = t.sender(peer).expect("connected");
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match t.send(peer, DATA, &n.to_le_bytes()) {
            Ok(()) => n += 1,
            Err(NetError::NotConnected(_)) => break,
            Err(e) => panic!("send failed: {e}"),
        }
        if n.is_multiple_of(64) {
            while s.queued_bytes() > 1 << 20 && s.is_connected() && !stop.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(1));
            }
            thread::yield_now();
        }
    }
    n
}

/// Waits until `r` has read `peer`'s last frame (kind `LAST`).
fn wait_last_frame(r: &Recorder, peer: PeerId) {
    r.wait_for("the peer's last frame", |ev| {
        ev.iter()
            .any(|e| matches!(e, Event::Frame(p, k, _) if *p == peer && *k == LAST))
    });
}

/// The numbers of the data frames from `peer`, which must run 0, 1, 2, ...
fn received_in_order(r: &Recorder, peer: PeerId) -> u64 {
    let mut next = 0u64;
    for (k, d) in r.frames_from(peer) {
        if k == DATA {
            let v = u64::from_le_bytes(d.try_into().expect("8 bytes"));
            assert_eq!(v, next, "frames in order, none lost");
            next += 1;
        }
    }
    next
}

fn retire_under_traffic(mode: IoMode) {
    let (a, ra, pb, b, rb, pa) = pair(mode);
    let stop = Arc::new(AtomicBool::new(false));
    let (a, b) = (Arc::new(a), Arc::new(b));
    let sent_by_a = Arc::new(AtomicU64::new(0));
    let sa = {
        let (a, stop, n) = (a.clone(), stop.clone(), sent_by_a.clone());
        thread::spawn(move || n.store(stream(&a, pb, &stop), Ordering::SeqCst))
    };
    let sb = {
        let (b, stop) = (b.clone(), stop.clone());
        thread::spawn(move || stream(&b, pa, &stop))
    };
    // Both streams run, then b (the asked side) retires: its last frame
    // goes behind everything it queued, and it writes nothing after.
    wait_until("traffic both ways", || {
        ra.frames_from(pb).len() > 2_000 && rb.frames_from(pa).len() > 2_000
    });
    b.retire(pa, Some((LAST, b"bye")), false).unwrap();
    assert!(matches!(
        b.send(pa, DATA, b"late"),
        Err(NetError::NotConnected(_))
    ));
    assert!(b.peers().is_empty(), "out of b's table at once");
    let sent_by_b = sb.join().unwrap();
    // a reads b's last frame, then retires with fin: what a sent until
    // then is written before the shutdown.
    wait_last_frame(&ra, pb);
    thread::sleep(Duration::from_millis(20)); // a keeps sending meanwhile
    a.retire(pb, None, true).unwrap();
    stop.store(true, Ordering::Relaxed);
    sa.join().unwrap();
    let sent_by_a = sent_by_a.load(Ordering::SeqCst);
    ra.wait_for("down at a", |ev| !downs(ev).is_empty());
    rb.wait_for("down at b", |ev| !downs(ev).is_empty());
    assert_eq!(
        received_in_order(&ra, pb),
        sent_by_b,
        "{mode:?}: all of b's frames"
    );
    assert_eq!(
        received_in_order(&rb, pa),
        sent_by_a,
        "{mode:?}: all of a's frames"
    );
    // The last frame was b's last: nothing after it.
    let from_b = ra.frames_from(pb);
    assert_eq!(from_b.last().map(|f| f.0), Some(LAST));
    assert_lifecycles(&ra.events());
    assert_lifecycles(&rb.events());
    assert_eq!(downs(&ra.events()).len(), 1);
    assert_eq!(downs(&rb.events()).len(), 1);
    // Retiring twice, or an unknown peer: refused.
    assert!(matches!(
        a.retire(pb, None, true),
        Err(NetError::NotConnected(_))
    ));
    // A new connection between the same two nodes comes up afterwards.
    let again = a.connect(b.local_addr()).unwrap().id;
    assert_ne!(again, pb);
    a.send(again, DATA, b"again").unwrap();
    rb.wait_for("a frame on the new connection", |ev| {
        ev.iter()
            .any(|e| matches!(e, Event::Frame(_, _, d) if d == b"again"))
    });
}

#[test]
fn retiring_under_traffic_loses_nothing_on_the_poller() {
    retire_under_traffic(IoMode::Poller);
}

#[test]
fn retiring_under_traffic_loses_nothing_with_threads() {
    retire_under_traffic(IoMode::Threads);
}

/// A retiring connection with nothing queued ends on both sides within the
/// hang guard (`retiring_to` says so), and the reserved kinds are refused
/// as a last frame.
#[test]
fn an_idle_connection_retires_and_reserved_kinds_are_refused() {
    let (a, ra, pb, b, rb, pa) = pair(IoMode::DEFAULT);
    assert!(matches!(
        b.retire(pa, Some((0, b"x")), false),
        Err(NetError::ReservedKind(0))
    ));
    assert!(!b.retiring_to(a.local_addr()));
    b.retire(pa, Some((LAST, b"bye")), false).unwrap();
    assert!(
        b.retiring_to(a.local_addr()),
        "retiring until the peer's EOF"
    );
    wait_last_frame(&ra, pb);
    a.retire(pb, None, true).unwrap();
    ra.wait_for("down at a", |ev| !downs(ev).is_empty());
    rb.wait_for("down at b", |ev| !downs(ev).is_empty());
    assert!(!a.retiring_to(b.local_addr()) && !b.retiring_to(a.local_addr()));
}

/// Both sides retire at once without `fin` (each answered the other's
/// request to close); each, on reading the other's last frame, retires
/// again with `fin`, which shuts a connection already retiring: both see
/// it closed by the peer, not timed out.
#[test]
fn crossed_retirements_end_by_the_second_call() {
    let (a, ra, pb, b, rb, pa) = pair(IoMode::DEFAULT);
    a.retire(pb, Some((LAST, b"a's last")), false).unwrap();
    b.retire(pa, Some((LAST, b"b's last")), false).unwrap();
    let last_from = |r: &Recorder, p: PeerId| r.frames_from(p).iter().any(|(k, _)| *k == LAST);
    wait_until("both last frames", || {
        last_from(&ra, pb) && last_from(&rb, pa)
    });
    a.retire(pb, None, true).unwrap();
    // b may have read a's EOF and closed already.
    match b.retire(pa, None, true) {
        Ok(()) | Err(NetError::NotConnected(_)) => {}
        Err(e) => panic!("{e}"),
    }
    ra.wait_for("down at a", |ev| !downs(ev).is_empty());
    rb.wait_for("down at b", |ev| !downs(ev).is_empty());
    for (r, who) in [(&ra, "a"), (&rb, "b")] {
        let d = downs(&r.events());
        assert!(matches!(d[0].1, NetError::Closed), "{who}: {:?}", d[0].1);
    }
}

/// Takes `per_frame` over each data frame, as a busy reader would.
struct Slow {
    rec: Arc<Recorder>,
    per_frame: Duration,
}

impl graft_net::Handler for Slow {
    fn peer_up(&self, p: &graft_net::PeerInfo) {
        self.rec.peer_up(p);
    }
    fn frame(&self, p: &graft_net::PeerInfo, k: u8, d: Vec<u8>) {
        if k == DATA {
            thread::sleep(self.per_frame);
        }
        self.rec.frame(p, k, d);
    }
    fn peer_down(&self, p: &graft_net::PeerInfo, r: &NetError) {
        self.rec.peer_down(p, r);
    }
}

/// A side that retired without `fin` goes on sending heartbeats: the
/// other side, still writing out a long queue to a slow reader, does not
/// take its silence for death. (Silent, it was declared dead once the dead
/// window, here 300 ms, had passed, and the frames still queued or unread
/// were lost: 2.6 million of 9.2 million in one CI run of the test above.)
fn retired_side_keeps_heartbeats(mode: IoMode) {
    init_log();
    let tick = Duration::from_millis(100);
    let slow = Arc::new(Slow {
        rec: Recorder::new(),
        per_frame: Duration::from_millis(1),
    });
    let (a, ra) = start(config("a", "c").io(mode).heartbeat(tick));
    let b = Transport::start(config("b", "c").io(mode).heartbeat(tick), slow.clone()).unwrap();
    let rb = &slow.rec;
    let pb = a.connect(b.local_addr()).unwrap().id;
    wait_until("b up", || b.peers().len() == 1);
    let pa = b.peers()[0].id;
    b.retire(pa, Some((LAST, b"bye")), false).unwrap();
    wait_last_frame(&ra, pb);
    // Far more than the sockets hold, read at 1 ms a frame: about a
    // second to write out, several of a's dead windows.
    let total = 1_000u32;
    let chunk = vec![7u8; 64 << 10];
    for i in 0..total {
        let mut p = chunk.clone();
        p[..4].copy_from_slice(&i.to_le_bytes());
        a.send(pb, DATA, &p).unwrap();
    }
    a.retire(pb, None, true).unwrap();
    rb.wait_for("down at b", |ev| !downs(ev).is_empty());
    ra.wait_for("down at a", |ev| !downs(ev).is_empty());
    let got: Vec<u32> = rb
        .frames_from(pa)
        .into_iter()
        .filter(|(k, _)| *k == DATA)
        .map(|(_, d)| u32::from_le_bytes(d[..4].try_into().expect("4 bytes")))
        .collect();
    assert_eq!(
        got.len() as u32,
        total,
        "{mode:?}: all of a's frames (a: {:?}, b: {:?})",
        downs(&ra.events()),
        downs(&rb.events())
    );
    assert!(got.iter().copied().eq(0..total), "{mode:?}: in order");
    for (_, why) in downs(&ra.events()) {
        assert!(
            !matches!(why, NetError::HeartbeatTimeout(_)),
            "{mode:?}: a took b for dead: {why}"
        );
    }
}

#[test]
fn a_retired_side_keeps_heartbeats_on_the_poller() {
    retired_side_keeps_heartbeats(IoMode::Poller);
}

#[test]
fn a_retired_side_keeps_heartbeats_with_threads() {
    retired_side_keeps_heartbeats(IoMode::Threads);
}
