//! Process groups across a cluster, with scopes, as OTP's `pg`.
//!
//! A *scope* is an independent namespace of groups; each node that takes
//! part in it runs one scope process ([`start_scope`], or [`start`] for the
//! default scope `"pg"`), registered on its node under the scope's name.
//! A group is a name (a `String`); its members are pids, each joined (and
//! monitored) by the scope process of its own node: only local processes
//! join ([`join`]), as in OTP. A process may join a group several times
//! and is then listed as often; it leaves ([`leave`]) once per join, or all
//! at once when it ends.
//!
//! Reads ([`get_members`], [`get_local_members`], [`which_groups`]) take
//! the node's view of the scope directly (the scope process is its only
//! writer), without a message.
//!
//! # Protocol
//!
//! Scope processes talk to the scope processes of the same name on the
//! other nodes, with ordinary messages (so between two of them, in order):
//!
//! 1. **Discover.** At start, and on every `NodeUp` (the scope process
//!    subscribes with `monitor_nodes`), a scope sends `Discover { peer }`
//!    to the scope of that name on each node concerned (a name send).
//! 2. A scope receiving `Discover` from a peer it does not know monitors
//!    it, sends it `Sync` (all its local members) and a `Discover` of its
//!    own; from a peer it knows, only `Sync`. So both sides end up knowing
//!    each other, each with the other's members.
//! 3. **Sync** replaces everything known of that peer's members (the
//!    differences are reported to [`monitor`] subscribers as joins and
//!    leaves). A `Sync` from an unknown peer makes it known too.
//! 4. **Join / Leave**: a local change is applied to the local view first
//!    (the caller of [`join`] sees it when `join` returns), then sent to
//!    every known peer. A join or leave from an unknown peer is ignored
//!    (its `Sync` comes first whenever it matters).
//! 5. **Loss.** A `NodeDown` drops every peer of that node and all its
//!    members at once; a peer scope that ends is dropped when its monitor
//!    fires. A local member that ends leaves all its groups (and peers
//!    hear a `Leave`).
//! 6. **Merge.** After a partition heals (or a node comes back), `NodeUp`
//!    starts step 1 again, so both sides' members are merged back by
//!    `Sync`. Nothing needs a lock or a leader: each scope is the only
//!    writer of its own members, and everyone else holds copies.
//!
//! ```
//! use graft_otp::prelude::*;
//! use graft_otp::pg;
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! node.run(|| {
//!     pg::start().unwrap();
//!     pg::join(pg::DEFAULT_SCOPE, "workers", self_pid()).unwrap();
//!     assert_eq!(pg::get_members(pg::DEFAULT_SCOPE, "workers"), vec![self_pid()]);
//!     pg::leave(pg::DEFAULT_SCOPE, "workers", self_pid()).unwrap();
//!     assert!(pg::get_members(pg::DEFAULT_SCOPE, "workers").is_empty());
//! }).unwrap();
//! ```

use graft::{
    demonitor_flush, is_alive, monitor_nodes, nodes, receive, register, reply, request, self_pid,
    send, send_to, spawn, this_node, whereis, Alias, Error, Mobile, MonitorRef, NodeDown, NodeId,
    NodeUp, Pid, ProcessDied,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

/// The scope [`start`] starts.
pub const DEFAULT_SCOPE: &str = "pg";

/// How long a call to the local scope process waits.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong with a pg call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgError {
    /// No scope process of that name runs on this node.
    NoScope(String),
    /// Only processes of this node may join (or leave) here.
    NotLocal(Pid),
    /// The scope process did not answer.
    Failed(String),
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgError::NoScope(s) => write!(f, "no pg scope {s:?} on this node"),
            PgError::NotLocal(p) => write!(f, "{p} is not a process of this node"),
            PgError::Failed(why) => write!(f, "pg scope call failed: {why}"),
        }
    }
}

impl std::error::Error for PgError {}

/// A join or leave seen by a [`monitor`] subscriber.
#[derive(Clone, Debug, PartialEq, Eq, Mobile)]
pub struct PgEvent {
    /// The subscription ([`monitor`]'s first value).
    pub id: u64,
    /// The group.
    pub group: String,
    /// `true` for a join, `false` for a leave.
    pub joined: bool,
    /// The processes that joined or left.
    pub pids: Vec<Pid>,
}

