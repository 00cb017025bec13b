//! The handshake attacked on the raw wire, over real sockets: a relaying
//! stranger, replayed and spliced handshakes, a proof for the other
//! direction, garbage, truncation, length bombs, an old protocol version.
//! In every case the node refuses, acts on nothing, and its real peers are
//! untouched.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use graft_net::{NetConfig, Transport};

const PREFACE: [u8; 12] = [0, 0, 0, 6, 1, 0, b'G', b'R', b'F', b'T', 0, 3];
const KIND_NOISE: u8 = 2;
const KIND_STATUS: u8 = 3;
const AUTH_FAILED: u8 = 2;
const REFUSED: u8 = 3;

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_be_bytes().to_vec();
    v.push(kind);
    v.push(0);
    v.extend_from_slice(payload);
    v
}

/// Splits a handshake byte stream into its frames (kind, payload).
fn frames(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while b.len() >= 6 {
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if b.len() < 6 + len {
            break;
        }
        out.push((b[4], b[6..6 + len].to_vec()));
        b = &b[6 + len..];
    }
    out
}

/// Reads until the peer closes (or the guard), returning what came.
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(GUARD)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn fast(name: &str) -> NetConfig {
    config(name, "secret").handshake_timeout(Duration::from_millis(500))
}

type Recording = Arc<Mutex<Vec<u8>>>;

/// A TCP proxy for one connection to `target`, recording both directions
/// (client to server, server to client). It records what it read before it
/// forwards it, so whatever an end has received is in the recording.
struct Proxy {
    addr: SocketAddr,
    up: Recording,
    down: Recording,
}

impl Proxy {
    fn start(target: SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (up, down) = (Arc::default(), Arc::default());
        let (u, d): (Recording, Recording) = (Arc::clone(&up), Arc::clone(&down));
        thread::spawn(move || {
            let (client, _) = l.accept().unwrap();
            let server = TcpStream::connect(target).unwrap();
            let pipe = |mut from: TcpStream, mut to: TcpStream, rec: Recording| {
                thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        rec.lock().unwrap().extend_from_slice(&buf[..n]);
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                })
            };
            pipe(client.try_clone().unwrap(), server.try_clone().unwrap(), u);
            pipe(server, client, d);
        });
        Proxy { addr, up, down }
    }
}

/// Two nodes with a real link, frames flowing both ways.
fn real_pair() -> ((Transport, Arc<Recorder>), (Transport, Arc<Recorder>)) {
    let a = start(fast("a"));
    let b = start(fast("b"));
    a.0.connect(b.0.local_addr()).unwrap();
    wait_until("b sees a", || b.0.peer_named("a").is_some());
    (a, b)
}

/// The real link still carries frames both ways, on the same connection.
fn link_intact(a: &(Transport, Arc<Recorder>), b: &(Transport, Arc<Recorder>), tag: u8) {
    let (pa, pb) = (b.0.peer_named("a").unwrap(), a.0.peer_named("b").unwrap());
    assert_eq!(a.1.ups().len(), 1, "a saw one peer come up");
    assert_eq!(b.1.ups().len(), 1, "b saw one peer come up");
    assert!(
        a.1.downs().is_empty() && b.1.downs().is_empty(),
        "no peer went down"
    );
    let before = (a.1.frame_count(), b.1.frame_count());
    a.0.send(pb.id, 40, &[tag]).unwrap();
    b.0.send(pa.id, 40, &[tag]).unwrap();
    a.1.wait_for("frame at a", |ev| count_frames(ev) == before.0 + 1);
    b.1.wait_for("frame at b", |ev| count_frames(ev) == before.1 + 1);
}

