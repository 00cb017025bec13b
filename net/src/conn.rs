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
//! # Lanes: large messages and order keys
//!
//! A payload over `frag::FRAGMENT` (64 KiB) is not appended to `buf`: it
//! becomes a flight (`Outbox::flights`), sent in fragments (see `frag.rs`).
//! Each write of the writer takes everything in `buf` (small frames: the
//! runtime's control frames, small messages), then at most
//! `FRAGS_PER_WRITE` fragments, round-robin over the flights. So small
//! traffic waits at most one such write (256 KiB) behind bulk data, and
//! several large messages progress together. The writer's own heartbeats
//! need no lane: it sends one only when it has nothing else to write, and
//! any bytes received keep the peer alive.
//!
//! Every frame carries an order key (the runtime uses the sending
//! process): frames with the same key arrive in the order sent. A frame
//! whose key has a flight (in progress or waiting) joins that flight's
//! `after` chain instead of `buf`, and the chain moves to `buf` (or
//! becomes the next flight) once the flight's last fragment is taken, so
//! it follows that fragment on the wire. Frames of other keys overtake the
//! flight, which is the point. With no flight (the common case), every
//! frame goes to `buf` in one FIFO, as before.
//!
//! Flights in progress are bounded: at most `frag::MAX_PARTIALS`, and
//! their sizes sum to at most `max_message` (one always goes), which is
//! exactly what the receiver's reassembly accepts when both sides have the
//! same `max_message_size`. The others wait in `waiting`, in order.
//!
//! # Busy (backpressure)
//!
//! `queued_bytes` counts `buf`, `sealed`, the batch the writer took and
//! has not written yet (`writing`: a writer stuck on a peer that stopped
//! reading holds it), and everything deferred (flights' bytes not yet
//! taken, chains). Past `busy_limit` the connection is busy
//! (`is_busy`, the system monitor's `BusyDist`). Who must wait is finer
//! (`busy_for`), so that small traffic keeps moving past bulk data:
//!
//! * everyone, while the small lane (`buf`, `sealed`, `writing`) alone is
//!   over the limit (a flood of small frames);
//! * a sender of a large message (over a fragment), or one whose own key
//!   has a large message queued, while the whole queue is over the limit.
//!
//! So the small lane stays within the limit plus a frame, and bulk within
//! the limit plus one message. [`Conn::on_drain`] registers a wake-up that
//! the writer runs once the reason is gone (or that `close` runs). The
//! transport never blocks a sender itself: the runtime decides who waits.
//!
//! # Closing
//!
//! [`Conn::close`] is idempotent; the first caller's reason is kept. It shuts
//! the socket down (which wakes the reader with EOF or an error) and marks
//! the outbox closed (which stops the writer and makes `send` fail). The
//! reader thread, when its loop ends, reports `peer_down` exactly once
//! (`down_reported`).
//!
//! # Retiring
//!
//! A close that loses nothing either way needs both sides
//! ([`Transport::retire`](crate::Transport::retire)). [`Conn::finish`]
//! refuses senders from then on, queues a last frame behind everything
//! queued, and has the writer write it all; on the side that shuts down
//! (`fin`) the writer then shuts the socket's write side down, which the
//! peer reads as EOF after every byte before it. Reading goes on all the
//! while, so what the peer wrote before it saw the retirement is still
//! delivered. The runtime's agreed idle close uses it so: the asked side
//! answers with its last frame and stops writing (no `fin`); the asking
//! side, on that answer, finishes with `fin`; the asked side reads to
//! EOF and closes, which the asking side reads as EOF in turn, once all
//! it wrote was read. Neither side closes with unread bytes, so no reset
//! can discard data in flight.
//!
//! A side that retired without `fin` still sends heartbeats (and answers
//! pings) after its last frame, until it finishes with `fin` or closes:
//! the other side may take long to write out what it had queued, and its
//! dead window counts silence. (While the retired side was silent, the
//! other declared it dead with 2.6 million frames still queued or unread,
//! and those were lost.) Heartbeats are the transport's own frames: the
//! peer's handler never sees them, so the last frame stays the last.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use socket2::SockRef;

use crate::frag::{self, Large, Reassembly, FRAGMENT, MAX_PARTIALS};
use crate::frame::{self, kind, Decoder, Fill, FIRST_USER_KIND, FLAG_COMPRESSED};
use crate::poll::Poller;
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
/// Fragments taken per write at most (small frames go between writes).
const FRAGS_PER_WRITE: usize = 4;

/// A wake-up for a sender waiting for a busy connection to drain.
pub(crate) type DrainWaker = Box<dyn FnOnce() + Send>;

/// What waits behind a flight of the same key.
#[derive(Debug)]
enum Item {
    /// An encoded small frame.
    Small(Vec<u8>),
    /// A large message (becomes a flight in turn).
    Big(Large),
}

/// A large message and what its sender sent after it.
#[derive(Debug)]
struct Flight {
    large: Large,
    after: VecDeque<Item>,
}

/// One fragment taken for the wire: frame kind, header, the data it is in.
type Piece = (u8, Vec<u8>, Arc<Vec<u8>>, std::ops::Range<usize>);

