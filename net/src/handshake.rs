//! The handshake (protocol version 3): who the peers are, proof that both
//! know the cookie, and the session keys. A state machine fed bytes
//! ([`Handshake::feed`]) that produces bytes to send
//! ([`Handshake::take_output`]), so that the acceptor's side can run on a
//! poller without a thread of its own, and attacks can be tested without
//! sockets.
//!
//! It is the Noise framework's `NNpsk0` pattern
//! (`Noise_NNpsk0_25519_AESGCM_SHA256`, the `snow` crate), with the
//! pre-shared key derived from the cookie (`blake3::derive_key`):
//!
//! ```text
//!  initiator (connect)                           acceptor (listener)
//!  PREFACE("GRFT", version)              ---->   (clear; lets an old peer be told)
//!  NOISE(-> psk, e; enc(identity_i))     ---->   checks: psk (cookie), name
//!                                        <----   NOISE(<- e, ee; enc(identity_a))
//!  checks: psk, ee; registers the name
//!  NOISE(transport#0: verdict_i, h)      ---->   key confirmation: only the holder of
//!                                                the initiator's ephemeral key can
//!                                                make it; h = both sides' transcript
//!                                                hash. Only now: decide (duplicates)
//!                                        <----   NOISE(transport#0: verdict_a)
//!  sealed records (session.rs) both ways from here on
//! ```
//!
//! The prologue is the preface and the pattern name, so both sides agree on
//! the protocol version (and, inside TLS, the TLS connection's exporter
//! value, so that the handshake cannot be relayed between two TLS
//! connections); the transcript hash `h` covers the prologue, both
//! ephemeral keys and both identities (name, announced address, creation,
//! build fingerprint, heartbeat tick), and the roles are built into Noise
//! (each direction has its own key). Hence a proof made on one connection,
//! or for the other direction, or by a relaying stranger, verifies nowhere
//! else; a replayed first message gets a second message that only the
//! original initiator can read, and no key confirmation. The acceptor never
//! declares a peer up, nor replaces an old connection of the same name,
//! before the key confirmation. Nothing but the preface and the ephemeral
//! keys travels in clear: the identities are encrypted.
//!
//! A side that cannot go on sends a clear `STATUS(code, why)` frame and
//! closes: `AUTH_FAILED` when the other side's message does not open with
//! our cookie's key, `REFUSED` for everything else (a peer of another
//! protocol version, our own name). A peer of an older version gets a
//! `STATUS` in the format every version shares, which it reports as
//! "refused: protocol version 2 is not supported (ours is 3)"; we report
//! its refusal of our preface likewise. (Version 2 was the same pattern
//! with BLAKE2s as the hash; version 3 takes SHA-256, which the CPU's SHA
//! instructions make several times cheaper: see `docs/decisions.md`.)
//!
//! The two key-confirmation messages and everything after them use the
//! session keys of Noise's `Split()` (see `session.rs`): AES-256-GCM when
//! either side asked for encryption, else a BLAKE3 MAC per record.
//!
//! Identity payload: creation u32, fingerprint u64, heartbeat tick in ms
//! u32, flags u8 (bit 0: encrypt), name (u16 length + UTF-8), listen
//! address (u16 length + `SocketAddr` text), big-endian. Handshake frames are never compressed and at most
//! [`MAX_HANDSHAKE_FRAME`] bytes.

use std::net::SocketAddr;
use std::time::Instant;

use crate::frame::{self, kind, HEADER_LEN};
use crate::session::{Session, TAG};
use crate::{NetConfig, NetError, PeerId, PeerInfo};

/// Version of the wire protocol; peers must agree.
pub(crate) const PROTOCOL_VERSION: u16 = 3;
const MAGIC: &[u8; 4] = b"GRFT";
/// Largest handshake frame accepted (every handshake frame is small).
pub(crate) const MAX_HANDSHAKE_FRAME: usize = 4096;
/// Most connections per peer ([`NetConfig::lanes`]).
pub(crate) const MAX_LANES: usize = 64;
/// The Noise protocol.
pub(crate) const NOISE: &str = "Noise_NNpsk0_25519_AESGCM_SHA256";
/// Context of the pre-shared key's derivation from the cookie.
const PSK_CONTEXT: &str = "graft-net 2026-12 noise psk v2";

/// `STATUS` codes (clear refusals) and verdict codes (sealed).
mod status {
    pub(super) const OK: u8 = 0;
    pub(super) const DUPLICATE: u8 = 1;
    pub(super) const AUTH_FAILED: u8 = 2;
    pub(super) const REFUSED: u8 = 3;
}

/// Identity flag: the lane fields follow the address (see "Lanes").
const FLAG_LANES: u8 = 2;

/// Who we are, as told in our identity payload.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) name: String,
    pub(crate) listen_addr: SocketAddr,
    pub(crate) creation: u32,
    pub(crate) fingerprint: u64,
    /// Our heartbeat tick, so the peer can allow for it.
    pub(crate) heartbeat_ms: u32,
    /// The Noise pre-shared key, derived from the cookie.
    pub(crate) psk: [u8; 32],
    /// Whether we want records encrypted (else only authenticated).
    pub(crate) encrypt: bool,
    /// Connections per peer we take ([`NetConfig::lanes`]).
    pub(crate) lanes: u8,
    /// Set when this handshake opens an extra lane of a session.
    pub(crate) lane: Option<LaneReq>,
}

impl Identity {
    /// This identity opening extra lane `claim` of a session.
    pub(crate) fn with_lane(&self, claim: LaneReq) -> Identity {
        Identity {
            lane: Some(claim),
            ..self.clone()
        }
    }

    /// This node as `cfg` describes it, announcing `listen_addr` unless
    /// the configuration advertises another address.
    pub(crate) fn new(cfg: &NetConfig, listen_addr: SocketAddr, cookie: &str) -> Identity {
        Identity {
            name: cfg.name.clone(),
            listen_addr: cfg.advertise.unwrap_or(listen_addr),
            creation: cfg.creation,
            fingerprint: cfg.fingerprint,
            heartbeat_ms: cfg.heartbeat_ms(),
            psk: psk(cookie),
            encrypt: cfg.encrypt,
            lanes: cfg.lanes.clamp(1, MAX_LANES) as u8,
            lane: None,
        }
    }