#[test]
fn a_relaying_stranger_is_refused_by_both_and_acted_on_by_neither() {
    init_log();
    let (a, b) = real_pair();
    link_intact(&a, &b, 1);
    // The stranger: one connection to each node, claiming to be the other.
    // It has no cookie, so its first message can only be made up; then it
    // relays whatever either node says to the other.
    let mut to_a = TcpStream::connect(a.0.local_addr()).unwrap();
    let mut to_b = TcpStream::connect(b.0.local_addr()).unwrap();
    let mut fake = PREFACE.to_vec();
    fake.extend(frame(KIND_NOISE, &[7u8; 32 + 40]));
    to_a.write_all(&fake).unwrap();
    to_b.write_all(&fake).unwrap();
    let (ra, rb) = (to_a.try_clone().unwrap(), to_b.try_clone().unwrap());
    let relay = |mut from: TcpStream, mut to: TcpStream| {
        thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            from.set_read_timeout(Some(GUARD)).unwrap();
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                let _ = to.write_all(&buf[..n]);
            }
            got
        })
    };
    let from_a = relay(ra, to_b.try_clone().unwrap());
    let from_b = relay(rb, to_a.try_clone().unwrap());
    let (said_a, said_b) = (from_a.join().unwrap(), from_b.join().unwrap());
    // Each node said only "authentication failed", nothing about itself,
    // and closed.
    for said in [&said_a, &said_b] {
        assert_eq!(
            frames(said),
            vec![(KIND_STATUS, vec![AUTH_FAILED])],
            "{said:?}"
        );
    }
    // Whatever it sends now goes nowhere.
    let _ = to_a.write_all(&frame(40, b"kill everything"));
    let _ = to_b.write_all(&frame(40, b"kill everything"));
    wait_until("both counted a failure", || {
        a.0.handshake_stats().failed == 1 && b.0.handshake_stats().failed == 1
    });
    link_intact(&a, &b, 2);
    let frames_at = |r: &Recorder| r.frame_count();
    assert_eq!((frames_at(&a.1), frames_at(&b.1)), (2, 2));
    a.0.shutdown();
    b.0.shutdown();
}

#[test]
fn two_acceptors_relayed_to_each_other_time_out() {
    init_log();
    let (a, b) = real_pair();
    // Both nodes are acceptors on these connections: each waits for the
    // other to prove itself first, so a relay has nothing to carry.
    let to_a = TcpStream::connect(a.0.local_addr()).unwrap();
    let to_b = TcpStream::connect(b.0.local_addr()).unwrap();
    (&to_a).write_all(&PREFACE).unwrap();
    (&to_b).write_all(&PREFACE).unwrap();
    let mut x = to_a.try_clone().unwrap();
    let mut y = to_b.try_clone().unwrap();
    let t = thread::spawn(move || read_to_close(&mut x));
    let said_b = read_to_close(&mut y);
    let said_a = t.join().unwrap();
    assert!(
        said_a.is_empty() && said_b.is_empty(),
        "{said_a:?} {said_b:?}"
    );
    assert_eq!(a.0.handshake_stats().timed_out, 1);
    assert_eq!(b.0.handshake_stats().timed_out, 1);
    link_intact(&a, &b, 1);
    a.0.shutdown();
    b.0.shutdown();
}