/// Limits of one connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Largest wire frame accepted.
    pub(crate) max_frame: usize,
    /// Largest message (fragmented or not) sent or accepted.
    pub(crate) max_message: usize,
    pub(crate) compress_threshold: usize,
    /// Queued bytes past which the connection is busy.
    pub(crate) busy_limit: usize,
}

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
    /// On the poller: whether writable interest is armed (changed only
    /// under this lock, see `hand_over`).
    armed: bool,
    /// Set once by `close`; senders fail and the writer stops.
    closed: bool,
    /// Set once by `finish` (see "Retiring"): senders fail, the writer
    /// writes what is queued and then, if `Some(true)`, shuts the write
    /// side down.
    finishing: Option<bool>,
    /// Frames are held for a sender that promised a `flush` (see
    /// `send_held`).
    held: bool,
    /// When a sender last found the writer idle and chose between writing
    /// and waking it (see `push`, `flush`).
    last_push: Instant,
    /// When the writer last parked; written by the writer.
    idle_since: Instant,
    /// Large messages being sent, round-robin (see "Lanes").
    flights: VecDeque<Flight>,
    /// Large messages not started yet (over the in-flight bound), in order.
    waiting: VecDeque<Flight>,
    /// Sum of the sizes of `flights`.
    in_flight: usize,
    /// Bytes queued outside `buf`: flights' bytes not taken, chains, waiting.
    deferred: usize,
    /// Bytes of the batch the writer took and has not finished writing
    /// (set by `take_work`, lowered as the poller's writes go out): queued
    /// still, for the busy limit and `queued_bytes` (see "Busy").
    writing: usize,
    /// The next flight's id.
    next_id: u64,
    /// Senders waiting for the queue to drain (see "Busy").
    drain: Drain,
    /// User frames queued so far (a figure for tests and stats).
    frames: u64,
}

/// The wake-ups of `Outbox::drain`: `true` for a bulk waiter (woken once
/// the whole queue is at the limit), `false` for one that waits for the
/// small lane (`buf`) only.
#[derive(Default)]
struct Drain(Vec<(bool, DrainWaker)>);

impl std::fmt::Debug for Drain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} waiting", self.0.len())
    }
}

impl Outbox {
    fn queued(&self) -> usize {
        self.small() + self.deferred
    }

    /// Bytes in the small lane (whole frames in the FIFO), with the batch
    /// the writer is writing.
    fn small(&self) -> usize {
        self.buf.len() + self.sealed.len() + self.writing
    }

    /// Why a sender of key `key` about to send `size` bytes must wait, if it
    /// must (see "Busy"): `Some(false)` for the small lane, `Some(true)`
    /// for bulk.
    fn busy_for(&mut self, key: u64, size: usize, limit: usize) -> Option<bool> {
        if self.small() > limit {
            return Some(false);
        }
        if self.queued() > limit && (size > FRAGMENT || self.flight_of(key).is_some()) {
            return Some(true);
        }
        None
    }

    /// The flight (in progress or waiting) of order key `key`.
    fn flight_of(&mut self, key: u64) -> Option<&mut Flight> {
        if self.flights.is_empty() {
            return None;
        }
        let k = |f: &&mut Flight| f.large.key == key;
        self.flights
            .iter_mut()
            .find(k)
            .or_else(|| self.waiting.iter_mut().find(k))
    }

    /// Starts `f`, or queues it behind the in-flight bound.
    fn enqueue(&mut self, f: Flight, max_message: usize) {
        let len = f.large.data.len();
        if self.waiting.is_empty()
            && (self.flights.is_empty()
                || (self.flights.len() < MAX_PARTIALS && self.in_flight + len <= max_message))
        {
            self.in_flight += len;
            self.flights.push_back(f);
        } else {
            self.waiting.push_back(f);
        }
    }

    /// Takes up to `FRAGS_PER_WRITE` fragments, round-robin; a flight whose
    /// last fragment is taken hands its chain on.
    fn take_fragments(&mut self, pieces: &mut Vec<Piece>, max_message: usize) {
        for _ in 0..FRAGS_PER_WRITE {
            let Some(mut f) = self.flights.pop_front() else {
                return;
            };
            let first = f.large.sent == 0;
            let mut header = Vec::with_capacity(frag::BEGIN_HEADER);
            let range = f.large.next_fragment(&mut header);
            self.deferred -= range.len();
            let k = if first {
                kind::FRAG_BEGIN
            } else {
                kind::FRAG_MORE
            };
            pieces.push((k, header, f.large.data.clone(), range));
            if !f.large.done() {
                self.flights.push_back(f);
                continue;
            }
            self.in_flight -= f.large.data.len();
            let mut rest = f.after;
            while let Some(item) = rest.pop_front() {
                match item {
                    Item::Small(v) => {
                        self.deferred -= v.len();
                        self.buf.extend_from_slice(&v);
                    }
                    Item::Big(large) => {
                        let after = std::mem::take(&mut rest);
                        self.enqueue(Flight { large, after }, max_message);
                    }
                }
            }
            while let Some(w) = self.waiting.front() {
                let len = w.large.data.len();
                if !self.flights.is_empty()
                    && (self.flights.len() >= MAX_PARTIALS || self.in_flight + len > max_message)
                {
                    break;
                }
                let w = self.waiting.pop_front().expect("front");
                self.in_flight += len;
                self.flights.push_back(w);
            }
        }
    }

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
    /// Set by a sender that took the queue past the busy limit, cleared by
    /// the writer once it is at or under it: [`Conn::is_busy`] without the
    /// outbox lock.
    busy: AtomicBool,
    limits: Limits,
    /// Silence after which the peer is declared dead.
    dead_after: Duration,
    /// Heartbeat round trip (see "Heartbeat round trip" below).
    rtt: Rtt,
    /// Whether this side sends the pings (see "Heartbeat round trip").
    pings: bool,
    /// Which lane of its peer this is, and the session's lane material
    /// (see "Parallel lanes").
    pub(crate) group: Group,
    /// A session's first connection: its extra lanes (index 1 and up),
    /// set once before `peer_up`.
    lanes: OnceLock<Box<[Arc<Conn>]>>,
    /// An extra lane: its session's first connection.
    main: OnceLock<std::sync::Weak<Conn>>,
    /// A first connection: readers (its own and its lanes') not yet
    /// finished; the last reports `peer_down`.
    readers: std::sync::atomic::AtomicUsize,
    /// On the poller: where the connection is registered (set once, by its
    /// I/O thread, before it ever parks the write side).
    io: OnceLock<IoLink>,
}

