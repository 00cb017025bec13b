//! The system monitor: one thread per node that keeps the node live while
//! a process holds its worker, and reports what it sees (Erlang's
//! `erlang:system_monitor`).
//!
//! A process yields only at runtime calls, so a loop without one, or a
//! blocking call made outside [`blocking`](crate::blocking), keeps its
//! worker. With every worker held that way the node serves nothing: no
//! process runs, no call is answered, no remote frame is handled (the
//! heartbeats, on their own threads, still say all is well).
//!
//! # What it does
//!
//! Every sample (a quarter of `long_schedule`, twice that while every
//! worker is idle; none at all once every worker has slept for 100 ms: it
//! then sleeps until one wakes, `sched/idle.rs`'s `Quiet`) it reads each
//! worker's run word and running pid (stored
//! by the worker at each process switch, `sched/worker.rs`: the hot path
//! pays one store per run for this). A worker whose run word has not moved
//! for `long_schedule` (default 10 ms, [`NodeConfig::long_schedule`]) has
//! run one process all along. The monitor then puts a spare worker thread
//! to serve it (`sched/spare.rs`: the spare takes what the stuck worker's
//! process woke, steals its queue and runs whatever else is runnable), as
//! Go's sysmon hands the P of a thread stuck in a system call to another
//! thread. When the stuck process yields, the spare finishes its current
//! process, hands its queues back to the injector and parks, so the node
//! has its `workers` threads running again. Spares are started on first
//! use and bounded by [`NodeConfig::max_spare_workers`] (default: as many
//! as workers); when they run out, the node says so once per episode,
//! naming the processes that hold the workers.
//!
//! Not done, on purpose: preempting the process (a signal that interrupts
//! it could land while it holds the allocator's lock, and its worker would
//! deadlock on the next allocation). The stuck process keeps its thread.
//!
//! # Events
//!
//! One process per node may subscribe with [`system_monitor`]; it receives
//! [`SysMonEvent`] messages, each also logged at `warn`:
//! `LongSchedule` after a run longer than its threshold, `LongMessageQueue`
//! when a mailbox crosses the on/off thresholds (OTP 27's
//! `long_message_queue`), `BusyDist` when a peer connection's outbound queue
//! passes its limit, `StackOverflow` when a process overflowed its stack.

use crate::loom::{AtomicUsize, Condvar, Mutex, Ordering};
use crate::node::NodeShared;
use crate::pid::{NodeId, Pid};
use crate::process::Mail;
use crate::sched::spare::Spare;
use crate::sched::worker::WorkerCtx;
use crate::sched::{Runnable, IDLE_BIT};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a system monitor subscriber wants to hear about (Erlang's
/// `system_monitor/2` options). Everything is off by default.
///
/// ```
/// use graft::SysMonConfig;
/// use std::time::Duration;
/// let cfg = SysMonConfig {
///     long_schedule: Some(Duration::from_millis(50)),
///     long_message_queue: Some((10_000, 1_000)),
///     ..SysMonConfig::default()
/// };
/// assert!(!cfg.busy_dist);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SysMonConfig {
    /// Report a process that ran this long without yielding (measured at
    /// the monitor's sampling, so to within a few ms).
    pub long_schedule: Option<Duration>,
    /// `(on, off)`: report a mailbox that reaches `on` queued messages, and
    /// again when it is back to `off` or fewer. Counted at delivery: the
    /// messages not yet taken into the process's private queue by a receive.
    pub long_message_queue: Option<(usize, usize)>,
    /// Report a peer connection whose outbound queue passes
    /// [`NodeConfig::busy_dist_limit`](crate::NodeConfig::busy_dist_limit).
    pub busy_dist: bool,
    /// Report processes that overflow their stack.
    pub stack_overflow: bool,
}

