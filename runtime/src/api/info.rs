//! What an operator asks about processes: [`process_info`], [`processes`];
//! one field alone, as Erlang's `process_info/2` gives it:
//! [`process_status`], [`mailbox_len`].

use crate::context;
use crate::pid::Pid;
use crate::process::state::Status;

/// A process's state, for operators (Erlang's `process_info`). `Mobile`:
/// [`observe::process_info_on`](crate::observe::process_info_on) brings one
/// from another node.
#[derive(Clone, Debug, graft_derive::Mobile)]
pub struct ProcessInfo {
    /// The process.
    pub pid: Pid,
    /// What it is doing.
    pub status: Status,
    /// Messages waiting: in its mailbox, and those its receives skipped so
    /// far (as of its last suspend).
    pub mailbox_len: usize,
    /// Its registered name.
    pub registered_name: Option<String>,
    /// Processes linked to it.
    pub links: Vec<Pid>,
    /// Processes monitoring it.
    pub monitored_by: Vec<Pid>,
    /// Whether it traps exits.
    pub trap_exits: bool,
    /// What it runs: the label its behaviour gave it (a gen_server's type
    /// name, `supervisor ...`), else where it was spawned.
    pub initial_call: String,
    /// Where it was spawned (`file:line:column` of the `spawn` call).
    pub spawned_at: String,
    /// The process that spawned it.
    pub parent: Option<Pid>,
    /// Its parent, the parent's parent, ... as far as they are alive (OTP's
    /// `$ancestors`).
    pub ancestors: Vec<Pid>,
    /// The nearest ancestor that is a supervisor.
    pub supervisor: Option<Pid>,
    /// Whether it is a supervisor itself.
    pub is_supervisor: bool,
    /// Processes it monitors (on this node). Filled by
    /// [`observe::process_info_full`](crate::observe::process_info_full)
    /// (a scan of the table); empty from `process_info`.
    pub monitors: Vec<Pid>,
    /// Times it was resumed (graft's reductions).
    pub runs: u64,
    /// Time it ran, in nanoseconds (sampled every 2 ms: see
    /// [`observe`](crate::observe)).
    pub run_time_ns: u64,
    /// Its stack's size (virtual).
    pub stack_size: u64,
    /// Stack bytes in use when it last suspended.
    pub stack_in_use: u64,
    /// Deepest use of its stack (resident pages; a pooled stack may show an
    /// earlier owner's depth: an upper bound). Filled by
    /// [`observe::process_info_full`](crate::observe::process_info_full)
    /// (one `mincore` call); 0 from `process_info`.
    pub stack_high_water: u64,
}

/// What `pid` is doing; `None` if it is not alive on this node. Cheap
/// enough to poll; [`observe::process_info_full`](crate::observe::process_info_full)
/// adds the costly fields, [`observe::process_info_on`](crate::observe::process_info_on)
/// asks another node.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     register("me", self_pid()).unwrap();
///     let info = process_info(self_pid()).unwrap();
///     assert_eq!(info.registered_name.as_deref(), Some("me"));
/// }).unwrap();
/// ```
pub fn process_info(pid: Pid) -> Option<ProcessInfo> {
    crate::observe::info_of(&context::worker()?.node, pid)
}

/// What `pid` is doing, alone (Erlang's `process_info(Pid, status)`);
/// `None` if it is not alive on this node. One table lookup, no allocation:
/// for a loop that waits on many processes, where [`process_info`]
/// would build every field.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     let p = spawn(|| {
///         expect::<()>();
///     });
///     while process_status(p) != Some(Status::Waiting) {
///         yield_now();
///     }
///     send(p, ());
/// }).unwrap();
/// ```
pub fn process_status(pid: Pid) -> Option<Status> {
    context::worker()?
        .node
        .with_local(pid, |p| p.state.status())
}

/// Messages waiting for `pid` (Erlang's `process_info(Pid,
/// message_queue_len)`: the same count as [`ProcessInfo::mailbox_len`]);
/// `None` if it is not alive on this node.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     send(self_pid(), 7u8);
///     assert_eq!(mailbox_len(self_pid()), Some(1));
///     assert_eq!(expect::<u8>(), 7);
///     assert_eq!(mailbox_len(self_pid()), Some(0));
/// }).unwrap();
/// ```
pub fn mailbox_len(pid: Pid) -> Option<usize> {
    context::worker()?
        .node
        .with_local(pid, |p| crate::stats::Acct::queued(p))
}

/// Every live process on this node, sorted.
pub fn processes() -> Vec<Pid> {
    context::worker().map_or_else(Vec::new, |w| w.node.table.pids())
}

/// Reports the node's live-process count (for tests and operators).
pub fn process_count() -> usize {
    context::worker().map_or(0, |w| w.node.live())
}

/// Whether `pid` is alive on this node.
pub fn is_alive(pid: Pid) -> bool {
    context::worker().is_some_and(|w| w.node.local_process(pid).is_some())
}
