//! Large messages and the limit between nodes: in one OS process and with
//! a node in a second OS process (see `dist_child`). Backpressure against a
//! stopped node is in `dist_busy`.

mod dist_child;

use dist_child::*;
use graft::*;
use std::time::{Duration, Instant};

/// Hang guard (never a speed assertion).
const HANG: Duration = Duration::from_secs(120);

#[test]
fn peer_main() {
    serve_if_peer();
}

#[test]
fn over_the_limit_fails_at_the_sender_and_is_counted() {
    let cfg = || NodeConfig::new("127.0.0.1:0").max_message_size(1 << 20);
    let a = node(cfg());
    let b = node(cfg());
    let bid = a.connect(b.addr()).unwrap();
    let sink = b
        .spawn(|| loop {
            let (from, v): (Pid, Vec<u8>) = expect();
            send(from, v.len() as u64);
        })
        .unwrap();
    a.run(move || {
        let big = vec![7u8; 2 << 20];
        let e = send_to(sink, (self_pid(), big.clone())).unwrap_err();
        match e {
            Error::MessageTooLarge { size, limit } => {
                assert!(size > 2 << 20, "{size}");
                assert_eq!(limit, 1 << 20);
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("maximum message size"));
        // Plain send: logged and counted (below).
        send(sink, (self_pid(), big.clone()));
        // A remote spawn whose body is too large fails with it.
        let r = spawn_on(bid, big, |v: Vec<u8>| drop(v));
        assert!(matches!(r, Err(Error::MessageTooLarge { .. })), "{r:?}");
        // Under the limit (in fragments) it goes, and the connection is fine.
        send(sink, (self_pid(), vec![1u8; 900 << 10]));
        assert_eq!(expect_timeout::<u64>(HANG), Some(900 << 10));
    })
    .unwrap();
    let stats = a.stats();
    let peer = stats
        .peers
        .iter()
        .find(|p| p.too_large > 0)
        .expect("counted");
    assert_eq!(peer.too_large, 3, "the send_to, the send and the spawn");
    a.shutdown();
    b.shutdown();
}

/// Messages of mixed sizes from one process stay in order and whole; a
/// process's exit signal stays behind its large message.
#[test]
fn mixed_sizes_keep_order_and_exit_follows_messages() {
    let a = node(NodeConfig::new("127.0.0.1:0"));
    let b = node(NodeConfig::new("127.0.0.1:0"));
    a.connect(b.addr()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let collector = b
        .spawn(move || {
            trap_exits(true);
            let mut got = Vec::new();
            loop {
                match receive()
                    .on(|m: (u64, Vec<u8>)| Ok(m))
                    .on(|e: ExitSignal| Err(e))
                    .timeout(HANG)
                {
                    Some(Ok((i, v))) => got.push((i, v.len(), checksum(&v))),
                    Some(Err(_)) => break,
                    None => panic!("nothing for too long"),
                }
            }
            tx.send(got).unwrap();
        })
        .unwrap();
    // Around every size where the send path changes: the worker's reused
    // frame buffer (small), just under and over the size handed to the
    // transport whole (16 KiB), one fragment (64 KiB), many.
    let sizes: Vec<usize> = (0..30)
        .map(|i| match i % 5 {
            0 => 3 << 20,
            1 => 10,
            2 => (16 << 10) - 200 + i,
            3 => (16 << 10) + i,
            _ => (64 << 10) + i,
        })
        .collect();
    let s2 = sizes.clone();
    a.spawn(move || {
        link(collector);
        for (i, n) in s2.iter().enumerate() {
            send(collector, (i as u64, vec![i as u8; *n]));
        }
        panic!("exit after the last message");
    })
    .unwrap();
    let got = rx.recv_timeout(HANG).expect("the collector's list");
    let want: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| (i as u64, *n, checksum(&vec![i as u8; *n])))
        .collect();
    assert_eq!(got, want);
    a.shutdown();
    b.shutdown();
}

/// A ping to the other OS process keeps answering while a 256 MiB message
/// to it is in flight on the same connection.
#[test]
fn ping_answers_while_256_mib_in_flight() {
    let peer = Peer::start();
    let a = node(NodeConfig::new("127.0.0.1:0"));
    let id = a.connect(peer.addr).unwrap();
    let (pongs, before) = a
        .run(move || {
            let sink = whereis_on("sink", id).unwrap().expect("sink");
            let echo = whereis_on("echo", id).unwrap().expect("echo");
            let me = self_pid();
            let bulk = spawn(move || {
                let data = vec![5u8; 256 << 20];
                let sum = checksum(&data);
                send(sink, (self_pid(), 1u64, data));
                send(me, String::from("queued"));
                let (seq, len, got): SinkReply = expect_timeout(HANG).expect("the sink's reply");
                assert_eq!((seq, len, got), (1, 256 << 20, sum));
                send(me, String::from("done"));
            });
            let _ = bulk;
            assert_eq!(expect_timeout::<String>(HANG).as_deref(), Some("queued"));
            let mut pongs = 0u64;
            let mut before = 0u64;
            let deadline = Instant::now() + HANG;
            let mut done = false;
            while !done {
                assert!(Instant::now() < deadline, "hang guard");
                send(echo, (self_pid(), pongs));
                loop {
                    let r = receive()
                        .on(|n: u64| Some(n))
                        .on(|_: String| None)
                        .timeout(HANG)
                        .expect("pong or done");
                    match r {
                        Some(_) => {
                            pongs += 1;
                            if !done {
                                before += 1;
                            }
                            break;
                        }
                        None => done = true,
                    }
                }
            }
            (pongs, before)
        })
        .unwrap();
    eprintln!("{before} pings answered while the 256 MiB message was in flight");
    assert!(
        before >= 1,
        "no ping answered during the transfer ({pongs})"
    );
    a.shutdown();
}
