//! Peers as the user of the transport sees them: [`PeerId`], [`PeerInfo`],
//! and the [`Handler`] that hears about them.

use std::fmt;
use std::net::SocketAddr;

use crate::NetError;

/// A local handle for one connection to a peer. Ids are never reused within
/// a [`Transport`](crate::Transport): a peer that reconnects gets a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub(crate) u64);

impl PeerId {
    /// The id as a number (unique within one transport).
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What the handshake told us about a connected peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Local handle of this connection.
    pub id: PeerId,
    /// The peer's node name (unique in a mesh).
    pub name: String,
    /// The address the peer announced as its listening address.
    pub listen_addr: SocketAddr,
    /// The peer's incarnation number.
    pub creation: u32,
    /// The peer's build fingerprint.
    pub fingerprint: u64,
}

/// Receives what happens on the transport. Called on the transport's threads,
/// so keep the callbacks short (hand work over to a queue).
///
/// For one peer (one [`PeerId`]), the calls come in this order: `peer_up`
/// once, then `frame` for each frame in the order the peer sent them, then
/// `peer_down` once (also at shutdown). No call for a peer overlaps another
/// call for the same peer.
///
/// * `peer_up` runs on the thread that completed the handshake: the caller
///   of [`connect`](crate::Transport::connect) (before `connect` returns), or
///   the peer's reader thread for an inbound connection. No frame of that
///   peer is delivered before it returns.
/// * `frame` and `peer_down` run on the peer's reader thread (in a race
///   between `connect` and shutdown, `peer_down` may run on the connecting
///   thread instead).
/// * Different peers are served by different threads, concurrently; a slow
///   callback delays only its own peer (whose socket then fills up and
///   slows the sender down, as TCP does).
///
/// A callback may call any [`Transport`](crate::Transport) method, also for
/// the same peer (e.g. `send` a reply from `frame`).
pub trait Handler: Send + Sync + 'static {
    /// A peer completed the handshake and can be sent to.
    fn peer_up(&self, peer: &PeerInfo);
    /// A frame of a user kind (`>= FIRST_USER_KIND`) arrived, decompressed.
    fn frame(&self, peer: &PeerInfo, kind: u8, payload: Vec<u8>);
    /// The frames of one read of this peer's socket have all been given to
    /// [`frame`](Handler::frame), on the same thread, before it reads again
    /// or serves another peer: a handler that holds frames back to act on
    /// several at once (one lock for a batch) acts on them now. Also called
    /// when a read ends in an error, before `peer_down`.
    fn frames_end(&self) {}
    /// The connection is gone: no more frames from it, sends to it fail.
    fn peer_down(&self, peer: &PeerInfo, reason: &NetError);
}
