//! Looking into a running node: node statistics, the process list, process
//! info of remote pids, and the hooks behaviours use to describe
//! themselves.
//!
//! ```
//! use graft::*;
//! let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).unwrap();
//! let s = node.run(|| observe::node_stats()).unwrap();
//! assert_eq!(s.workers, 2);
//! assert!(s.processes >= 1);
//! node.shutdown();
//! ```
//!
//! What each figure costs is in `stats.rs`: per resume, three plain
//! stores and no clock; run time and utilisation are sampled every 2 ms by
//! a thread of the node; everything else is computed when asked.

use crate::api::ProcessInfo;
use crate::error::Error;
use crate::node::NodeShared;
use crate::pid::{NodeId, Pid};
use crate::process::state::Status;
use crate::stats;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Frames and bytes sent to and received from one connected node.
#[derive(Debug, Default)]
pub(crate) struct PeerCounters {
    frames_in: AtomicU64,
    bytes_in: AtomicU64,
    frames_out: AtomicU64,
    bytes_out: AtomicU64,
    /// Messages refused as over `max_message_size` (dist.rs).
    pub(crate) too_large: AtomicU64,
}

impl PeerCounters {
    #[inline]
    pub(crate) fn sent(&self, bytes: usize) {
        self.frames_out.fetch_add(1, Relaxed);
        self.bytes_out.fetch_add(bytes as u64, Relaxed);
    }
    /// Frames both ways (the overlay's idle check).
    pub(crate) fn frames(&self) -> u64 {
        self.frames_in.load(Relaxed) + self.frames_out.load(Relaxed)
    }
    #[inline]
    pub(crate) fn received(&self, bytes: usize) {
        self.frames_in.fetch_add(1, Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Relaxed);
    }
}

/// Distribution counters of one connected node (frames and payload bytes).
#[derive(Clone, Debug, PartialEq, crate::Mobile)]
pub struct PeerStats {
    /// The peer's node name.
    pub name: String,
    /// Its listen address.
    pub addr: String,
    /// Frames received from it.
    pub frames_in: u64,
    /// Payload bytes received from it.
    pub bytes_in: u64,
    /// Frames sent to it.
    pub frames_out: u64,
    /// Payload bytes sent to it.
    pub bytes_out: u64,
    /// Messages to it refused at the sender as over the maximum message
    /// size ([`Error::MessageTooLarge`]).
    pub too_large: u64,
    /// Bytes waiting in its outbox now.
    pub queued_bytes: u64,
    /// The last heartbeat round trip in µs (the transport pings once a
    /// heartbeat tick and the peer echoes); `None` until the first echo.
    pub heartbeat_rtt_us: Option<u64>,
    /// Frames queued on each connection to it, the first one first: one
    /// entry, or one per lane with [`NodeConfig::lanes`](crate::NodeConfig::lanes).
    pub lane_frames_out: Vec<u64>,
}

/// A node's statistics (Erlang's `statistics/1` and `erlang:system_info`
/// figures that an operator looks at).
#[derive(Clone, Debug, PartialEq, crate::Mobile)]
pub struct NodeStats {
    /// The node's name.
    pub name: String,
    /// Its id.
    pub id: NodeId,
    /// Its listen address.
    pub addr: String,
    /// Milliseconds since it started.
    pub uptime_ms: u64,
    /// Live processes.
    pub processes: u64,
    /// Scheduler threads.
    pub workers: u64,
    /// Runnable processes per worker (local queue, next-run slot, pinned).
    pub run_queue: Vec<u64>,
    /// Runnable processes in the global queue.
    pub global_queue: u64,
    /// Busy fraction per worker over the last sampling window (the
    /// observer samples every second; without it, since the node started).
    pub utilisation: Vec<f64>,
    /// Bytes mapped for process stacks (guard pages included).
    pub stacks_mapped: u64,
    /// Of them, resident in memory.
    pub stacks_resident: u64,
    /// Messages waiting in all mailboxes.
    pub mail_queued: u64,
    /// Registered names.
    pub registered: u64,
    /// Supervisor restarts (see [`note_restart`]).
    pub restarts: u64,
    /// Processes that crashed (with a crash report, see
    /// [`report`](crate::report)).
    pub crashes: u64,
    /// Spare worker threads now serving a worker held by one process (see
    /// the system monitor, `NodeConfig::long_schedule`).
    pub spares_in_use: Option<u64>,
    /// Connected nodes.
    pub peers: Vec<PeerStats>,
}

