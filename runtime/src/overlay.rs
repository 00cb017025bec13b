//! The partial-mesh overlay ([`Topology::Partial`]): HyParView membership
//! with SWIM-style failure detection.
//!
//! # Views
//!
//! Each node keeps an *active view* of about `log2(N) + 1` nodes it holds a
//! connection to (HyParView, Leitão et al., DSN'07), and a larger *passive
//! view* of nodes it knows and may promote when an active neighbour goes.
//! A node joins through any member (a seed of [`discovery`](crate::discovery)
//! or [`Node::connect`](crate::Node::connect)): it sends `Join`, the contact
//! takes it into its active view and starts a `ForwardJoin` random walk on
//! each of its other neighbours (active random walk length 6, passive 3);
//! where a walk ends the node there asks the joiner to be its neighbour. A
//! node below its target asks a passive node (`Neighbor`, with priority
//! when its active view is empty: such a request is never refused). Every
//! few seconds a `Shuffle` walk exchanges a sample of both views, refreshing
//! the passive view.
//!
//! # Membership
//!
//! Every node knows every member's name, address and *incarnation* (SWIM):
//! a joiner gets the contact's whole list, news (a member up, a member
//! down) is flooded over the active view (a node forwards only what changed
//! its own list, so a flood ends), and each node pushes its whole list to
//! one active neighbour now and then (anti-entropy). A newer incarnation
//! wins; at equal incarnations "down" wins. A node told that it is down
//! answers with a newer incarnation, so a false suspicion (a partition that
//! healed) is undone. [`nodes`](crate::nodes) lists the members that are up.
//!
//! # Failure detection
//!
//! The connection to an active neighbour is watched by the transport (a
//! closed socket at once, a silent one after three heartbeat ticks). When
//! one is lost, the node asks `probes` (default 3) other neighbours to reach
//! the suspect (SWIM's indirect probe); if none can within `probe_timeout`
//! (default 1 s; at once when all have answered no), the suspect is declared
//! down and the notice is flooded. Each node also checks one random member
//! outside its active view every `probe_every` (default 1 s) by reaching it
//! directly, which is how a member that no neighbour watches (the far side
//! of a partition) is found out. A member declared down is disconnected
//! wherever a connection to it is left, so every monitor and link on its
//! processes fires with `NoConnection` on every node.
//!
//! Bound, for a node that halts: a neighbour sees the loss at once (socket
//! closed) or after `3 × heartbeat`, then at most `probe_timeout`, then the
//! flood (one hop per active link, about a millisecond each on a LAN):
//! `3 × heartbeat + probe_timeout + diameter × hop`, 4 s and a little with
//! the defaults (1 s tick, 1 s probe timeout).
//!
//! # Messages to nodes outside the active view
//!
//! They go over a connection opened on demand (the auto-connect that
//! [`AutoConnect`](crate::AutoConnect) already does, for monitors and links
//! too in this topology), closed again when it has carried nothing for
//! `idle_close` (default 5 s) and nothing waits on it (no monitor, link or
//! pending request across it). Not routed through the overlay: one
//! connection per pair keeps Erlang's per-pair order with the existing send
//! path, where a routed message would need per-hop forwarding, its own
//! order and loss rules and a slower path for every remote message.

use crate::dist::Ctl;
use crate::node::NodeShared;
use crate::pid::NodeId;
use ahash::AHashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How the nodes of a cluster connect.
///
/// ```
/// let cfg = graft::NodeConfig::new("127.0.0.1:0").topology(graft::Topology::Partial);
/// # let _ = cfg;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Topology {
    /// Every node connects to every other (Erlang's default; the default).
    #[default]
    FullMesh,
    /// Each node holds O(log N) connections (see [`overlay`](crate::overlay)).
    Partial,
}

/// Tuning of [`Topology::Partial`].
///
/// ```
/// use std::time::Duration;
/// let o = graft::overlay::OverlayConfig::default()
///     .active_size(4)
///     .probe_timeout(Duration::from_millis(500));
/// let cfg = graft::NodeConfig::new("127.0.0.1:0").overlay(o);
/// # let _ = cfg;
/// ```
#[derive(Clone, Debug)]
pub struct OverlayConfig {
    active: Option<usize>,
    passive: usize,
    probes: usize,
    probe_timeout: Duration,
    probe_every: Duration,
    idle_close: Duration,
    shuffle_every: Duration,
    sync_every: Duration,
    tick: Duration,
}

