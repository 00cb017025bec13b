//! [`NetConfig`]: everything a [`Transport`](crate::Transport) is started with.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// Configuration of a [`Transport`](crate::Transport), built in builder style.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use graft_net::NetConfig;
///
/// let cfg = NetConfig::new("alpha", "127.0.0.1:0".parse().unwrap())
///     .cookie("secret")
///     .heartbeat(Duration::from_millis(500))
///     .max_frame(16 << 20);
/// assert_eq!(cfg.name(), "alpha");
/// ```
#[derive(Clone)]
pub struct NetConfig {
    pub(crate) listen: SocketAddr,
    pub(crate) advertise: Option<SocketAddr>,
    pub(crate) name: String,
    pub(crate) creation: u32,
    pub(crate) fingerprint: u64,
    pub(crate) cookie: Option<String>,
    pub(crate) max_frame: usize,
    pub(crate) max_message: usize,
    pub(crate) busy_limit: usize,
    pub(crate) unsent_limit: usize,
    pub(crate) heartbeat: Duration,
    pub(crate) heartbeat_misses: u32,
    pub(crate) compress_threshold: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_pending_handshakes: usize,
    pub(crate) max_pending_per_address: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) encrypt: bool,
    pub(crate) tls: Option<crate::TlsConfig>,
    pub(crate) io: IoMode,
    pub(crate) io_threads: usize,
    pub(crate) lanes: usize,
}

/// How a [`Transport`](crate::Transport) drives its established
/// connections (see [`NetConfig::io`]).
///
/// # Examples
///
/// ```
/// use graft_net::{IoMode, NetConfig};
///
/// let cfg = NetConfig::new("a", "127.0.0.1:0".parse().unwrap()).io(IoMode::Poller);
/// assert_eq!(cfg.io_mode(), IoMode::Poller);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoMode {
    /// A reader and a writer OS thread per peer.
    Threads,
    /// Every socket on a poller driven by [`io_threads`](NetConfig::io_threads)
    /// I/O threads: no thread per connection (the default).
    Poller,
}

impl IoMode {
    /// The default when the environment does not say: [`IoMode::Poller`].
    pub const DEFAULT: IoMode = IoMode::Poller;

    /// The mode the environment variable `GRAFT_NET_IO` names (`poller` or
    /// `threads`, so that a whole test suite can run on either), else
    /// [`IoMode::DEFAULT`].
    ///
    /// # Examples
    ///
    /// ```
    /// use graft_net::IoMode;
    ///
    /// let mode = IoMode::from_env();
    /// assert!(mode == IoMode::Poller || mode == IoMode::Threads);
    /// ```
    pub fn from_env() -> IoMode {
        match std::env::var("GRAFT_NET_IO").as_deref() {
            Ok("poller") => IoMode::Poller,
            Ok("threads") => IoMode::Threads,
            Ok(other) => {
                log::warn!("graft-net: GRAFT_NET_IO={other:?} is neither poller nor threads");
                IoMode::DEFAULT
            }
            Err(_) => IoMode::DEFAULT,
        }
    }
}

impl NetConfig {
    /// Default maximum frame size: 64 MiB.
    pub const DEFAULT_MAX_FRAME: usize = 64 << 20;
    /// Default maximum message size: 1 GiB.
    pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 1 << 30;
    /// Default busy limit of a peer's outbound queue: 1 MiB (Erlang's
    /// `dist_buf_busy_limit`).
    pub const DEFAULT_BUSY_LIMIT: usize = 1 << 20;
    /// Default cap on a connection's unsent bytes in the kernel: 64 KiB
    /// (see [`NetConfig::unsent_limit`]).
    pub const DEFAULT_UNSENT_LIMIT: usize = 64 << 10;
    /// Default heartbeat tick: 1 s.
    pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
    /// Default number of silent ticks after which a peer is declared dead: 3.
    pub const DEFAULT_HEARTBEAT_MISSES: u32 = 3;
    /// Default compression threshold: payloads over 64 KiB are compressed.
    pub const DEFAULT_COMPRESS_THRESHOLD: usize = 64 << 10;
    /// Default connect (and outbound handshake) timeout: 5 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// Default limit of inbound handshakes in progress at once: 64.
    pub const DEFAULT_MAX_PENDING_HANDSHAKES: usize = 64;
    /// Default limit of inbound handshakes in progress at once from one
    /// address (an IPv6 /64): 8.
    pub const DEFAULT_MAX_PENDING_PER_ADDRESS: usize = 8;
    /// Default time an inbound connection has to complete its handshake: 5 s.
    pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
    /// Default number of I/O threads of [`IoMode::Poller`]: 1.
    pub const DEFAULT_IO_THREADS: usize = 1;