/// One line of the process list (cheap to make for every process).
#[derive(Clone, Debug, PartialEq, crate::Mobile)]
pub struct ProcessSummary {
    /// The process.
    pub pid: Pid,
    /// Its registered name.
    pub name: Option<String>,
    /// Its initial call (see [`ProcessInfo::initial_call`]).
    pub initial_call: String,
    /// What it is doing.
    pub status: Status,
    /// Messages waiting.
    pub mailbox_len: u64,
    /// Times it ran.
    pub runs: u64,
    /// Time it ran, in nanoseconds.
    pub run_time_ns: u64,
    /// Memory: stack bytes in use plus 64 bytes per queued message (an
    /// estimate).
    pub memory: u64,
    /// Its parent.
    pub parent: Option<Pid>,
    /// Whether it is a supervisor.
    pub is_supervisor: bool,
}

/// Labels the calling process for operators: shown as its initial call (a
/// gen_server passes its type's name). Does nothing outside a process.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     observe::set_initial_call("my_server");
///     assert_eq!(process_info(self_pid()).unwrap().initial_call, "my_server");
/// }).unwrap();
/// ```
pub fn set_initial_call(label: impl Into<String>) {
    if let Some(p) = crate::context::process() {
        p.meta.lock().label = Some(label.into().into_boxed_str());
    }
}

/// [`set_initial_call`] unless the process has a label already (a
/// behaviour's loop calls this; a label its callbacks set stays).
pub fn default_initial_call(label: impl FnOnce() -> String) {
    if let Some(p) = crate::context::process() {
        p.meta
            .lock()
            .label
            .get_or_insert_with(|| label().into_boxed_str());
    }
}

/// Marks the calling process as a supervisor (the observer draws the
/// processes it spawns as its children).
pub fn mark_supervisor() {
    if let Some(p) = crate::context::process() {
        let mut m = p.meta.lock();
        m.supervisor = true;
        m.label.get_or_insert_with(|| "supervisor".into());
    }
}

/// Counts one supervisor restart on this node (`graft_restarts_total`).
pub fn note_restart() {
    if let Some(w) = crate::context::worker() {
        w.node.stats.restarts.fetch_add(1, Relaxed);
    }
}

/// Processes traced now, on all nodes of this OS process: the send and
/// receive paths look at this one word and nothing else while it is 0.
static TRACED: AtomicU64 = AtomicU64::new(0);

/// Whether any process is traced (the hot paths' check).
#[inline(always)]
pub(crate) fn tracing() -> bool {
    TRACED.load(Relaxed) != 0
}

fn traced_self() -> Option<Pid> {
    let p = crate::context::process()?;
    p.acct.traced.load(Relaxed).then_some(p.pid)
}

pub(crate) fn trace_received(what: &str) {
    if let Some(me) = traced_self() {
        log::info!(target: "graft::trace", "trace {me}: received {what}");
    }
}

pub(crate) fn trace_sent(to: Pid, what: &str) {
    if let Some(me) = traced_self() {
        log::info!(target: "graft::trace", "trace {me}: sent {what} to {to}");
    }
}

