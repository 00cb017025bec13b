//! One established connection: its outbox, writer loop and reader loop.
//!
//! # Writer coalescing
//!
//! [`Conn::send`] appends the encoded frame to `out.buf` under the outbox
//! mutex and notifies the writer only if the writer said it is idle
//! (`out.writer_idle`, set by the writer under the same mutex just before it
//! waits). The writer swaps the whole buffer for its empty spare and writes
//! it with one `write_all`, so every frame queued while it was writing goes
//! out in the next single syscall. No wake-up is lost: the writer checks for
//! work and sets `writer_idle` with the mutex held, and the condvar wait
//! releases the mutex atomically.
//!
//! # Direct writes when traffic is sparse
//!
//! Waking the writer costs a futex wake and a context switch (several µs),
//! which is most of a round trip on loopback. So when a frame finds the
//! writer parked, the buffer empty (nothing in flight: the writer only
//! parks after its write finished), and both the writer's parking and the
//! previous such frame at least `DIRECT_GAP` ago, the sender writes it itself with `MSG_DONTWAIT`, still
//! under the outbox mutex (so order holds). Whatever the socket does not take
//! stays in the buffer for the woken writer. Dense traffic never takes this
//! path, so it keeps its coalescing.
//!
//! Rejected: writing directly whenever the writer is parked. A tight send
//! loop then makes one syscall per frame (the writer never gets to batch),
//! capping throughput near the syscall rate.
//!
//! # Held frames
//!
//! [`Conn::send_held`] is for a sender that knows it will call
//! [`Conn::flush`] soon (a scheduler thread, once the green thread it runs
//! stops): a frame that finds the writer parked and traffic sparse (the
//! case for a direct write) is left in the buffer instead, `out.held` is
//! set, and the sender is told to flush. Frames sent meanwhile join it, so a
//! burst leaves in one write, and `flush` then writes it as a sparse frame
//! would be (directly, or by waking the writer). Held bytes are capped at
//! `HOLD_MAX`: beyond that the writer is woken at once. Dense traffic (a
//! stream that the writer has just caught up with) is not held: it wakes the
//! writer at once, as an ordinary send does, so the writer keeps writing
//! while the sender produces. Ordinary senders ignore `held` (their frame
//! finds the buffer non-empty and wakes the writer), so a slow flusher
//! delays only its own frames.
//!
//! # Closing
//!
//! [`Conn::close`] is idempotent; the first caller's reason is kept. It shuts
//! the socket down (which wakes the reader with EOF or an error) and marks
//! the outbox closed (which stops the writer and makes `send` fail). The
//! reader thread, when its loop ends, reports `peer_down` exactly once
//! (`down_reported`).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use socket2::SockRef;

use crate::frame::{self, kind, Decoder, Fill, FIRST_USER_KIND, FLAG_COMPRESSED};
use crate::session::Sealer;
use crate::{Handler, NetError, PeerInfo};

/// Initial capacity of the writer's buffers.
const WRITE_BUF: usize = 64 << 10;
/// A writer buffer that grew beyond this is given back after use.
const WRITE_BUF_KEEP: usize = 4 << 20;
/// A frame sent at least this long after the previous one, to a parked
/// writer, is written by the sender itself (see `push`).
const DIRECT_GAP: Duration = Duration::from_micros(10);
/// Flags of that direct write: never block, and no SIGPIPE where the flag exists.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
const DIRECT_FLAGS: libc::c_int = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
const DIRECT_FLAGS: libc::c_int = libc::MSG_DONTWAIT;
/// Held frames beyond this many bytes wake the writer at once (see
/// `send_held`).
const HOLD_MAX: usize = 32 << 10;
/// Size of the reader's buffer (grows for larger frames, then shrinks back).
pub(crate) const READ_BUF: usize = 256 << 10;

/// Frames waiting for the writer. Guarded by `Conn::out`.
#[derive(Debug)]
struct Outbox {
    /// Encoded frames, appended by senders, taken whole by the writer.
    buf: Vec<u8>,
    /// Sealed bytes a direct write left unsent; the writer sends them
    /// before anything else.
    sealed: Vec<u8>,
    /// Scratch space of the direct write's sealing.
    scratch: Vec<u8>,
    /// Set by the writer (under the mutex) right before it waits; cleared by
    /// the sender that wakes it.
    writer_idle: bool,
    /// Set once by `close`; senders fail and the writer stops.
    closed: bool,
    /// Frames are held for a sender that promised a `flush` (see
    /// `send_held`).
    held: bool,
    /// When a sender last found the writer idle and chose between writing
    /// and waking it (see `push`, `flush`).
    last_push: Instant,
    /// When the writer last parked; written by the writer.
    idle_since: Instant,
}

