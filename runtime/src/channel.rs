//! Typed channels: [`SendPort`] / [`ReceivePort`] pairs, unbounded, bounded
//! and rendezvous, that park green threads (never workers).
//!
//! One channel is a queue and its waiters under one lock:
//!
//! | field          | written by                        | read by            |
//! |----------------|-----------------------------------|--------------------|
//! | `queue`        | senders (push), the receiver (pop)| both               |
//! | `pushed/taken` | senders / the receiver            | rendezvous senders |
//! | `senders`      | `SendPort` clone and drop         | the receiver       |
//! | `receiver`     | `ReceivePort` drop                | senders            |
//! | `recv_waiter`  | the receiver (register/clear), senders (take to wake) | |
//! | `send_waiters` | blocked senders (register), the receiver (drain to wake) | |
//!
//! A [`ReceivePort`] is not `Clone` and not `Sync`: one consumer at a time
//! (Cloud Haskell's rule), so a channel has at most one receive waiter, and
//! a send wakes exactly it.
//!
//! Wait protocol (see `wakeup.rs`): a waiter checks its condition and
//! registers its [`Unparker`] in one critical section, then parks and checks
//! again; a waker changes the state and takes the waiters in one critical
//! section, then unparks them. So a wake-up can be early or spurious, never
//! lost.
//!
//! * receive: pop, or register as `recv_waiter`; a push (or the last sender
//!   leaving) wakes it.
//! * bounded send: push while `len < max(cap, 1)`, or register in
//!   `send_waiters`; every pop (or the receiver leaving) wakes all of them
//!   (few senders block on one port; waking them all keeps no one waiting on
//!   a wake-up another waiter swallowed).
//! * rendezvous (`cap == 0`): a send pushes when the queue is empty, then
//!   waits until the receiver has taken *its* message (`taken > ticket`), so
//!   sender and receiver meet (CML). A rendezvous send that times out or
//!   finds the receiver gone takes its message back.

mod error;
mod mailbox;
mod remote;
mod select;

pub use error::{
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
};
pub use mailbox::{PortClosed, PortId, PortMessage};
pub use select::{merge_ports, select, select_timeout, MergedPorts};

use crate::loom::{Mutex, MutexGuard};
use crate::wakeup::{park, park_until, Unparker};
use mailbox::Sink;
use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Capacity of an unbounded channel.
const UNBOUNDED: usize = usize::MAX;

/// The shared part of one channel.
pub(crate) struct Chan<T> {
    /// `UNBOUNDED`, a bound, or 0 for rendezvous. Fixed at creation.
    cap: usize,
    state: Mutex<State<T>>,
}

pub(crate) struct State<T> {
    pub(crate) queue: VecDeque<T>,
    /// Messages ever pushed / popped (rendezvous tickets).
    pushed: u64,
    taken: u64,
    /// Live `SendPort`s.
    pub(crate) senders: usize,
    /// The `ReceivePort` is alive.
    receiver: bool,
    /// The receiver, parked (or about to park) on this channel.
    pub(crate) recv_waiter: Option<Unparker>,
    /// Blocked senders: (ticket, unparker); drained by every pop.
    send_waiters: Vec<(u64, Unparker)>,
    next_waiter: u64,
    /// Set once by [`ReceivePort::into_mailbox`]: messages go to a process's
    /// mailbox instead of `queue`.
    sink: Option<Arc<Sink<T>>>,
    /// Routed messages delivered and not yet consumed (they count against
    /// the bound like queued ones).
    in_mailbox: usize,
    /// The process that forwards sends from other nodes into this channel
    /// (spawned when a send port is first encoded for another node).
    proxy: Option<crate::Pid>,
}