impl Default for OverlayConfig {
    fn default() -> OverlayConfig {
        OverlayConfig {
            active: None,
            passive: 30,
            probes: 3,
            probe_timeout: Duration::from_secs(1),
            probe_every: Duration::from_secs(1),
            idle_close: Duration::from_secs(5),
            shuffle_every: Duration::from_secs(2),
            sync_every: Duration::from_secs(3),
            tick: Duration::from_millis(50),
        }
    }
}

impl OverlayConfig {
    /// The active view's size (default `floor(log2(N)) + 1` for the N
    /// members known, at least 2).
    pub fn active_size(mut self, n: usize) -> OverlayConfig {
        self.active = Some(n.max(1));
        self
    }
    /// The passive view's size (default 30).
    pub fn passive_size(mut self, n: usize) -> OverlayConfig {
        self.passive = n;
        self
    }
    /// Neighbours asked to reach a suspect before it is declared down
    /// (default 3).
    pub fn probes(mut self, k: usize) -> OverlayConfig {
        self.probes = k;
        self
    }
    /// How long the indirect probe of a suspect may take (default 1 s).
    pub fn probe_timeout(mut self, d: Duration) -> OverlayConfig {
        self.probe_timeout = d;
        self
    }
    /// How often one random member outside the active view is checked
    /// directly (default 1 s).
    pub fn probe_every(mut self, d: Duration) -> OverlayConfig {
        self.probe_every = d.max(Duration::from_millis(10));
        self
    }
    /// How long an on-demand connection may carry nothing before it is
    /// closed (default 5 s).
    pub fn idle_close(mut self, d: Duration) -> OverlayConfig {
        self.idle_close = d;
        self
    }
}

/// A member as it travels.
#[derive(Clone, Debug, PartialEq, Eq, graft_derive::Mobile)]
pub(crate) struct Member {
    name: String,
    addr: String,
    inc: u64,
    up: bool,
}

/// Overlay messages (carried in `Ctl::Overlay`).
#[derive(Debug, graft_derive::Mobile)]
pub(crate) enum Msg {
    Join {
        me: Member,
    },
    ForwardJoin {
        joiner: Member,
        ttl: u32,
    },
    Neighbor {
        me: Member,
        high: bool,
    },
    NeighborReply {
        accepted: bool,
    },
    Disconnect,
    Shuffle {
        origin: Member,
        sample: Vec<Member>,
        ttl: u32,
    },
    ShuffleReply {
        sample: Vec<Member>,
    },
    Gossip {
        members: Vec<Member>,
    },
    Sync {
        members: Vec<Member>,
        reply: bool,
    },
    ProbeReq {
        suspect: Member,
    },
    ProbeAck {
        suspect: String,
        alive: bool,
    },
}

/// Active random walk length (HyParView's ARWL).
const ARWL: u32 = 6;
/// Passive random walk length (PRWL).
const PRWL: u32 = 3;
/// A `Neighbor` request unanswered this long is given up.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a connection the overlay opened for itself may stay silent.
const BRIEF_IDLE: Duration = Duration::from_millis(500);

/// What a node knows of a member.
#[derive(Clone, Debug)]
struct Known {
    name: String,
    addr: SocketAddr,
    inc: u64,
    up: bool,
}

impl Known {
    fn wire(&self) -> Member {
        Member {
            name: self.name.clone(),
            addr: self.addr.to_string(),
            inc: self.inc,
            up: self.up,
        }
    }
}

#[derive(Debug)]
struct Suspect {
    deadline: Instant,
    waiting: usize,
    /// Only this node's own direct check so far: a failure leads to the
    /// indirect probe, not to a verdict.
    direct: bool,
}

#[derive(Debug)]
struct State {
    me: Member,
    me_id: NodeId,
    members: AHashMap<NodeId, Known>,
    active: Vec<NodeId>,
    passive: Vec<NodeId>,
    asking: AHashMap<NodeId, Instant>,
    suspects: AHashMap<NodeId, Suspect>,
    /// Messages waiting for an on-demand connect.
    connecting: AHashMap<NodeId, Vec<Msg>>,
    /// Frames counted on an on-demand connection, and since when.
    usage: AHashMap<NodeId, (u64, Instant)>,
    /// On-demand connections the overlay opened for itself (a probe, a
    /// walk's answer): closed after [`BRIEF_IDLE`] of silence.
    brief: ahash::AHashSet<NodeId>,
    rng: u64,
    last_shuffle: Instant,
    last_sync: Instant,
    last_probe: Instant,
}