/// Turns message tracing of a process on this node on or off (Erlang's
/// `erlang:trace(Pid, true, [send, 'receive'])`): each message it takes
/// with a receive and each message it sends is logged (`info`, target
/// `graft::trace`; the default logger shows them) with its type. `false` if
/// the process is not alive here. [`sys::trace`] in graft-otp does this for
/// a gen_server on any node.
///
/// [`sys::trace`]: https://docs.rs/graft-otp
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     assert!(observe::trace(self_pid(), true));
///     send(self_pid(), 1u8); // logged: sent u8, received u8
///     expect::<u8>();
///     assert!(observe::trace(self_pid(), false));
/// }).unwrap();
/// ```
pub fn trace(pid: Pid, on: bool) -> bool {
    let Ok(n) = current_node() else { return false };
    n.with_local(pid, |p| {
        let was = p.acct.traced.swap(on, Relaxed);
        match (was, on) {
            (false, true) => {
                TRACED.fetch_add(1, Relaxed);
                p.attend(crate::process::ATTEND_TRACED);
            }
            (true, false) => {
                TRACED.fetch_sub(1, Relaxed);
                p.unattend(crate::process::ATTEND_TRACED);
            }
            _ => {}
        }
    })
    .is_some()
}

/// A process ended: if traced (or doomed, or limited) it no longer counts.
pub(crate) fn untrace_exited(p: &crate::process::Process) {
    p.unattend_all();
    // A load first: every exit passes here, and a swap is a locked RMW.
    if p.acct.traced.load(Relaxed) && p.acct.traced.swap(false, Relaxed) {
        TRACED.fetch_sub(1, Relaxed);
    }
}

fn current_node() -> Result<&'static NodeShared, Error> {
    crate::context::worker()
        .map(|w| &*w.node)
        .ok_or(Error::NotInProcess("observe"))
}

/// This node's statistics (inside a process; outside one, use
/// [`Node::stats`](crate::Node::stats)).
///
/// # Panics
///
/// Outside a process.
pub fn node_stats() -> NodeStats {
    stats_of(current_node().expect("observe::node_stats outside a process"))
}

/// The statistics of `node` (this one, or a connected one).
///
/// # Errors
///
/// As [`call_on`](crate::call_on).
pub fn node_stats_on(node: NodeId) -> Result<NodeStats, Error> {
    let n = current_node()?;
    if node == n.id {
        return Ok(stats_of(n));
    }
    crate::call_on(node, (), |()| node_stats())
}

/// Every process of this node, one summary each.
///
/// # Panics
///
/// Outside a process.
pub fn process_list() -> Vec<ProcessSummary> {
    list_of(current_node().expect("observe::process_list outside a process"))
}

/// The process list of `node` (this one, or a connected one).
///
/// # Errors
///
/// As [`call_on`](crate::call_on).
pub fn process_list_on(node: NodeId) -> Result<Vec<ProcessSummary>, Error> {
    let n = current_node()?;
    if node == n.id {
        return Ok(list_of(n));
    }
    crate::call_on(node, (), |()| process_list())
}

/// [`process_info`](crate::process_info) of a pid on any connected node
/// (`Ok(None)`: not alive).
///
/// # Errors
///
/// As [`call_on`](crate::call_on).
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     let info = observe::process_info_on(self_pid()).unwrap().unwrap();
///     assert_eq!(info.pid, self_pid());
/// }).unwrap();
/// ```
pub fn process_info_on(pid: Pid) -> Result<Option<ProcessInfo>, Error> {
    let n = current_node()?;
    if n.is_local(pid) {
        return Ok(info_of(n, pid));
    }
    crate::call_on(pid.node(), pid, crate::process_info)
}

/// Per worker, `(busy_ns, total_ns)` since the node started (Erlang's
/// `statistics(scheduler_wall_time)`): take two readings and divide the
/// differences for the utilisation over that window.
///
/// # Panics
///
/// Outside a process.
pub fn scheduler_wall_time() -> Vec<(u64, u64)> {
    let n = current_node().expect("observe::scheduler_wall_time outside a process");
    wall_time_of(n)
}