impl Outbox {
    /// Whether traffic is sparse: neither the last write-or-wake decision
    /// nor the writer's parking was less than `DIRECT_GAP` ago.
    fn sparse(&self, now: Instant) -> bool {
        now.duration_since(self.last_push) >= DIRECT_GAP
            && now.duration_since(self.idle_since) >= DIRECT_GAP
    }
}

/// Shared state of one connection, owned jointly by the transport's tables,
/// the reader and the writer.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) info: PeerInfo,
    /// A handle on the socket, for `shutdown` and for the writer.
    stream: TcpStream,
    out: Mutex<Outbox>,
    /// Seals what is written. Used by the writer, and by a direct write
    /// (only while the writer is parked), so never contended; the order
    /// of sealing is the order on the wire.
    sealer: Mutex<Sealer>,
    wake: Condvar,
    /// Set once, by the first `close`, after `reason`.
    closed: AtomicBool,
    /// Written once, by the first `close`.
    reason: Mutex<Option<NetError>>,
    /// Set once `peer_up` has returned (by the thread that called it).
    announced: AtomicBool,
    /// Set by whoever reports `peer_down` (normally the reader).
    down_reported: AtomicBool,
    max_frame: usize,
    compress_threshold: usize,
    /// Silence after which the peer is declared dead.
    dead_after: Duration,
    /// Heartbeat round trip (see "Heartbeat round trip" below).
    rtt: Rtt,
}

impl Conn {
    pub(crate) fn new(
        info: PeerInfo,
        stream: TcpStream,
        sealer: Sealer,
        max_frame: usize,
        compress_threshold: usize,
        dead_after: Duration,
    ) -> Conn {
        Conn {
            info,
            stream,
            sealer: Mutex::new(sealer),
            out: Mutex::new(Outbox {
                buf: Vec::with_capacity(WRITE_BUF),
                sealed: Vec::new(),
                scratch: Vec::new(),
                writer_idle: false,
                closed: false,
                held: false,
                last_push: Instant::now(),
                idle_since: Instant::now(),
            }),
            wake: Condvar::new(),
            closed: AtomicBool::new(false),
            reason: Mutex::new(None),
            announced: AtomicBool::new(false),
            down_reported: AtomicBool::new(false),
            max_frame,
            compress_threshold,
            dead_after,
            rtt: Rtt::default(),
        }
    }

    /// Queues one frame; never touches the socket.
    pub(crate) fn send(&self, kind: u8, payload: &[u8]) -> Result<(), NetError> {
        self.send_frame(kind, payload, false).map(|_| ())
    }

    /// Queues one frame without waking the writer or writing (see "Held
    /// frames"); `true`: the frame is held, and the caller must call
    /// [`flush`](Conn::flush) soon.
    pub(crate) fn send_held(&self, kind: u8, payload: &[u8]) -> Result<bool, NetError> {
        self.send_frame(kind, payload, true)
    }

    fn send_frame(&self, kind: u8, payload: &[u8], hold: bool) -> Result<bool, NetError> {
        if kind < FIRST_USER_KIND {
            return Err(NetError::ReservedKind(kind));
        }
        if payload.len() > self.max_frame {
            return Err(NetError::FrameTooLarge {
                size: payload.len(),
                max: self.max_frame,
            });
        }
        if payload.len() > self.compress_threshold {
            let z = frame::deflate(payload);
            if z.len() < payload.len() {
                return self.push(hold, |buf| frame::encode(buf, kind, FLAG_COMPRESSED, &z));
            }
        }
        self.push(hold, |buf| frame::encode(buf, kind, 0, payload))
    }

    /// Appends a frame; `true`: it is held for the caller's `flush`.
    #[inline]
    fn push(&self, hold: bool, encode: impl FnOnce(&mut Vec<u8>)) -> Result<bool, NetError> {
        let mut out = self.out.lock();
        if out.closed {
            return Err(NetError::NotConnected(self.info.id));
        }
        let was_empty = out.buf.is_empty();
        encode(&mut out.buf);
        if !out.writer_idle {
            return Ok(false);
        }
        if hold && out.buf.len() < HOLD_MAX && (out.held || out.sparse(Instant::now())) {
            out.held = true;
            return Ok(true);
        }
        // Nothing held and traffic dense (a stream: the writer keeps its
        // rhythm), or too much held back: as an ordinary send.
        out.held = false;
        self.write_or_wake(out, was_empty);
        Ok(false)
    }

