//! Outbound handshakes on the poller
//! ([`Transport::connect_then`](crate::Transport::connect_then)): a
//! connection this node opens is driven to its end by the first I/O
//! thread, as inbound ones are (`pending.rs`), so that a node connecting to
//! many peers at once holds no thread per connection.
//!
//! # Protocol (who touches what, in which order)
//!
//! 1. The caller queues a [`Dial`] (`Inner::dials`, under the transport's
//!    `state` lock, so that none is queued after shutdown drained the
//!    queue) and wakes I/O thread 0. Everything after this is that thread's.
//! 2. It takes the dial: a node already up and announced at that address
//!    is the answer at once; otherwise a non-blocking socket starts its
//!    `connect` and is registered for writability under a key of its own.
//! 3. Writable: `SO_ERROR` says whether the connect succeeded; the
//!    handshake's first message (preface and Noise, written into the
//!    [`Handshake`] when it was made) goes out, and the interest goes back
//!    to readable.
//! 4. Readable: the bytes go to the initiator's [`Handshake`]. At
//!    [`Progress::Register`] the thread claims the node's name slot exactly
//!    as a blocking `connect` does (see the transport's "Two connections
//!    between the same nodes") and confirms; at [`Progress::Up`] it
//!    commits, announces and hands the connection to an I/O thread; at
//!    [`Progress::Duplicate`] it frees the slot.
//! 5. `done` is called once, on I/O thread 0, with no lock held: with the
//!    peer, or with the error. Past the deadline (`connect_timeout` from
//!    the call) the attempt fails with `Timeout`; at shutdown, with
//!    `Shutdown`.
//!
//! With TLS, step 3 writes the TLS client's first flight instead, and
//! step 4 feeds what it reads to the TLS handshake (rustls is sans I/O:
//! [`PendingTls`], as the accepting side uses) until it is up; only then is
//! the cookie handshake made, bound to that TLS connection (its exporter
//! value), and its messages travel in TLS records. At step 4's `Register`
//! the peer's certificate must name the node that answered
//! (`tls::check_name`), as in a blocking `connect`.
//!
//! # Extra lanes
//!
//! With [`lanes`](crate::NetConfig::lanes) above 1, a first connection
//! that is up is committed to its name's slot but not announced: the
//! transport keeps it in a `LaneGroup` and starts an outbound attempt for
//! each extra lane (`Outbound::lane`: the first connection's key and the
//! lane's claim, which its handshake carries). A lane's `Register` claims
//! no slot: the node that answers must be the first connection's (name
//! and creation) and, over TLS, its certificate must name it. Once every
//! lane is up, the group is announced and joins an I/O thread together,
//! and `done` is told; if any lane fails (or runs out of time, or the
//! transport shuts down) the whole group is dropped and `done` told why,
//! as `connect` does. So a connect with lanes holds no thread either.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};

use crate::handshake::{Handshake, Hello, Identity, LaneReq, Step};
use crate::poll::{Poller, Registered};
use crate::tls::{PendingTls, TlsHandshake, TlsUp};
use crate::{NetError, PeerInfo, TlsConfig};

/// What is told how an outbound connection ended.
pub(crate) type Done = Box<dyn FnOnce(Result<PeerInfo, NetError>) + Send>;

/// What an attempt leaves to be told and released: `done`, its token and
/// the name whose slot it holds, if any.
pub(crate) type Abandoned = (Done, u64, Option<String>);

/// A connect asked for and not started yet (step 1).
pub(crate) struct Dial {
    pub(crate) addr: SocketAddr,
    pub(crate) deadline: Instant,
    pub(crate) done: Done,
}

/// One outbound connection in its handshake (steps 2-4).
pub(crate) struct Outbound {
    sock: Registered<TcpStream>,
    key: usize,
    pub(crate) addr: SocketAddr,
    /// The attempt's token in the name table (`Slot::Pending`).
    pub(crate) token: u64,
    pub(crate) deadline: Instant,
    /// Whether the connect has finished and the first message gone out.
    started: bool,
    /// The cookie handshake; with TLS, made once TLS is up (it is bound
    /// to that TLS connection).
    hs: Option<Handshake>,
    /// With TLS: its handshake, then the records the cookie handshake
    /// travels in.
    tls: Option<PendingTls>,
    /// The name whose slot this attempt holds, once it holds one.
    pub(crate) registered: Option<String>,
    /// An extra lane: the key of its group's first connection, and its
    /// claim (see "Extra lanes").
    pub(crate) lane: Option<(usize, LaneReq)>,
    done: Done,
}