/// An event sent to the system monitor subscriber (see [`system_monitor`]).
#[derive(Clone, Debug, PartialEq, Eq, graft_derive::Mobile)]
pub enum SysMonEvent {
    /// `pid` ran `ms` milliseconds without yielding its worker.
    LongSchedule {
        /// The process.
        pid: Pid,
        /// How long it ran, about.
        ms: u64,
    },
    /// `pid`'s mailbox reached the `on` threshold (`long: true`, `len`
    /// messages queued) or fell back to `off` (`long: false`).
    LongMessageQueue {
        /// The process.
        pid: Pid,
        /// Messages queued when the event was made.
        len: u64,
        /// Over the `on` threshold (else back under `off`).
        long: bool,
    },
    /// The outbound queue to `node` passed its limit.
    BusyDist {
        /// The peer.
        node: NodeId,
    },
    /// `pid` overflowed its stack and exited with `stack_overflow`.
    StackOverflow {
        /// The process.
        pid: Pid,
    },
}

/// Makes `pid` this node's system monitor subscriber with `config`
/// (replacing any other, as Erlang's `erlang:system_monitor/2`); returns the
/// previous subscriber and its configuration.
///
/// # Panics
///
/// Outside a process.
///
/// ```
/// use graft::*;
/// use std::time::Duration;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).unwrap();
/// let ev = node.run(|| {
///     system_monitor(self_pid(), SysMonConfig {
///         long_schedule: Some(Duration::from_millis(20)),
///         ..SysMonConfig::default()
///     });
///     let hog = spawn(|| {
///         let t = std::time::Instant::now();
///         while t.elapsed() < Duration::from_millis(100) {} // no runtime call
///     });
///     loop {
///         if let SysMonEvent::LongSchedule { pid, .. } = expect::<SysMonEvent>() {
///             assert_eq!(pid, hog);
///             break pid;
///         }
///     }
/// });
/// assert!(ev.is_ok());
/// node.shutdown();
/// ```
pub fn system_monitor(pid: Pid, config: SysMonConfig) -> Option<(Pid, SysMonConfig)> {
    let _ = crate::context::current("system_monitor");
    crate::context::node().sysmon.subscribe(Some((pid, config)))
}

/// Removes this node's system monitor subscriber; returns it.
///
/// # Panics
///
/// Outside a process.
pub fn system_monitor_off() -> Option<(Pid, SysMonConfig)> {
    let _ = crate::context::current("system_monitor_off");
    crate::context::node().sysmon.subscribe(None)
}

/// Per worker slot: what the monitor saw last.
#[derive(Debug, Clone)]
struct Watch {
    /// The run word at the last sample.
    last: u64,
    /// When that run word was first seen: the run began before (reports
    /// use it, so they never overstate a run).
    since: Instant,
    /// The sample before that: the run began after (the hand-off uses it,
    /// so a spare comes no later than `long_schedule` plus a sample).
    after: Instant,
    /// The run passed the node's `long_schedule` (a spare was asked for).
    long: bool,
    /// The run passed the node's or the subscriber's threshold, and
    /// `serial` was read during it.
    flagged: bool,
    /// The pid serial of that run.
    serial: u64,
    /// The spare serving this worker.
    spare: Option<usize>,
}

