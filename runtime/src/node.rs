//! The node: configuration, start, the node loop, process lifecycle, shutdown.
//!
//! A [`Node`] owns every thread it starts: `workers` scheduler threads, the
//! node loop, the timer thread and the blocking pool. Several nodes may live
//! in one OS process; they share nothing.
//!
//! # Who owns what
//!
//! The node loop drains a command queue and owns what crosses the node
//! boundary (connections, pending remote requests). Per-process bookkeeping
//! (mailbox, links, monitors, name) lives in the process's table entry, under
//! that entry's lock, so that the fast paths never wait for another thread:
//! local spawn, send, monitor and link are done by the calling process itself.
//! (Rejected: routing local monitors and links through the node loop, as the
//! paper does. A round trip to another OS thread costs ~16 µs here, and every
//! gen_server call monitors its server.)
//!
//! # Shutdown
//!
//! 1. Mark the node stopping (new spawns fail with `NodeDown`) and close
//!    every connection: peers see `NoConnection`.
//! 2. Send `Kill` to every process and wait (bounded) until all have exited.
//! 3. Stop and join the workers, the timer thread, the node loop and the
//!    blocking pool.
//! 4. Drop what is left of the table (a process that never yields cannot be
//!    killed; its stack is unwound here, on the caller's thread).

use crate::context;
use crate::coroutine::Coro;
use crate::dist::{self, Dist, NetHandler};
use crate::error::Error;
use crate::exit::{ExitReason, ProcessDied};
use crate::loom::{AtomicBool, AtomicU64, Condvar, Mutex, Ordering};
use crate::pid::{MonitorRef, NodeId, Pid};
use crate::process::{ExitUnwind, Mail, Process};
use crate::sched::blocking::BlockingPool;
use crate::sched::timer::{Action, Timers};
use crate::sched::worker::WorkerCtx;
use crate::sched::{Runnable, Scheduler};
use crate::stack::{self, StackPool};
use crate::table::{ProcessTable, Registry};
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::net::SocketAddr;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How to start a node.
///
/// ```
/// let cfg = graft::NodeConfig::new("127.0.0.1:0").workers(2).stack_size(64 * 1024);
/// assert_eq!(cfg.worker_count(), 2);
/// ```
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub(crate) listen: String,
    pub(crate) name: Option<String>,
    pub(crate) cookie: Option<String>,
    pub(crate) workers: usize,
    pub(crate) stack_size: usize,
    pub(crate) stack_trim: crate::stack::Trim,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) max_processes: usize,
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) auto_connect: crate::netmon::AutoConnect,
    pub(crate) observer: Option<crate::observer::ObserverConfig>,
    pub(crate) default_logger: bool,
    pub(crate) max_pending_handshakes: Option<usize>,
    pub(crate) max_pending_per_address: Option<usize>,
    pub(crate) handshake_timeout: Option<Duration>,
    pub(crate) encrypt: bool,
    pub(crate) long_schedule: Duration,
    pub(crate) max_spare_workers: Option<usize>,
    pub(crate) busy_dist_limit: usize,
    pub(crate) dist_unsent_limit: usize,
    pub(crate) tls: Option<graft_net::TlsConfig>,
    pub(crate) discovery: Option<crate::discovery::DiscoveryConfig>,
    pub(crate) max_message_size: usize,
    pub(crate) overlay: Option<crate::overlay::OverlayConfig>,
    pub(crate) lanes: usize,
}

