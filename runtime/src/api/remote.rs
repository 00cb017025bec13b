//! Other nodes: connecting, spawning and calling there, names there.

use super::*;
use crate::context;
use crate::context::{current, node};
use crate::dist::{Ctl, DistReply};
use crate::error::Error;
use crate::exit::{ExitReason, ProcessDied};
use crate::graph::{self, Encoded, Mobile, MobileFnOnce};
use crate::node::SpawnSpec;
use crate::pid::{NodeId, Pid};
use crate::process::receive::receive;
use std::time::Duration;

/// Connects this node to the node listening at `addr` (and, through it, to
/// every node that one knows: the mesh is full). The caller is parked while
/// the connection and handshake run on the transport's poller, as the
/// node's own connects do: no thread waits on it.
///
/// # Errors
///
/// `Error::Remote` with the reason (refused, wrong cookie, timeout);
/// `Error::NotInProcess` outside a process (use
/// [`Node::connect`](crate::Node::connect)).
pub fn connect(addr: std::net::SocketAddr) -> Result<NodeId, Error> {
    let Some(w) = context::worker() else {
        return Err(Error::NotInProcess("connect"));
    };
    crate::node::connect_parked(&w.node, addr)
}

/// Closes the connection to `node`, as `erlang:disconnect_node/1` does;
/// `false` if it was not connected (or outside a process). See
/// [`Node::disconnect`](crate::Node::disconnect) for what follows.
///
/// ```
/// use graft::{Node, NodeConfig, NodeId};
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let other = NodeId::from_name("nowhere@127.0.0.1");
/// assert!(!node.run(move || graft::disconnect(other)).unwrap());
/// # node.shutdown();
/// ```
pub fn disconnect(node: NodeId) -> bool {
    context::worker().is_some_and(|w| w.node.dist.disconnect(node))
}

/// The nodes this node is connected to now (with `Topology::Partial`, the
/// cluster's members that are up).
pub fn nodes() -> Vec<NodeId> {
    context::worker().map_or_else(Vec::new, |w| match w.node.dist.mon.overlay() {
        Some(o) => o.members(),
        None => w.node.dist.nodes(),
    })
}

/// The name of a connected node (or of this one).
pub fn node_name(id: NodeId) -> Option<String> {
    let w = context::worker()?;
    if id == w.node.id {
        return Some(w.node.name.clone());
    }
    w.node.dist.peer_info(id).map(|(name, _)| name)
}

/// Whether `node`, not connected, is now (auto-connect, the caller
/// parked meanwhile).
#[cold]
fn reconnected(node: NodeId) -> bool {
    context::worker().is_some_and(|w| w.node.dist.mon.ensure_connected(&w.node, node))
}

/// How long a remote request (spawn, whereis) waits for its answer at most.
pub(crate) const REMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends a request to `node` and waits for its `DistReply`. A known node
/// that is not connected is connected first, the caller parked, as
/// [`AutoConnect`](crate::AutoConnect) allows (on the partial overlay most
/// members are not connected: `spawn_on` a member found by gossip is
/// this).
pub(crate) fn remote_request(
    node: NodeId,
    make: impl FnOnce(u64, Pid) -> Ctl,
) -> Result<Option<Pid>, Error> {
    let me = current("remote request");
    let n = self::node();
    let req = n.dist.next_req();
    let ctl = make(req, me.pid);
    // The connection is looked up once on the way that finds it.
    match n.dist.request(node, me.pid, req, &ctl) {
        Err(Error::NoConnection(_)) if reconnected(node) => {
            n.dist.request(node, me.pid, req, &ctl)?
        }
        r => r?,
    }
    receive()
        .when(move |r: &DistReply| r.req == req, |r: DistReply| r.result)
        .timeout(REMOTE_TIMEOUT)
        .unwrap_or(Err(Error::Timeout))
}

pub(crate) fn spawn_remote<E, F>(node: NodeId, env: E, body: F, link: bool) -> Result<Pid, Error>
where
    E: Mobile,
    F: FnOnce(E) + Copy + Send + Sync + 'static,
{
    // Refused at build time for a fn pointer or a capturing closure, even
    // when `node` is this one.
    graph::code_assert_body::<F>();
    let n = self::node();
    if node == n.id {
        let f = move || body(env);
        return if link {
            SpawnOpts::default().link().spawn(f)
        } else {
            n.spawn(SpawnSpec::default(), f)
        };
    }
    spawn_encoded(node, graph::encode(&MobileFnOnce::new(env, body)), link)
}

/// Sends `body` to `node` as the body of a spawn request, unchecked: the
/// bytes a forged or corrupted request would carry (for tests of what the
/// receiving node does with them). `body` is meant to be an encoded
/// `MobileFnOnce<()>`.
///
/// # Errors
///
/// As [`spawn_on`].
///
/// ```
/// use graft::*;
/// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b_addr = b.addr();
/// let r = a.run(move || spawn_encoded_on(connect(b_addr).unwrap(), vec![1, 2, 3])).unwrap();
/// assert!(matches!(r, Err(Error::Remote(_))));
/// ```
#[doc(hidden)]
pub fn spawn_encoded_on(node: NodeId, body: Vec<u8>) -> Result<Pid, Error> {
    spawn_encoded(node, body, false)
}