/// Where a connection is registered on an I/O thread's poller.
#[derive(Debug)]
pub(crate) struct IoLink {
    pub(crate) poller: Poller,
    pub(crate) key: usize,
}

/// A connection's place among its peer's lanes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Group {
    /// The session's lanes (1: no extra lane).
    pub(crate) lanes: u8,
    /// This connection's lane (0: the first).
    pub(crate) index: u8,
    /// The first connection's handshake material (its key and session id).
    pub(crate) secret: crate::handshake::LaneSecret,
}

impl Conn {
    pub(crate) fn new(
        info: PeerInfo,
        stream: TcpStream,
        sealer: Sealer,
        limits: Limits,
        dead_after: Duration,
        group: Group,
        pings: bool,
    ) -> Conn {
        Conn {
            group,
            lanes: OnceLock::new(),
            main: OnceLock::new(),
            readers: std::sync::atomic::AtomicUsize::new(1),
            info,
            stream,
            sealer: Mutex::new(sealer),
            out: Mutex::new(Outbox {
                buf: Vec::with_capacity(WRITE_BUF),
                sealed: Vec::new(),
                scratch: Vec::new(),
                writer_idle: false,
                armed: false,
                closed: false,
                finishing: None,
                held: false,
                last_push: Instant::now(),
                idle_since: Instant::now(),
                flights: VecDeque::new(),
                waiting: VecDeque::new(),
                in_flight: 0,
                deferred: 0,
                writing: 0,
                next_id: 1,
                drain: Drain::default(),
                frames: 0,
            }),
            wake: Condvar::new(),
            closed: AtomicBool::new(false),
            reason: Mutex::new(None),
            announced: AtomicBool::new(false),
            down_reported: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            limits,
            dead_after,
            rtt: Rtt {
                heard: stamp_now().into(),
                ..Rtt::default()
            },
            pings,
            io: OnceLock::new(),
        }
    }

    /// Queues one frame (order key 0); never touches the socket.
    pub(crate) fn send(&self, kind: u8, payload: &[u8]) -> Result<(), NetError> {
        self.send_frame(0, kind, Cow::Borrowed(payload), false)
            .map(|_| ())
    }

    /// Queues one frame without waking the writer or writing (see "Held
    /// frames"); `true`: the frame is held, and the caller must call
    /// [`flush`](Conn::flush) soon.
    pub(crate) fn send_held(&self, kind: u8, payload: &[u8]) -> Result<bool, NetError> {
        self.send_frame(0, kind, Cow::Borrowed(payload), true)
    }

    /// Queues one frame of order key `key` (see "Lanes"), held if `hold`
    /// (see [`send_held`](Conn::send_held)).
    pub(crate) fn send_frame(
        &self,
        key: u64,
        kind: u8,
        payload: Cow<'_, [u8]>,
        hold: bool,
    ) -> Result<bool, NetError> {
        if kind < FIRST_USER_KIND {
            return Err(NetError::ReservedKind(kind));
        }
        let l = &self.limits;
        if payload.len() > l.max_message {
            return Err(NetError::MessageTooLarge {
                size: payload.len(),
                max: l.max_message,
            });
        }
        // Compressed only up to the frame limit: deflating a message of
        // hundreds of MiB would hold the sender for seconds.
        if payload.len() > l.compress_threshold && payload.len() <= l.max_frame {
            let z = frame::deflate(&payload);
            if z.len() < payload.len() {
                return self.push_any(key, kind, FLAG_COMPRESSED, Cow::Owned(z), hold);
            }
        }
        self.push_any(key, kind, 0, payload, hold)
    }

    fn push_any(
        &self,
        key: u64,
        kind: u8,
        flags: u8,
        payload: Cow<'_, [u8]>,
        hold: bool,
    ) -> Result<bool, NetError> {
        if payload.len() > FRAGMENT {
            return self.push_large(key, kind, flags, payload.into_owned());
        }
        self.push(key, hold, frame::HEADER_LEN + payload.len(), |buf| {
            frame::encode(buf, kind, flags, &payload)
        })
    }

    /// Queues a large message as a flight, or behind its key's flight.
    fn push_large(&self, key: u64, kind: u8, flags: u8, data: Vec<u8>) -> Result<bool, NetError> {
        let mut out = self.out.lock();
        if out.closed || out.finishing.is_some() {
            return Err(NetError::NotConnected(self.info.id));
        }
        let id = out.next_id;
        out.next_id += 1;
        out.frames += 1;
        out.deferred += data.len();
        let large = Large {
            id,
            key,
            kind,
            flags,
            data: Arc::new(data),
            sent: 0,
        };
        if out.queued() > self.limits.busy_limit {
            self.busy.store(true, Ordering::Relaxed);
        }
        if let Some(f) = out.flight_of(key) {
            f.after.push_back(Item::Big(large));
        } else {
            let max = self.limits.max_message;
            out.enqueue(
                Flight {
                    large,
                    after: VecDeque::new(),
                },
                max,
            );
        }
        if out.writer_idle {
            out.held = false;
            self.hand_over(out);
        }
        Ok(false)
    }

