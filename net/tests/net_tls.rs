//! TLS distribution at the transport level: certificates made in the test
//! (rcgen); a good pair exchanges frames in real TLS 1.3 records; a wrong
//! CA, an expired certificate, a name mismatch and plain TCP against TLS
//! are each refused, the connecting side's error saying which.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use graft_net::{NetConfig, TlsConfig, FIRST_USER_KIND};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

struct Ca {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let der = params.self_signed(&key).unwrap().der().to_vec();
    Ca { params, key, der }
}

/// A node certificate of `ca` for the subject alternative names `sans`;
/// `expired`: valid only in 2000.
fn leaf(ca: &Ca, sans: &[&str], expired: bool) -> (Vec<u8>, Vec<u8>) {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    if expired {
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2000, 12, 31);
    }
    let issuer = Issuer::from_params(&ca.params, &ca.key);
    let cert = params.signed_by(&key, &issuer).unwrap();
    (cert.der().to_vec(), key.serialize_der())
}

fn tls(ca: &Ca, sans: &[&str], expired: bool) -> TlsConfig {
    let (cert, key) = leaf(ca, sans, expired);
    TlsConfig::new(vec![cert], key, vec![ca.der.clone()]).unwrap()
}

fn tls_node(name: &str, t: TlsConfig) -> NetConfig {
    config(name, "tls-cookie")
        .tls(t)
        .connect_timeout(Duration::from_secs(10))
}

/// The errors of a `connect` from `from` to `to`, then of a
/// `connect_then` (the poller's handshake), both refused.
fn refused(from: NetConfig, to: NetConfig) -> [String; 2] {
    init_log();
    let (a, _ra) = start(from);
    let (b, rb) = start(to);
    let err = a.connect(b.local_addr()).expect_err("refused");
    let (r, who) = connect_then(&a, b.local_addr());
    let polled = r.expect_err("refused on the poller too");
    assert_eq!(who, "graft-net-io");
    assert!(a.peers().is_empty() && b.peers().is_empty());
    assert!(rb.ups().is_empty());
    a.shutdown();
    b.shutdown();
    eprintln!("refused: {err}; on the poller: {polled}");
    [err.to_string(), polled.to_string()]
}

#[test]
fn two_tls_nodes_exchange_frames_in_tls_records() {
    init_log();
    let ca = ca("graft test CA");
    let (a, ra) = start(tls_node("a", tls(&ca, &["a"], false)));
    let (b, rb) = start(tls_node("b", tls(&ca, &["b"], false)));
    let peer = a.connect(b.local_addr()).unwrap();
    assert_eq!(peer.name, "b");
    for i in 0..200u32 {
        a.send(peer.id, FIRST_USER_KIND, &i.to_le_bytes()).unwrap();
    }
    // A big frame crosses several 16 KiB TLS records.
    let big = vec![7u8; 300_000];
    a.send(peer.id, FIRST_USER_KIND + 1, &big).unwrap();
    rb.wait_for("all frames", |ev| count_frames(ev) == 201);
    let frames = rb.frames_from(rb.ups()[0].id);
    for (i, (k, p)) in frames.iter().take(200).enumerate() {
        assert_eq!(
            (*k, &p[..]),
            (FIRST_USER_KIND, &(i as u32).to_le_bytes()[..])
        );
    }
    assert_eq!(frames[200].1, big);
    // And back.
    let back = rb.ups()[0].id;
    b.send(back, FIRST_USER_KIND, b"pong").unwrap();
    ra.wait_for("the answer", |ev| count_frames(ev) == 1);
    a.shutdown();
    b.shutdown();
}