    fn hello(&self) -> Hello {
        Hello {
            name: self.name.clone(),
            listen_addr: self.listen_addr,
            creation: self.creation,
            fingerprint: self.fingerprint,
            heartbeat_ms: self.heartbeat_ms,
            encrypt: self.encrypt,
            lanes: self.lane.as_ref().map_or(self.lanes, |l| l.lanes),
            lane: self.lane.as_ref().map_or(0, |l| l.index),
            session: self.lane.as_ref().map_or([0; 8], |l| l.session),
            secret: LaneSecret::default(),
        }
    }
}

/// The pre-shared key for `cookie`.
pub(crate) fn psk(cookie: &str) -> [u8; 32] {
    blake3::derive_key(PSK_CONTEXT, cookie.as_bytes())
}

/// A peer's identity, as its handshake told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) name: String,
    pub(crate) listen_addr: SocketAddr,
    pub(crate) creation: u32,
    pub(crate) fingerprint: u64,
    pub(crate) heartbeat_ms: u32,
    /// The peer wants records encrypted.
    pub(crate) encrypt: bool,
    /// Lanes the peer takes (1 when it did not say); for an extra lane,
    /// the number of lanes of its session.
    pub(crate) lanes: u8,
    /// Which lane this connection is: 0 for a session's first.
    pub(crate) lane: u8,
    /// For an extra lane: the session it claims to belong to.
    pub(crate) session: [u8; 8],
    /// This handshake's lane material (never sent, see "Lanes").
    pub(crate) secret: LaneSecret,
}

impl Hello {
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
        let mut v = Vec::with_capacity(24 + self.name.len() + addr.len());
        v.extend_from_slice(&self.creation.to_be_bytes());
        v.extend_from_slice(&self.fingerprint.to_be_bytes());
        v.extend_from_slice(&self.heartbeat_ms.to_be_bytes());
        let lanes = self.lanes > 1 || self.lane > 0;
        v.push(u8::from(self.encrypt) | if lanes { FLAG_LANES } else { 0 });
        for s in [self.name.as_bytes(), addr.as_bytes()] {
            v.extend_from_slice(&(s.len() as u16).to_be_bytes());
            v.extend_from_slice(s);
        }
        if lanes {
            v.push(self.lanes);
            v.push(self.lane);
            v.extend_from_slice(&self.session);
        }
        v
    }

    fn decode(b: &[u8]) -> Result<Hello, String> {
        let mut r = Bytes(b);
        let creation = u32::from_be_bytes(r.array()?);
        let fingerprint = u64::from_be_bytes(r.array()?);
        let heartbeat_ms = u32::from_be_bytes(r.array()?);
        let [flags] = r.array::<1>()?;
        if flags & !(1 | FLAG_LANES) != 0 {
            return Err("unknown identity flags".into());
        }
        let encrypt = flags & 1 != 0;
        let name = r.string()?;
        if name.is_empty() {
            return Err("empty node name".into());
        }
        let listen_addr = r
            .string()?
            .parse()
            .map_err(|e| format!("bad listen address: {e}"))?;
        let (mut lanes, mut lane, mut session) = (1, 0, [0; 8]);
        if flags & FLAG_LANES != 0 {
            [lanes, lane] = r.array()?;
            session = r.array()?;
            if lanes == 0 || usize::from(lanes) > MAX_LANES {
                return Err(format!("{lanes} lanes (1 to {MAX_LANES} are possible)"));
            }
        }
        if !r.0.is_empty() {
            return Err("trailing bytes after the identity".into());
        }
        Ok(Hello {
            name,
            listen_addr,
            creation,
            fingerprint,
            heartbeat_ms,
            encrypt,
            lanes,
            lane,
            session,
            secret: LaneSecret::default(),
        })
    }
}

/// A cursor over a handshake payload.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated identity".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn string(&mut self) -> Result<String, String> {
        let n = u16::from_be_bytes(self.array()?) as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "string is not UTF-8".into())
    }
}

/// The preface: magic and version, in a `HELLO` frame (the first bytes of
/// a version-1 hello, so that either version can tell the other's).
fn preface() -> [u8; 6] {
    let v = PROTOCOL_VERSION.to_be_bytes();
    [MAGIC[0], MAGIC[1], MAGIC[2], MAGIC[3], v[0], v[1]]
}

/// The Noise prologue: the version and, over TLS, the channel binding
/// (a TLS exporter value both ends of one TLS connection share and no
/// other connection has), so that a handshake made inside one TLS
/// connection fails inside any other.
fn prologue(binding: Option<&[u8; 32]>) -> Vec<u8> {
    let mut p = Vec::with_capacity(112);
    p.extend_from_slice(b"graft-net handshake\0");
    p.extend_from_slice(NOISE.as_bytes());
    p.push(0);
    p.extend_from_slice(&preface());
    if let Some(b) = binding {
        p.extend_from_slice(b"\0tls-exporter\0");
        p.extend_from_slice(b);
    }
    p
}

fn noise(
    psk: &[u8; 32],
    initiator: bool,
    binding: Option<&[u8; 32]>,
) -> Result<Box<snow::HandshakeState>, NetError> {
    let params: snow::params::NoiseParams = NOISE.parse().expect("a valid Noise protocol name");
    let prologue = prologue(binding);
    let b = snow::Builder::with_resolver(params, Box::new(crate::noise_crypto::Resolver))
        .psk(0, psk)
        .prologue(&prologue);
    let hs = if initiator {
        b.build_initiator()
    } else {
        b.build_responder()
    };
    hs.map(Box::new)
        .map_err(|e| NetError::Handshake(format!("cannot start the handshake: {e}")))
}