    /// Appends a frame of `len` encoded bytes; `true`: it is held for the
    /// caller's `flush`.
    #[inline]
    fn push(
        &self,
        key: u64,
        hold: bool,
        len: usize,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<bool, NetError> {
        let mut out = self.out.lock();
        // Retiring without `fin`, heartbeats (key `u64::MAX`) still go:
        // see "Retiring".
        let heartbeat_only = key == u64::MAX && out.finishing == Some(false);
        if out.closed || (out.finishing.is_some() && !heartbeat_only) {
            return Err(NetError::NotConnected(self.info.id));
        }
        if key != u64::MAX {
            out.frames += 1;
        }
        if let Some(f) = out.flight_of(key) {
            // Behind its sender's large message (see "Lanes"); the writer is
            // busy with that one.
            let mut v = Vec::with_capacity(len);
            encode(&mut v);
            f.after.push_back(Item::Small(v));
            out.deferred += len;
            if out.queued() > self.limits.busy_limit {
                self.busy.store(true, Ordering::Relaxed);
            }
            return Ok(false);
        }
        let was_empty = out.buf.is_empty();
        encode(&mut out.buf);
        if out.queued() > self.limits.busy_limit {
            self.busy.store(true, Ordering::Relaxed);
        }
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
        self.hand_over(out);
    }

    /// Gives the write side to the writer (`writer_idle` was set): in
    /// [`IoMode::Threads`](crate::IoMode) wakes the writer thread; on the
    /// poller arms writable interest, under the outbox lock (see `io.rs`,
    /// "Who writes").
    fn hand_over(&self, mut out: MutexGuard<'_, Outbox>) {
        out.writer_idle = false;
        match self.io.get() {
            None => {
                drop(out);
                self.wake.notify_one();
            }
            Some(link) => self.arm(&mut out, link, true),
        }
    }

    /// Sets writable interest to `on` (caller holds the outbox lock, which
    /// orders every change of interest with the `writer_idle` it follows).
    fn arm(&self, out: &mut Outbox, link: &IoLink, on: bool) {
        if out.armed != on {
            out.armed = on;
            if let Err(e) = link.poller.interest(&self.stream, link.key, on) {
                log::debug!("graft-net: interest of {}: {e}", self.info.name);
            }
        }
    }

    /// The connection's socket (the descriptor it is polled by).
    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Starts retiring the connection (see "Retiring"): senders are
    /// refused from now on, `last` is queued behind everything else, and
    /// the writer writes it all, then shuts the write side down if `fin`.
    /// A connection retiring without `fin` may be asked again with `fin`
    /// (both sides asked to close at once; `last` is then ignored).
    /// `false` if closed, or retiring already with `fin`.
    pub(crate) fn finish(&self, last: Option<(u8, &[u8])>, fin: bool) -> bool {
        let mut out = self.out.lock();
        if out.closed || out.finishing == Some(true) {
            return false;
        }
        if out.finishing == Some(false) {
            if !fin {
                return false;
            }
            out.finishing = Some(true);
            if out.writer_idle {
                // Retiring, the writer idles only once everything queued
                // is written: shut down here. (Not while it writes, a
                // heartbeat after the last frame, say: it shuts down after
                // that, on `Finished`; loom-tests' `retire.rs`.)
                let _ = self.stream.shutdown(Shutdown::Write);
            }
            return true;
        }
        if let Some((kind, payload)) = last {
            frame::encode(&mut out.buf, kind, 0, payload);
        }
        out.finishing = Some(fin);
        out.held = false;
        if out.writer_idle {
            self.hand_over(out);
        }
        true
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
        let drain = {
            let mut out = self.out.lock();
            out.closed = true;
            // Nothing queued will be sent: free it now.
            out.flights.clear();
            out.waiting.clear();
            out.deferred = 0;
            out.in_flight = 0;
            self.busy.store(false, Ordering::Relaxed);
            std::mem::take(&mut out.drain.0)
        };
        self.wake.notify_one();
        for (_, w) in drain {
            w();
        }
        self.close_group();
    }

    /// Bytes queued and not yet handed to the socket.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.out.lock().queued()
    }

