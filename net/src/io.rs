//! The poller transport ([`IoMode::Poller`](crate::IoMode)): every socket
//! of a node on a poller, driven by a small fixed set of I/O threads, no OS
//! thread per connection.
//!
//! # Threads and sockets
//!
//! `io_threads` threads (`graft-net-io`), each with its own level-triggered
//! epoll poller (`poll.rs`). The first also owns the listener and every
//! pending inbound handshake (`pending.rs`), as the accept thread does in
//! [`IoMode::Threads`](crate::IoMode). An established connection is owned
//! by one I/O thread ([`IoConn`]: its decoder, reassembly, read clock and
//! write state), chosen round-robin; no other thread reads its socket.
//! Outbound handshakes run on the caller of `connect` (blocking); inbound
//! ones on the first I/O thread. Either way, once up and announced
//! (`peer_up`), the connection is handed to its I/O thread through that
//! thread's inbox (a mutex-guarded list, then a poller notify), which
//! registers it (readable and writable) and keeps it until it closes.
//!
//! # Reading
//!
//! A readable event reads the socket into the connection's decoder (through
//! the record layer, `SealedReader`, non-blocking) and calls
//! [`Handler::frame`](crate::Handler::frame) for every whole frame, on the
//! I/O thread: socket to handler with no hand-off. At most `READS_PER_EVENT`
//! reads per event: a connection with more to give is visited again at the
//! next turn of the loop (with a zero poll timeout), so one busy peer does
//! not starve the others. EOF, an error, a bad record or frame: the
//! connection closes and `peer_down` is reported once, by the I/O thread.
//!
//! # Who writes
//!
//! The outbox (`conn.rs`) is unchanged; what changes is who holds the write
//! side of the socket. `Outbox::writer_idle`, read and written only under
//! the outbox lock, says:
//!
//! * `true`: the senders'. A sender that finds traffic sparse writes
//!   directly with `MSG_DONTWAIT` under the lock (today's fast path); one
//!   that cannot, or that finds traffic dense, hands the write side over.
//! * `false`: the I/O thread's. Senders only append (and coalesce); the I/O
//!   thread's `write_pass` sends its leftover bytes, then takes whole
//!   batches from the outbox (small frames, fragments round-robin, pings:
//!   the writer thread's batching), seals them and writes them without
//!   blocking, until the socket would block or the outbox is empty. Then,
//!   still under the lock, it sets `writer_idle` and disarms writable
//!   interest.
//!
//! Handing over (`Conn::hand_over`) is: under the lock, clear `writer_idle`
//! and arm writable interest (`EPOLL_CTL_MOD` with `EPOLLOUT`). Arming is
//! the wake-up: a writable socket is reported by the next `epoll_wait`
//! (the I/O thread is woken if it sleeps), so no wake-up is lost, and none
//! is made when the I/O thread owns the write side already (it will find
//! the new bytes in its pass). Every change of interest happens under the
//! lock together with the `writer_idle` change it belongs to
//! (`Outbox::armed` mirrors it), so a disarm can never overtake the arm of
//! a later hand-over. The loom model `loom-tests/tests/poller_wake.rs`
//! checks this protocol: whatever the interleaving, every frame a sender
//! queued is written.
//!
//! A peer that stops reading fills its socket: the pass returns with bytes
//! left (interest stays armed), the I/O thread serves the others, and the
//! outbox grows as with the writer thread (busy at `busy_limit`). A write
//! making no progress for the peer's dead window fails the connection, as
//! the writer thread's write timeout does.
//!
//! # Helpers
//!
//! Any thread may serve an I/O thread's established connections for a
//! moment ([`Transport::poll_ready`](crate::Transport::poll_ready)): the
//! runtime's workers do, while they spin for work, so that a frame goes
//! from the socket to the process it wakes on one thread (BEAM's schedulers
//! poll their sockets too). Without it every frame waits for the I/O thread
//! to be woken and scheduled: on a machine whose cores the spinning workers
//! hold, about 9 µs each way (`docs/decisions.md`).
//!
//! The connections live in [`IoThread::shared`]. The I/O thread takes that
//! lock after each wait and holds it while it serves; it holds no other
//! lock while it takes it. A helper only `try_lock`s it (an I/O thread
//! busy serving is skipped, never waited for), then takes the events ready
//! now with a zero-timeout `epoll_wait` ([`Poller::peek`]) and serves the
//! connections' events exactly as the I/O thread does. Three rules keep
//! the I/O thread's view whole:
//!
//! * Readiness is level-triggered: what a helper served is not reported
//!   again (the socket is drained); what it did not (the listener, pending
//!   handshakes, anything it skipped) is reported to the I/O thread's next
//!   wait, so a helper can never consume another's event.
//! * A helper never drains the poller's `eventfd`: a `notify` (a new
//!   connection in the inbox, shutdown) is left for the I/O thread.
//! * A connection a helper left with more to read goes on `again` and the
//!   helper notifies the poller: bytes already taken into the record layer
//!   are not socket readiness, and the I/O thread must revisit them
//!   without waiting. The I/O thread itself carries whether it left
//!   `again` non-empty from one turn to the next, so it takes the lock
//!   once a turn.
//!
//! Frames of one connection are read and delivered under the one lock, by
//! one thread at a time, so their order is kept. Handlers then run on
//! whichever thread served the event: they already must not block (they
//! run on an I/O thread), and the runtime's send path never suspends a
//! worker on a busy peer. The loom model `loom-tests/tests/io_helpers.rs`
//! checks the three rules.
//!
//! # Timers
//!
//! No timer per connection: the I/O thread scans its connections when the
//! first of them is due (`IoConn::scan_due`: the end of its dead window,
//! or of a stuck write's or a stalled reassembly's), at least a quarter
//! tick and at most a tick after its last scan (its poll timeout, or sooner
//! for a handshake deadline). A connection silent for its dead window is
//! closed (`HeartbeatTimeout`); a reassembly stalled as long fails it. So a
//! dead peer is found within a quarter tick of the window (the reader
//! thread's read timeout: half a tick). Heartbeats keep an idle
//! connection's window two ticks away, so an idle node's I/O thread wakes
//! for its scans once a tick (it woke every quarter tick before: in an
//! idle 256-node overlay its wake-ups fell by 12-20 %).
//!
//! Heartbeats are sent by one more thread per node (`graft-net-tick`),
//! not by the I/O threads: a handler runs on its I/O thread, and one that
//! takes long (user code decoding a message, a panic printing its
//! backtrace) must not silence every peer of that thread, as it would if
//! the I/O thread sent the pings (seen in `dist_cluster`: a 600 ms panic
//! report took a node down). Every quarter tick it queues a ping on each
//! connection that sent none for a tick, through the ordinary send path,
//! so it is written directly (a sender's `MSG_DONTWAIT` write) while the
//! write side is the senders', which it is whenever nothing is queued.
//! A write pass also sends a ping when it has written for a tick without
//! one (dense traffic), as the writer thread does.
//!
//! # Shutdown
//!
//! Shutdown closes every connection (the sockets are shut down) and
//! notifies every poller; an I/O thread that sees the transport closed
//! reports `peer_down` for every connection it holds or has in its inbox
//! (nothing is added to an inbox once closed: the hand-over checks under
//! the transport's lock) and returns; shutdown joins it.