/// Side effects gathered under the lock, done after it.
#[derive(Default)]
struct Out {
    send: Vec<(NodeId, Msg)>,
    disconnect: Vec<NodeId>,
    up: Vec<(NodeId, String, SocketAddr)>,
    down: Vec<NodeId>,
    /// (asker, suspect): reach the suspect, answer the asker.
    probe: Vec<(Option<NodeId>, Member)>,
}

/// The overlay state of one node (in `NetMon`).
#[derive(Debug)]
pub(crate) struct Overlay {
    cfg: OverlayConfig,
    st: parking_lot::Mutex<State>,
}

/// A node's view of the overlay ([`Node::overlay_view`](crate::Node::overlay_view)).
///
/// ```
/// use graft::*;
/// let n = Node::start(NodeConfig::new("127.0.0.1:0").topology(Topology::Partial)).unwrap();
/// let v = n.overlay_view().unwrap();
/// assert!(v.active.is_empty() && v.members.is_empty() && v.connections == 0);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OverlayView {
    /// The active view.
    pub active: Vec<NodeId>,
    /// The passive view.
    pub passive: Vec<NodeId>,
    /// The members that are up (this node not included).
    pub members: Vec<NodeId>,
    /// Connections held now (active and on-demand).
    pub connections: usize,
}

fn now_inc() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64)
}

impl State {
    fn rand(&mut self, n: usize) -> usize {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }

    fn pick(&mut self, from: &[NodeId], not: &[NodeId]) -> Option<NodeId> {
        let c: Vec<NodeId> = from.iter().copied().filter(|x| !not.contains(x)).collect();
        if c.is_empty() {
            return None;
        }
        let i = self.rand(c.len());
        Some(c[i])
    }

    fn up_count(&self) -> usize {
        self.members.values().filter(|k| k.up).count()
    }

    fn target(&self, cfg: &OverlayConfig) -> usize {
        cfg.active.unwrap_or_else(|| {
            let n = self.up_count() + 1;
            ((usize::BITS - 1 - n.leading_zeros()) as usize + 1).max(2)
        })
    }

    fn is_up(&self, id: NodeId) -> bool {
        self.members.get(&id).is_some_and(|k| k.up)
    }

    fn all(&self) -> Vec<Member> {
        let mut v: Vec<Member> = self.members.values().map(Known::wire).collect();
        v.push(self.me.clone());
        v
    }

    fn add_passive(&mut self, id: NodeId, cfg: &OverlayConfig) {
        if id == self.me_id || self.active.contains(&id) || self.passive.contains(&id) {
            return;
        }
        if !self.is_up(id) {
            return;
        }
        if self.passive.len() >= cfg.passive.max(1) {
            let i = self.rand(self.passive.len());
            self.passive.swap_remove(i);
        }
        self.passive.push(id);
    }

    /// Takes `id` into the active view, dropping a random neighbour (told
    /// with `Disconnect`) if it is over the target.
    fn add_active(&mut self, id: NodeId, cfg: &OverlayConfig, out: &mut Out) {
        if id == self.me_id || self.active.contains(&id) {
            return;
        }
        self.passive.retain(|p| *p != id);
        self.asking.remove(&id);
        self.brief.remove(&id);
        if self.active.len() >= self.target(cfg) {
            let i = self.rand(self.active.len());
            let old = self.active.swap_remove(i);
            out.send.push((old, Msg::Disconnect));
            self.brief.insert(old);
            self.add_passive(old, cfg);
        }
        self.active.push(id);
    }

    fn drop_member(&mut self, id: NodeId) {
        self.active.retain(|a| *a != id);
        self.passive.retain(|a| *a != id);
        self.asking.remove(&id);
        self.suspects.remove(&id);
    }

