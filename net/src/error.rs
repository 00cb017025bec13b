//! The one error type of the transport.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::PeerId;

/// Why a connection could not be made, a frame could not be sent, or a peer
/// went down (the `reason` of [`Handler::peer_down`](crate::Handler::peer_down)).
///
/// `Clone` so that one reason can be handed to several parties; an
/// [`io::Error`] is kept behind an [`Arc`] for that.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NetError {
    /// A socket operation failed.
    Io(Arc<io::Error>),
    /// Connecting or the handshake took longer than the configured
    /// [`connect_timeout`](crate::NetConfig::connect_timeout), or a peer
    /// being connected by another path did not come up in that time.
    Timeout,
    /// The cookie challenge failed: one side does not know the other's cookie.
    Auth {
        /// The peer, as `name@address` (or just the address when the name is
        /// not known yet).
        peer: String,
        /// Which side refused.
        detail: &'static str,
    },
    /// The handshake broke the protocol: garbage instead of a hello, another
    /// protocol version, our own node name, a refusal by the peer.
    Handshake(String),
    /// An established connection broke the frame protocol: a frame over the
    /// maximum size, unknown flags, an unknown transport kind, a corrupt
    /// compressed payload.
    Protocol(String),
    /// The [`Handler`](crate::Handler) panicked on a frame from this peer
    /// (the message). The connection is closed, so that the peer's loss is
    /// reported rather than its frames silently no longer read.
    HandlerPanicked(String),
    /// [`send`](crate::Transport::send) was given a payload over the maximum
    /// frame size.
    FrameTooLarge {
        /// The payload's size in bytes (after compression, where it was compressed).
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// [`send`](crate::Transport::send) was given a message over the
    /// configured [`max_message_size`](crate::NetConfig::max_message_size):
    /// nothing was sent.
    MessageTooLarge {
        /// The message's size in bytes.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// [`send`](crate::Transport::send) was given a kind below
    /// [`FIRST_USER_KIND`](crate::FIRST_USER_KIND), which the transport keeps
    /// for itself.
    ReservedKind(u8),
    /// Nothing arrived from the peer (not even a heartbeat) for this long.
    HeartbeatTimeout(Duration),
    /// The peer closed the connection.
    Closed,
    /// The connection was closed locally by [`disconnect`](crate::Transport::disconnect).
    Disconnected,
    /// A newer incarnation of the same node (same name, another creation)
    /// connected, and replaced this connection.
    Replaced,
    /// The transport was shut down.
    Shutdown,
    /// Another connection between the same two nodes was kept and this one
    /// dropped (seen by [`RawClient`](crate::RawClient) and in logs).
    Duplicate,
    /// No connected peer has this id (it never existed, or it went down).
    NotConnected(PeerId),
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::Io(e) => write!(f, "i/o error: {e}"),
            NetError::Timeout => f.write_str("timed out"),
            NetError::Auth { peer, detail } => {
                write!(f, "authentication with {peer} failed: {detail}")
            }
            NetError::Handshake(m) => write!(f, "handshake failed: {m}"),
            NetError::Protocol(m) => write!(f, "protocol error: {m}"),
            NetError::HandlerPanicked(m) => write!(f, "the frame handler panicked: {m}"),
            NetError::FrameTooLarge { size, max } => {
                write!(
                    f,
                    "frame of {size} bytes exceeds the maximum of {max} bytes"
                )
            }
            NetError::MessageTooLarge { size, max } => write!(
                f,
                "message of {size} bytes exceeds the maximum message size of {max} bytes"
            ),
            NetError::ReservedKind(k) => write!(
                f,
                "frame kind {k} is reserved for the transport (use {} and above)",
                crate::FIRST_USER_KIND
            ),
            NetError::HeartbeatTimeout(d) => {
                write!(f, "no heartbeat from the peer for {} ms", d.as_millis())
            }
            NetError::Closed => f.write_str("connection closed by the peer"),
            NetError::Disconnected => f.write_str("disconnected locally"),
            NetError::Replaced => f.write_str("replaced by a newer incarnation of the node"),
            NetError::Shutdown => f.write_str("transport shut down"),
            NetError::Duplicate => {
                f.write_str("dropped in favour of another connection between the same nodes")
            }
            NetError::NotConnected(p) => write!(f, "peer {p} is not connected"),
        }
    }
}

impl std::error::Error for NetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NetError::Io(e) => Some(&**e),
            _ => None,
        }
    }
}

impl From<io::Error> for NetError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::TimedOut => NetError::Timeout,
            _ => NetError::Io(Arc::new(e)),
        }
    }
}
