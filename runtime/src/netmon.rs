//! Node monitors, node names, auto-connect, and a partition hook for tests.
//!
//! # Node monitors
//!
//! [`monitor_nodes`]`(true)` subscribes the caller to every node coming up
//! and going down ([`NodeUp`] / [`NodeDown`] messages, as
//! `net_kernel:monitor_nodes/1`); [`monitor_node`]`(node, true)` asks for one
//! [`NodeDown`] when that node goes (as `erlang:monitor_node/2`: one message
//! per call, and at once if the node is not connected).
//!
//! The protocol is on [`monitor_nodes`].
//!
//! # Names
//!
//! A node name may carry its address: `kv@127.0.0.3:4370`. [`connect_name`]
//! connects to that address and checks that the node there has that name.
//!
//! # Auto-connect
//!
//! See [`AutoConnect`].
//!
//! # Partitions (tests)
//!
//! [`testing::partition`](crate::testing::partition) cuts every connection
//! between two sets of nodes of this OS process and refuses new ones
//! between them (a handshake across the cut is closed as it completes;
//! auto-connect does not try) until [`testing::heal`](crate::testing::heal).

use crate::context;
use crate::dist::Dist;
use crate::error::Error;
use crate::exit::{ExitReason, ProcessDied};
use crate::node::NodeShared;
use crate::pid::{MonitorRef, NodeId, Pid};
use crate::process::Mail;
use ahash::{AHashMap, AHashSet};
use graft_net::{PeerId, PeerInfo};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, Weak};

/// A node came up (for [`monitor_nodes`] subscribers).
///
/// ```
/// let up = graft::NodeUp { node: graft::NodeId(1) };
/// assert_eq!(up.node, graft::NodeId(1));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, graft_derive::Mobile)]
pub struct NodeUp {
    /// The node.
    pub node: NodeId,
}

/// A node went down (for [`monitor_nodes`] subscribers and
/// [`monitor_node`] watchers).
///
/// ```
/// let d = graft::NodeDown { node: graft::NodeId(1), reason: "disconnect".into() };
/// assert_eq!(d.reason, "disconnect");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, graft_derive::Mobile)]
pub struct NodeDown {
    /// The node.
    pub node: NodeId,
    /// Why: the transport's reason (`"disconnect"` for
    /// [`disconnect`](crate::disconnect), `"noconnection"` when it was not
    /// connected at a [`monitor_node`] call).
    pub reason: String,
}

/// When to connect to a known node on first use of one of its pids;
/// Erlang's `dist_auto_connect`.
///
/// [`AutoConnect`] (on [`NodeConfig`](crate::NodeConfig)) says what happens
/// on the first use of a pid of a node that is known (its name and address
/// were seen: connected once, or named to [`connect_name`]) but not
/// connected now: a send, an alias send, a [`request`](crate::request), or
/// a remote spawn, call or name lookup ([`spawn_on`](crate::spawn_on),
/// [`call_on`](crate::call_on), [`whereis_on`](crate::whereis_on)).
/// A send starts a connection (on the transport's poller) and its frame is held
/// (in order, up to 8 MiB per node) until the connection is up, then sent;
/// dropped if the connection fails, as a send to an unreachable node is.
/// A request, spawn, call or lookup connects first, parking the caller.
/// Monitors and links do not auto-connect on the full mesh: they report
/// `NoConnection` at once (on the partial overlay they connect, see
/// `overlay.rs`).
///
///
/// ```
/// let cfg = graft::NodeConfig::new("127.0.0.1:0").auto_connect(graft::AutoConnect::Once);
/// # let _ = cfg;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AutoConnect {
    /// Never: only [`connect`](crate::connect) and the mesh connect.
    Never,
    /// Once per node: a node whose connection was lost (or closed by
    /// [`disconnect`](crate::disconnect)) is not connected again
    /// automatically (Erlang's `dist_auto_connect once`).
    Once,
    /// Whenever a known node is used and not connected (Erlang's default).
    #[default]
    Always,
}

/// Frames held per node while auto-connect runs.
const PENDING_LIMIT: usize = 8 << 20;