/// `connect_then` over TLS: the TLS handshake and the cookie handshake
/// inside it run on the I/O thread (no thread per connect), and the
/// connection carries frames both ways in TLS records.
#[test]
fn a_tls_connect_then_runs_on_the_io_thread() {
    init_log();
    let ca = ca("graft test CA");
    let (a, ra) = start(tls_node("a", tls(&ca, &["a"], false)));
    // All the connects below come from 127.0.0.1: room for them all.
    let (b, rb) = start(tls_node("b", tls(&ca, &["b"], false)).max_pending_per_address(64));
    let (r, who) = connect_then(&a, b.local_addr());
    let peer = r.unwrap();
    assert_eq!((peer.name.as_str(), who.as_str()), ("b", "graft-net-io"));
    let big = vec![7u8; 300_000];
    a.send(peer.id, FIRST_USER_KIND, b"small").unwrap();
    a.send(peer.id, FIRST_USER_KIND + 1, &big).unwrap();
    rb.wait_for("both frames", |ev| count_frames(ev) == 2);
    let frames = rb.frames_from(rb.ups()[0].id);
    assert_eq!(frames[0].1, b"small");
    assert_eq!(frames[1].1, big);
    b.send(rb.ups()[0].id, FIRST_USER_KIND, b"back").unwrap();
    ra.wait_for("the answer", |ev| count_frames(ev) == 1);
    // Twelve at once from as many nodes, to one: all up.
    let many: Vec<_> = (0..12)
        .map(|i| {
            let name = format!("m{i}");
            start(tls_node(&name, tls(&ca, &[&name], false)))
        })
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    for (t, _) in &many {
        let tx = tx.clone();
        t.connect_then(b.local_addr(), Box::new(move |r| tx.send(r).unwrap()));
    }
    for _ in 0..many.len() {
        let r = rx.recv_timeout(GUARD).expect("answered");
        assert_eq!(r.unwrap().name, "b");
    }
    for (t, _) in many {
        t.shutdown();
    }
    a.shutdown();
    b.shutdown();
}

/// As an attacker answering a TLS `connect_then`: silence, garbage, a
/// hang-up, a TLS record header of absurd length. Each costs the caller a
/// bounded wait and an error; the I/O thread goes on serving.
#[test]
fn a_tls_connect_then_to_a_bad_peer_fails_cleanly() {
    init_log();
    let ca = ca("graft test CA");
    let (a, _ra) =
        start(tls_node("a", tls(&ca, &["a"], false)).connect_timeout(Duration::from_millis(500)));
    let peer = |answer: &'static [u8], hang_up: bool| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut hello = [0u8; 512];
            let _ = s.read(&mut hello);
            let _ = s.write_all(answer);
            if !hang_up {
                std::thread::sleep(Duration::from_secs(2));
            }
        });
        addr
    };
    let silent = connect_then(&a, peer(b"", false)).0.expect_err("silent");
    assert!(matches!(silent, graft_net::NetError::Timeout), "{silent}");
    let garbage =
        (connect_then(&a, peer(b"HTTP/1.1 400 Bad Request\r\n\r\n", true)).0).expect_err("garbage");
    assert!(garbage.to_string().contains("TLS"), "{garbage}");
    let gone = connect_then(&a, peer(b"", true)).0.expect_err("hung up");
    assert!(gone.to_string().contains("plain-TCP"), "{gone}");
    let bomb =
        (connect_then(&a, peer(&[22, 3, 3, 0xff, 0xff, 0, 0], true)).0).expect_err("a length bomb");
    assert!(bomb.to_string().contains("TLS"), "{bomb}");
    // A real peer still connects.
    let (b, _rb) = start(tls_node("b", tls(&ca, &["b"], false)));
    assert_eq!(connect_then(&a, b.local_addr()).0.unwrap().name, "b");
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_certificate_of_another_ca_is_refused() {
    let (good, other) = (ca("graft test CA"), ca("someone else's CA"));
    // The acceptor's certificate is of another CA: the connecting side
    // refuses it itself.
    for e in refused(
        tls_node("a", tls(&good, &["a"], false)),
        tls_node("b", tls_with_roots(&other, &good, "b")),
    ) {
        assert!(e.contains("unknown issuer"), "{e}");
    }
    // The connecting side's certificate is of another CA: the acceptor
    // refuses it, and says so in an alert.
    for e in refused(
        tls_node("a", tls_with_roots(&other, &good, "a")),
        tls_node("b", tls(&good, &["b"], false)),
    ) {
        assert!(e.contains("unknown_ca"), "{e}");
    }
}

/// A certificate of `issuer` for `name`, trusting `trust`.
fn tls_with_roots(issuer: &Ca, trust: &Ca, name: &str) -> TlsConfig {
    let (cert, key) = leaf(issuer, &[name], false);
    TlsConfig::new(vec![cert], key, vec![trust.der.clone()]).unwrap()
}

#[test]
fn an_expired_certificate_is_refused() {
    let ca = ca("graft test CA");
    for e in refused(
        tls_node("a", tls(&ca, &["a"], false)),
        tls_node("b", tls(&ca, &["b"], true)),
    ) {
        assert!(e.contains("expired"), "{e}");
    }
    for e in refused(
        tls_node("a", tls(&ca, &["a"], true)),
        tls_node("b", tls(&ca, &["b"], false)),
    ) {
        assert!(e.contains("certificate_expired"), "{e}");
    }
}