impl<T> Chan<T> {
    fn new(cap: usize) -> Chan<T> {
        Chan {
            cap,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                pushed: 0,
                taken: 0,
                senders: 1,
                receiver: true,
                recv_waiter: None,
                send_waiters: Vec::new(),
                next_waiter: 0,
                sink: None,
                in_mailbox: 0,
                proxy: None,
            }),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock()
    }

    /// The most messages the queue holds before senders wait.
    #[inline]
    fn room(&self) -> usize {
        self.cap.max(1)
    }

    /// Pops one message, taking the blocked senders out to be woken (see
    /// [`wake_all`]). The caller holds the lock.
    #[inline]
    pub(crate) fn pop_locked(&self, st: &mut State<T>) -> Option<(T, Waiters)> {
        let v = st.queue.pop_front()?;
        st.taken += 1;
        Some((v, take_waiters(st)))
    }

    /// Receives, waiting until `deadline` (`None`: for ever).
    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        loop {
            let mut st = self.lock();
            if let Some((v, senders)) = self.pop_locked(&mut st) {
                st.recv_waiter = None;
                drop(st);
                wake_all(senders);
                return Ok(v);
            }
            if st.senders == 0 {
                st.recv_waiter = None;
                return Err(RecvTimeoutError::Disconnected);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                st.recv_waiter = None;
                return Err(RecvTimeoutError::Timeout);
            }
            let stale = st.recv_waiter.replace(Unparker::current());
            drop(st);
            drop(stale); // outside the lock (see `wake_all`)
            wait(deadline);
        }
    }

    fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut st = self.lock();
        match self.pop_locked(&mut st) {
            Some((v, senders)) => {
                drop(st);
                wake_all(senders);
                Ok(v)
            }
            None if st.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Pushes and takes the receive waiter (to unpark after unlocking).
    #[inline]
    fn push_locked(st: &mut State<T>, v: T) -> (u64, Option<Unparker>) {
        st.queue.push_back(v);
        st.pushed += 1;
        (st.pushed - 1, st.recv_waiter.take())
    }

    /// Registers (or keeps) a blocked sender's unparker.
    fn register_sender(st: &mut State<T>, id: &mut Option<u64>) {
        let ticket = *id.get_or_insert_with(|| {
            st.next_waiter += 1;
            st.next_waiter
        });
        if !st.send_waiters.iter().any(|(t, _)| *t == ticket) {
            st.send_waiters.push((ticket, Unparker::current()));
        }
    }

    fn unregister_sender(st: &mut State<T>, id: Option<u64>) {
        if let Some(t) = id {
            st.send_waiters.retain(|(w, _)| *w != t);
        }
    }

    /// Sends, waiting for room (and, for rendezvous, for the receiver to take
    /// the message) until `deadline`.
    fn send_until(&self, v: T, deadline: Option<Instant>) -> Result<(), SendTimeoutError<T>> {
        let mut id = None;
        let mut st = self.lock();
        // Phase 1: room in the queue.
        loop {
            if !st.receiver {
                Self::unregister_sender(&mut st, id);
                return Err(SendTimeoutError::Disconnected(v));
            }
            if st.queue.len() + st.in_mailbox < self.room() {
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                Self::unregister_sender(&mut st, id);
                return Err(SendTimeoutError::Timeout(v));
            }
            Self::register_sender(&mut st, &mut id);
            drop(st);
            wait(deadline);
            st = self.lock();
        }
        if let Some(sink) = st.sink.clone() {
            // Routed to a mailbox: delivered counts as sent (a routed
            // rendezvous port behaves as `bounded(1)`).
            Self::unregister_sender(&mut st, id);
            st.in_mailbox += 1;
            st.pushed += 1;
            drop(st);
            sink.deliver(v);
            return Ok(());
        }
        let (ticket, rx) = Self::push_locked(&mut st, v);
        if self.cap != 0 {
            Self::unregister_sender(&mut st, id);
            drop(st);
            if let Some(u) = rx {
                u.unpark();
            }
            return Ok(());
        }
        // Phase 2 (rendezvous): wait until the receiver took our message.
        drop(st);
        if let Some(u) = rx {
            u.unpark();
        }
        st = self.lock();
        loop {
            // Taken, or moved to a mailbox by `into_mailbox` (delivered).
            if st.taken > ticket || st.sink.is_some() {
                Self::unregister_sender(&mut st, id);
                return Ok(());
            }
            let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
            if !st.receiver || timed_out {
                // Not taken: ours is the only message in the queue (a
                // rendezvous queue holds at most one), so take it back.
                Self::unregister_sender(&mut st, id);
                let v = st.queue.pop_back().expect("an untaken rendezvous message");
                st.pushed -= 1;
                // Room again: let other blocked senders try.
                let senders = take_waiters(&mut st);
                drop(st);
                wake_all(senders);
                return Err(if timed_out {
                    SendTimeoutError::Timeout(v)
                } else {
                    SendTimeoutError::Disconnected(v)
                });
            }
            Self::register_sender(&mut st, &mut id);
            drop(st);
            wait(deadline);
            st = self.lock();
        }
    }

    fn try_send(&self, v: T) -> Result<(), TrySendError<T>> {
        let mut st = self.lock();
        if !st.receiver {
            return Err(TrySendError::Disconnected(v));
        }
        let ok = if st.sink.is_some() {
            st.in_mailbox < self.room()
        } else if self.cap == 0 {
            st.queue.is_empty() && st.recv_waiter.is_some()
        } else {
            st.queue.len() < self.cap
        };
        if !ok {
            return Err(TrySendError::Full(v));
        }
        if let Some(sink) = st.sink.clone() {
            st.in_mailbox += 1;
            st.pushed += 1;
            drop(st);
            sink.deliver(v);
            return Ok(());
        }
        let (_, rx) = Self::push_locked(&mut st, v);
        drop(st);
        if let Some(u) = rx {
            u.unpark();
        }
        Ok(())
    }
}