use std::collections::HashMap;
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::conn::{Conn, WriteState};
use crate::frag::Reassembly;
use crate::frame::{Decoder, Fill};
use crate::poll::{Events, Poller, Registered};
use crate::session::SealedReader;
use crate::{Handler, NetError};

/// Reads per readable event at most (see "Reading").
const READS_PER_EVENT: usize = 4;

/// The reading half of an established connection.
pub(crate) struct Reader {
    pub(crate) src: SealedReader<TcpStream>,
    pub(crate) dec: Decoder,
}

/// One I/O thread's poller and inbox.
pub(crate) struct IoThread {
    pub(crate) poller: Poller,
    /// Connections handed to this thread, not registered yet.
    pub(crate) inbox: Mutex<Vec<(Arc<Conn>, Reader)>>,
    /// Its established connections: the I/O thread's while it serves
    /// events, a helper's while one holds the lock (see "Helpers").
    pub(crate) shared: Mutex<IoShared>,
}

/// What an I/O thread and its helpers serve connections with.
pub(crate) struct IoShared {
    pub(crate) conns: HashMap<usize, IoConn>,
    /// Connections with more to read: visited again at the next turn.
    pub(crate) again: Vec<usize>,
    /// A helper's events.
    pub(crate) events: Events,
}

thread_local! {
    /// The `IoThread` whose loop runs on this thread (its address), if any.
    static CURRENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl IoThread {
    pub(crate) fn new() -> std::io::Result<IoThread> {
        Ok(IoThread {
            poller: Poller::new()?,
            inbox: Mutex::new(Vec::new()),
            shared: Mutex::new(IoShared {
                conns: HashMap::new(),
                again: Vec::new(),
                events: Events::new(),
            }),
        })
    }

    /// Called by the thread that runs this one's loop, before it starts.
    pub(crate) fn enter(&self) {
        CURRENT.with(|c| c.set(self as *const IoThread as usize));
    }

    /// Whether the caller is this I/O thread itself: then a connection it
    /// hands itself needs no wake-up (its loop looks at the inbox before it
    /// waits again).
    pub(crate) fn is_current(&self) -> bool {
        CURRENT.with(|c| c.get()) == self as *const IoThread as usize
    }
}

/// The socket of a connection, registered by its own descriptor (the one
/// senders change the interest of).
pub(crate) struct ConnFd(Arc<Conn>);

impl AsFd for ConnFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.stream().as_fd()
    }
}

