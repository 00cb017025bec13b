//! The handshake: who the peers are, and proof that both know the cookie.
//!
//! ```text
//!  initiator (connect)                         acceptor (listener)
//!  HELLO(version, name, addr, creation,  ---->
//!        fingerprint, nonce_i)
//!                                        <---- HELLO(..., nonce_a)
//!                                        <---- REPLY(mac(nonce_i, acceptor, initiator))
//!  verify; register the name as pending
//!  REPLY(mac(nonce_a, initiator, acceptor)) -->
//!                                              verify; decide (duplicates)
//!                                        <---- STATUS(ok | duplicate)
//! ```
//!
//! `mac(nonce, responder, challenger)` is blake3 keyed with the key derived
//! from the cookie, over the nonce and both names (responder first), so an
//! answer cannot be replayed to another node or reflected back. A side that
//! finds the other's answer wrong sends `STATUS(auth failed)` and closes; a
//! side that cannot go on for another reason (version, own name) sends
//! `STATUS(refused, why)`. Only the acceptor decides whether the connection
//! is kept, once the initiator is authenticated (see `transport.rs` for the
//! rule about two connections between the same pair of nodes).
//!
//! HELLO payload: `"GRFT"`, version u16, creation u32, fingerprint u64,
//! heartbeat tick in ms u32, nonce 32 B, name (u16 length + UTF-8), listen address (u16 length +
//! `SocketAddr` text), all big-endian. Handshake frames are never compressed.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use crate::cookie::derive_key;
use crate::frame::{self, kind, Decoder};
use crate::{NetConfig, NetError, PeerId, PeerInfo};

/// Version of the wire protocol; peers must agree.
pub(crate) const PROTOCOL_VERSION: u16 = 1;
const MAGIC: &[u8; 4] = b"GRFT";
/// Largest handshake frame accepted (hellos are small).
pub(crate) const MAX_HANDSHAKE_FRAME: usize = 4096;

/// `STATUS` codes.
mod status {
    pub(super) const OK: u8 = 0;
    pub(super) const DUPLICATE: u8 = 1;
    pub(super) const AUTH_FAILED: u8 = 2;
    pub(super) const REFUSED: u8 = 3;
}

/// Who we are, as told in our hello.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) name: String,
    pub(crate) listen_addr: SocketAddr,
    pub(crate) creation: u32,
    pub(crate) fingerprint: u64,
    /// Our heartbeat tick, so the peer can allow for it.
    pub(crate) heartbeat_ms: u32,
    pub(crate) key: [u8; 32],
}

impl Identity {
    /// This node as `cfg` describes it, announcing `listen_addr` unless
    /// the configuration advertises another address.
    pub(crate) fn new(cfg: &NetConfig, listen_addr: SocketAddr, cookie: &str) -> Identity {
        Identity {
            name: cfg.name.clone(),
            listen_addr: cfg.advertise.unwrap_or(listen_addr),
            creation: cfg.creation,
            fingerprint: cfg.fingerprint,
            heartbeat_ms: cfg.heartbeat_ms(),
            key: derive_key(cookie),
        }
    }
}

/// A hello, ours or the peer's.
#[derive(Debug, Clone)]
pub(crate) struct Hello {
    pub(crate) version: u16,
    pub(crate) name: String,
    pub(crate) listen_addr: SocketAddr,
    pub(crate) creation: u32,
    pub(crate) fingerprint: u64,
    pub(crate) heartbeat_ms: u32,
    pub(crate) nonce: [u8; 32],
}

