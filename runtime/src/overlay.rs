//! The partial-mesh overlay ([`Topology::Partial`]): HyParView membership
//! with SWIM-style failure detection.
//!
//! # Views
//!
//! Each node keeps an *active view* of about `log2(N) + 1` nodes it holds a
//! connection to (HyParView, Leitão et al., DSN'07; a node below that
//! target asks for neighbours, one at it still takes one more before it
//! drops any), and a larger *passive view* of nodes it knows and may
//! promote when an active neighbour goes.
//! A node joins through any member (a seed of [`discovery`](crate::discovery)
//! or [`Node::connect`](crate::Node::connect)): it sends `Join`, the contact
//! takes it into its active view and starts a `ForwardJoin` random walk on
//! each of its other neighbours (active random walk length 6, passive 3);
//! where a walk ends the node there asks the joiner to be its neighbour. A
//! node with neighbours still joins through a seed it does not know as a
//! member: that seed may head a cluster that formed apart (nodes that
//! joined it before it joined anyone), and the join makes the two one. A
//! node below its target asks a passive node (`Neighbor`, with priority
//! when its active view is empty: such a request is never refused). Every
//! few seconds a `Shuffle` walk exchanges a sample of both views, refreshing
//! the passive view; its answer goes back along the walk (or straight to
//! the origin from a node connected to it), not over a connection opened
//! for it. A join waits for its contact's list (up to 5 s) before another
//! contact is joined.
//!
//! # Membership
//!
//! Every node knows every member's name, address and *incarnation* (SWIM):
//! a joiner gets the contact's whole list, news (a member up, a member
//! down) is flooded over the active view (a node forwards only what changed
//! its own list, so a flood ends), and each node sends a digest of its list
//! to one active neighbour now and then; when the digests differ the
//! neighbour answers with its list's stamps (id, incarnation, up), and the
//! two exchange only the records that differ (anti-entropy). A newer incarnation
//! wins; at equal incarnations "down" wins. A node told that it is down
//! answers with a newer incarnation, so a false suspicion (a partition that
//! healed) is undone. [`nodes`](crate::nodes) lists the members that are up.
//!
//! # Closing an idle connection loses nothing
//!
//! An on-demand connection is closed by agreement, never by one side
//! alone (`Dist::propose_idle_close` states the protocol): the side that
//! finds it idle asks; the other agrees only if its overlay does not need
//! the connection and nothing waits on it there, takes it out of its table
//! and answers with its last frame; the asker, having read that answer
//! (so everything the other side sent), takes it out of its table too.
//! Both then retire it (`graft_net::Transport::retire`): all that was
//! queued is written and read before the sockets close, so frames in
//! flight either way are delivered. Sends made meanwhile go over a new
//! connection, which each side opens only once the old one has ended on
//! its side, so per-sender order holds across the change. The tests
//! `no_message_is_lost_or_reordered_between_pairs` and
//! `streams_survive_eviction_and_idle_close` (`dist_overlay`) close links
//! under streams both ways and check every message, in order. Not covered:
//! with [`lanes`](crate::NodeConfig::lanes) above 1 an idle connection is
//! not closed at all (a lane could be read after another's EOF), and the
//! loser of a simultaneous connect is dropped by the transport's duplicate
//! rule (which the module docs of `graft_net`'s transport argue cannot
//! carry traffic).
//!
//! # Failure detection
//!
//! The connection to an active neighbour is watched by the transport (a
//! closed socket at once, a silent one after three heartbeat ticks). When
//! one is lost, the node asks `probes` (default 3) other neighbours to reach
//! the suspect (SWIM's indirect probe); if none can within `probe_timeout`
//! (default 1 s; at once when all have answered no), the suspect is declared
//! down and the notice is flooded (news goes out once a tick, 50 ms, one
//! message per neighbour with all of it; while news keeps coming the gap
//! between floods doubles up to 8 ticks, so that a stream of news costs a
//! bounded number of messages). An active neighbour whose connection both
//! sides closed idle is not suspected. Each node also checks one random member
//! outside its active view every `probe_every` (default 1 s; scaled by
//! `N / 32` past 32 members) by reaching it directly, which is how a
//! member that no neighbour watches (the far side of a partition) is found
//! out; a node with no neighbour suspects nobody so (it cannot tell its own
//! isolation from the others' failure). A member declared down is disconnected
//! wherever a connection to it is left, so every monitor and link on its
//! processes fires with `NoConnection` on every node.
//!
//! Bound, for a node that halts: a neighbour sees the loss at once (socket
//! closed) or after `3 × heartbeat`, then at most `probe_timeout`, then the
//! flood (one hop per active link, about a millisecond each on a LAN, plus
//! up to one `tick`, 50 ms, per hop, or 8 ticks while other news keeps
//! flowing): `3 × heartbeat + probe_timeout + diameter × (hop + 8 × tick)`,
//! 4 s and a little with the defaults (1 s heartbeat, 1 s probe timeout)
//! and a quiet cluster, up to 5.6 s for a diameter of 4 under a stream
//! of news.
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