    /// Merges one record; `true` if it changed this node's list (and so is
    /// news to flood). `connected` says whether `id` is held up by a live
    /// connection of the active view.
    fn merge(&mut self, m: &Member, connected: &dyn Fn(NodeId) -> bool, out: &mut Out) -> bool {
        let id = NodeId::from_name(&m.name);
        if id == self.me_id {
            if !m.up && m.inc >= self.me.inc {
                // Refute: a newer incarnation, flooded.
                self.me.inc = m.inc + 1;
                let me = self.me.clone();
                for a in &self.active {
                    out.send.push((
                        *a,
                        Msg::Gossip {
                            members: vec![me.clone()],
                        },
                    ));
                }
            }
            return false;
        }
        let Ok(addr) = m.addr.parse::<SocketAddr>() else {
            return false;
        };
        let old = self.members.get(&id).cloned();
        let newer = match &old {
            None => true,
            Some(k) => m.inc > k.inc || (m.inc == k.inc && k.up && !m.up),
        };
        if !newer {
            return false;
        }
        if !m.up && connected(id) {
            // A node this one holds a live connection to (its heartbeats
            // answer) said to be down: tell it, so it refutes. (A later
            // anti-entropy push applies the claim if the connection goes.)
            out.send.push((
                id,
                Msg::Gossip {
                    members: vec![m.clone()],
                },
            ));
            return false;
        }
        let was_up = old.as_ref().is_some_and(|k| k.up);
        self.members.insert(
            id,
            Known {
                name: m.name.clone(),
                addr,
                inc: m.inc,
                up: m.up,
            },
        );
        if m.up && !was_up {
            out.up.push((id, m.name.clone(), addr));
        } else if !m.up && was_up {
            self.drop_member(id);
            out.down.push(id);
            out.disconnect.push(id);
        }
        true
    }

    fn flood(&self, news: Vec<Member>, except: Option<NodeId>, out: &mut Out) {
        if news.is_empty() {
            return;
        }
        for a in &self.active {
            if Some(*a) != except {
                out.send.push((
                    *a,
                    Msg::Gossip {
                        members: news.clone(),
                    },
                ));
            }
        }
    }

    fn declare_down(&mut self, id: NodeId, out: &mut Out) {
        self.suspects.remove(&id);
        let Some(k) = self.members.get(&id).cloned() else {
            return;
        };
        if !k.up {
            return;
        }
        let mut rec = k.wire();
        rec.up = false;
        self.merge(&rec, &|_| false, out);
        self.flood(vec![rec], None, out);
    }

    /// An active neighbour's connection went: ask others to reach it.
    fn suspect(&mut self, id: NodeId, cfg: &OverlayConfig, out: &mut Out) {
        let Some(k) = self.members.get(&id).cloned() else {
            return;
        };
        if !k.up || self.suspects.contains_key(&id) {
            return;
        }
        let mut askers = Vec::new();
        let mut pool: Vec<NodeId> = self.active.clone();
        while askers.len() < cfg.probes && !pool.is_empty() {
            let i = self.rand(pool.len());
            askers.push(pool.swap_remove(i));
        }
        // This node tries too (answering itself).
        out.probe.push((None, k.wire()));
        for a in &askers {
            out.send.push((*a, Msg::ProbeReq { suspect: k.wire() }));
        }
        self.suspects.insert(
            id,
            Suspect {
                deadline: Instant::now() + cfg.probe_timeout,
                waiting: askers.len() + 1,
                direct: false,
            },
        );
    }

    fn probe_answer(&mut self, sid: NodeId, alive: bool, cfg: &OverlayConfig, out: &mut Out) {
        let Some(s) = self.suspects.get_mut(&sid) else {
            return;
        };
        if alive {
            self.suspects.remove(&sid);
            self.add_passive(sid, cfg);
            return;
        }
        if s.direct {
            self.suspects.remove(&sid);
            self.suspect(sid, cfg, out);
            return;
        }
        s.waiting = s.waiting.saturating_sub(1);
        if s.waiting == 0 {
            self.declare_down(sid, out);
        }
    }
}

impl Overlay {
    pub(crate) fn new(cfg: OverlayConfig, name: &str) -> Overlay {
        let now = Instant::now();
        let me_id = NodeId::from_name(name);
        Overlay {
            cfg,
            st: parking_lot::Mutex::new(State {
                me: Member {
                    name: name.to_string(),
                    addr: String::new(),
                    inc: now_inc(),
                    up: true,
                },
                me_id,
                members: AHashMap::new(),
                active: Vec::new(),
                passive: Vec::new(),
                asking: AHashMap::new(),
                suspects: AHashMap::new(),
                connecting: AHashMap::new(),
                usage: AHashMap::new(),
                brief: Default::default(),
                rng: me_id.0 | 1,
                last_shuffle: now,
                last_sync: now,
                last_probe: now,
            }),
        }
    }

