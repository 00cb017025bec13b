//! Discovery: how a node finds the other nodes of its cluster without a
//! `host:port` given by hand (libcluster's strategies, for graft).
//!
//! A node started with [`NodeConfig::discovery`](crate::NodeConfig::discovery)
//! runs one thread, `graft-discovery`, that asks its [`Discovery`] for the
//! cluster's nodes every `interval` (default 5 s) and connects to each one
//! it is not connected to; nothing else touches the source. A seed that
//! names this node, or a node already connected (by listen address or by
//! name), is skipped; a seed that cannot be reached is reported at `warn`
//! once, then at `debug` until it is reached, and tried again at the next
//! poll. Connections are the ordinary ones (cookie, TLS): a source that
//! lies can only make the node try a handshake with a stranger, which the
//! handshake refuses.
//!
//! Built in: [`StaticSeeds`] (a fixed list), [`Dns`] (the A/AAAA records
//! of one name, resolved at every poll: the headless-service pattern of
//! Kubernetes deployments) and [`SeedFile`] (one seed per line, read at
//! every poll). A seed is a listen address (`127.0.0.3:4370`), a name with
//! its address (`kv@127.0.0.3:4370`), or a host without a port, which means
//! [`DEFAULT_PORT`] (the epmd-less convention: every node of a cluster
//! listens on one known port).

use crate::error::Error;
use crate::loom::Ordering;
use crate::node::NodeShared;
use crate::pid::NodeId;
use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The port of a seed that names none (`"db1.internal"`, `"kv@10.0.0.7"`):
/// graft's fixed distribution port, so that a cluster needs no port mapper.
pub const DEFAULT_PORT: u16 = 4370;

/// One node a [`Discovery`] says belongs to the cluster.
///
/// ```
/// use graft::discovery::Seed;
/// let a: Seed = "127.0.0.3:4370".parse().unwrap();
/// assert_eq!(a, Seed::Addr("127.0.0.3:4370".parse().unwrap()));
/// let n: Seed = "kv@127.0.0.3:4370".parse().unwrap();
/// assert_eq!(n, Seed::Name("kv@127.0.0.3:4370".into()));
/// assert_eq!("127.0.0.3".parse::<Seed>().unwrap(), Seed::Addr("127.0.0.3:4370".parse().unwrap()));
/// assert!("".parse::<Seed>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Seed {
    /// A node's listen address.
    Addr(SocketAddr),
    /// A node's name carrying its address (`kv@127.0.0.3:4370`): the node
    /// there must have that name.
    Name(String),
}

impl fmt::Display for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seed::Addr(a) => write!(f, "{a}"),
            Seed::Name(n) => f.write_str(n),
        }
    }
}

impl FromStr for Seed {
    type Err = Error;

    /// `ip:port`, `host:port` (resolved now), `name@host:port`, or any of
    /// them without the port ([`DEFAULT_PORT`]).
    fn from_str(s: &str) -> Result<Seed, Error> {
        let s = s.trim();
        let bad = |why: &str| {
            Error::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("seed {s:?}: {why}"),
            ))
        };
        if s.is_empty() {
            return Err(bad("empty"));
        }
        if s.len() > 255 || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("not a node name or address"));
        }
        if let Some((node, host)) = s.split_once('@') {
            if node.is_empty() || host.is_empty() {
                return Err(bad("a name is node@host[:port]"));
            }
            return Ok(Seed::Name(if has_port(host) {
                s.to_string()
            } else {
                format!("{node}@{}", with_default_port(host))
            }));
        }
        let host = with_default_port(s);
        if let Ok(a) = host.parse::<SocketAddr>() {
            return Ok(Seed::Addr(a));
        }
        host.to_socket_addrs()
            .map_err(|e| bad(&format!("does not resolve: {e}")))?
            .next()
            .map(Seed::Addr)
            .ok_or_else(|| bad("names no address"))
    }
}

/// `host` ends in a port (`h:1`, `[::1]:1`; a bare IPv6 address has none).
fn has_port(host: &str) -> bool {
    if host.parse::<IpAddr>().is_ok() {
        return false;
    }
    match host.rsplit_once(':') {
        Some((h, p)) => !h.is_empty() && p.parse::<u16>().is_ok(),
        None => false,
    }
}