#[test]
fn replayed_spliced_and_reflected_handshakes_are_refused() {
    init_log();
    let (a, b) = real_pair();
    // Record c's real handshakes with a, through proxies.
    let c = start(fast("c"));
    let p1 = Proxy::start(a.0.local_addr());
    let pc = c.0.connect(p1.addr).unwrap();
    assert_eq!(pc.name, "a");
    wait_until("a sees c", || a.0.peer_named("c").is_some());
    let c_at_a = a.0.peer_named("c").unwrap();
    // The proxy records before it forwards, and c is up only after the
    // verdict, so the whole handshake is recorded already (preface, first
    // message, confirmation up; the acceptor's message and verdict down);
    // the wait is a second guard. Only the handshake's frames are kept:
    // the sealed records after them are not handshake frames.
    wait_until("the proxy recorded the handshake", || {
        frames(&p1.up.lock().unwrap()).len() >= 3 && frames(&p1.down.lock().unwrap()).len() >= 2
    });
    let hs1 = handshake_frames(&p1.up, 3);
    let a_said = handshake_frames(&p1.down, 2);
    assert!(hs1.iter().skip(1).all(|(k, _)| *k == KIND_NOISE), "{hs1:?}");
    assert!(a_said.iter().all(|(k, _)| *k == KIND_NOISE), "{a_said:?}");
    c.0.disconnect(pc.id);
    wait_until("a lost c", || a.0.peer_named("c").is_none());
    let p2 = Proxy::start(a.0.local_addr());
    c.0.connect(p2.addr).unwrap();
    wait_until("a sees c again", || a.0.peer_named("c").is_some());
    wait_until("the proxy recorded the second handshake", || {
        frames(&p2.up.lock().unwrap()).len() >= 3
    });
    let c_at_a = (c_at_a, a.0.peer_named("c").unwrap());
    let hs2 = handshake_frames(&p2.up, 3);

    let attempt = |to: &Transport, msgs: &[&(u8, Vec<u8>)]| {
        let mut s = TcpStream::connect(to.local_addr()).unwrap();
        let mut wire = PREFACE.to_vec();
        for (k, p) in msgs {
            wire.extend(frame(*k, p));
        }
        s.write_all(&wire).unwrap();
        frames(&read_to_close(&mut s))
    };
    let refused = |said: &[(u8, Vec<u8>)]| said.last() == Some(&(KIND_STATUS, vec![AUTH_FAILED]));
    // 1. c's whole recorded handshake, replayed to a and to b: each answers
    //    the first message (with keys only c could use), then refuses the
    //    confirmation.
    for to in [&a.0, &b.0] {
        let said = attempt(to, &[&hs1[1], &hs1[2]]);
        assert!(refused(&said), "{said:?}");
    }
    // 2. Spliced: the second connection's first message with the first's
    //    confirmation, and the other way round.
    assert!(refused(&attempt(&a.0, &[&hs2[1], &hs1[2]])));
    assert!(refused(&attempt(&a.0, &[&hs1[1], &hs2[2]])));
    // 3. The acceptor's own messages reflected back as an initiator's (the
    //    other direction): its second message as a first one, its verdict
    //    as a confirmation.
    assert!(refused(&attempt(&a.0, &[&a_said[0]])));
    assert!(refused(&attempt(&a.0, &[&hs1[1], &a_said[1]])));
    // Nothing came up, nothing was replaced: c's live link is the same.
    wait_until("failures counted", || a.0.handshake_stats().failed == 5);
    assert_eq!(b.0.handshake_stats().failed, 1);
    assert_eq!(a.0.peer_named("c"), Some(c_at_a.1.clone()));
    assert_ne!(c_at_a.0.id, c_at_a.1.id);
    assert_eq!(a.1.ups().len(), 3, "b, c, c again");
    link_intact_three(&a, &b);
    a.0.shutdown();
    b.0.shutdown();
    c.0.shutdown();
}

/// The first `n` frames of a recording (the handshake's), exactly `n`.
fn handshake_frames(rec: &Recording, n: usize) -> Vec<(u8, Vec<u8>)> {
    let all = frames(&rec.lock().unwrap());
    assert!(
        all.len() >= n,
        "{} of {n} handshake frames recorded",
        all.len()
    );
    all.into_iter().take(n).collect()
}

fn link_intact_three(a: &(Transport, Arc<Recorder>), b: &(Transport, Arc<Recorder>)) {
    let pb = a.0.peer_named("b").unwrap();
    let n = b.1.frame_count();
    a.0.send(pb.id, 40, b"still here").unwrap();
    b.1.wait_for("frame", |ev| count_frames(ev) == n + 1);
    assert_eq!(b.1.ups().len(), 1);
}