/// Blocked senders, taken out of the channel to be woken.
pub(crate) type Waiters = Vec<(u64, Unparker)>;

/// Takes the blocked senders out (keeping an empty list's capacity).
#[inline]
pub(crate) fn take_waiters<T>(st: &mut State<T>) -> Waiters {
    if st.send_waiters.is_empty() {
        Vec::new()
    } else {
        std::mem::take(&mut st.send_waiters)
    }
}

/// Wakes taken waiters. Call with the channel lock released: dropping an
/// `Unparker` may drop the last reference to a process (at node shutdown),
/// whose unwinding stack may use this very channel.
#[inline]
pub(crate) fn wake_all(waiters: Waiters) {
    for (_, u) in waiters {
        u.unpark();
    }
}

#[inline]
fn wait(deadline: Option<Instant>) {
    match deadline {
        None => park(),
        Some(d) => park_until(d),
    }
}

/// The sending end of a channel. Clone it to send from several places; the
/// channel is disconnected for the receiver once every clone is dropped.
///
/// `SendPort` is `Send + Sync` and can be used from processes and from plain
/// OS threads.
///
/// For a [`Mobile`](crate::Mobile) message type it is `Mobile` itself: send
/// it to a process on another node (in a message, or in a `spawn_on`
/// environment) and sends there reach this channel, in order per sending
/// process. On that node a send is a plain remote [`send`](crate::send): it
/// never waits or fails (a bound applies on the channel's node only), and
/// once a port has left its node the channel no longer reports
/// disconnection to its receiver (some node may still send).
pub struct SendPort<T> {
    inner: Inner<T>,
}

enum Inner<T> {
    /// On the channel's node.
    Local(Arc<Chan<T>>),
    /// Came from another node: sends go to the channel's proxy process
    /// there, by ordinary remote send.
    Remote {
        proxy: crate::Pid,
        /// `crate::send::<T>`, captured where `T: Mobile` is known.
        send: fn(crate::Pid, T),
    },
}

/// The receiving end of a channel: one consumer (not `Clone`, not `Sync`);
/// move it to the process that receives. Dropping it disconnects the senders.
pub struct ReceivePort<T> {
    pub(crate) chan: Arc<Chan<T>>,
    /// One consumer at a time: `!Sync`.
    _not_sync: PhantomData<Cell<()>>,
}