fn with_default_port(host: &str) -> String {
    if has_port(host) {
        return host.to_string();
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{DEFAULT_PORT}"),
        _ => format!(
            "{}:{DEFAULT_PORT}",
            host.trim_start_matches('[').trim_end_matches(']')
        ),
    }
}

/// A source of the cluster's nodes, polled by the node's discovery thread.
///
/// ```
/// use graft::discovery::{Discovery, Seed};
///
/// /// The nodes another service told us about.
/// struct FromRegistry(Vec<Seed>);
/// impl Discovery for FromRegistry {
///     fn seeds(&mut self) -> Result<Vec<Seed>, String> {
///         Ok(self.0.clone())
///     }
/// }
/// let mut d = FromRegistry(vec!["127.0.0.1:4370".parse().unwrap()]);
/// assert_eq!(d.seeds().unwrap().len(), 1);
/// ```
pub trait Discovery: Send + 'static {
    /// The nodes of the cluster now (this node among them or not). An
    /// `Err` is logged and the source asked again at the next poll.
    fn seeds(&mut self) -> Result<Vec<Seed>, String>;
}

/// A fixed list of seeds.
///
/// ```
/// let d = graft::discovery::StaticSeeds::parse(["127.0.0.2:4370", "kv@127.0.0.3:4370"]).unwrap();
/// let cfg = graft::NodeConfig::new("127.0.0.1:0").discovery(d);
/// # let _ = cfg;
/// ```
#[derive(Clone, Debug)]
pub struct StaticSeeds(pub Vec<Seed>);

impl StaticSeeds {
    /// Parses every seed (see [`Seed`]'s `FromStr`).
    ///
    /// # Errors
    ///
    /// The first seed that does not parse, named in the error.
    pub fn parse<S: AsRef<str>>(seeds: impl IntoIterator<Item = S>) -> Result<StaticSeeds, Error> {
        seeds
            .into_iter()
            .map(|s| s.as_ref().parse())
            .collect::<Result<_, _>>()
            .map(StaticSeeds)
    }
}

impl Discovery for StaticSeeds {
    fn seeds(&mut self) -> Result<Vec<Seed>, String> {
        Ok(self.0.clone())
    }
}

/// Looks up the addresses of a host name (for [`Dns`]; tests give a stub).
///
/// ```
/// use graft::discovery::Resolve;
/// let ips = graft::discovery::SystemResolver.resolve("localhost").unwrap();
/// assert!(ips.iter().all(|ip| ip.is_loopback()));
/// ```
pub trait Resolve: Send + 'static {
    /// Every address `host` has now (its A and AAAA records).
    ///
    /// # Errors
    ///
    /// When the name does not resolve.
    fn resolve(&mut self, host: &str) -> io::Result<Vec<IpAddr>>;
}

/// The system's resolver (`getaddrinfo`: `/etc/hosts`, then DNS).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&mut self, host: &str) -> io::Result<Vec<IpAddr>> {
        Ok((host, 0u16).to_socket_addrs()?.map(|a| a.ip()).collect())
    }
}

/// Every address of one DNS name, each with the cluster's port, resolved
/// again at every poll (libcluster's `DNSPoll`; a Kubernetes headless
/// service gives one A record per ready pod).
///
/// ```
/// let d = graft::discovery::Dns::new("graft-headless.default.svc.cluster.local", 4370);
/// let cfg = graft::NodeConfig::new("0.0.0.0:4370").discovery(d);
/// # let _ = cfg;
/// ```
#[derive(Debug)]
pub struct Dns<R = SystemResolver> {
    host: String,
    port: u16,
    resolver: R,
}

impl Dns<SystemResolver> {
    /// The addresses of `host` on `port`, through the system's resolver.
    pub fn new(host: &str, port: u16) -> Dns<SystemResolver> {
        Dns::with_resolver(host, port, SystemResolver)
    }
}