impl Hello {
    fn ours(me: &Identity, nonce: [u8; 32]) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            name: me.name.clone(),
            listen_addr: me.listen_addr,
            creation: me.creation,
            fingerprint: me.fingerprint,
            heartbeat_ms: me.heartbeat_ms,
            nonce,
        }
    }

    /// The peer this hello describes, as connection `id`.
    pub(crate) fn peer_info(&self, id: PeerId) -> PeerInfo {
        PeerInfo {
            id,
            name: self.name.clone(),
            listen_addr: self.listen_addr,
            creation: self.creation,
            fingerprint: self.fingerprint,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let addr = self.listen_addr.to_string();
        let mut v = Vec::with_capacity(64 + self.name.len() + addr.len());
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&self.version.to_be_bytes());
        v.extend_from_slice(&self.creation.to_be_bytes());
        v.extend_from_slice(&self.fingerprint.to_be_bytes());
        v.extend_from_slice(&self.heartbeat_ms.to_be_bytes());
        v.extend_from_slice(&self.nonce);
        for s in [self.name.as_bytes(), addr.as_bytes()] {
            v.extend_from_slice(&(s.len() as u16).to_be_bytes());
            v.extend_from_slice(s);
        }
        v
    }

    fn decode(b: &[u8]) -> Result<Hello, String> {
        let mut r = Bytes(b);
        if r.take(4)? != MAGIC {
            return Err("not a graft-net hello".into());
        }
        let version = u16::from_be_bytes(r.array()?);
        if version != PROTOCOL_VERSION {
            return Err(format!(
                "protocol version {version} is not supported (ours is {PROTOCOL_VERSION})"
            ));
        }
        let creation = u32::from_be_bytes(r.array()?);
        let fingerprint = u64::from_be_bytes(r.array()?);
        let heartbeat_ms = u32::from_be_bytes(r.array()?);
        let nonce = r.array()?;
        let name = r.string()?;
        if name.is_empty() {
            return Err("empty node name".into());
        }
        let listen_addr = r
            .string()?
            .parse()
            .map_err(|e| format!("bad listen address: {e}"))?;
        if !r.0.is_empty() {
            return Err("trailing bytes after hello".into());
        }
        Ok(Hello {
            version,
            name,
            listen_addr,
            creation,
            fingerprint,
            heartbeat_ms,
            nonce,
        })
    }
}

/// A cursor over a handshake payload.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated hello".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("length checked"))
    }

    fn string(&mut self) -> Result<String, String> {
        let n = u16::from_be_bytes(self.array()?) as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "string is not UTF-8".into())
    }
}

/// The answer to `challenger`'s `nonce`, given by `responder`.
fn mac(key: &[u8; 32], nonce: &[u8; 32], responder: &str, challenger: &str) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(nonce);
    for name in [responder, challenger] {
        h.update(&(name.len() as u16).to_be_bytes());
        h.update(name.as_bytes());
    }
    h.finalize()
}

/// Checks a REPLY payload in constant time (`blake3::Hash`'s `PartialEq`).
fn reply_ok(payload: &[u8], expected: blake3::Hash) -> bool {
    <[u8; 32]>::try_from(payload).is_ok_and(|b| blake3::Hash::from(b) == expected)
}

/// What the initiator learned.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The acceptor keeps this connection.
    Up(Hello),
    /// Another connection between the two nodes wins; this one is closed.
    Duplicate(Hello),
}

/// Reads one handshake frame, waiting at most until `deadline`.
fn read_frame(
    s: &mut TcpStream,
    dec: &mut Decoder,
    deadline: Instant,
) -> Result<(u8, Vec<u8>), NetError> {
    match dec.recv_until(s, deadline)? {
        None => Err(NetError::Timeout),
        Some((_, flags, _)) if flags != 0 => {
            Err(NetError::Handshake("compressed handshake frame".into()))
        }
        Some((kind, _, payload)) => Ok((kind, payload)),
    }
}

fn send_status(s: &mut TcpStream, code: u8, why: &str) {
    let mut p = vec![code];
    p.extend_from_slice(why.as_bytes());
    // Best effort: the connection is being dropped anyway.
    let _ = frame::write_frame(s, kind::STATUS, &p);
}

/// Turns a STATUS other than OK into an error.
fn status_error(payload: &[u8], peer: &str) -> NetError {
    match payload.first() {
        Some(&status::AUTH_FAILED) => NetError::Auth {
            peer: peer.to_owned(),
            detail: "the peer refused our answer to its challenge (different cookies?)",
        },
        Some(&status::REFUSED) => NetError::Handshake(format!(
            "refused by {peer}: {}",
            String::from_utf8_lossy(&payload[1..])
        )),
        Some(&status::DUPLICATE) => NetError::Duplicate,
        _ => NetError::Handshake(format!("unexpected status from {peer}")),
    }
}

fn unexpected(k: u8, peer: &str, wanted: &str) -> NetError {
    NetError::Handshake(format!("expected {wanted} from {peer}, got frame kind {k}"))
}