impl NodeConfig {
    /// A node that will listen on `listen` (`"127.0.0.1:0"` picks a port).
    pub fn new(listen: &str) -> NodeConfig {
        NodeConfig {
            listen: listen.to_string(),
            name: None,
            cookie: None,
            workers: default_workers(),
            stack_size: 64 * 1024,
            stack_trim: Default::default(),
            shutdown_timeout: Duration::from_secs(5),
            max_processes: 1 << 20,
            heartbeat: None,
            auto_connect: Default::default(),
            observer: None,
            default_logger: true,
            max_pending_handshakes: None,
            max_pending_per_address: None,
            handshake_timeout: None,
            encrypt: true,
            long_schedule: Duration::from_millis(10),
            max_spare_workers: None,
            busy_dist_limit: 1 << 20,
            dist_unsent_limit: graft_net::NetConfig::DEFAULT_UNSENT_LIMIT,
            discovery: None,
            tls: None,
            max_message_size: graft_net::NetConfig::DEFAULT_MAX_MESSAGE_SIZE,
            overlay: None,
            lanes: 1,
        }
    }
    /// The node's name, `name@host` (its [`NodeId`] is a hash of it, and it
    /// is how the node displays in logs, errors and `Debug`).
    ///
    /// Default: `graft@<ip>:<port>` when the listen address has a fixed port
    /// (stable: a restarted node keeps its name and id), but for port 0 a
    /// new random name `graft-<hex>@<ip>` at each start (a restarted node is
    /// a new node to its peers). Give a name, or a port, for a node that
    /// must be recognised after a restart.
    ///
    /// ```
    /// let node = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0").name("kv@127.0.0.1")).unwrap();
    /// assert_eq!(node.name(), "kv@127.0.0.1");
    /// node.shutdown();
    /// ```
    pub fn name(mut self, name: &str) -> NodeConfig {
        self.name = Some(name.to_string());
        self
    }
    /// The cluster cookie (peers must share it).
    pub fn cookie(mut self, cookie: &str) -> NodeConfig {
        self.cookie = Some(cookie.to_string());
        self
    }
    /// Scheduler threads (default: `GRAFT_WORKERS` if set, else the
    /// available parallelism).
    pub fn workers(mut self, n: usize) -> NodeConfig {
        self.workers = n.max(1);
        self
    }
    /// Default stack size of a process (virtual; default 64 KiB).
    pub fn stack_size(mut self, bytes: usize) -> NodeConfig {
        self.stack_size = bytes;
        self
    }
    /// When the stacks of exited processes give their memory back: each
    /// thread's free list keeps the `keep` stacks freed last resident (a
    /// spawn after an exit reuses one, already faulted in), and the pages of
    /// the others go back to the kernel once they have sat unused for
    /// `after` (a background thread does it, one `madvise` per run of
    /// neighbouring stacks). Default: 512 and 2 s, so that RSS falls back
    /// near its start a few seconds after a million processes exit.
    /// `after` zero keeps every free stack's pages.
    ///
    /// ```
    /// use std::time::Duration;
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").stack_trim(64, Duration::from_millis(200));
    /// # let _ = cfg;
    /// ```
    pub fn stack_trim(mut self, keep: usize, after: Duration) -> NodeConfig {
        self.stack_trim = crate::stack::Trim { keep, after };
        self
    }
    /// How long `shutdown` waits for processes to exit after `Kill`.
    pub fn shutdown_timeout(mut self, d: Duration) -> NodeConfig {
        self.shutdown_timeout = d;
        self
    }
    /// How many processes the node must be able to hold at once (default
    /// 2^20). Each process stack costs two kernel mappings, so at start the
    /// node makes room in `vm.max_map_count` (raising it when permitted, with
    /// a log line; otherwise a warning says how). See
    /// [`ensure_map_count`](crate::ensure_map_count).
    pub fn max_processes(mut self, n: usize) -> NodeConfig {
        self.max_processes = n;
        self
    }
    /// The heartbeat tick between nodes: a peer silent for three ticks is
    /// declared lost (default 1 s).
    pub fn heartbeat(mut self, tick: Duration) -> NodeConfig {
        self.heartbeat = Some(tick);
        self
    }
    /// When to connect to a known node on first use of one of its pids
    /// (default [`AutoConnect::Always`](crate::AutoConnect::Always), as
    /// Erlang's `dist_auto_connect`).
    pub fn auto_connect(mut self, mode: crate::netmon::AutoConnect) -> NodeConfig {
        self.auto_connect = mode;
        self
    }
    /// Serve the web observer (and `/metrics`) on `addr`, e.g.
    /// `"127.0.0.1:9090"`; see [`observer`](crate::observer).
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").observer("127.0.0.1:0");
    /// # let _ = cfg;
    /// ```
    pub fn observer(mut self, addr: &str) -> NodeConfig {
        self.observer = Some(crate::observer::ObserverConfig::new(addr));
        self
    }
    /// Serve the web observer with full options (an access token, another
    /// bind address); see [`ObserverConfig`](crate::observer::ObserverConfig).
    pub fn observer_config(mut self, cfg: crate::observer::ObserverConfig) -> NodeConfig {
        self.observer = Some(cfg);
        self
    }
    /// Whether [`Node::start`] installs graft's small stderr logger when the
    /// program has installed none (default `true`); see
    /// [`report`](crate::report).
    pub fn default_logger(mut self, on: bool) -> NodeConfig {
        self.default_logger = on;
        self
    }
    /// At most this many inbound connections in their handshake at once
    /// (default 64); beyond it, new sockets are closed at once. Pending
    /// handshakes hold no thread.
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").max_pending_handshakes(16);
    /// # let _ = cfg;
    /// ```
    pub fn max_pending_handshakes(mut self, n: usize) -> NodeConfig {
        self.max_pending_handshakes = Some(n);
        self
    }
    /// At most this many of the inbound handshakes in progress from one
    /// source address (an IPv6 /64) (default 8), so that one stranger
    /// cannot hold every slot; beyond it, its new sockets are closed at
    /// once. Raise it for a cluster of many nodes on one host that connect
    /// to one node all at once.
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").max_pending_per_address(4);
    /// # let _ = cfg;
    /// ```
    pub fn max_pending_per_address(mut self, n: usize) -> NodeConfig {
        self.max_pending_per_address = Some(n);
        self
    }
    /// How long an inbound connection has to complete its handshake
    /// (default 5 s).
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0")
    ///     .handshake_timeout(std::time::Duration::from_secs(2));
    /// # let _ = cfg;
    /// ```
    pub fn handshake_timeout(mut self, timeout: Duration) -> NodeConfig {
        self.handshake_timeout = Some(timeout);
        self
    }
    /// Encrypt all distribution traffic (AES-256-GCM with keys from the
    /// handshake; the default), or, with `false` on both nodes, only
    /// authenticate it (every frame carries a MAC, so none can be forged or
    /// replayed, but they can be read on the wire). A connection is
    /// encrypted when either node asks for it. See `docs/security.md`.
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").encrypt(false);
    /// # let _ = cfg;
    /// ```
    pub fn encrypt(mut self, on: bool) -> NodeConfig {
        self.encrypt = on;
        self
    }
    /// Run distribution over TLS 1.3 (as Erlang's `inet_tls_dist`): both
    /// nodes of every connection present a certificate of the cluster's
    /// CA naming them (a SAN equal to the node name, or to the host of a
    /// `name@host` name), the cookie handshake runs inside TLS. Plain TCP
    /// is the default; a TLS node and a plain one refuse each other. See
    /// [`TlsConfig`](graft_net::TlsConfig) and `docs/security.md`.
    ///
    /// ```no_run
    /// # fn main() -> std::io::Result<()> {
    /// // DER files made by the cluster's CA (see `docs/security.md`).
    /// let chain = vec![std::fs::read("node.crt.der")?];
    /// let key = std::fs::read("node.key.pk8.der")?;
    /// let ca = vec![std::fs::read("ca.crt.der")?];
    /// let tls = graft_net::TlsConfig::new(chain, key, ca)?;
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").tls(tls);
    /// # let _ = cfg;
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls(mut self, tls: graft_net::TlsConfig) -> NodeConfig {
        self.tls = Some(tls);
        self
    }
    /// The configured number of workers.
    pub fn worker_count(&self) -> usize {
        self.workers
    }
    /// How long a process may hold its worker without yielding before the
    /// system monitor puts a spare worker thread to serve that worker's
    /// queue (default 10 ms; see [`system_monitor`](crate::system_monitor)).
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").long_schedule(std::time::Duration::from_millis(50));
    /// # let _ = cfg;
    /// ```
    pub fn long_schedule(mut self, d: Duration) -> NodeConfig {
        self.long_schedule = d;
        self
    }
    /// How many spare worker threads the system monitor may start while
    /// workers are held by processes that do not yield (default: as many as
    /// workers; 0 turns the hand-off off). They are started on first need.
    pub fn max_spare_workers(mut self, n: usize) -> NodeConfig {
        self.max_spare_workers = Some(n);
        self
    }
    /// Connections per peer (default 1; at most 64): with `n > 1` a node
    /// that connects opens `n - 1` extra connections to the same peer
    /// (Partisan's parallel channels), and each process's messages and
    /// signals travel on the lane its pid picks, so per-sender order is
    /// kept while different processes' traffic (a bulk stream and a ping)
    /// does not share one TCP stream. The smaller of the two nodes'
    /// settings is used; any lane lost takes the node down. Needs the
    /// poller transport (`GRAFT_NET_IO=threads` with `n > 1` fails at start).
    /// See graft-net's `NetConfig::lanes`.
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").lanes(4);
    /// # let _ = cfg;
    /// ```
    pub fn lanes(mut self, n: usize) -> NodeConfig {
        self.lanes = n;
        self
    }
    /// Bytes queued for one peer past which the connection is busy (a
    /// `BusyDist` system monitor event; default 1 MiB, as Erlang's
    /// `dist_buf_busy_limit`).
    pub fn busy_dist_limit(mut self, bytes: usize) -> NodeConfig {
        self.busy_dist_limit = bytes;
        self
    }
    /// Bytes written to a peer's socket and not yet sent that the kernel
    /// may hold (default 64 KiB; `0`: the system's setting). The rest waits
    /// in graft's queue for the peer, where the busy limit counts it, so a
    /// round trip is not queued behind megabytes of bulk in the kernel. See
    /// graft-net's `NetConfig::unsent_limit`.
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").dist_unsent_limit(256 << 10);
    /// # let _ = cfg;
    /// ```
    pub fn dist_unsent_limit(mut self, bytes: usize) -> NodeConfig {
        self.dist_unsent_limit = bytes;
        self
    }
    /// Find the cluster's nodes through `source`, polled every 5 s (see
    /// [`discovery`](crate::discovery) and [`NodeConfig::discovery_interval`]).
    ///
    /// ```
    /// let seeds = graft::discovery::StaticSeeds::parse(["127.0.0.2:4370"]).unwrap();
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").discovery(seeds);
    /// # let _ = cfg;
    /// ```
    pub fn discovery(mut self, source: impl crate::discovery::Discovery) -> NodeConfig {
        let interval = self
            .discovery
            .as_ref()
            .map_or(crate::discovery::DEFAULT_INTERVAL, |d| d.interval);
        self.discovery = Some(crate::discovery::DiscoveryConfig {
            source: Arc::new(parking_lot::Mutex::new(Box::new(source))),
            interval,
        });
        self
    }
    /// How often the [`discovery`](NodeConfig::discovery) source is polled
    /// (default 5 s; at least 10 ms). Set it after `discovery`. While polls
    /// find nothing to do (every seed connected, or the node in the partial
    /// overlay), each waits twice as long as the last, up to 5 s (or this
    /// interval if longer); a poll with work resets it.
    ///
    /// ```
    /// let seeds = graft::discovery::StaticSeeds::parse(["127.0.0.2:4370"]).unwrap();
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0")
    ///     .discovery(seeds)
    ///     .discovery_interval(std::time::Duration::from_secs(1));
    /// # let _ = cfg;
    /// ```
    pub fn discovery_interval(mut self, every: Duration) -> NodeConfig {
        if let Some(d) = &mut self.discovery {
            d.interval = every.max(Duration::from_millis(10));
        }
        self
    }
    /// The largest message (encoded) sent to or accepted from another node
    /// (default 1 GiB). A larger one fails at the sender with
    /// [`Error::MessageTooLarge`](crate::Error::MessageTooLarge): `send_to`,
    /// `spawn_on` and calls return it, `send` logs it and counts it in
    /// [`PeerStats::too_large`](crate::observe::PeerStats::too_large). Use the same value on
    /// every node.
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").max_message_size(256 << 20);
    /// # let _ = cfg;
    /// ```
    pub fn max_message_size(mut self, bytes: usize) -> NodeConfig {
        self.max_message_size = bytes;
        self
    }
    /// How the cluster's nodes connect (default
    /// [`Topology::FullMesh`](crate::Topology::FullMesh)). With
    /// [`Topology::Partial`](crate::Topology::Partial) each node holds
    /// O(log N) connections, [`Node::nodes`] lists the cluster's members
    /// and other nodes are reached over connections opened on demand; see
    /// [`overlay`](crate::overlay). Use the same topology on every node.
    ///
    /// ```
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").topology(graft::Topology::Partial);
    /// # let _ = cfg;
    /// ```
    pub fn topology(mut self, t: crate::Topology) -> NodeConfig {
        self.overlay = match t {
            crate::Topology::FullMesh => None,
            crate::Topology::Partial => Some(self.overlay.unwrap_or_default()),
        };
        self
    }
    /// [`Topology::Partial`](crate::Topology::Partial) with this tuning.
    ///
    /// ```
    /// let o = graft::overlay::OverlayConfig::default().active_size(3);
    /// let cfg = graft::NodeConfig::new("127.0.0.1:0").overlay(o);
    /// # let _ = cfg;
    /// ```
    pub fn overlay(mut self, o: crate::overlay::OverlayConfig) -> NodeConfig {
        self.overlay = Some(o);
        self
    }
}

