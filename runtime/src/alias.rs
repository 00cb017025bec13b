//! Process aliases (OTP 24) and the request primitive built on them.
//!
//! An [`Alias`] is an address of a process that the process can switch
//! off: a message sent to an active alias reaches its owner's mailbox like
//! any other; one sent to an alias that is no longer active (after
//! [`unalias`], or after its one reply for a request alias) is dropped
//! silently where the owner lives, as in OTP. Aliases are [`Mobile`]: they
//! can be sent to other nodes and used there.
//!
//! # Requests
//!
//! [`send_request`] / [`receive_response`] / [`request`] / [`reply`]: the
//! protocol (one frame each way) is on [`send_request`].
//!
//! ```
//! use graft::*;
//! use std::time::Duration;
//!
//! #[derive(Mobile, Debug)]
//! struct Double { n: u64, from: Alias }
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! let got = node.run(|| {
//!     let server = spawn(|| loop {
//!         let Double { n, from } = expect();
//!         reply(from, n * 2);
//!     });
//!     request::<_, u64>(server, |from| Double { n: 21, from }, Some(Duration::from_secs(5)))
//! }).unwrap();
//! assert_eq!(got, Ok(42));
//! ```

use crate::context;
use crate::context::{current, node};
use crate::dist::{Ctl, KIND_ALIAS, KIND_REQUEST};
use crate::error::Error;
use crate::exit::{ExitReason, ProcessDied};
use crate::graph::DecodeError;
use crate::message::Message;
use crate::node::NodeShared;
use crate::pid::{MonitorRef, NodeId, Pid};
use crate::process::receive::{receive, Mark};
use crate::process::Mail;
use graft_net::PeerInfo;
use std::time::Duration;

/// Flag: the alias is deactivated by the first message through it.
const ONCE: u8 = 1;

/// An address of a process that the process can deactivate (OTP 24's
/// `alias/0`). Copy it, send it anywhere (it is [`Mobile`](crate::Mobile)); messages sent
/// to it after its owner called [`unalias`] are dropped.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let r = node.run(|| {
///     let a = alias();
///     a.send(1u8);
///     let first = expect::<u8>();
///     unalias(a);
///     a.send(2u8); // dropped: inactive
///     (first, receive().on(|x: u8| x).timeout(std::time::Duration::from_millis(20)))
/// }).unwrap();
/// assert_eq!(r, (1, None));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, graft_derive::Mobile)]
pub struct Alias {
    owner: Pid,
    r: MonitorRef,
}

impl Alias {
    /// The process the alias belongs to.
    pub fn owner(&self) -> Pid {
        self.owner
    }

    /// The alias's reference (for a request's alias, also its monitor's).
    pub fn reference(&self) -> MonitorRef {
        self.r
    }

    /// Sends `msg` through the alias (see [`send_alias`]).
    pub fn send<M: Message>(&self, msg: M) {
        send_alias(*self, msg)
    }
}

/// Makes a new active alias of the caller (OTP's `alias()`); it stays
/// active until [`unalias`].
///
/// # Panics
///
/// Outside a process.
pub fn alias() -> Alias {
    make_alias(0)
}

fn make_alias(flags: u8) -> Alias {
    let me = current("alias");
    let r = node().make_ref();
    me.meta.lock().aliases.push((r.id(), flags));
    Alias { owner: me.pid, r }
}

/// Deactivates one of the caller's aliases: messages sent to it from now
/// on are dropped. `false` if it was not an active alias of the caller.
///
/// # Panics
///
/// Outside a process.
pub fn unalias(a: Alias) -> bool {
    let me = current("unalias");
    if a.owner != me.pid {
        return false;
    }
    let mut m = me.meta.lock();
    match m.aliases.iter().position(|(id, _)| *id == a.r.id()) {
        Some(i) => {
            m.aliases.swap_remove(i);
            true
        }
        None => false,
    }
}

/// Sends `msg` to the owner of alias `a` (on any node). Never blocks,
/// never fails: dropped if the alias is inactive or its owner gone (a
/// local-only message for another node is refused, logged).
pub fn send_alias<M: Message>(a: Alias, msg: M) {
    let Some(w) = context::worker() else {
        log::warn!("graft: send to alias {:?} outside a process: dropped", a.r);
        return;
    };
    if let Err(e) = send_alias_on(&w.node, a, msg) {
        log::error!("graft: send to alias of {}: {e}", a.owner);
    }
}

/// [`send_alias`], reporting a message that cannot be encoded.
pub(crate) fn send_alias_on<M: Message>(n: &NodeShared, a: Alias, msg: M) -> Result<(), Error> {
    if n.is_local(a.owner) {
        deliver_local(n, a.owner, a.r.id(), Mail::message(msg));
        return Ok(());
    }
    let (desc, bytes) = msg.encode_remote()?;
    n.dist.send_to_pid_node(a.owner, KIND_ALIAS, || {
        let mut f = Vec::with_capacity(PID_BYTES + 16 + bytes.len());
        put_pid(&mut f, a.owner);
        f.extend_from_slice(&a.r.id().to_le_bytes());
        f.extend_from_slice(&desc.to_le_bytes());
        f.extend_from_slice(&bytes);
        f
    });
    Ok(())
}

/// Delivers mail sent to alias `id` of local process `owner`, if that alias
/// is active (a one-shot alias is deactivated by it). The check and the
/// push happen under the owner's lock, so nothing gets through once
/// [`unalias`] has returned.
pub(crate) fn deliver_local(n: &NodeShared, owner: Pid, id: u64, mail: Mail) {
    if !n.is_ours(owner) {
        return;
    }
    n.table.with(owner.serial(), |p| {
        let wake = {
            let mut m = p.meta.lock();
            let Some(i) = m.aliases.iter().position(|(a, _)| *a == id) else {
                return; // inactive: dropped (mail dropped after the lock)
            };
            if m.exited {
                return;
            }
            if m.aliases.as_slice()[i].1 & ONCE != 0 {
                m.aliases.swap_remove(i);
            }
            p.deliver(mail)
        };
        if wake {
            n.sched.wake(p);
        }
    });
}

const PID_BYTES: usize = 8 + 4 + 8;

fn put_pid(f: &mut Vec<u8>, p: Pid) {
    f.extend_from_slice(&p.node().0.to_le_bytes());
    f.extend_from_slice(&p.creation().to_le_bytes());
    f.extend_from_slice(&p.serial().to_le_bytes());
}

fn get_u64(p: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(p[i..i + 8].try_into().expect("8 bytes"))
}

fn get_pid(p: &[u8], i: usize) -> Pid {
    let creation = u32::from_le_bytes(p[i + 8..i + 12].try_into().expect("4 bytes"));
    Pid::new(NodeId(get_u64(p, i)), creation, get_u64(p, i + 12))
}

/// An alias frame from a peer: owner pid, alias id, descriptor, message.
pub(crate) fn on_alias_frame(n: &NodeShared, peer: &PeerInfo, p: Vec<u8>) {
    const HDR: usize = PID_BYTES + 16;
    if p.len() < HDR {
        log::warn!("graft: short alias frame from {}", peer.name);
        return;
    }
    let owner = get_pid(&p, 0);
    let id = get_u64(&p, PID_BYTES);
    let desc = get_u64(&p, PID_BYTES + 8);
    if !n.is_local(owner) {
        log::warn!(
            "graft: {} sent a message for an alias of {owner}, not on this node",
            peer.name
        );
        return;
    }
    let mut bytes = p;
    bytes.drain(..HDR);
    deliver_local(n, owner, id, Mail::Encoded { desc, bytes });
}

/// A request frame from a peer: target pid, caller pid, reference,
/// descriptor, message. Adds the monitor, then delivers (see the module
/// docs).
pub(crate) fn on_request_frame(n: &NodeShared, peer: &PeerInfo, from: NodeId, p: Vec<u8>) {
    const HDR: usize = 2 * PID_BYTES + 16;
    if p.len() < HDR {
        log::warn!("graft: short request frame from {}", peer.name);
        return;
    }
    let target = get_pid(&p, 0);
    let owner = get_pid(&p, PID_BYTES);
    let r = MonitorRef::new(owner.node(), get_u64(&p, 2 * PID_BYTES));
    let desc = get_u64(&p, 2 * PID_BYTES + 8);
    if !n.is_local(target) || owner.node() != from {
        log::warn!(
            "graft: {} sent a request for {target} from {owner}: not ours",
            peer.name
        );
        return;
    }
    let added = n.with_live_meta(target, |m| m.watchers.push((r, owner)));
    if !added {
        let down = Ctl::Down {
            watcher: owner,
            target,
            r,
            reason: ExitReason::NoProc,
        };
        let _ = n.dist.send_ctl(from, &down);
        return;
    }
    n.dist.record_watched(from, r, target, peer.id);
    let mut bytes = p;
    bytes.drain(..HDR);
    n.deliver(target, Mail::Encoded { desc, bytes });
}

/// The reply to a request: its tag (the alias's reference id) and value.
/// A message whenever `R` is one (local-only `R`: local-only reply);
/// encoded as the tag then `R`'s own encoding.
#[derive(Debug)]
struct Response<R> {
    tag: u64,
    value: R,
}

/// Mixed into `R`'s descriptor hash, so a `Response<R>` never decodes as
/// an `R` or the other way round.
const RESPONSE_DESC: u64 = 0x7265_7370_6f6e_7365; // "response"

impl<R: Message> Message for Response<R> {
    fn remote_descriptor() -> Option<u64> {
        R::remote_descriptor().map(|d| d.rotate_left(7) ^ RESPONSE_DESC)
    }
    fn encode_remote_into(&self, out: &mut Vec<u8>) -> Result<u64, Error> {
        out.extend_from_slice(&self.tag.to_le_bytes());
        let d = self.value.encode_remote_into(out)?;
        Ok(d.rotate_left(7) ^ RESPONSE_DESC)
    }
    fn decode_remote(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() < 8 {
            return Err(DecodeError::Invalid(
                "a response shorter than its tag".into(),
            ));
        }
        Ok(Response {
            tag: get_u64(bytes, 0),
            value: R::decode_remote(&bytes[8..])?,
        })
    }
}

/// A request in flight: what [`receive_response`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestId {
    alias: Alias,
    target: Pid,
    /// The caller's mailbox before the request: the answer can only come
    /// after it (the ref trick, see [`Mark`]).
    mark: Mark,
}

impl RequestId {
    /// The alias the answer comes back through.
    pub fn alias(&self) -> Alias {
        self.alias
    }
    /// The process asked.
    pub fn target(&self) -> Pid {
        self.target
    }
}

/// Why a request got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// The target was not alive when the request reached it.
    NoProc,
    /// The target ended before answering, with this reason.
    Died(ExitReason),
    /// The target's node is not connected, or was lost.
    NoConnection(NodeId),
    /// No answer in time (a later answer is dropped at the alias).
    Timeout,
    /// The request could not be sent (a local-only message to another
    /// node).
    Refused(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::NoProc => f.write_str("no such process"),
            RequestError::Died(r) => write!(f, "the process ended: {r}"),
            RequestError::NoConnection(n) => write!(f, "no connection to node {n}"),
            RequestError::Timeout => f.write_str("timed out"),
            RequestError::Refused(why) => write!(f, "request not sent: {why}"),
        }
    }
}