mod state;

use crate::dist::Ctl;
use crate::node::NodeShared;
use crate::pid::NodeId;
pub(crate) use state::Msg;
use state::{now_inc, Member, Out, State};
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
    /// The longest nap while nothing is in progress (see [`LONG_NAP`]).
    max_nap: Duration,
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
            max_nap: LONG_NAP,
        }
    }
}

impl OverlayConfig {
    /// The active view's target size (default `floor(log2(N)) + 1` for
    /// the N members known, at least 2). A node below it asks for
    /// neighbours; a node takes one neighbour more than this before it
    /// drops one for a newcomer.
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
    /// directly (default 1 s; in a cluster of N > 32 members, every
    /// `floor(N / 32)` times that, so the cluster checks about 32 members
    /// per interval whatever its size).
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

/// Outbound connects (on-demand sends of overlay messages, probes) one
/// node runs at once. Each runs on the transport's poller
/// (`connect_transport_then`: no thread waits on it); the rest wait their
/// turn, one entry per target. Before this bound (when each connect held a
/// blocking-pool thread) a node at N = 256 ran up to the pool's 256 of
/// them, each up to the 5 s connect timeout, and the hosts ran out of
/// threads and ephemeral ports (docs/decisions.md, h-poll2 and h-idle).
pub(crate) const MAX_DIALS: usize = 8;
/// Targets that may wait for a dial; a dial past them is dropped and
/// counted (its messages are lost, its probe is not answered: the
/// suspect's deadline decides).
pub(crate) const MAX_WAITING_DIALS: usize = 1024;

/// The overlay state of one node (in `NetMon`).
#[derive(Debug)]
pub(crate) struct Overlay {
    cfg: OverlayConfig,
    st: parking_lot::Mutex<State>,
    /// Set (then `Quiet::poke`) to end the overlay thread's long nap.
    poked: crate::loom::AtomicBool,
    /// Ticks run (for tests and figures).
    ticks: crate::loom::AtomicUsize,
    /// `State::up`, copied out at the end of each change under the lock:
    /// a count of members read without the lock (see [`Overlay::count`]).
    up: crate::loom::AtomicUsize,
    dials: parking_lot::Mutex<Dials>,
}

/// The overlay's outbound connects (see [`MAX_DIALS`]).
#[derive(Debug, Default)]
struct Dials {
    /// Dials running now (each on the transport's poller).
    running: usize,
    /// Most dials run at once so far.
    peak: usize,
    /// Targets dialled or waiting, with what waits on them.
    targets: ahash::AHashMap<NodeId, Dial>,
    /// Targets waiting for a slot, oldest first.
    queue: std::collections::VecDeque<NodeId>,
    /// Dials refused because [`MAX_WAITING_DIALS`] targets waited.
    dropped: u64,
    /// Dials done.
    done: u64,
}

/// One target's dial.
#[derive(Debug)]
struct Dial {
    addr: SocketAddr,
    /// Probes that wait on it: who asked (`None`: this node) and the
    /// suspect's name.
    probes: Vec<(Option<NodeId>, String)>,
}

/// The overlay's outbound connects, as [`Node::overlay_dials`](crate::Node::overlay_dials)
/// gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DialStats {
    /// Running now (at most `MAX_DIALS`, 8).
    pub running: usize,
    /// Waiting for a slot.
    pub waiting: usize,
    /// Most run at once so far.
    pub peak: usize,
    /// Dropped: too many targets waited.
    pub dropped: u64,
    /// Done.
    pub done: u64,
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

impl Overlay {
    pub(crate) fn new(cfg: OverlayConfig, name: &str) -> Overlay {
        Overlay {
            cfg,
            st: parking_lot::Mutex::new(State::new(
                Member {
                    name: name.to_string(),
                    addr: String::new(),
                    inc: now_inc(),
                    up: true,
                },
                Instant::now(),
            )),
            poked: crate::loom::AtomicBool::new(false),
            ticks: crate::loom::AtomicUsize::new(0),
            up: crate::loom::AtomicUsize::new(0),
            dials: Default::default(),
        }
    }