/// Scheduler threads when not configured: `GRAFT_WORKERS` if set (like
/// Erlang's `+S`), else the available parallelism, read once per OS process
/// (as the BEAM reads it at boot): `available_parallelism` opens and reads
/// the cgroup's files, system calls on every `NodeConfig::new`, where a
/// host starting 250 nodes on a busy machine lost about a tenth of its
/// start's context switches (one profile; docs/decisions.md, session 24).
fn default_workers() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    std::env::var("GRAFT_WORKERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| {
            *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        })
}

/// Work for the node loop.
#[derive(Debug)]
pub(crate) enum NodeCommand {
    /// Stop the loop.
    Stop,
    /// The connection to a node was lost: complete what waited on it.
    PeerDown {
        node: NodeId,
        peer: graft_net::PeerId,
    },
    /// Connect to a node (full mesh: a peer told us of it).
    Connect(SocketAddr),
}

/// Everything one node's threads share.
#[derive(Debug)]
pub(crate) struct NodeShared {
    /// Addresses a mesh connect is under way to (one connect per address,
    /// however many peers announce it meanwhile).
    pub(crate) joining: parking_lot::Mutex<ahash::AHashSet<SocketAddr>>,
    pub(crate) id: NodeId,
    pub(crate) creation: u32,
    pub(crate) name: String,
    pub(crate) stack_size: usize,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) table: ProcessTable,
    pub(crate) registry: Registry,
    pub(crate) sched: Scheduler,
    pub(crate) stacks: Arc<StackPool>,
    pub(crate) timers: Timers,
    pub(crate) blocking: BlockingPool,
    pub(crate) commands: Sender<NodeCommand>,
    pub(crate) dist: Dist,
    pub(crate) sysmon: crate::sysmon::Sysmon,
    next_serial: AtomicU64,
    next_ref: AtomicU64,
    /// Processes spawned and not yet finished, striped per worker (plus one
    /// stripe for other threads) so spawns and exits on different cores do
    /// not share a cache line; a stripe may go negative, the sum cannot.
    live: Vec<crossbeam_utils::CachePadded<std::sync::atomic::AtomicIsize>>,
    live_lock: Mutex<()>,
    live_cv: Condvar,
    pub(crate) stopping: AtomicBool,
    /// Accounting and node statistics (stats.rs).
    pub(crate) stats: crate::stats::NodeStats,
}

/// How to spawn one process.
#[derive(Debug, Default, Clone)]
pub(crate) struct SpawnSpec {
    pub(crate) stack_size: Option<usize>,
    pub(crate) pinned: bool,
    pub(crate) link: Option<Pid>,
    pub(crate) monitor: Option<(MonitorRef, Pid)>,
    pub(crate) trap_exits: bool,
    pub(crate) max_mailbox: Option<(usize, crate::limits::Overflow)>,
}

impl NodeShared {
    pub(crate) fn make_ref(&self) -> MonitorRef {
        MonitorRef::new(self.id, self.next_ref.fetch_add(1, Ordering::Relaxed))
    }

    #[inline]
    pub(crate) fn is_local(&self, pid: Pid) -> bool {
        pid.node() == self.id
    }

    /// A pid of this node's current incarnation (one of an earlier
    /// incarnation names a process that is dead).
    #[inline]
    pub(crate) fn is_ours(&self, pid: Pid) -> bool {
        self.is_local(pid) && pid.creation() == self.creation
    }

