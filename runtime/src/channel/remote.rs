//! Send ports on other nodes: `SendPort<T: Mobile>` is `Mobile`.
//!
//! A port encodes as the pid of its channel's *proxy*: a process on the
//! channel's node that takes `T` messages from its mailbox and sends them
//! into the channel. The first encoding of a port of the channel spawns the
//! proxy (on the encoding process's node). On the other node the port
//! decodes as a remote port whose sends are ordinary remote
//! [`send`](crate::send)s to the proxy, so:
//!
//! * messages from one process keep their order (distribution keeps per-pair
//!   order, and the proxy forwards in arrival order);
//! * a remote send never waits and never fails (Erlang's send): a bounded
//!   port's back-pressure does not cross nodes (the proxy's mailbox buffers,
//!   and the proxy itself waits on the bound);
//! * once exported, the channel stays connected for its receiver (the proxy
//!   holds a sender, as any node may still send); the proxy ends when the
//!   receiving port is gone (at the next message) or with its node.
//!
//! Re-encoding a remote port sends the same proxy pid on, so a port can be
//! passed from node to node.

use super::{Inner, SendPort};
use crate::graph::{DecodeError, Decoder, Describer, Encoder, Format, Mobile, Source};
use crate::pid::{NodeId, Pid};

impl<T: Mobile> Mobile for SendPort<T> {
    const WIRE_MIN: usize = <Pid as Mobile>::WIRE_MIN;

    fn describe(d: &mut Describer) {
        d.write("SendPort<");
        d.describe::<T>();
        d.write(">");
    }

    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        self.proxy_pid().encode(e);
    }

    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self, DecodeError> {
        let proxy = Pid::decode(d)?;
        Ok(SendPort {
            inner: Inner::Remote {
                proxy,
                send: remote_send::<T>,
            },
        })
    }
}

fn remote_send<T: Mobile>(to: Pid, value: T) {
    crate::send(to, value);
}

/// The proxy's body: forward every `T` into the channel.
fn forward<T: Mobile>(tx: SendPort<T>) {
    loop {
        let v: T = crate::expect();
        if tx.send(v).is_err() {
            return; // the receiving port is gone
        }
    }
}

impl<T: Mobile> SendPort<T> {
    /// The pid other nodes send to: the proxy (spawned on first use).
    fn proxy_pid(&self) -> Pid {
        let chan = match &self.inner {
            Inner::Remote { proxy, .. } => return *proxy,
            Inner::Local(chan) => chan,
        };
        if let Some(p) = chan.lock().proxy {
            return p;
        }
        if crate::context::process().is_none() {
            log::error!(
                "graft: a SendPort can be encoded for another node only inside a process; \
                 sends through this copy are dropped"
            );
            return Pid::new(NodeId(0), 0, 0);
        }
        // Spawn without the channel lock (a failed spawn drops the sender,
        // which takes it). Two racing encoders may both spawn a proxy; both
        // forward correctly, and the first one recorded is used from then on.
        let tx = self.clone();
        match crate::spawn_opts().spawn(move || forward(tx)) {
            Ok(pid) => *chan.lock().proxy.get_or_insert(pid),
            Err(e) => {
                log::error!("graft: cannot start a port proxy ({e}); remote sends are dropped");
                Pid::new(NodeId(0), 0, 0)
            }
        }
    }
}
