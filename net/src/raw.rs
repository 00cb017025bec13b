//! [`RawClient`]: the protocol without the machinery, for tools and tests.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::conn::READ_BUF;
use crate::cookie::resolve_cookie;
use crate::frame::{self, Decoder};
use crate::handshake::{self, Identity, LaneReq, LaneSecret, Outcome};
use crate::session::{SealedReader, Sealer};
use crate::{NetConfig, NetError, PeerId, PeerInfo};

/// A blocking client connection that speaks the graft-net wire protocol
/// itself, on the caller's thread: no reader, no writer, no heartbeats. For
/// diagnostics and fault injection (it can send any frame, even a reserved
/// or malformed one); nodes use [`Transport`](crate::Transport).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use graft_net::{Handler, NetConfig, NetError, PeerInfo, RawClient, Transport};
///
/// struct Quiet;
/// impl Handler for Quiet {
///     fn peer_up(&self, _: &PeerInfo) {}
///     fn frame(&self, _: &PeerInfo, _: u8, _: Vec<u8>) {}
///     fn peer_down(&self, _: &PeerInfo, _: &NetError) {}
/// }
///
/// let any = "127.0.0.1:0".parse().unwrap();
/// let node = Transport::start(NetConfig::new("node", any).cookie("c"), Arc::new(Quiet)).unwrap();
/// let (mut raw, peer) = RawClient::connect(node.local_addr(), &NetConfig::new("probe", any).cookie("c")).unwrap();
/// assert_eq!(peer.name, "node");
/// raw.send_frame(16, b"hi").unwrap();
/// node.shutdown();
/// ```
///
/// After the handshake everything it sends is sealed with the session's
/// keys, as a node's writer does ([`send_unsealed`](RawClient::send_unsealed)
/// bypasses that), and everything it receives is opened.
#[derive(Debug)]
pub struct RawClient {
    stream: TcpStream,
    reader: SealedReader<TcpStream>,
    sealer: Sealer,
    dec: Decoder,
    /// The lanes agreed with the acceptor, and this handshake's lane
    /// material (see [`open_lane`](RawClient::open_lane)).
    lanes: u8,
    secret: LaneSecret,
}

/// What an extra lane opened by [`RawClient::open_lane`] claims: the
/// truth, or a lie to test the acceptor with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaneClaim {
    /// The right session, lane count and token.
    Genuine,
    /// This token instead of the right one (a forgery, or a token another
    /// lane sent: a replay).
    Token([u8; 32]),
    /// This session id instead of ours (a session the acceptor does not
    /// know).
    Session([u8; 8]),
}