    /// The address this node is reached at (set once listening).
    pub(crate) fn set_addr(&self, addr: SocketAddr) {
        self.st.lock().me.addr = addr.to_string();
    }

    /// A connection the overlay opened for itself (see [`BRIEF_IDLE`]),
    /// unless it has become an active one meanwhile.
    fn note_brief(&self, id: NodeId) {
        let mut st = self.st.lock();
        if !st.active.contains(&id) && !st.asking.contains_key(&id) {
            st.brief.insert(id);
        }
    }

    /// The members that are up, sorted.
    pub(crate) fn members(&self) -> Vec<NodeId> {
        let st = self.st.lock();
        let mut v: Vec<NodeId> = st
            .members
            .iter()
            .filter(|(_, k)| k.up)
            .map(|(id, _)| *id)
            .collect();
        v.sort();
        v
    }

    pub(crate) fn is_member(&self, id: NodeId) -> bool {
        self.st.lock().is_up(id)
    }

    pub(crate) fn has_active(&self) -> bool {
        !self.st.lock().active.is_empty()
    }

    pub(crate) fn view(&self, n: &NodeShared) -> OverlayView {
        let st = self.st.lock();
        let mut members: Vec<NodeId> = st
            .members
            .iter()
            .filter(|(_, k)| k.up)
            .map(|(id, _)| *id)
            .collect();
        members.sort();
        OverlayView {
            active: st.active.clone(),
            passive: st.passive.clone(),
            members,
            connections: n.dist.nodes().len(),
        }
    }

    fn with(&self, n: &Arc<NodeShared>, f: impl FnOnce(&mut State, &OverlayConfig, &mut Out)) {
        let mut out = Out::default();
        {
            let mut st = self.st.lock();
            f(&mut st, &self.cfg, &mut out);
        }
        self.apply(n, out);
    }

    /// Joins the cluster through `contact` (connected), unless this node
    /// already has neighbours.
    pub(crate) fn join(&self, n: &Arc<NodeShared>, contact: NodeId) {
        self.with(n, |st, cfg, out| {
            if !st.active.is_empty() || contact == st.me_id {
                return;
            }
            st.add_active(contact, cfg, out);
            out.send.push((contact, Msg::Join { me: st.me.clone() }));
        });
    }

    /// A connection came up.
    pub(crate) fn peer_up(&self, id: NodeId) {
        self.st.lock().usage.insert(id, (0, Instant::now()));
    }

    /// A connection went (run by the node loop).
    pub(crate) fn conn_lost(&self, n: &Arc<NodeShared>, id: NodeId) {
        self.with(n, |st, cfg, out| {
            st.usage.remove(&id);
            st.brief.remove(&id);
            st.asking.remove(&id);
            if st.active.contains(&id) {
                st.active.retain(|a| *a != id);
                st.suspect(id, cfg, out);
            }
        });
    }

    /// An overlay message from `from` (name and listen address of the
    /// connection).
    pub(crate) fn on_msg(
        &self,
        n: &Arc<NodeShared>,
        from: NodeId,
        from_name: &str,
        from_addr: SocketAddr,
        msg: Msg,
    ) {
        let connected = |id: NodeId| n.dist.connection(id, None).is_some();
        self.with(n, |st, cfg, out| {
            if from == st.me_id {
                return;
            }
            match st.members.get(&from) {
                None => {
                    let m = Member {
                        name: from_name.to_string(),
                        addr: from_addr.to_string(),
                        inc: 0,
                        up: true,
                    };
                    if st.merge(&m, &connected, out) {
                        st.flood(vec![m], Some(from), out);
                    }
                }
                Some(k) if !k.up => {
                    // Down to us: tell it, so it refutes; talk once it has.
                    out.send.push((
                        from,
                        Msg::Gossip {
                            members: vec![k.wire()],
                        },
                    ));
                    if let Msg::Neighbor { .. } = msg {
                        out.send
                            .push((from, Msg::NeighborReply { accepted: false }));
                    }
                    if !matches!(msg, Msg::Gossip { .. } | Msg::Sync { .. }) {
                        return;
                    }
                }
                Some(_) => {}
            }
            self.handle(st, cfg, out, from, msg, &connected);
        });
    }