#[test]
fn a_certificate_naming_another_node_is_refused() {
    let ca = ca("graft test CA");
    // b presents a good certificate of the CA, but for "c".
    for e in refused(
        tls_node("a", tls(&ca, &["a"], false)),
        tls_node("b", tls(&ca, &["c"], false)),
    ) {
        assert!(e.contains("name mismatch") && e.contains("\"b\""), "{e}");
    }
    // a's certificate names "z": b refuses it, and says so in an alert.
    for e in refused(
        tls_node("a", tls(&ca, &["z"], false)),
        tls_node("b", tls(&ca, &["b"], false)),
    ) {
        assert!(e.contains("bad_certificate"), "{e}");
    }
    // Without name checks the same pair connects.
    init_log();
    let (a, _) = start(tls_node(
        "a",
        tls(&ca, &["a"], false).verify_peer_name(false),
    ));
    let (b, _) = start(tls_node("b", tls(&ca, &["c"], false)));
    a.connect(b.local_addr()).unwrap();
    a.shutdown();
    b.shutdown();
    // A `name@host` node may be named by its host.
    let (a, _) = start(tls_node("x@127.0.0.1", tls(&ca, &["127.0.0.1"], false)));
    let (b, _) = start(tls_node("y@127.0.0.1", tls(&ca, &["127.0.0.1"], false)));
    a.connect(b.local_addr()).unwrap();
    a.shutdown();
    b.shutdown();
}

#[test]
fn plain_tcp_and_tls_refuse_each_other() {
    let ca = ca("graft test CA");
    for e in refused(
        tls_node("a", tls(&ca, &["a"], false)),
        config("b", "tls-cookie"),
    ) {
        assert!(e.contains("TLS") && e.contains("plain-TCP"), "{e}");
    }
    let (b, rb) = start(tls_node("b", tls(&ca, &["b"], false)));
    let (a, _) = start(config("a", "tls-cookie"));
    let err = a.connect(b.local_addr()).expect_err("refused");
    assert!(rb.ups().is_empty(), "{err}");
    wait_until("the TLS side counts a failure", || {
        b.handshake_stats().failed >= 1
    });
    a.shutdown();
    b.shutdown();
}

#[test]
fn garbage_and_silence_against_a_tls_node_cost_only_a_slot() {
    init_log();
    let ca = ca("graft test CA");
    let (b, rb) = start(tls_node("b", tls(&ca, &["b"], false).clone()));
    // A TLS-looking record header of an absurd length, then garbage.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    s.write_all(&[22, 3, 1, 0xff, 0xff]).unwrap();
    s.write_all(&[0u8; 64]).unwrap();
    drop(s);
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    s.write_all(b"\x16\x03\x01\x00\x05hello").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = [0u8; 64];
    // An alert or a close, never a hang.
    let _ = s.read(&mut buf);
    // A real peer still gets in.
    let (a, _) = start(tls_node("a", tls(&ca, &["a"], false)));
    a.connect(b.local_addr()).unwrap();
    rb.wait_for("the real peer", |ev| ups(ev).len() == 1);
    wait_until("both strangers counted", || b.handshake_stats().failed >= 2);
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_stalled_tls_handshake_times_out() {
    init_log();
    let ca = ca("graft test CA");
    let (b, _) =
        start(tls_node("b", tls(&ca, &["b"], false)).handshake_timeout(Duration::from_millis(300)));
    // Half a ClientHello record, then nothing.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    s.write_all(&[22, 3, 1, 0, 200, 1, 0, 0]).unwrap();
    wait_until("the stalled handshake times out", || {
        b.handshake_stats().timed_out == 1
    });
    assert_eq!(b.handshake_stats().pending, 0);
    b.shutdown();
}

/// Walks `wire` as TLS records: their content types, or `None` if it is
/// not a sequence of whole TLS records.
fn tls_records(wire: &[u8]) -> Option<Vec<u8>> {
    let mut types = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let h = wire.get(at..at + 5)?;
        if !(20..=23).contains(&h[0]) || h[1] != 3 {
            return None;
        }
        at += 5 + u16::from_be_bytes([h[3], h[4]]) as usize;
        types.push(h[0]);
    }
    (at == wire.len()).then_some(types)
}