pub(crate) fn wall_time_of(n: &NodeShared) -> Vec<(u64, u64)> {
    let (busy, total) = n.stats.busy_ns();
    busy.into_iter().map(|b| (b.min(total), total)).collect()
}

/// Utilisation history: (seconds ago, busy fraction per worker), oldest
/// first, from the observer's samples (one a second, while it runs).
pub(crate) fn history_of(n: &NodeShared) -> Vec<(f64, Vec<f64>)> {
    let s = n.stats.samples.lock();
    let now = std::time::Instant::now();
    s.iter()
        .zip(s.iter().skip(1))
        .map(|(a, b)| {
            (
                now.duration_since(b.0).as_secs_f64(),
                stats::NodeStats::utilisation((a.1, &a.2), (b.1, &b.2)),
            )
        })
        .collect()
}

pub(crate) fn stats_of(n: &NodeShared) -> NodeStats {
    let sched = &n.sched;
    let workers = sched.primaries;
    let run_queue = (0..workers)
        .map(|i| {
            (sched.stealers[i].len()
                + usize::from(sched.lifo[i].is_occupied())
                + sched.pinned_len[i].load(crate::loom::Ordering::Relaxed)) as u64
        })
        .collect();
    // Each ask is a sample too: a node whose statistics another node's
    // observer polls gets a utilisation history without a clock of its own.
    n.stats.sample(crate::observer::SAMPLES);
    let utilisation = {
        let s = n.stats.samples.lock();
        match (s.len().checked_sub(2).map(|i| &s[i]), s.back()) {
            (Some(a), Some(b)) => stats::NodeStats::utilisation((a.1, &a.2), (b.1, &b.2)),
            _ => {
                drop(s);
                wall_time_of(n)
                    .into_iter()
                    .map(|(b, t)| b as f64 / t.max(1) as f64)
                    .collect()
            }
        }
    };
    let mut mail = 0u64;
    let mut processes = 0u64;
    n.table.for_each(|p| {
        processes += 1;
        mail += stats::Acct::queued(p) as u64;
    });
    let (mapped, resident) = n.stacks.mapped(true);
    let peers = n
        .dist
        .peer_stats()
        .into_iter()
        .map(|(name, addr, c, queued, rtt, lanes)| PeerStats {
            name,
            addr: addr.to_string(),
            frames_in: c.frames_in.load(Relaxed),
            bytes_in: c.bytes_in.load(Relaxed),
            frames_out: c.frames_out.load(Relaxed),
            bytes_out: c.bytes_out.load(Relaxed),
            too_large: c.too_large.load(Relaxed),
            queued_bytes: queued as u64,
            heartbeat_rtt_us: rtt.map(|d| d.as_micros().max(1) as u64),
            lane_frames_out: lanes,
        })
        .collect();
    NodeStats {
        name: n.name.clone(),
        id: n.id,
        addr: n
            .dist
            .transport()
            .map(|t| t.local_addr().to_string())
            .unwrap_or_default(),
        uptime_ms: n.stats.started.elapsed().as_millis() as u64,
        processes,
        workers: workers as u64,
        run_queue,
        global_queue: sched.injector.len() as u64,
        utilisation,
        stacks_mapped: mapped as u64,
        stacks_resident: resident as u64,
        mail_queued: mail,
        registered: n.registry.names().len() as u64,
        restarts: n.stats.restarts.load(Relaxed),
        crashes: n.stats.crashes.load(Relaxed),
        spares_in_use: Some(
            n.sysmon
                .spares
                .iter()
                .filter(|s| s.serving().is_some())
                .count() as u64,
        ),
        peers,
    }
}