impl std::error::Error for RequestError {}

/// Sends the request `make(alias)` to `to` (on any node) and returns at
/// once; [`receive_response`] waits for the answer, which the server sends
/// with [`reply`] to the alias it finds in the request. The request
/// monitors `to` until the answer (see below for the
/// frames). A remote node that is known but not connected is connected
/// first (auto-connect, see [`AutoConnect`](crate::AutoConnect)).
///
/// # Protocol
///
/// [`send_request`] / [`receive_response`] (and [`request`], both in one)
/// are OTP's `gen_server:send_request/receive_response` done on an alias
/// made by `monitor(process, Pid, [{alias, reply_demonitor}])`: the request
/// carries a one-shot alias whose reference is also the monitor's; the
/// server answers with [`reply`]. Its protocol, for a server on another
/// node:
///
/// 1. The caller makes a reference `r`, activates alias `r` (one-shot),
///    records the monitor `r` on the server (for the loss of the
///    connection), and sends **one** request frame (kind 19: target pid,
///    caller pid, `r`, descriptor, message). There is no separate monitor
///    frame: the monitor travels with the request.
/// 2. The server's node, reading that frame, adds the monitor to the
///    server's watchers (or answers `Down` with `NoProc` if the server is
///    gone) and delivers the message.
/// 3. The server calls [`reply`]: it removes the monitor from its own
///    watchers (the reply implies the demonitor) and sends **one** alias
///    frame (kind 18: caller pid, `r`, descriptor, the reply).
/// 4. The caller's node delivers it only if alias `r` is active, and
///    deactivates it (one-shot). The caller takes the reply and forgets its
///    half of the monitor locally. No demonitor frame.
///
/// So a call is one frame each way. If the server dies first, the monitor
/// fires (`ProcessDied`, the request fails with the reason); if the
/// connection is lost, with `NoConnection`. On a timeout the caller
/// deactivates the alias and cancels the monitor (that one sends a
/// demonitor frame): a reply that comes later is dropped at the alias and
/// never waits in the mailbox. (A reply sent by a process other than the
/// server, to which the server handed the alias, leaves the server's
/// watcher entry in place until the server ends; the caller ignores what
/// it then reports.)
///
/// Locally the same steps run without frames.
///
/// # Errors
///
/// `Error::NotMobile` for a local-only request to another node.
///
/// # Panics
///
/// Outside a process.
pub fn send_request<M: Message>(
    to: Pid,
    make: impl FnOnce(Alias) -> M,
) -> Result<RequestId, Error> {
    let me = current("send_request");
    let w = context::worker().expect("a process runs on a worker");
    let n: &NodeShared = &w.node;
    let mark = crate::process::receive::mark();
    let alias = make_alias(ONCE);
    let req = RequestId {
        alias,
        target: to,
        mark,
    };
    let r = alias.r;
    let msg = make(alias);
    let fail = |reason| {
        me.deliver(Mail::Down(ProcessDied {
            pid: to,
            reason,
            monitor: r,
        }))
    };
    if n.is_local(to) {
        // SAFETY: `me` is the running process.
        unsafe { me.local() }.monitors.push((r, to));
        if n.with_live_meta(to, |m| m.watchers.push((r, me.pid))) {
            n.deliver(to, Mail::message(msg));
        } else {
            fail(ExitReason::NoProc);
        }
        return Ok(req);
    }
    let encoded = msg.encode_remote();
    let (desc, bytes) = match encoded {
        Ok(e) => e,
        Err(e) => {
            unalias(alias);
            return Err(e);
        }
    };
    // SAFETY: `me` is the running process.
    unsafe { me.local() }.monitors.push((r, to));
    let node_id = to.node();
    n.dist.mon.ensure_connected(&w.node, node_id);
    let Some(conn) = n.dist.connection(node_id, Some(to.creation())) else {
        let reason = if n.dist.creation_of(node_id).is_some() {
            ExitReason::NoProc
        } else {
            ExitReason::NoConnection
        };
        fail(reason);
        return Ok(req);
    };
    n.dist.record_monitor(r, me.pid, to, conn);
    let mut f = Vec::with_capacity(2 * PID_BYTES + 16 + bytes.len());
    put_pid(&mut f, to);
    put_pid(&mut f, me.pid);
    f.extend_from_slice(&r.id().to_le_bytes());
    f.extend_from_slice(&desc.to_le_bytes());
    f.extend_from_slice(&bytes);
    if n.dist
        .send_frame(node_id, Some(conn), KIND_REQUEST, &f)
        .is_err()
        && n.dist.forget_monitor(node_id, r)
    {
        fail(ExitReason::NoConnection);
    }
    Ok(req)
}