#[test]
fn the_wire_is_tls_records_only_and_shows_no_names() {
    use std::sync::{Arc, Mutex};
    init_log();
    let ca = ca("graft test CA");
    let (a, _) = start(tls_node("node-alpha", tls(&ca, &["node-alpha"], false)));
    let (b, rb) = start(tls_node("node-beta", tls(&ca, &["node-beta"], false)));
    // A recording proxy between them.
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let to = b.local_addr();
    let via = proxy.local_addr().unwrap();
    let (up, down) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    let (u, d) = (up.clone(), down.clone());
    std::thread::spawn(move || {
        let (c, _) = proxy.accept().unwrap();
        let s = TcpStream::connect(to).unwrap();
        let pipe = |mut from: TcpStream, mut to: TcpStream, log: Arc<Mutex<Vec<u8>>>| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 || to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    log.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                let _ = to.shutdown(std::net::Shutdown::Both);
            })
        };
        pipe(c.try_clone().unwrap(), s.try_clone().unwrap(), u);
        pipe(s, c, d);
    });
    let peer = a.connect(via).unwrap();
    a.send(peer.id, FIRST_USER_KIND, b"a secret payload")
        .unwrap();
    rb.wait_for("the frame", |ev| count_frames(ev) == 1);
    a.shutdown();
    b.shutdown();
    // The proxy has logged whole records (a read may split one).
    wait_until("whole records logged", || {
        tls_records(&up.lock().unwrap()).is_some() && tls_records(&down.lock().unwrap()).is_some()
    });
    for (dir, wire) in [
        ("a to b", up.lock().unwrap()),
        ("b to a", down.lock().unwrap()),
    ] {
        let types = tls_records(&wire).unwrap_or_else(|| panic!("{dir}: not TLS records"));
        assert_eq!(types[0], 22, "{dir}: starts with a handshake record");
        assert!(types.contains(&23), "{dir}: application data");
        for secret in [
            &b"node-alpha"[..],
            b"node-beta",
            b"a secret payload",
            b"tls-cookie",
        ] {
            // Certificates travel encrypted in TLS 1.3 too.
            assert!(
                !wire.windows(secret.len()).any(|w| w == secret),
                "{dir}: {:?} in clear",
                String::from_utf8_lossy(secret)
            );
        }
    }
}

/// The attacker of the relay test: it holds a certificate of the cluster's
/// CA (one that names the host, so it passes every name check for the
/// `name@127.0.0.1` nodes) but not the cookie. It accepts a's TLS
/// connection as if it were b, opens its own TLS connection to b, and
/// relays the cookie handshake's bytes between the two. Were the cookie
/// handshake not bound to its TLS connection, both nodes would see the
/// other authenticated, and the attacker, holding the keys of both TLS
/// connections, could read and inject every frame.
mod relay {
    use std::io::{ErrorKind, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use rustls::{version::TLS13, StreamOwned};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

    /// What the relay saw: cookie-handshake bytes each way.
    #[derive(Debug, Default)]
    pub(super) struct Seen {
        pub(super) a_to_b: usize,
        pub(super) b_to_a: usize,
    }

    /// Relays the first connection `listener` accepts to `to`, as TLS
    /// server toward it and TLS client toward `to`, for at most `limit`.
    pub(super) fn run(
        listener: TcpListener,
        to: std::net::SocketAddr,
        cert: Vec<u8>,
        key: Vec<u8>,
        ca: Vec<u8>,
        limit: Duration,
    ) -> Seen {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = vec![CertificateDer::from(cert)];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key));
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key.clone_key())
            .unwrap();
        // As graft's own acceptor: nothing after the handshake but data.
        server.send_tls13_tickets = 0;
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(ca)).unwrap();
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap();
        let (from_a, _) = listener.accept().unwrap();
        let to_b = TcpStream::connect(to).unwrap();
        for s in [&from_a, &to_b] {
            s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            s.set_nodelay(true).unwrap();
        }
        let mut a = StreamOwned::new(ServerConnection::new(Arc::new(server)).unwrap(), from_a);
        let name = ServerName::IpAddress(to.ip().into());
        let mut b = StreamOwned::new(ClientConnection::new(Arc::new(client), name).unwrap(), to_b);
        let mut seen = Seen::default();
        let until = Instant::now() + limit;
        let mut buf = [0u8; 16 << 10];
        // Reads what one side has (a timeout is "nothing now"), writes it
        // to the other; `false` once either side is gone.
        fn pump(from: &mut impl Read, to: &mut impl Write, buf: &mut [u8], n: &mut usize) -> bool {
            match from.read(buf) {
                Ok(0) => false,
                Ok(k) => {
                    *n += k;
                    to.write_all(&buf[..k]).and_then(|()| to.flush()).is_ok()
                }
                Err(e) => matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            }
        }
        while Instant::now() < until {
            if !pump(&mut a, &mut b, &mut buf, &mut seen.a_to_b)
                || !pump(&mut b, &mut a, &mut buf, &mut seen.b_to_a)
            {
                break;
            }
        }
        seen
    }
}

