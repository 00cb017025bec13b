//! The overlay's state and the protocol's rules on it (see `overlay.rs`):
//! views, membership and its merge rule, suspects; every handler gathers its
//! effects in an [`Out`] that the caller does after the lock.

use super::OverlayConfig;
use crate::pid::NodeId;
use ahash::AHashMap;
use std::collections::hash_map::Entry;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A member as it travels.
#[derive(Clone, Debug, PartialEq, Eq, graft_derive::Mobile)]
pub(crate) struct Member {
    pub(super) name: String,
    pub(super) addr: String,
    pub(super) inc: u64,
    pub(super) up: bool,
}

/// A member's record without its name and address, for comparing lists
/// (`Msg::SyncStamps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, graft_derive::Mobile)]
pub(crate) struct Stamp {
    id: u64,
    inc: u64,
    up: bool,
}

/// Whether a record at `inc`/`up` is newer than one at `than`: a newer
/// incarnation wins; at equal incarnations "down" wins (SWIM).
fn newer(inc: u64, up: bool, than: (u64, bool)) -> bool {
    inc > than.0 || (inc == than.0 && than.1 && !up)
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
    /// A shuffle's random walk; `path`: the ids of the nodes that
    /// forwarded it, in order (at most [`PRWL`]).
    Shuffle {
        origin: Member,
        sample: Vec<Member>,
        ttl: u32,
        path: Vec<u64>,
    },
    /// The answer to a shuffle, on its way back to `origin` along the
    /// walk (`route`: the hops still to go, the last one next), each hop
    /// over the link the walk came by, or straight to `origin` from a node
    /// connected to it. (Sent straight to the origin, as HyParView has it,
    /// each answer opened a connection for one message: most of the
    /// connections an idle cluster opened and closed, docs/decisions.md.)
    ShuffleReply {
        sample: Vec<Member>,
        route: Vec<u64>,
        origin: u64,
    },
    Gossip {
        members: Vec<Member>,
    },
    /// Records (`members`), and the ids of the records the sender wants
    /// back (`want`, see `SyncStamps`); `reply` asks for the receiver's
    /// whole list (a probe's push to a member it holds down).
    Sync {
        members: Vec<Member>,
        reply: bool,
        want: Vec<u64>,
    },
    /// The periodic anti-entropy, first as a digest of the sender's list
    /// (`State::digest`): a settled cluster does not send every member to
    /// a neighbour every `sync_every` (N² entries a period, cluster-wide).
    SyncDigest {
        digest: u64,
    },
    /// The answer to a digest that differs: the receiver's list as stamps
    /// (id, incarnation, up; no names or addresses). The digest's sender
    /// answers with a `Sync` holding the records newer on its side and
    /// asking (`want`) for those newer here, which come back in a last
    /// `Sync`: only the records that differ travel whole. (Whole lists
    /// both ways, as before, were half the records a 512-node cluster sent
    /// while it formed, docs/decisions.md.)
    SyncStamps {
        stamps: Vec<Stamp>,
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
pub(super) const ARWL: u32 = 6;
/// Passive random walk length (PRWL).
pub(super) const PRWL: u32 = 3;
/// A `Neighbor` request unanswered this long is given up.
pub(super) const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// After a refused `Neighbor` request, the next one (of a node that has
/// active neighbours) waits this long: a node one below its target among
/// nodes that are all full is refused by every one, and asking again at
/// each tick kept a new on-demand connection open every 50 ms (a dozen
/// at once on that node).
pub(super) const ASK_BACKOFF: Duration = Duration::from_secs(1);
/// The most `Neighbor` requests a node has out at once. Each is most
/// often a connect and a handshake: a node with an empty view asked for
/// its whole target at once, and again when the asks timed out (while a
/// 1,000-node cluster formed on two cores, one host's process had 369
/// threads waiting in an outbound handshake: asks, probes and joins
/// together). An answer is followed by the next ask at once, so a view
/// still fills in a few round trips.
pub(super) const MAX_ASKS: usize = 2;
/// How long a join waits for its contact's list before another contact
/// may be joined. Until the list comes a node knows none of its other
/// seeds as members, and joined the next seed of the same poll too (at
/// N = 512 the 128 nodes of a host sent 184-199 joins; 147-161 with the
/// wait). The wait ends early when the contact's connection goes.
pub(super) const JOIN_WAIT: Duration = Duration::from_secs(5);
/// Cluster size up to which each node checks one member outside its active
/// view every `probe_every`; past it the interval grows with the size.
pub(super) const PROBE_SCALE: usize = 32;
/// The longest gap between two floods of news, in ticks (see
/// [`State::gossip_due`]).
pub(super) const MAX_GOSSIP_TICKS: u32 = 8;
/// How long a connection the overlay opened for itself may stay silent
/// (or `idle_close`, if shorter).
pub(super) const BRIEF_IDLE: Duration = Duration::from_millis(500);

/// What a node knows of a member.
#[derive(Clone, Debug)]
pub(super) struct Known {
    pub(super) name: String,
    pub(super) addr: SocketAddr,
    /// `addr` formatted once, when the record is learnt (formatting it
    /// for each record sent was most of the cost of a whole list).
    pub(super) addr_text: String,
    pub(super) inc: u64,
    pub(super) up: bool,
}

impl Known {
    pub(super) fn wire(&self) -> Member {
        Member {
            name: self.name.clone(),
            addr: self.addr_text.clone(),
            inc: self.inc,
            up: self.up,
        }
    }
}

#[derive(Debug)]
pub(super) struct Suspect {
    pub(super) deadline: Instant,
    pub(super) waiting: usize,
    /// Only this node's own direct check so far: a failure leads to the
    /// indirect probe, not to a verdict.
    pub(super) direct: bool,
}

/// A record waiting to be flooded, and the neighbours known to hold it
/// already: the flood skips them.
#[derive(Debug)]
pub(super) struct News {
    rec: Member,
    /// The neighbour it came from.
    from: Option<NodeId>,
    /// Neighbours that sent the same record while it waited
    /// ([`State::heard_again`]); empty, so no allocation, for most.
    also: Vec<NodeId>,
}

impl News {
    fn held_by(&self, a: NodeId) -> bool {
        self.from == Some(a) || self.also.contains(&a)
    }
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) me: Member,
    pub(super) me_id: NodeId,
    pub(super) members: AHashMap<NodeId, Known>,
    /// Members up, kept with `members` (`merge` is the only writer): the
    /// active view's target follows it at every tick, and counting a
    /// thousand members there was most of the tick's own time.
    pub(super) up: usize,
    pub(super) active: Vec<NodeId>,
    pub(super) passive: Vec<NodeId>,
    pub(super) asking: AHashMap<NodeId, Instant>,
    pub(super) suspects: AHashMap<NodeId, Suspect>,
    /// Messages waiting for an on-demand connect.
    pub(super) connecting: AHashMap<NodeId, Vec<Msg>>,
    /// Frames counted on an on-demand connection, and since when.
    pub(super) usage: AHashMap<NodeId, (u64, Instant)>,
    /// Nodes outside the active view last told `Disconnect` because they
    /// sent what only a neighbour sends (a view that went one-sided, see
    /// [`State::one_sided`]), and when.
    pub(super) told: AHashMap<NodeId, Instant>,
    /// On-demand connections the overlay opened for itself (a probe, a
    /// walk's answer): closed after [`BRIEF_IDLE`] of silence (or
    /// `idle_close`, if shorter).
    pub(super) brief: ahash::AHashSet<NodeId>,
    pub(super) rng: u64,
    pub(super) last_shuffle: Instant,
    pub(super) last_sync: Instant,
    pub(super) last_probe: Instant,
    /// When a `Neighbor` request was last refused (see [`ASK_BACKOFF`]).
    pub(super) refused: Option<Instant>,
    /// The contact of a join whose list has not come yet, and when the
    /// join was sent (see [`JOIN_WAIT`]).
    pub(super) joining: Option<(NodeId, Instant)>,
    /// News to flood at the next tick.
    pub(super) news: Vec<News>,
    /// When news was last flooded, and the gap before the next flood
    /// may leave (see [`State::gossip_due`]).
    pub(super) last_gossip: Option<Instant>,
    pub(super) gossip_gap: Duration,
    /// Where each member's record lies in `news`.
    pub(super) news_at: AHashMap<NodeId, usize>,
    /// The overlay thread sleeps past the short tick (see `overlay::run`):
    /// a change that [wants a tick](State::wants_tick) must wake it.
    pub(super) sleeping: bool,
}

/// Side effects gathered under the lock, done after it.
#[derive(Default)]
pub(super) struct Out {
    pub(super) send: Vec<(NodeId, Msg)>,
    pub(super) disconnect: Vec<NodeId>,
    /// Idle connections to close, each with the usage count it was idle
    /// at: the close is proposed to the other side only if that count
    /// still holds then, and done only if it agrees (see
    /// [`Dist::propose_idle_close`](crate::dist::Dist::propose_idle_close)).
    pub(super) close_idle: Vec<(NodeId, u64)>,
    pub(super) up: Vec<(NodeId, String, SocketAddr)>,
    pub(super) down: Vec<NodeId>,
    /// (asker, suspect): reach the suspect, answer the asker.
    pub(super) probe: Vec<(Option<NodeId>, Member)>,
}
pub(super) fn now_inc() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64)
}