    /// Starts a process running `f`.
    #[track_caller]
    pub(crate) fn spawn<F>(&self, spec: SpawnSpec, f: F) -> Result<Pid, Error>
    where
        F: FnOnce() + Send + 'static,
    {
        if self.stopping.load(Ordering::Relaxed) {
            return Err(Error::NodeDown);
        }
        let requested = spec.stack_size.unwrap_or(self.stack_size);
        let stack = stack::round_size(requested)
            .ok_or_else(|| stack::too_big(requested))
            .and_then(|size| self.stacks.get(size))
            .map_err(|e| Error::Resource(format!("process stack: {e}")))?;
        let worker = context::worker().filter(|w| std::ptr::eq(&*w.node, self));
        let serial = match worker {
            Some(w) => w.next_serial(&self.next_serial),
            None => self.next_serial.fetch_add(1, Ordering::Relaxed),
        };
        let pid = Pid::new(self.id, self.creation, serial);
        let pinned = if spec.pinned {
            Some(context::worker().map_or(0, |w| w.home() as u32))
        } else {
            None
        };
        let mut proc = Process::new(pid, pinned, spec.trap_exits, stack.guard());
        proc.acct = crate::stats::Acct::new(
            std::panic::Location::caller(),
            context::process().map(|p| p.pid),
        );
        proc.initial_call = std::any::type_name::<F>;
        if let Some((max, policy)) = spec.max_mailbox {
            proc.limit = Some(Box::new(crate::process::Limit::new(max, policy)));
            // Kept set: each drain records the private queue's length.
            proc.has_signal = AtomicBool::new(true);
            proc.attend(crate::process::ATTEND_LIMITED);
        }
        let p = Arc::new(proc);
        let raw: *const Process = Arc::as_ptr(&p);
        let raw = RawProc(raw);
        p.set_coro(Coro::new(
            stack,
            crate::coroutine::Body::new(move |y: &crate::coroutine::ProcYielder| {
                let raw = raw;
                // SAFETY: the process owns this coroutine and outlives it (see
                // `Process`'s Drop); only the process itself touches `local`.
                let me = unsafe { &*raw.0 };
                // SAFETY: as above.
                unsafe { me.local().yielder = Some(std::ptr::NonNull::from(y)) };
                let reason = match catch_unwind(AssertUnwindSafe(f)) {
                    Ok(()) => ExitReason::Normal,
                    Err(payload) => {
                        if me.forced_drop.load(Ordering::Relaxed) {
                            resume_unwind(payload);
                        }
                        crate::report::note_unwind(me, &*payload);
                        exit_reason_of(&*payload)
                    }
                };
                // An exit signal acted on (and its unwind caught by the
                // body) decides the reason, whatever the body returned.
                // SAFETY: as above.
                unsafe { me.local() }.doomed.take().map_or(reason, |d| *d)
            }),
        ));
        {
            let mut meta = p.meta.lock();
            if let Some(l) = spec.link {
                meta.links.push(l);
            }
            if let Some(m) = spec.monitor {
                meta.watchers.push(m);
            }
        }
        self.live_stripe()
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // In the table before any queue: a queued process may run and finish
        // at once, and its entry is what keeps it alive (run_queue.rs).
        self.table.insert(p.clone());
        self.sched.push(&p);
        Ok(pid)
    }

    /// Delivers mail to a pid of this node (dropped if it is not alive).
    #[inline]
    pub(crate) fn deliver(&self, to: Pid, mail: Mail) {
        if !self.is_local(to) {
            return self.dist.deliver(to, mail);
        }
        if to.creation() != self.creation {
            // A pid of an earlier incarnation of this node: dead.
            return drop_undelivered(to, mail);
        }
        let mut mail = Some(mail);
        self.table.with(to.serial(), |p| {
            if let Some(m) = mail.take() {
                match p.deliver_watched(m, Some(self)) {
                    Ok(true) => self.sched.wake(p),
                    Ok(false) => {}
                    Err(m) => mail = Some(m),
                }
            }
        });
        if let Some(m) = mail {
            drop_undelivered(to, m);
        }
    }

    /// Delivers messages that arrived together for the local pid `to`
    /// (see `arrivals.rs`): [`NodeShared::deliver`] for each, under one
    /// mailbox lock and with one wake. Empties `batch`.
    pub(crate) fn deliver_many(&self, to: Pid, batch: &mut Vec<Mail>) {
        if to.creation() == self.creation {
            self.table.with(to.serial(), |p| {
                if p.deliver_many(batch, self) == Some(true) {
                    self.sched.wake(p);
                }
            });
        }
        for m in batch.drain(..) {
            drop_undelivered(to, m);
        }
    }

    /// The mail that carries `msg` to `to`: the value itself for a process of
    /// this node, its encoding for another node (`None`, logged, for a
    /// local-only message to another node).
    pub(crate) fn mail_for<M: crate::Message>(&self, to: Pid, msg: M) -> Option<Mail> {
        if self.is_local(to) {
            return Some(Mail::message(msg));
        }
        match msg.encode_remote() {
            Ok((desc, bytes)) => Some(Mail::Encoded { desc, bytes }),
            Err(e) => {
                log::error!("graft: send to {to}: {e}");
                None
            }
        }
    }

    /// Runs `f` on the bookkeeping of the live local process `pid`, under
    /// its lock; `false` (and `f` not run) if there is none: not of this
    /// node or incarnation, gone, or already exiting.
    pub(crate) fn with_live_meta(
        &self,
        pid: Pid,
        f: impl FnOnce(&mut crate::process::Meta),
    ) -> bool {
        self.with_local(pid, |t| {
            let mut m = t.meta.lock();
            if m.exited {
                return false;
            }
            f(&mut m);
            true
        })
        .unwrap_or(false)
    }

    /// Removes monitor `r` from the watchers of local process `target`.
    pub(crate) fn unwatch(&self, target: Pid, r: crate::pid::MonitorRef) {
        // A server with 1,000 callers in a call holds 1,000 watchers, and a
        // call ends one: `Watchers` finds it by an index (watchers.rs).
        self.with_live_meta(target, |m| {
            m.watchers.remove(r);
        });
    }

    /// Cancels monitors a process held as it ends, as `demonitor` would
    /// (a name monitor's placeholder target is remote, or local and never
    /// recorded: `unwatch` finds nothing).
    fn cancel_monitors(&self, held: crate::process::LazyVec<(crate::pid::MonitorRef, Pid)>) {
        for (r, target) in held {
            if self.is_local(target) {
                self.unwatch(target, r);
            } else {
                self.dist.demonitor(target, r);
            }
        }
    }

    /// Removes `other` from the links of local process `pid`.
    pub(crate) fn unlink_local(&self, pid: Pid, other: Pid) {
        self.with_live_meta(pid, |m| m.links.retain(|p| *p != other));
    }

    /// Runs `f` on the live process `pid` names on this node (none: not of
    /// this node or incarnation, or gone), without taking a reference.
    #[inline]
    pub(crate) fn with_local<R>(&self, pid: Pid, f: impl FnOnce(&Arc<Process>) -> R) -> Option<R> {
        if !self.is_ours(pid) {
            return None;
        }
        self.table.with(pid.serial(), f)
    }

    /// The live process `pid` names on this node.
    #[inline]
    pub(crate) fn local_process(&self, pid: Pid) -> Option<Arc<Process>> {
        self.with_local(pid, Arc::clone)
    }

    /// Wakes a parked process of this node by pid (timers).
    pub(crate) fn wake_pid(&self, pid: Pid) {
        self.table.with(pid.serial(), |p| self.wake(p));
    }

    /// Schedules `p` if `wake` says so.
    pub(crate) fn wake(&self, p: &Process) {
        if p.state.wake() {
            self.sched.wake(p);
        }
    }