pub(crate) fn list_of(n: &NodeShared) -> Vec<ProcessSummary> {
    let mut v = Vec::with_capacity(n.live());
    n.table.for_each(|p| {
        let (name, label, sup) = {
            let m = p.meta.lock();
            (m.name.clone(), m.label.clone(), m.supervisor)
        };
        let mailbox_len = stats::Acct::queued(p) as u64;
        v.push(ProcessSummary {
            pid: p.pid,
            name,
            initial_call: label.map_or_else(|| p.acct.spawned_at.to_string(), String::from),
            status: p.state.status(),
            mailbox_len,
            runs: stats::load(&p.acct.runs),
            run_time_ns: stats::load(&p.acct.run_ns),
            memory: stats::stack_in_use(p) as u64 + 64 * mailbox_len,
            parent: p.acct.parent,
            is_supervisor: sup,
        });
    });
    v.sort_by_key(|s| s.pid);
    v
}

/// [`process_info`](crate::process_info) with the two costly fields filled
/// too: `monitors` (a scan of every process's watchers) and
/// `stack_high_water` (a `mincore` call). For any pid of a connected node.
///
/// # Errors
///
/// As [`call_on`](crate::call_on).
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     let p = spawn(|| { expect::<()>(); });
///     let _m = monitor(p);
///     let me = observe::process_info_full(self_pid()).unwrap().unwrap();
///     assert_eq!(me.monitors, vec![p]);
///     assert!(me.stack_high_water > 0);
///     send(p, ());
/// }).unwrap();
/// ```
pub fn process_info_full(pid: Pid) -> Result<Option<ProcessInfo>, Error> {
    let n = current_node()?;
    if n.is_local(pid) {
        return Ok(full_info_of(n, pid));
    }
    crate::call_on(pid.node(), pid, |pid| process_info_full(pid).ok().flatten())
}

/// [`info_of`] plus the costly fields.
pub(crate) fn full_info_of(n: &NodeShared, pid: Pid) -> Option<ProcessInfo> {
    let mut info = info_of(n, pid)?;
    let mut monitors = Vec::new();
    n.table.for_each(|q| {
        if q.meta.lock().watchers.iter().any(|(_, w)| *w == pid) {
            monitors.push(q.pid);
        }
    });
    monitors.sort();
    info.monitors = monitors;
    if let Some(p) = n.table.get(pid.serial()) {
        info.stack_high_water = (stats::stack_high_water(p.guard) as u64).max(info.stack_in_use);
    }
    Some(info)
}

/// The cheap part of `process_info` (it is called in loops: a status poll
/// must not scan the table).
pub(crate) fn info_of(n: &NodeShared, pid: Pid) -> Option<ProcessInfo> {
    // Another node's, or an earlier incarnation's of this node (dead).
    if !n.is_ours(pid) {
        return None;
    }
    let p = n.table.get(pid.serial())?;
    let (registered_name, links, monitored_by, trap_exits, label, is_supervisor) = {
        let m = p.meta.lock();
        (
            m.name.clone(),
            m.links.as_slice().to_vec(),
            m.watchers.iter().map(|(_, w)| *w).collect::<Vec<_>>(),
            m.trap_exits,
            m.label.clone(),
            m.supervisor,
        )
    };
    let ancestors = stats::ancestors(n, &p);
    let supervisor = ancestors.iter().copied().find(|a| {
        n.is_ours(*a)
            && n.table
                .with(a.serial(), |q| q.meta.lock().supervisor)
                .unwrap_or(false)
    });
    let me = crate::context::process().is_some_and(|c| c.pid == pid);
    let stack_in_use = if me {
        stats::own_stack_in_use(&p)
    } else {
        stats::stack_in_use(&p)
    };
    Some(ProcessInfo {
        pid,
        status: p.state.status(),
        mailbox_len: stats::Acct::queued(&p),
        registered_name,
        links,
        monitored_by,
        trap_exits,
        initial_call: label.map_or_else(|| p.acct.spawned_at.to_string(), String::from),
        spawned_at: p.acct.spawned_at.to_string(),
        parent: p.acct.parent,
        ancestors,
        supervisor,
        is_supervisor,
        monitors: Vec::new(),
        runs: stats::load(&p.acct.runs),
        run_time_ns: stats::load(&p.acct.run_ns),
        stack_size: u64::from(p.guard.size),
        stack_in_use: stack_in_use as u64,
        stack_high_water: 0,
    })
}

