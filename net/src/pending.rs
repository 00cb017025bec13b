//! Inbound connections that have not authenticated yet: each is a socket
//! and a handshake state machine, driven by the listener thread on a
//! poller (see `transport.rs`, "Pending handshakes"). Nothing here blocks.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::handshake::{Handshake, Hello, Identity, Step};
use crate::poll::Registered;
use crate::NetError;

/// Counters of the inbound handshakes of a [`Transport`](crate::Transport),
/// from [`Transport::handshake_stats`](crate::Transport::handshake_stats).
///
/// # Examples
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
/// let t = Transport::start(NetConfig::new("n", "127.0.0.1:0".parse().unwrap()).cookie("c"), Arc::new(Quiet)).unwrap();
/// assert_eq!(t.handshake_stats().pending, 0);
/// t.shutdown();
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandshakeStats {
    /// Inbound handshakes in progress now.
    pub pending: u64,
    /// Sockets closed at once because `max_pending_handshakes` were in
    /// progress.
    pub refused_over_limit: u64,
    /// Sockets closed at once because `max_pending_per_address` handshakes
    /// from the same address (an IPv6 /64) were in progress.
    pub refused_per_address: u64,
    /// Handshakes that did not complete within `handshake_timeout`.
    pub timed_out: u64,
    /// Handshakes that failed: a wrong cookie, a replay, garbage, a
    /// protocol version we do not speak, a peer that closed.
    pub failed: u64,
    /// Handshakes that completed (the peer kept, or dropped as a duplicate).
    pub completed: u64,
}

/// The live counters behind [`HandshakeStats`].
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) pending: AtomicU64,
    pub(crate) refused_over_limit: AtomicU64,
    pub(crate) refused_per_address: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) completed: AtomicU64,
}

impl Stats {
    pub(crate) fn snapshot(&self) -> HandshakeStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HandshakeStats {
            pending: r(&self.pending),
            refused_over_limit: r(&self.refused_over_limit),
            refused_per_address: r(&self.refused_per_address),
            timed_out: r(&self.timed_out),
            failed: r(&self.failed),
            completed: r(&self.completed),
        }
    }

    pub(crate) fn bump(a: &AtomicU64) {
        a.fetch_add(1, Ordering::Relaxed);
    }
}

/// The source a per-address limit counts: an IPv4 address (an
/// IPv4-mapped IPv6 address counts as its IPv4 address), or an IPv6 /64
/// (marked by bit 63, so that it never equals an IPv4 key).
pub(crate) fn source_key(addr: &SocketAddr) -> u128 {
    match addr.ip().to_canonical() {
        std::net::IpAddr::V4(v4) => u128::from(u32::from(v4)),
        std::net::IpAddr::V6(v6) => (u128::from(v6) & !u128::from(u64::MAX)) | 1 << 63,
    }
}

/// One inbound connection in its handshake.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) sock: Registered<TcpStream>,
    pub(crate) remote: SocketAddr,
    /// [`source_key`] of `remote`.
    pub(crate) source: u128,
    pub(crate) deadline: Instant,
    /// Created when the first bytes arrive (an idle socket costs only its
    /// descriptor and this entry).
    pub(crate) hs: Option<Handshake>,
    /// With TLS: the TLS handshake, then the records the cookie handshake
    /// travels in.
    pub(crate) tls: Option<crate::tls::PendingTls>,
}

/// What driving a pending connection came to.
#[derive(Debug)]
pub(crate) enum Driven {
    /// Still in its handshake.
    Waiting,
    /// The initiator proved the cookie and its key: decide.
    Decide(Hello),
    /// Failed or closed; drop it.
    Failed(NetError),
}

impl Pending {
    /// Reads what the socket has (without blocking), feeds it to the
    /// handshake and writes the answer.
    pub(crate) fn drive(&mut self, me: &Identity) -> Driven {
        let mut buf = [0u8; 2048];
        loop {
            let n = match (&mut self.sock.get()).read(&mut buf) {
                Ok(0) => return Driven::Failed(NetError::Closed),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = self.sock.rearm() {
                        return Driven::Failed(e.into());
                    }
                    return Driven::Waiting;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Driven::Failed(e.into()),
            };
            let plain;
            let data = match self.tls.as_mut() {
                None => &buf[..n],
                Some(tls) => {
                    let (out, r) = tls.feed(&buf[..n]);
                    if !out.is_empty() {
                        if let Err(e) = self.write(&out) {
                            return Driven::Failed(e);
                        }
                    }
                    match r {
                        Ok(p) if p.is_empty() => continue,
                        Ok(p) => {
                            plain = p;
                            &plain[..]
                        }
                        Err(e) => return Driven::Failed(e),
                    }
                }
            };
            let binding = match &self.tls {
                Some(crate::tls::PendingTls::Up(up)) => Some(up.binding),
                _ => None,
            };
            let hs = (self.hs).get_or_insert_with(|| Handshake::acceptor_bound(me, binding));
            let step = hs.feed(data);
            if let Err(e) = self.flush() {
                return Driven::Failed(e);
            }
            match step {
                // A short read drained the socket: wait for the next event
                // rather than read again only to hear `WouldBlock` (over
                // TLS, rustls may hold more: read on).
                Ok(Step::More) if n < buf.len() && self.tls.is_none() => {
                    if let Err(e) = self.sock.rearm() {
                        return Driven::Failed(e.into());
                    }
                    return Driven::Waiting;
                }
                Ok(Step::More) => {}
                Ok(Step::Decide(h)) => return Driven::Decide(h),
                Ok(s) => {
                    return Driven::Failed(NetError::Handshake(format!(
                        "unexpected acceptor step {s:?}"
                    )))
                }
                Err(e) => return Driven::Failed(e),
            }
        }
    }

    /// Writes the handshake's output. It is small (a few hundred bytes at
    /// most) and the socket's buffer empty, so a write that would block is
    /// a peer that does not read: a failure.
    pub(crate) fn flush(&mut self) -> Result<(), NetError> {
        let Some(hs) = self.hs.as_mut() else {
            return Ok(());
        };
        if !hs.has_output() {
            return Ok(());
        }
        let mut out = hs.take_output();
        if let Some(tls) = self.tls.as_mut() {
            out = tls.seal(&out)?;
        }
        self.write(&out)
    }

    fn write(&mut self, out: &[u8]) -> Result<(), NetError> {
        write_handshake(self.sock.get(), out)
    }
}

/// Writes handshake bytes on a non-blocking socket, either side's. They
/// are few (a few kilobytes at most, a certificate chain) and the socket's
/// buffer empty, so a write that would block is a peer that does not
/// read: a failure.
pub(crate) fn write_handshake(mut sock: &TcpStream, out: &[u8]) -> Result<(), NetError> {
    match sock.write(out) {
        Ok(n) if n == out.len() => Ok(()),
        Ok(_) => Err(NetError::Handshake("the peer does not read".into())),
        Err(e) => Err(e.into()),
    }
}
