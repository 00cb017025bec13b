//! Cluster-wide unique names, as OTP's `global`, without a global lock.
//!
//! Each node runs one name server ([`start`]), registered on its node as
//! [`SERVER`]. Every server holds a copy of the whole table (name -> pid);
//! [`whereis_name`] and [`send`] read the local copy without a message.
//!
//! # Protocol
//!
//! There is no lock, no leader and no step that waits without a bound.
//! Each registration carries a *key*: `(stamp, pid)`, the stamp being the
//! registering server's wall clock in nanoseconds. Keys are totally
//! ordered and every server compares them the same way; **the smaller key
//! (the older registration) wins** every conflict.
//!
//! 1. **Hello.** At start and on every `NodeUp` a server sends `Hello`
//!    (the names it registered) to the server on that node. A server receiving a
//!    `Hello` from a server it does not know monitors it and answers with
//!    its own `Hello`; either way it *merges* the table it got (step 5).
//! 2. **Claim.** [`register_name`] asks the local server, which fails at
//!    once if the name is taken in its table, and otherwise sends
//!    `Claim { name, pid, key }` to every server it knows and waits for
//!    their votes (without blocking: it goes on serving meanwhile).
//! 3. **Vote.** A server votes *no* if the name is registered in its table
//!    to another pid, or if it has a claim of its own in flight for the
//!    name with a smaller key; otherwise *yes*. (Of two concurrent claims
//!    for one name, the claimer with the larger key gets a *no* from the
//!    other claimer, and the one with the smaller key a *yes*: exactly one
//!    wins.)
//! 4. **Commit.** All *yes*: the claimer enters the name in its table,
//!    sends `Commit` to every server it knows and answers `Ok`. A *no*:
//!    it answers `Taken`. A server that goes down (`NodeDown`, or its
//!    monitor fires) stops being waited for; a claim still short of votes
//!    after [`VOTE_TIMEOUT`] is committed anyway (step 5 settles any
//!    conflict this lets through). So a registration never waits longer
//!    than that, whatever the other nodes do.
//! 5. **Merge** (of a `Hello` or a `Commit`): for each `(name, pid, key)`,
//!    an absent name is added; the same pid keeps the smaller key; another
//!    pid is a conflict: the entry with the smaller key stays, and the
//!    server **on the loser's node** sends the loser an exit signal with
//!    reason `ExitReason::Other("global name conflict: NAME")` (see
//!    [`conflict_reason`]), as OTP's default `global:random_exit_name`
//!    does. Every server reaches the same table whatever the order of the
//!    merges, and each loser is told by exactly one server.
//! 6. **Removal.** [`unregister_name`], or the end of a registered process
//!    (the server that registered it monitors it), removes the name and
//!    sends `Unregister { name, pid }` to the other servers, which remove
//!    it if it still names that pid. A `NodeDown` removes every name held
//!    by a process of that node, and every name its server registered
//!    (nobody watches that holder any more).
//!
//! A server tells others only of the names it registered itself (each
//! entry names its server; a `Hello` carries only those, a `Commit` and an
//! `Unregister` come from it): a copy relayed by a third node could be one
//! its owner has removed meanwhile, and would never be corrected.
//!
//! After a partition each half keeps registering on its own; when it heals,
//! `NodeUp` starts step 1 and step 5 resolves the names both halves
//! registered.
//!
//! ```
//! use graft_otp::prelude::*;
//! use graft_otp::global;
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! node.run(|| {
//!     global::start().unwrap();
//!     global::register_name("boss", self_pid()).unwrap();
//!     assert_eq!(global::whereis_name("boss"), Some(self_pid()));
//!     global::send("boss", 5u8).unwrap();
//!     assert_eq!(expect::<u8>(), 5);
//!     assert!(global::register_name("boss", spawn(|| ())).is_err());
//!     global::unregister_name("boss").unwrap();
//!     assert_eq!(global::whereis_name("boss"), None);
//! }).unwrap();
//! ```

use graft::{
    demonitor_flush, monitor, monitor_nodes, nodes, receive, register, reply, request, self_pid,
    send_after, send_to, spawn, this_node, whereis, Alias, Error, ExitReason, Message, Mobile,
    MonitorRef, NodeDown, NodeId, NodeUp, Pid, ProcessDied,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

/// The name each node's global name server is registered under locally.
pub const SERVER: &str = "global_name_server";

/// How long a claim waits for the votes of servers that neither answer
/// nor go down before it is committed anyway.
pub const VOTE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a call to the local server waits (longer than a claim can).
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// The exit reason a process gets when it loses its global name to an
/// older registration as two partitions merge.
///
/// ```
/// assert_eq!(
///     graft_otp::global::conflict_reason("boss"),
///     graft_otp::graft::ExitReason::Other("global name conflict: boss".into())
/// );
/// ```
pub fn conflict_reason(name: &str) -> ExitReason {
    ExitReason::Other(format!("global name conflict: {name}"))
}

/// What can go wrong with a global call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GlobalError {
    /// The name is registered (to this pid), or another node's claim for it
    /// won.
    Taken(Option<Pid>),
    /// The name is not registered.
    NotRegistered(String),
    /// No global name server runs on this node ([`start`]).
    NoServer,
    /// The local server did not answer.
    Failed(String),
}

impl std::fmt::Display for GlobalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GlobalError::Taken(Some(p)) => write!(f, "the name is registered to {p}"),
            GlobalError::Taken(None) => f.write_str("another claim for the name won"),
            GlobalError::NotRegistered(n) => write!(f, "{n:?} is not registered"),
            GlobalError::NoServer => f.write_str("no global name server on this node"),
            GlobalError::Failed(why) => write!(f, "global call failed: {why}"),
        }
    }
}

