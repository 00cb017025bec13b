//! [`Transport`]: the listener, the peer tables, connect, send, shutdown.
//!
//! # Threads
//!
//! | thread             | count        | does                                           |
//! |--------------------|--------------|------------------------------------------------|
//! | `graft-net-accpt` | 1            | accepts, drives every pending handshake         |
//! | `graft-net-rd`     | 1 per peer   | reads (after the handshake)                     |
//! | `graft-net-wr`     | 1 per peer   | flushes the outbox, sends heartbeats            |
//!
//! That is [`IoMode::Threads`]. In [`IoMode::Poller`] (the default) there
//! is no thread per peer: `io_threads` threads `graft-net-io` (the first
//! also accepts and drives the pending handshakes) read and write every
//! established connection, and one `graft-net-tick` sends heartbeats (see
//! `io.rs`).
//!
//! Every handle goes into `State::threads`; [`Transport::shutdown`] joins
//! them all. Outbound handshakes run on the caller of `connect`, or, for
//! [`Transport::connect_then`], on the first thread's poller as inbound
//! ones do (`outbound.rs`, TLS and extra lanes included).
//!
//! # Pending handshakes
//!
//! An inbound socket that has not authenticated holds no thread: the
//! accept thread registers it on a poller (non-blocking, level-triggered)
//! and feeds what it reads to its handshake state machine
//! (`handshake.rs`), with at most `max_pending_handshakes` in progress, each
//! closed once `handshake_timeout` has passed since its accept. A socket
//! accepted beyond the limit is closed at once. Only once the initiator has
//! confirmed the session key does the accept thread take the slot decision
//! below (a short critical section), send the verdict, and start the
//! peer's reader and writer threads.
//!
//! # Tables
//!
//! `State::names` maps a node name to its one connection slot:
//! `Pending(token)` while *we* are connecting to it (from the moment its
//! answer to our challenge checked out until the acceptor's verdict), or
//! `Up(conn)`. `Inner::peers` holds the same `Up` connections by id for the
//! send path; it is written only with `state` held (lock order: `state`,
//! then `peers`).
//!
//! # Two connections between the same nodes
//!
//! When both nodes connect to each other at once, the connection initiated
//! by the node with the smaller name is kept. Only the acceptor decides, and
//! only after the initiator proved its cookie:
//!
//! * slot empty, or `Up` with another creation (the node restarted), or `Up`
//!   but closed: keep (the stale connection is closed with `Replaced`);
//! * slot `Pending` (we are connecting to the same node): keep iff the
//!   initiator's name is smaller than ours, and then take the slot;
//! * slot `Up` otherwise: duplicate, drop.
//!
//! The initiator registers `Pending` before it answers the acceptor's
//! challenge, and yields (drops its attempt) if the slot is `Pending` or
//! `Up` already. Hence when an acceptor keeps connection `c`, `c`'s
//! initiator held `Pending(c)` before the acceptor decided, and the two sides
//! cannot each keep a different connection. The loser of the race waits for
//! the winner to come up and `connect` returns it.
//!
//! # Shutdown
//!
//! 1. Under `state`: set `closed` (no new thread, slot or peer after this).
//! 2. Shut the listening socket down and wake the accept thread's poller;
//!    it drops every pending inbound handshake and returns.
//! 3. Shut down every socket still in an outbound handshake; close every
//!    connection with `Shutdown` (readers report `peer_down`, writers stop).
//! 4. Join every thread, until the list stays empty.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use socket2::{Domain, Protocol, Socket, Type};

use crate::conn::{Conn, READ_BUF};
use crate::cookie::resolve_cookie;
use crate::frame::Decoder;
use crate::handshake::{self, Handshake, Hello, Identity, Outcome};
use crate::io::{IoConn, IoShared, IoThread, Reader};
use crate::outbound::{Dial, Done, Outbound, Progress};
use crate::pending::{Driven, HandshakeStats, Pending, Stats};
use crate::poll::Events;
use crate::session::{SealedReader, Sealer};
use crate::tls::{PendingTls, TlsHandshake, TlsIo, TlsUp};
use crate::{Handler, IoMode, NetConfig, NetError, PeerId, PeerInfo};

/// A running transport: a listening socket and a set of authenticated peers.
///
/// Cheap to clone (all clones are the same transport). Dropping the last
/// clone shuts it down, but a [`Handler`] that holds a clone keeps it alive:
/// call [`shutdown`](Transport::shutdown) explicitly.
///
/// # Examples
///
/// ```
/// use std::sync::{mpsc, Arc, Mutex};
/// use graft_net::{Handler, NetConfig, NetError, PeerInfo, Transport, FIRST_USER_KIND};
///
/// struct Inbox(Mutex<mpsc::Sender<Vec<u8>>>);
/// impl Handler for Inbox {
///     fn peer_up(&self, _: &PeerInfo) {}
///     fn frame(&self, _: &PeerInfo, _kind: u8, payload: Vec<u8>) {
///         self.0.lock().unwrap().send(payload).unwrap();
///     }
///     fn peer_down(&self, _: &PeerInfo, _: &NetError) {}
/// }
///
/// let (tx, rx) = mpsc::channel();
/// let addr = "127.0.0.1:0".parse().unwrap();
/// let a = Transport::start(NetConfig::new("a", addr).cookie("c"), Arc::new(Inbox(Mutex::new(tx.clone())))).unwrap();
/// let b = Transport::start(NetConfig::new("b", addr).cookie("c"), Arc::new(Inbox(Mutex::new(tx)))).unwrap();
///
/// let peer = a.connect(b.local_addr()).unwrap();
/// assert_eq!(peer.name, "b");
/// a.send(peer.id, FIRST_USER_KIND, b"hello").unwrap();
/// assert_eq!(rx.recv().unwrap(), b"hello");
///
/// a.shutdown();
/// b.shutdown();
/// ```
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
    _guard: Arc<Guard>,
}

/// Shuts the transport down when the last [`Transport`] clone goes.
struct Guard(Arc<Inner>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

struct Inner {
    cfg: NetConfig,
    me: Identity,
    local_addr: SocketAddr,
    listener: Socket,
    handler: Arc<dyn Handler>,
    state: Mutex<State>,
    /// The `Up` connections by id. Written only with `state` held.
    peers: RwLock<HashMap<PeerId, Arc<Conn>>>,
    /// Notified (with `state` held or just after) whenever a slot changes.
    changed: Condvar,
    /// Notified at shutdown only: the heartbeat thread sleeps on it, so
    /// that a slot changing (every handshake) does not wake it.
    stopping: Condvar,
    /// Source of peer ids and handshake tokens; starts at 1, never reused.
    next_id: AtomicU64,
    /// The I/O threads' pollers and inboxes: the first drives the listener
    /// and the pending inbound handshakes; on the poller, all of them
    /// drive established connections (see `io.rs`).
    io: Vec<IoThread>,
    /// Round-robin choice of the I/O thread of the next connection.
    next_io: std::sync::atomic::AtomicUsize,
    stats: Stats,
    /// Inbound peers whose extra lanes are coming in (see "Lanes").
    forming: Mutex<Vec<Forming>>,
    /// Connections retired and not closed yet: a second `retire` may ask
    /// one retired without `fin` to shut down (both sides asked to close at
    /// once), and `retiring_to` tells a new connection to wait. Closed ones
    /// are dropped at each `retire`.
    retiring: Mutex<Vec<(PeerId, std::sync::Weak<Conn>)>>,
    /// Connects asked for by [`Transport::connect_then`], for I/O thread 0
    /// to start (see `outbound.rs`). Pushed to under `state`.
    dials: Mutex<Vec<Dial>>,
}

/// An accepted session's first connection, kept (in the tables, not
/// announced, not read) until its extra lanes are all up.
struct Forming {
    main: Arc<Conn>,
    reader: Reader,
    /// Lane `i` at `i - 1`: the connection, and its reader once built.
    lanes: Vec<Option<(Arc<Conn>, Option<Reader>)>>,
    deadline: Instant,
}

/// A connect's first connection, committed to its slot and not announced,
/// while its extra lanes are dialled on the poller (`outbound.rs`, "Extra
/// lanes"); kept by I/O thread 0 under the first connection's key.
struct LaneGroup {
    main: Arc<Conn>,
    reader: Reader,
    /// Lane `i` at `i - 1`, once up.
    lanes: Vec<Option<(Arc<Conn>, Reader)>>,
    done: Done,
}

/// I/O thread 0's outbound attempts, lane groups and next poller key.
type Dialing<'a> = (
    &'a mut HashMap<usize, Outbound>,
    &'a mut HashMap<usize, LaneGroup>,
    &'a mut usize,
);

/// What an outbound connection that the acceptor kept came to.
enum Upped {
    /// Announced and served.
    Announced(PeerInfo),
    /// Committed; its extra lanes are to be opened.
    Lanes(Arc<Conn>, Reader),
}

struct State {
    /// Set once by shutdown.
    closed: bool,
    names: HashMap<String, Slot>,
    /// Sockets in an outbound handshake, by token, so shutdown can
    /// interrupt them.
    handshaking: HashMap<u64, TcpStream>,
    threads: Vec<JoinHandle<()>>,
}

impl State {
    /// `name`'s connection, once it is up and announced, and not closed
    /// (a closed one stays in its slot until its down is reported).
    fn announced(&self, name: &str) -> Option<PeerInfo> {
        match self.names.get(name) {
            Some(Slot::Up(c)) if c.is_announced() && !c.is_closed() => Some(c.info.clone()),
            _ => None,
        }
    }
}

enum Slot {
    /// We are connecting to this node; the token of that attempt.
    Pending(u64),
    Up(Arc<Conn>),
}

/// A new connection, or the one that was there already.
/// What an accepted connection's reader starts from: the opener, bytes
/// received past the handshake, plaintext already opened.
type InboundReader = (crate::session::Opener, Vec<u8>, Vec<u8>);

enum Connected {
    New(Arc<Conn>, Reader),
    Existing(PeerInfo),
}

impl Transport {
    /// Binds the listening socket, resolves the cookie and starts the accept
    /// thread.
    ///
    /// # Errors
    ///
    /// An invalid configuration, no cookie to be found, or the socket cannot
    /// be bound.
    pub fn start(cfg: NetConfig, handler: Arc<dyn Handler>) -> io::Result<Transport> {
        cfg.validate()?;
        let cookie = resolve_cookie(cfg.cookie.as_deref())?;
        let listener = Socket::new(
            Domain::for_address(cfg.listen),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        listener.set_reuse_address(true)?;
        listener.bind(&cfg.listen.into())?;
        listener.listen(1024)?;
        listener.set_nonblocking(true)?;
        let local_addr = listener
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("listening socket has no IP address"))?;
        let me = Identity::new(&cfg, local_addr, &cookie);
        let n = match cfg.io {
            IoMode::Threads => 1,
            _ => cfg.io_threads,
        };
        let io_threads = (0..n)
            .map(|_| IoThread::new())
            .collect::<io::Result<Vec<_>>>()?;
        if cfg.io == IoMode::Poller && !io_threads[0].poller.supports_level() {
            return Err(io::Error::other(
                "IoMode::Poller needs a level-triggered poller (epoll, kqueue)",
            ));
        }
        let inner = Arc::new(Inner {
            cfg,
            me,
            local_addr,
            listener,
            handler,
            state: Mutex::new(State {
                closed: false,
                names: HashMap::new(),
                handshaking: HashMap::new(),
                threads: Vec::new(),
            }),
            peers: RwLock::new(HashMap::new()),
            changed: Condvar::new(),
            stopping: Condvar::new(),
            next_id: AtomicU64::new(1),
            io: io_threads,
            next_io: Default::default(),
            stats: Stats::default(),
            forming: Mutex::new(Vec::new()),
            retiring: Mutex::new(Vec::new()),
            dials: Mutex::new(Vec::new()),
        });
        if inner.cfg.io == IoMode::Poller {
            let me = inner.clone();
            if let Err(e) = inner.spawn("graft-net-tick", move || me.tick_loop()) {
                inner.shutdown();
                return Err(io::Error::other(e.to_string()));
            }
        }
        for i in 0..inner.io.len() {
            let me = inner.clone();
            let name = match inner.cfg.io {
                IoMode::Threads => "graft-net-accpt",
                _ => "graft-net-io",
            };
            if let Err(e) = inner.spawn(name, move || me.io_loop(i)) {
                inner.shutdown();
                return Err(io::Error::other(e.to_string()));
            }
        }
        log::debug!(
            "graft-net: node {} listening on {local_addr}",
            inner.me.name
        );
        Ok(Transport {
            _guard: Arc::new(Guard(inner.clone())),
            inner,
        })
    }