    fn handle(
        &self,
        st: &mut State,
        cfg: &OverlayConfig,
        out: &mut Out,
        from: NodeId,
        msg: Msg,
        connected: &dyn Fn(NodeId) -> bool,
    ) {
        let mut news = Vec::new();
        let mut merge = |st: &mut State, out: &mut Out, m: &Member| {
            if st.merge(m, connected, out) {
                news.push(m.clone());
            }
        };
        match msg {
            Msg::Join { me } => {
                merge(st, out, &me);
                st.add_active(from, cfg, out);
                out.send.push((
                    from,
                    Msg::Sync {
                        members: st.all(),
                        reply: false,
                    },
                ));
                for a in st.active.clone() {
                    if a != from {
                        out.send.push((
                            a,
                            Msg::ForwardJoin {
                                joiner: me.clone(),
                                ttl: ARWL,
                            },
                        ));
                    }
                }
            }
            Msg::ForwardJoin { joiner, ttl } => {
                merge(st, out, &joiner);
                let j = NodeId::from_name(&joiner.name);
                if j != st.me_id && st.is_up(j) {
                    let next = if ttl == 0 || st.active.len() <= 1 {
                        None
                    } else {
                        let active = st.active.clone();
                        st.pick(&active, &[from, j])
                    };
                    match next {
                        Some(to) => {
                            if ttl == PRWL {
                                st.add_passive(j, cfg);
                            }
                            out.send.push((
                                to,
                                Msg::ForwardJoin {
                                    joiner,
                                    ttl: ttl - 1,
                                },
                            ));
                        }
                        None if !st.active.contains(&j) && !st.asking.contains_key(&j) => {
                            st.asking.insert(j, Instant::now());
                            out.send.push((
                                j,
                                Msg::Neighbor {
                                    me: st.me.clone(),
                                    high: true,
                                },
                            ));
                        }
                        None => {}
                    }
                }
            }
            Msg::Neighbor { me, high } => {
                merge(st, out, &me);
                let accepted =
                    st.active.contains(&from) || high || st.active.len() < st.target(cfg);
                if accepted {
                    st.add_active(from, cfg, out);
                } else {
                    st.brief.insert(from);
                }
                out.send.push((from, Msg::NeighborReply { accepted }));
            }
            Msg::NeighborReply { accepted } => {
                st.asking.remove(&from);
                if accepted {
                    st.add_active(from, cfg, out);
                } else {
                    st.brief.insert(from);
                    st.add_passive(from, cfg);
                }
            }
            Msg::Disconnect => {
                st.active.retain(|a| *a != from);
                st.brief.insert(from);
                st.add_passive(from, cfg);
            }
            Msg::Shuffle {
                origin,
                sample,
                ttl,
            } => {
                merge(st, out, &origin);
                for m in &sample {
                    merge(st, out, m);
                }
                let o = NodeId::from_name(&origin.name);
                let active = st.active.clone();
                let next = if ttl > 0 && active.len() > 1 {
                    st.pick(&active, &[from, o])
                } else {
                    None
                };
                match next {
                    Some(to) => out.send.push((
                        to,
                        Msg::Shuffle {
                            origin,
                            sample,
                            ttl: ttl - 1,
                        },
                    )),
                    None if o != st.me_id => {
                        let mut reply = Vec::new();
                        let mut pool = st.passive.clone();
                        while reply.len() < sample.len() && !pool.is_empty() {
                            let i = st.rand(pool.len());
                            let id = pool.swap_remove(i);
                            if let Some(k) = st.members.get(&id) {
                                reply.push(k.wire());
                            }
                        }
                        out.send.push((o, Msg::ShuffleReply { sample: reply }));
                        for m in &sample {
                            st.add_passive(NodeId::from_name(&m.name), cfg);
                        }
                    }
                    None => {}
                }
            }
            Msg::ShuffleReply { sample } => {
                for m in &sample {
                    merge(st, out, m);
                    st.add_passive(NodeId::from_name(&m.name), cfg);
                }
            }
            Msg::Gossip { members } => {
                for m in &members {
                    merge(st, out, m);
                }
            }
            Msg::Sync { members, reply } => {
                for m in &members {
                    merge(st, out, m);
                }
                if reply {
                    out.send.push((
                        from,
                        Msg::Sync {
                            members: st.all(),
                            reply: false,
                        },
                    ));
                }
            }
            Msg::ProbeReq { suspect } => out.probe.push((Some(from), suspect)),
            Msg::ProbeAck { suspect, alive } => {
                st.probe_answer(NodeId::from_name(&suspect), alive, cfg, out)
            }
        }
        st.flood(news, Some(from), out);
    }

