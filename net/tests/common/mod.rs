//! Shared test helpers: a recording handler and a bounded wait.
#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use graft_net::{Handler, NetConfig, NetError, PeerId, PeerInfo, Transport};

/// Hang guard for every wait in the tests (never a speed assertion).
pub const GUARD: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub enum Event {
    Up(PeerInfo),
    Frame(PeerId, u8, Vec<u8>),
    Down(PeerInfo, NetError),
}

/// Records every callback, in order.
#[derive(Debug, Default)]
pub struct Recorder {
    events: Mutex<Vec<Event>>,
    cv: Condvar,
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder::default())
    }

    /// The events, even if a panicking test poisoned the lock.
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, e: Event) {
        self.lock().push(e);
        self.cv.notify_all();
    }

    pub fn events(&self) -> Vec<Event> {
        self.lock().clone()
    }

    /// Waits (up to the hang guard) until `pred` holds for the events.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&[Event]) -> bool) {
        let deadline = Instant::now() + GUARD;
        let mut ev = self.lock();
        while !pred(&ev) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {what}; events: {:?}",
                summary(&ev)
            );
            ev = self
                .cv
                .wait_timeout(ev, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    pub fn frames_from(&self, peer: PeerId) -> Vec<(u8, Vec<u8>)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::Frame(p, k, d) if *p == peer => Some((*k, d.clone())),
                _ => None,
            })
            .collect()
    }

    pub fn frame_count(&self) -> usize {
        count_frames(&self.lock())
    }

    pub fn ups(&self) -> Vec<PeerInfo> {
        ups(&self.lock())
    }

    pub fn downs(&self) -> Vec<(PeerInfo, NetError)> {
        downs(&self.lock())
    }
}

pub fn count_frames(ev: &[Event]) -> usize {
    ev.iter().filter(|e| matches!(e, Event::Frame(..))).count()
}

/// Frames from `peer` among `ev`.
pub fn frames_of(ev: &[Event], peer: PeerId) -> usize {
    ev.iter()
        .filter(|e| matches!(e, Event::Frame(p, ..) if *p == peer))
        .count()
}

pub fn ups(ev: &[Event]) -> Vec<PeerInfo> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Up(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

pub fn downs(ev: &[Event]) -> Vec<(PeerInfo, NetError)> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Down(p, r) => Some((p.clone(), r.clone())),
            _ => None,
        })
        .collect()
}

fn summary(ev: &[Event]) -> Vec<String> {
    let mut out: Vec<String> = ev
        .iter()
        .filter(|e| !matches!(e, Event::Frame(..)))
        .map(|e| match e {
            Event::Up(p) => format!("up {} {}", p.name, p.id),
            Event::Down(p, r) => format!("down {} {}: {r}", p.name, p.id),
            Event::Frame(..) => unreachable!(),
        })
        .collect();
    out.push(format!("{} frames", count_frames(ev)));
    out
}

/// A frame with this payload makes the [`Recorder`] panic (as a user's
/// handler might).
pub const PANIC_PAYLOAD: &[u8] = b"graft-net test: panic in the handler";

impl Handler for Recorder {
    fn peer_up(&self, peer: &PeerInfo) {
        self.push(Event::Up(peer.clone()));
    }
    fn frame(&self, peer: &PeerInfo, kind: u8, payload: Vec<u8>) {
        assert_ne!(payload.as_slice(), PANIC_PAYLOAD, "told to panic");
        self.push(Event::Frame(peer.id, kind, payload));
    }
    fn peer_down(&self, peer: &PeerInfo, reason: &NetError) {
        self.push(Event::Down(peer.clone(), reason.clone()));
    }
}

/// Per peer id: `Up` first, then frames, then at most one `Down`, then
/// nothing.
pub fn assert_lifecycles(ev: &[Event]) {
    use std::collections::HashMap;
    // 0 = not seen, 1 = up, 2 = down
    let mut state: HashMap<PeerId, u8> = HashMap::new();
    for e in ev {
        let (id, next) = match e {
            Event::Up(p) => (p.id, 1),
            Event::Frame(id, ..) => (*id, 1),
            Event::Down(p, _) => (p.id, 2),
        };
        let s = state.entry(id).or_insert(0);
        match (e, *s) {
            (Event::Up(_), 0) | (Event::Frame(..), 1) | (Event::Down(..), 1) => *s = next,
            _ => panic!("out of order for {id}: {e:?} in state {s}"),
        }
    }
}

pub fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

pub fn config(name: &str, cookie: &str) -> NetConfig {
    NetConfig::new(name, "127.0.0.1:0".parse().unwrap())
        .cookie(cookie)
        .connect_timeout(Duration::from_secs(10))
}

pub fn start(cfg: NetConfig) -> (Transport, Arc<Recorder>) {
    let rec = Recorder::new();
    let t = Transport::start(cfg, rec.clone()).expect("start transport");
    (t, rec)
}

/// Polls `cond` every few ms until true, or panics after the hang guard.
pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + GUARD;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A peer `name` that completes the handshake with `hub` and then never
/// reads, sent 256 frames of 60 KiB (far more than socket buffers hold),
/// once the hub's queue for it has stopped moving: the client (keep it),
/// the hub's sender to it, and the bytes sent.
pub fn stalled_peer(
    hub: &Transport,
    name: &str,
) -> (graft_net::RawClient, graft_net::PeerSender, usize) {
    let (client, _) = graft_net::RawClient::connect(hub.local_addr(), &config(name, "c")).unwrap();
    wait_until("the stalled peer up", || hub.peer_named(name).is_some());
    let s = hub.sender(hub.peer_named(name).unwrap().id).unwrap();
    let chunk = vec![7u8; 60 << 10];
    for _ in 0..256 {
        s.send(50, &chunk).unwrap();
    }
    wait_until("the stalled peer's queue settled", || {
        let q = s.queued_bytes();
        std::thread::sleep(Duration::from_millis(50));
        q > 0 && q == s.queued_bytes()
    });
    (client, s, 256 * chunk.len())
}

/// `connect_then`'s result, and the name of the thread that told it.
pub fn connect_then(
    t: &Transport,
    addr: std::net::SocketAddr,
) -> (Result<PeerInfo, NetError>, String) {
    let (tx, rx) = std::sync::mpsc::channel();
    t.connect_then(
        addr,
        Box::new(move |r| {
            let who = std::thread::current().name().unwrap_or("").to_string();
            let _ = tx.send((r, who));
        }),
    );
    rx.recv_timeout(GUARD).expect("connect_then answered")
}