#[derive(Debug, Default)]
struct Pending {
    frames: Vec<(Pid, u8, Vec<u8>)>,
    bytes: usize,
}

#[derive(Debug, Default)]
struct MonState {
    /// Nodes announced up, with the connection.
    up: AHashMap<NodeId, PeerId>,
    /// Nodes whose name and address we know.
    known: AHashMap<NodeId, (String, SocketAddr)>,
    /// Nodes lost at least once (for `AutoConnect::Once`).
    lost: AHashSet<NodeId>,
    /// `monitor_node` watchers: one entry per call.
    node_monitors: AHashMap<NodeId, Vec<Pid>>,
    /// `monitor_nodes` subscribers.
    all: Vec<Pid>,
    /// Why a connection went, noted when the transport says so.
    down_reasons: AHashMap<PeerId, String>,
    /// Frames waiting for auto-connect.
    pending: AHashMap<NodeId, Pending>,
}

/// The node-monitor and auto-connect state of one node (in `Dist`).
#[derive(Debug, Default)]
pub(crate) struct NetMon {
    state: crate::loom::Mutex<MonState>,
    mode: OnceLock<AutoConnect>,
    node: OnceLock<Weak<NodeShared>>,
    /// The partial-mesh overlay, for `Topology::Partial` (overlay.rs):
    /// `NodeUp`/`NodeDown` then follow membership, not connections.
    overlay: OnceLock<Arc<crate::overlay::Overlay>>,
}

impl NetMon {
    /// Set once at node start.
    pub(crate) fn init(&self, node: Weak<NodeShared>, mode: AutoConnect) {
        let _ = self.node.set(node);
        let _ = self.mode.set(mode);
    }

    /// Sets the overlay (at node start, before the transport).
    pub(crate) fn set_overlay(&self, o: Arc<crate::overlay::Overlay>) {
        let _ = self.overlay.set(o);
    }

    /// The overlay, for `Topology::Partial`.
    pub(crate) fn overlay(&self) -> Option<&Arc<crate::overlay::Overlay>> {
        self.overlay.get()
    }

    /// A member of the overlay came up: known, and announced.
    pub(crate) fn member_up(&self, n: &NodeShared, id: NodeId, name: &str, addr: SocketAddr) {
        let mut s = self.state.lock();
        s.known.insert(id, (name.to_string(), addr));
        prune(n, &mut s.all);
        for w in &s.all {
            n.deliver(*w, Mail::message(NodeUp { node: id }));
        }
    }

    /// A member of the overlay was declared down: announced.
    pub(crate) fn member_down(&self, n: &NodeShared, id: NodeId) {
        let mut s = self.state.lock();
        s.lost.insert(id);
        announce_down(n, &mut s, id, "noconnection");
    }

    /// With the overlay, monitors and links connect on demand (inside a
    /// process; see overlay.rs).
    pub(crate) fn connect_for_watch(&self, node: NodeId) {
        if self.overlay().is_none() {
            return;
        }
        if let Some(w) = context::worker() {
            if context::process().is_some() {
                self.ensure_connected(&w.node, node);
            }
        }
    }

    fn mode(&self) -> AutoConnect {
        self.mode.get().copied().unwrap_or_default()
    }

    /// A connection to `id` is up: `publish` queues the frames held for
    /// it (auto-connect) on the connection, then makes it usable; then
    /// subscribers hear `NodeUp` (see the module docs). The held frames
    /// are queued first: a sender that finds the connection published
    /// queues without this lock, so frames queued after publishing could
    /// follow its later sends (seen: a stream's held messages 1 to 325
    /// arrived after its message 326).
    pub(crate) fn peer_up(
        &self,
        n: &NodeShared,
        id: NodeId,
        peer: &PeerInfo,
        publish: impl FnOnce(Vec<(Pid, u8, Vec<u8>)>),
    ) {
        let partial = self.overlay().is_some();
        let mut s = self.state.lock();
        s.known.insert(id, (peer.name.clone(), peer.listen_addr));
        if let Some(old) = s.up.insert(id, peer.id) {
            if old != peer.id && !partial {
                let reason = s
                    .down_reasons
                    .remove(&old)
                    .unwrap_or_else(|| "connection_closed".into());
                announce_down(n, &mut s, id, &reason);
            }
        }
        let held = s.pending.remove(&id).map(|p| p.frames).unwrap_or_default();
        publish(held);
        if let Some(o) = self.overlay() {
            o.peer_up(id);
            return;
        }
        prune(n, &mut s.all);
        for w in &s.all {
            n.deliver(*w, Mail::message(NodeUp { node: id }));
        }
    }