/// An unbounded channel: sends never wait.
///
/// # Examples
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let sum = node.run(|| {
///     let (tx, rx) = channel::<u32>();
///     for i in 0..4 {
///         let tx = tx.clone();
///         spawn(move || tx.send(i).unwrap());
///     }
///     drop(tx);
///     rx.iter().sum::<u32>() // ends when every sender is gone
/// }).unwrap();
/// assert_eq!(sum, 6);
/// node.shutdown();
/// ```
pub fn channel<T>() -> (SendPort<T>, ReceivePort<T>) {
    pair(UNBOUNDED)
}

/// A channel holding at most `cap` messages: a sender waits (its green
/// thread parks) while it is full. `bounded(0)` is a rendezvous channel: a
/// send waits until a receiver has taken the message (sender and receiver
/// meet, as in CML).
///
/// # Examples
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     let (tx, rx) = bounded::<&str>(0);
///     let me = self_pid();
///     spawn(move || {
///         tx.send("meet").unwrap(); // returns once the receiver has it
///         send(me, "sent");
///     });
///     assert_eq!(rx.recv().unwrap(), "meet");
///     assert_eq!(expect::<&str>(), "sent");
/// }).unwrap();
/// node.shutdown();
/// ```
pub fn bounded<T>(cap: usize) -> (SendPort<T>, ReceivePort<T>) {
    pair(cap)
}

fn pair<T>(cap: usize) -> (SendPort<T>, ReceivePort<T>) {
    let chan = Arc::new(Chan::new(cap));
    (
        SendPort {
            inner: Inner::Local(chan.clone()),
        },
        ReceivePort {
            chan,
            _not_sync: PhantomData,
        },
    )
}

impl<T> SendPort<T> {
    /// The local channel, or `Err(msg)` with a send to the remote proxy done.
    #[inline]
    fn local_or_forward(&self, msg: T) -> Result<(&Arc<Chan<T>>, T), ()> {
        match &self.inner {
            Inner::Local(chan) => Ok((chan, msg)),
            Inner::Remote { proxy, send } => {
                send(*proxy, msg);
                Err(())
            }
        }
    }

    /// Sends `msg`, waiting while a bounded port is full (for a rendezvous
    /// port: until the receiver takes it). Inside a process the wait parks
    /// its green thread; outside, it blocks the thread.
    ///
    /// A port that came from another node sends like [`send`](crate::send)
    /// (never waits, never fails; messages from one process keep their
    /// order).
    ///
    /// # Errors
    ///
    /// [`SendError`] with the message if the receiving port is gone.
    pub fn send(&self, msg: T) -> Result<(), SendError<T>> {
        let Ok((chan, msg)) = self.local_or_forward(msg) else {
            return Ok(());
        };
        chan.send_until(msg, None).map_err(|e| match e {
            SendTimeoutError::Timeout(v) | SendTimeoutError::Disconnected(v) => SendError(v),
        })
    }

    /// Sends without waiting. A rendezvous port accepts only when its
    /// receiver is waiting.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] or [`TrySendError::Disconnected`], with the
    /// message.
    pub fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        let Ok((chan, msg)) = self.local_or_forward(msg) else {
            return Ok(());
        };
        chan.try_send(msg)
    }

    /// Like [`send`](SendPort::send), waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`SendTimeoutError`] with the message.
    pub fn send_timeout(&self, msg: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        self.send_deadline(msg, crate::sched::timer::deadline_after(timeout))
    }

    /// Like [`send`](SendPort::send), waiting until `deadline` at most.
    ///
    /// # Errors
    ///
    /// [`SendTimeoutError`] with the message.
    pub fn send_deadline(&self, msg: T, deadline: Instant) -> Result<(), SendTimeoutError<T>> {
        let Ok((chan, msg)) = self.local_or_forward(msg) else {
            return Ok(());
        };
        chan.send_until(msg, Some(deadline))
    }

    /// Whether the receiving port is gone (always `false` for a port from
    /// another node: that is not known here).
    pub fn is_disconnected(&self) -> bool {
        match &self.inner {
            Inner::Local(chan) => !chan.lock().receiver,
            Inner::Remote { .. } => false,
        }
    }

    /// Messages sent and not yet received (queued, or routed to a mailbox
    /// and not yet consumed); 0 for a port from another node.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Local(chan) => {
                let st = chan.lock();
                st.queue.len() + st.in_mailbox
            }
            Inner::Remote { .. } => 0,
        }
    }

    /// Whether no message is waiting now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound (`Some(0)` for rendezvous), `None` if unbounded or from
    /// another node.
    pub fn capacity(&self) -> Option<usize> {
        match &self.inner {
            Inner::Local(chan) => (chan.cap != UNBOUNDED).then_some(chan.cap),
            Inner::Remote { .. } => None,
        }
    }

    /// Whether both ports feed the same channel.
    pub fn same_port(&self, other: &SendPort<T>) -> bool {
        match (&self.inner, &other.inner) {
            (Inner::Local(a), Inner::Local(b)) => Arc::ptr_eq(a, b),
            (Inner::Remote { proxy: a, .. }, Inner::Remote { proxy: b, .. }) => a == b,
            _ => false,
        }
    }
}

