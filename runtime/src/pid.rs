//! Process and node identities: [`Pid`], [`NodeId`], [`MonitorRef`].
//!
//! A pid names one process for ever: it carries the node, the node's
//! *creation* (random at start, so a restarted node never accepts pids of its
//! earlier incarnation) and a serial that is never reused on that node.

use std::fmt;

/// Identifies a node: a 64-bit hash of its name (`"name@host:port"`).
///
/// `NodeId` is `Copy` so that [`Pid`] can be `Copy`; the node keeps the map from
/// id to name and address.
///
/// ```
/// let a = graft::NodeId::from_name("a@127.0.0.1:4000");
/// assert_eq!(a, graft::NodeId::from_name("a@127.0.0.1:4000"));
/// assert_ne!(a, graft::NodeId::from_name("b@127.0.0.1:4001"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u64);

impl NodeId {
    /// The id of the node with this name (FNV-1a, stable across builds and
    /// machines).
    pub fn from_name(name: &str) -> NodeId {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        NodeId(h)
    }
}

/// The names of the nodes this OS process has met (its own nodes and their
/// peers), so that a [`NodeId`] displays as its name everywhere: logs,
/// errors, `Debug`. Names are never removed (a node id is a hash of the
/// name, so an entry can never turn wrong).
fn node_names() -> &'static std::sync::RwLock<std::collections::HashMap<u64, std::sync::Arc<str>>> {
    static NAMES: std::sync::OnceLock<
        std::sync::RwLock<std::collections::HashMap<u64, std::sync::Arc<str>>>,
    > = std::sync::OnceLock::new();
    NAMES.get_or_init(Default::default)
}

/// Records `name` as the name of the node it hashes to (see [`NodeId::name`]).
pub(crate) fn note_node_name(name: &str) -> NodeId {
    let id = NodeId::from_name(name);
    let mut names = node_names().write().unwrap_or_else(|e| e.into_inner());
    names.entry(id.0).or_insert_with(|| name.into());
    id
}

impl NodeId {
    /// The node's name, if this OS process has met the node (it runs here,
    /// or was connected to a node here); ids display as this name.
    ///
    /// ```
    /// let node = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0").name("shown@127.0.0.1")).unwrap();
    /// assert_eq!(node.id().name().as_deref(), Some("shown@127.0.0.1"));
    /// assert_eq!(format!("{:?}", node.id()), "shown@127.0.0.1");
    /// assert_eq!(format!("{}", graft::NodeId(7)), "node#00000007"); // never met
    /// node.shutdown();
    /// ```
    pub fn name(&self) -> Option<String> {
        let names = node_names().read().unwrap_or_else(|e| e.into_inner());
        names.get(&self.0).map(|n| n.to_string())
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = node_names().read().unwrap_or_else(|e| e.into_inner());
        match names.get(&self.0) {
            Some(name) => f.write_str(name),
            None => write!(f, "node#{:08x}", self.0 as u32),
        }
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A process identifier: node, node creation, and a serial never reused.
///
/// ```
/// use graft::{Pid, NodeId};
/// let p = Pid::new(NodeId(7), 1, 42);
/// assert_eq!(p.node(), NodeId(7));
/// assert_eq!(p.serial(), 42);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid {
    node: NodeId,
    creation: u32,
    serial: u64,
}

impl Pid {
    /// Builds a pid from its parts (the runtime makes pids; this is for
    /// decoders and tests).
    pub const fn new(node: NodeId, creation: u32, serial: u64) -> Pid {
        Pid {
            node,
            creation,
            serial,
        }
    }
    /// The node this process lives (or lived) on.
    pub const fn node(&self) -> NodeId {
        self.node
    }
    /// The creation of the node incarnation that made this pid.
    pub const fn creation(&self) -> u32 {
        self.creation
    }
    /// The node-local serial number.
    pub const fn serial(&self) -> u64 {
        self.serial
    }
}

impl fmt::Debug for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<{:x}.{}.{}>",
            self.node.0 as u16, self.creation as u16, self.serial
        )
    }
}

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A unique reference: names one monitor (or one call), node-wide unique.
///
/// ```
/// let r = graft::MonitorRef::new(graft::NodeId(1), 5);
/// assert_eq!(r.id(), 5);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MonitorRef {
    node: NodeId,
    id: u64,
}

impl MonitorRef {
    /// Builds a reference from its parts.
    pub const fn new(node: NodeId, id: u64) -> MonitorRef {
        MonitorRef { node, id }
    }
    /// The node that made this reference.
    pub const fn node(&self) -> NodeId {
        self.node
    }
    /// The node-local id.
    pub const fn id(&self) -> u64 {
        self.id
    }
}

impl fmt::Debug for MonitorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#Ref<{:x}.{}>", self.node.0 as u16, self.id)
    }
}