    /// A process's body returned (or unwound): tell its watchers and links,
    /// free its name, its table entry and its stack.
    pub(crate) fn finish(&self, r: Runnable, reason: ExitReason) {
        // SAFETY: called by the worker that ran the process, right after its
        // body returned: it is still in the table (run_queue.rs).
        let pid = unsafe { r.process() }.pid;
        // Out of the table first, in one write lock (no lookup before it):
        // the entry's count is ours now and keeps the process alive to the
        // end of this function. From here a send finds no process (the mail
        // is dropped, as for any dead pid) and a new link or monitor is
        // answered with `NoProc`, as once `exited` is set below.
        let Some(p) = self.table.remove(pid.serial()) else {
            log::error!("graft: process {pid} finished but is not in the table");
            return;
        };
        // SAFETY: the coroutine has returned; nothing will resume it, and the
        // worker that ran it is the one calling us.
        if let Some(c) = unsafe { p.coro_mut() }.take() {
            drop(c.into_stack());
        }
        p.state.finish();
        crate::report::on_exit(self, &p, &reason);
        let (links, watchers, name) = {
            let mut m = p.meta.lock();
            m.exited = true;
            (
                std::mem::take(&mut m.links),
                std::mem::take(&mut m.watchers),
                m.name.take(),
            )
        };
        if let Some(n) = name {
            self.registry.remove_if(&n, p.pid);
        }
        let unread = p.mailbox.close();
        // SAFETY: the process has stopped running; nobody else uses `local`.
        let local = unsafe { p.local() };
        // What the process held (mail, storage, its send cache) goes now;
        // the rest goes with the entry. Mail and storage are the user's
        // values, dropped last (below).
        let left = (
            std::mem::take(&mut local.saved),
            local.storage.take(),
            unread,
        );
        local.last_target = None;
        // The monitors it held end with it (Erlang): the other half of each
        // (the target's watcher entry, or a remote record and its frame)
        // would otherwise outlive the watcher, a leak in a long-lived
        // server and a connection that never idles.
        let held = std::mem::take(&mut local.monitors);
        self.cancel_monitors(held);
        if !reason.is_normal() {
            log::debug!("graft: process {} exited: {reason}", p.pid);
        }
        for (r, w) in watchers {
            self.deliver(
                w,
                Mail::Down(ProcessDied {
                    pid: p.pid,
                    reason: reason.clone(),
                    monitor: r,
                }),
            );
        }
        // A process killed by a `Kill` signal ends with `Killed`, which is
        // what its links see; one that ended itself with `Kill` passes an
        // ordinary, trappable `kill` on (Erlang).
        for l in links {
            self.deliver(
                l,
                Mail::Signal {
                    from: p.pid,
                    reason: reason.clone(),
                    link: true,
                },
            );
        }
        guarded(
            || drop(left),
            || format!("dropping what process {} left behind", p.pid),
        );
        self.live_stripe()
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if self.stopping.load(Ordering::SeqCst) && self.live() == 0 {
            let _g = self.live_lock.lock();
            self.live_cv.notify_all();
        }
    }

    /// Waits until no process is alive, or `deadline`.
    fn wait_all_exited(&self, deadline: Instant) -> bool {
        let mut g = self.live_lock.lock();
        loop {
            if self.live() == 0 {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = self
                .live_cv
                .wait_timeout(g, (deadline - now).min(Duration::from_millis(50)));
        }
    }

    /// Processes alive now (a sum over stripes: exact once quiet).
    pub(crate) fn live(&self) -> usize {
        let n: isize = self
            .live
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Acquire))
            .sum();
        n.max(0) as usize
    }

    /// This thread's stripe of the live count.
    fn live_stripe(&self) -> &std::sync::atomic::AtomicIsize {
        let i = context::worker()
            .filter(|w| std::ptr::eq(&*w.node, self))
            .map_or(self.live.len() - 1, |w| w.index);
        &self.live[i]
    }

    /// Adds a timer.
    pub(crate) fn add_timer(&self, at: Instant, action: Action) -> crate::TimerRef {
        self.timers.add(at, action)
    }
}

/// A raw process pointer that may cross into the coroutine closure.
#[derive(Clone, Copy)]
struct RawProc(*const Process);
// SAFETY: the pointer is only dereferenced by the process's own body, while
// the process (which owns the coroutine holding this value) is alive.
unsafe impl Send for RawProc {}