/// A receive port can be handed to the process that will receive on it
/// (on this node).
impl<T: Send + 'static> crate::Message for ReceivePort<T> {}

impl<T> Clone for SendPort<T> {
    fn clone(&self) -> Self {
        match &self.inner {
            Inner::Local(chan) => {
                chan.lock().senders += 1;
                SendPort {
                    inner: Inner::Local(chan.clone()),
                }
            }
            Inner::Remote { proxy, send } => SendPort {
                inner: Inner::Remote {
                    proxy: *proxy,
                    send: *send,
                },
            },
        }
    }
}

impl<T> Drop for SendPort<T> {
    fn drop(&mut self) {
        let Inner::Local(chan) = &self.inner else {
            return;
        };
        let mut st = chan.lock();
        st.senders -= 1;
        let (rx, sink) = if st.senders == 0 {
            (st.recv_waiter.take(), st.sink.clone())
        } else {
            (None, None)
        };
        drop(st);
        if let Some(u) = rx {
            u.unpark();
        }
        if let Some(sink) = sink {
            sink.closed();
        }
    }
}

impl<T> ReceivePort<T> {
    /// Receives the next message, waiting for one. Inside a process the wait
    /// parks its green thread; outside, it blocks the thread.
    ///
    /// # Errors
    ///
    /// [`RecvError`] once the port is empty and every sender is gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.chan.recv_until(None).map_err(|_| RecvError)
    }

    /// Receives a message if one is queued.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`], or [`TryRecvError::Disconnected`] once the
    /// port is empty and every sender is gone.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.chan.try_recv()
    }

    /// Like [`recv`](ReceivePort::recv), waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError`].
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.chan
            .recv_until(Some(crate::sched::timer::deadline_after(timeout)))
    }

    /// Like [`recv`](ReceivePort::recv), waiting until `deadline` at most.
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError`].
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.chan.recv_until(Some(deadline))
    }

    /// A blocking iterator over messages; ends when every sender is gone.
    pub fn iter(&self) -> PortIter<'_, T> {
        PortIter { port: self }
    }

    /// An iterator over the messages queued now.
    pub fn try_iter(&self) -> PortTryIter<'_, T> {
        PortTryIter { port: self }
    }

    /// Messages queued now.
    pub fn len(&self) -> usize {
        self.chan.lock().queue.len()
    }

    /// Whether no message is queued now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every sender is gone (messages may still be queued).
    pub fn is_disconnected(&self) -> bool {
        self.chan.lock().senders == 0
    }

    /// The bound (`Some(0)` for rendezvous), `None` if unbounded.
    pub fn capacity(&self) -> Option<usize> {
        (self.chan.cap != UNBOUNDED).then_some(self.chan.cap)
    }
}

impl<T> Drop for ReceivePort<T> {
    fn drop(&mut self) {
        let mut st = self.chan.lock();
        if st.sink.is_some() {
            return; // routed to a mailbox: the port lives on there
        }
        st.receiver = false;
        let stale = st.recv_waiter.take();
        // A rendezvous sender takes its message back itself; buffered
        // messages are dropped now (outside the lock), not when the last
        // sender goes.
        let dropped = if self.chan.cap != 0 {
            std::mem::take(&mut st.queue)
        } else {
            VecDeque::new()
        };
        let waiters = std::mem::take(&mut st.send_waiters);
        drop(st);
        drop(stale);
        for (_, u) in waiters {
            u.unpark();
        }
        drop(dropped);
    }
}

impl<T> fmt::Debug for SendPort<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendPort")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for ReceivePort<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceivePort")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

/// Blocking iterator over a [`ReceivePort`]; see [`ReceivePort::iter`].
#[derive(Debug)]
pub struct PortIter<'a, T> {
    port: &'a ReceivePort<T>,
}

impl<T> Iterator for PortIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.port.recv().ok()
    }
}

/// Non-blocking iterator over a [`ReceivePort`]; see
/// [`ReceivePort::try_iter`].
#[derive(Debug)]
pub struct PortTryIter<'a, T> {
    port: &'a ReceivePort<T>,
}

impl<T> Iterator for PortTryIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.port.try_recv().ok()
    }
}

/// Owning blocking iterator over a [`ReceivePort`].
#[derive(Debug)]
pub struct PortIntoIter<T> {
    port: ReceivePort<T>,
}

impl<T> Iterator for PortIntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.port.recv().ok()
    }
}

impl<T> IntoIterator for ReceivePort<T> {
    type Item = T;
    type IntoIter = PortIntoIter<T>;
    fn into_iter(self) -> PortIntoIter<T> {
        PortIntoIter { port: self }
    }
}

impl<'a, T> IntoIterator for &'a ReceivePort<T> {
    type Item = T;
    type IntoIter = PortIter<'a, T>;
    fn into_iter(self) -> PortIter<'a, T> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send_sync<T: Send + Sync>() {}
    fn is_send<T: Send>() {}

    #[test]
    fn auto_traits() {
        is_send_sync::<SendPort<u8>>();
        is_send::<ReceivePort<u8>>();
        is_send_sync::<SendError<u8>>();
    }

    #[test]
    fn threads_unbounded_in_order() {
        let (tx, rx) = channel();
        let t = std::thread::spawn(move || {
            for i in 0..1000u32 {
                tx.send(i).unwrap();
            }
        });
        let got: Vec<u32> = rx.iter().collect();
        t.join().unwrap();
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn threads_rendezvous() {
        let (tx, rx) = bounded(0);
        let t = std::thread::spawn(move || {
            for i in 0..100u32 {
                tx.send(i).unwrap();
            }
        });
        for i in 0..100u32 {
            assert_eq!(rx.recv().unwrap(), i);
        }
        t.join().unwrap();
        assert_eq!(rx.recv(), Err(RecvError));
    }

    #[test]
    fn errors_hand_back() {
        let (tx, rx) = bounded(1);
        tx.try_send(1).unwrap();
        assert_eq!(tx.try_send(2), Err(TrySendError::Full(2)));
        assert_eq!(
            tx.send_timeout(3, Duration::from_millis(5)),
            Err(SendTimeoutError::Timeout(3))
        );
        drop(rx);
        assert_eq!(tx.send(4), Err(SendError(4)));
        let (tx, rx) = bounded::<u8>(0);
        assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
        assert_eq!(
            tx.send_timeout(2, Duration::from_millis(5)),
            Err(SendTimeoutError::Timeout(2))
        );
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        drop(tx);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    }
}