    /// Writes the held frames (see `send_held`), unless the writer or another
    /// flush took them already.
    pub(crate) fn flush(&self) {
        let mut out = self.out.lock();
        if !out.held {
            return;
        }
        out.held = false;
        if out.closed || out.buf.is_empty() || !out.writer_idle {
            return;
        }
        self.write_or_wake(out, true);
    }

    /// The writer is parked with nothing in flight and `out.buf` holds
    /// frames for it. When traffic is sparse and the buffer held nothing
    /// else (`alone`), write them directly (never blocking) and spare the
    /// writer's wake-up; wake it for whatever is left.
    fn write_or_wake(&self, mut out: MutexGuard<'_, Outbox>, alone: bool) {
        let now = Instant::now();
        let sparse = out.sparse(now);
        out.last_push = now;
        if alone && sparse && out.sealed.is_empty() {
            let o = &mut *out;
            o.scratch.clear();
            if self.sealer.lock().seal(&o.buf, &mut o.scratch).is_ok() {
                o.buf.clear();
                match SockRef::from(&self.stream).send_with_flags(&o.scratch, DIRECT_FLAGS) {
                    Ok(n) if n == o.scratch.len() => return,
                    Ok(n) => o.sealed.extend_from_slice(&o.scratch[n..]),
                    // WouldBlock, or a broken socket: the writer finds out.
                    Err(_) => o.sealed.extend_from_slice(&o.scratch),
                }
            }
        }
        out.writer_idle = false;
        drop(out);
        self.wake.notify_one();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the connection for `reason`; only the first call counts.
    pub(crate) fn close(&self, reason: NetError) {
        {
            // The reason is stored before `closed` is set, under its lock, so
            // that whoever sees `closed` and asks for the reason gets it.
            let mut r = self.reason.lock();
            if r.is_some() {
                return;
            }
            *r = Some(reason);
            self.closed.store(true, Ordering::Release);
        }
        let _ = self.stream.shutdown(Shutdown::Both);
        self.out.lock().closed = true;
        self.wake.notify_one();
    }

    /// Bytes queued and not yet handed to the socket.
    pub(crate) fn queued_bytes(&self) -> usize {
        let out = self.out.lock();
        out.buf.len() + out.sealed.len()
    }

    /// Why the connection closed (`Closed` if it has not).
    pub(crate) fn reason(&self) -> NetError {
        self.reason.lock().clone().unwrap_or(NetError::Closed)
    }

    /// Whether `peer_up` has been called and returned.
    pub(crate) fn is_announced(&self) -> bool {
        self.announced.load(Ordering::Acquire)
    }

    pub(crate) fn set_announced(&self) {
        self.announced.store(true, Ordering::Release);
    }

    /// True for the one caller that gets to report `peer_down`.
    pub(crate) fn take_down_report(&self) -> bool {
        !self.down_reported.swap(true, Ordering::AcqRel)
    }

    /// The writer thread: flush the outbox, or send a heartbeat after a tick
    /// of silence, until closed.
    pub(crate) fn write_loop(&self, tick: Duration) {
        let mut stream = match self.stream.try_clone() {
            Ok(s) => s,
            Err(e) => return self.close(e.into()),
        };
        let mut spare: Vec<u8> = Vec::with_capacity(WRITE_BUF);
        let mut wire: Vec<u8> = Vec::with_capacity(WRITE_BUF);
        let mut last_write = Instant::now();
        let mut last_ping = last_write;
        loop {
            {
                let mut out = self.out.lock();
                loop {
                    if out.closed {
                        return;
                    }
                    if !out.buf.is_empty() || !out.sealed.is_empty() {
                        std::mem::swap(&mut out.buf, &mut spare);
                        wire.extend_from_slice(&out.sealed);
                        out.sealed.clear();
                        out.held = false; // the writer takes them
                        if last_write.duration_since(last_ping) >= tick {
                            // A ping even when busy: the round trip stays fresh.
                            self.rtt.ping(&mut spare);
                            last_ping = last_write;
                        }
                        break;
                    }
                    let due = last_write + tick;
                    let now = Instant::now();
                    if now >= due {
                        self.rtt.ping(&mut spare);
                        last_ping = now;
                        break;
                    }
                    if !out.writer_idle {
                        out.idle_since = now;
                    }
                    out.writer_idle = true;
                    self.wake.wait_until(&mut out, due);
                    out.writer_idle = false;
                }
            }
            if let Err(e) = self.sealer.lock().seal(&spare, &mut wire) {
                return self.close(e.into());
            }
            if let Err(e) = stream.write_all(&wire) {
                log::debug!("graft-net: write to {} failed: {e}", self.info.name);
                return self.close(e.into());
            }
            last_write = Instant::now();
            spare.clear();
            wire.clear();
            if spare.capacity() > WRITE_BUF_KEEP {
                spare = Vec::with_capacity(WRITE_BUF);
            }
            if wire.capacity() > WRITE_BUF_KEEP {
                wire = Vec::with_capacity(WRITE_BUF);
            }
        }
    }

    /// The reader loop: deliver frames to `handler` until the connection
    /// fails or is closed; returns why.
    pub(crate) fn read_loop(
        &self,
        stream: &mut impl Read,
        dec: &mut Decoder,
        handler: &dyn Handler,
    ) -> NetError {
        let mut last_rx = Instant::now();
        loop {
            loop {
                if self.is_closed() {
                    return self.reason();
                }
                let f = match dec.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => return e,
                };
                match f.kind {
                    kind::HEARTBEAT => self.on_heartbeat(f.payload),
                    k if k < FIRST_USER_KIND => {
                        return NetError::Protocol(format!("unexpected transport frame kind {k}"))
                    }
                    k => {
                        let payload = if f.flags & FLAG_COMPRESSED != 0 {
                            match frame::inflate(f.payload, self.max_frame) {
                                Ok(p) => p,
                                Err(e) => return e,
                            }
                        } else {
                            f.payload.to_vec()
                        };
                        handler.frame(&self.info, k, payload);
                    }
                }
            }
            match dec.read_from(stream) {
                Ok(Fill::Closed) => return NetError::Closed,
                Ok(Fill::Data) => last_rx = Instant::now(),
                Ok(Fill::Again) => {}
                Ok(Fill::TimedOut) => {
                    let silent = last_rx.elapsed();
                    if silent >= self.dead_after {
                        return NetError::HeartbeatTimeout(silent);
                    }
                }
                Err(e) => return e.into(),
            }
        }
    }
}

