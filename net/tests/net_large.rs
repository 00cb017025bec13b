//! Large messages in fragments, interleaved with small traffic, over real
//! TCP on 127.0.0.1; peers that abuse fragments; the busy limit.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use graft_net::{IoMode, NetError, PeerSender, RawClient};

/// Bytes that differ at every position (a lost or moved fragment shows).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}

#[test]
fn large_messages_arrive_whole_in_order_per_key() {
    init_log();
    let (a, _ra) = start(config("a", "c"));
    let (b, rb) = start(config("b", "c"));
    let pb = a.connect(b.local_addr()).unwrap();
    rb.wait_for("b sees a", |ev| ups(ev).len() == 1);
    let s = a.sender(pb.id).unwrap();
    // Key 1: big, small, big, small: must arrive exactly so.
    let big1 = pattern(3 << 20, 1);
    let big2 = pattern((64 << 10) + 1, 2);
    s.send_keyed(1, 20, big1.clone(), false).unwrap();
    s.send_keyed(1, 21, b"after big1".to_vec(), false).unwrap();
    s.send_keyed(1, 22, big2.clone(), false).unwrap();
    s.send_keyed(1, 23, b"after big2".to_vec(), false).unwrap();
    // Key 2, sent after: a small frame overtakes key 1's large messages.
    s.send_keyed(2, 30, b"other sender".to_vec(), false)
        .unwrap();
    rb.wait_for("five frames", |ev| count_frames(ev) == 5);
    let got = rb.frames_from(rb.ups()[0].id);
    let key1: Vec<_> = got.iter().filter(|(k, _)| *k < 30).cloned().collect();
    assert_eq!(
        key1,
        vec![
            (20, big1),
            (21, b"after big1".to_vec()),
            (22, big2),
            (23, b"after big2".to_vec())
        ]
    );
    assert!(got.iter().any(|(k, _)| *k == 30));
    a.shutdown();
    b.shutdown();
}

/// On the wire, to a peer that reads only once everything is queued: a
/// small frame of another key goes between the fragments of a large
/// message, and the small frame of the large message's own key after its
/// last fragment.
#[test]
fn small_frames_overtake_bulk_on_the_wire() {
    init_log();
    let (a, _ra) = start(config("a", "c").compress_threshold(usize::MAX));
    let (mut raw, _) = RawClient::connect(a.local_addr(), &config("slow", "c")).unwrap();
    wait_until("a lists slow", || a.peers().len() == 1);
    let s = a.sender(a.peers()[0].id).unwrap();
    // Far more than the socket buffers hold: still in flight below.
    let big = pattern(32 << 20, 9);
    s.send_keyed(1, 20, big.clone(), false).unwrap();
    wait_until("the socket is full", || s.queued_bytes() < 32 << 20);
    s.send_keyed(1, 21, b"mine, after".to_vec(), false).unwrap();
    s.send_keyed(2, 30, b"other, overtakes".to_vec(), false)
        .unwrap();
    let mut order = Vec::new();
    let mut data = Vec::new();
    while order.last() != Some(&21) {
        let (k, _, p) = raw.recv_frame(GUARD).unwrap().expect("a frame");
        match k {
            4 => continue,
            5 => data.extend_from_slice(&p[18..]),
            6 => data.extend_from_slice(&p[8..]),
            _ => {}
        }
        if order.last() != Some(&k) {
            order.push(k);
        }
    }
    assert_eq!(data, big);
    // Fragments, the other key's frame among them, more fragments, then
    // the large message's own follower.
    let at = order.iter().position(|k| *k == 30).unwrap();
    assert!(at > 0 && at < order.len() - 2, "{order:?}");
    assert_eq!(&order[order.len() - 2..], &[6, 21], "{order:?}");
    a.shutdown();
}