/// Waits for the answer to `req` (at most `timeout`; `None`: for ever,
/// still failing if the target ends or its node is lost).
///
/// # Errors
///
/// See [`RequestError`]. On a timeout the alias is deactivated first: an
/// answer that comes later is dropped and never reaches the mailbox.
///
/// # Panics
///
/// Outside a process.
pub fn receive_response<R: Message>(
    req: RequestId,
    timeout: Option<Duration>,
) -> Result<R, RequestError> {
    let tag = req.alias.r;
    let id = tag.id();
    let rcv = receive()
        .after(req.mark)
        .when(
            move |r: &Response<R>| r.tag == id,
            |r: Response<R>| Ok(r.value),
        )
        .when(
            move |d: &ProcessDied| d.monitor == tag,
            |d: ProcessDied| Err(d.reason),
        );
    let got = match timeout {
        Some(t) => rcv.timeout(t),
        None => Some(rcv.wait()),
    };
    match got {
        Some(Ok(v)) => {
            answered(req);
            Ok(v)
        }
        Some(Err(reason)) => {
            unalias(req.alias);
            Err(match reason {
                ExitReason::NoProc => RequestError::NoProc,
                ExitReason::NoConnection => RequestError::NoConnection(req.target.node()),
                r => RequestError::Died(r),
            })
        }
        None => {
            unalias(req.alias);
            crate::api::demonitor(tag);
            // An answer that got in before the alias went.
            let late = receive()
                .after(req.mark)
                .when(move |r: &Response<R>| r.tag == id, |r: Response<R>| r.value)
                .timeout(Duration::ZERO);
            flush_down(tag, req.mark);
            late.ok_or(RequestError::Timeout)
        }
    }
}