    /// Notes why connection `peer` to `node` went (the first reason noted
    /// stays), and that `node` was lost (for `AutoConnect::Once`, at once:
    /// the node loop's `node_lost` comes later).
    pub(crate) fn note_down(&self, node: NodeId, peer: PeerId, reason: String) {
        let mut s = self.state.lock();
        s.down_reasons.entry(peer).or_insert(reason);
        s.lost.insert(node);
    }

    /// Connection `peer` to `id` is gone (run by the node loop).
    pub(crate) fn node_lost(&self, n: &NodeShared, id: NodeId, peer: PeerId) {
        let mut s = self.state.lock();
        let reason = s
            .down_reasons
            .remove(&peer)
            .unwrap_or_else(|| "connection_closed".into());
        if s.up.get(&id) == Some(&peer) {
            s.up.remove(&id);
            s.lost.insert(id);
            match self.overlay() {
                None => announce_down(n, &mut s, id, &reason),
                Some(o) => {
                    drop(s);
                    if let Some(me) = self.node.get().and_then(Weak::upgrade) {
                        o.conn_lost(&me, id, reason == crate::dist::CLOSED_IDLE);
                    }
                }
            }
        }
    }

    /// A frame for `to` whose node is not connected: held for auto-connect,
    /// or dropped.
    pub(crate) fn undeliverable(&self, dist: &Dist, to: Pid, kind: u8, frame: Vec<u8>) {
        let node = to.node();
        let mut s = self.state.lock();
        // Connected meanwhile (`peer_up` publishes under this lock).
        if dist.try_send_to_pid_node(to, kind, &frame).is_some() {
            return;
        }
        let Some(addr) = self.may_auto_connect(&s, node) else {
            log::debug!("graft: no connection to {node}: message to {to} dropped");
            return;
        };
        let start = !s.pending.contains_key(&node);
        let p = s.pending.entry(node).or_default();
        if p.bytes + frame.len() > PENDING_LIMIT {
            log::warn!("graft: auto-connect to {node}: too much held, message to {to} dropped");
            return;
        }
        p.bytes += frame.len();
        p.frames.push((to, kind, frame));
        drop(s);
        if start {
            self.start_connect(node, addr);
        }
    }

    /// The address to auto-connect `node` at, if the mode allows it now.
    fn may_auto_connect(&self, s: &MonState, node: NodeId) -> Option<SocketAddr> {
        let me = self.node.get()?.upgrade()?;
        let allowed = match self.mode() {
            AutoConnect::Never => false,
            AutoConnect::Once => !s.lost.contains(&node),
            AutoConnect::Always => true,
        };
        if !allowed || partitioned(me.id, node) || node == me.id {
            return None;
        }
        s.known.get(&node).map(|k| k.1)
    }

    /// Connects to `node` (on the transport's poller: no thread waits);
    /// held frames go when it is up, or are dropped if it fails.
    fn start_connect(&self, node: NodeId, addr: SocketAddr) {
        let Some(me) = self.node.get().and_then(|w| w.upgrade()) else {
            return;
        };
        crate::node::connect_transport_then(&me, addr, move |n, r| {
            let mut s = n.dist.mon.state.lock();
            if let Some(p) = s.pending.remove(&node) {
                // Not flushed by `peer_up`: failed, or another node there.
                for (to, kind, frame) in p.frames {
                    let _ = n.dist.try_send_to_pid_node(to, kind, &frame);
                }
            }
            drop(s);
            if let Err(e) = r {
                log::info!("graft: {} cannot auto-connect to {addr}: {e}", n.name);
            }
        });
    }