#[test]
fn a_forged_record_after_a_relayed_handshake_closes_the_connection() {
    init_log();
    // A stranger in the path relays a genuine handshake (it can read
    // nothing) and then injects a frame of its own: the record fails
    // authentication and the receiver drops that connection; the frame is
    // never delivered.
    let a = start(fast("a"));
    let c = start(fast("c"));
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = l.local_addr().unwrap();
    let target = a.0.local_addr();
    let mitm = thread::spawn(move || {
        let (mut client, _) = l.accept().unwrap();
        let mut server = TcpStream::connect(target).unwrap();
        let mut sc = server.try_clone().unwrap();
        let mut cc = client.try_clone().unwrap();
        let back = thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while let Ok(n) = sc.read(&mut buf) {
                if n == 0 || cc.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
        // Relay the handshake (preface, first message, confirmation).
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while frames(&seen).len() < 3 {
            let n = client.read(&mut buf).unwrap();
            assert!(n > 0);
            seen.extend_from_slice(&buf[..n]);
            server.write_all(&buf[..n]).unwrap();
        }
        // Now inject: a plain frame, then a record of the right shape.
        server.write_all(&[0, 40, 1, 2, 3]).unwrap();
        server.write_all(&[7u8; 40]).unwrap();
        back.join().unwrap();
    });
    let pa = c.0.connect(proxy_addr).unwrap();
    a.1.wait_for("c down at a", |ev| !downs(ev).is_empty());
    let (_, why) = a.1.downs().pop().unwrap();
    assert!(why.to_string().contains("authentication"), "{why}");
    assert_eq!(a.1.frame_count(), 0, "the forged frame was never delivered");
    c.1.wait_for("a down at c", |ev| !downs(ev).is_empty());
    assert_eq!(c.1.downs()[0].0.id, pa.id);
    mitm.join().unwrap();
    a.0.shutdown();
    c.0.shutdown();
}

#[test]
fn garbage_truncation_and_length_bombs_cost_a_slot_at_most() {
    init_log();
    let (a, b) = real_pair();
    let t0 = Instant::now();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("length bomb", vec![0xff, 0xff, 0xff, 0xff, 1, 0]),
        (
            "bomb after the preface",
            [&PREFACE[..], &[0x7f, 0, 0, 0, 2, 0]].concat(),
        ),
        ("flags", [&PREFACE[..], &[0, 0, 0, 1, 2, 0xff, 0]].concat()),
        (
            "empty noise",
            [&PREFACE[..], &frame(KIND_NOISE, &[])].concat(),
        ),
        ("zeros", vec![0; 64]),
    ];
    for (what, bytes) in &cases {
        let mut s = TcpStream::connect(a.0.local_addr()).unwrap();
        s.write_all(bytes).unwrap();
        let said = read_to_close(&mut s);
        assert!(said.len() < 64, "{what}: {said:?}");
    }
    // Truncated: half a preface, half a first message; they wait, then time
    // out.
    let mut half = TcpStream::connect(a.0.local_addr()).unwrap();
    half.write_all(&PREFACE[..5]).unwrap();
    let mut half2 = TcpStream::connect(a.0.local_addr()).unwrap();
    half2
        .write_all(&[&PREFACE[..], &[0, 0, 0, 72, 2, 0, 1, 2, 3]].concat())
        .unwrap();
    assert!(read_to_close(&mut half).is_empty());
    assert!(read_to_close(&mut half2).is_empty());
    assert!(t0.elapsed() < GUARD);
    let st = a.0.handshake_stats();
    assert_eq!(
        (st.failed, st.timed_out, st.pending),
        (cases.len() as u64, 2, 0)
    );
    link_intact(&a, &b, 1);
    a.0.shutdown();
    b.0.shutdown();
}

#[test]
fn a_version_1_peer_is_told_both_versions() {
    init_log();
    let a = start(fast("a"));
    // The start of a version-1 hello: magic, version 1, creation,
    // fingerprint, tick, nonce, name, address.
    let mut hello = b"GRFT".to_vec();
    hello.extend_from_slice(&1u16.to_be_bytes());
    hello.extend_from_slice(&[0; 4 + 8 + 4 + 32]);
    for s in ["old", "127.0.0.1:1"] {
        hello.extend_from_slice(&(s.len() as u16).to_be_bytes());
        hello.extend_from_slice(s.as_bytes());
    }
    let mut s = TcpStream::connect(a.0.local_addr()).unwrap();
    s.write_all(&frame(1, &hello)).unwrap();
    let said = frames(&read_to_close(&mut s));
    assert_eq!(said.len(), 1, "{said:?}");
    let (k, p) = &said[0];
    assert_eq!((*k, p[0]), (KIND_STATUS, REFUSED));
    let why = String::from_utf8_lossy(&p[1..]);
    assert_eq!(why, "protocol version 1 is not supported (ours is 3)");

    // A version-1 acceptor refuses our preface in its words; we report it.
    let old = TcpListener::bind("127.0.0.1:0").unwrap();
    let old_addr = old.local_addr().unwrap();
    let t = thread::spawn(move || {
        let (mut s, _) = old.accept().unwrap();
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf);
        let mut p = vec![REFUSED];
        p.extend_from_slice(b"protocol version 3 is not supported (ours is 1)");
        s.write_all(&frame(KIND_STATUS, &p)).unwrap();
    });
    let e = a.0.connect(old_addr).unwrap_err();
    assert!(
        e.to_string()
            .contains("protocol version 3 is not supported (ours is 1)"),
        "{e}"
    );
    t.join().unwrap();
    a.0.shutdown();
}