/// What driving an outbound connection came to.
#[derive(Debug)]
pub(crate) enum Progress {
    /// Waiting for the socket.
    Waiting,
    /// The acceptor proved the cookie and is who it says: claim the slot,
    /// then [`Outbound::confirm`].
    Register(Hello),
    /// The acceptor keeps this connection.
    Up(Hello),
    /// The acceptor keeps another connection between the two nodes.
    Duplicate(Hello),
    /// Failed; drop it.
    Failed(NetError),
}

/// The initiator's handshake: this node's, or an extra lane's (`claim`).
fn initiator(
    me: &Identity,
    claim: Option<&LaneReq>,
    binding: Option<[u8; 32]>,
) -> Result<Handshake, NetError> {
    match claim {
        None => Handshake::initiator_bound(me, binding),
        Some(req) => Handshake::initiator_bound(&me.with_lane(req.clone()), binding),
    }
}

impl Outbound {
    /// Step 2: a non-blocking connect to `dial.addr`, registered on
    /// `poller` under `key` for writability. On an error the dial is handed
    /// back with it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        dial: Dial,
        me: &Identity,
        tls: Option<&TlsConfig>,
        lane: Option<(usize, LaneReq)>,
        poller: &Poller,
        key: usize,
        token: u64,
        unsent: usize,
    ) -> Result<Outbound, (Dial, NetError)> {
        let claim = lane.as_ref().map(|(_, req)| req);
        let made = (|| {
            let (hs, tls) = match tls {
                None => (Some(initiator(me, claim, None)?), None),
                Some(cfg) => {
                    let tls = TlsHandshake::client(cfg, dial.addr)?;
                    (None, Some(PendingTls::Handshaking(Box::new(tls))))
                }
            };
            let sock = Socket::new(
                Domain::for_address(dial.addr),
                Type::STREAM,
                Some(Protocol::TCP),
            )?;
            sock.set_nodelay(true)?;
            crate::sockopt::limit_unsent(&sock, unsent)?;
            sock.set_nonblocking(true)?;
            match sock.connect(&dial.addr.into()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                Err(e) => return Err(NetError::from(e)),
            }
            let sock = poller.register_with(TcpStream::from(sock), key, true)?;
            Ok((sock, hs, tls))
        })();
        match made {
            Ok((sock, hs, tls)) => Ok(Outbound {
                sock,
                key,
                addr: dial.addr,
                token,
                deadline: dial.deadline,
                started: false,
                hs,
                tls,
                registered: None,
                lane,
                done: dial.done,
            }),
            Err(e) => Err((dial, e)),
        }
    }

    /// Steps 3 and 4: as far as the socket's readiness and bytes go.
    pub(crate) fn drive(&mut self, poller: &Poller, me: &Identity) -> Progress {
        if !self.started {
            return self.connected(poller);
        }
        let mut buf = [0u8; 2048];
        loop {
            let n = match (&mut self.sock.get()).read(&mut buf) {
                Ok(0) if matches!(self.tls, Some(PendingTls::Handshaking(_))) => {
                    let e = crate::tls::closed_in_handshake();
                    return Progress::Failed(crate::handshake::at(e, &self.addr.to_string()));
                }
                Ok(0) => {
                    return Progress::Failed(NetError::Handshake(format!(
                        "{}: closed by the peer",
                        self.addr
                    )))
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return match self.sock.rearm() {
                        Ok(()) => Progress::Waiting,
                        Err(e) => Progress::Failed(e.into()),
                    };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Progress::Failed(e.into()),
            };
            let plain = match self.open_tls(&buf[..n], me) {
                Ok(p) => p,
                Err(e) => return Progress::Failed(crate::handshake::at(e, &self.addr.to_string())),
            };
            let data = match &plain {
                None => &buf[..n],
                Some(p) if p.is_empty() => continue,
                Some(p) => &p[..],
            };
            let Some(hs) = self.hs.as_mut() else {
                return Progress::Failed(NetError::Handshake("bytes before TLS was up".into()));
            };
            let step = hs.feed(data);
            if let Err(e) = self.flush() {
                return Progress::Failed(e);
            }
            match step {
                Ok(Step::More) => {}
                Ok(Step::Register(h)) => return Progress::Register(h),
                Ok(Step::Up(h)) => return Progress::Up(h),
                Ok(Step::Duplicate(h)) => return Progress::Duplicate(h),
                Ok(Step::Decide(_)) => {
                    return Progress::Failed(NetError::Handshake(
                        "an initiator was asked to decide".into(),
                    ))
                }
                Err(e) => {
                    if matches!(e, NetError::Auth { .. }) {
                        log::warn!("graft-net: {}: {e}", self.addr);
                    }
                    return Progress::Failed(crate::handshake::at(e, &self.addr.to_string()));
                }
            }
        }
    }

    /// Step 3: the connect's outcome; the first message.
    fn connected(&mut self, poller: &Poller) -> Progress {
        let sock = self.sock.get();
        match sock.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => return Progress::Failed(e.into()),
        }
        match sock.peer_addr() {
            Ok(_) => {}
            // Woken before the connect finished: wait on.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return Progress::Waiting,
            Err(e) => return Progress::Failed(e.into()),
        }
        self.started = true;
        if let Err(e) = poller.interest(sock, self.key, false) {
            return Progress::Failed(e.into());
        }
        match self.flush() {
            Ok(()) => Progress::Waiting,
            Err(e) => Progress::Failed(e),
        }
    }

    /// With TLS, feeds `data` to it: `Some` plaintext for the cookie
    /// handshake (empty while TLS is still in its handshake), the TLS
    /// answer written, and the cookie handshake made (its first message
    /// written) once TLS is up. `None` without TLS.
    fn open_tls(&mut self, data: &[u8], me: &Identity) -> Result<Option<Vec<u8>>, NetError> {
        let Some(tls) = self.tls.as_mut() else {
            return Ok(None);
        };
        let (answer, plain) = tls.feed(data);
        self.write(&answer)?;
        let plain = plain.map_err(crate::tls::alert_as_handshake)?;
        if self.hs.is_none() {
            if let Some(PendingTls::Up(up)) = &self.tls {
                let claim = self.lane.as_ref().map(|(_, req)| req);
                self.hs = Some(initiator(me, claim, Some(up.binding))?);
                self.flush()?;
            }
        }
        Ok(Some(plain))
    }

    /// With TLS, once it is up: the peer's certificate.
    pub(crate) fn tls_cert(&self) -> Option<&rustls::pki_types::CertificateDer<'static>> {
        match &self.tls {
            Some(PendingTls::Up(up)) => Some(&up.cert),
            _ => None,
        }
    }

    /// After [`Progress::Register`]: `keep` = the slot was ours to claim.
    pub(crate) fn confirm(&mut self, keep: bool) -> Result<(), NetError> {
        let hs = self.hs.as_mut().ok_or(NetError::Closed)?;
        hs.confirm(keep)?;
        self.flush()
    }

    /// Writes what the handshakes have to send: TLS's own flight while it
    /// is in its handshake, then the cookie handshake's output (in TLS
    /// records once TLS is up).
    fn flush(&mut self) -> Result<(), NetError> {
        let mut out = match self.tls.as_mut() {
            Some(PendingTls::Handshaking(t)) => t.take_output(),
            _ => Vec::new(),
        };
        if let Some(hs) = self.hs.as_mut().filter(|hs| hs.has_output()) {
            let plain = hs.take_output();
            match self.tls.as_mut() {
                None => out = plain,
                Some(tls) => out.extend_from_slice(&tls.seal(&plain)?),
            }
        }
        self.write(&out)
    }

    fn write(&mut self, out: &[u8]) -> Result<(), NetError> {
        if out.is_empty() {
            return Ok(());
        }
        crate::pending::write_handshake(self.sock.get(), out)
    }

    /// The socket, out of the poller, with the handshakes, for the
    /// connection it becomes (`None`: the cookie handshake never began).
    pub(crate) fn into_parts(self) -> (TcpStream, Option<(Handshake, Option<TlsUp>)>, Abandoned) {
        let tls = match self.tls {
            Some(PendingTls::Up(up)) => Some(*up),
            _ => None,
        };
        let hs = self.hs.map(|hs| (hs, tls));
        (
            self.sock.into_inner(),
            hs,
            (self.done, self.token, self.registered),
        )
    }

    /// Given up: what must be told and released.
    pub(crate) fn abandon(self) -> Abandoned {
        (self.done, self.token, self.registered)
    }
}