/// Turns a caught unwind into an exit reason.
pub(crate) fn exit_reason_of(payload: &(dyn std::any::Any + Send)) -> ExitReason {
    if let Some(e) = payload.downcast_ref::<ExitUnwind>() {
        return e.reason.clone();
    }
    ExitReason::Other(panic_message(payload))
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// A running node. Dropping it shuts it down.
///
/// ```
/// use graft::{Node, NodeConfig};
/// let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).unwrap();
/// let answer = node.run(|| 6 * 7).unwrap();
/// assert_eq!(answer, 42);
/// node.shutdown();
/// ```
#[derive(Debug)]
pub struct Node {
    shared: Arc<NodeShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stopped: AtomicBool,
}

impl Node {
    /// Starts a node: scheduler workers, node loop, timer thread.
    ///
    /// # Errors
    ///
    /// `Error::Io` if the listen address does not parse or a thread cannot
    /// be started.
    pub fn start(config: NodeConfig) -> Result<Node, Error> {
        if config.default_logger {
            crate::report::install_default_logger();
        }
        install_panic_hook();
        crate::overflow::install();
        if cfg!(panic = "abort") {
            log::warn!(
                "graft: built with panic = \"abort\": a panicking process will take the whole \
                 node down and supervisors cannot restart it"
            );
        }
        let _ = stack::ensure_map_count(config.max_processes);
        let default_stack = stack::round_size(config.stack_size)
            .ok_or_else(|| stack::too_big(config.stack_size))?;
        let addr: SocketAddr = config.listen.parse().map_err(|e| {
            Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("listen address {:?}: {e}", config.listen),
            ))
        })?;
        let creation = random_creation();
        let name = config
            .name
            .clone()
            .unwrap_or_else(|| default_name(addr, creation));
        crate::pid::note_node_name(&name);
        let spares = config.max_spare_workers.unwrap_or(config.workers);
        let mut workers: Vec<crossbeam_deque::Worker<crate::sched::Runnable>> = (0..config.workers
            + spares)
            .map(|_| crossbeam_deque::Worker::new_lifo())
            .collect();
        let stealers = workers.iter().map(|w| w.stealer()).collect();
        let spare_queues = workers.split_off(config.workers);
        let (tx, rx) = unbounded();
        let shared = Arc::new(NodeShared {
            id: NodeId::from_name(&name),
            creation,
            name: name.clone(),
            stack_size: config.stack_size,
            shutdown_timeout: config.shutdown_timeout,
            table: ProcessTable::new(),
            registry: Registry::default(),
            sched: Scheduler::new(stealers, config.workers),
            stacks: StackPool::with_trim(default_stack, config.stack_trim),
            timers: Timers::default(),
            blocking: BlockingPool::new("graft"),
            commands: tx,
            dist: Dist::new(),
            sysmon: crate::sysmon::Sysmon::new(
                config.long_schedule,
                config.busy_dist_limit,
                spare_queues,
            ),
            next_serial: AtomicU64::new(1),
            next_ref: AtomicU64::new(1),
            live: (0..=config.workers + spares)
                .map(|_| Default::default())
                .collect(),
            live_lock: Mutex::new(()),
            live_cv: Condvar::new(),
            stopping: AtomicBool::new(false),
            joining: Default::default(),
            stats: crate::stats::NodeStats::new(config.workers),
        });
        // Reads the table of mobile functions now (and warns now if there
        // is none), not on the first remote spawn.
        let _ = crate::graph::mobile_entries();

        shared
            .dist
            .mon
            .init(Arc::downgrade(&shared), config.auto_connect);
        if let Some(o) = config.overlay.clone() {
            let o = crate::overlay::Overlay::new(o, &name);
            shared.dist.mon.set_overlay(Arc::new(o));
        }
        let cookie = graft_net::resolve_cookie(config.cookie.as_deref())?;
        let mut net = graft_net::NetConfig::new(name.clone(), addr)
            .creation(creation)
            .fingerprint(crate::graph::fingerprint())
            .cookie(cookie);
        if let Some(tick) = config.heartbeat {
            net = net.heartbeat(tick);
        }
        if let Some(n) = config.max_pending_handshakes {
            net = net.max_pending_handshakes(n);
        }
        if let Some(n) = config.max_pending_per_address {
            net = net.max_pending_per_address(n);
        }
        if let Some(t) = config.handshake_timeout {
            net = net.handshake_timeout(t);
        }
        net = net
            .encrypt(config.encrypt)
            .max_message_size(config.max_message_size)
            .busy_limit(config.busy_dist_limit)
            .unsent_limit(config.dist_unsent_limit)
            .lanes(config.lanes);
        if let Some(tls) = config.tls.clone() {
            net = net.tls(tls);
        }
        let handler = Arc::new(NetHandler {
            node: Arc::downgrade(&shared),
        });
        shared
            .dist
            .set_transport(graft_net::Transport::start(net, handler)?);
        let mut threads = Vec::new();
        if let (Some(o), Some(t)) = (shared.dist.mon.overlay(), shared.dist.transport()) {
            o.set_addr(t.advertised_addr());
            let s = Arc::downgrade(&shared);
            threads.push(
                std::thread::Builder::new()
                    .name("graft-overlay".into())
                    .spawn(move || crate::overlay::run(s))?,
            );
        }
        for (index, local) in workers.into_iter().enumerate() {
            let node = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("graft-worker-{index}"))
                    .spawn(move || WorkerCtx::new(index, node, local).run())?,
            );
        }
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("graft-stacks".into())
                .spawn(move || s.stacks.run_refill())?,
        );
        let s = Arc::downgrade(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("graft-stats".into())
                .spawn(move || crate::stats::run_sampler(s))?,
        );
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("graft-timer".into())
                .spawn(move || s.timers.run(&s))?,
        );
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("graft-sysmon".into())
                .spawn(move || s.sysmon.run(&s))?,
        );
        if let Some(d) = config.discovery.clone() {
            let s = Arc::downgrade(&shared);
            threads.push(
                std::thread::Builder::new()
                    .name("graft-discovery".into())
                    .spawn(move || crate::discovery::run(s, d))?,
            );
        }
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("graft-node-loop".into())
                .spawn(move || node_loop(&s, rx))?,
        );
        log::info!(
            "graft: node {name} (id {:016x}) listening on {} with {} workers",
            shared.id.0,
            shared.dist.transport().map_or(addr, |t| t.local_addr()),
            config.workers
        );
        if let Some(o) = &config.observer {
            if let Err(e) = crate::observer::start(&shared, o) {
                log::error!("graft: cannot start the observer on {}: {e}", o.addr);
            }
        }
        Ok(Node {
            shared,
            threads: Mutex::new(threads),
            stopped: AtomicBool::new(false),
        })
    }

    /// The node's shared state (for the crate's other modules).
    pub(crate) fn shared(&self) -> &Arc<NodeShared> {
        &self.shared
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.shared.id
    }

    /// This node's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The address this node listens on (the port chosen for `:0`).
    pub fn addr(&self) -> SocketAddr {
        self.shared
            .dist
            .transport()
            .map(|t| t.local_addr())
            .expect("a started node has a transport")
    }

    /// Connects this node to the node listening at `addr` (and, through it,
    /// to every node it knows). Blocks the calling thread; from inside a
    /// process use [`connect`](crate::connect).
    ///
    /// # Errors
    ///
    /// `Error::Remote` with the transport's reason (refused, wrong cookie,
    /// timeout).
    pub fn connect(&self, addr: SocketAddr) -> Result<NodeId, Error> {
        let id = connect_transport(&self.shared, addr)?;
        if let Some(o) = self.shared.dist.mon.overlay() {
            o.join(&self.shared, id);
        }
        Ok(id)
    }

    /// The nodes connected now; with
    /// [`Topology::Partial`](crate::Topology::Partial), the cluster's
    /// members that are up (connected or not).
    pub fn nodes(&self) -> Vec<NodeId> {
        match self.shared.dist.mon.overlay() {
            Some(o) => o.members(),
            None => self.shared.dist.nodes(),
        }
    }

    /// How many nodes [`nodes`](Self::nodes) lists, without building the
    /// list; with [`Topology::Partial`](crate::Topology::Partial) it takes
    /// no lock, so a loop that polls it (a health check, a wait for a
    /// cluster to form) never stalls the node.
    ///
    /// ```
    /// let n = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0")).unwrap();
    /// assert_eq!(n.node_count(), 0);
    /// ```
    pub fn node_count(&self) -> usize {
        match self.shared.dist.mon.overlay() {
            Some(o) => o.count(),
            None => self.shared.dist.nodes().len(),
        }
    }

    /// The overlay's views and the connections held, with
    /// [`Topology::Partial`](crate::Topology::Partial) (`None` for the full
    /// mesh).
    ///
    /// ```
    /// let n = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0")).unwrap();
    /// assert!(n.overlay_view().is_none());
    /// ```
    pub fn overlay_view(&self) -> Option<crate::overlay::OverlayView> {
        let o = self.shared.dist.mon.overlay()?;
        Some(o.view(&self.shared))
    }

    /// The partial overlay's outbound connects (on-demand sends of its own
    /// messages, probes): running, waiting, the most at once (bounded by
    /// 8), dropped; `None` on the full mesh.
    pub fn overlay_dials(&self) -> Option<crate::overlay::DialStats> {
        Some(self.shared.dist.mon.overlay()?.dial_stats())
    }

    /// Closes the connection to `node`, as `erlang:disconnect_node/1` does;
    /// `false` if it was not connected. Both nodes then see it as lost:
    /// monitors across it fire with `NoConnection`, links across it break
    /// with `NoConnection`, and requests waiting on it fail with
    /// [`Error::NoConnection`]. Nothing else stops: [`connect`](Self::connect)
    /// joins the two again, and pids from before stay valid.
    ///
    /// ```
    /// use graft::{Node, NodeConfig};
    ///
    /// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
    /// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
    /// let id = a.connect(b.addr()).unwrap();
    /// assert!(a.disconnect(id));
    /// assert!(!a.nodes().contains(&id));
    /// assert!(!a.disconnect(id));
    /// assert_eq!(a.connect(b.addr()).unwrap(), id);
    /// # a.shutdown();
    /// # b.shutdown();
    /// ```
    pub fn disconnect(&self, node: NodeId) -> bool {
        self.shared.dist.disconnect(node)
    }

    /// Runs `f` as a process (the root process of a program) and returns its
    /// value once it finishes. Call it from outside any process (`main`, a
    /// test): it blocks the calling OS thread until `f` returns, which from
    /// inside a process would block that process's worker.
    ///
    /// **Returning ends the root process**, with the usual consequences:
    /// everything linked to it gets its exit signal. A supervisor tree (or
    /// a gen_server) started inside `f` is linked to it, so it stops the
    /// moment `f` returns (OTP-correct: its parent exited). To keep trees
    /// running for the life of a program, use graft-otp's
    /// `application::Runner` (which parks them under processes that live
    /// until SIGTERM/SIGINT or `application::stop()`), or keep `f` waiting.
    ///
    /// # Errors
    ///
    /// `Error::Exited(reason)` if the process panicked or was killed;
    /// `Error::NodeDown` if the node is stopping.
    pub fn run<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        type Slot<T> = Arc<(
            std::sync::Mutex<Option<Result<T, ExitReason>>>,
            std::sync::Condvar,
        )>;
        let slot: Slot<T> = Arc::new(Default::default());
        /// Fills the slot with an error if the body never stores a value.
        struct Guard<T>(Slot<T>);
        impl<T> Drop for Guard<T> {
            fn drop(&mut self) {
                let mut g = self.0 .0.lock().unwrap_or_else(|e| e.into_inner());
                if g.is_none() {
                    *g = Some(Err(ExitReason::Killed));
                }
                self.0 .1.notify_all();
            }
        }
        let guard = Guard(slot.clone());
        let pid = self.shared.spawn(SpawnSpec::default(), move || {
            let guard = guard;
            let r = catch_unwind(AssertUnwindSafe(f));
            let (value, rethrow) = match r {
                Ok(v) => (Ok(v), None),
                Err(payload) => {
                    let reason = exit_reason_of(&*payload);
                    (Err(reason), Some(payload))
                }
            };
            *guard.0 .0.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
            drop(guard);
            if let Some(p) = rethrow {
                resume_unwind(p);
            }
        })?;
        let (lock, cv) = &*slot;
        let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
        while g.is_none() {
            // The guard fills the slot before the process leaves the table,
            // unless its frames were abandoned (a stack overflow: no
            // destructor runs), so a process gone with the slot empty
            // overflowed its stack.
            if self.shared.table.get(pid.serial()).is_none() {
                return Err(Error::Exited(ExitReason::StackOverflow));
            }
            g = cv
                .wait_timeout(g, Duration::from_millis(20))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        g.take().expect("checked").map_err(Error::Exited)
    }

    /// Spawns a process from outside any process.
    ///
    /// # Errors
    ///
    /// `Error::NodeDown` when stopping; `Error::Resource` when no stack can be
    /// mapped.
    #[track_caller]
    pub fn spawn<F>(&self, f: F) -> Result<Pid, Error>
    where
        F: FnOnce() + Send + 'static,
    {
        self.shared.spawn(SpawnSpec::default(), f)
    }

    /// Sends a message from outside any process.
    pub fn send<M: crate::Message>(&self, to: Pid, msg: M) {
        if let Some(mail) = self.shared.mail_for(to, msg) {
            self.shared.deliver(to, mail);
        }
    }

    /// The pid registered under `name`.
    pub fn whereis(&self, name: &str) -> Option<Pid> {
        self.shared.registry.lookup(name)
    }

    /// Processes alive now.
    pub fn process_count(&self) -> usize {
        self.shared.live()
    }

    /// Stops every process and joins every thread the node started.
    ///
    /// Called from one of the node's own threads (a process of this node,
    /// or a `blocking` call of one), it cannot wait for that thread: it
    /// starts the shutdown on a thread of its own and returns at once, and
    /// the calling process is stopped with the others.
    pub fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        let threads = std::mem::take(&mut *self.threads.lock());
        let me = std::thread::current().id();
        let own = threads.iter().any(|t| t.thread().id() == me) || self.shared.blocking.owns(me);
        if !own {
            stop(&self.shared, threads);
            return;
        }
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{}-shutdown", shared.name))
            .spawn(move || stop(&shared, threads));
        if let Err(e) = spawned {
            log::error!("graft: cannot start the shutdown thread: {e}");
        }
    }
}