    /// Connects to `node` now if it is known, not connected and the mode
    /// allows it (blocking the calling thread); `true` if connected.
    pub(crate) fn ensure_connected(&self, n: &Arc<NodeShared>, node: NodeId) -> bool {
        if n.dist.connection(node, None).is_some() {
            return true;
        }
        let addr = {
            let s = self.state.lock();
            self.may_auto_connect(&s, node)
        };
        let Some(addr) = addr else { return false };
        let r = if context::process().is_some() {
            crate::node::connect_parked(n, addr)
        } else {
            crate::node::connect_transport(n, addr)
        };
        let up = n.dist.connection(node, None).is_some();
        if !up {
            log::debug!("graft: no connection to {node} for a watch at {addr}: {r:?}");
        }
        up
    }

    /// Remembers a node's name and address (from [`connect_name`]).
    fn know(&self, id: NodeId, name: &str, addr: SocketAddr) {
        self.state.lock().known.insert(id, (name.to_string(), addr));
    }
}

/// Tells the watchers of `id` and the subscribers that `id` went down.
fn announce_down(n: &NodeShared, s: &mut MonState, id: NodeId, reason: &str) {
    let down = || NodeDown {
        node: id,
        reason: reason.to_string(),
    };
    for w in s.node_monitors.remove(&id).unwrap_or_default() {
        n.deliver(w, Mail::message(down()));
    }
    prune(n, &mut s.all);
    for w in &s.all {
        n.deliver(*w, Mail::message(down()));
    }
}

/// Drops subscribers that have ended.
fn prune(n: &NodeShared, v: &mut Vec<Pid>) {
    v.retain(|p| n.local_process(*p).is_some());
}

/// The pid a `ProcessDied` names for a monitor by name whose name was not
/// registered: serial 0 of that node (never a real process).
pub(crate) fn name_placeholder(node: NodeId) -> Pid {
    Pid::new(node, 0, 0)
}

/// With `true`, the caller receives a [`NodeUp`] whenever a node connects
/// and a [`NodeDown`] whenever one is lost, until it calls
/// `monitor_nodes(false)` or ends (as `net_kernel:monitor_nodes/1`).
///
/// Protocol (all on this node, no frame): the transport's `peer_up`
/// callback (a connection's handshake done) records the node as *up* under
/// its connection id, queues what auto-connect held for that node on the
/// connection, publishes the connection, then delivers `NodeUp` to the
/// subscribers, all under one lock. The node loop's `node_lost` (a
/// connection gone) delivers `NodeDown` only if the lost connection is the
/// one recorded as up. A reconnect that lands before the old connection's
/// loss is processed first announces the old one's `NodeDown`. So for each
/// node a subscriber sees `NodeUp` and `NodeDown` alternate, starting with
/// `NodeUp`, and a `NodeDown` is sent before the monitors and links across
/// that connection fire.
///
///
/// # Panics
///
/// Outside a process.
///
/// ```
/// use graft::*;
/// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("nm")).unwrap();
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("nm")).unwrap();
/// let b_addr = b.addr();
/// let up = a.run(move || {
///     monitor_nodes(true);
///     let id = connect(b_addr).unwrap();
///     let up: NodeUp = expect();
///     up.node == id
/// }).unwrap();
/// assert!(up);
/// ```
pub fn monitor_nodes(on: bool) {
    let me = crate::context::current("monitor_nodes").pid;
    let n = crate::context::node();
    let mut s = n.dist.mon.state.lock();
    s.all.retain(|p| *p != me);
    if on {
        s.all.push(me);
    }
}