/// Where a handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Acceptor: waiting for the preface.
    Preface,
    /// Acceptor: waiting for the initiator's first Noise message.
    First,
    /// Initiator: waiting for the acceptor's Noise message.
    Second,
    /// Initiator: the acceptor is authenticated; call `confirm`.
    Register,
    /// Acceptor: waiting for the initiator's key confirmation.
    Confirm,
    /// Acceptor: the initiator is authenticated; call `verdict`.
    Decide,
    /// Initiator: waiting for the acceptor's verdict.
    Verdict,
    /// Finished: up, or a duplicate.
    Done,
    /// Failed; nothing more is accepted.
    Failed,
}

/// What [`Handshake::feed`] got to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Needs more bytes.
    More,
    /// Initiator: the acceptor proved the cookie and is this node; call
    /// [`Handshake::confirm`] with whether to go on.
    Register(Hello),
    /// Acceptor: the initiator proved the cookie and its key; call
    /// [`Handshake::verdict`] with whether to keep the connection.
    Decide(Hello),
    /// Initiator: the acceptor keeps the connection; it is up.
    Up(Hello),
    /// Initiator: the acceptor keeps another connection; this one goes.
    Duplicate(Hello),
}

/// One side of one handshake.
#[derive(Debug)]
pub(crate) struct Handshake {
    me: Hello,
    own_name: String,
    phase: Phase,
    noise: Option<Box<snow::HandshakeState>>,
    psk: [u8; 32],
    /// The TLS channel binding, over TLS (see [`prologue`]).
    binding: Option<[u8; 32]>,
    keys: Option<Session>,
    transcript: [u8; 32],
    /// The lane material of this handshake (see "Lanes").
    secret: LaneSecret,
    /// Set when this initiator opens an extra lane.
    lane: Option<LaneReq>,
    peer: Option<Hello>,
    /// Bytes received and not yet consumed.
    inbuf: Vec<u8>,
    /// Bytes to send.
    out: Vec<u8>,
}

impl Handshake {
    /// The connecting side, on plain TCP.
    #[cfg(test)]
    pub(crate) fn initiator(me: &Identity) -> Result<Handshake, NetError> {
        Handshake::initiator_bound(me, None)
    }

    /// The connecting side; its first bytes are in the output already.
    /// `binding`: the TLS channel binding when the handshake runs inside
    /// TLS (both sides must give the same).
    pub(crate) fn initiator_bound(
        me: &Identity,
        binding: Option<[u8; 32]>,
    ) -> Result<Handshake, NetError> {
        let mut h = Handshake::new(me, Phase::Second, binding);
        frame::encode(&mut h.out, kind::HELLO, 0, &preface());
        let mut hs = noise(&me.psk, true, binding.as_ref())?;
        let mut msg = [0u8; MAX_HANDSHAKE_FRAME];
        let n = hs
            .write_message(&h.me.encode(), &mut msg)
            .map_err(|e| NetError::Handshake(format!("cannot write the first message: {e}")))?;
        frame::encode(&mut h.out, kind::NOISE, 0, &msg[..n]);
        h.noise = Some(hs);
        Ok(h)
    }

    /// The accepting side, on plain TCP.
    #[cfg(test)]
    pub(crate) fn acceptor(me: &Identity) -> Handshake {
        Handshake::acceptor_bound(me, None)
    }

    /// The accepting side. Allocates little until the first bytes come.
    /// `binding`: as for [`initiator_bound`](Self::initiator_bound).
    pub(crate) fn acceptor_bound(me: &Identity, binding: Option<[u8; 32]>) -> Handshake {
        Handshake::new(me, Phase::Preface, binding)
    }

    fn new(me: &Identity, phase: Phase, binding: Option<[u8; 32]>) -> Handshake {
        Handshake {
            me: me.hello(),
            own_name: me.name.clone(),
            phase,
            noise: None,
            psk: me.psk,
            binding,
            keys: None,
            transcript: [0; 32],
            secret: LaneSecret::default(),
            lane: me.lane.clone(),
            peer: None,
            inbuf: Vec::new(),
            out: Vec::new(),
        }
    }

    /// Bytes to send now (empty when there are none).
    pub(crate) fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Whether output is waiting.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Feeds received bytes and runs the handshake as far as they go. On an
    /// error the output may hold a `STATUS` frame telling the peer why:
    /// send it (best effort) and close.
    pub(crate) fn feed(&mut self, data: &[u8]) -> Result<Step, NetError> {
        if matches!(self.phase, Phase::Failed | Phase::Done) {
            return Err(NetError::Handshake(
                "bytes after the end of the handshake".into(),
            ));
        }
        self.inbuf.extend_from_slice(data);
        let r = self.run();
        if r.is_err() {
            self.phase = Phase::Failed;
        }
        r
    }

    fn run(&mut self) -> Result<Step, NetError> {
        loop {
            if matches!(self.phase, Phase::Register | Phase::Decide | Phase::Done) {
                // Waiting for the caller, or finished: the rest stays
                // buffered (the peer's first records, after `Done`).
                return Ok(Step::More);
            }
            let Some((k, payload)) = self.next_frame()? else {
                return Ok(Step::More);
            };
            if let Some(step) = self.on_frame(k, &payload)? {
                return Ok(step);
            }
        }
    }

    /// The next complete handshake frame in `inbuf`, taken out of it.
    fn next_frame(&mut self) -> Result<Option<(u8, Vec<u8>)>, NetError> {
        if self.inbuf.len() < HEADER_LEN {
            return Ok(None);
        }
        let h = &self.inbuf[..HEADER_LEN];
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let (k, flags) = (h[4], h[5]);
        if len > MAX_HANDSHAKE_FRAME {
            return Err(NetError::Handshake(format!(
                "handshake frame of {len} bytes (the maximum is {MAX_HANDSHAKE_FRAME})"
            )));
        }
        if flags != 0 {
            return Err(NetError::Handshake(
                "compressed or flagged handshake frame".into(),
            ));
        }
        if self.inbuf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let payload = self.inbuf[HEADER_LEN..HEADER_LEN + len].to_vec();
        self.inbuf.drain(..HEADER_LEN + len);
        Ok(Some((k, payload)))
    }