/// Runs `f` on a node thread where it may drop the user's values (a dead
/// process's unread mail and storage, a timed message for a dead process):
/// their `Drop` may run any code, even panic, and the thread must go on.
pub(crate) fn guarded(f: impl FnOnce(), what: impl FnOnce() -> String) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        log::error!("graft: {} panicked: {}", what(), panic_message(&*p));
    }
}

/// Drops mail that could not be delivered (its receiver is dead), on the
/// sender's thread: a `Drop` that panics is caught and logged here, so the
/// sender lives (the panic is the message's, not the sender's).
#[cold]
#[inline(never)]
pub(crate) fn drop_undelivered(to: Pid, mail: Mail) {
    if matches!(mail, Mail::Msg(_)) {
        guarded(
            || drop(mail),
            || format!("dropping a message for dead process {to}"),
        );
    }
}

/// Stops every process of the node and joins `threads` (all it started),
/// from a thread that is not one of them.
fn stop(s: &NodeShared, threads: Vec<JoinHandle<()>>) {
    s.stopping.store(true, Ordering::SeqCst);
    // Leave the cluster first: to its peers this node is gone at once
    // (their monitors and links see `NoConnection`), as when a node halts.
    s.dist.shutdown();
    for pid in s.table.pids() {
        s.deliver(
            pid,
            Mail::Signal {
                from: pid,
                reason: ExitReason::Kill,
                link: false,
            },
        );
    }
    let deadline = crate::sched::timer::deadline_after(s.shutdown_timeout);
    if !s.wait_all_exited(deadline) {
        log::warn!(
            "graft: {} processes did not exit at shutdown (a process that never yields \
             cannot be killed)",
            s.live()
        );
    }
    s.sched.stop();
    let spares = s.sysmon.stop();
    s.timers.stop();
    s.stacks.stop();
    let _ = s.commands.send(NodeCommand::Stop);
    for t in threads.into_iter().chain(spares) {
        let name = t.thread().name().unwrap_or("?").to_string();
        if t.join().is_err() {
            log::error!("graft: thread {name} panicked");
        }
    }
    s.blocking.stop();
    // Whatever is left never ran to its end: unwind it here, now, while
    // its stack pool lives (someone may still hold the entry itself).
    for p in s.table.drain() {
        p.forced_drop.store(true, Ordering::SeqCst);
        // SAFETY: every worker has stopped: nothing resumes `p` any more.
        drop(unsafe { p.coro_mut() }.take());
    }
    log::info!("graft: node {} stopped", s.name);
}