impl<R: Resolve> Dns<R> {
    /// As [`Dns::new`], through `resolver`.
    pub fn with_resolver(host: &str, port: u16, resolver: R) -> Dns<R> {
        Dns {
            host: host.to_string(),
            port,
            resolver,
        }
    }
}

impl<R: Resolve> Discovery for Dns<R> {
    fn seeds(&mut self) -> Result<Vec<Seed>, String> {
        let mut ips = self
            .resolver
            .resolve(&self.host)
            .map_err(|e| format!("{} does not resolve: {e}", self.host))?;
        ips.sort();
        ips.dedup();
        Ok(ips
            .into_iter()
            .map(|ip| Seed::Addr(SocketAddr::new(ip, self.port)))
            .collect())
    }
}

/// Seeds read from a file at every poll: one per line, `#` starts a
/// comment; a line that does not parse is logged and skipped. The file
/// may be rewritten while the node runs (a config-management tool's job).
///
/// ```
/// let d = graft::discovery::SeedFile::new("/etc/graft/seeds");
/// let cfg = graft::NodeConfig::new("127.0.0.1:0").discovery(d);
/// # let _ = cfg;
/// ```
#[derive(Clone, Debug)]
pub struct SeedFile {
    path: PathBuf,
}

impl SeedFile {
    /// Seeds from the file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> SeedFile {
        SeedFile { path: path.into() }
    }
}

/// The most a seed file may hold: a list of nodes, not a data file.
const MAX_SEED_FILE: u64 = 1 << 20;

impl Discovery for SeedFile {
    fn seeds(&mut self) -> Result<Vec<Seed>, String> {
        let shown = self.path.display();
        let len = std::fs::metadata(&self.path)
            .map_err(|e| format!("seed file {shown}: {e}"))?
            .len();
        if len > MAX_SEED_FILE {
            return Err(format!(
                "seed file {shown} is {len} bytes (at most {MAX_SEED_FILE})"
            ));
        }
        let text =
            std::fs::read_to_string(&self.path).map_err(|e| format!("seed file {shown}: {e}"))?;
        let mut seeds = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            match line.parse() {
                Ok(s) => seeds.push(s),
                Err(e) => log::warn!("graft: seed file {shown}, line {}: {e}", i + 1),
            }
        }
        Ok(seeds)
    }
}

/// A node's discovery source and how often it is polled (what
/// [`NodeConfig::discovery`](crate::NodeConfig::discovery) stores).
#[derive(Clone)]
pub(crate) struct DiscoveryConfig {
    pub(crate) source: Arc<parking_lot::Mutex<Box<dyn Discovery>>>,
    pub(crate) interval: Duration,
}

impl fmt::Debug for DiscoveryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiscoveryConfig")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// How often the source is polled unless the config says otherwise.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// The longest a discovery poll that keeps finding nothing to do waits for
/// the next (see [`run`]).
const BACKED_OFF: Duration = DEFAULT_INTERVAL;

/// The discovery thread: polls, connects, sleeps, until the node stops.
pub(crate) fn run(node: Weak<NodeShared>, cfg: DiscoveryConfig) {
    // Seeds that failed, so each failure is logged at `warn` once.
    let mut failing: HashSet<Seed> = HashSet::new();
    let mut wait = cfg.interval;
    let mut polls = 0u64;
    loop {
        let mut idle = true;
        let Some(n) = node.upgrade() else { return };
        if n.stopping.load(Ordering::Relaxed) {
            return;
        }
        let polled = cfg.source.lock().seeds();
        polls += 1;
        match polled {
            Ok(mut seeds) => {
                // In the partial overlay the first seed that answers is the
                // contact: each node starts at its own place in the list,
                // so a cluster's joins spread over its seeds instead of all
                // queueing at the first one. (The full mesh connects every
                // seed, in any order.)
                if !seeds.is_empty() {
                    let at = spread(n.id.0, polls) % seeds.len() as u64;
                    seeds.rotate_left(at as usize);
                }
                for seed in seeds {
                    if n.stopping.load(Ordering::Relaxed) {
                        return;
                    }
                    let reached = connect_seed(&n, &seed);
                    idle &= matches!(reached, Ok(false));
                    match reached {
                        Ok(_) => {
                            if failing.remove(&seed) {
                                log::info!("graft: discovery reached {seed}");
                            }
                        }
                        Err(e) if failing.insert(seed.clone()) => {
                            log::warn!("graft: discovery cannot reach {seed}: {e}")
                        }
                        Err(e) => log::debug!("graft: discovery cannot reach {seed}: {e}"),
                    }
                }
            }
            Err(e) => {
                idle = false;
                log::warn!("graft: discovery: {e}")
            }
        }
        // A poll that had nothing to do (every seed connected already, or
        // this node in the overlay) doubles the wait, up to `BACKED_OFF`
        // (or the interval if longer); any other poll resets it. A node in
        // a cluster has found its peers: what a poll may still find is a
        // seed it lost, at most `BACKED_OFF` late (a node that lost every
        // peer is joined by the others' connects or its next poll).
        wait = if idle {
            (wait * 2).min(cfg.interval.max(BACKED_OFF))
        } else {
            cfg.interval
        };
        // One sleep, cut short when the node stops (no slices: an idle
        // node wakes only for its next poll).
        if !n.sched.quiet.nap(wait) {
            return;
        }
    }
}

