//! Ports in `receive()` clauses: a [`ReceivePort`] routed into its owner's
//! mailbox.
//!
//! Chosen design: rather than teach selective receive to poll ports (a deep
//! change to the receive loop), [`ReceivePort::into_mailbox`] turns the port
//! into a mail source. From then on each message sent on the port arrives in
//! the owning process's mailbox as a [`PortMessage<T>`] tagged with the
//! port's [`PortId`], in order with the process's other mail, and ordinary
//! clauses match it beside any other message. When every sender is gone a
//! [`PortClosed`] message follows the last one.
//!
//! Bounds still hold: a routed message counts against the port's capacity
//! until the process consumes it ([`PortMessage::into_inner`] or dropping
//! it), so senders on a bounded port still park while the receiver lags. A
//! routed rendezvous port behaves as `bounded(1)` (a send returns once its
//! message is in the mailbox and no earlier one from the port is pending).
//! Messages routed to a process that has exited are dropped, as mail to a
//! dead process is.

use super::{take_waiters, wake_all, Chan, ReceivePort};
use crate::context;
use crate::context::current;
use crate::node::NodeShared;
use crate::pid::{MonitorRef, Pid};
use crate::process::Mail;
use std::fmt;
use std::sync::{Arc, Weak};

/// Names a port routed into a mailbox; see [`ReceivePort::into_mailbox`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, crate::Mobile)]
pub struct PortId(MonitorRef);

/// Every sender of a routed port is gone; arrives after its last message.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, crate::Mobile)]
pub struct PortClosed(pub PortId);

/// A message from a routed port, as it sits in the mailbox. Take the value
/// with [`into_inner`](PortMessage::into_inner); consuming or dropping it
/// frees its place in a bounded port.
pub struct PortMessage<T> {
    port: PortId,
    value: Option<T>,
    chan: Weak<Chan<T>>,
}

impl<T> PortMessage<T> {
    /// The port it came from.
    pub fn port(&self) -> PortId {
        self.port
    }

    /// The message.
    pub fn get(&self) -> &T {
        self.value.as_ref().expect("a port message holds its value")
    }

    /// Takes the message (freeing its place in the port).
    pub fn into_inner(mut self) -> T {
        self.value.take().expect("a port message holds its value")
    }
}

impl<T> Drop for PortMessage<T> {
    fn drop(&mut self) {
        if let Some(c) = self.chan.upgrade() {
            let mut st = c.lock();
            st.in_mailbox -= 1;
            st.taken += 1;
            let senders = take_waiters(&mut st);
            drop(st);
            wake_all(senders);
        }
    }
}

/// Port messages are local mail (they only ever sit in a local mailbox).
impl<T: Send + 'static> crate::Message for PortMessage<T> {}

impl<T> fmt::Debug for PortMessage<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortMessage")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// Where a routed port delivers: one process's mailbox.
pub(crate) struct Sink<T> {
    pid: Pid,
    node: Arc<NodeShared>,
    id: PortId,
    chan: Weak<Chan<T>>,
    /// Boxes a message as mail (made where `T: Send + 'static` is known).
    wrap: fn(PortMessage<T>) -> Mail,
}

impl<T> Sink<T> {
    /// Delivers one message. Call without the channel lock held: a message
    /// for a dead process is dropped here, which takes the lock.
    pub(crate) fn deliver(&self, value: T) {
        let m = PortMessage {
            port: self.id,
            value: Some(value),
            chan: self.chan.clone(),
        };
        self.node.deliver(self.pid, (self.wrap)(m));
    }

    /// Tells the process that every sender is gone.
    pub(crate) fn closed(&self) {
        self.node.deliver(self.pid, Mail::msg(PortClosed(self.id)));
    }
}

fn wrap<T: Send + 'static>(m: PortMessage<T>) -> Mail {
    Mail::msg(m)
}

impl<T: Send + 'static> ReceivePort<T> {
    /// Routes this port into the calling process's mailbox, so that
    /// `receive()` clauses can take its messages beside ordinary mail.
    ///
    /// Messages already queued move to the mailbox now, in order; later ones
    /// arrive as they are sent, each as a [`PortMessage<T>`] tagged with the
    /// returned [`PortId`]; a [`PortClosed`] follows once every sender is
    /// gone. A bounded port keeps its bound (a routed message counts until it
    /// is consumed); a rendezvous port behaves as `bounded(1)`.
    ///
    /// # Panics
    ///
    /// Outside a process.
    ///
    /// # Examples
    ///
    /// ```
    /// use graft::*;
    /// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
    /// node.run(|| {
    ///     let (tx, rx) = channel::<u32>();
    ///     let port = rx.into_mailbox();
    ///     tx.send(7).unwrap();
    ///     send(self_pid(), "plain mail");
    ///     let got = receive()
    ///         .when(move |m: &PortMessage<u32>| m.port() == port, |m| m.into_inner())
    ///         .on(|_: &'static str| 0)
    ///         .wait();
    ///     assert_eq!(got, 7); // oldest first: the port's message came first
    ///     drop(tx);
    ///     assert_eq!(expect::<&str>(), "plain mail");
    ///     assert_eq!(expect::<PortClosed>(), PortClosed(port));
    /// }).unwrap();
    /// node.shutdown();
    /// ```
    pub fn into_mailbox(self) -> PortId {
        let me = current("ReceivePort::into_mailbox");
        let node = context::worker()
            .expect("a running process has a worker")
            .node
            .clone();
        let id = PortId(node.make_ref());
        let sink = Arc::new(Sink {
            pid: me.pid,
            node,
            id,
            chan: Arc::downgrade(&self.chan),
            wrap: wrap::<T>,
        });
        let mut st = self.chan.lock();
        st.sink = Some(sink.clone());
        st.recv_waiter = None;
        let queued = std::mem::take(&mut st.queue);
        st.in_mailbox += queued.len();
        // Delivered under the lock so that no later send overtakes them.
        // This cannot drop a message (and so re-enter the lock): the
        // target is the running process, whose mailbox is open.
        for v in queued {
            sink.deliver(v);
        }
        let closed = st.senders == 0;
        drop(st);
        if closed {
            sink.closed();
        }
        id
    }
}