impl std::error::Error for GlobalError {}

/// One registration: the pid, its stamp (the key is `(stamp, pid)`) and
/// the server that registered it (its owner: the only one that tells
/// others of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Mobile)]
struct Entry {
    pid: Pid,
    stamp: u64,
    server: Pid,
}

impl Entry {
    fn key(&self) -> (u64, Pid) {
        (self.stamp, self.pid)
    }
}

/// Between servers (see the module docs).
#[derive(Debug, Mobile)]
enum Peer {
    Hello {
        server: Pid,
        names: Vec<(String, Entry)>,
    },
    Claim {
        server: Pid,
        name: String,
        entry: Entry,
    },
    Vote {
        server: Pid,
        name: String,
        entry: Entry,
        /// `None`: yes; `Some(holder)`: no (the holder, if registered).
        no: Option<Option<Pid>>,
    },
    Commit {
        server: Pid,
        name: String,
        entry: Entry,
    },
    Unregister {
        name: String,
        pid: Pid,
    },
}

/// Calls to the local server.
#[derive(Debug, Mobile)]
enum Req {
    Register { name: String, pid: Pid, from: Alias },
    Unregister { name: String, from: Alias },
}

/// A claim's vote deadline.
#[derive(Debug, Mobile)]
struct VoteDeadline {
    name: String,
    entry: Entry,
}

type Table = HashMap<String, Entry>;
type Views = Mutex<HashMap<NodeId, Arc<RwLock<Table>>>>;

fn views() -> &'static Views {
    static V: OnceLock<Views> = OnceLock::new();
    V.get_or_init(Default::default)
}

fn view() -> Option<Arc<RwLock<Table>>> {
    views()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&this_node())
        .cloned()
}

/// Starts this node's global name server (registered as [`SERVER`]); it
/// finds the servers of the connected nodes, and of nodes as they connect.
///
/// # Errors
///
/// `Error::NameTaken` if one runs already.
pub fn start() -> Result<Pid, Error> {
    let table = Arc::new(RwLock::new(Table::new()));
    let t2 = table.clone();
    let pid = spawn(move || {
        let _ = graft::expect::<Go>();
        Server::new(t2).run()
    });
    if let Err(e) = register(SERVER, pid) {
        graft::exit(pid, ExitReason::Kill);
        return Err(e);
    }
    views()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(this_node(), table);
    graft::send(pid, Go);
    Ok(pid)
}

#[derive(Debug, Mobile)]
struct Go;