    /// A configuration for node `name` listening on `listen` (port 0 picks
    /// a free port), with every other setting at its default: a random
    /// creation, fingerprint 0, the cookie from [`resolve_cookie`](crate::resolve_cookie).
    pub fn new(name: impl Into<String>, listen: SocketAddr) -> NetConfig {
        let r = crate::cookie::random_bytes();
        NetConfig {
            listen,
            advertise: None,
            name: name.into(),
            creation: u32::from_le_bytes([r[0], r[1], r[2], r[3]]).max(1),
            fingerprint: 0,
            cookie: None,
            max_frame: Self::DEFAULT_MAX_FRAME,
            max_message: Self::DEFAULT_MAX_MESSAGE_SIZE,
            busy_limit: Self::DEFAULT_BUSY_LIMIT,
            unsent_limit: Self::DEFAULT_UNSENT_LIMIT,
            heartbeat: Self::DEFAULT_HEARTBEAT,
            heartbeat_misses: Self::DEFAULT_HEARTBEAT_MISSES,
            compress_threshold: Self::DEFAULT_COMPRESS_THRESHOLD,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            max_pending_handshakes: Self::DEFAULT_MAX_PENDING_HANDSHAKES,
            max_pending_per_address: Self::DEFAULT_MAX_PENDING_PER_ADDRESS,
            handshake_timeout: Self::DEFAULT_HANDSHAKE_TIMEOUT,
            encrypt: true,
            tls: None,
            io: IoMode::from_env(),
            io_threads: Self::DEFAULT_IO_THREADS,
            lanes: 1,
        }
    }

    /// How established connections are driven: a thread pair per peer, or
    /// the poller (default: [`IoMode::from_env`]).
    pub fn io(mut self, mode: IoMode) -> Self {
        self.io = mode;
        self
    }

    /// The number of I/O threads of [`IoMode::Poller`] (1 to 64; default
    /// 1). The first also accepts and drives inbound handshakes; peers are
    /// spread over them round-robin.
    pub fn io_threads(mut self, n: usize) -> Self {
        self.io_threads = n;
        self
    }

    /// Connections per peer (1 to 64; default 1): with `n > 1`, a node
    /// that connects opens `n - 1` extra connections ("lanes", Partisan's
    /// parallel channels) to the same peer after the first, each with its
    /// own full handshake bound to the first one's session, and a frame of
    /// order key `k` travels on lane `k % n` (key 0, heartbeats and the
    /// transport's own frames on the first), so one sender's frames keep
    /// their order while different senders' bulk traffic does not share
    /// one TCP stream. The number used is the smaller of the two nodes'
    /// settings (the accepting node's decides whether it takes extra lanes
    /// at all): a node with 1 and one with 4 talk over one connection.
    /// Any lane lost takes the whole peer down. Needs [`IoMode::Poller`]:
    /// [`Transport::start`](crate::Transport::start) refuses `n > 1` with
    /// [`IoMode::Threads`].
    ///
    /// ```
    /// let cfg = graft_net::NetConfig::new("n", "127.0.0.1:0".parse().unwrap()).lanes(4);
    /// assert_eq!(cfg.lane_count(), 4);
    /// ```
    pub fn lanes(mut self, n: usize) -> Self {
        self.lanes = n;
        self
    }