impl State {
    /// A node's state before it knows anyone: `me` alone, empty views.
    pub(super) fn new(me: Member, now: Instant) -> State {
        let me_id = NodeId::from_name(&me.name);
        State {
            me,
            me_id,
            members: AHashMap::new(),
            up: 0,
            active: Vec::new(),
            passive: Vec::new(),
            asking: AHashMap::new(),
            suspects: AHashMap::new(),
            connecting: AHashMap::new(),
            usage: AHashMap::new(),
            told: AHashMap::new(),
            brief: Default::default(),
            rng: me_id.0 | 1,
            last_shuffle: now,
            last_sync: now,
            refused: None,
            joining: None,
            last_probe: now,
            news: Vec::new(),
            news_at: AHashMap::new(),
            last_gossip: None,
            gossip_gap: Duration::ZERO,
            sleeping: false,
        }
    }

    pub(super) fn rand(&mut self, n: usize) -> usize {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }

    pub(super) fn pick(&mut self, from: &[NodeId], not: &[NodeId]) -> Option<NodeId> {
        let c: Vec<NodeId> = from.iter().copied().filter(|x| !not.contains(x)).collect();
        if c.is_empty() {
            return None;
        }
        let i = self.rand(c.len());
        Some(c[i])
    }

    pub(super) fn up_count(&self) -> usize {
        debug_assert_eq!(self.up, self.members.values().filter(|k| k.up).count());
        self.up
    }

    pub(super) fn target(&self, cfg: &OverlayConfig) -> usize {
        cfg.active.unwrap_or_else(|| {
            let n = self.up_count() + 1;
            ((usize::BITS - 1 - n.leading_zeros()) as usize + 1).max(2)
        })
    }

    /// The most neighbours this node keeps: one over the
    /// [target](State::target). A node below the target asks for neighbours; one
    /// at the target still takes one more, without dropping any. With no
    /// room over the target, every node of a settled cluster was full: a
    /// join's walks ended in evictions whose victims fell below the
    /// target, and each of those asked node after node, all full, each
    /// ask a connect and a handshake (docs/decisions.md). With the room, a
    /// victim is mostly left at the target or one over, and one below
    /// finds a node with room.
    ///
    /// No limit while this node's join waits for its contact's list: its
    /// target follows the members it knows, a handful then, so each walk
    /// ending at it could evict the neighbour another brought. Once the
    /// list has come the tick trims any excess. (Not shown to matter: at
    /// N = 512 a joiner still evicted about two neighbours per join, its
    /// list mostly there before the walks ended.)
    pub(super) fn room(&self, cfg: &OverlayConfig) -> usize {
        if self.awaits_list(Instant::now()) {
            usize::MAX
        } else {
            self.target(cfg) + 1
        }
    }

    /// Whether a join sent at most [`JOIN_WAIT`] ago waits for its
    /// contact's list.
    fn awaits_list(&self, now: Instant) -> bool {
        self.joining
            .is_some_and(|(_, at)| now.duration_since(at) < JOIN_WAIT)
    }

    pub(super) fn is_up(&self, id: NodeId) -> bool {
        self.members.get(&id).is_some_and(|k| k.up)
    }

    /// The members that are up, sorted.
    pub(super) fn up_members(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .members
            .iter()
            .filter(|(_, k)| k.up)
            .map(|(id, _)| *id)
            .collect();
        v.sort();
        v
    }

    pub(super) fn all(&self) -> Vec<Member> {
        let mut v: Vec<Member> = self.members.values().map(Known::wire).collect();
        v.push(self.me.clone());
        v
    }

    /// Every record (this node's own too) as a stamp.
    pub(super) fn stamps(&self) -> Vec<Stamp> {
        let stamp = |id: NodeId, inc, up| Stamp { id: id.0, inc, up };
        let mut v: Vec<Stamp> = self
            .members
            .iter()
            .map(|(id, k)| stamp(*id, k.inc, k.up))
            .collect();
        v.push(stamp(self.me_id, self.me.inc, self.me.up));
        v
    }

    /// The answer to another node's `stamps`: the records newer here (or
    /// unknown there), and the ids of those newer there (or unknown here).
    /// A stamp of this node newer than its own record (it is held down
    /// there) is refuted at once, as a record of it would be.
    fn compare(
        &mut self,
        stamps: &[Stamp],
        connected: &dyn Fn(NodeId) -> bool,
        out: &mut Out,
    ) -> (Vec<Member>, Vec<u64>) {
        let theirs: AHashMap<u64, (u64, bool)> =
            stamps.iter().map(|s| (s.id, (s.inc, s.up))).collect();
        let mine = |inc, up, id: NodeId| theirs.get(&id.0).is_none_or(|t| newer(inc, up, *t));
        let mut give: Vec<Member> = self
            .members
            .iter()
            .filter(|(id, k)| mine(k.inc, k.up, **id))
            .map(|(_, k)| k.wire())
            .collect();
        if mine(self.me.inc, self.me.up, self.me_id) {
            give.push(self.me.clone());
        }
        let mut want = Vec::new();
        for s in stamps {
            let id = NodeId(s.id);
            if id == self.me_id {
                let m = Member {
                    inc: s.inc,
                    up: s.up,
                    ..self.me.clone()
                };
                self.merge(&m, connected, out);
            } else if self
                .members
                .get(&id)
                .is_none_or(|k| newer(s.inc, s.up, (k.inc, k.up)))
            {
                want.push(s.id);
            }
        }
        (give, want)
    }

    /// The records of `ids` this node knows (its own too).
    fn records(&self, ids: &[u64]) -> Vec<Member> {
        ids.iter()
            .filter_map(|i| match NodeId(*i) {
                id if id == self.me_id => Some(self.me.clone()),
                id => self.members.get(&id).map(Known::wire),
            })
            .collect()
    }