impl RawClient {
    /// Connects to `addr` and runs the handshake as the node described by
    /// `cfg` (name, announced address, creation, fingerprint, cookie). The
    /// returned [`PeerInfo`] describes the other side; its id is 0.
    ///
    /// # Errors
    ///
    /// As [`Transport::connect`](crate::Transport::connect); a duplicate
    /// connection is [`NetError::Duplicate`].
    pub fn connect(addr: SocketAddr, cfg: &NetConfig) -> Result<(RawClient, PeerInfo), NetError> {
        let cookie = resolve_cookie(cfg.cookie.as_deref())?;
        let mut stream = TcpStream::connect_timeout(&addr, cfg.connect_timeout)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(cfg.connect_timeout))?;
        let me = Identity::new(cfg, cfg.listen, &cookie);
        let deadline = Instant::now() + cfg.connect_timeout;
        match handshake::initiate(&mut stream, &me, deadline, |_| Ok(true))? {
            (Outcome::Up(h), session, rest) => {
                let (sealer, opener) = session.split();
                let reader = SealedReader::new(stream.try_clone()?, opener, &rest);
                let dec = Decoder::new(READ_BUF, cfg.wire_frame_max());
                let raw = RawClient {
                    stream,
                    reader,
                    sealer,
                    dec,
                    lanes: me.lanes.min(h.lanes),
                    secret: h.secret.clone(),
                };
                Ok((raw, h.peer_info(PeerId(0))))
            }
            (Outcome::Duplicate(_), _, _) => Err(NetError::Duplicate),
        }
    }

    /// The lanes agreed with the acceptor when this client connected with
    /// [`NetConfig::lanes`] over 1 (else 1).
    pub fn lanes(&self) -> usize {
        self.lanes.into()
    }

    /// Opens extra lane `index` of this client's session to `addr` (the
    /// node this client is connected to), as a node's
    /// [`Transport`](crate::Transport) does after its first connection,
    /// claiming what `claim` says. Returns the lane's own client.
    ///
    /// # Errors
    ///
    /// As [`connect`](RawClient::connect); a lane the acceptor refuses
    /// (unknown session, bad token, index out of range or taken) is a
    /// [`NetError::Handshake`] naming why.
    pub fn open_lane(
        &self,
        addr: SocketAddr,
        cfg: &NetConfig,
        index: usize,
        claim: LaneClaim,
    ) -> Result<RawClient, NetError> {
        let cookie = resolve_cookie(cfg.cookie.as_deref())?;
        let mut stream = TcpStream::connect_timeout(&addr, cfg.connect_timeout)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(cfg.connect_timeout))?;
        let mut me = Identity::new(cfg, cfg.listen, &cookie);
        let index = u8::try_from(index)
            .map_err(|_| NetError::Handshake(format!("lane index {index} over 255")))?;
        me.lane = Some(LaneReq {
            index,
            lanes: self.lanes,
            session: match claim {
                LaneClaim::Session(s) => s,
                _ => self.secret.session(),
            },
            key: self.secret.key,
            forged: match claim {
                LaneClaim::Token(t) => Some(t),
                _ => None,
            },
        });
        let deadline = Instant::now() + cfg.connect_timeout;
        match handshake::initiate(&mut stream, &me, deadline, |_| Ok(true))? {
            (Outcome::Up(h), session, rest) => {
                let (sealer, opener) = session.split();
                let reader = SealedReader::new(stream.try_clone()?, opener, &rest);
                Ok(RawClient {
                    stream,
                    reader,
                    sealer,
                    dec: Decoder::new(READ_BUF, cfg.wire_frame_max()),
                    lanes: self.lanes,
                    secret: h.secret,
                })
            }
            (Outcome::Duplicate(_), _, _) => Err(NetError::Duplicate),
        }
    }

    /// The token this client sent, when it is an extra lane (for a test
    /// that replays it on another).
    pub fn lane_token(&self) -> [u8; 32] {
        self.secret.token
    }

    /// Sends one uncompressed frame of any kind, reserved ones included.
    ///
    /// # Errors
    ///
    /// The write fails.
    pub fn send_frame(&mut self, kind: u8, payload: &[u8]) -> io::Result<()> {
        let mut buf = Vec::new();
        frame::encode(&mut buf, kind, 0, payload);
        self.send_raw(&buf)
    }

    /// Writes raw bytes inside the session, framed or not (sealed into
    /// records as the node's writer would).
    ///
    /// # Errors
    ///
    /// The write fails.
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut wire = Vec::new();
        self.sealer.seal(bytes, &mut wire)?;
        self.stream.write_all(&wire)
    }

    /// Writes bytes straight to the socket, outside the session's
    /// sealing: for tests of forged or injected records.
    ///
    /// # Errors
    ///
    /// The write fails.
    pub fn send_unsealed(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Waits up to `timeout` for the next frame (heartbeats included, payload
    /// as sent: still compressed if flagged so) and returns its kind, flags
    /// and payload; `Ok(None)` on timeout.
    ///
    /// # Errors
    ///
    /// [`NetError::Closed`] when the other side closed the connection, a
    /// protocol error for a malformed frame, or an I/O error.
    pub fn recv_frame(&mut self, timeout: Duration) -> Result<Option<(u8, u8, Vec<u8>)>, NetError> {
        // A timeout too long for the clock is a day: as good as forever.
        let deadline = Instant::now() + timeout.min(Duration::from_secs(86_400));
        self.dec.recv_until(&mut self.reader, deadline)
    }

    /// The underlying socket.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}
