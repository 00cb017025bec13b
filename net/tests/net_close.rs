//! A connection closed locally is gone on both sides, on either I/O mode
//! (its own binary: it opens and closes many connections, and the poller's
//! timing tests of `net_poller` should not share the machine with it).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use graft_net::{IoMode, NetError};

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