/// The system monitor of one node.
#[derive(Debug)]
pub(crate) struct Sysmon {
    /// One per spare slot (scheduler slots `primaries..`).
    pub(crate) spares: Vec<Spare>,
    /// Each spare's run queue, until its thread starts.
    deques: Mutex<Vec<Option<crossbeam_deque::Worker<Runnable>>>>,
    /// Spare threads started; `None` once stopped (no more start).
    threads: Mutex<Option<Vec<JoinHandle<()>>>>,
    /// The node's hand-off threshold.
    long_schedule: Duration,
    /// Outbound bytes to a peer that make it busy.
    busy_dist_limit: usize,
    subscriber: Mutex<Option<(Pid, SysMonConfig)>>,
    /// The subscriber's `long_message_queue` on threshold (0: off), read
    /// by senders at delivery.
    pub(crate) lmq_on: AtomicUsize,
    /// Its off threshold.
    pub(crate) lmq_off: AtomicUsize,
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl Drop for Sysmon {
    fn drop(&mut self) {
        // The node goes: its watch on queue lengths no longer counts.
        if self.lmq_on.load(Ordering::Relaxed) != 0 {
            crate::process::ATTENTION.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Sysmon {
    pub(crate) fn new(
        long_schedule: Duration,
        busy_dist_limit: usize,
        deques: Vec<crossbeam_deque::Worker<Runnable>>,
    ) -> Sysmon {
        Sysmon {
            spares: deques.iter().map(|_| Spare::new()).collect(),
            deques: Mutex::new(deques.into_iter().map(Some).collect()),
            threads: Mutex::new(Some(Vec::new())),
            long_schedule: long_schedule.max(Duration::from_millis(1)),
            busy_dist_limit,
            subscriber: Mutex::new(None),
            lmq_on: AtomicUsize::new(0),
            lmq_off: AtomicUsize::new(0),
            stopped: Mutex::new(false),
            cv: Condvar::new(),
        }
    }

    fn subscribe(&self, s: Option<(Pid, SysMonConfig)>) -> Option<(Pid, SysMonConfig)> {
        let (on, off) = s
            .as_ref()
            .and_then(|(_, c)| c.long_message_queue)
            .map_or((0, 0), |(on, off)| (on.max(1), off.min(on)));
        let mut g = self.subscriber.lock();
        self.lmq_off.store(off, Ordering::Relaxed);
        let was = self.lmq_on.load(Ordering::Relaxed);
        self.lmq_on.store(on, Ordering::Relaxed);
        // Senders look at queue lengths only while some node watches them
        // (`process::ATTENTION`); under the lock, so transitions pair up.
        match (was, on) {
            (0, 1..) => {
                crate::process::ATTENTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            (1.., 0) => {
                crate::process::ATTENTION.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
            _ => {}
        }
        std::mem::replace(&mut *g, s)
    }

    /// The subscriber, if it wants `what`.
    fn wants(&self, what: impl FnOnce(&SysMonConfig) -> bool) -> Option<Pid> {
        self.subscriber
            .lock()
            .as_ref()
            .filter(|(_, c)| what(c))
            .map(|(p, _)| *p)
    }

    /// Sends `ev` to the subscriber if it wants it.
    fn event(&self, node: &NodeShared, ev: SysMonEvent) {
        let wanted = self.wants(|c| match ev {
            SysMonEvent::LongSchedule { ms, .. } => c
                .long_schedule
                .is_some_and(|t| u128::from(ms) >= t.as_millis()),
            SysMonEvent::LongMessageQueue { .. } => c.long_message_queue.is_some(),
            SysMonEvent::BusyDist { .. } => c.busy_dist,
            SysMonEvent::StackOverflow { .. } => c.stack_overflow,
        });
        if let Some(to) = wanted {
            log::warn!("graft: system monitor: {ev:?}");
            node.deliver(to, Mail::msg(ev));
        }
    }

    /// A process overflowed its stack (called on its own, reset stack).
    pub(crate) fn stack_overflow(&self, node: &NodeShared, pid: Pid) {
        self.event(node, SysMonEvent::StackOverflow { pid });
    }

    /// A delivery left `len` messages in `pid`'s mailbox, at or over the
    /// subscriber's on threshold (the caller checked `lmq_on`).
    #[cold]
    pub(crate) fn long_queue(&self, node: &NodeShared, pid: Pid, len: usize, long: bool) {
        self.event(
            node,
            SysMonEvent::LongMessageQueue {
                pid,
                len: len as u64,
                long,
            },
        );
    }

    /// Stops the monitor and every spare; returns the threads to join.
    pub(crate) fn stop(&self) -> Vec<JoinHandle<()>> {
        *self.stopped.lock() = true;
        self.cv.notify_all();
        for s in &self.spares {
            s.stop();
        }
        self.threads.lock().take().unwrap_or_default()
    }

    /// Puts a retired spare to serve worker `i`, starting its thread on
    /// first use; the spare's index, or `None` if every spare is busy.
    fn activate_spare(&self, node: &Arc<NodeShared>, i: usize) -> Option<usize> {
        let primaries = node.sched.primaries;
        for (j, s) in self.spares.iter().enumerate() {
            if !s.is_retired() {
                continue;
            }
            let mut threads = self.threads.lock();
            let Some(started) = threads.as_mut() else {
                return None; // stopping
            };
            if !s.activate(i) {
                continue;
            }
            if let Some(local) = self.deques.lock()[j].take() {
                let node = node.clone();
                match std::thread::Builder::new()
                    .name(format!("graft-spare-{j}"))
                    .spawn(move || {
                        let mut ctx = WorkerCtx::new(primaries + j, node, local);
                        ctx.spare = Some(j);
                        ctx.run_spare()
                    }) {
                    Ok(t) => started.push(t),
                    Err(e) => {
                        log::error!("graft: cannot start a spare worker: {e}");
                        s.stop();
                        continue;
                    }
                }
            }
            return Some(j);
        }
        None
    }

    /// The monitor thread's loop.
    pub(crate) fn run(&self, node: &Arc<NodeShared>) {
        let sched = &node.sched;
        let primaries = sched.primaries;
        let now = Instant::now();
        let mut watch: Vec<Watch> = (0..sched.workers())
            .map(|_| Watch {
                last: IDLE_BIT,
                since: now,
                after: now,
                long: false,
                flagged: false,
                serial: 0,
                spare: None,
            })
            .collect();
        let mut starved = false;
        let mut busy: Vec<NodeId> = Vec::new();
        let mut next_dist = now;
        let mut last_sample = now;
        // Since when every worker sleeps (the monitor then sleeps too).
        let mut quiet_since: Option<Instant> = None;
        loop {
            let report = self
                .subscriber
                .lock()
                .as_ref()
                .and_then(|(_, c)| c.long_schedule);
            let threshold = self.long_schedule;
            let mut period = (report.map_or(threshold, |r| r.min(threshold)) / 4)
                .clamp(Duration::from_millis(1), Duration::from_millis(50));
            if watch.iter().all(|w| w.last & IDLE_BIT != 0) {
                period *= 2;
            }
            {
                let mut stopped = self.stopped.lock();
                if !*stopped {
                    stopped = self.cv.wait_timeout(stopped, period);
                }
                if *stopped {
                    return;
                }
            }
            let now = Instant::now();
            let mut any_long = false;
            let mut short_of_spares = false;
            for (i, w) in watch.iter_mut().enumerate() {
                let v = sched.ticks[i].load(Ordering::Relaxed);
                if v != w.last || v & IDLE_BIT != 0 {
                    if w.flagged {
                        self.run_ended(node, w, now);
                    }
                    if let Some(j) = w.spare.take() {
                        if self.spares[j].ask_retire(i) {
                            sched.idle.notify_worker(primaries + j);
                        }
                    }
                    w.last = v;
                    w.since = now;
                    w.after = last_sample;
                    w.long = false;
                    w.flagged = false;
                    continue;
                }
                // Same run as at the last sample, and still running.
                let ran = now - w.since;
                if !w.flagged && ran >= report.map_or(threshold, |r| r.min(threshold)) {
                    // The run word names the pid of this run.
                    w.flagged = true;
                    w.serial = crate::sched::run_serial(v);
                }
                if now - w.after < threshold {
                    continue;
                }
                if !w.long {
                    w.long = true;
                    if !w.flagged {
                        // For the log naming who holds the workers.
                        w.serial = crate::sched::run_serial(v);
                    }
                    log::debug!(
                        "graft: worker {i} has run one process for over {threshold:?}: \
                         a spare worker serves its queue meanwhile"
                    );
                }
                any_long = true;
            }
            // A spare only when every worker that runs processes (spares
            // serving included) is held, and work waits: while one is free
            // it serves the rest, and a spare would only be one more thread
            // on the same cores (a long spawn loop on two workers).
            let serving = self.spares.iter().filter(|s| s.serving().is_some()).count();
            let held = watch.iter().filter(|w| w.long).count();
            let mut running = primaries + serving;
            for (i, w) in watch.iter_mut().enumerate() {
                if held < running {
                    break;
                }
                if w.long && w.spare.is_none() && sched.work_waits(i) {
                    w.spare = self.activate_spare(node, i);
                    match w.spare {
                        Some(_) => running += 1,
                        None => short_of_spares = true,
                    }
                }
            }
            if short_of_spares && !starved {
                starved = true;
                let holders: Vec<String> = watch
                    .iter()
                    .filter(|w| w.long)
                    .map(|w| Pid::new(node.id, node.creation, w.serial).to_string())
                    .collect();
                log::warn!(
                    "graft: node {}: every worker and spare is held by a process that does not \
                     yield ({}); max_spare_workers is {}. Other processes wait until one yields: \
                     put blocking calls in graft::blocking and long loops in pieces",
                    node.name,
                    holders.join(", "),
                    self.spares.len()
                );
            }
            if !any_long {
                starved = false;
            }
            if now >= next_dist {
                next_dist = now + Duration::from_millis(50);
                self.check_dist(node, &mut busy);
            }
            last_sample = now;
            let quiet = &sched.quiet;
            quiet.round();
            let calm = !quiet.any_awake()
                && watch
                    .iter()
                    .all(|w| w.last & IDLE_BIT != 0 && w.spare.is_none());
            if !calm {
                quiet_since = None;
                continue;
            }
            if now - *quiet_since.get_or_insert(now) < crate::sched::idle::LINGER {
                continue;
            }
            // Every worker has slept for a while and no spare serves:
            // nothing to watch until one wakes, but the outbound queues
            // (senders outside processes fill them too) for a subscriber
            // that wants `BusyDist`.
            loop {
                let dist = self.wants(|c| c.busy_dist).is_some();
                let live = quiet.wait_awake(dist.then_some(Duration::from_millis(50)));
                if !live || *self.stopped.lock() {
                    return;
                }
                if quiet.any_awake() || !dist {
                    break;
                }
                self.check_dist(node, &mut busy);
            }
            let now = Instant::now();
            for w in &mut watch {
                w.since = now;
                w.after = now;
            }
            last_sample = now;
            quiet_since = None;
        }
    }

    /// A run that passed a threshold ended (`now`: the first sample after
    /// it, so `ms` is a little over the real figure at most).
    fn run_ended(&self, node: &NodeShared, w: &Watch, now: Instant) {
        let ms = (now - w.since).as_millis() as u64;
        let pid = Pid::new(node.id, node.creation, w.serial);
        if w.long && self.wants(|c| c.long_schedule.is_some()).is_none() {
            log::warn!("graft: process {pid} ran about {ms} ms without yielding its worker");
        }
        self.event(node, SysMonEvent::LongSchedule { pid, ms });
    }

    /// Peers whose outbound queue passed the limit (once per busy spell).
    fn check_dist(&self, node: &NodeShared, busy: &mut Vec<NodeId>) {
        for (peer, bytes) in node.dist.queued_bytes() {
            let was = busy.contains(&peer);
            if bytes > self.busy_dist_limit && !was {
                busy.push(peer);
                self.event(node, SysMonEvent::BusyDist { node: peer });
            } else if bytes <= self.busy_dist_limit / 2 && was {
                busy.retain(|n| *n != peer);
            }
        }
    }
}