/// The answer came: the monitor ends with it, without a frame (the server
/// removed its half when it replied).
fn answered(req: RequestId) {
    let me = current("receive_response");
    let n = node();
    let tag = req.alias.r;
    // SAFETY: `me` is the running process.
    let mons = &mut unsafe { me.local() }.monitors;
    if let Some(i) = mons.iter().position(|(r, _)| *r == tag) {
        mons.swap_remove(i);
    }
    if n.is_local(req.target) {
        n.unwatch(req.target, tag);
    } else {
        n.dist.forget_monitor(req.target.node(), tag);
    }
    flush_down(tag, req.mark);
}

/// Removes a `ProcessDied` for `tag` already taken into the private queue
/// (one still in the mailbox is filtered when drained: the monitor is
/// gone from the process's list). It came after `mark`: only the mail
/// since is looked at.
fn flush_down(tag: MonitorRef, mark: Mark) {
    let me = current("receive_response");
    // SAFETY: `me` is the running process.
    let local = unsafe { me.local() };
    let from = crate::process::receive::start_of(local, mark);
    crate::api::remove_down_from(&mut local.saved, from, tag);
}

/// [`send_request`] then [`receive_response`]: a call.
///
/// # Errors
///
/// As [`receive_response`]; `RequestError::Refused` if it cannot be sent.
///
/// # Panics
///
/// Outside a process.
pub fn request<M: Message, R: Message>(
    to: Pid,
    make: impl FnOnce(Alias) -> M,
    timeout: Option<Duration>,
) -> Result<R, RequestError> {
    let req = send_request(to, make).map_err(|e| RequestError::Refused(e.to_string()))?;
    receive_response(req, timeout)
}

