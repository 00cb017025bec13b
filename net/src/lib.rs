//! graft-net: bytes and peers. Knows nothing of processes.
//!
//! A [`Transport`] listens on a TCP address, connects to other nodes, and
//! runs a handshake with each: a Noise `NNpsk0` handshake keyed by the
//! cookie (which never crosses the wire), in which the connecting side
//! proves itself first and confirms the session key before the accepting
//! side takes it for a peer, bound to the protocol version, both node
//! names, announced addresses, creations and build fingerprints. After that
//! it moves *frames* (a kind byte and a payload) both ways, every byte of
//! them authenticated with the session's keys (or encrypted, with
//! [`NetConfig::encrypt`]), and tells a [`Handler`] about peers coming up,
//! frames arriving, and peers going down. See `docs/security.md` for the
//! threat model.
//!
//! ```
//! use std::sync::Arc;
//! use graft_net::{Handler, NetConfig, NetError, PeerInfo, Transport, FIRST_USER_KIND};
//!
//! struct Print;
//! impl Handler for Print {
//!     fn peer_up(&self, p: &PeerInfo) { log::info!("{} up", p.name) }
//!     fn frame(&self, p: &PeerInfo, kind: u8, payload: Vec<u8>) {
//!         log::info!("{}: kind {kind}, {} bytes", p.name, payload.len())
//!     }
//!     fn peer_down(&self, p: &PeerInfo, why: &NetError) { log::info!("{} down: {why}", p.name) }
//! }
//!
//! let any = "127.0.0.1:0".parse().unwrap();
//! let a = Transport::start(NetConfig::new("a", any).cookie("secret"), Arc::new(Print)).unwrap();
//! let b = Transport::start(NetConfig::new("b", any).cookie("secret"), Arc::new(Print)).unwrap();
//! let peer = a.connect(b.local_addr()).unwrap();
//! a.send(peer.id, FIRST_USER_KIND, b"hello").unwrap();
//! a.shutdown();
//! b.shutdown();
//! ```
//!
//! Key points:
//!
//! * **Frames**: `length u32 | kind u8 | flags u8 | payload`. Kinds
//!   `0..FIRST_USER_KIND` (0 to 15) belong to the transport; the user has
//!   16 to 255. A frame over the configured maximum, a malformed one, an
//!   unknown transport kind or garbage drops that one connection (logged,
//!   naming the peer), never the node. Payloads over a threshold are
//!   deflate-compressed, and inflating is bounded by the maximum too.
//! * **Strangers**: a connection that has not authenticated holds no
//!   thread: the accept thread drives every pending handshake on a poller,
//!   at most [`NetConfig::max_pending_handshakes`] at once (more are closed
//!   at once), each within [`NetConfig::handshake_timeout`];
//!   [`Transport::handshake_stats`] counts them.
//! * **I/O**: with [`IoMode::Poller`] (the default) every socket is on a
//!   few I/O threads' epoll pollers, no thread per peer; with
//!   [`IoMode::Threads`], one accept thread, and one reader and one writer
//!   thread per peer. [`Transport::send`] (or the lookup-free [`PeerSender`]) only
//!   appends to the peer's buffer; the writer sends everything queued in one
//!   `write`, so small frames are coalesced. A frame that finds the writer
//!   parked after a pause is written by the sender itself without blocking
//!   (`MSG_DONTWAIT`), which saves a thread wake-up per message in
//!   request/response traffic. [`PeerSender::send_held`] leaves the frame
//!   for the caller's [`PeerSender::flush`] instead (a scheduler flushes
//!   what a green thread sent once it stops, so its frames leave in one
//!   write). `TCP_NODELAY` is on. The outbox is unbounded;
//!   [`PeerSender::queued_bytes`] lets a sender watch it.
//! * **Sending**: `Ok` means queued, not delivered. When a connection
//!   breaks, frames still queued are lost, `send` starts failing with
//!   [`NetError::NotConnected`], and [`Handler::peer_down`] is called once.
//! * **Heartbeats**: an idle writer sends a heartbeat every tick; a peer
//!   silent for `heartbeat × heartbeat_misses` is declared dead
//!   ([`NetError::HeartbeatTimeout`]). A peer that stops reading while we
//!   have data for it is dropped after as long (the socket's write timeout).
//! * **Callbacks**: per peer, `peer_up` once, then frames in order, then
//!   `peer_down` once (see [`Handler`] for which thread runs which).
//! * **Duplicates**: one connection per node name. When two nodes connect to
//!   each other at once, the connection initiated by the smaller name is
//!   kept and both `connect` calls return it. A node that comes back with a
//!   new creation replaces its old connection ([`NetError::Replaced`]).
//! * **Lanes**: with [`NetConfig::lanes`]`(n)`, `n` connections per peer
//!   (Partisan's parallel channels), each its own handshake bound to the
//!   first's session; a frame of order key `k` goes on lane `k % n`, all
//!   lanes come up before the peer does, and any lane lost takes the peer
//!   down once.
//! * **Cookie**: [`resolve_cookie`]: configured, else `GRAFT_COOKIE`, else
//!   `$HOME/.graft.cookie` (created with mode 0600).
//! * **Diagnostics**: [`RawClient`] speaks the protocol on the caller's
//!   thread and can send anything, for tools and fault-injection tests.
#![deny(unsafe_code)]

mod config;
mod conn;
mod cookie;
mod error;
mod frag;
mod frame;
mod handshake;
mod io;
mod noise_crypto;
mod outbound;
mod peer;
mod pending;
mod poll;
mod raw;
mod session;
mod sockopt;
mod tls;
mod transport;

pub use config::{IoMode, NetConfig};
pub use cookie::{read_or_create_cookie_file, resolve_cookie, COOKIE_ENV, COOKIE_FILE};
pub use error::NetError;
pub use frame::FIRST_USER_KIND;
pub use peer::{Handler, PeerId, PeerInfo};
pub use pending::HandshakeStats;
pub use raw::{LaneClaim, RawClient};
pub use tls::TlsConfig;
pub use transport::{PeerSender, Transport};
