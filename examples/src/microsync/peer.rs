//! The peer process (the control plane between instances) and the peer
//! connector.
//!
//! The peer process, registered as `peer`, knows the `peer` processes of
//! the other instances and monitors them. It broadcasts every local
//! version announcement to them, keeps the latest announcement of each
//! path, and replays those to a peer that comes up, so a late joiner
//! learns the whole folder. Announcements from peers go to the folder
//! manager.
//!
//! The connector joins the seed node (and rejoins it after a loss), and
//! asks every connected node for its registered `peer`.

use super::{event, folder, Announce, PeerMsg};
use graft_otp::prelude::*;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

/// The name it registers.
const NAME: &str = "peer";

/// How often the connector looks for peers.
const DISCOVER_EVERY: Duration = Duration::from_millis(200);

/// What the peer process is told (locally).
#[derive(Debug)]
pub(crate) enum PeerCast {
    /// A local version to broadcast.
    Broadcast(Announce),
    /// A remote peer process was found.
    Up(Pid),
}
impl Message for PeerCast {}

/// The peer process's state.
pub(crate) struct Peer {
    peers: HashMap<Pid, MonitorRef>,
    latest: HashMap<String, Announce>,
}

impl GenServer for Peer {
    type Call = ();
    type Cast = PeerCast;
    type Reply = usize;

    fn handle_call(&mut self, _: (), _: &ReplyTo<usize>) -> CallResult<usize> {
        CallResult::Reply(self.peers.len())
    }

    fn handle_cast(&mut self, msg: PeerCast) -> Flow {
        match msg {
            PeerCast::Broadcast(a) => {
                for &p in self.peers.keys() {
                    send(p, PeerMsg::Announce(a.clone()));
                }
                self.latest.insert(a.path.clone(), a);
            }
            PeerCast::Up(p) => {
                if let std::collections::hash_map::Entry::Vacant(e) = self.peers.entry(p) {
                    e.insert(monitor(p));
                    event(format!(
                        "peer up: {} ({} versions to tell it)",
                        graft::node_name(p.node()).unwrap_or_default(),
                        self.latest.len()
                    ));
                    for a in self.latest.values() {
                        send(p, PeerMsg::Announce(a.clone()));
                    }
                }
            }
        }
        Flow::Continue
    }

    fn handle_info(&mut self, msg: Unknown) -> Flow {
        match msg.downcast::<PeerMsg>() {
            Ok(PeerMsg::Announce(a)) => folder::remote(a),
            Err(msg) => {
                if let Ok(d) = msg.downcast::<ProcessDied>() {
                    if self.peers.remove(&d.pid).is_some() {
                        event(format!(
                            "peer down: {} ({})",
                            graft::node_name(d.pid.node()).unwrap_or_else(|| d.pid.to_string()),
                            d.reason
                        ));
                    }
                }
            }
        }
        Flow::Continue
    }
}

/// Starts the peer process (linked, registered as `peer`).
pub(crate) fn start() -> Result<Pid, StartError> {
    let peer = Peer {
        peers: HashMap::new(),
        latest: HashMap::new(),
    };
    gen_server::start_named(NAME, peer).map(|s| s.pid())
}

/// Broadcasts a local version to every peer.
pub(crate) fn broadcast(a: Announce) {
    if let Some(p) = Server::<Peer>::whereis(NAME) {
        p.cast(PeerCast::Broadcast(a));
    }
}

/// The peer connector: keeps the seed joined and finds remote peers.
pub(crate) fn connector(seed: Option<SocketAddr>) {
    let mut seed_id: Option<NodeId> = None;
    let mut known: HashSet<NodeId> = HashSet::new();
    loop {
        let nodes = graft::nodes();
        if let Some(addr) = seed {
            if !seed_id.is_some_and(|id| nodes.contains(&id)) {
                match graft::connect(addr) {
                    Ok(id) => {
                        event(format!("joined {addr}"));
                        seed_id = Some(id);
                    }
                    Err(e) => log::debug!("microsync: join {addr}: {e}"),
                }
            }
        }
        let nodes = graft::nodes();
        known.retain(|n| nodes.contains(n));
        for n in nodes {
            if known.contains(&n) {
                continue;
            }
            if let Ok(Some(p)) = graft::whereis_on(NAME, n) {
                if let Some(peer) = Server::<Peer>::whereis(NAME) {
                    peer.cast(PeerCast::Up(p));
                    known.insert(n);
                }
            }
        }
        sleep(DISCOVER_EVERY);
    }
}