/// Answers a request received from [`send_request`]: sends `value` to the
/// requester's alias `to`. When the caller is the process the request was
/// sent to, the request's monitor on it ends here too (no frame). Any
/// process may answer (the server may hand the alias on); only the first
/// answer is delivered.
///
/// A value of the wrong type is never matched by the requester's
/// [`receive_response`] (which then times out).
///
/// # Panics
///
/// Outside a process.
pub fn reply<R: Message>(to: Alias, value: R) {
    let me = current("reply");
    let n = node();
    let removed = me.meta.lock().watchers.remove_of(to.r, to.owner);
    if removed && !n.is_local(to.owner) {
        n.dist.forget_watched(to.owner.node(), to.r);
    }
    let msg = Response {
        tag: to.r.id(),
        value,
    };
    if let Err(e) = send_alias_on(n, to, msg) {
        log::error!("graft: reply to {}: {e}", to.owner);
    }
}

impl crate::Unknown {
    /// Forwards the message unchanged to `to` (a pid, a name, a name on
    /// another node, or an alias), without knowing its type: a proxy. A
    /// message that came from another node travels on as the bytes it came
    /// as (never decoded here); a local one is moved to a local target and
    /// encoded for a remote one. Message order from this process to `to`
    /// is kept, as for [`send`](crate::send).
    ///
    /// # Errors
    ///
    /// `Error::NotMobile` for a local-only message to another node,
    /// `Error::NotRegistered` for a name no process holds here,
    /// `Error::NoConnection` for a name on a node not connected,
    /// `Error::NotInProcess` outside a process.
    ///
    /// ```
    /// use graft::*;
    /// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
    /// let got = node.run(|| {
    ///     let me = self_pid();
    ///     let proxy = spawn(move || loop {
    ///         receive().any(|u: Unknown| u.forward(me).unwrap()).wait();
    ///     });
    ///     send(proxy, String::from("via the proxy"));
    ///     expect::<String>()
    /// }).unwrap();
    /// assert_eq!(got, "via the proxy");
    /// ```
    pub fn forward(self, to: impl Into<crate::Dest>) -> Result<(), Error> {
        use crate::Dest;
        let Some(w) = context::worker() else {
            return Err(Error::NotInProcess("Unknown::forward"));
        };
        let n: &NodeShared = &w.node;
        let mail = match self.0 {
            // A monitor notification travels on as an ordinary message.
            Mail::Down(d) => Mail::message(d),
            m => m,
        };
        let encode = |mail: Mail| -> Result<(u64, Vec<u8>), Error> {
            match mail {
                Mail::Encoded { desc, bytes } => Ok((desc, bytes)),
                Mail::Msg(v) => v
                    .encode()
                    .unwrap_or(Err(Error::NotMobile("a local-only message"))),
                _ => Err(Error::NotMobile("a signal")),
            }
        };
        match to.into() {
            Dest::Pid(p) if n.is_local(p) => n.deliver(p, mail),
            Dest::Pid(p) => {
                let (desc, bytes) = encode(mail)?;
                n.dist.deliver_encoded(p, desc, &bytes);
            }
            Dest::Name(name) => match n.registry.lookup(&name) {
                Some(p) => n.deliver(p, mail),
                None => return Err(Error::NotRegistered(name)),
            },
            Dest::Remote(name, node) if node == n.id => match n.registry.lookup(&name) {
                Some(p) => n.deliver(p, mail),
                None => return Err(Error::NotRegistered(name)),
            },
            Dest::Remote(name, node) => {
                let (desc, bytes) = encode(mail)?;
                n.dist
                    .send_ctl(node, &Ctl::SendNamed { name, desc, bytes })?;
            }
            Dest::Alias(a) if n.is_local(a.owner) => deliver_local(n, a.owner, a.r.id(), mail),
            Dest::Alias(a) => {
                let (desc, bytes) = encode(mail)?;
                n.dist.send_to_pid_node(a.owner, KIND_ALIAS, || {
                    let mut f = Vec::with_capacity(PID_BYTES + 16 + bytes.len());
                    put_pid(&mut f, a.owner);
                    f.extend_from_slice(&a.r.id().to_le_bytes());
                    f.extend_from_slice(&desc.to_le_bytes());
                    f.extend_from_slice(&bytes);
                    f
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response encodes through `encode_remote_into` (what a remote
    /// `send` uses) exactly as through `encode_remote`, tag first, and
    /// decodes back; its descriptor is not its value's.
    #[test]
    fn a_response_encodes_into_a_frame_as_on_its_own() {
        let r = Response {
            tag: 7,
            value: 5u32,
        };
        let (d, bytes) = r.encode_remote().unwrap();
        let mut frame = vec![0xaa; 3]; // a header before it
        assert_eq!(r.encode_remote_into(&mut frame).unwrap(), d);
        assert_eq!(&frame[3..], &bytes[..]);
        assert_ne!(Some(d), u32::remote_descriptor());
        let back = Response::<u32>::decode_remote(&bytes).unwrap();
        assert_eq!((back.tag, back.value), (7, 5));
    }
}