    /// The configured number of [`lanes`](NetConfig::lanes).
    pub fn lane_count(&self) -> usize {
        self.lanes
    }

    /// The configured [`IoMode`].
    pub fn io_mode(&self) -> IoMode {
        self.io
    }

    /// The address announced to peers as ours (default: the bound address).
    /// Set it when listening on `0.0.0.0` or behind a port mapping.
    pub fn advertise(mut self, addr: SocketAddr) -> Self {
        self.advertise = Some(addr);
        self
    }

    /// The incarnation number of this node; a restarted node should use a
    /// new one, so that peers can tell its pids from the old ones'.
    pub fn creation(mut self, creation: u32) -> Self {
        self.creation = creation;
        self
    }

    /// A fingerprint of the build, passed to peers in [`PeerInfo`](crate::PeerInfo)
    /// (the transport does not compare it).
    pub fn fingerprint(mut self, fingerprint: u64) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// The cookie; without one, [`resolve_cookie`](crate::resolve_cookie)
    /// finds it at start.
    pub fn cookie(mut self, cookie: impl Into<String>) -> Self {
        self.cookie = Some(cookie.into());
        self
    }

    /// The largest payload accepted, before and after decompression.
    pub fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = bytes;
        self
    }

    /// The heartbeat tick: an idle writer sends a heartbeat after this long
    /// without writing, and the peer is declared dead after
    /// [`heartbeat_misses`](NetConfig::heartbeat_misses) ticks with nothing
    /// received.
    pub fn heartbeat(mut self, tick: Duration) -> Self {
        self.heartbeat = tick;
        self
    }

    /// Silent ticks before a peer is declared dead (at least 1). A peer
    /// that announced a longer tick than ours is allowed that many of its
    /// own ticks.
    pub fn heartbeat_misses(mut self, misses: u32) -> Self {
        self.heartbeat_misses = misses;
        self
    }

    /// The largest message sent or accepted (default 1 GiB). Messages over
    /// 64 KiB travel in fragments, interleaved with other traffic; a send
    /// over this size fails with [`NetError::MessageTooLarge`](crate::NetError::MessageTooLarge),
    /// and a peer announcing more (all its messages in progress together)
    /// is dropped. Both nodes should use the same value.
    ///
    /// ```
    /// let cfg = graft_net::NetConfig::new("a", "127.0.0.1:0".parse().unwrap())
    ///     .max_message_size(16 << 20);
    /// # let _ = cfg;
    /// ```
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    /// Bytes queued for one peer past which its connection is busy
    /// (default 1 MiB, Erlang's `dist_buf_busy_limit`): see
    /// [`PeerSender::is_busy`](crate::PeerSender::is_busy).
    ///
    /// ```
    /// let cfg = graft_net::NetConfig::new("a", "127.0.0.1:0".parse().unwrap())
    ///     .busy_limit(4 << 20);
    /// # let _ = cfg;
    /// ```
    pub fn busy_limit(mut self, bytes: usize) -> Self {
        self.busy_limit = bytes;
        self
    }

    /// Bytes written to a peer's socket and not yet sent that the kernel
    /// may hold (`TCP_NOTSENT_LOWAT`, Linux; default 64 KiB; `0` leaves the
    /// system's setting). What is past it waits in the connection's outbox,
    /// counted by the [`busy_limit`](NetConfig::busy_limit), instead of in
    /// a kernel queue that autotuning grows to megabytes on a fast link:
    /// there, a ping written behind a bulk stream waited for all of it
    /// (p99 round trip under bulk on loopback 21-66 ms; with 64 KiB
    /// 0.1-10 ms, the bulk rate unchanged). Data in flight is not capped,
    /// so unlike a small `SO_SNDBUF` this does not bound a long link's
    /// throughput.
    ///
    /// ```
    /// let cfg = graft_net::NetConfig::new("a", "127.0.0.1:0".parse().unwrap())
    ///     .unsent_limit(256 << 10);
    /// # let _ = cfg;
    /// ```
    pub fn unsent_limit(mut self, bytes: usize) -> Self {
        self.unsent_limit = bytes;
        self
    }

    /// Payloads longer than this are compressed (when that makes them
    /// smaller); `usize::MAX` turns compression off.
    pub fn compress_threshold(mut self, bytes: usize) -> Self {
        self.compress_threshold = bytes;
        self
    }

    /// How long [`connect`](crate::Transport::connect) may take, TCP connect
    /// and handshake together.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// At most this many inbound connections may be in their handshake at
    /// once (at least 1); a socket accepted beyond the limit is closed at
    /// once and counted in [`HandshakeStats::refused_over_limit`](crate::HandshakeStats).
    /// Pending handshakes hold no thread: the listener thread drives them
    /// all on a poller. The same bound holds for outbound handshakes of
    /// [`Transport::connect_then`](crate::Transport::connect_then): those
    /// past it wait their turn (their `connect_timeout` running).
    ///
    /// ```
    /// let cfg = graft_net::NetConfig::new("n", "127.0.0.1:0".parse().unwrap())
    ///     .max_pending_handshakes(16);
    /// # let _ = cfg;
    /// ```
    pub fn max_pending_handshakes(mut self, n: usize) -> Self {
        self.max_pending_handshakes = n;
        self
    }

    /// At most this many of the inbound handshakes in progress may come
    /// from one source address (at least 1; IPv6 addresses count per /64
    /// prefix, the block one host usually holds), so that one stranger
    /// cannot take every [`max_pending_handshakes`](NetConfig::max_pending_handshakes)
    /// slot and keep real peers out. A socket accepted beyond it is closed
    /// at once and counted in
    /// [`HandshakeStats::refused_per_address`](crate::HandshakeStats).
    ///
    /// ```
    /// let cfg = graft_net::NetConfig::new("n", "127.0.0.1:0".parse().unwrap())
    ///     .max_pending_per_address(4);
    /// # let _ = cfg;
    /// ```
    pub fn max_pending_per_address(mut self, n: usize) -> Self {
        self.max_pending_per_address = n;
        self
    }

    /// How long an inbound connection has, from its accept, to complete
    /// the handshake; then it is closed and counted in
    /// [`HandshakeStats::timed_out`](crate::HandshakeStats).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Whether to encrypt every frame after the handshake (AES-256-GCM with
    /// the session's keys). On by default: on `dist_throughput` it costs
    /// less than the MAC-only mode (see `docs/decisions.md`). With
    /// `encrypt(false)` on both sides, frames are only authenticated (a
    /// BLAKE3 MAC keyed per connection and direction, over a running
    /// counter): nothing can be forged, replayed, reordered or moved to
    /// another connection, but they travel readable (for a packet capture
    /// while debugging). A connection is encrypted when either side asks
    /// for it. See `docs/security.md`.
    ///
    /// ```
    /// let cfg = graft_net::NetConfig::new("n", "127.0.0.1:0".parse().unwrap()).encrypt(false);
    /// # let _ = cfg;
    /// ```
    pub fn encrypt(mut self, on: bool) -> Self {
        self.encrypt = on;
        self
    }

    /// Runs every connection over TLS 1.3 (mutual authentication with
    /// certificates of the cluster's CA, see [`TlsConfig`](crate::TlsConfig)),
    /// the cookie handshake inside it. Without it (the default), plain TCP.
    /// A TLS node and a plain one refuse each other.
    ///
    /// ```no_run
    /// # fn main() -> std::io::Result<()> {
    /// // DER files made by the cluster's CA (see `docs/security.md`).
    /// let chain = vec![std::fs::read("node.crt.der")?];
    /// let key = std::fs::read("node.key.pk8.der")?;
    /// let ca = vec![std::fs::read("ca.crt.der")?];
    /// let tls = graft_net::TlsConfig::new(chain, key, ca)?;
    /// let cfg = graft_net::NetConfig::new("n", "127.0.0.1:0".parse().unwrap()).tls(tls);
    /// # let _ = cfg;
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls(mut self, tls: crate::TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The node name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address to listen on.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// The time after which a silent peer is declared dead.
    pub fn dead_after(&self) -> Duration {
        self.heartbeat.saturating_mul(self.heartbeat_misses)
    }

    pub(crate) fn heartbeat_ms(&self) -> u32 {
        self.heartbeat.as_millis().clamp(1, u32::MAX as u128) as u32
    }

    /// The largest wire frame a reader accepts: the configured maximum, but
    /// never less than a fragment.
    pub(crate) fn wire_frame_max(&self) -> usize {
        self.max_frame
            .max(crate::frag::FRAGMENT + crate::frag::BEGIN_HEADER)
    }

    pub(crate) fn validate(&self) -> std::io::Result<()> {
        let bad = |m: &str| {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                m.to_owned(),
            ))
        };
        if self.name.is_empty() || self.name.len() > 255 {
            return bad("node name must be 1 to 255 bytes");
        }
        if self.max_frame == 0 || self.max_frame > u32::MAX as usize {
            return bad("max_frame must be between 1 and u32::MAX");
        }
        if self.max_message == 0 || self.max_message > isize::MAX as usize {
            return bad("max_message_size must be between 1 and isize::MAX");
        }
        // Bounded so that every deadline made from them is a real instant
        // (and half a tick, a socket read timeout, is not zero).
        const DAY: Duration = Duration::from_secs(86_400);
        if self.heartbeat < Duration::from_millis(2) || self.heartbeat > DAY {
            return bad("heartbeat tick must be between 2 ms and a day");
        }
        if self.heartbeat_misses == 0 || self.heartbeat_misses > 1000 {
            return bad("heartbeat misses must be between 1 and 1000");
        }
        if self.connect_timeout.is_zero() || self.connect_timeout > DAY {
            return bad("connect_timeout must be non-zero and at most a day");
        }
        if self.handshake_timeout.is_zero() || self.handshake_timeout > DAY {
            return bad("handshake_timeout must be non-zero and at most a day");
        }
        if self.max_pending_handshakes == 0 || self.max_pending_handshakes > 1 << 20 {
            return bad("max_pending_handshakes must be between 1 and 2^20");
        }
        if self.max_pending_per_address == 0 || self.max_pending_per_address > 1 << 20 {
            return bad("max_pending_per_address must be between 1 and 2^20");
        }
        if self.io_threads == 0 || self.io_threads > 64 {
            return bad("io_threads must be between 1 and 64");
        }
        if self.lanes == 0 || self.lanes > crate::handshake::MAX_LANES {
            return bad("lanes must be between 1 and 64");
        }
        if self.lanes > 1 && self.io == IoMode::Threads {
            return bad(
                "lanes > 1 needs IoMode::Poller (IoMode::Threads has one connection per peer)",
            );
        }
        Ok(())
    }
}

impl fmt::Debug for NetConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetConfig")
            .field("listen", &self.listen)
            .field("advertise", &self.advertise)
            .field("name", &self.name)
            .field("creation", &self.creation)
            .field("fingerprint", &self.fingerprint)
            .field("cookie", &self.cookie.as_ref().map(|_| "<hidden>"))
            .field("max_frame", &self.max_frame)
            .field("max_message", &self.max_message)
            .field("busy_limit", &self.busy_limit)
            .field("unsent_limit", &self.unsent_limit)
            .field("heartbeat", &self.heartbeat)
            .field("heartbeat_misses", &self.heartbeat_misses)
            .field("compress_threshold", &self.compress_threshold)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_pending_handshakes", &self.max_pending_handshakes)
            .field("max_pending_per_address", &self.max_pending_per_address)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("encrypt", &self.encrypt)
            .field("tls", &self.tls.is_some())
            .field("io", &self.io)
            .field("io_threads", &self.io_threads)
            .field("lanes", &self.lanes)
            .finish()
    }
}