    fn refuse(&mut self, code: u8, why: &str) {
        let mut p = vec![code];
        p.extend_from_slice(why.as_bytes());
        frame::encode(&mut self.out, kind::STATUS, 0, &p);
    }

    fn auth_failed(&mut self, detail: &'static str) -> NetError {
        self.refuse(status::AUTH_FAILED, "");
        NetError::Auth {
            peer: self.peer_name(),
            detail,
        }
    }

    fn peer_name(&self) -> String {
        self.peer
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_default()
    }

    fn on_frame(&mut self, k: u8, p: &[u8]) -> Result<Option<Step>, NetError> {
        if k == kind::STATUS {
            return Err(status_error(p, &self.peer_name()));
        }
        match (self.phase, k) {
            (Phase::Preface, kind::HELLO) => {
                self.check_preface(p)?;
                self.phase = Phase::First;
                Ok(None)
            }
            (Phase::First, kind::NOISE) => {
                let mut hs = noise(&self.psk, false, self.binding.as_ref())?;
                let mut buf = [0u8; MAX_HANDSHAKE_FRAME];
                let Ok(n) = hs.read_message(p, &mut buf) else {
                    return Err(self.auth_failed(
                        "the peer's first message does not open with our cookie (different cookies?)",
                    ));
                };
                let theirs = self.identity(&buf[..n])?;
                self.answer_lanes(&theirs);
                let n = hs
                    .write_message(&self.me.encode(), &mut buf)
                    .map_err(|e| NetError::Handshake(format!("cannot write our message: {e}")))?;
                frame::encode(&mut self.out, kind::NOISE, 0, &buf[..n]);
                self.finish_noise(hs, false, theirs.encrypt);
                self.peer = Some(theirs);
                self.phase = Phase::Confirm;
                Ok(None)
            }
            (Phase::Second, kind::NOISE) => {
                let mut hs = self.noise.take().expect("initiator's noise state");
                let mut buf = [0u8; MAX_HANDSHAKE_FRAME];
                let Ok(n) = hs.read_message(p, &mut buf) else {
                    return Err(self.auth_failed(
                        "the peer's answer does not open with our cookie (different cookies?)",
                    ));
                };
                let theirs = self.identity(&buf[..n])?;
                self.finish_noise(hs, true, theirs.encrypt);
                self.peer = Some(theirs.clone());
                self.phase = Phase::Register;
                Ok(Some(Step::Register(self.peer_hello())))
            }
            (Phase::Confirm, kind::NOISE) => {
                let len = 1 + 32 + self.token_len();
                let opened = (p.len() == len + TAG)
                    .then(|| self.keys().open_message(p))
                    .flatten();
                let buf = opened.unwrap_or_default();
                // The transcript hash compared in constant time.
                let ok = buf.len() == len
                    && blake3::Hash::from(self.transcript)
                        == blake3::Hash::from(<[u8; 32]>::try_from(&buf[1..33]).expect("32"));
                if ok {
                    self.take_token(&buf[33..]);
                }
                if !ok {
                    return Err(self.auth_failed(
                        "the peer did not confirm the session key (a replayed or relayed handshake?)",
                    ));
                }
                let theirs = self.peer_hello();
                if buf[0] != status::OK {
                    self.phase = Phase::Failed;
                    return Err(NetError::Duplicate);
                }
                self.phase = Phase::Decide;
                Ok(Some(Step::Decide(theirs)))
            }
            (Phase::Verdict, kind::NOISE) => {
                let opened = (p.len() > TAG && p.len() <= 1 + MAX_REFUSAL + TAG)
                    .then(|| self.keys().open_message(p))
                    .flatten();
                let theirs = self.peer_hello();
                self.phase = Phase::Done;
                match opened.as_deref() {
                    Some([status::OK]) => Ok(Some(Step::Up(theirs))),
                    Some([status::DUPLICATE]) => Ok(Some(Step::Duplicate(theirs))),
                    Some([status::REFUSED, why @ ..]) => {
                        self.phase = Phase::Failed;
                        Err(NetError::Handshake(format!(
                            "refused by {}: {}",
                            theirs.name,
                            String::from_utf8_lossy(why)
                        )))
                    }
                    _ => {
                        self.phase = Phase::Failed;
                        Err(NetError::Handshake(format!(
                            "a bad verdict from {}",
                            theirs.name
                        )))
                    }
                }
            }
            (Phase::Preface, _) => Err(NetError::Handshake(format!(
                "expected a graft-net hello, got frame kind {k}"
            ))),
            (_, k) => Err(NetError::Handshake(format!(
                "unexpected handshake frame kind {k} from {}",
                self.peer_name()
            ))),
        }
    }

    fn check_preface(&mut self, p: &[u8]) -> Result<(), NetError> {
        if p.len() < 6 || &p[..4] != MAGIC {
            return Err(NetError::Handshake("not a graft-net hello".into()));
        }
        let version = u16::from_be_bytes([p[4], p[5]]);
        if version != PROTOCOL_VERSION {
            let why =
                format!("protocol version {version} is not supported (ours is {PROTOCOL_VERSION})");
            self.refuse(status::REFUSED, &why);
            return Err(NetError::Handshake(why));
        }
        if p.len() != 6 {
            return Err(NetError::Handshake(
                "trailing bytes after the preface".into(),
            ));
        }
        Ok(())
    }

    /// Decodes and checks the peer's identity payload.
    fn identity(&mut self, b: &[u8]) -> Result<Hello, NetError> {
        let theirs = Hello::decode(b).map_err(|m| {
            self.refuse(status::REFUSED, &m);
            NetError::Handshake(m)
        })?;
        if theirs.name == self.own_name {
            self.refuse(status::REFUSED, "same node name");
            return Err(NetError::Handshake(format!(
                "{} has our own node name (connected to ourselves?)",
                theirs.name
            )));
        }
        Ok(theirs)
    }