    /// A digest of what [`all`](State::all) would send, in any order: the
    /// XOR of one mixed hash per member (its name's id, incarnation and
    /// up/down). Two nodes that know the same records have the same
    /// digest; a difference in any record changes it (but for a 64-bit
    /// collision, after which the next difference or a probe's `Sync`
    /// still heals). Addresses are left out: a node's address is fixed for
    /// an incarnation.
    pub(super) fn digest(&self) -> u64 {
        let one = |id: NodeId, inc: u64, up: bool| {
            // splitmix64's finaliser over the three fields.
            let mut z =
                id.0 ^ inc.rotate_left(32) ^ u64::from(up).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut d = one(self.me_id, self.me.inc, self.me.up);
        for (id, k) in &self.members {
            d ^= one(*id, k.inc, k.up);
        }
        d
    }

    /// Whether a change may have made the next tick due sooner than the
    /// overlay thread's nap ends: news to flood, a suspect or an ask (with
    /// its deadline) that may be new, an active view to fill (the next ask
    /// follows an answer at once) or to trim.
    pub(super) fn wants_tick(&self, cfg: &OverlayConfig) -> bool {
        !self.news.is_empty()
            || !self.suspects.is_empty()
            || !self.asking.is_empty()
            || self.active.len() < self.target(cfg)
            || self.active.len() > self.room(cfg)
    }

    /// The record to tell `from` if this node holds it down and `msg` is
    /// no proof that it is up: a `Join` or `Neighbor` carries its sender's
    /// own record, and one newer than the down held here is its
    /// refutation. (A node refutes by flooding over its active view: one
    /// with no neighbour left had nobody to tell, and the members that
    /// held it down refused every request that could give it one:
    /// one way for a node to stay without neighbours for a whole
    /// 1,000-node run, as 50 to 130 nodes of one host did,
    /// docs/decisions.md.)
    pub(super) fn held_down(&self, from: NodeId, msg: &Msg) -> Option<Member> {
        let k = self.members.get(&from).filter(|k| !k.up)?;
        let own = match msg {
            Msg::Join { me } | Msg::Neighbor { me, .. } => Some(me),
            _ => None,
        };
        let refuted = own.is_some_and(|m| {
            NodeId::from_name(&m.name) == from && newer(m.inc, m.up, (k.inc, k.up))
        });
        (!refuted).then(|| k.wire())
    }

    /// Tells `from` that it is no neighbour of this node, at most once an
    /// `idle_close`, if `msg` is one that only an active neighbour sends
    /// (a digest, a shuffle's walk, a forward join, a probe request) and
    /// `from` is neither in the active view nor asked to join it: it
    /// holds this node in its active view, and its traffic would never
    /// let the connection close idle. (Told on any traffic over such a
    /// connection, as before, it fired on late answers to asks and on
    /// probes too, and made nodes drop neighbours that had just taken
    /// them: 39,000 times in 107 s in one host of a 1,000-node run,
    /// 8,500 in a healthy one, docs/decisions.md.)
    pub(super) fn one_sided(
        &mut self,
        from: NodeId,
        msg: &Msg,
        cfg: &OverlayConfig,
        out: &mut Out,
    ) {
        let neighbourly = matches!(
            msg,
            Msg::SyncDigest { .. }
                | Msg::Shuffle { .. }
                | Msg::ForwardJoin { .. }
                | Msg::ProbeReq { .. }
        );
        if !neighbourly || self.active.contains(&from) || self.asking.contains_key(&from) {
            return;
        }
        let now = Instant::now();
        let last = self.told.get(&from).copied();
        if last.is_none_or(|t| now.duration_since(t) >= cfg.idle_close) {
            self.told.insert(from, now);
            out.send.push((from, Msg::Disconnect));
        }
    }

    /// Whether the connection to `id` is needed whatever its traffic: an
    /// active neighbour, a join asked, messages waiting for a connect, a
    /// suspect being probed. Never closed idle (nor agreed to be).
    pub(super) fn needs(&self, id: NodeId) -> bool {
        self.active.contains(&id)
            || self.asking.contains_key(&id)
            || self.connecting.contains_key(&id)
            || self.suspects.contains_key(&id)
    }

    /// Whether to join through `id`: while this node has no neighbour, and
    /// also while `id` is no member it knows, up or down (it may head a
    /// cluster that formed apart); never through itself or a neighbour,
    /// nor while a join waits for its list (see [`JOIN_WAIT`]). `None`: a
    /// contact known only by an address that no member has.
    pub(super) fn wants_join(&self, id: Option<NodeId>, now: Instant) -> bool {
        !self.awaits_list(now)
            && id.is_none_or(|id| {
                id != self.me_id
                    && !self.active.contains(&id)
                    && (self.active.is_empty() || !self.members.contains_key(&id))
            })
    }

    /// How long the on-demand connection to `id` may carry nothing before
    /// it is closed: `idle_close`, or [`BRIEF_IDLE`] for a link the overlay
    /// opened for itself (never longer than `idle_close` either).
    pub(super) fn idle_limit(&self, id: NodeId, cfg: &OverlayConfig) -> Duration {
        if self.brief.contains(&id) {
            BRIEF_IDLE.min(cfg.idle_close)
        } else {
            cfg.idle_close
        }
    }

    pub(super) fn add_passive(&mut self, id: NodeId, cfg: &OverlayConfig) {
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
    /// with `Disconnect`) if there is no [room](State::room) for it.
    pub(super) fn add_active(&mut self, id: NodeId, cfg: &OverlayConfig, out: &mut Out) {
        if id == self.me_id || self.active.contains(&id) {
            return;
        }
        self.passive.retain(|p| *p != id);
        self.asking.remove(&id);
        self.brief.remove(&id);
        if self.active.len() >= self.room(cfg) {
            let i = self.rand(self.active.len());
            let old = self.active.swap_remove(i);
            out.send.push((old, Msg::Disconnect));
            self.brief.insert(old);
            self.add_passive(old, cfg);
        }
        self.active.push(id);
    }

    pub(super) fn drop_member(&mut self, id: NodeId) {
        self.active.retain(|a| *a != id);
        self.passive.retain(|a| *a != id);
        self.asking.remove(&id);
        self.suspects.remove(&id);
    }

    /// Merges one record; `true` if it changed this node's list (and so is
    /// news to flood). `connected` says whether `id` is held up by a live
    /// connection of the active view.
    pub(super) fn merge(
        &mut self,
        m: &Member,
        connected: &dyn Fn(NodeId) -> bool,
        out: &mut Out,
    ) -> bool {
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
        // Most records a node hears it knows already (each news reaches it
        // from most neighbours, and a digest's whole list is mostly old):
        // those are told apart without a copy or an address parse.
        let (newer, was_up) = match self.members.get(&id) {
            None => (true, false),
            Some(k) => (newer(m.inc, m.up, (k.inc, k.up)), k.up),
        };
        if !newer {
            return false;
        }
        let Ok(addr) = m.addr.parse::<SocketAddr>() else {
            return false;
        };
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
        self.members.insert(
            id,
            Known {
                name: m.name.clone(),
                addr,
                addr_text: addr.to_string(),
                inc: m.inc,
                up: m.up,
            },
        );
        if m.up && !was_up {
            self.up += 1;
            out.up.push((id, m.name.clone(), addr));
        } else if !m.up && was_up {
            self.up -= 1;
            self.drop_member(id);
            out.down.push(id);
            out.disconnect.push(id);
        }
        true
    }

    /// Floods `news` over the active view (but to `except`, where it came
    /// from, and to neighbours that send the same record before it leaves:
    /// [`State::heard_again`]): gathered, and sent at the next tick as one
    /// `Gossip` per neighbour ([`State::send_news`]). One message per piece
    /// of news was 98 % of the overlay's messages at N = 256 (each node hears
    /// each join, down and refutation from most of its neighbours) and
    /// kept the hosts' I/O threads saturated; a tick's news in one
    /// message costs at most a tick per hop.
    pub(super) fn flood(&mut self, news: Vec<Member>, except: Option<NodeId>, _out: &mut Out) {
        for m in news {
            // The latest record of a member replaces an earlier one (it
            // won the merge that made it news), found by its id: a search
            // of the list per record made a joiner's first list (a
            // thousand members, all news) a million name comparisons.
            let news = News {
                rec: m,
                from: except,
                also: Vec::new(),
            };
            match self.news_at.entry(NodeId::from_name(&news.rec.name)) {
                Entry::Occupied(e) => self.news[*e.get()] = news,
                Entry::Vacant(e) => {
                    e.insert(self.news.len());
                    self.news.push(news);
                }
            }
        }
    }

    /// `from` sent `m`, which was no news here: if the same record (same
    /// incarnation, same state) waits to be flooded, `from` holds it and
    /// the flood skips it. While a cluster forms, each record reaches a
    /// node from most of its neighbours, and a third of the records a
    /// node received (1,000 nodes, 4 hosts: 0.73-0.86 M of 2.2-2.6 M per
    /// host) came while the same record waited in its news, from a
    /// neighbour it was about to send it back to.
    pub(super) fn heard_again(&mut self, id: NodeId, m: &Member, from: NodeId) {
        if let Some(&i) = self.news_at.get(&id) {
            let n = &mut self.news[i];
            if n.rec.inc == m.inc && n.rec.up == m.up && !n.held_by(from) {
                n.also.push(from);
            }
        }
    }

    /// Whether the news gathered may be flooded at `now`; if so, notes the
    /// flood and sets the gap before the next. A flood that follows the
    /// last within two gaps doubles the gap, up to [`MAX_GOSSIP_TICKS`]
    /// ticks; after a quiet spell it is one tick again. Each flood costs a
    /// message per neighbour whatever it carries, so news that never stops
    /// (a forming cluster, or a wave of suspicions and refutations: about
    /// 20 a second at N = 512 while it lasted) made every node send to
    /// every neighbour at every tick, tens of thousands of messages a
    /// second, which starved the heartbeats and fed the wave (a false
    /// down, then its refutation, is news again). The gap bounds that to
    /// one message per neighbour per `MAX_GOSSIP_TICKS` ticks, at the price
    /// of news that lags by as much per hop while the stream lasts.
    pub(super) fn gossip_due(&mut self, cfg: &OverlayConfig, now: Instant) -> bool {
        let since = self.last_gossip.map(|t| now.duration_since(t));
        let gap = self.gossip_gap.max(cfg.tick);
        if since.is_some_and(|s| s < self.gossip_gap) {
            return false;
        }
        self.gossip_gap = match since {
            Some(s) if s < gap * 2 => (gap * 2).min(cfg.tick * MAX_GOSSIP_TICKS),
            _ => cfg.tick,
        };
        self.last_gossip = Some(now);
        true
    }

    /// Sends the news gathered since the last tick (see [`State::flood`]).
    pub(super) fn send_news(&mut self, out: &mut Out) {
        if self.news.is_empty() {
            return;
        }
        let news = std::mem::take(&mut self.news);
        self.news_at.clear();
        for a in &self.active {
            let members: Vec<Member> = news
                .iter()
                .filter(|n| !n.held_by(*a))
                .map(|n| n.rec.clone())
                .collect();
            if !members.is_empty() {
                out.send.push((*a, Msg::Gossip { members }));
            }
        }
    }

    pub(super) fn declare_down(&mut self, id: NodeId, out: &mut Out) {
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

    /// The connection to `id` went; `agreed` if both sides closed it idle.
    /// An active neighbour lost to a failure is suspected; one lost to an
    /// agreed close is not (it goes to the passive view and the tick fills
    /// its place). Each side agrees to the close only while it does not
    /// need the connection, but either may take the other into its active
    /// view during the close's round trip: in a 70 s run of 1,000 nodes
    /// forming on two cores, 661 active neighbours were lost so, each
    /// followed by an indirect probe.
    pub(super) fn conn_lost(
        &mut self,
        id: NodeId,
        agreed: bool,
        cfg: &OverlayConfig,
        out: &mut Out,
    ) {
        self.usage.remove(&id);
        self.told.remove(&id);
        self.brief.remove(&id);
        self.asking.remove(&id);
        if self.joining.is_some_and(|(c, _)| c == id) {
            self.joining = None;
        }
        if self.active.contains(&id) {
            self.active.retain(|a| *a != id);
            if agreed {
                self.add_passive(id, cfg);
            } else {
                self.suspect(id, cfg, out);
            }
        }
    }

    /// An active neighbour's connection went: ask others to reach it.
    pub(super) fn suspect(&mut self, id: NodeId, cfg: &OverlayConfig, out: &mut Out) {
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

    /// Sends a shuffle's answer one step back: straight to its origin if
    /// connected there, else to the last hop left on its route (or the
    /// origin when none is left).
    fn route_back(
        &self,
        sample: Vec<Member>,
        mut route: Vec<u64>,
        origin: u64,
        connected: &dyn Fn(NodeId) -> bool,
        out: &mut Out,
    ) {
        let o = NodeId(origin);
        let next = if connected(o) {
            route.clear();
            o
        } else {
            route.pop().map_or(o, NodeId)
        };
        let reply = Msg::ShuffleReply {
            sample,
            route,
            origin,
        };
        out.send.push((next, reply));
    }

    pub(super) fn probe_answer(
        &mut self,
        sid: NodeId,
        alive: bool,
        cfg: &OverlayConfig,
        out: &mut Out,
    ) {
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

pub(super) fn handle(
    st: &mut State,
    cfg: &OverlayConfig,
    out: &mut Out,
    from: NodeId,
    msg: Msg,
    connected: &dyn Fn(NodeId) -> bool,
) {
    st.one_sided(from, &msg, cfg, out);
    let mut news = Vec::new();
    let mut merge = |st: &mut State, out: &mut Out, m: &Member| {
        if st.merge(m, connected, out) {
            news.push(m.clone());
        } else if !st.news.is_empty() {
            st.heard_again(NodeId::from_name(&m.name), m, from);
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
                    want: Vec::new(),
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
            let accepted = st.active.contains(&from) || high || st.active.len() < st.room(cfg);
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
                st.refused = Some(Instant::now());
                st.brief.insert(from);
                st.add_passive(from, cfg);
            }
        }
        Msg::Disconnect => {
            if st.active.contains(&from) {
                st.active.retain(|a| *a != from);
                st.brief.insert(from);
            }
            st.add_passive(from, cfg);
        }
        Msg::Shuffle {
            origin,
            sample,
            ttl,
            mut path,
        } => {
            if path.len() > PRWL as usize {
                return; // Longer than any walk this protocol makes.
            }
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
                Some(to) => {
                    path.push(st.me_id.0);
                    out.send.push((
                        to,
                        Msg::Shuffle {
                            origin,
                            sample,
                            ttl: ttl - 1,
                            path,
                        },
                    ))
                }
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
                    st.route_back(reply, path, o.0, connected, out);
                    for m in &sample {
                        st.add_passive(NodeId::from_name(&m.name), cfg);
                    }
                }
                None => {}
            }
        }
        Msg::ShuffleReply {
            sample,
            route,
            origin,
        } => {
            if NodeId(origin) != st.me_id {
                if route.len() <= PRWL as usize {
                    st.route_back(sample, route, origin, connected, out);
                }
                return;
            }
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
        Msg::SyncDigest { digest } => {
            if digest != st.digest() {
                out.send.push((
                    from,
                    Msg::SyncStamps {
                        stamps: st.stamps(),
                    },
                ));
            }
        }
        Msg::SyncStamps { stamps } => {
            let (members, want) = st.compare(&stamps, connected, out);
            if !members.is_empty() || !want.is_empty() {
                out.send.push((
                    from,
                    Msg::Sync {
                        members,
                        reply: false,
                        want,
                    },
                ));
            }
        }
        Msg::Sync {
            members,
            reply,
            want,
        } => {
            if st.joining.is_some_and(|(c, _)| c == from) {
                // The contact's list: the join is done.
                st.joining = None;
            }
            for m in &members {
                merge(st, out, m);
            }
            let back = if reply { st.all() } else { st.records(&want) };
            if !back.is_empty() {
                out.send.push((
                    from,
                    Msg::Sync {
                        members: back,
                        reply: false,
                        want: Vec::new(),
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

/// The periodic work on the state; `usage` is (connected node, frames
/// and bytes queued, watched) for each connection. Returns when the next
/// tick is due if nothing changes meanwhile: `None` for the next short
/// tick (news flooded or to flood, a view to fill or trim), else the first
/// deadline ahead: a periodic round (shuffle, digest, probe), a suspect's or an
/// ask's timeout, an on-demand connection's idle limit. A change that may
/// need a tick sooner is told by [`State::wants_tick`].
pub(super) fn tick(
    st: &mut State,
    cfg: &OverlayConfig,
    out: &mut Out,
    usage: &[(NodeId, u64, bool)],
) -> Option<Instant> {
    let now = Instant::now();
    // A tick that sent news is followed by a short one: news that comes
    // meanwhile waits for it and leaves with the rest, one message per
    // neighbour. (Napping after each flood, the thread was woken by the
    // next news at once: while a cluster formed, a message of two or
    // three records per neighbour and a wake-up for each news received.)
    let mut in_progress = !st.news.is_empty();
    if in_progress && st.gossip_due(cfg, now) {
        st.send_news(out);
    }
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
    let backoff = !st.active.is_empty()
        && st
            .refused
            .is_some_and(|t| now.duration_since(t) < ASK_BACKOFF);
    if st.active.len() + st.asking.len() < target && st.asking.len() < MAX_ASKS && !backoff {
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
            in_progress = true;
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
    if st.active.len() > st.room(cfg) {
        in_progress = true;
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
                    path: Vec::new(),
                },
            ));
        }
    }
    if now.duration_since(st.last_sync) >= cfg.sync_every {
        st.last_sync = now;
        if let Some(to) = st.pick(&active, &[]) {
            out.send.push((
                to,
                Msg::SyncDigest {
                    digest: st.digest(),
                },
            ));
        }
    }
    // Every node checks one member: the cluster's checks are N per
    // `probe_every`, each a connect, a handshake and a close. Past
    // `PROBE_SCALE` members the interval grows with N, so the cluster
    // checks about `PROBE_SCALE` members per `probe_every` whatever its
    // size (at N = 256, one a second per node was 500 connections a second
    // on the machine, most left in TIME-WAIT; at 1,000 more than the
    // ephemeral ports allow in a minute).
    let scale = (st.members.len() / PROBE_SCALE).max(1) as u32;
    if now.duration_since(st.last_probe) >= cfg.probe_every * scale {
        st.last_probe = now;
        // One random member outside the active view, up or down: an
        // up one unreachable is suspected; a down one reached is
        // told (it refutes, and a healed partition joins again). A node
        // with no neighbour suspects nobody: it cannot tell its own
        // isolation from the others' failure, and its verdicts are
        // flooded once it has neighbours again (in a 1,000-node run on
        // two cores, a host whose nodes had none declared 1,304 downs,
        // 115 in a healthy host).
        let all: Vec<NodeId> = st.members.keys().copied().collect();
        if let Some(id) = st.pick(&all, &active) {
            let k = st.members[&id].clone();
            if !k.up {
                out.send.push((
                    id,
                    Msg::Sync {
                        members: st.all(),
                        reply: true,
                        want: Vec::new(),
                    },
                ));
            } else if !active.is_empty() {
                out.probe.push((None, k.wire()));
                st.suspects.entry(id).or_insert(Suspect {
                    deadline: now + cfg.probe_timeout,
                    waiting: 1,
                    direct: true,
                });
            }
        }
    }
    // Close idle on-demand connections; note when the next may be.
    let mut idle_due: Option<Instant> = None;
    for (id, count, watched) in usage {
        if st.needs(*id) {
            st.usage.insert(*id, (*count, now));
            continue;
        }
        let limit = st.idle_limit(*id, cfg);
        let e = st.usage.entry(*id).or_insert((*count, now));
        if e.0 != *count || *watched {
            *e = (*count, now);
        } else if now.duration_since(e.1) >= limit {
            out.close_idle.push((*id, *count));
            *e = (*count, now);
            st.brief.remove(id);
        }
        let since = st.usage[id].1;
        let due = since + st.idle_limit(*id, cfg);
        idle_due = Some(idle_due.map_or(due, |d| d.min(due)));
    }
    if in_progress {
        return None;
    }
    // Nothing to do before the first of these, unless a change says so.
    let rounds = [
        st.last_shuffle + cfg.shuffle_every,
        st.last_sync + cfg.sync_every,
        st.last_probe + cfg.probe_every * scale,
    ];
    let suspects = st.suspects.values().map(|s| s.deadline);
    let asks = st.asking.values().map(|t| *t + ASK_TIMEOUT);
    rounds
        .into_iter()
        .chain(suspects)
        .chain(asks)
        .chain(idle_due)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> OverlayConfig {
        OverlayConfig::default().active_size(2)
    }

    fn id(name: &str) -> NodeId {
        NodeId::from_name(name)
    }

    fn member(name: &str, inc: u64, up: bool) -> Member {
        let port = 1000 + name.bytes().map(u16::from).sum::<u16>();
        Member {
            name: name.into(),
            addr: format!("127.0.0.1:{port}"),
            inc,
            up,
        }
    }

    fn state(name: &str) -> State {
        State::new(member(name, 10, true), Instant::now())
    }

    /// `st` knows `name` (up, incarnation 5).
    fn know(st: &mut State, name: &str) -> NodeId {
        assert!(st.merge(&member(name, 5, true), &|_| false, &mut Out::default()));
        id(name)
    }

    fn sent_to(out: &Out, to: NodeId) -> Vec<&Msg> {
        out.send
            .iter()
            .filter(|(t, _)| *t == to)
            .map(|(_, m)| m)
            .collect()
    }

    const NOT_CONNECTED: &dyn Fn(NodeId) -> bool = &|_| false;

    /// Two nodes that know the same records have the same digest, whatever
    /// the order they learnt them in; a digest that differs is answered
    /// with the list's stamps, an equal one with nothing. The periodic
    /// anti-entropy sends the digest.
    #[test]
    fn the_anti_entropy_sends_a_digest_and_stamps_only_when_they_differ() {
        let learn = |st: &mut State, m: Member| {
            st.merge(&m, NOT_CONNECTED, &mut Out::default());
        };
        let (mut a, mut b) = (state("a"), state("b"));
        learn(&mut a, member("x", 5, true));
        learn(&mut a, member("b", 10, true));
        learn(&mut b, member("a", 10, true));
        learn(&mut b, member("x", 5, true));
        (a.active, b.active) = (vec![id("b")], vec![id("a")]);
        assert_eq!(a.digest(), b.digest());
        // a is sent b's digest.
        let told = |a: &mut State, b: &State, out: &mut Out| {
            let digest = b.digest();
            handle(
                a,
                &cfg(),
                out,
                id("b"),
                Msg::SyncDigest { digest },
                NOT_CONNECTED,
            );
        };
        let mut out = Out::default();
        told(&mut a, &b, &mut out);
        assert!(out.send.is_empty(), "the same records: nothing to send");
        // b learns that x went down: the digests differ.
        learn(&mut b, member("x", 5, false));
        assert_ne!(a.digest(), b.digest());
        told(&mut a, &b, &mut out);
        assert!(matches!(
            sent_to(&out, id("b"))[..],
            [Msg::SyncStamps { ref stamps }] if stamps.len() == 3
        ));
        // A newer incarnation changes it too.
        let before = a.digest();
        learn(&mut a, member("x", 6, true));
        assert_ne!(a.digest(), before);
        // The periodic sync sends the digest, not the list.
        let mut a = state("a");
        let n = know(&mut a, "n");
        a.active.push(n);
        a.last_sync = Instant::now() - Duration::from_secs(60);
        let mut out = Out::default();
        tick(&mut a, &cfg(), &mut out, &[]);
        let d = a.digest();
        assert!(
            sent_to(&out, n)
                .iter()
                .any(|m| matches!(m, Msg::SyncDigest { digest } if *digest == d)),
            "{:?}",
            out.send
        );
    }

    /// A tick that floods news asks for the short tick next (news that
    /// comes meanwhile then waits for it, and leaves with the rest); a
    /// tick with nothing to flood goes back to the periodic rounds.
    #[test]
    fn a_tick_that_floods_news_is_followed_by_a_short_one() {
        let mut st = state("a");
        let n = know(&mut st, "n");
        st.active.push(n);
        // Settled: the view full for two members, the rounds just run.
        let m = know(&mut st, "m");
        st.active.push(m);
        let mut out = Out::default();
        st.news.clear();
        st.news_at.clear();
        assert!(
            tick(&mut st, &cfg(), &mut out, &[]).is_some(),
            "nothing to do"
        );
        st.merge(&member("x", 5, true), NOT_CONNECTED, &mut out);
        st.flood(vec![member("x", 5, true)], None, &mut out);
        let mut out = Out::default();
        assert_eq!(
            tick(&mut st, &cfg(), &mut out, &[]),
            None,
            "flooded: a short tick next"
        );
        assert!(sent_to(&out, n)
            .iter()
            .any(|m| matches!(m, Msg::Gossip { .. })));
        assert!(st.news.is_empty());
        let mut out = Out::default();
        assert!(
            tick(&mut st, &cfg(), &mut out, &[]).is_some(),
            "then the rounds"
        );
    }

    /// News that keeps coming is flooded at gaps that double from one
    /// tick up to `MAX_GOSSIP_TICKS` ticks; after a quiet spell of two gaps
    /// the next news leaves at once and the gap is one tick again. News
    /// that waits for its gap keeps the ticks short and is not sent.
    #[test]
    fn news_that_never_stops_is_flooded_at_growing_gaps() {
        let cfg = cfg();
        let tick = cfg.tick;
        let mut st = state("a");
        let t0 = Instant::now();
        let floods: Vec<u32> = (0..40)
            .filter(|k| st.gossip_due(&cfg, t0 + tick * *k))
            .collect();
        assert_eq!(floods, [0, 1, 3, 7, 15, 23, 31, 39]);
        let quiet = t0 + tick * (39 + 2 * MAX_GOSSIP_TICKS);
        assert!(st.gossip_due(&cfg, quiet));
        assert_eq!(st.gossip_gap, tick);
        // In a tick: news within the gap waits, and the tick stays short.
        let mut st = state("a");
        let n = know(&mut st, "n");
        st.active.push(n);
        let mut out = Out::default();
        for x in ["x", "y"] {
            st.merge(&member(x, 5, true), NOT_CONNECTED, &mut out);
            st.flood(vec![member(x, 5, true)], None, &mut out);
            if x == "x" {
                super::tick(&mut st, &cfg, &mut out, &[]);
                assert!(matches!(sent_to(&out, n)[..], [Msg::Gossip { .. }]));
            }
        }
        st.gossip_gap = tick * MAX_GOSSIP_TICKS;
        let mut out = Out::default();
        assert_eq!(
            super::tick(&mut st, &cfg, &mut out, &[]),
            None,
            "news waits: short tick"
        );
        assert!(sent_to(&out, n).is_empty() && st.news.len() == 1);
    }

    /// After a digest that differs, the stamps, the records newer on the
    /// digest's sender with the ids it wants, and the wanted records: both
    /// lists end the same, and only the records that differ travel whole.
    /// A node held down by the other refutes on seeing the stamp.
    #[test]
    fn stamps_bring_two_lists_together_with_only_what_differs() {
        let learn = |st: &mut State, m: Member| {
            st.merge(&m, NOT_CONNECTED, &mut Out::default());
        };
        let (mut a, mut b) = (state("a"), state("b"));
        for x in 0..50 {
            learn(&mut a, member(&format!("x{x}"), 5, true));
            learn(&mut b, member(&format!("x{x}"), 5, true));
        }
        learn(&mut a, member("b", 10, true));
        learn(&mut b, member("a", 10, true));
        learn(&mut a, member("only-a", 3, true));
        learn(&mut b, member("only-b", 4, true));
        learn(&mut a, member("x1", 6, true)); // newer on a
        learn(&mut b, member("x2", 5, false)); // down on b
        learn(&mut b, member("x3", 7, true)); // newer on b
        (a.active, b.active) = (vec![id("b")], vec![id("a")]);
        let before = a.me.inc;
        // Messages from one state to the other until there are none.
        let deliver = |to: &mut State, from: &str, msg: Msg| {
            let mut out = Out::default();
            handle(to, &cfg(), &mut out, id(from), msg, NOT_CONNECTED);
            out.send.into_iter().map(|(_, m)| m).collect::<Vec<_>>()
        };
        // a has sent its digest; b answers with its stamps.
        let d = a.digest();
        let stamps = deliver(&mut b, "a", Msg::SyncDigest { digest: d });
        let [Msg::SyncStamps { .. }] = &stamps[..] else {
            panic!("{stamps:?}")
        };
        let sync = deliver(&mut a, "b", stamps.into_iter().next().unwrap());
        let [Msg::Sync {
            members,
            want,
            reply: false,
        }] = &sync[..]
        else {
            panic!("{sync:?}")
        };
        let mut given: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        given.sort();
        assert_eq!(given, ["only-a", "x1"], "only what b lacks or has older");
        let mut wanted = want.clone();
        wanted.sort();
        let mut expect = vec![id("only-b").0, id("x2").0, id("x3").0];
        expect.sort();
        assert_eq!(wanted, expect);
        let back = deliver(&mut b, "a", sync.into_iter().next().unwrap());
        let [Msg::Sync { members, .. }] = &back[..] else {
            panic!("{back:?}")
        };
        assert_eq!(members.len(), 3);
        deliver(&mut a, "b", back.into_iter().next().unwrap());
        assert_eq!(a.digest(), b.digest(), "the same lists");
        assert_eq!(a.me.inc, before);
        // b holds a down: a sees its own stamp newer and refutes.
        learn(&mut b, member("a", 10, false));
        let stamps = b.stamps();
        let mut out = Out::default();
        handle(
            &mut a,
            &cfg(),
            &mut out,
            id("b"),
            Msg::SyncStamps { stamps },
            NOT_CONNECTED,
        );
        assert!(a.me.inc > 10 && a.me.up, "refuted");
    }

    /// A shuffle walks o → h1 → h2 → e and ends at e; the answer comes
    /// back the way the walk went (e → h2 → h1 → o) when e is not
    /// connected to o, and only o takes the sample; a hop connected to the
    /// origin sends it there at once.
    #[test]
    fn a_shuffle_answer_goes_back_along_the_walk() {
        let (o, h1, h2, e) = (id("o"), id("h1"), id("h2"), id("e"));
        // A node whose active view is `from` and `next` (the walk goes on
        // to `next`), or `from` alone (the walk ends there).
        let node = |me: &str, from: &str, next: Option<&str>| {
            let mut st = state(me);
            for n in [Some(from), next].into_iter().flatten() {
                let k = know(&mut st, n);
                st.active.push(k);
            }
            st
        };
        let deliver =
            |st: &mut State, from: NodeId, msg: Msg, connected: &dyn Fn(NodeId) -> bool| {
                let mut out = Out::default();
                handle(st, &cfg(), &mut out, from, msg, connected);
                out.send
                    .into_iter()
                    .filter(|(_, m)| matches!(m, Msg::Shuffle { .. } | Msg::ShuffleReply { .. }))
                    .collect::<Vec<_>>()
            };
        let walk = Msg::Shuffle {
            origin: member("o", 1, true),
            sample: vec![member("o", 1, true), member("s", 1, true)],
            ttl: PRWL,
            path: Vec::new(),
        };
        let (mut n1, mut n2) = (node("h1", "o", Some("h2")), node("h2", "h1", Some("e")));
        let mut end = node("e", "h2", None);
        let sent = deliver(&mut n1, o, walk, NOT_CONNECTED);
        let [(to, Msg::Shuffle { path, .. })] = &sent[..] else {
            panic!("{sent:?}")
        };
        assert_eq!((*to, path.clone()), (h2, vec![h1.0]));
        let sent = deliver(
            &mut n2,
            h1,
            sent.into_iter().next().unwrap().1,
            NOT_CONNECTED,
        );
        let [(to, Msg::Shuffle { path, .. })] = &sent[..] else {
            panic!("{sent:?}")
        };
        assert_eq!((*to, path.clone()), (e, vec![h1.0, h2.0]));
        // The walk ends at e (one neighbour), which answers back to h2.
        let p = know(&mut end, "p");
        end.passive.push(p);
        let sent = deliver(
            &mut end,
            h2,
            sent.into_iter().next().unwrap().1,
            NOT_CONNECTED,
        );
        let [(to, Msg::ShuffleReply { route, .. })] = &sent[..] else {
            panic!("{sent:?}")
        };
        assert_eq!((*to, route.clone()), (h2, vec![h1.0]));
        let reply = sent.into_iter().next().unwrap().1;
        // h2 passes it on to h1, h1 to o; neither takes the sample.
        let before = n2.passive.len();
        let sent = deliver(&mut n2, e, reply, NOT_CONNECTED);
        assert_eq!(n2.passive.len(), before);
        let [(to, Msg::ShuffleReply { route, .. })] = &sent[..] else {
            panic!("{sent:?}")
        };
        assert_eq!((*to, route.len()), (h1, 0));
        let reply = sent.into_iter().next().unwrap().1;
        let mut sent = deliver(&mut n1, h2, reply, NOT_CONNECTED);
        assert!(matches!(sent[..], [(to, Msg::ShuffleReply { .. })] if to == o));
        let reply = sent.pop().unwrap().1;
        // A hop connected to the origin sends it straight there.
        let mut n2 = node("h2", "h1", Some("e"));
        let long = Msg::ShuffleReply {
            sample: vec![member("p", 1, true)],
            route: vec![h1.0],
            origin: o.0,
        };
        let sent = deliver(&mut n2, e, long, &|x| x == o);
        assert!(
            matches!(sent[..], [(to, Msg::ShuffleReply { ref route, .. })] if to == o && route.is_empty())
        );
        // The origin takes the sample into its passive view.
        let mut origin = node("o", "h1", None);
        deliver(&mut origin, h1, reply, NOT_CONNECTED);
        assert!(origin.passive.contains(&id("p")));
    }

    #[test]
    fn a_join_takes_the_joiner_and_starts_walks_on_the_other_neighbours() {
        let mut st = state("c");
        let n1 = know(&mut st, "n1");
        st.active.push(n1);
        let mut out = Out::default();
        handle(
            &mut st,
            &cfg(),
            &mut out,
            id("j"),
            Msg::Join {
                me: member("j", 1, true),
            },
            NOT_CONNECTED,
        );
        assert!(st.active.contains(&id("j")) && st.is_up(id("j")));
        assert_eq!(out.up.len(), 1, "the joiner is announced");
        assert!(matches!(
            sent_to(&out, id("j"))[..],
            [Msg::Sync { reply: false, .. }]
        ));
        st.send_news(&mut out);
        let walks = sent_to(&out, n1);
        assert!(walks
            .iter()
            .any(|m| matches!(m, Msg::ForwardJoin { ttl, .. } if *ttl == ARWL)));
        assert!(
            walks.iter().any(|m| matches!(m, Msg::Gossip { .. })),
            "news flooded"
        );
    }

    #[test]
    fn a_forward_join_walk_goes_on_then_ends_in_a_neighbour_request() {
        let cfg = cfg();
        let (j, from) = (member("j", 1, true), id("f"));
        // A walker `w` whose active view is `f` (the sender) and `others`.
        let walker = |others: &[&str]| {
            let mut st = state("w");
            st.active = vec![know(&mut st, "f")];
            for o in others {
                let o = know(&mut st, o);
                st.active.push(o);
            }
            (st, Out::default())
        };
        // Alive walk, ttl = PRWL: the joiner goes into the passive view and
        // the walk goes on to another neighbour.
        let (mut st, mut out) = walker(&["n2"]);
        let n2 = id("n2");
        let msg = Msg::ForwardJoin {
            joiner: j.clone(),
            ttl: PRWL,
        };
        handle(&mut st, &cfg, &mut out, from, msg, NOT_CONNECTED);
        assert!(st.passive.contains(&id("j")));
        assert!(sent_to(&out, n2)
            .iter()
            .any(|m| matches!(m, Msg::ForwardJoin { ttl, .. } if *ttl == PRWL - 1)));
        // ttl 0: the walk ends here; this node asks the joiner, with priority.
        let (mut st, mut out) = walker(&["n2"]);
        let msg = Msg::ForwardJoin {
            joiner: j.clone(),
            ttl: 0,
        };
        handle(&mut st, &cfg, &mut out, from, msg, NOT_CONNECTED);
        assert!(st.asking.contains_key(&id("j")));
        assert!(matches!(
            sent_to(&out, id("j"))[..],
            [Msg::Neighbor { high: true, .. }]
        ));
        // A node with one neighbour (the sender) ends the walk too.
        let (mut st, mut out) = walker(&[]);
        let msg = Msg::ForwardJoin { joiner: j, ttl: 5 };
        handle(&mut st, &cfg, &mut out, from, msg, NOT_CONNECTED);
        assert!(st.asking.contains_key(&id("j")));
    }

    #[test]
    fn a_full_active_view_evicts_a_neighbour_into_the_passive_view() {
        let cfg = cfg();
        let mut st = state("e");
        let (x, y, z) = (know(&mut st, "x"), know(&mut st, "y"), know(&mut st, "z"));
        let w = know(&mut st, "w");
        let mut out = Out::default();
        st.add_active(x, &cfg, &mut out);
        st.add_active(y, &cfg, &mut out);
        st.add_active(z, &cfg, &mut out);
        assert!(
            out.send.is_empty(),
            "room for the target (two) and one more"
        );
        st.add_active(w, &cfg, &mut out);
        assert_eq!(st.active.len(), 3);
        assert!(st.active.contains(&w));
        let [(old, Msg::Disconnect)] = &out.send[..] else {
            panic!("one Disconnect");
        };
        assert!([x, y, z].contains(old));
        assert!(st.passive.contains(old) && st.brief.contains(old));
        assert!(out.disconnect.is_empty(), "demoted, not disconnected");
        // The evicted side drops this node from its active view only.
        let mut ev = state("x");
        let e = know(&mut ev, "e");
        ev.active.push(e);
        let mut out = Out::default();
        handle(
            &mut ev,
            &cfg,
            &mut out,
            id("e"),
            Msg::Disconnect,
            NOT_CONNECTED,
        );
        assert!(ev.active.is_empty() && ev.passive.contains(&id("e")));
        assert!(out.disconnect.is_empty());
    }

    /// A node at its target takes one more neighbour that asks (without
    /// dropping one); a node with no room left refuses, unless asked with
    /// priority.
    #[test]
    fn a_node_at_its_target_takes_one_more_neighbour() {
        let cfg = cfg();
        let mut st = state("t");
        let (x, y) = (know(&mut st, "x"), know(&mut st, "y"));
        st.active = vec![x, y];
        let ask = |st: &mut State, from: &str, high: bool| {
            let me = member(from, 1, true);
            let mut out = Out::default();
            handle(
                st,
                &cfg,
                &mut out,
                id(from),
                Msg::Neighbor { me, high },
                NOT_CONNECTED,
            );
            out.send
        };
        let sent = ask(&mut st, "a", false);
        assert!(matches!(
            sent[..],
            [(_, Msg::NeighborReply { accepted: true })]
        ));
        assert_eq!(st.active.len(), 3);
        let sent = ask(&mut st, "b", false);
        assert!(matches!(
            sent[..],
            [(_, Msg::NeighborReply { accepted: false })]
        ));
        assert_eq!(st.active.len(), 3);
        let sent = ask(&mut st, "c", true);
        assert!(matches!(
            sent[..],
            [
                (_, Msg::Disconnect),
                (_, Msg::NeighborReply { accepted: true })
            ]
        ));
        assert!(st.active.len() == 3 && st.active.contains(&id("c")));
        // Nor does a node at its target ask for more.
        let mut out = Out::default();
        st.active = vec![x, y];
        tick(&mut st, &cfg, &mut out, &[]);
        assert!(!out
            .send
            .iter()
            .any(|(_, m)| matches!(m, Msg::Neighbor { .. })));
    }

    /// A node with an empty view asks for neighbours a few at a time, the
    /// next once an answer comes, not for its whole target at once.
    #[test]
    fn neighbours_are_asked_a_few_at_a_time() {
        let cfg = OverlayConfig::default().active_size(8);
        let mut st = state("q");
        let all: Vec<NodeId> = (0..20).map(|i| know(&mut st, &format!("m{i}"))).collect();
        let asks = |out: &Out| {
            out.send
                .iter()
                .filter(|(_, m)| matches!(m, Msg::Neighbor { high: true, .. }))
                .count()
        };
        let mut out = Out::default();
        for _ in 0..10 {
            tick(&mut st, &cfg, &mut out, &[]);
        }
        assert_eq!(asks(&out), MAX_ASKS);
        assert_eq!(st.asking.len(), MAX_ASKS);
        let first = *st.asking.keys().next().unwrap();
        assert!(all.contains(&first));
        handle(
            &mut st,
            &cfg,
            &mut out,
            first,
            Msg::NeighborReply { accepted: true },
            NOT_CONNECTED,
        );
        let mut out = Out::default();
        tick(&mut st, &cfg, &mut out, &[]);
        let [(next, Msg::Neighbor { high: false, .. })] = &out.send[..] else {
            panic!("one more ask once an answer came: {:?}", out.send.len());
        };
        assert!(*next != first && st.asking.len() == MAX_ASKS);
    }

    /// A node with no neighbour checks no member that it holds up (it
    /// could not tell its own isolation from their failure); it still
    /// pushes its list to one it holds down.
    #[test]
    fn a_node_with_no_neighbour_suspects_nobody() {
        let cfg = OverlayConfig::default().probe_every(std::time::Duration::from_millis(1));
        let mut st = state("l");
        let x = know(&mut st, "x");
        st.asking.insert(x, Instant::now()); // no asks in the way
        let mut out = Out::default();
        st.last_probe = Instant::now() - std::time::Duration::from_secs(1);
        tick(&mut st, &cfg, &mut out, &[]);
        assert!(out.probe.is_empty() && st.suspects.is_empty());
        // With a neighbour, the same check suspects.
        let a = know(&mut st, "a");
        st.active = vec![a];
        st.last_probe = Instant::now() - std::time::Duration::from_secs(1);
        tick(&mut st, &cfg, &mut out, &[]);
        assert!(st.suspects.get(&x).is_some_and(|s| s.direct));
        // Held down, it is told (so that it refutes), neighbours or not.
        st.active.clear();
        st.suspects.clear();
        st.merge(&member("x", 9, false), NOT_CONNECTED, &mut out);
        st.merge(&member("a", 9, false), NOT_CONNECTED, &mut out);
        let mut out = Out::default();
        st.last_probe = Instant::now() - std::time::Duration::from_secs(1);
        tick(&mut st, &cfg, &mut out, &[]);
        assert!(matches!(
            out.send[..],
            [(to, Msg::Sync { reply: true, .. })] if to == x || to == a
        ));
    }

    /// A node that sends what only a neighbour sends, from outside the
    /// active view, is told (once an `idle_close`) that it is none; other
    /// traffic from outside the view, or anything from a neighbour or a
    /// node asked to be one, tells nothing.
    #[test]
    fn only_what_a_neighbour_sends_tells_a_one_sided_view() {
        let cfg = cfg();
        let mut st = state("o");
        let (x, a, q) = (know(&mut st, "x"), know(&mut st, "a"), know(&mut st, "q"));
        st.active = vec![a];
        st.asking.insert(q, Instant::now());
        let digest = || Msg::SyncDigest { digest: 1 };
        let told = |st: &mut State, from: NodeId, msg: Msg| {
            let mut out = Out::default();
            handle(st, &cfg, &mut out, from, msg, NOT_CONNECTED);
            out.send
                .iter()
                .filter(|(to, m)| *to == from && matches!(m, Msg::Disconnect))
                .count()
        };
        let late_answer = Msg::NeighborReply { accepted: false };
        assert_eq!(
            told(&mut st, x, late_answer),
            0,
            "an answer is no neighbour's"
        );
        let list = Msg::Sync {
            members: Vec::new(),
            reply: false,
            want: Vec::new(),
        };
        assert_eq!(told(&mut st, x, list), 0);
        assert_eq!(told(&mut st, a, digest()), 0, "a neighbour");
        assert_eq!(told(&mut st, q, digest()), 0, "asked to be one");
        assert_eq!(told(&mut st, x, digest()), 1, "one-sided");
        assert_eq!(told(&mut st, x, digest()), 0, "once an idle_close");
        let walk = Msg::ForwardJoin {
            joiner: member("j", 1, true),
            ttl: 3,
        };
        let y = know(&mut st, "y");
        assert_eq!(told(&mut st, y, walk), 1);
        // Busy traffic alone tells nothing at the tick.
        let mut out = Out::default();
        tick(&mut st, &cfg, &mut out, &[(id("z"), 5, false)]);
        tick(&mut st, &cfg, &mut out, &[(id("z"), 9, false)]);
        assert!(!out
            .send
            .iter()
            .any(|(to, m)| *to == id("z") && matches!(m, Msg::Disconnect)));
    }

    /// A joiner takes every neighbour its join's walks bring while its
    /// contact's list has not come (it knows too few members to size its
    /// view), and trims to its room once it knows the cluster.
    #[test]
    fn a_joiner_keeps_the_neighbours_its_walks_bring_until_its_list_comes() {
        let cfg = cfg();
        let mut st = state("j");
        let c = know(&mut st, "c");
        st.joining = Some((c, Instant::now()));
        st.active = vec![c];
        for w in ["w1", "w2", "w3", "w4"] {
            let mut out = Out::default();
            let me = member(w, 1, true);
            handle(
                &mut st,
                &cfg,
                &mut out,
                id(w),
                Msg::Neighbor { me, high: true },
                NOT_CONNECTED,
            );
            assert!(
                !out.send.iter().any(|(_, m)| matches!(m, Msg::Disconnect)),
                "nobody dropped while the list is awaited"
            );
        }
        assert_eq!(st.active.len(), 5);
        let list = Msg::Sync {
            members: vec![member("c", 1, true)],
            reply: false,
            want: Vec::new(),
        };
        let mut out = Out::default();
        handle(&mut st, &cfg, &mut out, c, list, NOT_CONNECTED);
        for _ in 0..4 {
            tick(&mut st, &cfg, &mut out, &[]);
        }
        assert_eq!(st.active.len(), st.room(&cfg), "trimmed to the room");
    }

    /// A member held down is refused until it asks with a newer record of
    /// its own: a node with no neighbour refutes to nobody, so its
    /// requests are what carry the refutation.
    #[test]
    fn a_member_held_down_is_taken_back_by_its_newer_record() {
        let mut st = state("h");
        let x = know(&mut st, "x");
        let mut out = Out::default();
        st.merge(&member("x", 5, false), NOT_CONNECTED, &mut out);
        let ask = |inc| Msg::Neighbor {
            me: member("x", inc, true),
            high: true,
        };
        let told = st
            .held_down(x, &ask(5))
            .expect("the same incarnation is refused");
        assert!(!told.up && told.inc == 5);
        assert!(st.held_down(x, &Msg::Disconnect).is_some());
        let join = Msg::Join {
            me: member("x", 5, true),
        };
        assert!(st.held_down(x, &join).is_some());
        // Another member's newer record proves nothing of the sender.
        assert!(
            st.held_down(id("y"), &ask(6)).is_none(),
            "y is no member held down"
        );
        let theirs = Msg::Neighbor {
            me: member("y", 9, true),
            high: true,
        };
        assert!(st.held_down(x, &theirs).is_some());
        assert!(st.held_down(x, &ask(6)).is_none(), "refuted");
        handle(&mut st, &cfg(), &mut out, x, ask(6), NOT_CONNECTED);
        assert!(st.is_up(x) && st.active.contains(&x));
    }

    /// An idle on-demand connection is proposed for closing with the count
    /// it was idle at (the close itself rechecks that count, see
    /// `Dist::propose_idle_close`); a watched or busy one is not.
    #[test]
    fn an_idle_connection_is_closed_with_its_count_a_watched_or_busy_one_kept() {
        let cfg = cfg();
        let mut st = state("i");
        let x = know(&mut st, "x");
        // A full active view, so that x is not asked to join it.
        let (a, b) = (know(&mut st, "a"), know(&mut st, "b"));
        st.active = vec![a, b];
        let long_ago = Instant::now() - std::time::Duration::from_secs(10);
        for (count, watched, closed) in [(7, true, false), (8, false, false), (8, false, true)] {
            if closed {
                st.usage.insert(x, (8, long_ago));
            } else {
                st.usage.insert(x, (7, long_ago));
            }
            let mut out = Out::default();
            tick(&mut st, &cfg, &mut out, &[(x, count, watched)]);
            assert!(out.disconnect.is_empty());
            let want = if closed { vec![(x, 8)] } else { vec![] };
            assert_eq!(out.close_idle, want, "count {count}, watched {watched}");
        }
    }

    /// An active neighbour whose connection fails is suspected (this node
    /// and `probes` others try to reach it); one whose connection both
    /// sides closed idle is not: it goes to the passive view, and no probe
    /// starts.
    #[test]
    fn an_agreed_close_of_a_neighbour_is_no_failure() {
        let cfg = cfg();
        let mut st = state("a");
        let (x, y, z) = (know(&mut st, "x"), know(&mut st, "y"), know(&mut st, "z"));
        let w = know(&mut st, "w");
        st.active.extend([x, y, w]);
        let mut out = Out::default();
        st.conn_lost(x, true, &cfg, &mut out);
        assert_eq!(st.active, vec![y, w]);
        assert!(st.passive.contains(&x));
        assert!(st.suspects.is_empty());
        assert!(
            out.probe.is_empty() && out.send.is_empty(),
            "{:?}",
            out.send
        );
        // A failure of the other is suspected: probed here and by the
        // neighbour left.
        st.conn_lost(y, false, &cfg, &mut out);
        assert_eq!(st.active, vec![w]);
        assert!(st.suspects.contains_key(&y));
        assert_eq!(out.probe.len(), 1);
        assert!(
            matches!(sent_to(&out, w)[..], [Msg::ProbeReq { .. }]),
            "{:?}",
            out.send
        );
        // A connection outside the active view changes no view.
        st.conn_lost(z, false, &cfg, &mut out);
        assert!(!st.suspects.contains_key(&z));
    }

    #[test]
    fn news_skips_the_neighbours_that_sent_the_same_record() {
        let cfg = cfg();
        let mut st = state("m");
        let (a, b, c, d) = (
            know(&mut st, "a"),
            know(&mut st, "b"),
            know(&mut st, "c"),
            know(&mut st, "d"),
        );
        st.active.extend([a, b, c, d]);
        let hear = |st: &mut State, from: NodeId, name: &str, inc: u64| {
            let gossip = Msg::Gossip {
                members: vec![member(name, inc, true)],
            };
            handle(st, &cfg, &mut Out::default(), from, gossip, &|_| false);
        };
        // x comes from a, then again from b before the flood.
        hear(&mut st, a, "x", 5);
        hear(&mut st, b, "x", 5);
        // y comes from a; c sends an older one, d a newer one, which
        // replaces it: only d holds the record that leaves.
        hear(&mut st, a, "y", 5);
        hear(&mut st, c, "y", 4);
        hear(&mut st, d, "y", 6);
        let mut out = Out::default();
        st.send_news(&mut out);
        let names = |to: NodeId| -> Vec<(String, u64)> {
            sent_to(&out, to)
                .iter()
                .flat_map(|m| match m {
                    Msg::Gossip { members } => {
                        members.iter().map(|m| (m.name.clone(), m.inc)).collect()
                    }
                    _ => Vec::new(),
                })
                .collect()
        };
        assert_eq!(names(a), vec![("y".to_string(), 6)]);
        assert_eq!(names(b), vec![("y".to_string(), 6)]);
        assert_eq!(names(c), vec![("x".to_string(), 5), ("y".to_string(), 6)]);
        assert_eq!(names(d), vec![("x".to_string(), 5)]);
    }

    #[test]
    fn incarnations_newer_wins_and_at_equal_down_wins() {
        let mut st = state("m");
        let mut out = Out::default();
        let x = know(&mut st, "x"); // incarnation 5, up
                                    // Older: ignored.
        assert!(!st.merge(&member("x", 4, false), NOT_CONNECTED, &mut out));
        assert!(st.is_up(x));
        // Equal and up: no news.
        assert!(!st.merge(&member("x", 5, true), NOT_CONNECTED, &mut out));
        // Equal and down: down wins, the connection goes.
        st.active.push(x);
        assert!(st.merge(&member("x", 5, false), NOT_CONNECTED, &mut out));
        assert!(!st.is_up(x) && st.active.is_empty());
        assert_eq!(out.down, vec![x]);
        assert_eq!(out.disconnect, vec![x]);
        // Equal and up again: down still wins.
        assert!(!st.merge(&member("x", 5, true), NOT_CONNECTED, &mut out));
        // Newer and up: back.
        let mut out = Out::default();
        assert!(st.merge(&member("x", 6, true), NOT_CONNECTED, &mut out));
        assert!(st.is_up(x));
        assert_eq!(out.up.len(), 1);
        // Down, but this node holds a live connection to it: not applied,
        // the member is told (so that it refutes).
        let mut out = Out::default();
        assert!(!st.merge(&member("x", 6, false), &|_| true, &mut out));
        assert!(st.is_up(x));
        assert!(matches!(sent_to(&out, x)[..], [Msg::Gossip { .. }]));
    }

    #[test]
    fn a_node_told_it_is_down_refutes_with_a_newer_incarnation() {
        let mut st = state("r");
        let a = know(&mut st, "a");
        st.active.push(a);
        let inc = st.me.inc;
        let mut out = Out::default();
        // An older claim: nothing to refute.
        assert!(!st.merge(&member("r", inc - 1, false), NOT_CONNECTED, &mut out));
        assert_eq!(st.me.inc, inc);
        assert!(out.send.is_empty());
        assert!(!st.merge(&member("r", inc, false), NOT_CONNECTED, &mut out));
        assert_eq!(st.me.inc, inc + 1);
        assert!(st.me.up);
        let [Msg::Gossip { members }] = &sent_to(&out, a)[..] else {
            panic!("the refutation is flooded");
        };
        assert_eq!(members[0].inc, inc + 1);
        assert!(members[0].up);
        // The refutation wins over the claim where it arrives.
        let mut other = state("o");
        let mut out = Out::default();
        assert!(other.merge(&member("r", inc, false), NOT_CONNECTED, &mut out));
        assert!(other.merge(&members[0], NOT_CONNECTED, &mut out));
        assert!(other.is_up(id("r")));
    }

    /// A member's later record replaces its earlier one in the news (one
    /// record a member), and each record goes to every neighbour but the
    /// one its latest version came from.
    #[test]
    fn news_keeps_the_latest_record_of_each_member() {
        let mut st = state("a");
        let (n1, n2) = (know(&mut st, "n1"), know(&mut st, "n2"));
        st.active = vec![n1, n2];
        let mut out = Out::default();
        st.flood(
            vec![member("x", 5, true), member("y", 5, true)],
            Some(n1),
            &mut out,
        );
        st.flood(vec![member("x", 6, false)], Some(n2), &mut out);
        st.send_news(&mut out);
        let to = |n: NodeId| match sent_to(&out, n)[..] {
            [Msg::Gossip { ref members }] => members
                .iter()
                .map(|m| (m.name.clone(), m.inc, m.up))
                .collect::<Vec<_>>(),
            ref other => panic!("{other:?}"),
        };
        assert_eq!(to(n1), vec![("x".into(), 6, false)]);
        assert_eq!(to(n2), vec![("y".into(), 5, true)]);
        assert!(st.news.is_empty() && st.news_at.is_empty());
    }

    /// A node joins through a contact while it has no neighbour, and,
    /// with neighbours, through one it does not know as a member (the
    /// head of a cluster that formed apart); never through itself, a
    /// neighbour, or a member it knows while it has neighbours.
    #[test]
    fn a_join_is_wanted_alone_or_through_a_stranger() {
        let mut st = state("a");
        let now = Instant::now();
        let wants = |st: &State, id| st.wants_join(Some(id), now);
        let known = know(&mut st, "k");
        assert!(wants(&st, known), "no neighbour: any contact");
        assert!(!wants(&st, id("a")), "never itself");
        let n = know(&mut st, "n");
        st.active.push(n);
        assert!(!wants(&st, n), "a neighbour");
        assert!(!wants(&st, known), "a member it knows");
        assert!(wants(&st, id("stranger")), "a node it does not know");
        assert!(st.wants_join(None, now), "an address no member has");
    }

    /// While a join waits for its contact's list, no other contact is
    /// joined (the node knows none of them yet); the list ends the wait,
    /// and so does [`JOIN_WAIT`] without it.
    #[test]
    fn a_join_waits_for_its_list_before_another() {
        let mut st = state("a");
        let now = Instant::now();
        let c = id("c");
        st.active.push(c);
        st.joining = Some((c, now));
        assert!(!st.wants_join(Some(id("s2")), now), "the list is awaited");
        assert!(!st.wants_join(None, now));
        assert!(
            st.wants_join(Some(id("s2")), now + JOIN_WAIT),
            "no list within the wait"
        );
        let list = Msg::Sync {
            members: vec![member("c", 1, true)],
            reply: false,
            want: Vec::new(),
        };
        handle(&mut st, &cfg(), &mut Out::default(), c, list, NOT_CONNECTED);
        assert!(st.joining.is_none());
        assert!(
            st.wants_join(Some(id("s2")), now),
            "a stranger, once the list came"
        );
    }
}