#[test]
fn many_large_and_small_frames_from_many_threads() {
    init_log();
    let (a, _ra) = start(config("a", "c"));
    let (b, rb) = start(config("b", "c"));
    let pb = a.connect(b.local_addr()).unwrap();
    rb.wait_for("b sees a", |ev| ups(ev).len() == 1);
    const PER: u32 = 40;
    let threads: Vec<_> = (0..4u64)
        .map(|key| {
            let s = a.sender(pb.id).unwrap();
            thread::spawn(move || {
                for i in 0..PER {
                    let len = if i % 5 == 0 { 300_000 + i as usize } else { 40 };
                    let mut p = pattern(len, i as u8);
                    p[..4].copy_from_slice(&i.to_be_bytes());
                    s.send_keyed(key, 40 + key as u8, p, false).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    rb.wait_for("all frames", |ev| count_frames(ev) == 4 * PER as usize);
    let got = rb.frames_from(rb.ups()[0].id);
    for key in 0..4u8 {
        let seq: Vec<u32> = got
            .iter()
            .filter(|(k, _)| *k == 40 + key)
            .map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()))
            .collect();
        assert_eq!(seq, (0..PER).collect::<Vec<_>>(), "key {key} out of order");
    }
    for (_, p) in &got {
        let i = u32::from_be_bytes(p[..4].try_into().unwrap());
        let len = if i % 5 == 0 { 300_000 + i as usize } else { 40 };
        let mut want = pattern(len, i as u8);
        want[..4].copy_from_slice(&i.to_be_bytes());
        assert_eq!(p, &want, "frame {i} corrupt");
    }
    a.shutdown();
    b.shutdown();
}

#[test]
fn over_the_limit_fails_at_the_sender() {
    init_log();
    let (a, _ra) = start(config("a", "c").max_message_size(1 << 20));
    let (b, rb) = start(config("b", "c").max_message_size(1 << 20));
    let pb = a.connect(b.local_addr()).unwrap();
    let e = a.send(pb.id, 20, &vec![7; (1 << 20) + 1]).unwrap_err();
    assert!(
        matches!(e, NetError::MessageTooLarge { size, max } if size == (1 << 20) + 1 && max == 1 << 20),
        "{e:?}"
    );
    assert!(e.to_string().contains("1048577"), "{e}");
    // Exactly the limit goes, and the connection is fine.
    a.send(pb.id, 20, &vec![7; 1 << 20]).unwrap();
    rb.wait_for("the frame at the limit", |ev| count_frames(ev) == 1);
    assert!(rb.downs().is_empty());
    a.shutdown();
    b.shutdown();
}

fn begin(id: u64, total: u64, kind: u8, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&total.to_be_bytes());
    v.push(kind);
    v.push(0);
    v.extend_from_slice(data);
    v
}

fn more(id: u64, data: &[u8]) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.extend_from_slice(data);
    v
}

const FRAG_BEGIN: u8 = 5;
const FRAG_MORE: u8 = 6;

/// Each abuse from a raw peer drops that connection with a protocol error
/// naming the abuse; the good peer's connection and traffic are untouched.
#[test]
fn fragment_abuse_drops_only_that_connection() {
    init_log();
    let (a, ra) = start(config("a", "c").max_message_size(1 << 20));
    let (b, rb) = start(config("b", "c"));
    let pa = b.connect(a.local_addr()).unwrap();
    wait_until("a lists b", || a.peers().len() == 1);
    type Abuse = Vec<(u8, Vec<u8>)>;
    let many: Abuse = (0..65u64)
        .map(|id| (FRAG_BEGIN, begin(id, 1000, 16, &[1])))
        .collect();
    let cases: Vec<(&str, Abuse, &str)> = vec![
        (
            "length bomb",
            vec![(FRAG_BEGIN, begin(1, u64::MAX, 16, &[0; 8]))],
            "over the maximum message size",
        ),
        (
            "two halves over the limit",
            vec![
                (FRAG_BEGIN, begin(1, 600 << 10, 16, &[0; 8])),
                (FRAG_BEGIN, begin(2, 600 << 10, 16, &[0; 8])),
            ],
            "in progress would hold",
        ),
        (
            "fragment for an unknown id",
            vec![(FRAG_MORE, more(42, &[1, 2, 3]))],
            "not in progress",
        ),
        (
            "out of order: more, then begin",
            vec![
                (FRAG_MORE, more(1, &[1])),
                (FRAG_BEGIN, begin(1, 4, 16, &[0])),
            ],
            "not in progress",
        ),
        (
            "overrun",
            vec![
                (FRAG_BEGIN, begin(1, 4, 16, &[0, 1])),
                (FRAG_MORE, more(1, &[2, 3, 4])),
            ],
            "overrun",
        ),
        (
            "begun twice",
            vec![
                (FRAG_BEGIN, begin(1, 4, 16, &[0])),
                (FRAG_BEGIN, begin(1, 4, 16, &[0])),
            ],
            "begun twice",
        ),
        ("too many in progress", many, "in progress"),
        (
            "transport kind inside",
            vec![(FRAG_BEGIN, begin(1, 4, 4, &[0]))],
            "transport kind",
        ),
        (
            "header cut short",
            vec![(FRAG_BEGIN, vec![0; 5])],
            "cut short",
        ),
    ];
    for (i, (what, frames, expect)) in cases.into_iter().enumerate() {
        let name = format!("probe{i}");
        let (mut raw, _) = RawClient::connect(a.local_addr(), &config(&name, "c")).unwrap();
        for (k, p) in frames {
            raw.send_frame(k, &p).unwrap();
        }
        ra.wait_for(what, |ev| downs(ev).iter().any(|(p, _)| p.name == name));
        let reason = ra
            .downs()
            .into_iter()
            .find(|(p, _)| p.name == name)
            .unwrap()
            .1;
        match &reason {
            NetError::Protocol(m) => assert!(m.contains(expect), "{what}: {m}"),
            other => panic!("{what}: dropped with {other:?}"),
        }
        // Nothing delivered from the abuser, and the good peer still works.
        let from_probe = ra
            .events()
            .iter()
            .filter(|e| matches!(e, Event::Frame(_, _, _)))
            .count();
        b.send(pa.id, 50, &[i as u8]).unwrap();
        ra.wait_for("b's frame", |ev| count_frames(ev) == from_probe + 1);
    }
    assert!(rb.downs().is_empty());
    assert_eq!(a.peers().len(), 1);
    a.shutdown();
    b.shutdown();
}

#[test]
fn truncated_and_stalled_messages_are_dropped() {
    init_log();
    let (a, ra) = start(
        config("a", "c")
            .heartbeat(Duration::from_millis(50))
            .heartbeat_misses(4),
    );
    // Truncated: half a message, then the connection closes.
    let (mut raw, _) = RawClient::connect(a.local_addr(), &config("trunc", "c")).unwrap();
    raw.send_frame(FRAG_BEGIN, &begin(1, 1 << 20, 16, &[0; 1000]))
        .unwrap();
    drop(raw);
    ra.wait_for("trunc down", |ev| {
        downs(ev).iter().any(|(p, _)| p.name == "trunc")
    });
    // Stalled: half a message, then only heartbeats (sent by hand).
    let (mut raw, _) = RawClient::connect(a.local_addr(), &config("stall", "c")).unwrap();
    raw.send_frame(FRAG_BEGIN, &begin(1, 1 << 20, 16, &[0; 1000]))
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let beats = thread::spawn(move || {
        while !d.load(Ordering::Acquire) {
            if raw.send_frame(4, &[]).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
    });
    ra.wait_for("stall down", |ev| {
        downs(ev).iter().any(|(p, _)| p.name == "stall")
    });
    done.store(true, Ordering::Release);
    beats.join().unwrap();
    let reason = ra
        .downs()
        .into_iter()
        .find(|(p, _)| p.name == "stall")
        .unwrap()
        .1;
    assert!(
        matches!(&reason, NetError::Protocol(m) if m.contains("stalled")),
        "{reason:?}"
    );
    assert_eq!(count_frames(&ra.events()), 0);
    a.shutdown();
}

/// Sends 32 KiB frames to a peer that does not read until the connection
/// is busy: the socket buffers full, then the queue past its limit.
fn fill_until_busy(s: &PeerSender) {
    let chunk = vec![1u8; 32 << 10];
    wait_until("busy", || {
        s.send(60, &chunk).unwrap();
        s.is_busy()
    });
}

/// Registers a drain wake-up for a small frame (it must wait); the flag
/// it sets when it runs.
fn drain_waiter(s: &PeerSender) -> Arc<AtomicBool> {
    let woken = Arc::new(AtomicBool::new(false));
    let w = woken.clone();
    assert!(s.on_drain(0, 10, Box::new(move || w.store(true, Ordering::Release))));
    woken
}

/// A peer that does not read: the queue passes the busy limit, a drain
/// waiter is registered, and it runs once the peer reads again; another
/// waiter runs when the connection closes.
#[test]
fn busy_limit_and_drain_wakeups() {
    init_log();
    // The raw client sends no heartbeats: a window long enough for a
    // loaded machine to fill the socket buffers (this test is about
    // backpressure, not liveness).
    let (a, _ra) = start(
        config("a", "c")
            .busy_limit(256 << 10)
            .heartbeat(Duration::from_secs(10)),
    );
    let (mut raw, _) = RawClient::connect(a.local_addr(), &config("slow", "c")).unwrap();
    wait_until("a lists slow", || a.peers().len() == 1);
    let peer = a.peers()[0].clone();
    let s = a.sender(peer.id).unwrap();
    assert!(!s.is_busy());
    assert!(!s.on_drain(0, 10, Box::new(|| panic!("not busy: never run"))));
    fill_until_busy(&s);
    assert!(s.busy_for(0, 10));
    let woken = drain_waiter(&s);
    assert!(!woken.load(Ordering::Acquire));
    // Read everything: the queue drains and the waiter runs.
    let reader = thread::spawn(move || {
        while raw
            .recv_frame(Duration::from_millis(500))
            .is_ok_and(|f| f.is_some())
        {}
        raw
    });
    wait_until("drain waiter ran", || woken.load(Ordering::Acquire));
    let raw = reader.join().unwrap();
    // Busy again with nobody reading, then the connection closes: woken.
    fill_until_busy(&s);
    assert!(s.busy_for(0, 10));
    let woken = drain_waiter(&s);
    a.disconnect(peer.id);
    wait_until("close woke the waiter", || woken.load(Ordering::Acquire));
    assert!(!s.on_drain(0, 10, Box::new(|| {})));
    drop(raw);
    a.shutdown();
}

/// A batch the writer took and could not write yet (the peer reads
/// slowly) still counts as queued, in both I/O modes, so the busy limit
/// and the system monitor's `BusyDist` see it: a sender waiting for the
/// queue to drain is never left waiting while the queue reports itself
/// under the limit. The peer reads only while the queue is over it.
#[test]
fn a_batch_the_writer_holds_counts_as_queued() {
    init_log();
    let limit = 256 << 10;
    for mode in [IoMode::Poller, IoMode::Threads] {
        let (a, _ra) = start(
            config("a", "c")
                .io(mode)
                .busy_limit(limit)
                .heartbeat(Duration::from_secs(30)),
        );
        let (mut raw, _) = RawClient::connect(a.local_addr(), &config("slow", "c")).unwrap();
        wait_until("a lists slow", || a.peers().len() == 1);
        let s = a.sender(a.peers()[0].id).unwrap();
        fill_until_busy(&s);
        let woken = drain_waiter(&s);
        // Read a frame at a time while the queue says it is over the
        // limit; once it says it is not, the waiter must run with no
        // more reading.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while s.queued_bytes() > limit && !woken.load(Ordering::Acquire) {
            assert!(std::time::Instant::now() < deadline, "{mode:?}: hang guard");
            let _ = raw.recv_frame(Duration::from_millis(20)).unwrap();
        }
        wait_until("the waiter ran with the queue under the limit", || {
            woken.load(Ordering::Acquire)
        });
        drop(raw);
        a.shutdown();
    }
}
