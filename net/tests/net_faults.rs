//! Misbehaving clients get disconnected; the node keeps serving its other
//! peers.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::*;
use graft_net::{NetError, RawClient, Transport};

/// Reads until the node closes the connection (or the hang guard fires).
fn assert_dropped(mut s: TcpStream, what: &str) {
    s.set_read_timeout(Some(GUARD)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue, // e.g. a refusal status frame
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("{what}: connection not dropped: {e}"),
        }
    }
}

/// The good peer still works both ways.
fn assert_serving(a: &Transport, b: &Transport, ra: &Recorder, rb: &Recorder) {
    let to_b = a
        .peers()
        .into_iter()
        .find(|p| p.name == "b")
        .expect("b still connected");
    let to_a = b
        .peers()
        .into_iter()
        .find(|p| p.name == "a")
        .expect("a still connected");
    let (na, nb) = (ra.frames_from(to_b.id).len(), rb.frames_from(to_a.id).len());
    a.send(to_b.id, 40, b"still there?").unwrap();
    b.send(to_a.id, 41, b"yes").unwrap();
    rb.wait_for("a -> b", |ev| frames_of(ev, to_a.id) == nb + 1);
    ra.wait_for("b -> a", |ev| frames_of(ev, to_b.id) == na + 1);
}

/// The handshake timeout of the node under test, in most tests.
const HANDSHAKE: Duration = Duration::from_millis(500);

fn setup() -> (
    Transport,
    Transport,
    std::sync::Arc<Recorder>,
    std::sync::Arc<Recorder>,
) {
    setup_with(HANDSHAKE)
}

/// Node `a` (under test, with handshake timeout `handshake`) and its good
/// peer `b`, connected.
fn setup_with(
    handshake: Duration,
) -> (
    Transport,
    Transport,
    std::sync::Arc<Recorder>,
    std::sync::Arc<Recorder>,
) {
    init_log();
    let (a, ra) = start(
        config("a", "c")
            .max_frame(1 << 20)
            .connect_timeout(handshake),
    );
    let (b, rb) = start(config("b", "c"));
    b.connect(a.local_addr()).unwrap();
    wait_until("a lists b", || a.peers().len() == 1);
    (a, b, ra, rb)
}

#[test]
fn raw_tcp_garbage_is_dropped_before_the_handshake() {
    let mut bad_kind = Vec::new();
    bad_kind.extend_from_slice(&3u32.to_be_bytes());
    bad_kind.extend_from_slice(&[9, 0, 1, 2, 3]); // kind 9: not a hello
    let mut bad_hello = Vec::new();
    bad_hello.extend_from_slice(&8u32.to_be_bytes());
    bad_hello.extend_from_slice(&[1, 0]); // a hello ...
    bad_hello.extend_from_slice(b"GRFTxxxx"); // ... that is not one
    let truncated = vec![0, 0, 0, 100, 1, 0, 7, 7, 7];
    // (what, bytes, EOF after them, refused at once: not by the timeout)
    let cases: Vec<(&str, Vec<u8>, bool, bool)> = vec![
        (
            "http request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            false,
            true,
        ),
        (
            "huge length prefix",
            vec![0xff, 0xff, 0xff, 0xff, 1, 0],
            false,
            true,
        ),
        ("unknown kind", bad_kind, false, true),
        ("malformed hello", bad_hello, false, true),
        ("truncated frame, then EOF", truncated.clone(), true, true),
        ("truncated frame, then silence", truncated, false, false),
        ("nothing at all", vec![], false, false),
    ];
    // Garbage is refused as read: against a node whose handshake timeout
    // is far longer than the wait here, only a refusal drops it in time.
    // Silence is dropped by the handshake timeout.
    for at_once in [true, false] {
        let handshake = if at_once { GUARD * 4 } else { HANDSHAKE };
        let (a, b, ra, rb) = setup_with(handshake);
        for (what, bytes, eof, _) in cases.iter().filter(|c| c.3 == at_once) {
            let mut s = TcpStream::connect(a.local_addr()).unwrap();
            s.write_all(bytes).unwrap();
            if *eof {
                s.shutdown(Shutdown::Write).unwrap();
            }
            assert_dropped(s, what);
            assert_serving(&a, &b, &ra, &rb);
        }
        assert_eq!(ra.ups().len(), 1, "no raw client ever came up");
        assert!(ra.downs().is_empty());
        a.shutdown();
        b.shutdown();
        assert_lifecycles(&ra.events());
    }
}