    /// The periodic work (the overlay thread).
    fn tick(&self, n: &Arc<NodeShared>) {
        let usage: Vec<(NodeId, u64, bool)> = n
            .dist
            .nodes()
            .into_iter()
            .map(|id| {
                let (frames, queued) = n.dist.usage(id);
                (id, frames + queued as u64, n.dist.watched(id))
            })
            .collect();
        self.with(n, |st, cfg, out| {
            let now = Instant::now();
            let expired: Vec<NodeId> = st
                .suspects
                .iter()
                .filter(|(_, s)| s.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            for id in expired {
                if st.suspects.get(&id).is_some_and(|s| s.direct) {
                    st.suspects.remove(&id);
                    st.suspect(id, cfg, out);
                } else {
                    st.declare_down(id, out);
                }
            }
            st.asking
                .retain(|_, t| now.duration_since(*t) < ASK_TIMEOUT);
            // Fill the active view.
            let target = st.target(cfg);
            if st.active.len() + st.asking.len() < target {
                let busy: Vec<NodeId> = st.active.iter().chain(st.asking.keys()).copied().collect();
                let passive = st.passive.clone();
                let pick = st.pick(&passive, &busy).or_else(|| {
                    let up: Vec<NodeId> = st
                        .members
                        .iter()
                        .filter(|(_, k)| k.up)
                        .map(|(id, _)| *id)
                        .collect();
                    st.pick(&up, &busy)
                });
                if let Some(p) = pick {
                    st.asking.insert(p, now);
                    out.send.push((
                        p,
                        Msg::Neighbor {
                            me: st.me.clone(),
                            high: st.active.is_empty(),
                        },
                    ));
                }
            }
            if st.active.len() > target + 1 {
                let i = st.rand(st.active.len());
                let old = st.active.swap_remove(i);
                out.send.push((old, Msg::Disconnect));
                st.brief.insert(old);
                st.add_passive(old, cfg);
            }
            let active = st.active.clone();
            if now.duration_since(st.last_shuffle) >= cfg.shuffle_every {
                st.last_shuffle = now;
                if let Some(to) = st.pick(&active, &[]) {
                    let mut sample = vec![st.me.clone()];
                    let mut pool: Vec<NodeId> = active.iter().chain(&st.passive).copied().collect();
                    while sample.len() < 8 && !pool.is_empty() {
                        let i = st.rand(pool.len());
                        let id = pool.swap_remove(i);
                        if let Some(k) = st.members.get(&id) {
                            sample.push(k.wire());
                        }
                    }
                    out.send.push((
                        to,
                        Msg::Shuffle {
                            origin: st.me.clone(),
                            sample,
                            ttl: PRWL,
                        },
                    ));
                }
            }
            if now.duration_since(st.last_sync) >= cfg.sync_every {
                st.last_sync = now;
                if let Some(to) = st.pick(&active, &[]) {
                    out.send.push((
                        to,
                        Msg::Sync {
                            members: st.all(),
                            reply: true,
                        },
                    ));
                }
            }
            if now.duration_since(st.last_probe) >= cfg.probe_every {
                st.last_probe = now;
                // One random member outside the active view, up or down: an
                // up one unreachable is suspected; a down one reached is
                // told (it refutes, and a healed partition joins again).
                let all: Vec<NodeId> = st.members.keys().copied().collect();
                if let Some(id) = st.pick(&all, &active) {
                    let k = st.members[&id].clone();
                    if k.up {
                        out.probe.push((None, k.wire()));
                        st.suspects.entry(id).or_insert(Suspect {
                            deadline: now + cfg.probe_timeout,
                            waiting: 1,
                            direct: true,
                        });
                    } else {
                        out.send.push((
                            id,
                            Msg::Sync {
                                members: st.all(),
                                reply: true,
                            },
                        ));
                    }
                }
            }
            // Close idle on-demand connections.
            for (id, count, watched) in &usage {
                if st.active.contains(id)
                    || st.asking.contains_key(id)
                    || st.connecting.contains_key(id)
                    || st.suspects.contains_key(id)
                {
                    st.usage.insert(*id, (*count, now));
                    continue;
                }
                let limit = if st.brief.contains(id) {
                    BRIEF_IDLE
                } else {
                    cfg.idle_close
                };
                let e = st.usage.entry(*id).or_insert((*count, now));
                if e.0 != *count || *watched {
                    *e = (*count, now);
                } else if now.duration_since(e.1) >= limit {
                    out.disconnect.push(*id);
                    *e = (*count, now);
                    st.brief.remove(id);
                }
            }
        });
    }

    /// Sends, disconnects, announces and probes what `out` gathered.
    fn apply(&self, n: &Arc<NodeShared>, out: Out) {
        for (id, name, addr) in out.up {
            n.dist.mon.member_up(n, id, &name, addr);
        }
        for id in out.down {
            n.dist.mon.member_down(n, id);
        }
        for id in out.disconnect {
            n.dist.disconnect(id);
        }
        for (to, msg) in out.send {
            self.send(n, to, msg);
        }
        for (asker, suspect) in out.probe {
            self.probe(n, asker, suspect);
        }
    }

    /// Sends `msg` to `to`, over a connection opened on demand if needed.
    fn send(&self, n: &Arc<NodeShared>, to: NodeId, msg: Msg) {
        let ctl = Ctl::Overlay { msg };
        if n.dist.send_ctl(to, &ctl).is_ok() {
            return;
        }
        let Ctl::Overlay { msg } = ctl else {
            return;
        };
        let addr = {
            let mut st = self.st.lock();
            let Some(addr) = st.members.get(&to).map(|k| k.addr) else {
                return;
            };
            if let Some(q) = st.connecting.get_mut(&to) {
                q.push(msg);
                return;
            }
            st.connecting.insert(to, vec![msg]);
            addr
        };
        let weak = Arc::downgrade(n);
        n.blocking.submit(Box::new(move || {
            let Some(n) = weak.upgrade() else { return };
            let Some(o) = n.dist.mon.overlay() else {
                return;
            };
            if !crate::netmon::partitioned(n.id, to)
                && !n.stopping.load(crate::loom::Ordering::Relaxed)
                && crate::node::connect_transport(&n, addr).is_ok()
            {
                o.note_brief(to);
            }
            let q = o.st.lock().connecting.remove(&to).unwrap_or_default();
            for msg in q {
                let _ = n.dist.send_ctl(to, &Ctl::Overlay { msg });
            }
        }));
    }

    /// Tries to reach `suspect`; answers `asker` (or this node).
    fn probe(&self, n: &Arc<NodeShared>, asker: Option<NodeId>, suspect: Member) {
        let sid = NodeId::from_name(&suspect.name);
        let Ok(addr) = suspect.addr.parse::<SocketAddr>() else {
            return;
        };
        let weak: Weak<NodeShared> = Arc::downgrade(n);
        n.blocking.submit(Box::new(move || {
            let Some(n) = weak.upgrade() else { return };
            let alive = reach(&n, sid, addr);
            let Some(o) = n.dist.mon.overlay() else {
                return;
            };
            match asker {
                None => o.with(&n, |st, cfg, out| st.probe_answer(sid, alive, cfg, out)),
                Some(a) => o.send(
                    &n,
                    a,
                    Msg::ProbeAck {
                        suspect: suspect.name,
                        alive,
                    },
                ),
            }
        }));
    }
}

/// Whether node `id` at `addr` can be reached now (connected, or a new
/// connection to it comes up).
fn reach(n: &Arc<NodeShared>, id: NodeId, addr: SocketAddr) -> bool {
    if n.dist.connection(id, None).is_some() {
        return true;
    }
    if crate::netmon::partitioned(n.id, id) || n.stopping.load(crate::loom::Ordering::Relaxed) {
        return false;
    }
    // A refused duplicate (both nodes connecting at once) fails here while
    // the other connection wins: what counts is a connection after it.
    let _ = crate::node::connect_transport(n, addr);
    let up = n.dist.connection(id, None).is_some();
    if let (true, Some(o)) = (up, n.dist.mon.overlay()) {
        o.note_brief(id);
    }
    up
}

/// The overlay thread: ticks until the node stops.
pub(crate) fn run(node: Weak<NodeShared>) {
    loop {
        let Some(n) = node.upgrade() else { return };
        if n.stopping.load(crate::loom::Ordering::Relaxed) {
            return;
        }
        let Some(o) = n.dist.mon.overlay() else {
            return;
        };
        let tick = o.cfg.tick;
        o.tick(&n);
        drop(n);
        std::thread::sleep(tick);
    }
}