// # Heartbeat round trip
//
// A heartbeat may carry 9 bytes: a tag (`PING` or `PONG`) and a stamp.
// The writer's heartbeats are pings (one a tick, also when traffic is
// dense); the reader answers a ping with a pong carrying the same stamp,
// queued like any frame (so the round trip includes the outboxes, as a
// message would see them); a pong whose stamp is the last ping's gives the
// round trip. Any other stamp (a late pong, a forgery) is ignored. An
// empty heartbeat (an older peer) is a heartbeat only: its round trip is
// then unknown.

/// Tag of a heartbeat that asks for an echo.
const PING: u8 = 1;
/// Tag of the echo.
const PONG: u8 = 2;

/// Round-trip state of one connection.
#[derive(Debug, Default)]
struct Rtt {
    /// Stamp of the ping waiting for its pong (0: none).
    pending: std::sync::atomic::AtomicU64,
    /// Last round trip in ns (0: none yet).
    last_ns: std::sync::atomic::AtomicU64,
}

/// Nanoseconds on a process-wide clock, never 0.
fn stamp_now() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
}

impl Rtt {
    /// Appends a ping heartbeat to `buf`.
    fn ping(&self, buf: &mut Vec<u8>) {
        let stamp = stamp_now();
        self.pending.store(stamp, Ordering::Relaxed);
        let mut p = [PING; 9];
        p[1..].copy_from_slice(&stamp.to_be_bytes());
        frame::encode(buf, kind::HEARTBEAT, 0, &p);
    }
}

impl Conn {
    /// A heartbeat's payload: answer a ping, time a pong.
    fn on_heartbeat(&self, payload: &[u8]) {
        let Ok(p) = <[u8; 9]>::try_from(payload) else {
            return;
        };
        let stamp = u64::from_be_bytes(p[1..].try_into().expect("8 bytes"));
        match p[0] {
            PING => {
                let mut pong = p;
                pong[0] = PONG;
                let _ = self.push(false, |b| frame::encode(b, kind::HEARTBEAT, 0, &pong));
            }
            PONG if stamp != 0
                && self
                    .rtt
                    .pending
                    .compare_exchange(stamp, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok() =>
            {
                let ns = stamp_now().saturating_sub(stamp).max(1);
                self.rtt.last_ns.store(ns, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// The last heartbeat round trip, once one was measured.
    pub(crate) fn heartbeat_rtt(&self) -> Option<Duration> {
        match self.rtt.last_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }
}