/// With `true`, the caller receives one [`NodeDown`] when `node` goes down
/// (at once, with reason `"noconnection"`, if it is not connected and
/// cannot be auto-connected); each call asks for one more. With `false`,
/// cancels one such request. As `erlang:monitor_node/2`.
///
/// # Panics
///
/// Outside a process.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let d = node.run(|| {
///     monitor_node(NodeId::from_name("nowhere@127.0.0.1:1"), true);
///     expect::<NodeDown>()
/// }).unwrap();
/// assert_eq!(d.reason, "noconnection");
/// ```
pub fn monitor_node(node: NodeId, on: bool) {
    let me = crate::context::current("monitor_node");
    let n = crate::context::node();
    if !on {
        let mut s = n.dist.mon.state.lock();
        if let Some(v) = s.node_monitors.get_mut(&node) {
            if let Some(i) = v.iter().position(|p| *p == me.pid) {
                v.swap_remove(i);
            }
        }
        return;
    }
    if node == n.id {
        return;
    }
    if let Some(w) = context::worker() {
        n.dist.mon.ensure_connected(&w.node, node);
    }
    let member = n.dist.mon.overlay().map(|o| o.is_member(node));
    let mut s = n.dist.mon.state.lock();
    if member.unwrap_or_else(|| s.up.contains_key(&node)) {
        s.node_monitors.entry(node).or_default().push(me.pid);
    } else {
        drop(s);
        me.deliver(Mail::message(NodeDown {
            node,
            reason: "noconnection".into(),
        }));
    }
}

/// Monitors the process registered as `name` on `node` (this node
/// included), as `erlang:monitor(process, {Name, Node})`: a
/// [`ProcessDied`] arrives when it ends; at once with `NoProc` if no
/// process holds the name, and with `NoConnection` if `node` is not
/// connected or is lost. The `ProcessDied`'s `pid` is the process that held
/// the name, or `Pid::new(node, 0, 0)` when none did. [`demonitor`]
/// cancels it.
///
/// [`demonitor`]: crate::demonitor
///
/// # Panics
///
/// Outside a process.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let r = node.run(|| {
///     let m = monitor_name("nobody", this_node());
///     let d: ProcessDied = expect();
///     (d.monitor == m, d.reason)
/// }).unwrap();
/// assert_eq!(r, (true, ExitReason::NoProc));
/// ```
pub fn monitor_name(name: &str, node: NodeId) -> MonitorRef {
    let me = crate::context::current("monitor_name");
    let n = crate::context::node();
    if node == n.id {
        if let Some(pid) = n.registry.lookup(name) {
            return crate::api::monitor(pid);
        }
    }
    let r = n.make_ref();
    let placeholder = name_placeholder(node);
    // SAFETY: `me` is the running process.
    unsafe { me.local() }.monitors.push((r, placeholder));
    let fail = |reason| {
        me.deliver(Mail::Down(ProcessDied {
            pid: placeholder,
            reason,
            monitor: r,
        }))
    };
    if node == n.id {
        fail(ExitReason::NoProc);
        return r;
    }
    n.dist.mon.connect_for_watch(node);
    let Some(conn) = n.dist.connection(node, None) else {
        fail(ExitReason::NoConnection);
        return r;
    };
    n.dist.record_monitor(r, me.pid, placeholder, conn);
    let c = crate::dist::Ctl::MonitorName {
        watcher: me.pid,
        name: name.to_string(),
        r,
    };
    if n.dist.send_ctl_on(node, conn, &c).is_err() && n.dist.forget_monitor(node, r) {
        fail(ExitReason::NoConnection);
    }
    r
}

/// Splits `name@host:port` into its address.
fn addr_of_name(name: &str) -> Result<SocketAddr, Error> {
    let bad = |why: &str| {
        Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("node name {name:?}: {why}"),
        ))
    };
    let (_, host) = name.split_once('@').ok_or_else(|| bad("no '@'"))?;
    if let Ok(a) = host.parse::<SocketAddr>() {
        return Ok(a);
    }
    use std::net::ToSocketAddrs;
    host.to_socket_addrs()
        .map_err(|e| bad(&format!("the host part does not resolve: {e}")))?
        .next()
        .ok_or_else(|| bad("the host part names no address (give host:port)"))
}