    /// The transcript hash and the session keys of a finished pattern
    /// (Noise's `Split()`: the first key is the initiator's sending key).
    /// Records are encrypted when either side asks for it.
    fn finish_noise(&mut self, mut hs: Box<snow::HandshakeState>, initiator: bool, theirs: bool) {
        self.transcript.copy_from_slice(hs.get_handshake_hash());
        let (i_to_a, a_to_i) = hs.dangerously_get_raw_split();
        self.secret = LaneSecret::of_session(&i_to_a, &a_to_i, &self.transcript);
        let encrypt = self.me.encrypt || theirs;
        self.keys = Some(if initiator {
            Session::new(&i_to_a, &a_to_i, encrypt)
        } else {
            Session::new(&a_to_i, &i_to_a, encrypt)
        });
    }

    fn keys(&mut self) -> &mut Session {
        self.keys.as_mut().expect("keys after the noise messages")
    }

    /// Initiator, after [`Step::Register`]: `keep` confirms the key and
    /// asks to be kept; otherwise the handshake ends as a duplicate.
    pub(crate) fn confirm(&mut self, keep: bool) -> Result<(), NetError> {
        assert_eq!(self.phase, Phase::Register, "confirm out of turn");
        let mut plain = vec![0u8; 33];
        plain[0] = if keep { status::OK } else { status::DUPLICATE };
        plain[1..].copy_from_slice(&self.transcript);
        self.append_token(&mut plain);
        self.seal_handshake(&plain)?;
        self.phase = if keep { Phase::Verdict } else { Phase::Done };
        Ok(())
    }

    /// Acceptor, after [`Step::Decide`]: the verdict for the initiator.
    pub(crate) fn verdict(&mut self, keep: bool) -> Result<(), NetError> {
        assert_eq!(self.phase, Phase::Decide, "verdict out of turn");
        let code = if keep { status::OK } else { status::DUPLICATE };
        self.seal_handshake(&[code])?;
        self.phase = Phase::Done;
        Ok(())
    }

    fn seal_handshake(&mut self, plain: &[u8]) -> Result<(), NetError> {
        let m = self.keys().seal_message(plain)?;
        frame::encode(&mut self.out, kind::NOISE, 0, &m);
        Ok(())
    }

    /// The session keys (nonce 0 of each direction was the handshake's)
    /// and the bytes received past the handshake. Only once `Done`.
    /// Output not yet taken stays (the verdict, for the acceptor).
    pub(crate) fn take_session(&mut self) -> (Session, Vec<u8>) {
        assert_eq!(
            self.phase,
            Phase::Done,
            "session before the handshake is done"
        );
        let keys = self.keys.take().expect("keys when done, taken once");
        (keys, std::mem::take(&mut self.inbuf))
    }
}

// # Lanes
//
// A session's extra connections ([`NetConfig::lanes`]). The initiator's
// identity carries `FLAG_LANES` and, after the address, `lanes u8 | lane
// u8 | session [8]`: on a session's first connection, the lanes it takes
// (lane 0, session zero); the acceptor answers with its own count only to
// an initiator that sent the flag (so a peer that knows nothing of lanes
// never sees it), and both use the smaller. An extra lane's identity
// claims lane `i` of session `s` (`s` derived from the first connection's
// key, below), and its key confirmation carries a token after the
// transcript hash:
//
//   key   = derive_key("graft-net lane key v1", i_to_a | a_to_i | h)
//           of the first connection (never sent)
//   s     = derive_key("graft-net lane session v1", key)[..8]
//   token = keyed_hash(key, "graft-net lane token v1\0" | i | lanes | h')
//           with h' the lane's own transcript hash
//
// The acceptor attaches a lane only if its session is a peer still
// forming, `i` is in range and not taken, and the token verifies; else it
// answers the confirmation with a sealed `REFUSED` verdict naming why. A
// token opens nothing on another session (another key), another lane
// index or another handshake (another `h'`); the identity and the token
// travel encrypted.

/// Longest reason of a sealed refusal.
const MAX_REFUSAL: usize = 256;

/// What an initiator that opens an extra lane knows of its session.
#[derive(Clone)]
pub(crate) struct LaneReq {
    /// This lane's index (1 and up).
    pub(crate) index: u8,
    /// The session's lanes.
    pub(crate) lanes: u8,
    /// The session's id.
    pub(crate) session: [u8; 8],
    /// The session's lane key.
    pub(crate) key: [u8; 32],
    /// A token to send instead of the right one (tests of the acceptor).
    pub(crate) forged: Option<[u8; 32]>,
}

impl std::fmt::Debug for LaneReq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lane {} of {}", self.index, self.lanes)
    }
}

/// The lane material of one handshake: its key (for a session's first
/// connection), its transcript, and the token received (an acceptor's
/// extra lane), or sent (an initiator's).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct LaneSecret {
    pub(crate) key: [u8; 32],
    pub(crate) transcript: [u8; 32],
    pub(crate) token: [u8; 32],
}

impl std::fmt::Debug for LaneSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LaneSecret(<hidden>)")
    }
}

impl LaneSecret {
    fn of_session(i_to_a: &[u8; 32], a_to_i: &[u8; 32], h: &[u8; 32]) -> LaneSecret {
        let mut m = [0u8; 96];
        m[..32].copy_from_slice(i_to_a);
        m[32..64].copy_from_slice(a_to_i);
        m[64..].copy_from_slice(h);
        LaneSecret {
            key: blake3::derive_key("graft-net lane key v1", &m),
            transcript: *h,
            token: [0; 32],
        }
    }

    /// The session id of a first connection with this key.
    pub(crate) fn session(&self) -> [u8; 8] {
        let d = blake3::derive_key("graft-net lane session v1", &self.key);
        d[..8].try_into().expect("8 bytes")
    }