/// The initiator's side. `register` is called once the acceptor has proved
/// it knows the cookie; it returns `false` when another connection to the
/// same node is already up or in progress, and this one should be dropped.
pub(crate) fn initiate(
    s: &mut TcpStream,
    dec: &mut Decoder,
    me: &Identity,
    deadline: Instant,
    register: impl FnOnce(&Hello) -> Result<bool, NetError>,
) -> Result<Outcome, NetError> {
    let remote = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let nonce = crate::cookie::random_bytes();
    frame::write_frame(s, kind::HELLO, &Hello::ours(me, nonce).encode())?;

    let (k, p) = read_frame(s, dec, deadline)?;
    let theirs = match k {
        kind::HELLO => Hello::decode(&p).map_err(|m| {
            send_status(s, status::REFUSED, &m);
            NetError::Handshake(format!("{remote}: {m}"))
        })?,
        kind::STATUS => return Err(status_error(&p, &remote)),
        k => return Err(unexpected(k, &remote, "hello")),
    };
    let peer = format!("{}@{remote}", theirs.name);
    if theirs.name == me.name {
        send_status(s, status::REFUSED, "same node name");
        return Err(NetError::Handshake(format!(
            "{peer} has our own node name (connected to ourselves?)"
        )));
    }
    let (k, p) = read_frame(s, dec, deadline)?;
    match k {
        kind::REPLY if reply_ok(&p, mac(&me.key, &nonce, &theirs.name, &me.name)) => {}
        kind::REPLY => {
            log::warn!("graft-net: {peer} failed our cookie challenge; dropping the connection");
            send_status(s, status::AUTH_FAILED, "");
            return Err(NetError::Auth {
                peer,
                detail: "the peer's answer to our challenge is wrong (different cookies?)",
            });
        }
        kind::STATUS => return Err(status_error(&p, &peer)),
        k => return Err(unexpected(k, &peer, "challenge reply")),
    }
    if !register(&theirs)? {
        send_status(s, status::DUPLICATE, "");
        return Ok(Outcome::Duplicate(theirs));
    }
    let answer = mac(&me.key, &theirs.nonce, &me.name, &theirs.name);
    frame::write_frame(s, kind::REPLY, answer.as_bytes())?;

    let (k, p) = read_frame(s, dec, deadline)?;
    match (k, p.first()) {
        (kind::STATUS, Some(&status::OK)) => Ok(Outcome::Up(theirs)),
        (kind::STATUS, Some(&status::DUPLICATE)) => Ok(Outcome::Duplicate(theirs)),
        (kind::STATUS, _) => {
            let e = status_error(&p, &peer);
            if matches!(e, NetError::Auth { .. }) {
                log::warn!("graft-net: {peer} refused our cookie; dropping the connection");
            }
            Err(e)
        }
        (k, _) => Err(unexpected(k, &peer, "status")),
    }
}

/// The acceptor's side, up to and including checking the initiator's
/// answer. The caller then decides and calls [`finish_accept`].
pub(crate) fn accept(
    s: &mut TcpStream,
    dec: &mut Decoder,
    me: &Identity,
    deadline: Instant,
    remote: SocketAddr,
) -> Result<Hello, NetError> {
    let (k, p) = read_frame(s, dec, deadline)?;
    if k != kind::HELLO {
        return Err(unexpected(k, &remote.to_string(), "hello"));
    }
    let theirs = Hello::decode(&p).map_err(|m| {
        send_status(s, status::REFUSED, &m);
        NetError::Handshake(format!("{remote}: {m}"))
    })?;
    let peer = format!("{}@{remote}", theirs.name);
    if theirs.name == me.name {
        send_status(s, status::REFUSED, "same node name");
        return Err(NetError::Handshake(format!("{peer} has our own node name")));
    }
    let nonce = crate::cookie::random_bytes();
    let mut out = Vec::with_capacity(256);
    frame::encode(&mut out, kind::HELLO, 0, &Hello::ours(me, nonce).encode());
    let answer = mac(&me.key, &theirs.nonce, &me.name, &theirs.name);
    frame::encode(&mut out, kind::REPLY, 0, answer.as_bytes());
    s.write_all(&out)?;

    let (k, p) = read_frame(s, dec, deadline)?;
    match k {
        kind::REPLY if reply_ok(&p, mac(&me.key, &nonce, &theirs.name, &me.name)) => Ok(theirs),
        kind::REPLY => {
            log::warn!("graft-net: {peer} failed our cookie challenge; dropping the connection");
            send_status(s, status::AUTH_FAILED, "");
            Err(NetError::Auth {
                peer,
                detail: "the peer's answer to our challenge is wrong (different cookies?)",
            })
        }
        kind::STATUS => {
            let e = status_error(&p, &peer);
            if matches!(e, NetError::Auth { .. }) {
                log::warn!("graft-net: {peer} refused our cookie; dropping the connection");
            }
            Err(e)
        }
        k => Err(unexpected(k, &peer, "challenge reply")),
    }
}