#[test]
fn bad_frames_after_the_handshake_drop_only_that_peer() {
    let (a, b, ra, rb) = setup();
    let bad_frames: Vec<(&str, Vec<u8>)> = vec![
        ("unknown transport kind", vec![0, 0, 0, 1, 7, 0, 0]),
        (
            "handshake kind after the handshake",
            vec![0, 0, 0, 1, 1, 0, 0],
        ),
        ("huge length prefix", vec![0xff, 0xff, 0xff, 0xff, 20, 0]),
        ("just over the maximum", {
            let mut v = ((1u32 << 20) + 1).to_be_bytes().to_vec();
            v.extend_from_slice(&[20, 0]);
            v
        }),
        ("unknown flag", vec![0, 0, 0, 1, 20, 0x40, 0]),
        (
            "corrupt compressed payload",
            vec![0, 0, 0, 4, 20, 1, 0xff, 0xff, 0xff, 0xff],
        ),
        (
            "garbage",
            b"\x00\x00\x00\x05\x03\x02garbage garbage garbage".to_vec(),
        ),
    ];
    for (round, (what, bytes)) in bad_frames.into_iter().enumerate() {
        let name = format!("probe{round}");
        let (mut raw, info) = RawClient::connect(a.local_addr(), &config(&name, "c")).unwrap();
        assert_eq!(info.name, "a");
        ra.wait_for("probe up", |ev| ups(ev).iter().any(|p| p.name == name));
        raw.send_frame(20, b"valid first").unwrap();
        raw.send_raw(&bytes).unwrap();
        ra.wait_for(what, |ev| downs(ev).iter().any(|(p, _)| p.name == name));
        let (_, why) = ra
            .downs()
            .into_iter()
            .find(|(p, _)| p.name == name)
            .unwrap();
        assert!(matches!(why, NetError::Protocol(_)), "{what}: {why:?}");
        // The valid frame before the bad one was delivered.
        let probe = ra.ups().into_iter().find(|p| p.name == name).unwrap();
        assert_eq!(
            ra.frames_from(probe.id),
            vec![(20, b"valid first".to_vec())],
            "{what}"
        );
        // The raw client sees the close.
        loop {
            match raw.recv_frame(GUARD) {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("{what}: not disconnected"),
                Err(_) => break,
            }
        }
        assert_serving(&a, &b, &ra, &rb);
    }
    // Truncated frame, then EOF: the peer goes down as closed.
    let (mut raw, _) = RawClient::connect(a.local_addr(), &config("truncated", "c")).unwrap();
    raw.send_raw(&[0, 0, 0, 100, 20, 0, 1, 2, 3]).unwrap();
    raw.stream().shutdown(Shutdown::Write).unwrap();
    ra.wait_for("truncated down", |ev| {
        downs(ev).iter().any(|(p, _)| p.name == "truncated")
    });
    let (_, why) = ra
        .downs()
        .into_iter()
        .find(|(p, _)| p.name == "truncated")
        .unwrap();
    assert!(matches!(why, NetError::Closed), "{why:?}");
    assert_serving(&a, &b, &ra, &rb);

    assert_eq!(a.peers().len(), 1);
    a.shutdown();
    b.shutdown();
    assert_lifecycles(&ra.events());
}

#[test]
fn raw_frames_from_the_node_reach_a_raw_client() {
    let (a, b, ra, _rb) = setup();
    let (mut raw, _) = RawClient::connect(a.local_addr(), &config("probe", "c")).unwrap();
    wait_until("probe listed", || {
        a.peers().iter().any(|p| p.name == "probe")
    });
    let probe = a.peers().into_iter().find(|p| p.name == "probe").unwrap();
    a.send(probe.id, 99, b"to the probe").unwrap();
    let f = loop {
        let f = raw.recv_frame(GUARD).unwrap().expect("frame");
        if f.0 != 4 {
            break f;
        }
    };
    assert_eq!(f, (99, 0, b"to the probe".to_vec()));
    a.shutdown();
    b.shutdown();
    assert_lifecycles(&ra.events());
}

#[test]
fn a_handler_that_panics_takes_its_connection_down_not_its_thread() {
    let (a, b, ra, rb) = setup();
    let to_a = b.peers()[0].id;
    b.send(to_a, 30, PANIC_PAYLOAD).unwrap();
    // a's handler panicked on the frame: a reports the loss of b (instead
    // of leaving a connection nobody reads), and b sees it closed.
    ra.wait_for("a drops b", |ev| downs(ev).len() == 1);
    let (peer, why) = ra.downs().remove(0);
    assert_eq!(peer.name, "b");
    assert!(
        matches!(&why, NetError::HandlerPanicked(m) if m.contains("told to panic")),
        "{why:?}"
    );
    rb.wait_for("b sees it", |ev| downs(ev).len() == 1);
    // And they connect again.
    b.connect(a.local_addr()).unwrap();
    wait_until("a lists b again", || a.peers().len() == 1);
    a.shutdown();
    b.shutdown();
    assert_lifecycles(&ra.events());
}

/// A listener that accepts and never answers the handshake: the connect
/// fails with a timeout, named as one (the read timeout's `EAGAIN` once
/// came through as "i/o error: Resource temporarily unavailable").
#[test]
fn a_peer_that_never_answers_the_handshake_is_a_timeout() {
    init_log();
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (a, _) = start(config("a", "c").connect_timeout(Duration::from_millis(300)));
    let t = std::time::Instant::now();
    match a.connect(mute.local_addr().unwrap()) {
        Err(NetError::Timeout) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(10), "hang guard");
    drop(mute);
    a.shutdown();
}