pub(crate) fn spawn_encoded(node: NodeId, bytes: Vec<u8>, link: bool) -> Result<Pid, Error> {
    let pid = remote_request(node, |req, me| Ctl::Spawn {
        req,
        reply_to: me,
        body: bytes,
        link,
    })?
    .ok_or_else(|| Error::Remote("spawn answered without a pid".into()))?;
    // With `link`, both halves are in place already: the remote node linked
    // the child at spawn, and our half was recorded as the reply was read
    // (see `dist.rs`), before any exit signal of the child could arrive.
    Ok(pid)
}

/// Spawns `body(env)` as a process on `node` (this node included). The
/// body is a non-capturing closure or a fn item; what it needs travels
/// explicitly in `env` (the compiler checks the capture list: a closure
/// that captures anything, or a fn pointer, does not build). On another
/// node the body is named by its code id (see
/// [`MobileFn::code_id`](crate::graph::MobileFn::code_id)): a node whose
/// executable lacks that function refuses the spawn.
///
/// # Errors
///
/// `Error::NoConnection` when `node` is not connected (or is lost before
/// answering), `Error::Remote` when it refuses (its executable has no
/// mobile function with this body's code id, a resource limit),
/// `Error::Timeout`.
///
/// ```
/// use graft::*;
/// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b_addr = b.addr();
/// let got = a.run(move || {
///     let b = connect(b_addr).unwrap();
///     let (me, greeting) = (self_pid(), String::from("hello from"));
///     spawn_on(b, (me, greeting), |(to, g)| send(to, format!("{g} {}", this_node()))).unwrap();
///     expect::<String>()
/// }).unwrap();
/// assert!(got.starts_with("hello from"));
/// ```
pub fn spawn_on<E, F>(node: NodeId, env: E, body: F) -> Result<Pid, Error>
where
    E: Mobile,
    F: FnOnce(E) + Copy + Send + Sync + 'static,
{
    spawn_remote(node, env, body, false)
}

/// [`spawn_on`], linked to the caller.
///
/// # Errors
///
/// As [`spawn_on`].
pub fn spawn_link_on<E, F>(node: NodeId, env: E, body: F) -> Result<Pid, Error>
where
    E: Mobile,
    F: FnOnce(E) + Copy + Send + Sync + 'static,
{
    spawn_remote(node, env, body, true)
}

/// The answer of a [`call_on`] body, tagged with its request: the encoded
/// value, or why the body ended without one.
#[derive(Debug, graft_derive::Mobile)]
pub(crate) struct CallAnswer {
    req: u64,
    value: Result<Encoded, ExitReason>,
}

/// Runs `body(env)` on `node` and returns its value (the paper's `call`).
///
/// # Errors
///
/// As [`spawn_on`]; `Error::Exited(reason)` if the body panics, is killed,
/// or its node is lost; `Error::Decode` if the answer does not decode.
///
/// ```
/// use graft::*;
/// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b_addr = b.addr();
/// let n = a.run(move || {
///     let b = connect(b_addr).unwrap();
///     call_on(b, 20u64, |k| (1..=k).sum::<u64>()).unwrap()
/// }).unwrap();
/// assert_eq!(n, 210);
/// ```
pub fn call_on<E, R, F>(node: NodeId, env: E, body: F) -> Result<R, Error>
where
    E: Mobile,
    R: Mobile,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
{
    let me = current("call_on");
    let req = self::node().dist.next_req();
    let f = MobileFnOnce::returning(env, body);
    let pid = spawn_on(node, (me.pid, req, f), |(caller, req, f)| {
        // The answer (or the reason there is none) is sent before the
        // process ends, so it arrives before any `ProcessDied` for it.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.call())) {
            Ok(value) => send(
                caller,
                CallAnswer {
                    req,
                    value: Ok(value),
                },
            ),
            Err(payload) => {
                let reason = crate::node::exit_reason_of(&*payload);
                send(
                    caller,
                    CallAnswer {
                        req,
                        value: Err(reason),
                    },
                );
                std::panic::resume_unwind(payload);
            }
        }
    })?;
    // Only for a lost node or a kill: the body reports everything else.
    let m = monitor(pid);
    let r = receive()
        .when(move |a: &CallAnswer| a.req == req, |a: CallAnswer| a.value)
        .when(
            move |d: &ProcessDied| d.monitor == m,
            |d: ProcessDied| Err(d.reason),
        )
        .wait();
    demonitor_flush(m);
    match r {
        Ok(v) => v.decode::<R>().map_err(Error::Decode),
        Err(reason) => Err(Error::Exited(reason)),
    }
}

/// The pid registered under `name` on `node` (this node included).
///
/// # Errors
///
/// `Error::NoConnection`, `Error::Timeout`.
pub fn whereis_on(name: &str, node: NodeId) -> Result<Option<Pid>, Error> {
    if node == self::node().id {
        return Ok(whereis(name));
    }
    let name = name.to_string();
    remote_request(node, |req, _| Ctl::Whereis { req, name })
}
