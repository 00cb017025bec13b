//! Backpressure against a node in a second OS process (see `dist_child`)
//! that stopped reading: the sender is suspended and its memory bounded.
//!
//! Alone in its binary: the memory bound is read from the OS process's
//! RSS, which tests beside it (the 256 MiB and 1 GiB messages of
//! `dist_large`) would move. Cargo runs test binaries one at a time.

mod dist_child;

use dist_child::*;
use graft::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Hang guard (never a speed assertion).
const HANG: Duration = Duration::from_secs(120);

#[test]
fn peer_main() {
    serve_if_peer();
}

/// A process flooding a node that stopped reading (its OS process is
/// stopped) is suspended with its queue at the busy limit: its memory stays
/// bounded, a `BusyDist` event reaches a subscriber, and once the node
/// reads again every message arrives, in order.
#[test]
fn flooding_a_stopped_node_is_suspended_and_bounded() {
    let peer = Peer::start();
    let a = node(NodeConfig::new("127.0.0.1:0").heartbeat(Duration::from_secs(5)));
    let id = a.connect(peer.addr).unwrap();
    const N: u64 = 8192;
    const SIZE: usize = 32 << 10; // 256 MiB in all
    let sent = Arc::new(AtomicU64::new(0));
    let s2 = sent.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let watcher = a
        .spawn(move || {
            system_monitor(
                self_pid(),
                SysMonConfig {
                    busy_dist: true,
                    ..SysMonConfig::default()
                },
            );
            ready_tx.send(()).unwrap();
            let ev = receive()
                .when(
                    |e: &SysMonEvent| matches!(e, SysMonEvent::BusyDist { .. }),
                    |e: SysMonEvent| e,
                )
                .timeout(HANG)
                .expect("a BusyDist event");
            tx.send(ev).unwrap();
        })
        .unwrap();
    let _ = watcher;
    ready_rx.recv_timeout(HANG).expect("subscribed");
    let sink = a
        .run(move || whereis_on("sink", id).unwrap().expect("sink"))
        .unwrap();
    peer.signal(true);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let base = rss_bytes();
    let flooder = a
        .spawn(move || {
            let me = self_pid();
            let payload = vec![3u8; SIZE];
            for i in 0..N {
                send(sink, (me, i, payload.clone()));
                s2.store(i + 1, Ordering::Release);
            }
            // Every reply, in order.
            for i in 0..N {
                let (seq, len, _): SinkReply = expect_timeout(HANG).expect("a reply");
                assert_eq!((seq, len), (i, SIZE as u64));
            }
            done_tx.send(()).unwrap();
        })
        .unwrap();
    // Suspended: the count stops moving well short of N.
    let deadline = Instant::now() + HANG;
    let mut last = 0;
    let mut peak_rss = 0;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = sent.load(Ordering::Acquire);
        peak_rss = peak_rss.max(rss_bytes());
        if now == last && now > 0 {
            break;
        }
        assert!(now < N, "the flooder was never suspended");
        assert!(Instant::now() < deadline, "hang guard");
        last = now;
    }
    let info = a.process_info(flooder).expect("the flooder lives");
    assert_eq!(info.status, Status::Waiting, "suspended, not spinning");
    let queued: u64 = a.stats().peers.iter().map(|p| p.queued_bytes).sum();
    assert!(queued <= (1 << 20) + 2 * SIZE as u64, "queue {queued}");
    let grew = peak_rss.saturating_sub(base);
    eprintln!(
        "suspended after {last} of {N} messages, queue {queued} B, RSS grew {} MiB",
        grew >> 20
    );
    assert!(grew < 64 << 20, "the sender's memory grew by {grew} bytes");
    let ev = rx.recv_timeout(HANG).expect("BusyDist");
    assert!(
        matches!(ev, SysMonEvent::BusyDist { node } if node == id),
        "{ev:?}"
    );
    // The node reads again: the flood completes, in order.
    peer.signal(false);
    done_rx.recv_timeout(HANG).expect("every reply");
    assert_eq!(sent.load(Ordering::Acquire), N);
    a.shutdown();
}
