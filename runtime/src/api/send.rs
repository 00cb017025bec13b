//! Sending: [`send`] to a pid, [`send_to`] any [`Dest`] (a pid, a name, a
//! name on a node, an alias), with an error the sender sees.

use super::*;
use crate::context;
use crate::dist::Ctl;
use crate::error::Error;
use crate::loom::Ordering;
use crate::pid::{NodeId, Pid};
use crate::process::Mail;

/// Where a message can go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    /// A process.
    Pid(Pid),
    /// A name registered on this node.
    Name(String),
    /// A name registered on another node.
    Remote(String, NodeId),
    /// A process alias (see [`alias`](crate::alias)).
    Alias(crate::Alias),
}

impl From<crate::Alias> for Dest {
    fn from(a: crate::Alias) -> Dest {
        Dest::Alias(a)
    }
}

impl From<Pid> for Dest {
    fn from(p: Pid) -> Dest {
        Dest::Pid(p)
    }
}
impl From<&str> for Dest {
    fn from(s: &str) -> Dest {
        Dest::Name(s.to_string())
    }
}
impl From<String> for Dest {
    fn from(s: String) -> Dest {
        Dest::Name(s)
    }
}
impl From<(&str, NodeId)> for Dest {
    fn from((s, n): (&str, NodeId)) -> Dest {
        Dest::Remote(s.to_string(), n)
    }
}

/// Sends `msg` to `to`. Never blocks, never fails: a message to a process
/// that has exited is dropped (Erlang's rule). Messages from one process to
/// another arrive in the order they were sent.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let s = node.run(|| { send(self_pid(), String::from("hi")); expect::<String>() }).unwrap();
/// assert_eq!(s, "hi");
/// ```
#[inline]
pub fn send<M: Message>(to: Pid, msg: M) {
    let Some(w) = context::worker() else {
        return send_outside(to);
    };
    // One load decides: while nothing in this OS process is traced, doomed,
    // limited or watched for long queues, a local send is push and wake.
    let careful = crate::process::attention();
    if careful && crate::observe::tracing() {
        crate::observe::trace_sent(to, std::any::type_name::<M>());
    }
    if !w.node.is_local(to) {
        return send_remote(w, to, msg);
    }
    let mail = Mail::message(msg);
    // SAFETY: `current` is set while this worker resumes a process (which
    // it keeps alive meanwhile); that process is the caller.
    let Some(me) = (unsafe { w.current.get().as_ref() }) else {
        return w.node.deliver(to, mail);
    };
    if careful && me.has_signal.load(Ordering::Relaxed) {
        // SAFETY: `me` is the running process.
        unsafe { me.check_doomed() };
    }
    // SAFETY: `me` is the running process.
    let local = unsafe { me.local() };
    let target = match &local.last_target {
        Some(p) if p.pid == to => p,
        _ => match w.node.local_process(to) {
            Some(p) => local.last_target.insert(p),
            None => return w.node.deliver(to, mail),
        },
    };
    let delivered = if careful {
        target.deliver_watched(mail, Some(&w.node))
    } else {
        target.deliver_plain(mail)
    };
    match delivered {
        Ok(true) => w.node.sched.wake_from(Some(w), target),
        Ok(false) => {}
        Err(m) => crate::node::drop_undelivered(to, m),
    }
}

/// [`send`] to another node, out of line: its encoding and error report
/// would otherwise sit in the frame of every process body that sends, a
/// few cold cache lines more to touch on each resume of a local one.
#[cold]
#[inline(never)]
fn send_remote<M: Message>(w: &crate::sched::worker::WorkerCtx, to: Pid, msg: M) {
    if let Err(e) = w.node.dist.try_send_message(to, &msg) {
        log::error!("graft: message to {to} dropped: {e}");
    }
}

/// [`send`] outside a process: dropped, and said so.
#[cold]
#[inline(never)]
fn send_outside(to: Pid) {
    log::warn!("graft: send to {to} outside a process: message dropped");
}

/// Sends to a pid, a registered name, or a name on another node.
///
/// # Errors
///
/// `Error::NotRegistered` for a name no process holds on this node;
/// `Error::NotInProcess` outside a process; `Error::NotMobile` for a
/// local-only message to another node; `Error::NoConnection` when that
/// node is not connected; `Error::MessageTooLarge` for a message over
/// [`NodeConfig::max_message_size`](crate::NodeConfig::max_message_size).
/// (A name unknown on another node is not reported: like Erlang, the
/// message is dropped there.) A send to a node whose connection is busy
/// waits until it drains, as [`send`] does.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     assert!(matches!(send_to("nobody", 1u8), Err(Error::NotRegistered(_))));
///     register("me", self_pid()).unwrap();
///     send_to("me", 2u8).unwrap();
///     assert_eq!(expect::<u8>(), 2);
/// }).unwrap();
/// ```
pub fn send_to<M: Message>(to: impl Into<Dest>, msg: M) -> Result<(), Error> {
    let Some(w) = context::worker() else {
        return Err(Error::NotInProcess("send_to"));
    };
    match to.into() {
        Dest::Pid(p) if !w.node.is_local(p) => w.node.dist.try_send_message(p, &msg)?,
        Dest::Pid(p) => w.node.deliver(p, Mail::message(msg)),
        Dest::Name(n) => match w.node.registry.lookup(&n) {
            Some(p) => w.node.deliver(p, Mail::message(msg)),
            None => return Err(Error::NotRegistered(n)),
        },
        Dest::Remote(n, node) if node == w.node.id => match w.node.registry.lookup(&n) {
            Some(p) => w.node.deliver(p, Mail::message(msg)),
            None => return Err(Error::NotRegistered(n)),
        },
        Dest::Alias(a) => crate::alias::send_alias_on(&w.node, a, msg)?,
        Dest::Remote(name, node) => {
            let (desc, bytes) = msg.encode_remote()?;
            w.node
                .dist
                .send_ctl(node, &Ctl::SendNamed { name, desc, bytes })?;
        }
    }
    Ok(())
}