    /// The address the listener is bound to (with the real port when the
    /// configured one was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// Serves, on the calling thread, what the established connections
    /// have ready now (frames to read, write sides to drain), as an I/O
    /// thread would; for a scheduler's idle worker, which then runs the
    /// processes the frames woke with no hand-off between threads (BEAM's
    /// schedulers poll their sockets too). Returns whether it served any.
    ///
    /// An I/O thread whose connections another thread is serving is
    /// skipped, never waited for. Only on [`IoMode::Poller`] under Linux;
    /// elsewhere it finds nothing. See `io.rs`, "Helpers".
    ///
    /// ```no_run
    /// # fn f(t: &graft_net::Transport) {
    /// while t.poll_ready() {}
    /// # }
    /// ```
    pub fn poll_ready(&self) -> bool {
        self.inner.poll_ready()
    }

    /// Connections per peer (see [`NetConfig::lanes`]).
    pub fn lanes(&self) -> usize {
        self.inner.cfg.lanes
    }

    /// This node's name.
    pub fn name(&self) -> &str {
        &self.inner.me.name
    }

    /// This node's creation (the configured one, or the random default).
    pub fn creation(&self) -> u32 {
        self.inner.me.creation
    }

    /// The listening address announced to peers (the
    /// [`advertise`](NetConfig::advertise)d one, else [`local_addr`](Transport::local_addr)).
    pub fn advertised_addr(&self) -> SocketAddr {
        self.inner.me.listen_addr
    }

    /// Connects to the node listening on `addr` and runs the handshake,
    /// blocking for at most the configured connect timeout. Calls
    /// [`Handler::peer_up`] (on this thread) before returning a new peer.
    ///
    /// If that node is already connected (by its announced address, or by
    /// name once the handshake told it), returns the existing peer. When two
    /// nodes connect to each other at once, both calls return the same
    /// single connection.
    ///
    /// # Errors
    ///
    /// [`NetError::Auth`] when either side refuses the other's cookie,
    /// [`NetError::Timeout`], [`NetError::Handshake`] for protocol trouble,
    /// [`NetError::Io`] when the TCP connect fails, [`NetError::Shutdown`].
    pub fn connect(&self, addr: SocketAddr) -> Result<PeerInfo, NetError> {
        self.inner.connect(addr).inspect_err(|e| match e {
            NetError::Auth { .. } | NetError::Shutdown => {}
            e => log::warn!("graft-net: connecting to {addr} failed: {e}"),
        })
    }

    /// Connects to the node listening at `addr` without blocking: the
    /// connect and the handshake run on the transport's first I/O thread,
    /// as inbound handshakes do, and `done` is called there (with no lock
    /// held) with the peer, or with what [`connect`](Transport::connect)
    /// would have failed with. `done` must return quickly: the thread serves
    /// sockets. When the transport has shut down, `done` is called at once,
    /// on the caller's thread, with [`NetError::Shutdown`].
    ///
    /// Unlike `connect`, it does not wait for another connection between
    /// the two nodes to come up: when one is coming up (both connected to
    /// each other at once) the result is [`NetError::Duplicate`], and
    /// `connect` is the way to wait for it. Over TLS the TLS handshake
    /// runs on the poller too, and with extra [`lanes`](NetConfig::lanes)
    /// every lane's handshake; the peer is announced once all are up.
    ///
    /// ```
    /// use std::sync::{mpsc, Arc};
    /// use graft_net::{Handler, NetConfig, NetError, PeerInfo, Transport};
    ///
    /// struct Quiet;
    /// impl Handler for Quiet {
    ///     fn peer_up(&self, _: &PeerInfo) {}
    ///     fn frame(&self, _: &PeerInfo, _: u8, _: Vec<u8>) {}
    ///     fn peer_down(&self, _: &PeerInfo, _: &NetError) {}
    /// }
    ///
    /// let addr = "127.0.0.1:0".parse().unwrap();
    /// let a = Transport::start(NetConfig::new("a", addr).cookie("c"), Arc::new(Quiet)).unwrap();
    /// let b = Transport::start(NetConfig::new("b", addr).cookie("c"), Arc::new(Quiet)).unwrap();
    ///
    /// let (tx, rx) = mpsc::channel();
    /// a.connect_then(b.local_addr(), Box::new(move |r| tx.send(r).unwrap()));
    /// assert_eq!(rx.recv().unwrap().unwrap().name, "b");
    ///
    /// a.shutdown();
    /// b.shutdown();
    /// ```
    pub fn connect_then(
        &self,
        addr: SocketAddr,
        done: Box<dyn FnOnce(Result<PeerInfo, NetError>) + Send>,
    ) {
        self.inner.connect_then(addr, done);
    }

    /// Queues one frame for `peer`. Never blocks on the socket: the frame is
    /// appended to the peer's buffer and its writer thread sends it (with
    /// others queued meanwhile, in one write). Payloads over the compression
    /// threshold are compressed here, on the caller's thread.
    ///
    /// `Ok` means queued, not delivered: if the connection breaks, queued
    /// frames are lost and [`Handler::peer_down`] is called.
    ///
    /// # Errors
    ///
    /// [`NetError::NotConnected`] when the peer is (or is going) down,
    /// [`NetError::ReservedKind`] for `kind < FIRST_USER_KIND`,
    /// [`NetError::MessageTooLarge`] over the
    /// [`max_message_size`](NetConfig::max_message_size).
    #[inline]
    pub fn send(&self, peer: PeerId, kind: u8, payload: &[u8]) -> Result<(), NetError> {
        let peers = self.inner.peers.read();
        let Some(conn) = peers.get(&peer) else {
            return Err(NetError::NotConnected(peer));
        };
        if payload.len() <= self.inner.cfg.compress_threshold {
            return conn.send(kind, payload);
        }
        // Compressing takes a while: not with the table locked.
        let conn = conn.clone();
        drop(peers);
        conn.send(kind, payload)
    }

    /// A handle that sends to `peer` without the table lookup of
    /// [`send`](Transport::send), for hot paths.
    ///
    /// # Errors
    ///
    /// [`NetError::NotConnected`] when no such peer is up.
    pub fn sender(&self, peer: PeerId) -> Result<PeerSender, NetError> {
        match self.inner.peers.read().get(&peer) {
            Some(conn) if !conn.is_closed() => Ok(PeerSender { conn: conn.clone() }),
            _ => Err(NetError::NotConnected(peer)),
        }
    }

    /// Closes the connection to `peer` (queued frames are dropped).
    /// [`Handler::peer_down`] follows, with [`NetError::Disconnected`], on
    /// the peer's reader thread. Unknown ids are ignored.
    pub fn disconnect(&self, peer: PeerId) {
        let conn = self.inner.peers.read().get(&peer).cloned();
        if let Some(conn) = conn {
            conn.close(NetError::Disconnected);
        }
    }

    /// Retires the connection to `peer` without losing a frame either way
    /// (see `conn.rs`, "Retiring"): it leaves the tables at once, so
    /// [`send`](Transport::send) and existing [`PeerSender`]s fail with
    /// [`NetError::NotConnected`] and a new connection to the same node
    /// may come up beside it; `last` (kind, payload) is queued as its last
    /// frame; everything queued is written, and then, with `fin`, the write
    /// side is shut down. Frames keep arriving until the peer closes its
    /// side (or the heartbeat rules end the connection); then
    /// [`Handler::peer_down`] follows as for any close.
    ///
    /// # Errors
    ///
    /// [`NetError::NotConnected`] if `peer` is not up or is retiring
    /// already; [`NetError::Protocol`] for a connection with extra lanes
    /// (their frames could be read after the first lane's EOF), which
    /// only [`disconnect`](Transport::disconnect) closes.
    pub fn retire(
        &self,
        peer: PeerId,
        last: Option<(u8, &[u8])>,
        fin: bool,
    ) -> Result<(), NetError> {
        if let Some((kind, _)) = last {
            if kind < crate::FIRST_USER_KIND {
                return Err(NetError::ReservedKind(kind));
            }
        }
        let found = self.inner.peers.read().get(&peer).cloned();
        let Some(conn) = found.or_else(|| self.inner.retiring(peer)) else {
            return Err(NetError::NotConnected(peer));
        };
        if !conn.extra_lanes().is_empty() {
            return Err(NetError::Protocol(
                "a connection with extra lanes cannot be retired".into(),
            ));
        }
        self.inner.remove(&conn);
        if conn.finish(last, fin) {
            let mut r = self.inner.retiring.lock();
            r.retain(|(_, c)| c.upgrade().is_some_and(|c| !c.is_closed()));
            r.push((peer, Arc::downgrade(&conn)));
            Ok(())
        } else {
            Err(NetError::NotConnected(peer))
        }
    }

    /// Whether a connection to the node listening at `addr` was retired
    /// here and is still open (this side has not read the peer's EOF). A
    /// new connection to it opened now could be read by the peer before
    /// the old one's last frames; one opened once this is `false` comes
    /// after everything the old one carried either way.
    pub fn retiring_to(&self, addr: SocketAddr) -> bool {
        (self.inner.retiring.lock().iter())
            .filter_map(|(_, c)| c.upgrade())
            .any(|c| c.info.listen_addr == addr && !c.is_closed())
    }

    /// The peers that are up (`peer_up` called, connection not closed), by id.
    pub fn peers(&self) -> Vec<PeerInfo> {
        let mut v: Vec<PeerInfo> = (self.inner.peers.read().values())
            .filter(|c| c.is_announced() && !c.is_closed())
            .map(|c| c.info.clone())
            .collect();
        v.sort_by_key(|p| p.id);
        v
    }

    /// The peer with this id, if it is up.
    pub fn peer(&self, peer: PeerId) -> Option<PeerInfo> {
        (self.inner.peers.read().get(&peer))
            .filter(|c| c.is_announced() && !c.is_closed())
            .map(|c| c.info.clone())
    }

    /// The peer with this node name, if it is up.
    pub fn peer_named(&self, name: &str) -> Option<PeerInfo> {
        match self.inner.state.lock().names.get(name) {
            Some(Slot::Up(c)) if c.is_announced() && !c.is_closed() => Some(c.info.clone()),
            _ => None,
        }
    }

    /// Counters of inbound handshakes: in progress, refused over the limit,
    /// timed out, failed, completed.
    pub fn handshake_stats(&self) -> HandshakeStats {
        self.inner.stats.snapshot()
    }

    /// Closes the listener and every connection, and joins every thread the
    /// transport started; `peer_down` has been called for every peer when it
    /// returns. Waits for callbacks in progress to return. Idempotent.
    /// Called from a handler callback, it joins all threads but the calling
    /// one.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

/// A TCP connection to `addr` within `timeout`, without Nagle's delay,
/// its writes bounded by the same timeout (a node's first connection to a
/// peer and its extra lanes).
fn dial(addr: SocketAddr, timeout: Duration, unsent: usize) -> Result<TcpStream, NetError> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nodelay(true)?;
    crate::sockopt::limit_unsent(&sock, unsent)?;
    sock.connect_timeout(&addr.into(), timeout)
        .map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => NetError::Timeout,
            _ => e.into(),
        })?;
    let stream = TcpStream::from(sock);
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// The dials in `queued` whose deadline has passed, taken out.
fn take_late(queued: &mut std::collections::VecDeque<Dial>, now: Instant) -> Vec<Dial> {
    let (late, keep): (Vec<Dial>, Vec<Dial>) = std::mem::take(queued)
        .into_iter()
        .partition(|d| d.deadline <= now);
    *queued = keep.into();
    late
}

