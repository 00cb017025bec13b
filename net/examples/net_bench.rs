//! Measures graft-net on loopback: one-way throughput of small frames and
//! round-trip latency, next to a bare TCP ping-pong; in one process, then
//! between two (the second is this binary again, in `child` mode).
//!
//! `cargo run --release -p graft-net --example net_bench [messages] [round_trips]`

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use graft_net::{Handler, NetConfig, NetError, PeerInfo, Transport};

/// Counts frames; optionally echoes them; optionally forwards them.
#[derive(Default)]
struct Bench {
    count: AtomicUsize,
    echo: OnceLock<Transport>,
    replies: Mutex<Option<mpsc::Sender<()>>>,
}

impl Handler for Bench {
    fn peer_up(&self, _: &PeerInfo) {}
    fn frame(&self, peer: &PeerInfo, kind: u8, payload: Vec<u8>) {
        self.count.fetch_add(1, Ordering::Release);
        if let Some(t) = self.echo.get() {
            let _ = t.send(peer.id, kind, &payload);
        }
        if let Some(tx) = &*self.replies.lock().unwrap() {
            let _ = tx.send(());
        }
    }
    fn peer_down(&self, _: &PeerInfo, _: &NetError) {}
}

fn cfg(name: &str) -> NetConfig {
    NetConfig::new(name, "127.0.0.1:0".parse().unwrap()).cookie("bench")
}

fn throughput(n: usize, payload: usize) {
    let (ha, hb) = (Arc::new(Bench::default()), Arc::new(Bench::default()));
    let a = Transport::start(cfg("a"), ha.clone()).unwrap();
    let b = Transport::start(cfg("b"), hb.clone()).unwrap();
    let sender = a.sender(a.connect(b.local_addr()).unwrap().id).unwrap();
    let msg = vec![7u8; payload];
    let t0 = Instant::now();
    for _ in 0..n {
        sender.send(16, &msg).unwrap();
    }
    let queued = t0.elapsed();
    while hb.count.load(Ordering::Acquire) < n {
        thread::sleep(Duration::from_micros(200));
    }
    let dt = t0.elapsed();
    println!(
        "one way, {payload:>3} B payload: {n} frames in {:.3} s = {:.2} M frames/s ({:.1} MB/s of payload; sending took {:.3} s)",
        dt.as_secs_f64(),
        n as f64 / dt.as_secs_f64() / 1e6,
        (n * payload) as f64 / dt.as_secs_f64() / 1e6,
        queued.as_secs_f64()
    );
    a.shutdown();
    b.shutdown();
}

fn round_trip(n: usize) {
    let (ha, hb) = (Arc::new(Bench::default()), Arc::new(Bench::default()));
    let a = Transport::start(cfg("a"), ha.clone()).unwrap();
    let b = Transport::start(cfg("b"), hb.clone()).unwrap();
    hb.echo.set(b.clone()).unwrap();
    let (tx, rx) = mpsc::channel();
    *ha.replies.lock().unwrap() = Some(tx);
    let peer = a.connect(b.local_addr()).unwrap();
    report_round_trips(n, "graft-net", || {
        a.send(peer.id, 16, b"ping").unwrap();
        rx.recv().unwrap();
    });
    b.shutdown();
    a.shutdown();
}

/// Runs `one` round trip `n / 10` times to warm up, then `n` times, and
/// prints the mean.
fn report_round_trips(n: usize, what: &str, mut one: impl FnMut()) {
    for _ in 0..n / 10 {
        one();
    }
    let t0 = Instant::now();
    for _ in 0..n {
        one();
    }
    let dt = t0.elapsed();
    println!(
        "round trip: {:.1} us ({what}, {n} round trips)",
        dt.as_secs_f64() * 1e6 / n as f64
    );
}

fn bare_tcp_round_trip(n: usize) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let echo = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 10];
        while s.read_exact(&mut b).is_ok() {
            s.write_all(&b).unwrap();
        }
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    let mut b = [0u8; 10];
    report_round_trips(n, "bare TCP, same process", || {
        c.write_all(&b).unwrap();
        c.read_exact(&mut b).unwrap();
    });
    drop(c);
    echo.join().unwrap();
}

/// Child process: echoes kind 16, counts kind 17 and answers kind 18 with
/// the count.
struct Child {
    me: OnceLock<Transport>,
    count: AtomicUsize,
}

impl Handler for Child {
    fn peer_up(&self, _: &PeerInfo) {}
    fn frame(&self, peer: &PeerInfo, kind: u8, payload: Vec<u8>) {
        let t = self.me.get().unwrap();
        match kind {
            16 => t.send(peer.id, 16, &payload).unwrap(),
            17 => drop(self.count.fetch_add(1, Ordering::Relaxed)),
            _ => {
                let n = self.count.swap(0, Ordering::Relaxed) as u64;
                t.send(peer.id, 18, &n.to_be_bytes()).unwrap();
            }
        }
    }
    fn peer_down(&self, _: &PeerInfo, _: &NetError) {
        std::process::exit(0);
    }
}

fn child(parent: &str) {
    let h = Arc::new(Child {
        me: OnceLock::new(),
        count: AtomicUsize::new(0),
    });
    let t = Transport::start(cfg("child"), h.clone()).unwrap();
    h.me.set(t.clone()).unwrap();
    t.connect(parent.parse().unwrap()).unwrap();
    thread::sleep(Duration::from_secs(600));
}

fn two_processes(n: usize, rt: usize) {
    let h = Arc::new(Bench::default());
    let (tx, rx) = mpsc::channel();
    *h.replies.lock().unwrap() = Some(tx);
    let a = Transport::start(cfg("parent"), h.clone()).unwrap();
    let mut kid = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child", &a.local_addr().to_string()])
        .spawn()
        .unwrap();
    while a.peers().is_empty() {
        thread::sleep(Duration::from_millis(1));
    }
    let peer = a.sender(a.peers()[0].id).unwrap();
    report_round_trips(rt, "graft-net, two processes", || {
        peer.send(16, b"ping").unwrap();
        rx.recv().unwrap();
    });
    let t0 = Instant::now();
    for _ in 0..n {
        peer.send(17, &[7u8; 8]).unwrap();
    }
    peer.send(18, b"").unwrap();
    rx.recv().unwrap();
    let dt = t0.elapsed();
    println!(
        "one way,   8 B payload: {:.2} M frames/s (two processes, {n} frames, until acknowledged)",
        n as f64 / dt.as_secs_f64() / 1e6
    );
    kid.kill().unwrap();
    kid.wait().unwrap();
    a.shutdown();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        return child(&args[1]);
    }
    let mut nums = args.iter().map(|a| a.parse::<usize>().unwrap());
    let n = nums.next().unwrap_or(2_000_000);
    let rt = nums.next().unwrap_or(20_000);
    throughput(n, 8);
    throughput(n, 64);
    round_trip(rt);
    bare_tcp_round_trip(rt);
    two_processes(n, rt);
}