    /// Whether more than the busy limit is queued (as last seen by a
    /// sender or the writer; [`on_drain`](Conn::on_drain) checks exactly).
    #[inline]
    pub(crate) fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed)
    }

    /// Whether a sender of key `key` about to send `size` bytes must wait
    /// (see "Busy").
    #[inline]
    pub(crate) fn busy_for(&self, key: u64, size: usize) -> bool {
        if !self.is_busy() {
            return false;
        }
        let limit = self.limits.busy_limit;
        self.out.lock().busy_for(key, size, limit).is_some()
    }

    /// Runs `wake` once a sender of key `key` about to send `size` bytes
    /// need not wait any more (see "Busy"), or the connection closed;
    /// `false` (and `wake` dropped unrun) if that is the case already.
    pub(crate) fn on_drain(&self, key: u64, size: usize, wake: DrainWaker) -> bool {
        let limit = self.limits.busy_limit;
        let mut out = self.out.lock();
        if out.queued() <= limit {
            self.busy.store(false, Ordering::Relaxed);
        }
        if out.closed {
            return false;
        }
        match out.busy_for(key, size, limit) {
            Some(bulk) => {
                out.drain.0.push((bulk, wake));
                true
            }
            None => false,
        }
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

    /// Under the outbox lock: clears the busy flag if the queue is at the
    /// limit, and runs the drain wake-ups that are due (with the lock
    /// released: `true` if it ran any, and the outbox may have changed).
    fn wake_drained(&self, out: &mut MutexGuard<'_, Outbox>) -> bool {
        let limit = self.limits.busy_limit;
        let all = out.queued() <= limit;
        if all {
            self.busy.store(false, Ordering::Relaxed);
        }
        if out.drain.0.is_empty() || out.small() > limit {
            return false;
        }
        let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut out.drain.0)
            .into_iter()
            .partition(|(bulk, _)| all || !bulk);
        out.drain.0 = stay;
        if go.is_empty() {
            return false;
        }
        MutexGuard::unlocked(out, || go.into_iter().for_each(|(_, w)| w()));
        true
    }

    /// On the poller, with part of a batch still in `rest`: only that part
    /// counts as being written now, and the waiters it was holding back
    /// need not wait for the rest to go.
    fn still_writing(&self, rest: usize) -> MutexGuard<'_, Outbox> {
        let mut out = self.out.lock();
        out.writing = rest;
        self.wake_drained(&mut out);
        out
    }

    /// Under the outbox lock: runs the drain wake-ups that are due, then
    /// takes what is to be written into `w` (see "Lanes"), with a ping when
    /// one is due. What the writer must do next.
    fn take_work(&self, out: &mut MutexGuard<'_, Outbox>, w: &mut WriteState) -> Take {
        loop {
            if out.closed {
                return Take::Closed;
            }
            // The last batch is written (the poller's `rest` is empty).
            out.writing = 0;
            if self.wake_drained(out) {
                continue;
            }
            let limit = self.limits.busy_limit;
            if !out.buf.is_empty() || !out.sealed.is_empty() || !out.flights.is_empty() {
                std::mem::swap(&mut out.buf, &mut w.spare);
                w.wire.extend_from_slice(&out.sealed);
                out.sealed.clear();
                out.held = false; // the writer takes them
                let max = self.limits.max_message;
                out.take_fragments(&mut w.pieces, max);
                if self.pings && w.last_write.duration_since(w.last_ping) >= w.tick {
                    // A ping even when busy: the round trip stays fresh.
                    self.rtt.ping(&mut w.spare);
                    w.last_ping = w.last_write;
                }
                out.writing = w.batch_len();
                if out.queued() > limit {
                    self.busy.store(true, Ordering::Relaxed);
                }
                return Take::Work;
            }
            if out.finishing == Some(true) {
                return Take::Finished;
            }
            // Retiring without `fin` goes on as when idle: heartbeats, until
            // `fin` or the close (see "Retiring").
            let due = w.last_write + w.tick;
            let now = Instant::now();
            if now < due {
                return Take::Idle(due);
            }
            if !self.pings_now(w.tick) {
                // The answering side, hearing the other: nothing to send.
                return Take::Idle(now + w.tick);
            }
            self.rtt.ping(&mut w.spare);
            w.last_ping = now;
            return Take::Work;
        }
    }

    /// Appends the fragments taken to the batch.
    fn frame_pieces(w: &mut WriteState) {
        for (k, header, data, range) in w.pieces.drain(..) {
            let len = header.len() + range.len();
            w.spare.reserve(frame::HEADER_LEN + len);
            w.spare.extend_from_slice(&(len as u32).to_be_bytes());
            w.spare.push(k);
            w.spare.push(0);
            w.spare.extend_from_slice(&header);
            w.spare.extend_from_slice(&data[range]);
        }
    }

    /// After a write: the batch buffers emptied (and shrunk if they grew).
    fn written(w: &mut WriteState) {
        w.last_write = Instant::now();
        w.spare.clear();
        w.wire.clear();
        if w.spare.capacity() > WRITE_BUF_KEEP {
            w.spare = Vec::with_capacity(WRITE_BUF);
        }
        if w.wire.capacity() > WRITE_BUF_KEEP {
            w.wire = Vec::with_capacity(WRITE_BUF);
        }
    }

    /// The writer thread: flush the outbox, or send a heartbeat after a tick
    /// of silence, until closed.
    pub(crate) fn write_loop(&self, tick: Duration) {
        let mut stream = match self.stream.try_clone() {
            Ok(s) => s,
            Err(e) => return self.close(e.into()),
        };
        let mut w = WriteState::new(tick);
        loop {
            {
                let mut out = self.out.lock();
                loop {
                    match self.take_work(&mut out, &mut w) {
                        Take::Closed => return,
                        Take::Finished => {
                            let _ = self.stream.shutdown(Shutdown::Write);
                            return;
                        }
                        Take::Work => break,
                        Take::Idle(due) => {
                            if !out.writer_idle {
                                out.idle_since = Instant::now();
                            }
                            out.writer_idle = true;
                            self.wake.wait_until(&mut out, due);
                            out.writer_idle = false;
                        }
                    }
                }
            }
            Self::frame_pieces(&mut w);
            // `wire`: what a direct write left unsent; then the batch,
            // sealed where it is (no copy; see `Sealer::seal_write`).
            let sent = (self.sealer.lock()).seal_write(&mut stream, &w.wire, &mut w.spare);
            if let Err(e) = sent {
                log::debug!("graft-net: write to {} failed: {e}", self.info.name);
                return self.close(e.into());
            }
            Self::written(&mut w);
        }
    }

    /// On the poller: the I/O thread's turn at the write side (see `io.rs`,
    /// "Who writes"). Sends what is left of the last batch, then batches
    /// as the writer thread does, until the socket would block (writable
    /// interest stays armed) or nothing is left (the write side goes back
    /// to senders: `writer_idle`, interest disarmed). Does nothing while
    /// the write side is the senders'. `Err`: the connection failed.
    pub(crate) fn write_pass(&self, w: &mut WriteState) -> Result<(), NetError> {
        let Some(link) = self.io.get() else {
            return Ok(());
        };
        loop {
            if !w.rest.is_empty() {
                match SockRef::from(&self.stream).send_with_flags(&w.rest, DIRECT_FLAGS) {
                    Ok(n) => {
                        w.rest.drain(..n);
                        w.progress = Instant::now();
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
                if !w.rest.is_empty() {
                    let mut out = self.still_writing(w.rest.len());
                    if !out.writer_idle {
                        self.arm(&mut out, link, true);
                    }
                    return Ok(());
                }
                if w.rest.capacity() > WRITE_BUF_KEEP {
                    w.rest = Vec::new();
                }
            }
            {
                let mut out = self.out.lock();
                if out.writer_idle {
                    return Ok(()); // the senders' (see "Who writes")
                }
                match self.take_work(&mut out, w) {
                    Take::Closed => return Ok(()),
                    Take::Finished => {
                        let _ = self.stream.shutdown(Shutdown::Write);
                        // Never handed back: senders are refused.
                        out.writer_idle = true;
                        self.arm(&mut out, link, false);
                        return Ok(());
                    }
                    Take::Work => {}
                    // No ping from here: the tick thread pings (see `io.rs`).
                    Take::Idle(_) => {
                        out.idle_since = Instant::now();
                        out.writer_idle = true;
                        self.arm(&mut out, link, false);
                        return Ok(());
                    }
                }
            }
            Self::frame_pieces(w);
            let mut sock = Stash {
                sock: &self.stream,
                rest: &mut w.rest,
            };
            let sent = (self.sealer.lock()).seal_write(&mut sock, &w.wire, &mut w.spare);
            if let Err(e) = sent {
                log::debug!("graft-net: write to {} failed: {e}", self.info.name);
                return Err(e.into());
            }
            if !w.rest.is_empty() {
                w.progress = Instant::now();
            }
            Self::written(w);
        }
    }

    /// On the poller, from the tick thread: queues a ping if none was
    /// sent for a tick (see `io.rs`, "Timers"), as any sender would (so it
    /// is written directly when the write side is the senders').
    pub(crate) fn ping_if_due(&self, tick: Duration) {
        if !self.pings_now(tick) {
            return;
        }
        let last = self.rtt.sent.load(Ordering::Relaxed);
        if stamp_now().saturating_sub(last) < tick.as_nanos() as u64 {
            return;
        }
        let len = frame::HEADER_LEN + 17;
        let _ = self.push(u64::MAX, false, len, |b| self.rtt.ping(b));
    }

    /// Whether this side sends a ping when one is due: the pinging side
    /// always; the answering side once no heartbeat came for two ticks
    /// (the pinging side's tick thread starved, or its pings lost): the
    /// other side's I/O thread answers, so each side keeps hearing from
    /// the other while either one's pings go out (see "Heartbeat round
    /// trip").
    fn pings_now(&self, tick: Duration) -> bool {
        let heard = self.rtt.heard.load(Ordering::Relaxed);
        self.pings || stamp_now().saturating_sub(heard) >= 2 * tick.as_nanos() as u64
    }

    /// Delivers every whole frame `dec` holds to `handler`; `last_rx`:
    /// when bytes last arrived. `Err`: why the connection must close.
    pub(crate) fn deliver(
        &self,
        dec: &mut Decoder,
        parts: &mut Reassembly,
        last_rx: Instant,
        handler: &dyn Handler,
    ) -> Result<(), NetError> {
        let r = self.deliver_frames(dec, parts, last_rx, handler);
        handler.frames_end();
        r
    }

    /// [`Conn::deliver`] without the closing `frames_end`.
    fn deliver_frames(
        &self,
        dec: &mut Decoder,
        parts: &mut Reassembly,
        last_rx: Instant,
        handler: &dyn Handler,
    ) -> Result<(), NetError> {
        loop {
            if self.is_closed() {
                return Err(self.reason());
            }
            let Some(f) = dec.next_frame()? else {
                return Ok(());
            };
            let whole = match f.kind {
                kind::HEARTBEAT => {
                    self.on_heartbeat(f.payload);
                    continue;
                }
                kind::FRAG_BEGIN | kind::FRAG_MORE if f.flags != 0 => {
                    return Err(NetError::Protocol("flags on a fragment frame".into()))
                }
                kind::FRAG_BEGIN => match parts.begin(f.payload, last_rx)? {
                    Some(w) => w,
                    None => continue,
                },
                kind::FRAG_MORE => match parts.more(f.payload, last_rx)? {
                    Some(w) => w,
                    None => continue,
                },
                k if k < FIRST_USER_KIND => {
                    return Err(NetError::Protocol(format!(
                        "unexpected transport frame kind {k}"
                    )))
                }
                k => {
                    let payload = if f.flags & FLAG_COMPRESSED != 0 {
                        frame::inflate(f.payload, self.limits.max_frame)?
                    } else {
                        f.payload.to_vec()
                    };
                    handler.frame(&self.info, k, payload);
                    continue;
                }
            };
            let (k, flags, data) = whole;
            let payload = if flags & FLAG_COMPRESSED != 0 {
                frame::inflate(&data, self.limits.max_message)?
            } else {
                data
            };
            handler.frame(&self.info, k, payload);
        }
    }

    /// The silence after which the peer is declared dead.
    pub(crate) fn dead_after(&self) -> Duration {
        self.dead_after
    }

    /// The limits of this connection.
    pub(crate) fn max_message(&self) -> usize {
        self.limits.max_message
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
        let mut parts = Reassembly::new(self.limits.max_message);
        loop {
            if let Err(e) = self.deliver(dec, &mut parts, last_rx, handler) {
                return e;
            }
            if parts.in_progress() > 0 {
                if let Err(e) = parts.check_stalled(Instant::now(), self.dead_after) {
                    return e;
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

/// What [`Conn::take_work`] found.
enum Take {
    /// A batch is in the write state.
    Work,
    /// Nothing to write until the heartbeat due then.
    Idle(Instant),
    /// The connection is closed.
    Closed,
    /// Retiring with `fin`, and everything is written: shut the write
    /// side down, then write nothing more. (Retiring without `fin`, the
    /// writer idles as usual: see "Retiring".)
    Finished,
}

/// The writer's buffers and clocks: the writer thread's locals, or an I/O
/// thread's per connection.
#[derive(Debug)]
pub(crate) struct WriteState {
    spare: Vec<u8>,
    wire: Vec<u8>,
    pieces: Vec<Piece>,
    last_write: Instant,
    last_ping: Instant,
    tick: Duration,
    /// On the poller: sealed bytes the socket did not take yet (sent
    /// before anything else is taken from the outbox).
    rest: Vec<u8>,
    /// On the poller: when `rest` last shrank (a write stuck for the dead
    /// peer window fails the connection).
    pub(crate) progress: Instant,
}

impl WriteState {
    pub(crate) fn new(tick: Duration) -> WriteState {
        let now = Instant::now();
        WriteState {
            spare: Vec::with_capacity(WRITE_BUF),
            wire: Vec::with_capacity(WRITE_BUF),
            pieces: Vec::new(),
            last_write: now,
            last_ping: now,
            tick,
            rest: Vec::new(),
            progress: now,
        }
    }

    /// Bytes of the batch taken: the small frames, what a direct write
    /// left, and the fragments with their headers.
    fn batch_len(&self) -> usize {
        let pieces: usize = (self.pieces.iter())
            .map(|(_, header, _, range)| frame::HEADER_LEN + header.len() + range.len())
            .sum();
        self.spare.len() + self.wire.len() + pieces
    }

    /// Whether sealed bytes wait for the socket to take them.
    pub(crate) fn stuck(&self) -> bool {
        !self.rest.is_empty()
    }
}

/// A writer over a non-blocking socket that keeps, in `rest`, whatever the
/// socket does not take (so `seal_write` never sees `WouldBlock`, and the
/// common case, a socket that takes everything, copies nothing).
struct Stash<'a> {
    sock: &'a TcpStream,
    rest: &'a mut Vec<u8>,
}

impl std::io::Write for Stash<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.write_vectored(&[std::io::IoSlice::new(b)])
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut n = 0;
        if self.rest.is_empty() {
            n = loop {
                match (&mut &*self.sock).write_vectored(bufs) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break 0,
                    Err(e) => return Err(e),
                }
            };
        }
        let mut skip = n;
        for b in bufs {
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            self.rest.extend_from_slice(&b[skip..]);
            skip = 0;
        }
        Ok(total)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Conn {
    /// Links the connection to its I/O thread's poller (once, by that
    /// thread, before the first `write_pass`).
    pub(crate) fn link(&self, poller: Poller, key: usize) {
        let _ = self.io.set(IoLink { poller, key });
        // Registered with writable interest: the first event runs a pass.
        self.out.lock().armed = true;
    }
}

// # Heartbeat round trip
//
// A heartbeat may carry 9 bytes: a tag (`PING` or `PONG`) and a stamp; a
// ping 17, with the sender's last round trip in ns after the stamp (0:
// none yet). Only one side of a connection pings: the one whose node name
// is the smaller (`Conn::pings`); the other answers. Each side then
// still hears from the other every tick (a ping, or the pong to its own),
// which is all the dead window needs, with half the frames and wake-ups
// of pings both ways (an idle cluster's connections carry nothing else).
// The answering side pings as well while it has heard no heartbeat for
// two ticks (`Conn::pings_now`): on a starved machine the pinging
// side's tick thread may not run for a whole dead window, and the
// answering side's pings, answered by the other's I/O thread, keep both
// sides hearing each other then.
// The pinging side's heartbeats are pings (one a tick, also when traffic
// is dense); the reader answers a ping with a pong carrying the same
// stamp, queued like any frame (so the round trip includes the outboxes,
// as a message would see them); a pong whose stamp is the last ping's
// gives the round trip, and the answering side learns it from the next
// ping. Any other stamp (a late pong, a forgery) is ignored. An empty
// heartbeat (an older peer) is a heartbeat only: its round trip is then
// unknown. (A peer that pings from both sides, as before, is answered
// alike.)

/// A round trip told in a ping above this (an hour) is not believed.
const MAX_TOLD_RTT_NS: u64 = 3_600_000_000_000;

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
    /// Stamp of the last ping sent (0: none).
    sent: std::sync::atomic::AtomicU64,
    /// Stamp of the last heartbeat received (ping or pong).
    heard: std::sync::atomic::AtomicU64,
}

/// Nanoseconds on a process-wide clock, never 0.
fn stamp_now() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
}

impl Rtt {
    /// Appends a ping heartbeat to `buf`, with the last round trip.
    fn ping(&self, buf: &mut Vec<u8>) {
        let stamp = stamp_now();
        self.pending.store(stamp, Ordering::Relaxed);
        self.sent.store(stamp, Ordering::Relaxed);
        let mut p = [PING; 17];
        p[1..9].copy_from_slice(&stamp.to_be_bytes());
        let last = self.last_ns.load(Ordering::Relaxed);
        p[9..].copy_from_slice(&last.to_be_bytes());
        frame::encode(buf, kind::HEARTBEAT, 0, &p);
    }
}

impl Conn {
    /// A heartbeat's payload: answer a ping, time a pong.
    fn on_heartbeat(&self, payload: &[u8]) {
        // A ping may carry the sender's last round trip after the stamp.
        let (head, theirs) = match payload.len() {
            9 => (payload, None),
            17 => (&payload[..9], Some(&payload[9..])),
            _ => return,
        };
        let p: [u8; 9] = head.try_into().expect("9 bytes");
        self.rtt.heard.store(stamp_now(), Ordering::Relaxed);
        let stamp = u64::from_be_bytes(p[1..].try_into().expect("8 bytes"));
        match p[0] {
            PING => {
                if let Some(ns) = theirs.map(|t| u64::from_be_bytes(t.try_into().expect("8 bytes")))
                {
                    // The pinging side's round trip is this side's too;
                    // this side times none of its own while it only answers.
                    if ns != 0 && ns < MAX_TOLD_RTT_NS && !self.pings {
                        self.rtt.last_ns.store(ns, Ordering::Relaxed);
                    }
                }
                let mut pong = p;
                pong[0] = PONG;
                // Key `u64::MAX` is no sender's: the echo never waits
                // behind a large message.
                let len = frame::HEADER_LEN + pong.len();
                let _ = self.push(u64::MAX, false, len, |b| {
                    frame::encode(b, kind::HEARTBEAT, 0, &pong)
                });
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

// # Parallel lanes
//
// With `NetConfig::lanes(n)`, a peer is a session's first connection (lane
// 0, the one in the transport's tables) and `n - 1` extra lanes, each a
// `Conn` of its own (outbox, sealer, heartbeats, reader) whose `info` is
// the first one's, so that its frames are delivered as the peer's. The
// first holds its lanes (`lanes`, set once before `peer_up`, so a sender
// never sees them change); a lane holds its first weakly (`main`). A
// frame of order key `k` goes on lane `k % n` (`lane`); key 0 and the
// transport's own frames stay on the first. Closing any lane closes them
// all (`close_group`); each reader that ends counts down the first's
// `readers`, and only the last reports `peer_down`, so no frame of any
// lane is delivered after it.

impl Conn {
    /// The connection that carries frames of order key `key`.
    #[inline]
    pub(crate) fn lane(&self, key: u64) -> &Conn {
        match self.lanes.get() {
            None => self,
            Some(l) => {
                let i = (key % (l.len() as u64 + 1)) as usize;
                if i == 0 || key == u64::MAX {
                    self
                } else {
                    &l[i - 1]
                }
            }
        }
    }

    /// The extra lanes (empty without).
    pub(crate) fn extra_lanes(&self) -> &[Arc<Conn>] {
        self.lanes.get().map_or(&[], |l| l)
    }

    /// Makes `lanes` this first connection's extra lanes (once, before
    /// `peer_up` and before any reader runs); each is linked back.
    pub(crate) fn set_lanes(self: &Arc<Self>, lanes: Vec<Arc<Conn>>) {
        for l in &lanes {
            let _ = l.main.set(Arc::downgrade(self));
        }
        self.readers.store(lanes.len() + 1, Ordering::Release);
        let _ = self.lanes.set(lanes.into_boxed_slice());
        if self.is_closed() {
            // Closed meanwhile: the lanes go too.
            self.close_group();
        }
    }

    /// Links an extra lane to its first connection before the set is
    /// complete (so that closing the lane closes the first).
    pub(crate) fn set_main(&self, main: &Arc<Conn>) {
        let _ = self.main.set(Arc::downgrade(main));
    }

    /// The first connection of an extra lane (`None` for a first one, or
    /// when it is gone).
    pub(crate) fn main(&self) -> Option<Arc<Conn>> {
        self.main.get().and_then(|w| w.upgrade())
    }

    /// Whether this is an extra lane.
    pub(crate) fn is_lane(&self) -> bool {
        self.group.index > 0
    }

    /// A first connection: one reader finished; `true` for the last.
    pub(crate) fn reader_done(&self) -> bool {
        self.readers.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// After this connection closed: closes the rest of its group, with
    /// the same reason.
    fn close_group(&self) {
        let reason = self.reason();
        if let Some(main) = self.main() {
            main.close(reason.clone());
        }
        for l in self.extra_lanes() {
            l.close(reason.clone());
        }
    }

    /// User frames queued on this connection so far.
    pub(crate) fn frames_queued(&self) -> u64 {
        self.out.lock().frames
    }
}