/// A well-mixed number from a node's id and its poll count (SplitMix64's
/// finaliser): where in the seed list this poll starts.
fn spread(id: u64, poll: u64) -> u64 {
    let mut z = id ^ poll.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Connects to `seed` unless it is this node or already connected (in the
/// partial overlay: joins through it while this node has no neighbour or
/// does not know the seed as a member);
/// `Ok(false)`: there was nothing to do.
fn connect_seed(n: &Arc<NodeShared>, seed: &Seed) -> Result<bool, Error> {
    let Some(t) = n.dist.transport() else {
        return Err(Error::NodeDown);
    };
    if let Some(o) = n.dist.mon.overlay() {
        // The partial overlay: a seed is a contact to join through, while
        // this node has no neighbour or the seed is no member it knows
        // (`Overlay::wants_join`).
        let id = match seed {
            Seed::Addr(a) if *a == t.local_addr() || *a == t.advertised_addr() => return Ok(false),
            Seed::Addr(a) if !o.wants_join(Some(*a), None) => return Ok(false),
            Seed::Addr(a) => crate::node::connect_transport(n, *a)?,
            Seed::Name(name) if NodeId::from_name(name) == n.id => return Ok(false),
            Seed::Name(name) if !o.wants_join(None, Some(NodeId::from_name(name))) => {
                return Ok(false)
            }
            Seed::Name(name) => crate::netmon::connect_name_on(n, name)?,
        };
        return Ok(o.join(n, id));
    }
    let peers = t.peers();
    match seed {
        Seed::Addr(a) => {
            if *a == t.local_addr() || *a == t.advertised_addr() {
                return Ok(false);
            }
            if peers.iter().any(|p| p.listen_addr == *a) {
                return Ok(false);
            }
            crate::node::connect_transport(n, *a).map(|_| true)
        }
        Seed::Name(name) => {
            if NodeId::from_name(name) == n.id || peers.iter().any(|p| p.name == *name) {
                return Ok(false);
            }
            crate::netmon::connect_name_on(n, name).map(|_| true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::spread;
    use crate::pid::NodeId;

    /// Nodes start their polls at every place in a seed list alike, and a
    /// node's next poll starts elsewhere (a seed that keeps failing it is
    /// not always tried first).
    #[test]
    fn polls_start_at_every_seed_alike() {
        let mut at = [0usize; 4];
        for i in 0..1000 {
            let id = NodeId::from_name(&format!("graft-{i:08x}@127.0.0.1"));
            at[(spread(id.0, 1) % 4) as usize] += 1;
        }
        assert!(at.iter().all(|&k| (200..=300).contains(&k)), "{at:?}");
        let id = NodeId::from_name("kv@127.0.0.1:4370");
        let starts: std::collections::HashSet<u64> = (1..=8).map(|p| spread(id.0, p) % 4).collect();
        assert!(starts.len() > 1, "{starts:?}");
    }
}
