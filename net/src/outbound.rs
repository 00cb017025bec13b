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

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};

use crate::handshake::{Handshake, Hello, Identity, Step};
use crate::poll::{Poller, Registered};
use crate::{NetError, PeerInfo};

/// What is told how an outbound connection ended.
pub(crate) type Done = Box<dyn FnOnce(Result<PeerInfo, NetError>) + Send>;

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
    hs: Handshake,
    /// The name whose slot this attempt holds, once it holds one.
    pub(crate) registered: Option<String>,
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

impl Outbound {
    /// Step 2: a non-blocking connect to `dial.addr`, registered on
    /// `poller` under `key` for writability. On an error the dial is handed
    /// back with it.
    pub(crate) fn start(
        dial: Dial,
        me: &Identity,
        poller: &Poller,
        key: usize,
        token: u64,
        unsent: usize,
    ) -> Result<Outbound, (Dial, NetError)> {
        let made = (|| {
            let hs = Handshake::initiator_bound(me, None)?;
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
            Ok((sock, hs))
        })();
        match made {
            Ok((sock, hs)) => Ok(Outbound {
                sock,
                key,
                addr: dial.addr,
                token,
                deadline: dial.deadline,
                started: false,
                hs,
                registered: None,
                done: dial.done,
            }),
            Err(e) => Err((dial, e)),
        }
    }

    /// Steps 3 and 4: as far as the socket's readiness and bytes go.
    pub(crate) fn drive(&mut self, poller: &Poller) -> Progress {
        if !self.started {
            return self.connected(poller);
        }
        let mut buf = [0u8; 2048];
        loop {
            let n = match (&mut self.sock.get()).read(&mut buf) {
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
            let step = self.hs.feed(&buf[..n]);
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

    /// After [`Progress::Register`]: `keep` = the slot was ours to claim.
    pub(crate) fn confirm(&mut self, keep: bool) -> Result<(), NetError> {
        self.hs.confirm(keep)?;
        self.flush()
    }

    /// Writes the handshake's output. It is small (a few hundred bytes) and
    /// the socket's buffer empty, so a write that would block is a peer that
    /// does not read: a failure.
    fn flush(&mut self) -> Result<(), NetError> {
        if !self.hs.has_output() {
            return Ok(());
        }
        let out = self.hs.take_output();
        match (&mut self.sock.get()).write(&out) {
            Ok(n) if n == out.len() => Ok(()),
            Ok(_) => Err(NetError::Handshake(format!(
                "{}: the peer does not read",
                self.addr
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// The socket, out of the poller, for the connection it becomes.
    pub(crate) fn into_parts(self) -> (TcpStream, Handshake, Done, u64, Option<String>) {
        (
            self.sock.into_inner(),
            self.hs,
            self.done,
            self.token,
            self.registered,
        )
    }
}