/// A connecting side's record keys once its cookie handshake is done, and
/// what was read past it: `(sealer, opener, records read ahead, plaintext
/// read ahead)`. The cookie handshake's session keys on plain TCP; over TLS,
/// the TLS connection's (the handshake ran inside it).
fn record_keys(
    tls: Option<(TlsUp, Vec<u8>)>,
    session: crate::session::Session,
    rest: Vec<u8>,
) -> (Sealer, crate::session::Opener, Vec<u8>, Vec<u8>) {
    match tls {
        None => {
            let (s, o) = session.split();
            (s, o, rest, Vec::new())
        }
        Some((up, mut read)) => {
            let mut plain = rest;
            plain.append(&mut read);
            (up.sealer, up.opener, up.raw, plain)
        }
    }
}

/// What extra lane `index` of `main` claims in its handshake.
fn lane_claim(main: &Conn, index: u8) -> handshake::LaneReq {
    handshake::LaneReq {
        index,
        lanes: main.group.lanes,
        session: main.group.secret.session(),
        key: main.group.secret.key,
        forged: None,
    }
}

/// An extra lane of `main` must be answered by `main`'s node.
fn same_node(main: &Conn, index: u8, hello: &Hello) -> Result<(), NetError> {
    if hello.name == main.info.name && hello.creation == main.info.creation {
        return Ok(());
    }
    Err(NetError::Handshake(format!(
        "lane {index} to {} answered by {} (another node)",
        main.info.name, hello.name
    )))
}

/// The error a handler's panic closes its connection with.
fn panic_reason(p: Box<dyn std::any::Any + Send>) -> NetError {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    NetError::HandlerPanicked(what)
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("name", &self.inner.me.name)
            .field("local_addr", &self.inner.local_addr)
            .field("peers", &self.inner.peers.read().len())
            .finish()
    }
}

/// Sends to one peer without looking it up; see [`Transport::sender`].
#[derive(Debug, Clone)]
pub struct PeerSender {
    conn: Arc<Conn>,
}

impl PeerSender {
    /// As [`Transport::send`].
    ///
    /// # Errors
    ///
    /// As [`Transport::send`].
    #[inline]
    pub fn send(&self, kind: u8, payload: &[u8]) -> Result<(), NetError> {
        self.conn.send(kind, payload)
    }

    /// As [`send`](PeerSender::send), for a caller that will call
    /// [`flush`](PeerSender::flush) soon: a frame that `send` would write
    /// at once (the writer thread is parked and traffic is sparse) is held
    /// in the outbox instead, and frames sent until the flush join it, so
    /// that they leave in one write without a thread hand-off. `Ok(true)`:
    /// held, flush soon; `Ok(false)`: the writer has it, nothing to do. At
    /// most 32 KiB is held; beyond that, and for dense traffic, the writer
    /// is woken as for `send`.
    ///
    /// # Errors
    ///
    /// As [`Transport::send`].
    #[inline]
    pub fn send_held(&self, kind: u8, payload: &[u8]) -> Result<bool, NetError> {
        self.conn.send_held(kind, payload)
    }

    /// Writes the frames held by [`send_held`](PeerSender::send_held) (or
    /// wakes the writer for them); does nothing if none are held.
    pub fn flush(&self) {
        self.conn.flush();
        for l in self.conn.extra_lanes() {
            l.flush();
        }
    }

    /// Whether both send to the same connection.
    pub fn same_peer(&self, other: &PeerSender) -> bool {
        Arc::ptr_eq(&self.conn, &other.conn)
    }

    /// The peer this sender sends to.
    pub fn peer(&self) -> &PeerInfo {
        &self.conn.info
    }

    /// False once the connection is closed (sends then fail).
    pub fn is_connected(&self) -> bool {
        !self.conn.is_closed()
    }

    /// Bytes queued for this peer and not yet written to its socket. The
    /// outbox is unbounded; a sender that must not outrun a slow peer can
    /// watch this, or wait with [`on_drain`](PeerSender::on_drain).
    pub fn queued_bytes(&self) -> usize {
        let lanes = self.conn.extra_lanes().iter();
        self.conn.queued_bytes() + lanes.map(|l| l.queued_bytes()).sum::<usize>()
    }

    /// The connections to this peer ([`NetConfig::lanes`]; 1 without
    /// extra lanes).
    pub fn lanes(&self) -> usize {
        1 + self.conn.extra_lanes().len()
    }

    /// User frames queued so far on each of this peer's lanes, the first
    /// connection first (one entry without extra lanes).
    pub fn lane_frames(&self) -> Vec<u64> {
        let lanes = self.conn.extra_lanes().iter().map(|l| l.frames_queued());
        std::iter::once(self.conn.frames_queued())
            .chain(lanes)
            .collect()
    }

    /// Test hook: shuts the socket of lane `index` down (0: the first
    /// connection), as a network fault would; the peer then goes down.
    #[doc(hidden)]
    pub fn shutdown_lane_socket(&self, index: usize) {
        let c = match index {
            0 => &self.conn,
            i => match self.conn.extra_lanes().get(i - 1) {
                Some(c) => c,
                None => return,
            },
        };
        let _ = c.stream().shutdown(Shutdown::Both);
    }