#[test]
fn a_replayed_handshake_of_an_old_incarnation_replaces_nothing() {
    init_log();
    // d's first incarnation connects through a recording proxy, then goes;
    // its second (another creation) connects. Replaying the first's
    // handshake claims "d restarted" (a creation that differs from the
    // live one), and must be refused before it replaces anything.
    let a = start(fast("a"));
    let d1 = start(fast("d").creation(1));
    let p = Proxy::start(a.0.local_addr());
    d1.0.connect(p.addr).unwrap();
    wait_until("a sees d1", || a.0.peer_named("d").is_some());
    let rec = frames(&p.up.lock().unwrap());
    d1.0.shutdown();
    wait_until("a lost d1", || a.0.peer_named("d").is_none());
    let d2 = start(fast("d").creation(2));
    d2.0.connect(a.0.local_addr()).unwrap();
    wait_until("a sees d2", || {
        a.0.peer_named("d").is_some_and(|p| p.creation == 2)
    });
    let live = a.0.peer_named("d").unwrap();

    let mut s = TcpStream::connect(a.0.local_addr()).unwrap();
    let mut wire = PREFACE.to_vec();
    wire.extend(frame(rec[1].0, &rec[1].1));
    wire.extend(frame(rec[2].0, &rec[2].1));
    s.write_all(&wire).unwrap();
    let said = frames(&read_to_close(&mut s));
    assert_eq!(
        said.last(),
        Some(&(KIND_STATUS, vec![AUTH_FAILED])),
        "{said:?}"
    );
    assert_eq!(a.0.peer_named("d"), Some(live.clone()));
    let downs = a.1.downs();
    assert_eq!(downs.len(), 1, "only d1 went down: {downs:?}");
    let n = d2.1.frame_count();
    a.0.send(live.id, 40, b"to d2").unwrap();
    d2.1.wait_for("frame at d2", |ev| count_frames(ev) == n + 1);
    a.0.shutdown();
    d2.0.shutdown();
}

#[test]
fn encryption_hides_frames_and_authentication_alone_does_not() {
    init_log();
    let secret = b"the launch codes are 0000";
    // `None`: the default, which encrypts.
    for (encrypt_a, encrypt_c, hidden) in [
        (Some(false), Some(false), false),
        (Some(true), Some(false), true),
        (Some(false), Some(true), true),
        (None, Some(false), true),
        (None, None, true),
    ] {
        let with = |cfg: NetConfig, e: Option<bool>| match e {
            Some(e) => cfg.encrypt(e),
            None => cfg,
        };
        let a = start(with(fast("a"), encrypt_a));
        let c = start(with(fast("c"), encrypt_c));
        let p = Proxy::start(a.0.local_addr());
        let pa = c.0.connect(p.addr).unwrap();
        c.0.send(pa.id, 40, secret).unwrap();
        a.1.wait_for("the frame", |ev| count_frames(ev) == 1);
        let wire = p.up.lock().unwrap().clone();
        let shows = wire.windows(secret.len()).any(|w| w == secret);
        assert_eq!(shows, !hidden, "encrypt {encrypt_a:?}/{encrypt_c:?}");
        // Names never travel in clear, in either mode.
        assert!(
            !wire.windows(3).any(|w| w == b"\0\x01c"),
            "c's name in clear"
        );
        a.0.shutdown();
        c.0.shutdown();
    }
}
