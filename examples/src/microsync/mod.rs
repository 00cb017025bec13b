//! MicroSync, the paper's file-synchronisation case study.
//!
//! Two or more nodes keep one directory each in sync. Each instance is a
//! process tree:
//!
//! ```text
//! microsync (registered "microsync")
//! └── supervisor, one-for-one, all children permanent
//!     ├── eventlogger  gen_server  prints (and appends to --log) events
//!     ├── accessor     gen_server  the only process that touches the disk;
//!     │                            every file operation runs in `blocking`
//!     ├── folder       gen_server  folder manager: path -> file tracker
//!     │   ├── scanner               polls the directory every 150 ms
//!     │   └── tracker:PATH …        one gen_server per file, registered by path
//!     ├── peer         gen_server  control plane: known peers, broadcasts
//!     └── connector    process     joins the seed, finds remote "peer"s
//! ```
//!
//! A local edit flows scanner → folder → tracker (asks the accessor for a
//! manifest: content-defined chunks with blake3 hashes) → peer, which
//! broadcasts an [`Announce`] (path, version, manifest, the tracker's pid)
//! to every remote peer. There it flows peer → folder → tracker, which
//! compares versions; if the remote one is newer it asks the *remote
//! tracker* (the pid in the announcement, used for this exchange only)
//! for the chunks it lacks, and has its accessor rebuild the file from old
//! and new chunks. Each fetch is logged as `fetched K of T chunks`.
//!
//! Versions are `(counter, node name)`, ordered lexicographically: a local
//! change takes `counter + 1` (a Lamport clock over what the tracker has
//! seen), so of two concurrent edits the higher `(counter, node)` wins on
//! every node. A deletion is a version whose manifest is `None` (a
//! tombstone), so it propagates and is ordered like an edit.
//!
//! A tracker that hears an *older* version than its own answers the
//! announcing tracker with its version, so an instance whose folder
//! manager restarted (and forgot its versions) catches up before its next
//! edit is numbered.
//!
//! Trackers are processes of their own (rather than entries in one map
//! server) so that a slow transfer of one file never holds up another, and
//! so that a remote node can be handed a pid that answers for exactly one
//! file.

//! # Limits
//!
//! * Versions live in memory: a restarted instance rescans and starts its
//!   counters at 1 (peers then tell it theirs, see above); an edit made
//!   while the instance was down loses to any later version elsewhere.
//! * An edit made while a fetch of the same file is in flight may be
//!   overwritten by the fetched version (the scanner then sees the file
//!   unchanged in content).
//! * The peer process's replay cache is in memory too: if it restarts, a
//!   peer that joins afterwards learns only versions announced since.
//! * Only regular files are synchronised; empty directories are not.
//!
//! # Stack size
//!
//! Run instances with large process stacks (`NodeConfig::stack_size(1 <<
//! 20)`, as the `microsync` bin does). A remote send of a message above the
//! transport's compression threshold (a batch of chunks) deflates it on the
//! *sending process's* stack, and in debug builds flate2/miniz_oxide
//! builds its `CompressorOxide` on the stack before boxing it, which
//! overflows the 64 KiB default and kills the whole node with SIGSEGV
//! (the guard page). This is a runtime issue (the send path should not
//! need more than a small fixed stack); until it is fixed, the larger
//! stack is the workaround.

pub mod chunk;

mod accessor;
mod folder;
mod logger;
mod peer;
mod tracker;

use chunk::{ChunkRef, Manifest};
use graft_otp::prelude::*;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// A file version: ordered by counter, then by node name.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Mobile)]
pub struct Version {
    /// Lamport counter.
    pub counter: u64,
    /// The node that made this version.
    pub node: String,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.counter, self.node)
    }
}

/// "This is my version of `path`": sent between peers.
#[derive(Debug, Clone, Mobile)]
pub struct Announce {
    /// The file.
    pub path: String,
    /// Its version.
    pub version: Version,
    /// Its content, or `None` if it was deleted.
    pub manifest: Option<Manifest>,
    /// The tracker that can serve its chunks (valid for one exchange).
    pub tracker: Pid,
}

/// Messages between the peer processes of two instances.
#[derive(Debug, Clone, Mobile)]
pub enum PeerMsg {
    /// A file version.
    Announce(Announce),
}

/// A tracker asks another tracker for chunks of its current version.
#[derive(Debug, Clone, Mobile)]
pub struct ChunkRequest {
    /// Matches the reply.
    pub req: u64,
    /// The file.
    pub path: String,
    /// The chunks wanted.
    pub chunks: Vec<ChunkRef>,
    /// Who wants them.
    pub reply_to: Pid,
}

/// The answer to a [`ChunkRequest`]: the bytes of each chunk, or `None`
/// where the file has changed since.
#[derive(Debug, Clone, Mobile)]
pub struct ChunkReply {
    /// The request it answers.
    pub req: u64,
    /// One entry per requested chunk.
    pub chunks: Vec<Option<Vec<u8>>>,
}

/// How one instance runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The directory to keep in sync.
    pub dir: PathBuf,
    /// A node to join.
    pub join: Option<SocketAddr>,
    /// Where to append the event log, if anywhere.
    pub log: Option<PathBuf>,
    /// Scanner period.
    pub scan_every: Duration,
}

/// The node name of this instance (tie-breaker of versions).
pub(crate) fn me() -> String {
    graft::node_name(this_node()).unwrap_or_default()
}

/// Sends an event to the event logger.
pub fn event(text: impl Into<String>) {
    logger::log(text.into());
}

/// Starts an instance's process tree inside the calling process (which
/// registers as `microsync`), and returns the supervisor's pid.
///
/// # Errors
///
/// If a name is taken or a child does not start.
pub fn start(opts: Options) -> Result<Pid, StartError> {
    let _ = register("microsync", self_pid());
    let Options {
        dir,
        join,
        log,
        scan_every: every,
    } = opts;
    Supervisor::new(Strategy::OneForOne)
        .intensity(20, Duration::from_secs(5))
        .child(ChildSpec::new("eventlogger", move || {
            logger::start(log.clone())
        }))
        .child(ChildSpec::new("accessor", move || {
            accessor::start(dir.clone())
        }))
        .child(ChildSpec::new("folder", move || folder::start(every)))
        .child(ChildSpec::new("peer", peer::start))
        .child(ChildSpec::new("connector", move || {
            Ok(spawn_link(move || peer::connector(join)))
        }))
        .start()
}

/// The version this node holds of `path` (asks the tracker registered as
/// `tracker:PATH`); `None` if no tracker runs for it. Call from a process.
pub fn version_of(path: &str) -> Option<Version> {
    tracker::version_of(path)
}

/// Seconds since the last event and the number of peers seen so far
/// (for `--once`).
pub fn quiet_for() -> Option<(Duration, u64)> {
    logger::quiet_for()
}