    /// Whether `token` is the right one for lane `index` of `lanes`, made
    /// on the handshake whose transcript is `h` (compared in constant time).
    pub(crate) fn verifies(&self, index: u8, lanes: u8, h: &[u8; 32], token: &[u8; 32]) -> bool {
        blake3::Hash::from(lane_token(&self.key, index, lanes, h)) == blake3::Hash::from(*token)
    }
}

/// The token of lane `index` of `lanes`, on the handshake of transcript `h`.
pub(crate) fn lane_token(key: &[u8; 32], index: u8, lanes: u8, h: &[u8; 32]) -> [u8; 32] {
    let mut m = Vec::with_capacity(24 + 2 + 32);
    m.extend_from_slice(b"graft-net lane token v1\0");
    m.extend_from_slice(&[index, lanes]);
    m.extend_from_slice(h);
    *blake3::keyed_hash(key, &m).as_bytes()
}

impl Handshake {
    /// Acceptor: our lane count goes to an initiator that told its own.
    fn answer_lanes(&mut self, theirs: &Hello) {
        if !(theirs.lanes > 1 || theirs.lane > 0) {
            self.me.lanes = 1;
        }
    }

    /// The peer's hello with this handshake's lane material.
    fn peer_hello(&self) -> Hello {
        let mut h = self.peer.clone().expect("peer known");
        h.secret = self.secret.clone();
        h
    }

    /// Bytes of token in the initiator's key confirmation: 32 for an extra
    /// lane, else none.
    fn token_len(&self) -> usize {
        match &self.peer {
            Some(p) if p.lane > 0 => 32,
            _ => 0,
        }
    }

    /// Acceptor: keeps the token of a confirmation.
    fn take_token(&mut self, rest: &[u8]) {
        if let Ok(t) = <[u8; 32]>::try_from(rest) {
            self.secret.token = t;
        }
    }

    /// Initiator of an extra lane: the token after the transcript hash.
    fn append_token(&mut self, plain: &mut Vec<u8>) {
        if let Some(l) = &self.lane {
            let t = l
                .forged
                .unwrap_or_else(|| lane_token(&l.key, l.index, l.lanes, &self.transcript));
            self.secret.token = t;
            plain.extend_from_slice(&t);
        }
    }

    /// Acceptor, after [`Step::Decide`]: refuses an extra lane, telling
    /// the initiator why (sealed).
    pub(crate) fn verdict_refused(&mut self, why: &str) -> Result<(), NetError> {
        assert_eq!(self.phase, Phase::Decide, "verdict out of turn");
        let mut m = vec![status::REFUSED];
        let why = why.as_bytes();
        m.extend_from_slice(&why[..why.len().min(MAX_REFUSAL)]);
        self.seal_handshake(&m)?;
        self.phase = Phase::Done;
        Ok(())
    }
}

/// Turns a clear `STATUS` into an error.
fn status_error(payload: &[u8], peer: &str) -> NetError {
    let peer = if peer.is_empty() { "the peer" } else { peer };
    match payload.first() {
        Some(&status::AUTH_FAILED) => NetError::Auth {
            peer: peer.to_owned(),
            detail: "the peer refused our proof of the cookie (different cookies?)",
        },
        Some(&status::REFUSED) => NetError::Handshake(format!(
            "refused by {peer}: {}",
            String::from_utf8_lossy(&payload[1..])
        )),
        Some(&status::DUPLICATE) => NetError::Duplicate,
        _ => NetError::Handshake(format!("unexpected status from {peer}")),
    }
}

/// What the initiator learned.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The acceptor keeps this connection.
    Up(Hello),
    /// Another connection between the two nodes wins; this one is closed.
    Duplicate(Hello),
}

/// Names the remote address in an error that does not name the peer yet.
pub(crate) fn at(e: NetError, remote: &str) -> NetError {
    match e {
        NetError::Auth { peer, detail } => NetError::Auth {
            peer: if peer.is_empty() {
                remote.to_owned()
            } else {
                format!("{peer}@{remote}")
            },
            detail,
        },
        NetError::Handshake(m) => NetError::Handshake(format!("{remote}: {m}")),
        e => e,
    }
}