/// Connects to the node named `name`, where the name carries the address
/// (`"kv@127.0.0.3:4370"`: the node was started with that name and listens
/// there) or names a node this one has been connected to, and checks the
/// node there has that name.
pub(crate) fn connect_name_on(n: &Arc<NodeShared>, name: &str) -> Result<NodeId, Error> {
    let want = NodeId::from_name(name);
    // A name without its address: one this node has met is remembered.
    let known = n.dist.mon.state.lock().known.get(&want).map(|k| k.1);
    let addr = match addr_of_name(name) {
        Ok(a) => a,
        Err(e) => match known {
            Some(a) => a,
            // Neither in the name nor met before: the epmd-less convention,
            // graft's fixed port (`discovery::DEFAULT_PORT`).
            None => match name.parse::<crate::discovery::Seed>() {
                Ok(crate::discovery::Seed::Name(full)) => addr_of_name(&full).map_err(|_| e)?,
                _ => return Err(e),
            },
        },
    };
    if want == n.id {
        return Ok(want);
    }
    if partitioned(n.id, want) {
        return Err(Error::NoConnection(want));
    }
    n.dist.mon.know(want, name, addr);
    let got = crate::node::connect_transport(n, addr).map_err(|e| match e {
        Error::Remote(why) => Error::Remote(format!("{name} at {addr}: {why}")),
        e => e,
    })?;
    if got != want {
        let other = n.dist.peer_info(got).map_or_else(String::new, |p| p.0);
        return Err(Error::Remote(format!(
            "{addr} is node {other:?}, not {name:?}"
        )));
    }
    Ok(got)
}

/// Connects to the node named `name`, whose name carries its address
/// (`"kv@127.0.0.3:4370"`), as [`connect`](crate::connect) does to an
/// address; the node there must have that name. A name without an address
/// (`"kv@127.0.0.1"`) is found among the nodes this node has been connected
/// to (their names and addresses are remembered), else on graft's fixed
/// port, [`discovery::DEFAULT_PORT`](crate::discovery::DEFAULT_PORT) (no
/// port mapper needed).
///
/// # Errors
///
/// `Error::Io` for a name without a usable address, `Error::Remote` when
/// the connection fails or the node there has another name,
/// `Error::NotInProcess` outside a process (use [`Node::connect_name`]).
///
/// [`Node::connect_name`]: crate::Node::connect_name
///
/// ```
/// use graft::*;
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("cn")).unwrap();
/// // A name that carries the address it listens on.
/// let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
/// let name = format!("kv@127.0.0.1:{port}");
/// let kv = Node::start(NodeConfig::new(&format!("127.0.0.1:{port}")).name(&name).cookie("cn")).unwrap();
/// let id = b.run(move || connect_name(&name)).unwrap().unwrap();
/// assert_eq!(id, kv.id());
/// ```
pub fn connect_name(name: &str) -> Result<NodeId, Error> {
    let Some(w) = context::worker() else {
        return Err(Error::NotInProcess("connect_name"));
    };
    let n = w.node.clone();
    let name = name.to_string();
    crate::api::blocking(move || connect_name_on(&n, &name))
}

impl crate::Node {
    /// [`connect_name`] from outside a process (blocks the calling thread).
    ///
    /// # Errors
    ///
    /// As [`connect_name`].
    pub fn connect_name(&self, name: &str) -> Result<NodeId, Error> {
        connect_name_on(self.shared(), name)
    }
}

// ---------------------------------------------------------------------
// The partition filter (tests).

static CUT_ANY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static CUTS: parking_lot::RwLock<Vec<(Vec<NodeId>, Vec<NodeId>)>> =
    parking_lot::RwLock::new(Vec::new());

/// Is the link between `a` and `b` cut by a test partition?
pub(crate) fn partitioned(a: NodeId, b: NodeId) -> bool {
    if !CUT_ANY.load(std::sync::atomic::Ordering::Acquire) {
        return false;
    }
    CUTS.read()
        .iter()
        .any(|(l, r)| (l.contains(&a) && r.contains(&b)) || (l.contains(&b) && r.contains(&a)))
}

/// Test facilities: partitions and frame counts. For tests only; nothing
/// here is meant for production code.
pub mod testing {
    use super::*;