    /// The outbound connects' figures.
    pub(crate) fn dial_stats(&self) -> DialStats {
        let d = self.dials.lock();
        DialStats {
            running: d.running,
            waiting: d.queue.len(),
            peak: d.peak,
            dropped: d.dropped,
            done: d.done,
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
        self.st.lock().up_members()
    }

    /// How many members are up, without the state's lock: a caller that
    /// polls it (a health check, the cluster bench's wait for a full
    /// cluster) never holds the lock when the scheduler preempts it, so
    /// the overlay and I/O threads never wait behind it.
    pub(crate) fn count(&self) -> usize {
        self.up.load(crate::loom::Ordering::Relaxed)
    }

    pub(crate) fn is_member(&self, id: NodeId) -> bool {
        self.st.lock().is_up(id)
    }

    /// Whether a seed at `addr` (or named `id`) needs a join: while this
    /// node has no neighbour, and also while the seed is no member it
    /// knows, up or down. Such a seed may head another cluster that formed
    /// beside this one (nodes that joined it before it joined anyone: with
    /// several seeds, one quarter of a 512-node cluster stayed apart), and
    /// a join through it links the two. Not while a join waits for its
    /// list (`state::JOIN_WAIT`).
    pub(crate) fn wants_join(&self, addr: Option<SocketAddr>, id: Option<NodeId>) -> bool {
        let st = self.st.lock();
        // A seed known only by address is looked up among the members.
        let id = id.or_else(|| {
            let a = addr?;
            st.members
                .iter()
                .find(|(_, k)| k.addr == a)
                .map(|(i, _)| *i)
        });
        st.wants_join(id, Instant::now())
    }

    pub(crate) fn view(&self, n: &NodeShared) -> OverlayView {
        let st = self.st.lock();
        let members = st.up_members();
        OverlayView {
            active: st.active.clone(),
            passive: st.passive.clone(),
            members,
            connections: n.dist.nodes().len(),
        }
    }

    fn with(&self, n: &Arc<NodeShared>, f: impl FnOnce(&mut State, &OverlayConfig, &mut Out)) {
        let mut out = Out::default();
        let wake = {
            let mut st = self.st.lock();
            f(&mut st, &self.cfg, &mut out);
            self.up.store(st.up, crate::loom::Ordering::Relaxed);
            // Under the lock that the overlay thread decided its long nap
            // under: either it sees this change, or it is woken.
            let wake = st.sleeping && st.wants_tick(&self.cfg);
            if wake {
                st.sleeping = false;
            }
            wake
        };
        if wake {
            n.sched.quiet.poke(&self.poked);
        }
        self.apply(n, out);
    }

    /// Joins the cluster through `contact` (connected) if it
    /// [wants to](State::wants_join); whether it sent the join.
    pub(crate) fn join(&self, n: &Arc<NodeShared>, contact: NodeId) -> bool {
        let mut joined = false;
        self.with(n, |st, cfg, out| {
            let now = Instant::now();
            if !st.wants_join(Some(contact), now) {
                return;
            }
            st.joining = Some((contact, now));
            st.add_active(contact, cfg, out);
            out.send.push((contact, Msg::Join { me: st.me.clone() }));
            joined = true;
        });
        joined
    }

    /// A connection came up.
    pub(crate) fn peer_up(&self, id: NodeId) {
        self.st.lock().usage.insert(id, (0, Instant::now()));
    }

    /// Whether the overlay needs the connection to `id` (an active
    /// neighbour, a join or probe under way): an idle close it is asked
    /// for is refused then (see `Dist::accept_idle_close`).
    pub(crate) fn keeps(&self, id: NodeId) -> bool {
        self.st.lock().needs(id)
    }

    /// A connection went (run by the node loop); `agreed` if both sides
    /// closed it idle (see [`State::conn_lost`]).
    pub(crate) fn conn_lost(&self, n: &Arc<NodeShared>, id: NodeId, agreed: bool) {
        self.with(n, |st, cfg, out| st.conn_lost(id, agreed, cfg, out));
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
            if !st.members.contains_key(&from) {
                let m = Member {
                    name: from_name.to_string(),
                    addr: from_addr.to_string(),
                    inc: 0,
                    up: true,
                };
                if st.merge(&m, &connected, out) {
                    st.flood(vec![m], Some(from), out);
                }
            } else if let Some(down) = st.held_down(from, &msg) {
                // Down to us: tell it, so it refutes; talk once it has.
                out.send.push((
                    from,
                    Msg::Gossip {
                        members: vec![down],
                    },
                ));
                if let Msg::Neighbor { .. } = msg {
                    out.send
                        .push((from, Msg::NeighborReply { accepted: false }));
                }
                if !matches!(
                    msg,
                    Msg::Gossip { .. }
                        | Msg::Sync { .. }
                        | Msg::SyncDigest { .. }
                        | Msg::SyncStamps { .. }
                ) {
                    return;
                }
            }
            state::handle(st, cfg, out, from, msg, &connected);
        });
    }