impl crate::Node {
    /// This node's statistics, from any thread.
    ///
    /// ```
    /// let node = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0")).unwrap();
    /// assert_eq!(node.stats().name, node.name());
    /// node.shutdown();
    /// ```
    pub fn stats(&self) -> NodeStats {
        stats_of(self.shared())
    }

    /// This node's process list, from any thread.
    pub fn process_list(&self) -> Vec<ProcessSummary> {
        list_of(self.shared())
    }

    /// [`observe::process_info_full`](process_info_full) of a process of
    /// this node, from any thread.
    pub fn process_info(&self, pid: Pid) -> Option<ProcessInfo> {
        full_info_of(self.shared(), pid)
    }
}

/// What [`sys_call`] asks of a behaviour process (the `sys` protocol;
/// graft-otp's gen_server and supervisor answer it, see its `sys` module).
#[derive(Clone, Debug, PartialEq, Eq, crate::Mobile)]
pub enum SysOp {
    /// Its state, formatted (the server's `format_status`).
    GetState,
    /// Stop handling anything but sys requests until [`SysOp::Resume`].
    Suspend,
    /// Handle messages again.
    Resume,
    /// Run the state replacement registered under the request's tag (local
    /// only: the replacement is a closure).
    Replace,
    /// Run an encoded mobile function on the state (graft-otp's
    /// `sys::replace_state_with`; any node).
    ReplaceWith(Vec<u8>),
}

/// A sys request: `op`, answered to `from` with a [`SysReply`] tagged `tag`.
#[derive(Clone, Debug, crate::Mobile)]
pub struct SysRequest {
    /// What is asked.
    pub op: SysOp,
    /// Who asks.
    pub from: Pid,
    /// The answer's tag.
    pub tag: crate::MonitorRef,
}

/// The answer to a [`SysRequest`].
#[derive(Clone, Debug, crate::Mobile)]
pub struct SysReply {
    /// The request's tag.
    pub tag: crate::MonitorRef,
    /// The formatted state (or `"ok"`), or why not.
    pub result: Result<String, String>,
}

/// Asks `pid` (on any node) a sys request and waits up to `timeout` for the
/// answer. A process that does not speak the protocol (not a behaviour)
/// never answers: `Err(Error::Timeout)`.
///
/// # Errors
///
/// `Error::Timeout`; `Error::Exited(reason)` if it dies first (`NoProc`:
/// it was not alive); `Error::Remote(why)` if it refused.
pub fn sys_call(pid: Pid, op: SysOp, timeout: std::time::Duration) -> Result<String, Error> {
    let tag = crate::make_ref();
    sys_call_tagged(pid, op, tag, timeout)
}

/// [`sys_call`] with a tag the caller chose (for [`SysOp::Replace`]).
///
/// # Errors
///
/// As [`sys_call`].
pub fn sys_call_tagged(
    pid: Pid,
    op: SysOp,
    tag: crate::MonitorRef,
    timeout: std::time::Duration,
) -> Result<String, Error> {
    let m = crate::monitor(pid);
    crate::send(
        pid,
        SysRequest {
            op,
            from: crate::self_pid(),
            tag,
        },
    );
    let got = crate::receive()
        .when(
            move |r: &SysReply| r.tag == tag,
            |r: SysReply| Some(Ok(r.result)),
        )
        .when(
            move |d: &crate::ProcessDied| d.monitor == m,
            |d: crate::ProcessDied| Some(Err(d.reason)),
        )
        .timeout(timeout)
        .flatten();
    crate::demonitor_flush(m);
    match got {
        Some(Ok(Ok(s))) => Ok(s),
        Some(Ok(Err(why))) => Err(Error::Remote(why)),
        Some(Err(reason)) => Err(Error::Exited(reason)),
        None => Err(Error::Timeout),
    }
}