impl Drop for Node {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Connects to a node a peer told us of (`should_join` said it should),
/// on the transport's poller: the node loop goes on at once.
fn join_mesh(node: &Arc<NodeShared>, addr: SocketAddr) {
    connect_transport_then(node, addr, move |n, r| {
        if let Err(e) = r {
            log::warn!("graft: {} cannot join {addr}: {e}", n.name);
        }
        n.joining.lock().remove(&addr);
    });
}

/// Whether a mesh connect to `addr` should start: not connected there, not
/// stopping, and no connect to it already under way (which it then is).
fn should_join(node: &NodeShared, addr: SocketAddr) -> bool {
    // The partial overlay never connects to every node it hears of.
    if node.dist.mon.overlay().is_some() || node.stopping.load(Ordering::Relaxed) {
        return false;
    }
    let known = node
        .dist
        .nodes()
        .into_iter()
        .any(|n| node.dist.peer_info(n).is_some_and(|(_, a)| a == addr));
    !known && node.joining.lock().insert(addr)
}

/// The node loop: drains the command queue.
fn node_loop(node: &Arc<NodeShared>, rx: Receiver<NodeCommand>) {
    while let Ok(cmd) = rx.recv() {
        match cmd {
            NodeCommand::Stop => return,
            NodeCommand::PeerDown { node: id, peer } => dist::node_lost(node, id, peer),
            NodeCommand::Connect(addr) if !should_join(node, addr) => {}
            // Not waited for: a connect can take its whole timeout (an
            // address that never answers), and lost peers must not wait
            // behind it.
            NodeCommand::Connect(addr) => join_mesh(node, addr),
        }
    }
}

/// Connects through the transport; the peer is registered by `peer_up`.
pub(crate) fn connect_transport(node: &NodeShared, addr: SocketAddr) -> Result<NodeId, Error> {
    let t = node.dist.transport().ok_or(Error::NodeDown)?;
    if addr == t.local_addr() {
        return Ok(node.id);
    }
    if !node.dist.wait_retired(addr, RETIRE_WAIT) {
        log::debug!("graft: the connection to {addr} is still retiring; connecting beside it");
    }
    let info = t.connect(addr).map_err(|e| Error::Remote(e.to_string()))?;
    let id = NodeId::from_name(&info.name);
    // The connection may be the other node's, opened at the same moment
    // and announced (`peer_up`) by its I/O thread after `connect` returned:
    // wait, bounded, until the runtime has published it, so that what the
    // caller does next (flush held frames, record a watch) finds it.
    let until = std::time::Instant::now() + PUBLISH_WAIT;
    while node.dist.connection(id, Some(info.creation)).is_none()
        && std::time::Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(id)
}

/// What [`connect_transport_then`] calls with its result.
type ConnectDone = Box<dyn FnOnce(&Arc<NodeShared>, Result<NodeId, Error>) + Send>;

/// [`connect_transport`] without a thread waiting on it: the transport's
/// poller runs the connect and the handshake
/// (`graft_net::Transport::connect_then`), and `done` is called on its I/O
/// thread, so it must be quick. The rare cases that must wait (a
/// connection to `addr` still retiring; another connection between the two
/// nodes coming up) go to the blocking pool, as [`connect_transport`].
pub(crate) fn connect_transport_then(
    node: &Arc<NodeShared>,
    addr: SocketAddr,
    done: impl FnOnce(&Arc<NodeShared>, Result<NodeId, Error>) + Send + 'static,
) {
    let Some(t) = node.dist.transport() else {
        return done(node, Err(Error::NodeDown));
    };
    if addr == t.local_addr() {
        return done(node, Ok(node.id));
    }
    /// The waiting cases, on the blocking pool.
    fn on_pool(n: &Arc<NodeShared>, addr: SocketAddr, done: ConnectDone) {
        let weak = Arc::downgrade(n);
        n.blocking.submit(Box::new(move || {
            if let Some(n) = weak.upgrade() {
                let r = connect_transport(&n, addr);
                done(&n, r);
            }
        }));
    }
    if t.retiring_to(addr) {
        return on_pool(node, addr, Box::new(done));
    }
    let weak = Arc::downgrade(node);
    t.connect_then(
        addr,
        Box::new(move |r| {
            let Some(n) = weak.upgrade() else { return };
            match r {
                Ok(info) => done(&n, Ok(NodeId::from_name(&info.name))),
                Err(graft_net::NetError::Duplicate) => on_pool(&n, addr, Box::new(done)),
                Err(e) => done(&n, Err(Error::Remote(e.to_string()))),
            }
        }),
    );
}

/// [`connect_transport_then`] for the running process: parked until the
/// poller is done, no thread waiting meanwhile.
pub(crate) fn connect_parked(node: &Arc<NodeShared>, addr: SocketAddr) -> Result<NodeId, Error> {
    crate::api::park_until(|done| {
        connect_transport_then(node, addr, move |_, r| done.complete(r));
    })
    .unwrap_or_else(|| {
        Err(Error::Remote(format!(
            "the connect to {addr} was abandoned"
        )))
    })
}

/// How long [`connect_transport`] waits for a connection the transport
/// reports up to appear in the runtime's table.
const PUBLISH_WAIT: Duration = Duration::from_secs(1);

/// How long [`connect_transport`] waits for an idle connection to the same
/// address to finish retiring (see `Dist::wait_retired`).
const RETIRE_WAIT: Duration = Duration::from_secs(2);

/// The name of a node started without one: `graft@<ip>:<port>` when the
/// listen address has a fixed port (the same name, so the same [`NodeId`],
/// after a restart), `graft-<creation>@<ip>` for port 0 (a new name each
/// start: the port is not known until the socket is bound, and two such
/// nodes on one host must differ).
fn default_name(addr: SocketAddr, creation: u32) -> String {
    if addr.port() != 0 {
        format!("graft@{addr}")
    } else {
        format!("graft-{creation:08x}@{}", addr.ip())
    }
}

/// A random 32-bit creation, so pids of an earlier incarnation never match.
fn random_creation() -> u32 {
    let mut h = blake3::Hasher::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.update(&now.as_nanos().to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    let local = 0u8;
    h.update(&(std::ptr::addr_of!(local) as usize).to_le_bytes());
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    h.update(
        &COUNTER
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_le_bytes(),
    );
    let b = h.finalize();
    u32::from_le_bytes([
        b.as_bytes()[0],
        b.as_bytes()[1],
        b.as_bytes()[2],
        b.as_bytes()[3],
    ])
}

/// Routes panics inside processes to `log` (with the pid) instead of stderr;
/// other panics go to the previous hook.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| match context::process() {
            Some(p) => {
                // Kept for the crash report (one report per crash, made
                // when the process ends; a panic it catches reports nothing).
                let msg = panic_message(info.payload());
                let at = info.location().map(|l| l.to_string()).unwrap_or_default();
                log::debug!("graft: process {} panicked at {at}: {msg}", p.pid);
                p.meta.lock().panic = Some(Box::new((at, msg)));
            }
            None => previous(info),
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    #[test]
    fn a_mesh_connect_that_hangs_does_not_hold_up_the_node_loop() {
        let config = || NodeConfig::new("127.0.0.1:0").cookie("mesh-test");
        let a = Node::start(config()).unwrap();
        let b = Node::start(config()).unwrap();
        // Accepts, then says nothing: a's handshake with it waits for its
        // whole timeout.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_silent = NodeCommand::Connect(silent.local_addr().unwrap());
        a.shared.commands.send(to_silent).unwrap();
        let (mut held, _) = silent.accept().unwrap();
        // A peer tells of b meanwhile.
        a.shared
            .commands
            .send(NodeCommand::Connect(b.addr()))
            .unwrap();
        let t = Instant::now();
        while !a.nodes().contains(&b.id()) {
            assert!(t.elapsed() < Duration::from_secs(20), "b never joined");
            std::thread::sleep(Duration::from_millis(5));
        }
        // a still waits on the silent address: b did not wait behind it.
        held.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 512];
        loop {
            match held.read(&mut buf) {
                Ok(0) => panic!("a gave up on the silent address before b joined"),
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        a.shutdown();
        b.shutdown();
    }
}