/// Between scope processes (see the module docs).
#[derive(Debug, Mobile)]
enum PeerMsg {
    Discover {
        peer: Pid,
    },
    Sync {
        peer: Pid,
        groups: Vec<(String, Vec<Pid>)>,
    },
    Join {
        peer: Pid,
        group: String,
        pids: Vec<Pid>,
    },
    Leave {
        peer: Pid,
        group: String,
        pids: Vec<Pid>,
    },
}

/// Calls to the local scope process.
#[derive(Debug, Mobile)]
enum Req {
    Join {
        group: String,
        pids: Vec<Pid>,
        from: Alias,
    },
    Leave {
        group: String,
        pids: Vec<Pid>,
        from: Alias,
    },
    Monitor {
        group: Option<String>,
        pid: Pid,
        from: Alias,
    },
    Demonitor {
        id: u64,
        from: Alias,
    },
}

/// A node's copy of one scope.
#[derive(Debug, Default)]
struct View {
    all: HashMap<String, Vec<Pid>>,
    local: HashMap<String, Vec<Pid>>,
}

type Views = Mutex<HashMap<(NodeId, String), Arc<RwLock<View>>>>;

fn views() -> &'static Views {
    static V: OnceLock<Views> = OnceLock::new();
    V.get_or_init(Default::default)
}

fn view_of(scope: &str) -> Option<Arc<RwLock<View>>> {
    let key = (this_node(), scope.to_string());
    views()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned()
}

/// Starts the default scope ([`DEFAULT_SCOPE`]) on this node.
///
/// # Errors
///
/// As [`start_scope`].
pub fn start() -> Result<Pid, Error> {
    start_scope(DEFAULT_SCOPE)
}

/// Starts the scope process of `scope` on this node, registered as
/// `scope`; it finds the scope's processes on the connected nodes, and on
/// nodes as they connect.
///
/// # Errors
///
/// `Error::NameTaken` if something on this node is registered as `scope`.
pub fn start_scope(scope: &str) -> Result<Pid, Error> {
    let view = Arc::new(RwLock::new(View::default()));
    let key = (this_node(), scope.to_string());
    let name = scope.to_string();
    let v2 = view.clone();
    let pid = spawn(move || {
        let _ = graft::expect::<Go>();
        Scope::new(name, v2).run()
    });
    if let Err(e) = register(scope, pid) {
        graft::exit(pid, graft::ExitReason::Kill);
        return Err(e);
    }
    views()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, view);
    send(pid, Go);
    Ok(pid)
}

/// Lets the scope process run once it is registered.
#[derive(Debug, Mobile)]
struct Go;

fn scope_pid(scope: &str) -> Result<Pid, PgError> {
    whereis(scope).ok_or_else(|| PgError::NoScope(scope.to_string()))
}

fn call<R: graft::Message>(scope: &str, make: impl FnOnce(Alias) -> Req) -> Result<R, PgError> {
    let pid = scope_pid(scope)?;
    request(pid, make, Some(CALL_TIMEOUT)).map_err(|e| PgError::Failed(e.to_string()))
}

/// Adds `pid` (a process of this node) to `group` in `scope`
/// (`pg:join/3`). Returns once this node's view has it.
///
/// # Errors
///
/// [`PgError::NotLocal`], [`PgError::NoScope`].
pub fn join(scope: &str, group: &str, pid: Pid) -> Result<(), PgError> {
    join_many(scope, group, &[pid])
}

/// [`join`] for several processes at once.
///
/// # Errors
///
/// As [`join`].
pub fn join_many(scope: &str, group: &str, pids: &[Pid]) -> Result<(), PgError> {
    if let Some(p) = pids.iter().find(|p| p.node() != this_node()) {
        return Err(PgError::NotLocal(*p));
    }
    let (group, pids) = (group.to_string(), pids.to_vec());
    call(scope, |from| Req::Join { group, pids, from })
}

/// Removes one membership of `pid` in `group` (`pg:leave/3`); `false` if
/// it was not a member.
///
/// # Errors
///
/// [`PgError::NotLocal`], [`PgError::NoScope`].
pub fn leave(scope: &str, group: &str, pid: Pid) -> Result<bool, PgError> {
    if pid.node() != this_node() {
        return Err(PgError::NotLocal(pid));
    }
    let group = group.to_string();
    call(scope, |from| Req::Leave {
        group,
        pids: vec![pid],
        from,
    })
}