/// An established connection on its I/O thread.
pub(crate) struct IoConn {
    pub(crate) conn: Arc<Conn>,
    reader: Reader,
    parts: Reassembly,
    last_rx: Instant,
    write: WriteState,
    _reg: Registered<ConnFd>,
}

impl IoConn {
    /// Registers `conn` on `poller` under `key` (readable and writable:
    /// the first event runs a write pass, which parks the write side).
    pub(crate) fn register(
        conn: Arc<Conn>,
        reader: Reader,
        poller: &Poller,
        key: usize,
        tick: Duration,
    ) -> std::io::Result<IoConn> {
        conn.link(poller.clone(), key);
        let reg = poller.register_with(ConnFd(conn.clone()), key, true)?;
        Ok(IoConn {
            parts: Reassembly::new(conn.max_message()),
            conn,
            reader,
            last_rx: Instant::now(),
            write: WriteState::new(tick),
            _reg: reg,
        })
    }

    /// Serves one event; `Ok(true)`: there may be more to read (visit
    /// again soon).
    pub(crate) fn serve(
        &mut self,
        readable: bool,
        writable: bool,
        handler: &dyn Handler,
    ) -> Result<bool, NetError> {
        if self.conn.is_closed() {
            return Err(self.conn.reason());
        }
        let mut more = false;
        if readable {
            more = self.read(handler)?;
        }
        if writable {
            self.conn.write_pass(&mut self.write)?;
        }
        Ok(more)
    }

    fn read(&mut self, handler: &dyn Handler) -> Result<bool, NetError> {
        let (c, r) = (&self.conn, &mut self.reader);
        for _ in 0..READS_PER_EVENT {
            c.deliver(&mut r.dec, &mut self.parts, self.last_rx, handler)?;
            match r.dec.read_from(&mut r.src)? {
                Fill::Closed => return Err(NetError::Closed),
                Fill::Data => {
                    self.last_rx = Instant::now();
                    if r.src.drained() {
                        // The socket gave all it had: the poller reports
                        // what comes next (no read to see `WouldBlock`).
                        c.deliver(&mut r.dec, &mut self.parts, self.last_rx, handler)?;
                        return Ok(false);
                    }
                }
                Fill::Again => {}
                // Non-blocking: would block.
                Fill::TimedOut => return Ok(false),
            }
        }
        c.deliver(&mut r.dec, &mut self.parts, self.last_rx, handler)?;
        Ok(true)
    }

    /// When this connection next needs a scan: the end of its dead window,
    /// or sooner for a stuck write or a stalled reassembly (each is given
    /// the same window).
    pub(crate) fn scan_due(&self) -> Instant {
        let dead = self.conn.dead_after();
        let mut due = self.last_rx + dead;
        if self.write.stuck() {
            due = due.min(self.write.progress + dead);
        }
        if let Some(d) = self.parts.stall_due(dead) {
            due = due.min(d);
        }
        due
    }

    /// The periodic check (see "Timers"); `Ok(true)`: there may be more to
    /// read (visit again soon).
    ///
    /// Silence and a stuck write are measured by this thread's clock, and
    /// this thread may itself have been held (a handler that took long on
    /// another connection): so before failing the connection it looks at
    /// the socket, reading what waits there (and delivering it) or writing
    /// what it can take, and fails it only if that finds nothing.
    pub(crate) fn scan(&mut self, now: Instant, handler: &dyn Handler) -> Result<bool, NetError> {
        if self.conn.is_closed() {
            return Err(self.conn.reason());
        }
        let dead = self.conn.dead_after();
        let mut more = false;
        if now.saturating_duration_since(self.last_rx) >= dead {
            more = self.read(handler)?;
            let silent = Instant::now().saturating_duration_since(self.last_rx);
            if silent >= dead {
                return Err(NetError::HeartbeatTimeout(silent));
            }
        }
        if self.parts.in_progress() > 0 {
            self.parts.check_stalled(now, dead)?;
        }
        if self.write.stuck() && now.saturating_duration_since(self.write.progress) >= dead {
            self.conn.write_pass(&mut self.write)?;
            let stuck = Instant::now().saturating_duration_since(self.write.progress);
            if self.write.stuck() && stuck >= dead {
                return Err(NetError::Io(Arc::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("a write made no progress for {stuck:?}"),
                ))));
            }
        }
        Ok(more)
    }
}