fn call<R: Message>(make: impl FnOnce(Alias) -> Req) -> Result<R, GlobalError> {
    let pid = whereis(SERVER).ok_or(GlobalError::NoServer)?;
    request(pid, make, Some(CALL_TIMEOUT)).map_err(|e| GlobalError::Failed(e.to_string()))
}

/// Registers `pid` (on any node) under `name` across the cluster
/// (`global:register_name/2`); returns once the connected nodes agreed
/// (see the module docs; at most [`VOTE_TIMEOUT`] or so).
///
/// # Errors
///
/// [`GlobalError::Taken`] if the name is registered or a concurrent claim
/// won; [`GlobalError::NoServer`].
pub fn register_name(name: &str, pid: Pid) -> Result<(), GlobalError> {
    let name = name.to_string();
    call::<Result<(), Option<Pid>>>(|from| Req::Register { name, pid, from })?
        .map_err(GlobalError::Taken)
}

/// Removes a global name (`global:unregister_name/1`).
///
/// # Errors
///
/// [`GlobalError::NotRegistered`], [`GlobalError::NoServer`].
pub fn unregister_name(name: &str) -> Result<(), GlobalError> {
    let n = name.to_string();
    if call::<bool>(|from| Req::Unregister { name: n, from })? {
        Ok(())
    } else {
        Err(GlobalError::NotRegistered(name.to_string()))
    }
}

/// The pid registered under `name`, as this node's table has it.
pub fn whereis_name(name: &str) -> Option<Pid> {
    view()?.read().ok()?.get(name).map(|e| e.pid)
}

/// Every registered name, sorted.
pub fn registered_names() -> Vec<String> {
    let mut v: Vec<String> = view()
        .and_then(|t| t.read().ok().map(|t| t.keys().cloned().collect()))
        .unwrap_or_default();
    v.sort();
    v
}

/// Sends `msg` to the process registered under `name`
/// (`global:send/2`); returns its pid.
///
/// # Errors
///
/// [`GlobalError::NotRegistered`].
pub fn send<M: Message>(name: &str, msg: M) -> Result<Pid, GlobalError> {
    let pid = whereis_name(name).ok_or_else(|| GlobalError::NotRegistered(name.into()))?;
    graft::send(pid, msg);
    Ok(pid)
}

/// A claim in flight.
struct Claim {
    entry: Entry,
    waiting: Vec<Pid>,
    from: Alias,
}

enum Ev {
    Peer(Peer),
    Req(Req),
    Up(NodeId),
    Down(NodeId),
    Died(ProcessDied),
    Deadline(VoteDeadline),
}

struct Server {
    me: Pid,
    table: Arc<RwLock<Table>>,
    /// Known servers and their monitors.
    peers: HashMap<Pid, MonitorRef>,
    claims: HashMap<String, Claim>,
    /// Registered processes this server monitors: pid -> (monitor, names).
    watched: HashMap<Pid, (MonitorRef, Vec<String>)>,
}

impl Server {
    fn new(table: Arc<RwLock<Table>>) -> Server {
        Server {
            me: self_pid(),
            table,
            peers: HashMap::new(),
            claims: HashMap::new(),
            watched: HashMap::new(),
        }
    }

    fn run(mut self) {
        monitor_nodes(true);
        for n in nodes() {
            self.hello(n);
        }
        loop {
            let ev = receive()
                .on(Ev::Peer)
                .on(Ev::Req)
                .on(|u: NodeUp| Ev::Up(u.node))
                .on(|d: NodeDown| Ev::Down(d.node))
                .on(Ev::Died)
                .on(Ev::Deadline)
                .wait();
            match ev {
                Ev::Peer(m) => self.peer(m),
                Ev::Req(r) => self.request(r),
                Ev::Up(n) => self.hello(n),
                Ev::Down(n) => self.node_down(n),
                Ev::Died(d) => self.died(d),
                Ev::Deadline(d) => {
                    if self.claims.get(&d.name).is_some_and(|c| c.entry == d.entry) {
                        log::warn!(
                            "global: claim for {:?}: no vote from {:?} in time; committing",
                            d.name,
                            self.claims[&d.name].waiting
                        );
                        self.commit(d.name);
                    }
                }
            }
        }
    }