    /// One tick; returns when the next is due if nothing changes (see
    /// [`state::tick`]), having marked the state `sleeping` if that is past
    /// the short tick.
    fn tick(&self, n: &Arc<NodeShared>) -> Option<Instant> {
        self.ticks.fetch_add(1, crate::loom::Ordering::Relaxed);
        let usage: Vec<(NodeId, u64, bool)> = n
            .dist
            .nodes()
            .into_iter()
            .map(|id| (id, n.dist.usage(id), n.dist.watched(id)))
            .collect();
        let mut out = Out::default();
        // Not through `with`: the tick's own state must not wake its nap.
        let next = {
            let mut st = self.st.lock();
            let next = state::tick(&mut st, &self.cfg, &mut out, &usage);
            self.up.store(st.up, crate::loom::Ordering::Relaxed);
            st.sleeping = next.is_some();
            next
        };
        self.apply(n, out);
        next
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
        for (id, count) in out.close_idle {
            n.dist.propose_idle_close(id, count);
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
        self.dial(n, to, addr, None);
    }

    /// Tries to reach `suspect`; answers `asker` (or this node). A live
    /// connection answers at once; else a dial (bounded, see
    /// [`MAX_DIALS`]) decides.
    fn probe(&self, n: &Arc<NodeShared>, asker: Option<NodeId>, suspect: Member) {
        let sid = NodeId::from_name(&suspect.name);
        let Ok(addr) = suspect.addr.parse::<SocketAddr>() else {
            return;
        };
        if n.dist.connection(sid, None).is_some() {
            return self.answer(n, asker, sid, suspect.name, true);
        }
        self.dial(n, sid, addr, Some((asker, suspect.name)));
    }

    /// Answers a probe of `sid`.
    fn answer(
        &self,
        n: &Arc<NodeShared>,
        asker: Option<NodeId>,
        sid: NodeId,
        name: String,
        alive: bool,
    ) {
        match asker {
            None => self.with(n, |st, cfg, out| st.probe_answer(sid, alive, cfg, out)),
            Some(a) => self.send(
                n,
                a,
                Msg::ProbeAck {
                    suspect: name,
                    alive,
                },
            ),
        }
    }

    /// Connects to `id` at `addr` when a slot is free (at once, or after
    /// the dials before it), then flushes the messages waiting for it
    /// (`State::connecting`) and answers the probes of it. One dial per
    /// target: a second one joins the first.
    fn dial(
        &self,
        n: &Arc<NodeShared>,
        id: NodeId,
        addr: SocketAddr,
        probe: Option<(Option<NodeId>, String)>,
    ) {
        let start = {
            let mut d = self.dials.lock();
            if let Some(t) = d.targets.get_mut(&id) {
                t.probes.extend(probe);
                return;
            }
            if d.targets.len() >= MAX_WAITING_DIALS {
                d.dropped += 1;
                drop(d);
                log::debug!(
                    "graft: overlay: too many connects waiting; the one to {addr} is dropped"
                );
                self.st.lock().connecting.remove(&id);
                return;
            }
            d.targets.insert(
                id,
                Dial {
                    addr,
                    probes: probe.into_iter().collect(),
                },
            );
            if d.running < MAX_DIALS {
                d.running += 1;
                d.peak = d.peak.max(d.running);
                true
            } else {
                d.queue.push_back(id);
                false
            }
        };
        if start {
            self.run_dials(n, id);
        }
    }

    /// Runs dials in a free slot from `first`, until one is in flight (its
    /// end takes the slot on, see [`Overlay::dialed`]) or none waits.
    fn run_dials(&self, n: &Arc<NodeShared>, first: NodeId) {
        let mut next = Some(first);
        while let Some(id) = next {
            next = self.begin_dial(n, id);
        }
    }

    /// Starts the dial to `id`: on the transport's poller (no thread waits
    /// on it), or not at all when there is nothing to do, and then the
    /// next target for this slot at once.
    fn begin_dial(&self, n: &Arc<NodeShared>, id: NodeId) -> Option<NodeId> {
        let addr = self.dials.lock().targets.get(&id).map(|t| t.addr);
        let was = n.dist.connection(id, None).is_some();
        // Not when stopping or without a transport, where the completion
        // would come at once, inside this call, and the next dial's inside
        // it: a recursion as deep as the queue.
        let go = addr.filter(|_| {
            !was && !crate::netmon::partitioned(n.id, id)
                && !n.stopping.load(crate::loom::Ordering::Relaxed)
                && n.dist.transport().is_some()
        });
        let Some(addr) = go else {
            return self.dialed(n, id, was);
        };
        // A refused duplicate (both nodes connecting at once) fails while
        // the other connection wins: what counts is a connection after it.
        crate::node::connect_transport_then(n, addr, move |n, _| {
            let Some(o) = n.dist.mon.overlay() else {
                return;
            };
            if let Some(next) = o.dialed(n, id, was) {
                o.run_dials(n, next);
            }
        });
        None
    }

    /// A dial to `id` ended (`was`: connected before it): flushes the
    /// messages waiting for it (`State::connecting`), answers the probes
    /// of it, and gives the slot to the next target, if one waits.
    fn dialed(&self, n: &Arc<NodeShared>, id: NodeId, was: bool) -> Option<NodeId> {
        let up = n.dist.connection(id, None).is_some();
        if up && !was {
            self.note_brief(id);
        }
        let probes = {
            let mut d = self.dials.lock();
            d.done += 1;
            d.targets.remove(&id).map(|t| t.probes).unwrap_or_default()
        };
        let q = self.st.lock().connecting.remove(&id).unwrap_or_default();
        for msg in q {
            let _ = n.dist.send_ctl(id, &Ctl::Overlay { msg });
        }
        for (asker, name) in probes {
            self.answer(n, asker, id, name, up);
        }
        let mut d = self.dials.lock();
        let next = d.queue.pop_front();
        if next.is_none() {
            d.running -= 1;
        }
        next
    }
}

/// The longest the overlay thread sleeps (by default) while nothing is in progress
/// (a settled view: no suspects, asks, news or links to watch): the
/// periodic rounds (shuffle, digest, probe) come at least this often
/// anyway, and a change that wants a tick wakes it sooner
/// ([`State::wants_tick`]). Connections that come up meanwhile are looked
/// at for idleness within this.
const LONG_NAP: Duration = Duration::from_secs(1);

/// The overlay thread: ticks until the node stops, every `tick` while
/// something is in progress, else at the next periodic round.
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
        let nap = match o.tick(&n) {
            None => tick,
            Some(t) => t
                .saturating_duration_since(Instant::now())
                .clamp(tick, o.cfg.max_nap.max(tick)),
        };
        // Cut short when the node stops, or when a change wants a tick.
        if !n.sched.quiet.nap_unless(nap, &o.poked) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Node, NodeConfig, Topology};

    use crate::dist::tests::eventually;

    fn partial(ov: OverlayConfig) -> NodeConfig {
        NodeConfig::new("127.0.0.1:0")
            .workers(1)
            .cookie("overlay-nap")
            .default_logger(false)
            .topology(Topology::Partial)
            .overlay(ov)
    }

    fn o(n: &Node) -> &Arc<Overlay> {
        n.shared().dist.mon.overlay().unwrap()
    }

    /// Three nodes joined through the first, until each knows the others.
    fn three(ov: impl Fn() -> OverlayConfig) -> Vec<Node> {
        let nodes: Vec<Node> = (0..3)
            .map(|_| Node::start(partial(ov())).unwrap())
            .collect();
        for n in &nodes[1..] {
            n.connect(nodes[0].addr()).unwrap();
        }
        let ids: Vec<NodeId> = nodes.iter().map(|n| n.id()).collect();
        eventually("membership", || {
            nodes.iter().all(|n| {
                ids.iter()
                    .filter(|i| **i != n.id())
                    .all(|i| o(n).is_member(*i))
            })
        });
        nodes
    }

    /// A settled overlay's thread wakes for its periodic rounds, not every
    /// 50 ms.
    #[test]
    fn a_settled_overlay_sleeps_until_its_next_round() {
        let nodes = three(OverlayConfig::default);
        // Asks answered, brief links closed.
        std::thread::sleep(Duration::from_secs(2));
        let a = o(&nodes[0]);
        let before = a.ticks.load(crate::loom::Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs(2));
        let ticks = a.ticks.load(crate::loom::Ordering::Relaxed) - before;
        // At the short tick this would be 40.
        assert!(ticks <= 12, "{ticks} ticks in 2 s of a settled overlay");
        for n in nodes {
            n.shutdown();
        }
    }

    /// A change wakes a sleeping overlay thread. With the periodic rounds
    /// and the longest nap at 60 s, news (here a joiner: each node that
    /// learns of it queues the news to flood) is flooded, so leaves the
    /// queue, only if the thread is woken: the wait here (10 s) is shorter
    /// than the nap. (Membership itself spreads without a tick, by the
    /// join's forward walk, so it alone would not show the wake-up.)
    #[test]
    fn news_wakes_a_sleeping_overlay_thread() {
        let slow = || OverlayConfig {
            shuffle_every: Duration::from_secs(60),
            sync_every: Duration::from_secs(60),
            probe_every: Duration::from_secs(60),
            max_nap: Duration::from_secs(60),
            ..OverlayConfig::default()
        };
        let nodes = three(slow);
        // Settled: every thread is in its long nap.
        eventually("asleep", || nodes.iter().all(|n| o(n).st.lock().sleeping));
        let d = Node::start(partial(slow())).unwrap();
        d.connect(nodes[2].addr()).unwrap();
        eventually("the news of d known and flooded", || {
            nodes.iter().all(|n| {
                let st = o(n).st.lock();
                st.is_up(d.id()) && st.news.is_empty()
            })
        });
        d.shutdown();
        for n in nodes {
            n.shutdown();
        }
    }

    /// Probes of 40 suspects that answer slowly (a listener that never
    /// accepts: the TCP connect completes, the handshake waits) run at most
    /// `MAX_DIALS` at once, on at most that many blocking threads; the rest
    /// wait and run when a slot frees; every one ends.
    #[test]
    fn overlay_dials_are_bounded_and_queued() {
        let node = Node::start(NodeConfig::new("127.0.0.1:0").topology(Topology::Partial)).unwrap();
        let n = node.shared().clone();
        let o = n.dist.mon.overlay().unwrap();
        let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = hole.local_addr().unwrap().to_string();
        for i in 0..40 {
            let m = Member {
                name: format!("slow{i}@127.0.0.1"),
                addr: addr.clone(),
                inc: 1,
                up: true,
            };
            o.probe(&n, None, m.clone());
            // A second probe of the same suspect joins the first dial.
            o.probe(&n, None, m);
        }
        let d = o.dial_stats();
        assert_eq!(
            (d.running, d.waiting, d.peak),
            (MAX_DIALS, 40 - MAX_DIALS, MAX_DIALS),
            "{d:?}"
        );
        assert!(
            n.blocking.threads() <= MAX_DIALS + 1,
            "{} blocking threads",
            n.blocking.threads()
        );
        // The suspects stop answering at all: the handshakes fail fast.
        drop(hole);
        let t = Instant::now();
        while o.dial_stats().done < 40 {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{:?}",
                o.dial_stats()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let d = o.dial_stats();
        assert_eq!(
            (d.running, d.waiting, d.peak, d.dropped),
            (0, 0, MAX_DIALS, 0),
            "{d:?}"
        );
        assert!(
            n.blocking.threads() <= MAX_DIALS + 1,
            "{} blocking threads",
            n.blocking.threads()
        );
        node.shutdown();
    }
}
