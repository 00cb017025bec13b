//! Strangers are cheap: thousands of unauthenticated sockets cost a node no
//! thread and little memory, and its real peers are served throughout. One
//! test in this binary, so that the process's threads and memory are ours
//! to read.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::*;
use graft_net::{Handler, NetConfig, NetError, PeerInfo, Transport};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Enough descriptors for the flood (both ends live in this process).
fn raise_nofile(want: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        }
    }
}

/// Echoes every frame back to its sender.
struct Echo(OnceLock<Transport>);

impl Handler for Echo {
    fn peer_up(&self, _: &PeerInfo) {}
    fn frame(&self, peer: &PeerInfo, kind: u8, payload: Vec<u8>) {
        if let Some(t) = self.0.get() {
            let _ = t.send(peer.id, kind, &payload);
        }
    }
    fn peer_down(&self, _: &PeerInfo, _: &NetError) {}
}

/// Answers frames one at a time, for round trips.
struct Replies(Mutex<std::sync::mpsc::Sender<Vec<u8>>>);

impl Handler for Replies {
    fn peer_up(&self, _: &PeerInfo) {}
    fn frame(&self, _: &PeerInfo, _: u8, payload: Vec<u8>) {
        let _ = self.0.lock().unwrap().send(payload);
    }
    fn peer_down(&self, _: &PeerInfo, _: &NetError) {}
}

const IDLE: usize = 2000;
const STALLED: usize = 200;

#[test]
fn thousands_of_strangers_cost_no_thread_and_peers_keep_answering() {
    init_log();
    raise_nofile(3 * (IDLE + STALLED) as u64 + 256);
    let echo = Arc::new(Echo(OnceLock::new()));
    // Every stranger comes from 127.0.0.1, as the real peers do: the
    // per-address limit is lifted to test the global one
    // (`net_strangers_per_address.rs` tests the other).
    let cfg = config("a", "c").max_pending_per_address(NetConfig::DEFAULT_MAX_PENDING_HANDSHAKES);
    let a = Transport::start(cfg, echo.clone()).unwrap();
    let _ = echo.0.set(a.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    let b = Transport::start(config("b", "c"), Arc::new(Replies(Mutex::new(tx)))).unwrap();
    let pa = b.connect(a.local_addr()).unwrap();
    let round_trip = |i: u32| {
        b.send(pa.id, 30, &i.to_be_bytes()).unwrap();
        let got = rx.recv_timeout(GUARD).expect("an answer");
        assert_eq!(got, i.to_be_bytes());
    };
    for i in 0..100 {
        round_trip(i);
    }
    let (threads0, rss0) = (threads(), rss_kb());

    // 2,000 sockets that say nothing, and some that send a valid first
    // frame (the preface) and stall, with round trips in between.
    let mut flood = Vec::with_capacity(IDLE + STALLED);
    for i in 0..IDLE + STALLED {
        let mut s = TcpStream::connect(a.local_addr()).unwrap();
        if i >= IDLE {
            s.write_all(&[0, 0, 0, 6, 1, 0, b'G', b'R', b'F', b'T', 0, 3])
                .unwrap();
        }
        flood.push(s);
        if i % 100 == 0 {
            round_trip(i as u32);
        }
    }
    wait_until("every stranger accepted or refused", || {
        let st = a.handshake_stats();
        st.pending + st.refused_over_limit == (IDLE + STALLED) as u64
    });
    let st = a.handshake_stats();
    assert_eq!(st.pending, NetConfig::DEFAULT_MAX_PENDING_HANDSHAKES as u64);
    assert!(
        st.refused_over_limit >= (IDLE + STALLED - 64) as u64,
        "{st:?}"
    );
    for i in 0..100 {
        round_trip(1_000_000 + i);
    }
    let (threads1, rss1) = (threads(), rss_kb());
    eprintln!("threads {threads0} -> {threads1}, rss {rss0} kB -> {rss1} kB, {st:?}");
    assert!(threads1 <= threads0 + 2, "threads {threads0} -> {threads1}");
    assert!(rss1 <= rss0 + 8 * 1024, "rss {rss0} kB -> {rss1} kB");

    // The refused ones were closed at once; the pending ones are closed
    // when they give up, which frees their slots for real peers.
    let mut closed = 0;
    for s in &mut flood {
        s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        let mut buf = [0u8; 16];
        match s.read(&mut buf) {
            Ok(0) => closed += 1,
            // Closed with our preface unread: a reset.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert!(closed >= IDLE + STALLED - 64, "{closed} closed");
    drop(flood);
    wait_until("slots free", || a.handshake_stats().pending == 0);
    let (c, _rc) = start(config("c", "c"));
    assert_eq!(c.connect(a.local_addr()).unwrap().name, "a");
    round_trip(7);
    a.shutdown();
    b.shutdown();
    c.shutdown();
}