#[test]
fn a_cookie_handshake_relayed_between_two_tls_connections_is_refused() {
    init_log();
    let ca = ca("graft test CA");
    // Two nodes of the cluster, and an attacker with a certificate of the
    // same CA for the same host, but without the cookie.
    let (a, ra) = start(tls_node("a@127.0.0.1", tls(&ca, &["127.0.0.1"], false)));
    let (b, rb) = start(tls_node("b@127.0.0.1", tls(&ca, &["127.0.0.1"], false)));
    let (cert, key) = leaf(&ca, &["127.0.0.1"], false);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let via = listener.local_addr().unwrap();
    let (to, ca_der) = (b.local_addr(), ca.der.clone());
    let attacker = std::thread::spawn(move || {
        relay::run(listener, to, cert, key, ca_der, Duration::from_secs(15))
    });
    let err = a.connect(via).expect_err("a relayed handshake is refused");
    let seen = attacker.join().unwrap();
    eprintln!("refused: {err}; the relay saw {seen:?}");
    // The relay did carry the cookie handshake (a's first message reached
    // b inside the attacker's TLS connection): it failed on its binding.
    assert!(seen.a_to_b > 0, "{seen:?}");
    wait_until("b counts the failure", || b.handshake_stats().failed >= 1);
    assert!(a.peers().is_empty() && b.peers().is_empty());
    assert!(ra.ups().is_empty() && rb.ups().is_empty());
    let e = err.to_string();
    assert!(e.contains("cookie"), "{e}");
    // The real connection, without the relay, still works.
    let peer = a.connect(b.local_addr()).unwrap();
    assert_eq!(peer.name, "b@127.0.0.1");
    a.send(peer.id, FIRST_USER_KIND, b"direct").unwrap();
    rb.wait_for("the frame", |ev| count_frames(ev) == 1);
    a.shutdown();
    b.shutdown();
}

#[test]
fn four_lanes_over_tls_each_run_tls_and_keep_order() {
    init_log();
    let ca = ca("graft test CA");
    let lanes = |n: &str| {
        tls_node(n, tls(&ca, &[n], false))
            .io(graft_net::IoMode::Poller)
            .lanes(4)
    };
    // `connect`, then `connect_then` (every lane's TLS on the poller).
    for polled in [false, true] {
        four_lanes(lanes("a"), lanes("b"), polled);
    }
}

fn four_lanes(a: NetConfig, b: NetConfig, polled: bool) {
    let (a, _ra) = start(a);
    let (b, rb) = start(b);
    let peer = match polled {
        false => a.connect(b.local_addr()).unwrap(),
        true => {
            let (r, who) = connect_then(&a, b.local_addr());
            assert_eq!(who, "graft-net-io");
            r.unwrap()
        }
    };
    let s = a.sender(peer.id).unwrap();
    assert_eq!(s.lanes(), 4);
    for i in 0..400u64 {
        let key = i % 8;
        let mut p = vec![0u8; if i % 97 == 5 { 200_000 } else { 16 }];
        p[..8].copy_from_slice(&key.to_be_bytes());
        p[8..16].copy_from_slice(&i.to_be_bytes());
        s.send_keyed(key, FIRST_USER_KIND, p, false).unwrap();
    }
    rb.wait_for("all frames", |ev| count_frames(ev) == 400);
    let mut last = std::collections::HashMap::new();
    for (_, p) in rb.frames_from(rb.ups()[0].id) {
        let key = u64::from_be_bytes(p[..8].try_into().unwrap());
        let i = u64::from_be_bytes(p[8..16].try_into().unwrap());
        if let Some(prev) = last.insert(key, i) {
            assert!(prev < i, "key {key}: {i} after {prev}");
        }
    }
    assert!(
        s.lane_frames().iter().all(|n| *n == 100),
        "{:?}",
        s.lane_frames()
    );
    a.shutdown();
    b.shutdown();
}