    /// As [`send_held`](PeerSender::send_held) (or [`send`](PeerSender::send)
    /// when `hold` is false), with an order key, taking the payload by value
    /// (a large message is not copied). Frames with the same key arrive in
    /// the order sent; a small frame of another key may overtake a large
    /// message (over 64 KiB) still going out in fragments. `send` and
    /// `send_held` use key 0.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use graft_net::{Handler, NetConfig, NetError, PeerInfo, Transport};
    /// # struct Quiet;
    /// # impl Handler for Quiet {
    /// #     fn peer_up(&self, _: &PeerInfo) {}
    /// #     fn frame(&self, _: &PeerInfo, _: u8, _: Vec<u8>) {}
    /// #     fn peer_down(&self, _: &PeerInfo, _: &NetError) {}
    /// # }
    /// # let addr = "127.0.0.1:0".parse().unwrap();
    /// # let a = Transport::start(NetConfig::new("a", addr).cookie("c"), Arc::new(Quiet)).unwrap();
    /// # let b = Transport::start(NetConfig::new("b", addr).cookie("c"), Arc::new(Quiet)).unwrap();
    /// let peer = a.connect(b.local_addr()).unwrap();
    /// let s = a.sender(peer.id).unwrap();
    /// s.send_keyed(7, 16, vec![0; 1 << 20], false).unwrap(); // in fragments
    /// s.send_keyed(7, 16, b"after it".to_vec(), false).unwrap();
    /// # a.shutdown(); b.shutdown();
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Transport::send`].
    pub fn send_keyed(
        &self,
        key: u64,
        kind: u8,
        payload: Vec<u8>,
        hold: bool,
    ) -> Result<bool, NetError> {
        self.conn
            .lane(key)
            .send_frame(key, kind, std::borrow::Cow::Owned(payload), hold)
    }

    /// As [`send_keyed`](PeerSender::send_keyed), with a borrowed payload.
    ///
    /// # Errors
    ///
    /// As [`Transport::send`].
    pub fn send_keyed_ref(
        &self,
        key: u64,
        kind: u8,
        payload: &[u8],
        hold: bool,
    ) -> Result<bool, NetError> {
        self.conn
            .lane(key)
            .send_frame(key, kind, std::borrow::Cow::Borrowed(payload), hold)
    }

    /// Whether more than the [`busy_limit`](NetConfig::busy_limit) is queued
    /// (Erlang's busy distribution port), as last seen by a sender or the
    /// writer.
    pub fn is_busy(&self) -> bool {
        self.conn.is_busy() || self.conn.extra_lanes().iter().any(|l| l.is_busy())
    }

    /// Whether a sender with order key `key` about to send `size` bytes
    /// should wait: while the small frames queued alone pass the busy
    /// limit (everyone waits), or while the whole queue does and this
    /// sender sends a large message (over 64 KiB) or has one queued. Small
    /// traffic of other senders keeps moving past bulk data.
    pub fn busy_for(&self, key: u64, size: usize) -> bool {
        self.conn.lane(key).busy_for(key, size)
    }

    /// Calls `wake` (on the connection's writer thread, or on whoever closes
    /// it) once [`busy_for`](PeerSender::busy_for)`(key, size)` no longer
    /// holds, or the connection closed. Returns `false`, dropping `wake`
    /// unrun, when that is so already. Wake-ups may be spurious: re-check.
    /// Keep `wake` short (an unpark).
    pub fn on_drain(&self, key: u64, size: usize, wake: Box<dyn FnOnce() + Send>) -> bool {
        self.conn.lane(key).on_drain(key, size, wake)
    }

    /// The last heartbeat round trip to this peer (a ping each heartbeat
    /// tick, echoed by the peer), once one was measured; `None` before the
    /// first echo, or with a peer that does not echo.
    pub fn heartbeat_rtt(&self) -> Option<std::time::Duration> {
        self.conn.heartbeat_rtt()
    }
}

impl Inner {
    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Spawns a named thread and records its handle, unless shut down.
    /// Joins handles of threads that have finished, on the way.
    fn spawn(&self, name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), NetError> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(NetError::Shutdown);
        }
        let mut done = Vec::new();
        let mut i = 0;
        while i < st.threads.len() {
            if st.threads[i].is_finished() {
                done.push(st.threads.swap_remove(i));
            } else {
                i += 1;
            }
        }
        let h = thread::Builder::new().name(name.into()).spawn(f)?;
        st.threads.push(h);
        drop(st);
        for h in done {
            let _ = h.join();
        }
        Ok(())
    }

    /// I/O thread `index`: the first accepts and drives every pending
    /// inbound handshake (see "Pending handshakes"); on the poller, each
    /// also drives its established connections (see `io.rs`).
    fn io_loop(self: &Arc<Self>, index: usize) {
        const LISTENER: usize = 0;
        let me = &self.io[index];
        let listener = if index == 0 {
            match me.poller.register(&self.listener, LISTENER) {
                Ok(l) => Some(l),
                Err(e) => return log::error!("graft-net: cannot poll the listener: {e}"),
            }
        } else {
            None
        };
        let mut pending: HashMap<usize, Pending> = HashMap::new();
        // Outbound handshakes (`outbound.rs`; thread 0 only), those waiting
        // for one of them to end, and the completions of this turn, called
        // once no lock is held.
        let mut outbound: HashMap<usize, Outbound> = HashMap::new();
        let mut groups: HashMap<usize, LaneGroup> = HashMap::new();
        let mut queued: std::collections::VecDeque<Dial> = Default::default();
        let mut finished = Vec::new();
        let mut events = Events::new();
        let mut next_key = LISTENER + 1;
        let tick = self.cfg.heartbeat;
        let scan_every = tick / 4;
        let mut next_scan = Instant::now() + scan_every;
        // Whether this thread holds connections and has some to visit
        // again, as it left them at its last turn. Helpers do not add
        // connections, and one that leaves work in `again` notifies the
        // poller, so the next wait needs no second look under the lock.
        let (mut serving, mut more) = (false, false);
        me.enter();
        loop {
            let now = Instant::now();
            let mut timeout = (pending.values().map(|p| p.deadline))
                .chain(outbound.values().map(|o| o.deadline))
                .chain(queued.iter().map(|d| d.deadline))
                .map(|d| d.saturating_duration_since(now))
                .min();
            if serving {
                let t = next_scan.saturating_duration_since(now);
                timeout = Some(timeout.map_or(t, |x| x.min(t)));
            }
            if index == 0 {
                if let Some(d) = self.forming.lock().iter().map(|f| f.deadline).min() {
                    let t = d.saturating_duration_since(now);
                    timeout = Some(timeout.map_or(t, |x| x.min(t)));
                }
            }
            if more || !me.inbox.lock().is_empty() {
                timeout = Some(Duration::ZERO);
            }
            events.clear();
            if let Err(e) = me.poller.wait(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::warn!("graft-net: poll failed: {e}");
                    thread::sleep(Duration::from_millis(20));
                }
            }
            if self.state.lock().closed {
                break;
            }
            let mut sh = me.shared.lock();
            let IoShared { conns, again, .. } = &mut *sh;
            for (conn, reader) in std::mem::take(&mut *me.inbox.lock()) {
                let key = next_key;
                next_key += 1;
                match IoConn::register(conn.clone(), reader, &me.poller, key, self.cfg.heartbeat) {
                    Ok(c) => {
                        conns.insert(key, c);
                    }
                    Err(e) => {
                        conn.close(e.into());
                        self.report_down(&conn);
                    }
                }
            }
            let revisit = std::mem::take(again);
            for ev in events.iter() {
                if ev.key == LISTENER {
                    let first = next_key;
                    self.accept_all(&mut pending, &mut next_key);
                    // An initiator writes its first message as soon as its
                    // connect returns, so it is often here already: read
                    // it now rather than after another wait.
                    for key in first..next_key {
                        self.drive_pending(&mut pending, key);
                    }
                    if let Some(Err(e)) = listener.as_ref().map(|l| l.rearm()) {
                        log::warn!("graft-net: cannot poll the listener: {e}");
                    }
                    continue;
                }
                if conns.contains_key(&ev.key) {
                    self.serve(conns, again, ev.key, |c, h| {
                        c.serve(ev.readable, ev.writable, h)
                    });
                    continue;
                }
                if outbound.contains_key(&ev.key) {
                    let dials = (&mut outbound, &mut groups, &mut next_key);
                    self.drive_outbound(dials, ev.key, &mut finished);
                    continue;
                }
                self.drive_pending(&mut pending, ev.key);
            }
            for key in revisit {
                if conns.contains_key(&key) && !again.contains(&key) {
                    self.serve(conns, again, key, |c, h| c.serve(true, false, h));
                }
            }
            let now = Instant::now();
            if now >= next_scan {
                let keys: Vec<usize> = conns.keys().copied().collect();
                for key in keys {
                    self.serve(conns, again, key, |c, h| c.scan(now, h));
                }
                // The next scan when the first connection is due, within
                // [a quarter tick, a tick]: an idle node's heartbeats keep
                // every window two ticks away, so this thread wakes once a
                // tick for its scans, not four times.
                let due = conns.values().map(IoConn::scan_due).min();
                next_scan = due
                    .unwrap_or(now + tick)
                    .clamp(now + scan_every, now + tick);
            }
            (serving, more) = (!conns.is_empty(), !again.is_empty());
            drop(sh);
            let expired: Vec<usize> = (pending.iter())
                .filter(|(_, p)| p.deadline <= now)
                .map(|(k, _)| *k)
                .collect();
            let expired: Vec<Pending> = expired
                .into_iter()
                .filter_map(|k| pending.remove(&k))
                .collect();
            // Counted before the sockets close, so that whoever sees one
            // close sees the counts.
            self.stats
                .pending
                .store(pending.len() as u64, Ordering::Relaxed);
            if index == 0 {
                self.expire_forming(now);
            }
            for p in expired {
                Stats::bump(&self.stats.timed_out);
                log::info!(
                    "graft-net: {}: no handshake within {:?}; closed",
                    p.remote,
                    self.cfg.handshake_timeout
                );
            }
            let late: Vec<usize> = (outbound.iter())
                .filter(|(_, o)| o.deadline <= now)
                .map(|(k, _)| *k)
                .collect();
            for key in late {
                // A lane's group may have gone with an earlier one.
                let Some(o) = outbound.remove(&key) else {
                    continue;
                };
                if let Some((of, _)) = o.lane {
                    drop(o);
                    let e = NetError::Timeout;
                    self.lanes_failed(&mut outbound, &mut groups, of, e, &mut finished);
                    continue;
                }
                log::warn!(
                    "graft-net: connecting to {} failed: {}",
                    o.addr,
                    NetError::Timeout
                );
                let (done, token, registered) = o.abandon();
                self.release(registered.as_deref(), token);
                finished.push((done, Err(NetError::Timeout)));
            }
            for d in take_late(&mut queued, now) {
                log::warn!(
                    "graft-net: connecting to {} failed: {} (waited for a handshake slot)",
                    d.addr,
                    NetError::Timeout
                );
                finished.push((d.done, Err(NetError::Timeout)));
            }
            // New dials, and slots freed this turn, start now.
            if index == 0 {
                queued.extend(std::mem::take(&mut *self.dials.lock()));
                self.start_dials(&mut queued, &mut outbound, &mut next_key, &mut finished);
            }
            Self::finish(std::mem::take(&mut finished));
        }
        drop(pending);
        // Closed: no dial is queued any more (see `connect_then`).
        queued.extend(std::mem::take(&mut *self.dials.lock()));
        for g in groups.into_values() {
            for (c, _) in g.lanes.iter().flatten() {
                self.abandon(c, NetError::Shutdown);
            }
            self.abandon(&g.main, NetError::Shutdown);
            finished.push((g.done, Err(NetError::Shutdown)));
        }
        Self::finish(std::mem::take(&mut finished));
        let left = (outbound.into_values().map(|o| o.abandon().0))
            .chain(queued.into_iter().map(|d| d.done));
        Self::finish(left.map(|done| (done, Err(NetError::Shutdown))).collect());
        if index == 0 {
            self.stats.pending.store(0, Ordering::Relaxed);
        }
        // Closed: nothing joins the inbox any more (see `join_io`).
        let left = std::mem::take(&mut *me.inbox.lock());
        let conns = std::mem::take(&mut me.shared.lock().conns);
        let held = conns.into_values().map(|c| c.conn.clone());
        for conn in held.chain(left.into_iter().map(|(c, _)| c)) {
            conn.close(NetError::Shutdown);
            self.report_down(&conn);
        }
    }

    /// [`Transport::poll_ready`].
    fn poll_ready(&self) -> bool {
        let mut served = false;
        for me in &self.io {
            let Some(mut sh) = me.shared.try_lock() else {
                continue;
            };
            let IoShared {
                conns,
                again,
                events,
            } = &mut *sh;
            if conns.is_empty() || me.poller.peek(events).is_err() {
                continue;
            }
            let left = again.len();
            for ev in events.iter() {
                // The listener's and the pending handshakes' events are the
                // I/O thread's: level-triggered, its own wait reports them.
                if conns.contains_key(&ev.key) {
                    served = true;
                    self.serve(conns, again, ev.key, |c, h| {
                        c.serve(ev.readable, ev.writable, h)
                    });
                }
            }
            if again.len() > left {
                // More to read, maybe already in the record layer where no
                // readiness reports it: the I/O thread's next turn must not
                // wait. (What was there before, its last turn saw, or the
                // helper that left it notified.)
                let _ = me.poller.notify();
            }
        }
        served
    }

    /// Runs `f` on connection `key` of this I/O thread, the handler's
    /// panics caught; a connection that fails is closed, reported down and
    /// dropped, one with more to read is noted in `again`.
    fn serve(
        &self,
        conns: &mut HashMap<usize, IoConn>,
        again: &mut Vec<usize>,
        key: usize,
        f: impl FnOnce(&mut IoConn, &dyn Handler) -> Result<bool, NetError>,
    ) {
        let Some(c) = conns.get_mut(&key) else { return };
        let handler = &*self.handler;
        let run = std::panic::AssertUnwindSafe(|| f(c, handler));
        let res = std::panic::catch_unwind(run).unwrap_or_else(|p| Err(panic_reason(p)));
        match res {
            Ok(false) => {}
            Ok(true) => again.push(key),
            Err(e) => {
                let c = conns.remove(&key).expect("present");
                c.conn.close(e);
                self.report_down(&c.conn);
            }
        }
    }

    /// The tick thread of the poller: heartbeats (see `io.rs`, "Timers").
    fn tick_loop(&self) {
        let tick = self.cfg.heartbeat;
        loop {
            {
                let mut st = self.state.lock();
                if st.closed {
                    return;
                }
                self.stopping.wait_for(&mut st, tick / 4);
                if st.closed {
                    return;
                }
            }
            let mut conns: Vec<Arc<Conn>> = self.peers.read().values().cloned().collect();
            // Retiring ones too: without `fin` they still send heartbeats
            // (conn.rs, "Retiring").
            conns.extend(
                (self.retiring.lock().iter())
                    .filter_map(|(_, c)| c.upgrade())
                    .filter(|c| !c.is_closed()),
            );
            for c in conns {
                c.ping_if_due(tick);
                for l in c.extra_lanes() {
                    l.ping_if_due(tick);
                }
            }
        }
    }

    /// Hands an announced connection to an I/O thread (round-robin).
    fn join_io(&self, conn: &Arc<Conn>, reader: Reader) -> Result<(), NetError> {
        let i = self.next_io.fetch_add(1, Ordering::Relaxed) % self.io.len();
        self.join_io_at(i, conn, reader)
    }

    /// Hands a connection to I/O thread `i`.
    fn join_io_at(&self, i: usize, conn: &Arc<Conn>, reader: Reader) -> Result<(), NetError> {
        reader.src.get_ref().set_nonblocking(true)?;
        {
            // Under `state`, so that nothing joins after shutdown drained it.
            let st = self.state.lock();
            if st.closed {
                return Err(NetError::Shutdown);
            }
            self.io[i].inbox.lock().push((conn.clone(), reader));
        }
        if !self.io[i].is_current() {
            self.io[i].poller.notify()?;
        }
        Ok(())
    }

    /// Runs the pending inbound handshake `key` as far as its socket's
    /// bytes go: a verdict to decide, a failure, or more to wait for.
    fn drive_pending(self: &Arc<Self>, pending: &mut HashMap<usize, Pending>, key: usize) {
        let Some(p) = pending.get_mut(&key) else {
            return;
        };
        match p.drive(&self.me) {
            Driven::Waiting => {}
            Driven::Decide(hello) => {
                let p = pending.remove(&key).expect("pending");
                self.stats
                    .pending
                    .store(pending.len() as u64, Ordering::Relaxed);
                self.decided(p, hello);
            }
            Driven::Failed(e) => {
                let p = pending.remove(&key).expect("pending");
                self.stats
                    .pending
                    .store(pending.len() as u64, Ordering::Relaxed);
                // An initiator that yields to another connection
                // completed its handshake.
                let duplicate = matches!(e, NetError::Duplicate);
                Stats::bump(if duplicate {
                    &self.stats.completed
                } else {
                    &self.stats.failed
                });
                match e {
                    NetError::Closed | NetError::Shutdown => {
                        log::debug!("graft-net: {}: closed in its handshake", p.remote)
                    }
                    NetError::Duplicate => log::debug!("graft-net: {}: {e}", p.remote),
                    e => {
                        log::warn!("graft-net: refusing connection from {}: {e}", p.remote)
                    }
                }
            }
        }
    }

    /// Accepts every socket waiting in the backlog.
    fn accept_all(&self, pending: &mut HashMap<usize, Pending>, next_key: &mut usize) {
        loop {
            let (sock, addr) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) if self.state.lock().closed => return,
                Err(e) => {
                    // Out of descriptors, most likely: back off a little.
                    log::warn!("graft-net: accept failed: {e}");
                    thread::sleep(Duration::from_millis(5));
                    return;
                }
            };
            let remote = addr
                .as_socket()
                .unwrap_or(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0));
            if pending.len() >= self.cfg.max_pending_handshakes {
                let n = self
                    .stats
                    .refused_over_limit
                    .fetch_add(1, Ordering::Relaxed);
                if n.is_power_of_two() {
                    log::warn!(
                        "graft-net: {} handshakes in progress; closing {remote} at once ({} so far)",
                        pending.len(),
                        n + 1
                    );
                }
                drop(sock);
                continue;
            }
            let source = crate::pending::source_key(&remote);
            let same = pending.values().filter(|p| p.source == source).count();
            if same >= self.cfg.max_pending_per_address {
                let n = self
                    .stats
                    .refused_per_address
                    .fetch_add(1, Ordering::Relaxed);
                if n.is_power_of_two() {
                    log::warn!(
                        "graft-net: {same} handshakes in progress from {}; closing {remote} at once ({} so far)",
                        remote.ip(),
                        n + 1
                    );
                }
                drop(sock);
                continue;
            }
            let tls = match self.cfg.tls.as_ref().map(TlsHandshake::server) {
                None => None,
                Some(Ok(hs)) => Some(PendingTls::Handshaking(Box::new(hs))),
                Some(Err(e)) => {
                    log::warn!("graft-net: {e}");
                    continue;
                }
            };
            let stream = TcpStream::from(sock);
            let registered = stream
                .set_nonblocking(true)
                .and_then(|()| stream.set_nodelay(true))
                .and_then(|()| crate::sockopt::limit_unsent(&stream, self.cfg.unsent_limit))
                .and_then(|()| self.io[0].poller.register(stream, *next_key));
            match registered {
                Ok(sock) => {
                    pending.insert(
                        *next_key,
                        Pending {
                            sock,
                            remote,
                            source,
                            deadline: Instant::now() + self.cfg.handshake_timeout,
                            hs: None,
                            tls,
                        },
                    );
                    *next_key += 1;
                    self.stats
                        .pending
                        .store(pending.len() as u64, Ordering::Relaxed);
                }
                Err(e) => log::warn!("graft-net: cannot serve {remote}: {e}"),
            }
        }
    }

    /// An inbound initiator proved itself: the slot decision (module docs),
    /// the verdict, and the peer's threads.
    fn decided(self: &Arc<Self>, mut p: Pending, hello: Hello) {
        let remote = p.remote;
        let tls = match p.tls.take() {
            None => None,
            Some(PendingTls::Up(up)) => Some(up),
            Some(_) => unreachable!("decided before the TLS handshake finished"),
        };
        if let (Some(cfg), Some(up)) = (&self.cfg.tls, &tls) {
            if let Err(e) = crate::tls::check_name(cfg, &up.cert, &hello.name) {
                Stats::bump(&self.stats.failed);
                // Tell the initiator, in an alert: its certificate is bad.
                let mut up = tls.expect("checked");
                if let Ok(alert) = up.sealer.tls_alert(42) {
                    let _ = std::io::Write::write_all(&mut p.sock.get(), &alert);
                }
                return log::warn!("graft-net: refusing {}@{remote}: {e}", hello.name);
            }
        }
        if hello.lane > 0 {
            return self.decided_lane(p, hello, tls);
        }
        let hs = p.hs.as_mut().expect("a handshake");
        let decision = self.commit_inbound(&hello, p.sock.get(), hs, tls);
        let sent = p.flush();
        let stream = p.sock.into_inner();
        let (conn, reader) = match (decision, sent) {
            (Ok(Some(x)), Ok(())) => x,
            (Ok(Some((conn, _))), Err(e)) => {
                Stats::bump(&self.stats.failed);
                log::warn!("graft-net: {}@{remote}: {e}", hello.name);
                return self.abandon(&conn, e);
            }
            (Ok(None), _) => {
                Stats::bump(&self.stats.completed);
                return log::debug!(
                    "graft-net: {}@{remote}: duplicate connection dropped",
                    hello.name
                );
            }
            (Err(e), _) => {
                Stats::bump(&self.stats.failed);
                if !matches!(e, NetError::Shutdown) {
                    log::warn!("graft-net: refusing {}@{remote}: {e}", hello.name);
                }
                return;
            }
        };
        Stats::bump(&self.stats.completed);
        let poller = self.cfg.io == IoMode::Poller;
        let setup = if poller {
            Ok(())
        } else {
            stream
                .set_nonblocking(false)
                .and_then(|()| self.configure(&stream, &hello))
        };
        if let Err(e) = setup {
            return self.abandon(&conn, e.into());
        }
        let (c, me) = (conn.clone(), self.clone());
        let reader = Reader {
            src: SealedReader::new(stream, reader.0, &reader.1).with_plain(reader.2),
            dec: Decoder::new(READ_BUF, self.cfg.wire_frame_max()),
        };
        if poller && conn.group.lanes > 1 {
            // Announced once its lanes are up (see "Lanes").
            return self.form(conn, reader);
        }
        if poller {
            // `peer_up` on this I/O thread, before the first frame is read.
            self.announce(&conn);
            if let Err(e) = self.join_io(&conn, reader) {
                conn.close(e);
                self.report_down(&conn);
            }
            return;
        }
        let started = self.spawn("graft-net-rd", move || {
            me.announce(&c);
            if let Err(e) = me.start_writer(&c) {
                c.close(e);
            }
            me.run_reader(c, reader);
        });
        if let Err(e) = started {
            self.abandon(&conn, e);
        }
    }

    /// Registers a socket in a handshake so that shutdown can interrupt it.
    fn track(&self, token: u64, stream: &TcpStream) -> Result<(), NetError> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(NetError::Shutdown);
        }
        st.handshaking.insert(token, stream.try_clone()?);
        Ok(())
    }

    fn untrack(&self, token: u64) {
        self.state.lock().handshaking.remove(&token);
    }

    /// Timeouts for an established connection: the reader wakes twice a
    /// tick to check for silence; a write blocked as long as a dead peer
    /// takes to detect fails.
    fn configure(&self, stream: &TcpStream, hello: &Hello) -> io::Result<()> {
        stream.set_read_timeout(Some(self.cfg.heartbeat / 2))?;
        stream.set_write_timeout(Some(self.dead_after(hello)))
    }

    /// Silence after which a peer is dead: our window, or as many of the
    /// peer's (announced) ticks if those are longer.
    fn dead_after(&self, hello: &Hello) -> Duration {
        let theirs = Duration::from_millis(hello.heartbeat_ms.into())
            .saturating_mul(self.cfg.heartbeat_misses);
        self.cfg.dead_after().max(theirs)
    }

    fn new_conn(&self, hello: &Hello, stream: &TcpStream, sealer: Sealer) -> io::Result<Arc<Conn>> {
        let group = crate::conn::Group {
            lanes: (self.cfg.lanes.min(usize::from(hello.lanes)).max(1)) as u8,
            index: 0,
            secret: hello.secret.clone(),
        };
        self.make_conn(
            hello.peer_info(PeerId(self.next_id())),
            hello,
            stream,
            sealer,
            group,
        )
    }

    fn make_conn(
        &self,
        info: PeerInfo,
        hello: &Hello,
        stream: &TcpStream,
        sealer: Sealer,
        group: crate::conn::Group,
    ) -> io::Result<Arc<Conn>> {
        let pings = self.cfg.name < info.name;
        Ok(Arc::new(Conn::new(
            info,
            stream.try_clone()?,
            sealer,
            crate::conn::Limits {
                max_frame: self.cfg.max_frame,
                max_message: self.cfg.max_message,
                compress_threshold: self.cfg.compress_threshold,
                busy_limit: self.cfg.busy_limit,
            },
            self.dead_after(hello),
            group,
            // One side pings (see `conn.rs`, "Heartbeat round trip").
            pings,
        )))
    }

    /// Makes `conn` the node's `Up` connection (caller holds `state`);
    /// returns a different connection it replaced, to be closed.
    fn install(&self, st: &mut State, conn: &Arc<Conn>) -> Option<Arc<Conn>> {
        let old = st
            .names
            .insert(conn.info.name.clone(), Slot::Up(conn.clone()));
        let mut peers = self.peers.write();
        peers.insert(conn.info.id, conn.clone());
        match old {
            Some(Slot::Up(old)) => {
                peers.remove(&old.info.id);
                Some(old)
            }
            _ => None,
        }
    }

    /// A connection being retired, by id (see `Transport::retire`).
    fn retiring(&self, peer: PeerId) -> Option<Arc<Conn>> {
        let r = self.retiring.lock();
        r.iter()
            .find(|(p, _)| *p == peer)
            .and_then(|(_, c)| c.upgrade())
    }

    /// Removes `conn` from the tables, if it is still there.
    fn remove(&self, conn: &Arc<Conn>) {
        let mut st = self.state.lock();
        if matches!(st.names.get(&conn.info.name), Some(Slot::Up(c)) if Arc::ptr_eq(c, conn)) {
            st.names.remove(&conn.info.name);
        }
        let mut peers = self.peers.write();
        if peers
            .get(&conn.info.id)
            .is_some_and(|c| Arc::ptr_eq(c, conn))
        {
            peers.remove(&conn.info.id);
        }
        drop(peers);
        drop(st);
        self.changed.notify_all();
    }

    /// Calls `peer_up`, then lets `connect` calls waiting for this node
    /// return it.
    fn announce(&self, conn: &Arc<Conn>) {
        self.handler.peer_up(&conn.info);
        conn.set_announced();
        // Taking the lock orders the flag before any waiter's check-then-wait.
        drop(self.state.lock());
        self.changed.notify_all();
    }

    /// Reports `peer_down` for `conn` unless that was done already.
    fn report_down(&self, conn: &Arc<Conn>) {
        if !conn.take_down_report() {
            return;
        }
        // An extra lane's reader counts down its first connection's (see
        // conn.rs, "Parallel lanes"): the last one reports.
        let main = if conn.is_lane() {
            match conn.main() {
                Some(m) => m,
                None => return,
            }
        } else {
            conn.clone()
        };
        if !main.reader_done() {
            return;
        }
        let conn = &main;
        self.remove(conn);
        let reason = conn.reason();
        let (name, id, addr) = (&conn.info.name, conn.info.id, conn.info.listen_addr);
        match reason {
            NetError::Disconnected | NetError::Shutdown => {
                log::debug!("graft-net: peer {name} ({addr}, {id}) down: {reason}")
            }
            NetError::Closed | NetError::Replaced => {
                log::info!("graft-net: peer {name} ({addr}, {id}) down: {reason}")
            }
            _ => log::warn!("graft-net: dropping peer {name} ({addr}, {id}): {reason}"),
        }
        self.handler.peer_down(&conn.info, &reason);
    }

    /// Drops a connection that was installed but never announced.
    fn abandon(&self, conn: &Arc<Conn>, reason: NetError) {
        conn.close(reason);
        conn.take_down_report();
        self.remove(conn);
    }

    fn run_reader(&self, conn: Arc<Conn>, mut reader: Reader) {
        // The handler is the user's code: if it panics, the connection goes
        // down as any other loss would (its thread would otherwise die with
        // the connection still up and never read again).
        let read = std::panic::AssertUnwindSafe(|| {
            conn.read_loop(&mut reader.src, &mut reader.dec, &*self.handler)
        });
        let reason = std::panic::catch_unwind(read).unwrap_or_else(panic_reason);
        conn.close(reason);
        self.report_down(&conn);
    }

    fn start_writer(&self, conn: &Arc<Conn>) -> Result<(), NetError> {
        let (c, tick) = (conn.clone(), self.cfg.heartbeat);
        self.spawn("graft-net-wr", move || c.write_loop(tick))
    }

    // ---- inbound ----

    /// The acceptor's decision (see the module docs), taken only after the
    /// initiator's key confirmation; `None` = duplicate. The verdict goes
    /// into the handshake's output; a kept connection is installed.
    #[allow(clippy::type_complexity)]
    fn commit_inbound(
        &self,
        hello: &Hello,
        stream: &TcpStream,
        hs: &mut Handshake,
        tls: Option<Box<TlsUp>>,
    ) -> Result<Option<(Arc<Conn>, InboundReader)>, NetError> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(NetError::Shutdown);
        }
        let keep = match st.names.get(&hello.name) {
            None => true,
            Some(Slot::Pending(_)) => hello.name < self.me.name,
            Some(Slot::Up(old)) => old.info.creation != hello.creation || old.is_closed(),
        };
        hs.verdict(keep)?;
        let mut tls = tls;
        if let Some(up) = tls.as_mut() {
            // The verdict goes in a TLS record, before the sealer moves
            // to the writer.
            let mut wire = Vec::new();
            up.sealer.seal(&hs.take_output(), &mut wire)?;
            std::io::Write::write_all(&mut &*stream, &wire)?;
        }
        if !keep {
            return Ok(None);
        }
        let (session, rest) = hs.take_session();
        let (sealer, opener, raw, plain) = match tls {
            None => {
                let (s, o) = session.split();
                (s, o, rest, Vec::new())
            }
            Some(up) => {
                let up = *up;
                (up.sealer, up.opener, up.raw, rest)
            }
        };
        let conn = self.new_conn(hello, stream, sealer)?;
        let replaced = self.install(&mut st, &conn);
        drop(st);
        self.changed.notify_all();
        if let Some(old) = replaced {
            old.close(NetError::Replaced);
        }
        Ok(Some((conn, (opener, raw, plain))))
    }

    // ---- outbound ----

    /// The name of a connected node that announced `addr`.
    fn find_addr(&self, addr: SocketAddr) -> Option<String> {
        (self.peers.read().values())
            .find(|c| c.info.listen_addr == addr && !c.is_closed())
            .map(|c| c.info.name.clone())
    }

    fn connect(self: &Arc<Self>, addr: SocketAddr) -> Result<PeerInfo, NetError> {
        let deadline = Instant::now() + self.cfg.connect_timeout;
        if let Some(name) = self.find_addr(addr) {
            return self.wait_for_name(&name, deadline);
        }
        // A duplicate that never comes up is the acceptor's view of a
        // connection we have closed and it has not seen close yet (a
        // disconnect and a quick reconnect): try again, until the deadline.
        let mut patience = Duration::from_millis(20);
        loop {
            match self.connect_once(addr, deadline, patience) {
                Err(NetError::Duplicate) if Instant::now() < deadline => {
                    patience = (patience * 2).min(Duration::from_millis(200));
                }
                r => return r,
            }
        }
    }

    /// One attempt of [`connect`](Self::connect); after a duplicate, waits
    /// up to `patience` for the other connection to come up, then gives
    /// `NetError::Duplicate`.
    fn connect_once(
        self: &Arc<Self>,
        addr: SocketAddr,
        deadline: Instant,
        patience: Duration,
    ) -> Result<PeerInfo, NetError> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        if timeout.is_zero() {
            return Err(NetError::Timeout);
        }
        if self.state.lock().closed {
            return Err(NetError::Shutdown);
        }
        let mut stream = dial(addr, timeout, self.cfg.unsent_limit)?;
        let token = self.next_id();
        self.track(token, &stream)?;
        let res = match &self.cfg.tls {
            None => self.outbound_handshake(&mut stream, None, token, deadline, patience),
            Some(cfg) => crate::tls::connect(&mut stream, cfg, deadline)
                .and_then(|up| {
                    self.outbound_handshake(&mut stream, Some(up), token, deadline, patience)
                })
                .map_err(crate::tls::alert_as_handshake),
        };
        self.untrack(token);
        if res.is_err() && self.state.lock().closed {
            return Err(NetError::Shutdown);
        }
        let (conn, reader) = match res? {
            Connected::Existing(p) => return Ok(p),
            Connected::New(conn, reader) => (conn, reader),
        };
        drop(stream);
        if conn.group.lanes > 1 {
            let lanes = match self.open_lanes(addr, &conn, deadline) {
                Ok(l) => l,
                Err(e) => {
                    if self.state.lock().closed {
                        return Err(NetError::Shutdown);
                    }
                    return Err(e);
                }
            };
            let (conns, readers): (Vec<_>, Vec<_>) = lanes.into_iter().unzip();
            conn.set_lanes(conns);
            self.announce(&conn);
            self.join_group(&conn, reader, readers);
            return match conn.is_closed() {
                false => Ok(conn.info.clone()),
                true => Err(conn.reason()),
            };
        }
        self.start_outbound(&conn, reader)
    }

    /// An outbound connection (one lane) that is up: announced, and read
    /// and written from here on.
    fn start_outbound(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        reader: Reader,
    ) -> Result<PeerInfo, NetError> {
        self.announce(conn);
        if self.cfg.io == IoMode::Poller {
            if let Err(e) = self.join_io(conn, reader) {
                conn.close(e.clone());
                self.report_down(conn);
                return Err(e);
            }
            return Ok(conn.info.clone());
        }
        let (c, me) = (conn.clone(), self.clone());
        if let Err(e) = self.spawn("graft-net-rd", move || me.run_reader(c, reader)) {
            conn.close(e.clone());
            self.report_down(conn);
            return Err(e);
        }
        if let Err(e) = self.start_writer(conn) {
            conn.close(e.clone());
            return Err(e);
        }
        Ok(conn.info.clone())
    }

    // ---- outbound on the poller (`outbound.rs`) ----

    /// [`Transport::connect_then`].
    fn connect_then(self: &Arc<Self>, addr: SocketAddr, done: Done) {
        let deadline = Instant::now() + self.cfg.connect_timeout;
        {
            let st = self.state.lock();
            if !st.closed {
                self.dials.lock().push(Dial {
                    addr,
                    deadline,
                    done,
                });
                drop(st);
                if let Err(e) = self.io[0].poller.notify() {
                    log::warn!("graft-net: cannot wake the I/O thread: {e}");
                }
                return;
            }
        }
        done(Err(NetError::Shutdown));
    }

    /// Step 2 of `outbound.rs` for the dials queued, while fewer than
    /// `max_pending_handshakes` are in flight: an answer at once, or a
    /// socket connecting.
    fn start_dials(
        &self,
        queued: &mut std::collections::VecDeque<Dial>,
        outbound: &mut HashMap<usize, Outbound>,
        next_key: &mut usize,
        finished: &mut Vec<(Done, Result<PeerInfo, NetError>)>,
    ) {
        while outbound.len() < self.cfg.max_pending_handshakes {
            let Some(dial) = queued.pop_front() else {
                return;
            };
            if let Some(info) = (self.find_addr(dial.addr)).and_then(|n| self.announced_named(&n)) {
                finished.push((dial.done, Ok(info)));
                continue;
            }
            let (key, token) = (*next_key, self.next_id());
            *next_key += 1;
            let started = Outbound::start(
                dial,
                &self.me,
                self.cfg.tls.as_ref(),
                None,
                &self.io[0].poller,
                key,
                token,
                self.cfg.unsent_limit,
            );
            match started {
                Ok(o) => {
                    outbound.insert(key, o);
                }
                Err((dial, e)) => finished.push((dial.done, Err(e))),
            }
        }
    }

    /// At an outbound connection's `Register` (step 4): over TLS the
    /// peer's certificate must name the node that answered, as in
    /// `connect`; then the name's slot (`true`: ours to claim).
    /// An extra lane claims no slot: the node that answers must be its
    /// first connection's.
    fn register_dialed(
        &self,
        o: &Outbound,
        hello: &Hello,
        groups: &HashMap<usize, LaneGroup>,
    ) -> Result<bool, NetError> {
        self.check_cert(o.tls_cert(), &hello.name)?;
        let Some((of, req)) = &o.lane else {
            return self.register_outbound(o.token, hello);
        };
        let main = &(groups.get(of))
            .ok_or_else(|| NetError::Handshake("the lane's first connection is gone".into()))?
            .main;
        same_node(main, req.index, hello)?;
        Ok(true)
    }

    /// A connecting side's check of the node that answered: over TLS, the
    /// certificate the TLS handshake showed must name it.
    fn check_cert(
        &self,
        cert: Option<&rustls::pki_types::CertificateDer<'static>>,
        name: &str,
    ) -> Result<(), NetError> {
        match (&self.cfg.tls, cert) {
            (None, _) => Ok(()),
            (Some(cfg), Some(cert)) => crate::tls::check_name(cfg, cert, name),
            (Some(_), None) => Err(NetError::Handshake("no TLS certificate".into())),
        }
    }

    /// The announced connection to `name`.
    fn announced_named(&self, name: &str) -> Option<PeerInfo> {
        self.state.lock().announced(name)
    }

    /// Steps 3 and 4 of `outbound.rs` for the connection under `key`; what
    /// ended goes to `finished`.
    fn drive_outbound(
        self: &Arc<Self>,
        (outbound, groups, next_key): Dialing<'_>,
        key: usize,
        finished: &mut Vec<(Done, Result<PeerInfo, NetError>)>,
    ) {
        let Some(o) = outbound.get_mut(&key) else {
            return;
        };
        let end = match o.drive(&self.io[0].poller, &self.me) {
            Progress::Waiting => return,
            Progress::Register(hello) => match self.register_dialed(o, &hello, groups) {
                Err(e) => Progress::Failed(e),
                Ok(keep) => {
                    if keep && o.lane.is_none() {
                        o.registered = Some(hello.name.clone());
                    }
                    match o.confirm(keep) {
                        Err(e) => Progress::Failed(e),
                        // Now the acceptor's verdict.
                        Ok(()) if keep => return,
                        Ok(()) => Progress::Duplicate(hello),
                    }
                }
            },
            end => end,
        };
        let o = outbound.remove(&key).expect("driven");
        if let Some((of, req)) = &o.lane {
            let (of, index) = (*of, req.index);
            return self.lane_ended(outbound, groups, (of, index), o, end, finished);
        }
        let (addr, deadline) = (o.addr, o.deadline);
        let (stream, hs, (done, token, registered)) = o.into_parts();
        let res = match end {
            Progress::Up(hello) => match hs {
                Some((mut hs, tls)) => {
                    let (session, rest) = hs.take_session();
                    match self.up_outbound(stream, &hello, token, session, tls, rest) {
                        Ok(Upped::Announced(info)) => Ok(info),
                        Ok(Upped::Lanes(main, reader)) => {
                            let g = LaneGroup {
                                main,
                                reader,
                                lanes: Vec::new(),
                                done,
                            };
                            let dials = (outbound, groups, next_key);
                            return self.dial_lanes(dials, key, g, (addr, deadline), finished);
                        }
                        Err(e) => Err(e),
                    }
                }
                // `Up` comes from the cookie handshake only.
                None => Err(NetError::Handshake("up with no handshake".into())),
            },
            Progress::Duplicate(hello) => {
                log::debug!(
                    "graft-net: already connected to {} (or connecting)",
                    hello.name
                );
                self.announced_named(&hello.name).ok_or(NetError::Duplicate)
            }
            Progress::Failed(e) => Err(e),
            Progress::Waiting | Progress::Register(_) => unreachable!("handled above"),
        };
        if let Err(e) = &res {
            self.release(registered.as_deref(), token);
            if !matches!(
                e,
                NetError::Auth { .. } | NetError::Shutdown | NetError::Duplicate
            ) {
                log::warn!("graft-net: connecting to {addr} failed: {e}");
            }
        }
        finished.push((done, res));
    }

    /// An outbound connection the acceptor keeps: committed to its slot,
    /// announced, and served; with extra lanes, committed only.
    fn up_outbound(
        self: &Arc<Self>,
        stream: TcpStream,
        hello: &Hello,
        token: u64,
        session: crate::session::Session,
        tls: Option<TlsUp>,
        rest: Vec<u8>,
    ) -> Result<Upped, NetError> {
        if self.cfg.io == IoMode::Threads {
            stream.set_nonblocking(false)?;
        }
        self.configure(&stream, hello)?;
        let (sealer, opener, raw, plain) =
            record_keys(tls.map(|up| (up, Vec::new())), session, rest);
        let conn = self.commit_outbound(token, hello, &stream, sealer)?;
        let reader = Reader {
            src: SealedReader::new(stream.try_clone()?, opener, &raw).with_plain(plain),
            dec: Decoder::new(READ_BUF, self.cfg.wire_frame_max()),
        };
        if conn.group.lanes > 1 {
            return Ok(Upped::Lanes(conn, reader));
        }
        self.start_outbound(&conn, reader).map(Upped::Announced)
    }

    /// Starts an outbound attempt for each extra lane of `g` (under the
    /// first connection's `key`), with the connect's deadline.
    fn dial_lanes(
        self: &Arc<Self>,
        (outbound, groups, next_key): Dialing<'_>,
        key: usize,
        mut g: LaneGroup,
        (addr, deadline): (SocketAddr, Instant),
        finished: &mut Vec<(Done, Result<PeerInfo, NetError>)>,
    ) {
        let (lanes, g_main) = (g.main.group.lanes, g.main.clone());
        g.lanes = (1..lanes).map(|_| None).collect();
        groups.insert(key, g);
        for index in 1..lanes {
            let claim = lane_claim(&g_main, index);
            let dial = Dial {
                addr,
                deadline,
                done: Box::new(|_| {}), // the group's `done` tells
            };
            let (k, token) = (*next_key, self.next_id());
            *next_key += 1;
            let started = Outbound::start(
                dial,
                &self.me,
                self.cfg.tls.as_ref(),
                Some((key, claim)),
                &self.io[0].poller,
                k,
                token,
                self.cfg.unsent_limit,
            );
            match started {
                Ok(o) => {
                    outbound.insert(k, o);
                }
                Err((_, e)) => return self.lanes_failed(outbound, groups, key, e, finished),
            }
        }
    }

    /// The extra lane `index` of the group under `of` ended: one more lane
    /// up (the group announced and served once all are), or the group
    /// dropped.
    fn lane_ended(
        self: &Arc<Self>,
        outbound: &mut HashMap<usize, Outbound>,
        groups: &mut HashMap<usize, LaneGroup>,
        (of, index): (usize, u8),
        o: Outbound,
        end: Progress,
        finished: &mut Vec<(Done, Result<PeerInfo, NetError>)>,
    ) {
        let (stream, hs, _) = o.into_parts();
        let made = match (end, hs) {
            (Progress::Up(hello), Some((mut hs, tls))) => match groups.get(&of) {
                Some(g) => {
                    let (session, rest) = hs.take_session();
                    let tls = tls.map(|up| (up, Vec::new()));
                    self.lane_conn(&g.main, index, &hello, &stream, session, tls, rest)
                }
                None => Err(NetError::Handshake(
                    "the lane's first connection is gone".into(),
                )),
            },
            (Progress::Duplicate(h), _) => Err(NetError::Handshake(format!(
                "lane {index} refused by {} as a duplicate",
                h.name
            ))),
            (Progress::Failed(e), _) => Err(e),
            _ => Err(NetError::Handshake("up with no handshake".into())),
        };
        let lane = match made {
            Ok(lane) => lane,
            Err(e) => return self.lanes_failed(outbound, groups, of, e, finished),
        };
        let Some(g) = groups.get_mut(&of) else {
            return;
        };
        g.lanes[usize::from(index) - 1] = Some(lane);
        if g.lanes.iter().any(Option::is_none) {
            return;
        }
        let g = groups.remove(&of).expect("complete");
        let (conns, readers): (Vec<_>, Vec<_>) = g.lanes.into_iter().flatten().unzip();
        g.main.set_lanes(conns);
        self.announce(&g.main);
        self.join_group(&g.main, g.reader, readers);
        let res = match g.main.is_closed() {
            false => Ok(g.main.info.clone()),
            true => Err(g.main.reason()),
        };
        finished.push((g.done, res));
    }

    /// A lane of the group under `of` failed with `e`: the group's other
    /// attempts stop, its connections close, and its `done` is told.
    fn lanes_failed(
        &self,
        outbound: &mut HashMap<usize, Outbound>,
        groups: &mut HashMap<usize, LaneGroup>,
        of: usize,
        e: NetError,
        finished: &mut Vec<(Done, Result<PeerInfo, NetError>)>,
    ) {
        let Some(g) = groups.remove(&of) else {
            return;
        };
        outbound.retain(|_, o| !matches!(&o.lane, Some((k, _)) if *k == of));
        log::warn!(
            "graft-net: a lane to {} failed: {e}; dropping the peer",
            g.main.info.name
        );
        for (c, _) in g.lanes.iter().flatten() {
            self.abandon(c, e.clone());
        }
        self.abandon(&g.main, e.clone());
        finished.push((g.done, Err(e)));
    }

    /// Calls each `done` with its result, a panic caught and logged: the
    /// I/O thread goes on.
    fn finish(finished: Vec<(Done, Result<PeerInfo, NetError>)>) {
        for (done, res) in finished {
            let run = std::panic::AssertUnwindSafe(move || done(res));
            if let Err(p) = std::panic::catch_unwind(run) {
                log::error!(
                    "graft-net: a connect's completion panicked: {}",
                    panic_reason(p)
                );
            }
        }
    }

    fn outbound_handshake(
        &self,
        stream: &mut TcpStream,
        tls: Option<TlsUp>,
        token: u64,
        deadline: Instant,
        patience: Duration,
    ) -> Result<Connected, NetError> {
        let mut registered = None;
        let cert = tls.as_ref().map(|up| up.cert.clone());
        let register = |h: &Hello| {
            self.check_cert(cert.as_ref(), &h.name)?;
            let ok = self.register_outbound(token, h)?;
            if ok {
                registered = Some(h.name.clone());
            }
            Ok(ok)
        };
        let mut tio = match tls {
            Some(up) => Some(TlsIo::new(stream.try_clone()?, up)),
            None => None,
        };
        let outcome = match tio.as_mut() {
            Some(io) => handshake::initiate(io, &self.me, deadline, register),
            None => handshake::initiate(stream, &self.me, deadline, register),
        };
        let mut opened = None;
        let res = match outcome {
            Ok((Outcome::Up(hello), session, rest)) => self
                .configure(stream, &hello)
                .map_err(NetError::from)
                .and_then(|()| {
                    let (sealer, opener, raw, plain) =
                        record_keys(tio.take().map(|io| (io.up, io.plain)), session, rest);
                    opened = Some((opener, raw, plain));
                    self.commit_outbound(token, &hello, stream, sealer)
                }),
            Ok((Outcome::Duplicate(hello), _, _)) => {
                self.release(registered.as_deref(), token);
                log::debug!(
                    "graft-net: already connected to {}; waiting for it",
                    hello.name
                );
                let until = deadline.min(Instant::now() + patience);
                return match self.wait_for_name(&hello.name, until) {
                    Err(NetError::Timeout) if until < deadline => Err(NetError::Duplicate),
                    r => r.map(Connected::Existing),
                };
            }
            Err(e) => Err(e),
        };
        match res {
            Ok(conn) => {
                let (opener, raw, plain) = opened.expect("the session");
                let reader = Reader {
                    src: SealedReader::new(stream.try_clone()?, opener, &raw).with_plain(plain),
                    dec: Decoder::new(READ_BUF, self.cfg.wire_frame_max()),
                };
                Ok(Connected::New(conn, reader))
            }
            Err(e) => {
                self.release(registered.as_deref(), token);
                Err(e)
            }
        }
    }

    /// The initiator's claim on the slot; `false` = yield to another
    /// connection.
    fn register_outbound(&self, token: u64, hello: &Hello) -> Result<bool, NetError> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(NetError::Shutdown);
        }
        match st.names.get(&hello.name) {
            None => {}
            Some(Slot::Pending(_)) => return Ok(false),
            Some(Slot::Up(old)) if old.info.creation != hello.creation || old.is_closed() => {
                let old = old.clone();
                self.peers.write().remove(&old.info.id);
                old.close(NetError::Replaced);
            }
            Some(Slot::Up(_)) => return Ok(false),
        }
        st.names.insert(hello.name.clone(), Slot::Pending(token));
        Ok(true)
    }

    fn commit_outbound(
        &self,
        token: u64,
        hello: &Hello,
        stream: &TcpStream,
        sealer: Sealer,
    ) -> Result<Arc<Conn>, NetError> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(NetError::Shutdown);
        }
        if !matches!(st.names.get(&hello.name), Some(Slot::Pending(t)) if *t == token) {
            // Ruled out by the duplicate rule (module docs); refuse rather
            // than keep two connections.
            log::error!(
                "graft-net: conflicting connections to {}; dropping one",
                hello.name
            );
            return Err(NetError::Handshake(format!(
                "conflicting connection to {}",
                hello.name
            )));
        }
        let conn = self.new_conn(hello, stream, sealer)?;
        self.install(&mut st, &conn);
        drop(st);
        self.changed.notify_all();
        Ok(conn)
    }

    /// Frees the slot of a failed or yielding attempt, if it still holds it.
    fn release(&self, name: Option<&str>, token: u64) {
        let Some(name) = name else { return };
        let mut st = self.state.lock();
        if matches!(st.names.get(name), Some(Slot::Pending(t)) if *t == token) {
            st.names.remove(name);
        }
        drop(st);
        self.changed.notify_all();
    }

    /// Waits until `name` is up and announced (by another connection), or
    /// the deadline.
    fn wait_for_name(&self, name: &str, deadline: Instant) -> Result<PeerInfo, NetError> {
        let mut st = self.state.lock();
        loop {
            if st.closed {
                return Err(NetError::Shutdown);
            }
            if let Some(info) = st.announced(name) {
                return Ok(info);
            }
            if self.changed.wait_until(&mut st, deadline).timed_out() {
                return st.announced(name).ok_or(NetError::Timeout);
            }
        }
    }

    // ---- shutdown ----

    fn shutdown(&self) {
        let (conns, socks) = {
            let mut st = self.state.lock();
            st.closed = true;
            let socks: Vec<TcpStream> = st
                .handshaking
                .values()
                .filter_map(|s| s.try_clone().ok())
                .collect();
            let conns: Vec<Arc<Conn>> = self.peers.read().values().cloned().collect();
            (conns, socks)
        };
        self.changed.notify_all();
        self.stopping.notify_all();
        self.wake_acceptor();
        for s in socks {
            let _ = s.shutdown(Shutdown::Both);
        }
        for c in conns {
            c.close(NetError::Shutdown);
        }
        for f in std::mem::take(&mut *self.forming.lock()) {
            self.abandon_forming(f, NetError::Shutdown);
        }
        let me = thread::current().id();
        loop {
            let handles = std::mem::take(&mut self.state.lock().threads);
            if handles.is_empty() {
                break;
            }
            for h in handles {
                if h.thread().id() != me {
                    let _ = h.join();
                }
            }
        }
    }

    fn wake_acceptor(&self) {
        // Refuse connections from now on (on Linux, a connect to a shut-down
        // listener is reset), and wake the poller.
        let _ = self.listener.shutdown(Shutdown::Both);
        for t in &self.io {
            if let Err(e) = t.poller.notify() {
                log::warn!("graft-net: cannot wake an I/O thread: {e}");
            }
        }
    }
}

// # Lanes
//
// With `NetConfig::lanes(n)` (see conn.rs, "Parallel lanes", and
// handshake.rs, "Lanes"), the initiator, once its first connection is
// committed (in the tables, not announced), opens lanes 1 to n-1 one after
// the other, each a full handshake on a socket of its own (TLS too, when
// configured) that names the session and carries its token. The acceptor
// keeps the first connection in `forming` (not announced, not read: the
// initiator sends nothing on it but heartbeats until it is up) and
// attaches each lane that checks out. With the last one it announces the
// peer, then sends that lane's verdict; the initiator announces when the
// verdict comes. So on both sides every lane is up before the peer is,
// no frame is sent before then, and a key's lane never changes: that is
// the whole ordering argument. Everything of one peer is served by one
// I/O thread, so frames of all its lanes are delivered one at a time, as
// the `Handler` contract says. A peer whose lanes do not all come up within
// the handshake timeout is dropped (never announced); a lane that fails
// later takes the whole peer down, once.

impl Inner {
    /// The initiator's extra lanes, in order; on failure every lane and
    /// the first connection are closed (nothing was announced).
    fn open_lanes(
        self: &Arc<Self>,
        addr: SocketAddr,
        main: &Arc<Conn>,
        deadline: Instant,
    ) -> Result<Vec<(Arc<Conn>, Reader)>, NetError> {
        let mut lanes = Vec::new();
        for index in 1..main.group.lanes {
            match self.open_lane(addr, main, index, deadline) {
                Ok(l) => lanes.push(l),
                Err(e) => {
                    log::warn!(
                        "graft-net: lane {index} to {} failed: {e}; dropping the peer",
                        main.info.name
                    );
                    for (c, _) in &lanes {
                        self.abandon(c, e.clone());
                    }
                    self.abandon(main, e.clone());
                    return Err(e);
                }
            }
        }
        Ok(lanes)
    }

    fn open_lane(
        self: &Arc<Self>,
        addr: SocketAddr,
        main: &Arc<Conn>,
        index: u8,
        deadline: Instant,
    ) -> Result<(Arc<Conn>, Reader), NetError> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        if timeout.is_zero() {
            return Err(NetError::Timeout);
        }
        let mut stream = dial(addr, timeout, self.cfg.unsent_limit)?;
        let token = self.next_id();
        self.track(token, &stream)?;
        let res = self.lane_handshake(&mut stream, main, index, deadline);
        self.untrack(token);
        res
    }

    fn lane_handshake(
        &self,
        stream: &mut TcpStream,
        main: &Arc<Conn>,
        index: u8,
        deadline: Instant,
    ) -> Result<(Arc<Conn>, Reader), NetError> {
        let tls = match &self.cfg.tls {
            None => None,
            Some(cfg) => Some(crate::tls::connect(stream, cfg, deadline)?),
        };
        let me = self.me.with_lane(lane_claim(main, index));
        let cert = tls.as_ref().map(|up| up.cert.clone());
        let check = |h: &Hello| {
            self.check_cert(cert.as_ref(), &h.name)?;
            same_node(main, index, h)?;
            Ok(true)
        };
        let mut tio = match tls {
            Some(up) => Some(TlsIo::new(stream.try_clone()?, up)),
            None => None,
        };
        let outcome = match tio.as_mut() {
            Some(io) => handshake::initiate(io, &me, deadline, check),
            None => handshake::initiate(stream, &me, deadline, check),
        };
        let (hello, session, rest) = match outcome? {
            (Outcome::Up(h), s, r) => (h, s, r),
            (Outcome::Duplicate(h), _, _) => {
                return Err(NetError::Handshake(format!(
                    "lane {index} refused by {} as a duplicate",
                    h.name
                )))
            }
        };
        let tls = tio.take().map(|io| (io.up, io.plain));
        self.lane_conn(main, index, &hello, stream, session, tls, rest)
    }

    /// Extra lane `index` of `main`, its handshake done (on `connect`'s
    /// thread or on the poller): the connection and its reader.
    #[allow(clippy::too_many_arguments)]
    fn lane_conn(
        &self,
        main: &Arc<Conn>,
        index: u8,
        hello: &Hello,
        stream: &TcpStream,
        session: crate::session::Session,
        tls: Option<(TlsUp, Vec<u8>)>,
        rest: Vec<u8>,
    ) -> Result<(Arc<Conn>, Reader), NetError> {
        self.configure(stream, hello)?;
        let (sealer, opener, raw, plain) = record_keys(tls, session, rest);
        let group = crate::conn::Group {
            lanes: main.group.lanes,
            index,
            secret: main.group.secret.clone(),
        };
        let conn = self.make_conn(main.info.clone(), hello, stream, sealer, group)?;
        conn.set_main(main);
        let reader = Reader {
            src: SealedReader::new(stream.try_clone()?, opener, &raw).with_plain(plain),
            dec: Decoder::new(READ_BUF, self.cfg.wire_frame_max()),
        };
        Ok((conn, reader))
    }

    /// Hands an announced peer and its lanes (`set_lanes` done) to one I/O
    /// thread; whatever cannot join is closed and counted down.
    fn join_group(&self, main: &Arc<Conn>, reader: Reader, lanes: Vec<Reader>) {
        let i = self.next_io.fetch_add(1, Ordering::Relaxed) % self.io.len();
        let conns = std::iter::once(main.clone()).chain(main.extra_lanes().iter().cloned());
        let readers = std::iter::once(reader).chain(lanes);
        let mut failed = false;
        for (c, r) in conns.zip(readers) {
            if !failed {
                if let Err(e) = self.join_io_at(i, &c, r) {
                    failed = true;
                    c.close(e);
                }
            }
            if failed {
                self.report_down(&c);
            }
        }
    }

    /// Acceptor: keeps an accepted first connection until its lanes are up.
    fn form(&self, main: Arc<Conn>, reader: Reader) {
        let n = usize::from(main.group.lanes);
        let f = Forming {
            main,
            reader,
            lanes: (1..n).map(|_| None).collect(),
            deadline: Instant::now() + self.cfg.handshake_timeout,
        };
        let mut forming = self.forming.lock();
        if self.state.lock().closed {
            drop(forming);
            return self.abandon_forming(f, NetError::Shutdown);
        }
        forming.push(f);
    }

    /// Why a lane's claim does not hold (see handshake.rs, "Lanes"), or
    /// where its session is in `forming`.
    fn check_lane(forming: &[Forming], hello: &Hello) -> Result<usize, String> {
        let Some(at) = forming.iter().position(|f| {
            f.main.info.name == hello.name
                && f.main.info.creation == hello.creation
                && !f.main.is_closed()
                && f.main.group.secret.session() == hello.session
        }) else {
            return Err(format!(
                "lane {} for an unknown session (no connection of {} is waiting for its lanes)",
                hello.lane, hello.name
            ));
        };
        let main = &forming[at].main;
        let n = main.group.lanes;
        let s = &hello.secret;
        if !main
            .group
            .secret
            .verifies(hello.lane, hello.lanes, &s.transcript, &s.token)
        {
            return Err(format!("lane {}: a bad lane token", hello.lane));
        }
        if hello.lanes != n || hello.lane >= n {
            return Err(format!(
                "lane {} of {} is out of range (the session has {n} lanes)",
                hello.lane, hello.lanes
            ));
        }
        if forming[at].lanes[usize::from(hello.lane) - 1].is_some() {
            return Err(format!("lane {} is up already (a duplicate)", hello.lane));
        }
        Ok(at)
    }

    /// Acceptor: an extra lane proved itself; attach it or refuse it.
    fn decided_lane(self: &Arc<Self>, mut p: Pending, hello: Hello, tls: Option<Box<TlsUp>>) {
        let remote = p.remote;
        let mut forming = self.forming.lock();
        let hs = p.hs.as_mut().expect("a handshake");
        let at = match Self::check_lane(&forming, &hello) {
            Ok(at) => at,
            Err(why) => {
                drop(forming);
                Stats::bump(&self.stats.failed);
                log::warn!("graft-net: refusing {}@{remote}: {why}", hello.name);
                if hs.verdict_refused(&why).is_ok() {
                    let _ = self.seal_verdict(hs, p.sock.get(), tls);
                    let _ = p.flush();
                }
                return;
            }
        };
        let made = hs
            .verdict(true)
            .and_then(|()| self.seal_verdict(hs, p.sock.get(), tls))
            .and_then(|up| {
                let (session, rest) = hs.take_session();
                let (sealer, opener, raw, plain) = match up {
                    None => {
                        let (s, o) = session.split();
                        (s, o, rest, Vec::new())
                    }
                    Some(up) => (up.sealer, up.opener, up.raw, rest),
                };
                let main = &forming[at].main;
                let group = crate::conn::Group {
                    lanes: main.group.lanes,
                    index: hello.lane,
                    secret: main.group.secret.clone(),
                };
                let conn =
                    self.make_conn(main.info.clone(), &hello, p.sock.get(), sealer, group)?;
                conn.set_main(main);
                Ok((conn, (opener, raw, plain)))
            });
        let (conn, opened) = match made {
            Ok(x) => x,
            Err(e) => {
                Stats::bump(&self.stats.failed);
                log::warn!(
                    "graft-net: lane {} of {}@{remote}: {e}",
                    hello.lane,
                    hello.name
                );
                let f = forming.remove(at);
                drop(forming);
                return self.abandon_forming(f, e);
            }
        };
        let id = conn.info.id;
        forming[at].lanes[usize::from(hello.lane) - 1] = Some((conn.clone(), None));
        let complete = forming[at].lanes.iter().all(|l| l.is_some());
        if complete {
            let main = forming[at].main.clone();
            let lanes = forming[at].lanes.iter().flatten().map(|(c, _)| c.clone());
            main.set_lanes(lanes.collect());
            drop(forming);
            // Before the last verdict leaves: the initiator sends only once
            // it has it.
            self.announce(&main);
        } else {
            drop(forming);
        }
        let sent = p.flush();
        let stream = p.sock.into_inner();
        let mut forming = self.forming.lock();
        let Some(at) = forming.iter().position(|f| f.main.info.id == id) else {
            return; // shut down or expired meanwhile: closed already
        };
        if let Err(e) = sent {
            Stats::bump(&self.stats.failed);
            log::warn!(
                "graft-net: lane {} of {}@{remote}: {e}",
                hello.lane,
                hello.name
            );
            let f = forming.remove(at);
            drop(forming);
            return self.abandon_forming(f, e);
        }
        Stats::bump(&self.stats.completed);
        let reader = Reader {
            src: SealedReader::new(stream, opened.0, &opened.1).with_plain(opened.2),
            dec: Decoder::new(READ_BUF, self.cfg.wire_frame_max()),
        };
        let slot = forming[at].lanes[usize::from(hello.lane) - 1]
            .as_mut()
            .expect("reserved");
        slot.1 = Some(reader);
        if complete {
            let f = forming.remove(at);
            drop(forming);
            let readers = f.lanes.into_iter().map(|l| l.and_then(|(_, r)| r));
            let readers: Vec<Reader> = readers.map(|r| r.expect("every lane's reader")).collect();
            self.join_group(&f.main, f.reader, readers);
        }
    }

    /// The verdict in the handshake's output goes in a TLS record, over
    /// TLS (as in `commit_inbound`); hands the TLS state back.
    fn seal_verdict(
        &self,
        hs: &mut Handshake,
        stream: &TcpStream,
        tls: Option<Box<TlsUp>>,
    ) -> Result<Option<Box<TlsUp>>, NetError> {
        let mut tls = tls;
        if let Some(up) = tls.as_mut() {
            let mut wire = Vec::new();
            up.sealer.seal(&hs.take_output(), &mut wire)?;
            std::io::Write::write_all(&mut &*stream, &wire)?;
        }
        Ok(tls)
    }

    /// Drops peers whose lanes did not come up in time.
    fn expire_forming(&self, now: Instant) {
        let expired: Vec<Forming> = {
            let mut forming = self.forming.lock();
            if forming.iter().all(|f| f.deadline > now) {
                return;
            }
            let (gone, keep) = std::mem::take(&mut *forming)
                .into_iter()
                .partition(|f| f.deadline <= now);
            *forming = keep;
            gone
        };
        for f in expired {
            log::warn!(
                "graft-net: {}: its lanes did not come up within {:?}; dropped",
                f.main.info.name,
                self.cfg.handshake_timeout
            );
            self.abandon_forming(f, NetError::Timeout);
        }
    }

    /// Closes a peer that was never announced, and its lanes.
    fn abandon_forming(&self, f: Forming, reason: NetError) {
        for (c, _) in f.lanes.iter().flatten() {
            self.abandon(c, reason.clone());
        }
        self.abandon(&f.main, reason);
    }
}