    fn get(&self, name: &str) -> Option<Entry> {
        self.table.read().ok()?.get(name).copied()
    }

    fn set(&self, name: &str, e: Option<Entry>) {
        let mut t = self.table.write().unwrap_or_else(|e| e.into_inner());
        match e {
            Some(e) => t.insert(name.to_string(), e),
            None => t.remove(name),
        };
    }

    fn names(&self) -> Vec<(String, Entry)> {
        self.table
            .read()
            .map(|t| t.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default()
    }

    /// The names this server registered (a `Hello` carries only these: a
    /// copy of someone else's entry could be stale).
    fn own_names(&self) -> Vec<(String, Entry)> {
        let mut v = self.names();
        v.retain(|(_, e)| e.server == self.me);
        v
    }

    fn hello(&self, node: NodeId) {
        let _ = send_to(
            (SERVER, node),
            Peer::Hello {
                server: self.me,
                names: self.own_names(),
            },
        );
    }

    /// Sends to the server of every connected node, known or not yet (a
    /// server that has our `Hello` but whose own has not reached us must
    /// hear of a removal too). By name, as `Hello` goes, so that it
    /// follows the `Hello` in order.
    fn broadcast(&self, make: impl Fn() -> Peer) {
        for n in nodes() {
            let _ = send_to((SERVER, n), make());
        }
    }

    fn peer(&mut self, m: Peer) {
        match m {
            Peer::Hello { server, names } => {
                if server == self.me {
                    return;
                }
                if let std::collections::hash_map::Entry::Vacant(v) = self.peers.entry(server) {
                    v.insert(monitor(server));
                    graft::send(
                        server,
                        Peer::Hello {
                            server: self.me,
                            names: self.own_names(),
                        },
                    );
                }
                for (name, e) in names {
                    self.merge(&name, e);
                }
            }
            Peer::Claim {
                server,
                name,
                entry,
            } => {
                let no = match self.get(&name) {
                    Some(held) if held.pid != entry.pid => Some(Some(held.pid)),
                    _ => match self.claims.get(&name) {
                        Some(c) if c.entry.key() < entry.key() => Some(None),
                        _ => None,
                    },
                };
                graft::send(
                    server,
                    Peer::Vote {
                        server: self.me,
                        name,
                        entry,
                        no,
                    },
                );
            }
            Peer::Vote {
                server,
                name,
                entry,
                no,
            } => {
                let Some(c) = self.claims.get_mut(&name) else {
                    return;
                };
                if c.entry != entry {
                    return;
                }
                match no {
                    Some(holder) => {
                        let c = self.claims.remove(&name).expect("present");
                        reply(c.from, Err::<(), Option<Pid>>(holder));
                    }
                    None => {
                        c.waiting.retain(|p| *p != server);
                        if c.waiting.is_empty() {
                            self.commit(name);
                        }
                    }
                }
            }
            Peer::Commit { name, entry, .. } => self.merge(&name, entry),
            Peer::Unregister { name, pid } => {
                if self.get(&name).is_some_and(|e| e.pid == pid) {
                    self.set(&name, None);
                }
            }
        }
    }

    /// Step 5 of the module docs.
    fn merge(&mut self, name: &str, e: Entry) {
        match self.get(name) {
            None => self.set(name, Some(e)),
            Some(mine) if mine.pid == e.pid => {
                if e.key() < mine.key() {
                    self.set(name, Some(e));
                }
            }
            Some(mine) => {
                let (winner, loser) = if e.key() < mine.key() {
                    (e, mine)
                } else {
                    (mine, e)
                };
                self.set(name, Some(winner));
                if loser.pid.node() == this_node() {
                    log::info!(
                        "global: name {name:?} held by {} and {}: {} keeps it, {} exits",
                        winner.pid,
                        loser.pid,
                        winner.pid,
                        loser.pid
                    );
                    graft::exit(loser.pid, conflict_reason(name));
                }
            }
        }
    }

    fn request(&mut self, r: Req) {
        match r {
            Req::Register { name, pid, from } => {
                if let Some(held) = self.get(&name) {
                    let r = if held.pid == pid {
                        Ok(())
                    } else {
                        Err(Some(held.pid))
                    };
                    return reply(from, r);
                }
                if self.claims.contains_key(&name) {
                    return reply(from, Err::<(), Option<Pid>>(None));
                }
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                let entry = Entry {
                    pid,
                    stamp,
                    server: self.me,
                };
                let waiting: Vec<Pid> = self.peers.keys().copied().collect();
                for p in &waiting {
                    graft::send(
                        *p,
                        Peer::Claim {
                            server: self.me,
                            name: name.clone(),
                            entry,
                        },
                    );
                }
                let empty = waiting.is_empty();
                self.claims.insert(
                    name.clone(),
                    Claim {
                        entry,
                        waiting,
                        from,
                    },
                );
                if empty {
                    self.commit(name);
                } else {
                    send_after(
                        VOTE_TIMEOUT,
                        self.me,
                        VoteDeadline {
                            name: name.clone(),
                            entry,
                        },
                    );
                }
            }
            Req::Unregister { name, from } => match self.get(&name) {
                Some(e) => {
                    self.set(&name, None);
                    self.unwatch(e.pid, &name);
                    self.broadcast(|| Peer::Unregister {
                        name: name.clone(),
                        pid: e.pid,
                    });
                    reply(from, true);
                }
                None => reply(from, false),
            },
        }
    }

    fn commit(&mut self, name: String) {
        let Some(c) = self.claims.remove(&name) else {
            return;
        };
        // A merge meanwhile may have brought an older holder.
        if let Some(held) = self.get(&name) {
            if held.pid != c.entry.pid && held.key() < c.entry.key() {
                return reply(c.from, Err::<(), Option<Pid>>(Some(held.pid)));
            }
        }
        self.set(&name, Some(c.entry));
        let w = self
            .watched
            .entry(c.entry.pid)
            .or_insert_with(|| (monitor(c.entry.pid), Vec::new()));
        w.1.push(name.clone());
        self.broadcast(|| Peer::Commit {
            server: self.me,
            name: name.clone(),
            entry: c.entry,
        });
        reply(c.from, Ok::<(), Option<Pid>>(()));
    }

    fn unwatch(&mut self, pid: Pid, name: &str) {
        if let Some(w) = self.watched.get_mut(&pid) {
            w.1.retain(|n| n != name);
            if w.1.is_empty() {
                let (m, _) = self.watched.remove(&pid).expect("present");
                demonitor_flush(m);
            }
        }
    }

    fn node_down(&mut self, node: NodeId) {
        let gone: Vec<Pid> = self
            .peers
            .keys()
            .filter(|p| p.node() == node)
            .copied()
            .collect();
        for p in gone {
            if let Some(m) = self.peers.remove(&p) {
                demonitor_flush(m);
            }
            self.not_waiting_for(p);
        }
        let lost: Vec<(String, Entry)> = self
            .names()
            .into_iter()
            .filter(|(_, e)| e.pid.node() == node || e.server.node() == node)
            .collect();
        for (name, e) in lost {
            self.set(&name, None);
            self.unwatch(e.pid, &name);
        }
    }

    /// A server went: its votes are no longer waited for.
    fn not_waiting_for(&mut self, server: Pid) {
        let ready: Vec<String> = self
            .claims
            .iter_mut()
            .filter_map(|(n, c)| {
                let before = c.waiting.len();
                c.waiting.retain(|p| *p != server);
                (before != c.waiting.len() && c.waiting.is_empty()).then(|| n.clone())
            })
            .collect();
        for n in ready {
            self.commit(n);
        }
    }

    fn died(&mut self, d: ProcessDied) {
        if self.peers.get(&d.pid) == Some(&d.monitor) {
            self.peers.remove(&d.pid);
            self.not_waiting_for(d.pid);
            return;
        }
        if self.watched.get(&d.pid).map(|w| w.0) == Some(d.monitor) {
            let (_, names) = self.watched.remove(&d.pid).expect("present");
            for name in names {
                if self.get(&name).is_some_and(|e| e.pid == d.pid) {
                    self.set(&name, None);
                }
                self.broadcast(|| Peer::Unregister {
                    name: name.clone(),
                    pid: d.pid,
                });
            }
        }
    }
}