/// The members of `group` in `scope` on every node, as this node knows
/// them (`pg:get_members/2`); empty if there is no such scope here.
pub fn get_members(scope: &str, group: &str) -> Vec<Pid> {
    view_of(scope)
        .and_then(|v| v.read().ok()?.all.get(group).cloned())
        .unwrap_or_default()
}

/// The members of `group` in `scope` on this node
/// (`pg:get_local_members/2`).
pub fn get_local_members(scope: &str, group: &str) -> Vec<Pid> {
    view_of(scope)
        .and_then(|v| v.read().ok()?.local.get(group).cloned())
        .unwrap_or_default()
}

/// Every group of `scope` with at least one member, sorted.
pub fn which_groups(scope: &str) -> Vec<String> {
    let mut g: Vec<String> = view_of(scope)
        .map(|v| {
            v.read()
                .map(|v| v.all.keys().cloned().collect())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    g.sort();
    g
}

/// Subscribes the caller to the joins and leaves of `group` in `scope`
/// (`pg:monitor/2`): returns the subscription id and the members now; a
/// [`PgEvent`] with that id follows each change.
///
/// # Errors
///
/// [`PgError::NoScope`].
pub fn monitor(scope: &str, group: &str) -> Result<(u64, Vec<Pid>), PgError> {
    let (group, pid) = (Some(group.to_string()), self_pid());
    call(scope, |from| Req::Monitor { group, pid, from })
}

/// Subscribes the caller to the joins and leaves of every group of
/// `scope` (`pg:monitor_scope/1`).
///
/// # Errors
///
/// [`PgError::NoScope`].
pub fn monitor_scope(scope: &str) -> Result<u64, PgError> {
    let pid = self_pid();
    call::<(u64, Vec<Pid>)>(scope, |from| Req::Monitor {
        group: None,
        pid,
        from,
    })
    .map(|(id, _)| id)
}

/// Ends a subscription of [`monitor`] or [`monitor_scope`].
///
/// # Errors
///
/// [`PgError::NoScope`].
pub fn demonitor(scope: &str, id: u64) -> Result<(), PgError> {
    call(scope, |from| Req::Demonitor { id, from })
}

/// One peer scope: its monitor and its members.
#[derive(Debug)]
struct Peer {
    monitor: MonitorRef,
    groups: HashMap<String, Vec<Pid>>,
}

/// What the scope loop got.
enum Ev {
    Peer(PeerMsg),
    Req(Req),
    Up(NodeId),
    Down(NodeId),
    Died(ProcessDied),
}

struct Scope {
    name: String,
    me: Pid,
    view: Arc<RwLock<View>>,
    local: HashMap<String, Vec<Pid>>,
    /// Local members' monitors (one per member process).
    members: HashMap<Pid, MonitorRef>,
    peers: HashMap<Pid, Peer>,
    subs: Vec<(u64, Pid, Option<String>)>,
    next_sub: u64,
}

/// Takes the scope's view out of the registry when the scope process ends.
struct ViewGuard(String, Arc<RwLock<View>>);

impl Drop for ViewGuard {
    fn drop(&mut self) {
        let key = (this_node(), self.0.clone());
        let mut v = views().lock().unwrap_or_else(|e| e.into_inner());
        if v.get(&key).is_some_and(|x| Arc::ptr_eq(x, &self.1)) {
            v.remove(&key);
        }
    }
}

impl Scope {
    fn new(name: String, view: Arc<RwLock<View>>) -> Scope {
        Scope {
            name,
            me: self_pid(),
            view,
            local: HashMap::new(),
            members: HashMap::new(),
            peers: HashMap::new(),
            subs: Vec::new(),
            next_sub: 1,
        }
    }

    fn run(mut self) {
        let _guard = ViewGuard(self.name.clone(), self.view.clone());
        monitor_nodes(true);
        for n in nodes() {
            self.discover(n);
        }
        loop {
            let ev = receive()
                .on(Ev::Peer)
                .on(Ev::Req)
                .on(|u: NodeUp| Ev::Up(u.node))
                .on(|d: NodeDown| Ev::Down(d.node))
                .on(Ev::Died)
                .wait();
            match ev {
                Ev::Peer(m) => self.peer_msg(m),
                Ev::Req(r) => self.request(r),
                Ev::Up(n) => self.discover(n),
                Ev::Down(n) => {
                    let gone: Vec<Pid> = self
                        .peers
                        .keys()
                        .filter(|p| p.node() == n)
                        .copied()
                        .collect();
                    for p in gone {
                        self.drop_peer(p);
                    }
                }
                Ev::Died(d) => self.died(d),
            }
        }
    }

    fn discover(&self, node: NodeId) {
        let _ = send_to(
            (self.name.as_str(), node),
            PeerMsg::Discover { peer: self.me },
        );
    }

    fn local_groups(&self) -> Vec<(String, Vec<Pid>)> {
        self.local
            .iter()
            .map(|(g, p)| (g.clone(), p.clone()))
            .collect()
    }

    /// Makes `peer` known (monitored); `true` if it was new.
    fn know(&mut self, peer: Pid) -> bool {
        if self.peers.contains_key(&peer) || peer == self.me {
            return false;
        }
        let m = graft::monitor(peer);
        self.peers.insert(
            peer,
            Peer {
                monitor: m,
                groups: HashMap::new(),
            },
        );
        true
    }

    fn peer_msg(&mut self, m: PeerMsg) {
        match m {
            PeerMsg::Discover { peer } => {
                if peer == self.me {
                    return;
                }
                let new = self.know(peer);
                send(
                    peer,
                    PeerMsg::Sync {
                        peer: self.me,
                        groups: self.local_groups(),
                    },
                );
                if new {
                    send(peer, PeerMsg::Discover { peer: self.me });
                }
            }
            PeerMsg::Sync { peer, groups } => {
                if peer == self.me {
                    return;
                }
                self.know(peer);
                let new: HashMap<String, Vec<Pid>> = groups.into_iter().collect();
                let old = std::mem::take(&mut self.peers.get_mut(&peer).expect("known").groups);
                let mut touched: Vec<String> = old.keys().chain(new.keys()).cloned().collect();
                touched.sort();
                touched.dedup();
                self.peers.get_mut(&peer).expect("known").groups = new.clone();
                for g in touched {
                    let before = old.get(&g).cloned().unwrap_or_default();
                    let after = new.get(&g).cloned().unwrap_or_default();
                    let left = minus(&before, &after);
                    let joined = minus(&after, &before);
                    self.refresh(&g);
                    self.notify(&g, false, left);
                    self.notify(&g, true, joined);
                }
            }
            PeerMsg::Join { peer, group, pids } => {
                let Some(p) = self.peers.get_mut(&peer) else {
                    return;
                };
                p.groups.entry(group.clone()).or_default().extend(&pids);
                self.refresh(&group);
                self.notify(&group, true, pids);
            }
            PeerMsg::Leave { peer, group, pids } => {
                let Some(p) = self.peers.get_mut(&peer) else {
                    return;
                };
                let left = remove_each(p.groups.entry(group.clone()).or_default(), &pids);
                if p.groups.get(&group).is_some_and(Vec::is_empty) {
                    p.groups.remove(&group);
                }
                self.refresh(&group);
                self.notify(&group, false, left);
            }
        }
    }

    fn request(&mut self, r: Req) {
        match r {
            Req::Join { group, pids, from } => {
                for p in &pids {
                    if !self.members.contains_key(p) {
                        let m = graft::monitor(*p);
                        self.members.insert(*p, m);
                    }
                }
                self.local.entry(group.clone()).or_default().extend(&pids);
                self.refresh(&group);
                self.broadcast(|me| PeerMsg::Join {
                    peer: me,
                    group: group.clone(),
                    pids: pids.clone(),
                });
                self.notify(&group, true, pids);
                reply(from, ());
            }
            Req::Leave { group, pids, from } => {
                let left = remove_each(self.local.entry(group.clone()).or_default(), &pids);
                if self.local.get(&group).is_some_and(Vec::is_empty) {
                    self.local.remove(&group);
                }
                for p in &left {
                    self.maybe_unmonitor(*p);
                }
                if !left.is_empty() {
                    self.refresh(&group);
                    self.broadcast(|me| PeerMsg::Leave {
                        peer: me,
                        group: group.clone(),
                        pids: left.clone(),
                    });
                    self.notify(&group, false, left.clone());
                }
                reply(from, !left.is_empty());
            }
            Req::Monitor { group, pid, from } => {
                let id = self.next_sub;
                self.next_sub += 1;
                let now = group
                    .as_ref()
                    .and_then(|g| self.view.read().ok()?.all.get(g).cloned())
                    .unwrap_or_default();
                self.subs.push((id, pid, group));
                reply(from, (id, now));
            }
            Req::Demonitor { id, from } => {
                self.subs.retain(|s| s.0 != id);
                reply(from, ());
            }
        }
    }

    /// Stops monitoring a local process that is in no group any more.
    fn maybe_unmonitor(&mut self, p: Pid) {
        if self.local.values().any(|v| v.contains(&p)) {
            return;
        }
        if let Some(m) = self.members.remove(&p) {
            demonitor_flush(m);
        }
    }

    fn died(&mut self, d: ProcessDied) {
        if self.members.get(&d.pid) == Some(&d.monitor) {
            self.members.remove(&d.pid);
            let mut groups: Vec<String> = self.local.keys().cloned().collect();
            groups.sort();
            for g in groups {
                let v = self.local.get_mut(&g).expect("listed");
                let before = v.len();
                v.retain(|p| *p != d.pid);
                let n = before - v.len();
                if v.is_empty() {
                    self.local.remove(&g);
                }
                if n > 0 {
                    let left = vec![d.pid; n];
                    self.refresh(&g);
                    self.broadcast(|me| PeerMsg::Leave {
                        peer: me,
                        group: g.clone(),
                        pids: left.clone(),
                    });
                    self.notify(&g, false, left);
                }
            }
        } else if self
            .peers
            .get(&d.pid)
            .is_some_and(|p| p.monitor == d.monitor)
        {
            self.drop_peer(d.pid);
        }
    }

    fn drop_peer(&mut self, peer: Pid) {
        let Some(p) = self.peers.remove(&peer) else {
            return;
        };
        demonitor_flush(p.monitor);
        let mut groups: Vec<(String, Vec<Pid>)> = p.groups.into_iter().collect();
        groups.sort();
        for (g, pids) in groups {
            self.refresh(&g);
            self.notify(&g, false, pids);
        }
    }

    fn broadcast(&self, make: impl Fn(Pid) -> PeerMsg) {
        for p in self.peers.keys() {
            send(*p, make(self.me));
        }
    }

    /// Rebuilds the view of group `g`.
    fn refresh(&self, g: &str) {
        let local = self.local.get(g).cloned().unwrap_or_default();
        let mut all = local.clone();
        let mut peers: Vec<&Pid> = self.peers.keys().collect();
        peers.sort();
        for p in peers {
            if let Some(v) = self.peers[p].groups.get(g) {
                all.extend(v);
            }
        }
        let mut view = self.view.write().unwrap_or_else(|e| e.into_inner());
        if local.is_empty() {
            view.local.remove(g);
        } else {
            view.local.insert(g.to_string(), local);
        }
        if all.is_empty() {
            view.all.remove(g);
        } else {
            view.all.insert(g.to_string(), all);
        }
    }

    fn notify(&mut self, g: &str, joined: bool, pids: Vec<Pid>) {
        if pids.is_empty() || self.subs.is_empty() {
            return;
        }
        self.subs.retain(|s| is_alive(s.1));
        for (id, pid, group) in &self.subs {
            if group.as_deref().is_none_or(|x| x == g) {
                send(
                    *pid,
                    PgEvent {
                        id: *id,
                        group: g.to_string(),
                        joined,
                        pids: pids.clone(),
                    },
                );
            }
        }
    }
}

/// `a` without one copy of each element of `b`.
fn minus(a: &[Pid], b: &[Pid]) -> Vec<Pid> {
    let mut rest = b.to_vec();
    let mut out = Vec::new();
    for x in a {
        match rest.iter().position(|y| y == x) {
            Some(i) => {
                rest.swap_remove(i);
            }
            None => out.push(*x),
        }
    }
    out
}

/// Removes one copy of each of `pids` from `v`; returns those removed.
fn remove_each(v: &mut Vec<Pid>, pids: &[Pid]) -> Vec<Pid> {
    let mut removed = Vec::new();
    for p in pids {
        if let Some(i) = v.iter().position(|x| x == p) {
            v.remove(i);
            removed.push(*p);
        }
    }
    removed
}