    /// Frames a node has received from its peers since it started, by kind.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct FrameCounts {
        /// Messages to pids.
        pub deliver: u64,
        /// Control frames (monitors, links, exits, spawns, names...).
        pub control: u64,
        /// Messages to aliases (replies).
        pub alias: u64,
        /// Requests (a message with its monitor).
        pub request: u64,
    }

    impl FrameCounts {
        /// All frames.
        pub fn total(&self) -> u64 {
            self.deliver + self.control + self.alias + self.request
        }
    }

    fn counts(d: &Dist) -> FrameCounts {
        let c = |i: usize| d.frames_in[i].load(std::sync::atomic::Ordering::Relaxed);
        FrameCounts {
            deliver: c(0),
            control: c(1),
            alias: c(2),
            request: c(3),
        }
    }

    /// Frames `node` has received (heartbeats and handshakes not counted).
    ///
    /// ```
    /// let node = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0")).unwrap();
    /// assert_eq!(graft::testing::frames_received(&node).total(), 0);
    /// ```
    pub fn frames_received(node: &crate::Node) -> FrameCounts {
        counts(&node.shared().dist)
    }

    /// Cuts the connections between every node of `left` and every node
    /// of `right`, and refuses new ones between them until [`heal`]: a
    /// network partition between two halves of a cluster living in this OS
    /// process. Both sides see each other as lost (`NodeDown`, monitors
    /// and links with `NoConnection`).
    ///
    /// ```
    /// use graft::*;
    /// let c = || NodeConfig::new("127.0.0.1:0").cookie("cut");
    /// let (a, b) = (Node::start(c()).unwrap(), Node::start(c()).unwrap());
    /// a.connect(b.addr()).unwrap();
    /// testing::partition(&[&a], &[&b]);
    /// assert!(a.nodes().is_empty());
    /// assert!(a.connect(b.addr()).is_ok() && a.nodes().is_empty()); // refused
    /// testing::heal(&[&a], &[&b]);
    /// assert_eq!(a.nodes(), vec![b.id()]);
    /// ```
    pub fn partition(left: &[&crate::Node], right: &[&crate::Node]) {
        let l: Vec<NodeId> = left.iter().map(|n| n.id()).collect();
        let r: Vec<NodeId> = right.iter().map(|n| n.id()).collect();
        CUTS.write().push((l, r.clone()));
        CUT_ANY.store(true, std::sync::atomic::Ordering::Release);
        for a in left {
            for b in &r {
                a.disconnect(*b);
            }
        }
        for b in right {
            for a in left {
                b.disconnect(a.id());
            }
        }
        // Wait (bounded) until neither side lists the other.
        let t = std::time::Instant::now();
        while left.iter().any(|a| a.nodes().iter().any(|n| r.contains(n)))
            && t.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// Removes the cuts between `left` and `right` and connects the two
    /// halves again (each node of `left` to each of `right`; waits, bounded,
    /// until they are connected).
    pub fn heal(left: &[&crate::Node], right: &[&crate::Node]) {
        let l: Vec<NodeId> = left.iter().map(|n| n.id()).collect();
        let r: Vec<NodeId> = right.iter().map(|n| n.id()).collect();
        {
            let mut cuts = CUTS.write();
            cuts.retain(|(cl, cr)| {
                let touches = |x: &Vec<NodeId>, y: &Vec<NodeId>| {
                    x.iter().any(|n| l.contains(n)) && y.iter().any(|n| r.contains(n))
                };
                !(touches(cl, cr) || touches(cr, cl))
            });
            CUT_ANY.store(!cuts.is_empty(), std::sync::atomic::Ordering::Release);
        }
        for a in left {
            for b in right {
                let t = std::time::Instant::now();
                while !a.nodes().contains(&b.id())
                    && t.elapsed() < std::time::Duration::from_secs(10)
                {
                    if a.connect(b.addr()).is_err() {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                }
            }
        }
    }

    /// Removes every cut (does not reconnect).
    pub fn heal_all() {
        CUTS.write().clear();
        CUT_ANY.store(false, std::sync::atomic::Ordering::Release);
    }
}