/// The acceptor's verdict: `keep` sends OK, otherwise DUPLICATE.
pub(crate) fn finish_accept(s: &mut TcpStream, keep: bool) -> io::Result<()> {
    let code = if keep { status::OK } else { status::DUPLICATE };
    frame::write_frame(s, kind::STATUS, &[code])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip() {
        let h = Hello {
            version: PROTOCOL_VERSION,
            name: "node-ä".into(),
            listen_addr: "[::1]:4369".parse().unwrap(),
            creation: 7,
            fingerprint: 0xdead_beef,
            heartbeat_ms: 1000,
            nonce: [9; 32],
        };
        let d = Hello::decode(&h.encode()).unwrap();
        assert_eq!(
            (
                d.name,
                d.listen_addr,
                d.creation,
                d.fingerprint,
                d.heartbeat_ms,
                d.nonce
            ),
            (
                h.name,
                h.listen_addr,
                h.creation,
                h.fingerprint,
                h.heartbeat_ms,
                h.nonce
            )
        );
        let enc = h_encode_truncations();
        for n in 0..enc.len() {
            assert!(Hello::decode(&enc[..n]).is_err());
        }
    }

    fn h_encode_truncations() -> Vec<u8> {
        Hello {
            version: PROTOCOL_VERSION,
            name: "a".into(),
            listen_addr: "127.0.0.1:1".parse().unwrap(),
            creation: 1,
            fingerprint: 1,
            heartbeat_ms: 1,
            nonce: [0; 32],
        }
        .encode()
    }

    #[test]
    fn macs_bind_direction_and_names() {
        let k = [1; 32];
        let n = [2; 32];
        assert_ne!(mac(&k, &n, "a", "b"), mac(&k, &n, "b", "a"));
        assert_ne!(mac(&k, &n, "a", "b"), mac(&[3; 32], &n, "a", "b"));
        assert_ne!(mac(&k, &n, "ab", ""), mac(&k, &n, "a", "b"));
    }

    /// The acceptor checks the initiator's answer itself (with equal
    /// cookies an honest initiator would have refused first, so this side
    /// is driven by hand here).
    #[test]
    fn acceptor_refuses_a_wrong_answer() {
        use std::net::TcpListener;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let me = Identity {
            name: "acceptor".into(),
            listen_addr: addr,
            creation: 1,
            fingerprint: 0,
            heartbeat_ms: 1000,
            key: crate::cookie::derive_key("right"),
        };
        let server = std::thread::spawn(move || {
            let (mut s, remote) = l.accept().unwrap();
            let mut dec = Decoder::new(1024, MAX_HANDSHAKE_FRAME);
            let deadline = Instant::now() + std::time::Duration::from_secs(30);
            accept(&mut s, &mut dec, &me, deadline, remote)
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let hello = Hello {
            version: PROTOCOL_VERSION,
            name: "intruder".into(),
            listen_addr: addr,
            creation: 1,
            fingerprint: 0,
            heartbeat_ms: 1000,
            nonce: [5; 32],
        };
        frame::write_frame(&mut c, kind::HELLO, &hello.encode()).unwrap();
        let mut dec = Decoder::new(1024, MAX_HANDSHAKE_FRAME);
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        let (k, p) = read_frame(&mut c, &mut dec, deadline).unwrap();
        assert_eq!(k, kind::HELLO);
        let theirs = Hello::decode(&p).unwrap();
        assert_eq!(
            read_frame(&mut c, &mut dec, deadline).unwrap().0,
            kind::REPLY
        );
        // Answer with a key derived from another cookie.
        let wrong = mac(
            &crate::cookie::derive_key("wrong"),
            &theirs.nonce,
            "intruder",
            "acceptor",
        );
        frame::write_frame(&mut c, kind::REPLY, wrong.as_bytes()).unwrap();
        let (k, p) = read_frame(&mut c, &mut dec, deadline).unwrap();
        assert_eq!(
            (k, p.as_slice()),
            (kind::STATUS, &[status::AUTH_FAILED][..])
        );
        let e = server.join().unwrap().unwrap_err();
        assert!(matches!(e, NetError::Auth { .. }), "{e:?}");
        assert!(e.to_string().contains("intruder"), "{e}");
    }
}