/// The initiator's side on a blocking socket, until `deadline`.
/// `register` is called once the acceptor has proved it knows the cookie;
/// it returns `false` when another connection to the same node is already
/// up or in progress, and this one should be dropped.
pub(crate) fn initiate(
    s: &mut impl crate::tls::HsStream,
    me: &Identity,
    deadline: Instant,
    register: impl FnOnce(&Hello) -> Result<bool, NetError>,
) -> Result<(Outcome, Session, Vec<u8>), NetError> {
    let remote = s.peer_name();
    let mut hs = Handshake::initiator_bound(me, s.channel_binding())?;
    let mut register = Some(register);
    let mut buf = [0u8; 2048];
    let mut step = Step::More;
    loop {
        if hs.has_output() {
            s.write_all(&hs.take_output())?;
        }
        match std::mem::replace(&mut step, Step::More) {
            Step::More => {}
            Step::Register(h) => {
                let keep = (register.take().expect("register once"))(&h)?;
                hs.confirm(keep)?;
                s.write_all(&hs.take_output())?;
                if !keep {
                    let (session, rest) = hs.take_session();
                    return Ok((Outcome::Duplicate(h), session, rest));
                }
            }
            Step::Up(h) => {
                let (session, rest) = hs.take_session();
                return Ok((Outcome::Up(h), session, rest));
            }
            Step::Duplicate(h) => {
                let (session, rest) = hs.take_session();
                return Ok((Outcome::Duplicate(h), session, rest));
            }
            Step::Decide(_) => unreachable!("an initiator never decides"),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(NetError::Timeout);
        }
        s.set_read_timeout(Some(left))?;
        let n = match s.read(&mut buf) {
            Ok(0) => {
                return Err(at(
                    NetError::Handshake("closed by the peer".into()),
                    &remote,
                ))
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // The read timeout set above ran out (Linux says `EAGAIN`).
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Err(NetError::Timeout),
            Err(e) => return Err(e.into()),
        };
        step = match hs.feed(&buf[..n]) {
            Ok(s) => s,
            Err(e) => {
                if hs.has_output() {
                    let _ = s.write_all(&hs.take_output());
                }
                if matches!(e, NetError::Auth { .. }) {
                    log::warn!("graft-net: {remote}: {e}");
                }
                return Err(at(e, &remote));
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn id(name: &str, cookie: &str) -> Identity {
        Identity {
            name: name.into(),
            listen_addr: "127.0.0.1:4369".parse().unwrap(),
            creation: 7,
            fingerprint: 0xdead_beef,
            heartbeat_ms: 1000,
            psk: psk(cookie),
            encrypt: cookie.ends_with("+enc"),
            lanes: 1,
            lane: None,
        }
    }

    /// Runs a whole handshake in memory; the acceptor's verdict is `keep`.
    fn pair(i: &Identity, a: &Identity) -> Result<(Step, Step), NetError> {
        let mut ini = Handshake::initiator(i)?;
        let mut acc = Handshake::acceptor(a);
        let s = acc.feed(&ini.take_output())?;
        assert_eq!(s, Step::More);
        let Step::Register(h) = ini.feed(&acc.take_output())? else {
            panic!("no register")
        };
        assert_eq!(h.name, a.name);
        ini.confirm(true)?;
        let d = acc.feed(&ini.take_output())?;
        acc.verdict(true)?;
        let u = ini.feed(&acc.take_output())?;
        Ok((d, u))
    }

    #[test]
    fn identity_round_trip_and_truncations() {
        let h = id("node-ä", "c").hello();
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let enc = h.encode();
        for n in 0..enc.len() {
            assert!(Hello::decode(&enc[..n]).is_err());
        }
    }

    #[test]
    fn a_full_handshake_agrees_on_keys() {
        let (i, a) = (id("i", "c"), id("a", "c"));
        let mut ini = Handshake::initiator(&i).unwrap();
        let mut acc = Handshake::acceptor(&a);
        acc.feed(&ini.take_output()).unwrap();
        let Step::Register(_) = ini.feed(&acc.take_output()).unwrap() else {
            panic!()
        };
        ini.confirm(true).unwrap();
        let Step::Decide(h) = acc.feed(&ini.take_output()).unwrap() else {
            panic!()
        };
        assert_eq!(h.name, "i");
        acc.verdict(true).unwrap();
        // The acceptor's first record may follow its verdict at once.
        let mut wire = acc.take_output();
        let (sa, _) = acc.take_session();
        let (mut seal_a, _) = sa.split();
        seal_a.seal(b"first record", &mut wire).unwrap();
        let Step::Up(h) = ini.feed(&wire).unwrap() else {
            panic!()
        };
        assert_eq!(h.name, "a");
        let (si, rest) = ini.take_session();
        let (_, open_i) = si.split();
        let mut r = crate::session::SealedReader::new(&[][..], open_i, &rest);
        let mut got = vec![0; 64];
        let n = r.read(&mut got).unwrap();
        assert_eq!(&got[..n], b"first record");
    }

    #[test]
    fn wrong_cookie_is_refused_by_the_acceptor_before_it_says_anything() {
        let mut ini = Handshake::initiator(&id("i", "wrong")).unwrap();
        let mut acc = Handshake::acceptor(&id("a", "right"));
        let e = acc.feed(&ini.take_output()).unwrap_err();
        assert!(matches!(e, NetError::Auth { .. }), "{e:?}");
        // Its only answer is a clear AUTH_FAILED status, naming nobody.
        let out = acc.take_output();
        assert_eq!(out, [0, 0, 0, 1, kind::STATUS, 0, status::AUTH_FAILED]);
        let e = ini.feed(&out).unwrap_err();
        assert!(matches!(e, NetError::Auth { .. }), "{e:?}");
    }

    #[test]
    fn a_replayed_first_message_gets_nowhere() {
        let (i, a) = (id("i", "c"), id("a", "c"));
        let mut ini = Handshake::initiator(&i).unwrap();
        let recorded = ini.take_output();
        // The real handshake.
        let mut acc = Handshake::acceptor(&a);
        acc.feed(&recorded).unwrap();
        let Step::Register(_) = ini.feed(&acc.take_output()).unwrap() else {
            panic!()
        };
        ini.confirm(true).unwrap();
        let real_confirm = ini.take_output();
        // A stranger replays the recorded first message on a new
        // connection, and then the real confirmation: refused.
        let mut acc2 = Handshake::acceptor(&a);
        assert_eq!(acc2.feed(&recorded).unwrap(), Step::More);
        let e = acc2.feed(&real_confirm).unwrap_err();
        assert!(matches!(e, NetError::Auth { .. }), "{e:?}");
        // Garbage of the right length, too.
        let mut acc3 = Handshake::acceptor(&a);
        acc3.feed(&recorded).unwrap();
        let mut fake = Vec::new();
        frame::encode(&mut fake, kind::NOISE, 0, &[0u8; 1 + 32 + TAG]);
        assert!(matches!(acc3.feed(&fake), Err(NetError::Auth { .. })));
    }

    #[test]
    fn a_proof_for_the_other_direction_or_connection_fails() {
        let (i, a) = (id("i", "c"), id("a", "c"));
        // Connection 1, to the point where the acceptor waits for the
        // initiator's confirmation.
        let mut ini1 = Handshake::initiator(&i).unwrap();
        let mut acc1 = Handshake::acceptor(&a);
        acc1.feed(&ini1.take_output()).unwrap();
        let msg2 = acc1.take_output();
        let Step::Register(_) = ini1.feed(&msg2).unwrap() else {
            panic!()
        };
        // The acceptor's own verdict message reflected back as the
        // initiator's confirmation (the other direction): refused.
        let mut acc_b = Handshake::acceptor(&a);
        let mut ini_b = Handshake::initiator(&i).unwrap();
        acc_b.feed(&ini_b.take_output()).unwrap();
        let Step::Register(_) = ini_b.feed(&acc_b.take_output()).unwrap() else {
            panic!()
        };
        ini_b.confirm(true).unwrap();
        let Step::Decide(_) = acc_b.feed(&ini_b.take_output()).unwrap() else {
            panic!()
        };
        acc_b.verdict(true).unwrap();
        let reflected = acc_b.take_output();
        // Connection 2's confirmation presented on connection 1.
        let mut ini2 = Handshake::initiator(&i).unwrap();
        let mut acc2 = Handshake::acceptor(&a);
        acc2.feed(&ini2.take_output()).unwrap();
        let Step::Register(_) = ini2.feed(&acc2.take_output()).unwrap() else {
            panic!()
        };
        ini2.confirm(true).unwrap();
        let other_conn = ini2.take_output();
        let mut acc1b = Handshake::acceptor(&a);
        let mut ini1b = Handshake::initiator(&i).unwrap();
        acc1b.feed(&ini1b.take_output()).unwrap();
        for bad in [reflected, other_conn] {
            let mut acc = Handshake::acceptor(&a);
            let mut ini = Handshake::initiator(&i).unwrap();
            acc.feed(&ini.take_output()).unwrap();
            let e = acc.feed(&bad).unwrap_err();
            assert!(matches!(e, NetError::Auth { .. }), "{e:?}");
        }
        // A confirmation sealed with the acceptor's own sending key (a
        // proof for the other direction), transcript and all: refused.
        let mut acc = Handshake::acceptor(&a);
        let mut ini = Handshake::initiator(&i).unwrap();
        acc.feed(&ini.take_output()).unwrap();
        let mut plain = vec![status::OK];
        plain.extend_from_slice(&acc.transcript);
        let forged = acc.keys().seal_message(&plain).unwrap();
        let mut wire = Vec::new();
        frame::encode(&mut wire, kind::NOISE, 0, &forged);
        assert!(matches!(acc.feed(&wire), Err(NetError::Auth { .. })));
        // And the honest pair still works.
        let (d, u) = pair(&i, &a).unwrap();
        assert!(matches!((d, u), (Step::Decide(_), Step::Up(_))));
    }

    #[test]
    fn an_old_version_is_told_both_versions() {
        // A version-1 hello (magic, version 1, then its fields), and a
        // version-2 preface (magic, version 2: BLAKE2s in its Noise name).
        for (old, rest) in [(1u16, 50), (2, 0)] {
            let mut p = b"GRFT".to_vec();
            p.extend_from_slice(&old.to_be_bytes());
            p.extend_from_slice(&vec![0; rest]);
            let mut wire = Vec::new();
            frame::encode(&mut wire, kind::HELLO, 0, &p);
            let mut acc = Handshake::acceptor(&id("a", "c"));
            let e = acc.feed(&wire).unwrap_err();
            assert!(
                e.to_string().contains(&format!("version {old}"))
                    && e.to_string().contains("ours is 3"),
                "{e}"
            );
            let out = acc.take_output();
            assert_eq!(out[4], kind::STATUS);
            assert_eq!(out[6], status::REFUSED);
            let why = String::from_utf8_lossy(&out[7..]);
            assert!(
                why.contains(&format!(
                    "protocol version {old} is not supported (ours is 3)"
                )),
                "{why}"
            );
        }
        // And a version-1 acceptor's refusal of our preface, as the
        // initiator reports it.
        let mut ini = Handshake::initiator(&id("i", "c")).unwrap();
        let mut refusal = Vec::new();
        frame::encode(
            &mut refusal,
            kind::STATUS,
            0,
            b"\x03protocol version 3 is not supported (ours is 1)",
        );
        let e = ini.feed(&refusal).unwrap_err();
        assert!(
            e.to_string()
                .contains("version 3 is not supported (ours is 1)"),
            "{e}"
        );
    }

    #[test]
    fn truncated_garbage_and_bombs_are_refused_or_wait() {
        let a = id("a", "c");
        let mut ini = Handshake::initiator(&id("i", "c")).unwrap();
        let good = ini.take_output();
        // Every truncation only waits for more.
        for n in 0..good.len() {
            let mut acc = Handshake::acceptor(&a);
            assert_eq!(acc.feed(&good[..n]).unwrap(), Step::More, "prefix {n}");
        }
        // A length bomb is refused at once, from its header alone.
        let mut acc = Handshake::acceptor(&a);
        let e = acc
            .feed(&[0xff, 0xff, 0xff, 0xff, kind::HELLO, 0])
            .unwrap_err();
        assert!(e.to_string().contains("maximum"), "{e}");
        // Garbage, flags, wrong kinds, a corrupted first message.
        for bad in [
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            vec![0, 0, 0, 6, kind::HELLO, 1, b'G', b'R', b'F', b'T', 0, 2],
            vec![0, 0, 0, 0, kind::NOISE, 0],
            vec![0, 0, 0, 0, 99, 0],
        ] {
            let mut acc = Handshake::acceptor(&a);
            assert!(acc.feed(&bad).is_err(), "{bad:?}");
            // Once failed, it stays failed.
            assert!(acc.feed(&good).is_err());
        }
        let mut corrupt = good.clone();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        let mut acc = Handshake::acceptor(&a);
        assert!(matches!(acc.feed(&corrupt), Err(NetError::Auth { .. })));
        // Random bytes of every length never panic.
        let mut x = 0x1234_5678_u32;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let mut acc = Handshake::acceptor(&a);
            let _ = acc.feed(&good[..12.min(good.len())]);
            let _ = acc.feed(&bytes);
            let mut ini = Handshake::initiator(&id("i", "c")).unwrap();
            let _ = ini.feed(&bytes);
        }
    }

    #[test]
    fn own_name_is_refused() {
        let a = id("same", "c");
        assert!(matches!(pair(&a, &a), Err(NetError::Handshake(m)) if m.contains("own node name")));
    }
}
