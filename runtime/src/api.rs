//! The calls a process makes: identity, spawn, send, monitors and links,
//! exit signals, names, time, blocking work.
//!
//! All of them act on "the process running on this thread". Outside a process
//! they return [`Error::NotInProcess`] where they return a `Result`, and
//! otherwise panic with a message naming the call (except `send`, which logs
//! and drops the message, so that `Drop` code cannot turn an unwind into an
//! abort).

use crate::context;
use crate::coroutine::{suspend, Suspend};
use crate::dist::{Ctl, DistReply};
use crate::error::Error;
use crate::exit::{ExitReason, ProcessDied};
use crate::graph::{self, Encoded, Mobile, MobileFnOnce};
use crate::loom::Ordering;
use crate::node::{NodeShared, SpawnSpec};
use crate::pid::{MonitorRef, NodeId, Pid};
use crate::process::receive::receive;
use crate::process::state::Status;
use crate::process::{ExitUnwind, Mail, Process};
use crate::sched::timer::{Action, TimerRef};
use std::any::{Any, TypeId};
use std::time::{Duration, Instant};

pub use crate::message::Message;
/// The running process, or a panic naming `call`.
#[inline]
pub(crate) fn current(call: &'static str) -> &'static Process {
    match context::process() {
        Some(p) => {
            if p.has_signal.load(Ordering::Relaxed) {
                // SAFETY: `p` is the running process.
                unsafe { p.check_doomed() };
            }
            p
        }
        None => not_in_process(call),
    }
}

#[cold]
#[inline(never)]
fn not_in_process(call: &'static str) -> ! {
    panic!("{}", Error::NotInProcess(call))
}

/// The node of the running process.
#[inline]
pub(crate) fn node() -> &'static NodeShared {
    match context::worker() {
        Some(w) => {
            let n: &NodeShared = &w.node;
            // SAFETY: the worker's `Arc<NodeShared>` lives as long as the
            // worker thread, which outlives every call made on it; callers do
            // not keep the reference past the current runtime call.
            unsafe { &*(n as *const NodeShared) }
        }
        None => not_in_process("node"),
    }
}

/// Suspends the running process until something wakes it.
#[inline]
pub(crate) fn park_current(me: &Process) {
    suspend_current(me, Suspend::Park);
}

#[inline]
fn suspend_current(me: &Process, why: Suspend) {
    // SAFETY: `me` is the running process; the yielder pointer was stored by
    // its own body and points into its own (live) stack.
    let y = unsafe { me.local().yielder.expect("a running process has a yielder") };
    let here = 0u8;
    me.note_parked_sp(std::ptr::addr_of!(here) as usize);
    // For `process_info`'s mailbox length (messages its receives skipped).
    // SAFETY: `me` is the running process.
    me.acct.note_saved(unsafe { me.local() }.saved.len());
    // SAFETY: as above.
    suspend(unsafe { y.as_ref() }, why);
}

/// Runs `f` on the worker thread's own (large) stack when called from a
/// process, so that stack-hungry library code (a compressor's state, a deep
/// recursion) cannot overflow a small process stack; runs it in place
/// elsewhere.
pub(crate) fn on_worker_stack<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let Some(me) = context::process() else {
        return f();
    };
    // SAFETY: `me` is the running process; its yielder lives on its own
    // stack, which is live while it runs this call.
    match unsafe { me.local().yielder } {
        // SAFETY: as above.
        Some(y) => unsafe { y.as_ref() }.on_parent_stack(f),
        None => f(),
    }
}

/// Ends the running process with `reason` (unwinding its stack).
fn exit_now(reason: ExitReason) -> ! {
    std::panic::resume_unwind(Box::new(ExitUnwind { reason, own: true }))
}

/// The reason a process gave for ending itself ([`exit_self`],
/// [`terminate`], or a failed [`spawn`]), if `payload` is that unwind;
/// `None` for a panic or an exit signal acted on.
///
/// For code that catches unwinds around callbacks (the OTP crate's
/// gen_server does): as in OTP, where `exit/1` inside a callback still runs
/// `terminate`, it can run its cleanup and then end the process with this
/// reason.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let r = node.run(|| {
///     let caught = std::panic::catch_unwind(|| exit_self(ExitReason::Shutdown));
///     self_exit_reason(&*caught.unwrap_err())
/// });
/// assert_eq!(r.unwrap(), Some(ExitReason::Shutdown));
/// ```
pub fn self_exit_reason(payload: &(dyn std::any::Any + Send)) -> Option<ExitReason> {
    payload
        .downcast_ref::<ExitUnwind>()
        .filter(|e| e.own)
        .map(|e| e.reason.clone())
}

/// The pid of the running process.
///
/// # Panics
///
/// Outside a process.
///
/// ```
/// let node = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0")).unwrap();
/// let pid = node.run(graft::self_pid).unwrap();
/// assert_eq!(pid.node(), node.id());
/// ```
pub fn self_pid() -> Pid {
    current("self_pid").pid
}

/// The pid of the running process, or `None` outside one.
pub fn try_self_pid() -> Option<Pid> {
    context::process().map(|p| p.pid)
}

/// The node the running process lives on.
///
/// # Panics
///
/// Outside a process.
pub fn this_node() -> NodeId {
    node().id
}

/// A new unique reference.
pub fn make_ref() -> MonitorRef {
    node().make_ref()
}

/// Options for one spawn; see [`spawn_opts`].
#[derive(Debug, Default, Clone)]
pub struct SpawnOpts {
    spec: SpawnSpec,
}

/// Starts building a spawn with options.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let ok = node.run(|| {
///     let parent = self_pid();
///     spawn_opts().stack_size(256 * 1024).pinned().spawn(move || send(parent, 1u8)).unwrap();
///     expect::<u8>()
/// }).unwrap();
/// assert_eq!(ok, 1);
/// ```
pub fn spawn_opts() -> SpawnOpts {
    SpawnOpts::default()
}

impl SpawnOpts {
    /// Stack size for this process (virtual; default the node's).
    pub fn stack_size(mut self, bytes: usize) -> SpawnOpts {
        self.spec.stack_size = Some(bytes);
        self
    }
    /// Keep the process on the worker that spawns it: it never migrates, so
    /// it may hold thread-local state across yields.
    pub fn pinned(mut self) -> SpawnOpts {
        self.spec.pinned = true;
        self
    }
    /// Link the new process to the caller (atomically with the spawn).
    pub fn link(mut self) -> SpawnOpts {
        self.spec.link = Some(self_pid());
        self
    }
    /// Start the process with exits trapped.
    pub fn trap_exits(mut self) -> SpawnOpts {
        self.spec.trap_exits = true;
        self
    }
    /// Bound the process's mailbox to `n` messages: past that, `policy`
    /// kills it (reason `mailbox_overflow`) or drops the new message. Exit
    /// signals and monitor notifications are never dropped nor counted.
    /// Default: unbounded, as in Erlang. See [`Overflow`](crate::Overflow).
    pub fn max_mailbox(mut self, n: usize, policy: crate::limits::Overflow) -> SpawnOpts {
        self.spec.max_mailbox = Some((n, policy));
        self
    }
    /// Spawns `f` and monitors it, the monitor made before `f` can run
    /// (with [`SpawnOpts::link`], the link too).
    ///
    /// # Errors
    ///
    /// As [`SpawnOpts::spawn`].
    #[track_caller]
    pub fn spawn_monitor<F: FnOnce() + Send + 'static>(
        mut self,
        f: F,
    ) -> Result<(Pid, MonitorRef), Error> {
        let me = current("spawn_monitor");
        let r = node().make_ref();
        self.spec.monitor = Some((r, me.pid));
        let pid = self.spawn(f)?;
        // SAFETY: `me` is the running process.
        unsafe { me.local() }.monitors.push((r, pid));
        Ok((pid, r))
    }

    /// Spawns `f`.
    ///
    /// # Errors
    ///
    /// `Error::NodeDown` when the node stops; `Error::Resource` when no stack
    /// can be had (see [`ensure_map_count`](crate::ensure_map_count)).
    #[track_caller]
    pub fn spawn<F: FnOnce() + Send + 'static>(self, f: F) -> Result<Pid, Error> {
        let linked = self.spec.link.is_some();
        let pid = node().spawn(self.spec, f)?;
        if linked {
            // The child already lists us (before it could run); list the child.
            current("spawn").meta.lock().links.push(pid);
        }
        Ok(pid)
    }
}

/// A spawn's result, or the caller ends with the reason (Erlang raises
/// `system_limit` in the caller the same way).
fn or_exit<T>(spawned: Result<T, Error>) -> T {
    match spawned {
        Ok(v) => v,
        Err(e) => exit_now(ExitReason::Other(format!("spawn failed: {e}"))),
    }
}

/// Spawns a process on this node running `f`.
///
/// If the process cannot be started (node stopping, no stack) the caller
/// exits with reason `Other("spawn failed: ...")`, as an Erlang process gets
/// `system_limit`; use [`SpawnOpts::spawn`] to handle the error instead.
///
/// # Panics
///
/// Outside a process (use [`Node::spawn`](crate::Node::spawn)).
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let v = node.run(|| {
///     let me = self_pid();
///     spawn(move || send(me, 42u32));
///     expect::<u32>()
/// }).unwrap();
/// assert_eq!(v, 42);
/// ```
#[track_caller]
pub fn spawn<F: FnOnce() + Send + 'static>(f: F) -> Pid {
    or_exit(SpawnOpts::default().spawn(f))
}

/// Spawns and links in one step (Erlang's `spawn_link`).
#[track_caller]
pub fn spawn_link<F: FnOnce() + Send + 'static>(f: F) -> Pid {
    or_exit(SpawnOpts::default().link().spawn(f))
}

/// Spawns and monitors in one step (Erlang's `spawn_monitor`): the monitor
/// exists before the child runs, so even a child that dies at once is
/// reported with its real reason, never `NoProc`.
///
/// If the process cannot be started the caller exits, as with [`spawn`].
#[track_caller]
pub fn spawn_monitor<F: FnOnce() + Send + 'static>(f: F) -> (Pid, MonitorRef) {
    or_exit(SpawnOpts::default().spawn_monitor(f))
}

/// Where a message can go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    /// A process.
    Pid(Pid),
    /// A name registered on this node.
    Name(String),
    /// A name registered on another node.
    Remote(String, NodeId),
    /// A process alias (see [`alias`](crate::alias)).
    Alias(crate::Alias),
}

impl From<crate::Alias> for Dest {
    fn from(a: crate::Alias) -> Dest {
        Dest::Alias(a)
    }
}

impl From<Pid> for Dest {
    fn from(p: Pid) -> Dest {
        Dest::Pid(p)
    }
}
impl From<&str> for Dest {
    fn from(s: &str) -> Dest {
        Dest::Name(s.to_string())
    }
}
impl From<String> for Dest {
    fn from(s: String) -> Dest {
        Dest::Name(s)
    }
}
impl From<(&str, NodeId)> for Dest {
    fn from((s, n): (&str, NodeId)) -> Dest {
        Dest::Remote(s.to_string(), n)
    }
}

/// Sends `msg` to `to`. Never blocks, never fails: a message to a process
/// that has exited is dropped (Erlang's rule). Messages from one process to
/// another arrive in the order they were sent.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let s = node.run(|| { send(self_pid(), String::from("hi")); expect::<String>() }).unwrap();
/// assert_eq!(s, "hi");
/// ```
#[inline]
pub fn send<M: Message>(to: Pid, msg: M) {
    let Some(w) = context::worker() else {
        log::warn!("graft: send to {to} outside a process: message dropped");
        return;
    };
    if crate::observe::tracing() {
        crate::observe::trace_sent(to, std::any::type_name::<M>());
    }
    if !w.node.is_local(to) {
        if let Some(mail) = w.node.mail_for(to, msg) {
            w.node.deliver(to, mail);
        }
        return;
    }
    let mail = Mail::message(msg);
    // SAFETY: `current` is set while this worker resumes a process (which
    // it keeps alive meanwhile); that process is the caller.
    let Some(me) = (unsafe { w.current.get().as_ref() }) else {
        return w.node.deliver(to, mail);
    };
    if me.has_signal.load(Ordering::Relaxed) {
        // SAFETY: `me` is the running process.
        unsafe { me.check_doomed() };
    }
    // SAFETY: `me` is the running process.
    let local = unsafe { me.local() };
    let target = match &local.last_target {
        Some(p) if p.pid == to => p,
        _ => match w.node.local_process(to) {
            Some(p) => local.last_target.insert(p),
            None => return w.node.deliver(to, mail),
        },
    };
    match target.deliver_watched(mail, Some(&w.node)) {
        Ok(true) => w.node.sched.wake_from(Some(w), target),
        Ok(false) => {}
        Err(m) => crate::node::drop_undelivered(to, m),
    }
}

/// Sends to a pid, a registered name, or a name on another node.
///
/// # Errors
///
/// `Error::NotRegistered` for a name no process holds on this node;
/// `Error::NotInProcess` outside a process; `Error::NotMobile` for a
/// local-only message to another node; `Error::NoConnection` when that
/// node is not connected; `Error::MessageTooLarge` for a message over
/// [`NodeConfig::max_message_size`](crate::NodeConfig::max_message_size).
/// (A name unknown on another node is not reported: like Erlang, the
/// message is dropped there.) A send to a node whose connection is busy
/// waits until it drains, as [`send`] does.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     assert!(matches!(send_to("nobody", 1u8), Err(Error::NotRegistered(_))));
///     register("me", self_pid()).unwrap();
///     send_to("me", 2u8).unwrap();
///     assert_eq!(expect::<u8>(), 2);
/// }).unwrap();
/// ```
pub fn send_to<M: Message>(to: impl Into<Dest>, msg: M) -> Result<(), Error> {
    let Some(w) = context::worker() else {
        return Err(Error::NotInProcess("send_to"));
    };
    match to.into() {
        Dest::Pid(p) if !w.node.is_local(p) => {
            let (desc, bytes) = msg.encode_remote()?;
            w.node.dist.try_deliver_encoded(p, desc, &bytes)?;
        }
        Dest::Pid(p) => w.node.deliver(p, Mail::message(msg)),
        Dest::Name(n) => match w.node.registry.lookup(&n) {
            Some(p) => w.node.deliver(p, Mail::message(msg)),
            None => return Err(Error::NotRegistered(n)),
        },
        Dest::Remote(n, node) if node == w.node.id => match w.node.registry.lookup(&n) {
            Some(p) => w.node.deliver(p, Mail::message(msg)),
            None => return Err(Error::NotRegistered(n)),
        },
        Dest::Alias(a) => crate::alias::send_alias_on(&w.node, a, msg)?,
        Dest::Remote(name, node) => {
            let (desc, bytes) = msg.encode_remote()?;
            w.node
                .dist
                .send_ctl(node, &Ctl::SendNamed { name, desc, bytes })?;
        }
    }
    Ok(())
}

/// Watches `pid`: when it ends, a [`ProcessDied`] arrives, once. Monitoring a
/// process that is dead or never existed delivers `ProcessDied` with
/// `ExitReason::NoProc` at once.
///
/// # Panics
///
/// Outside a process.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let reason = node.run(|| {
///     let child = spawn(|| { expect::<()>(); panic!("boom") });
///     let r = monitor(child);
///     send(child, ());
///     let d: ProcessDied = expect();
///     assert_eq!(d.monitor, r);
///     d.reason
/// }).unwrap();
/// assert_eq!(reason, ExitReason::Other("boom".into()));
/// ```
pub fn monitor(pid: Pid) -> MonitorRef {
    let me = current("monitor");
    let n = node();
    let r = n.make_ref();
    // SAFETY: `me` is the running process.
    unsafe { me.local() }.monitors.push((r, pid));
    if !n.is_local(pid) {
        if !n.dist.monitor(me.pid, pid, r) {
            let reason = remote_failure(n, pid);
            me.deliver(Mail::Down(ProcessDied {
                pid,
                reason,
                monitor: r,
            }));
        }
        return r;
    }
    let added = n.with_live_meta(pid, |m| m.watchers.push((r, me.pid)));
    if !added {
        me.deliver(Mail::Down(ProcessDied {
            pid,
            reason: ExitReason::NoProc,
            monitor: r,
        }));
    }
    r
}

/// Why a monitor or link on a remote pid could not be made: its node is
/// connected, but in a later incarnation (`NoProc`), or not connected.
fn remote_failure(n: &NodeShared, pid: Pid) -> ExitReason {
    if n.dist.creation_of(pid.node()).is_some() {
        ExitReason::NoProc
    } else {
        ExitReason::NoConnection
    }
}

/// Cancels a monitor. Once this returns, no `ProcessDied` for it that was
/// not already received is delivered... except one already taken into the
/// private queue; [`demonitor_flush`] removes that one too.
pub fn demonitor(r: MonitorRef) {
    let me = current("demonitor");
    // SAFETY: `me` is the running process.
    let mons = &mut unsafe { me.local() }.monitors;
    let Some(i) = mons.iter().position(|(mr, _)| *mr == r) else {
        return;
    };
    let (_, target) = mons.swap_remove(i);
    let n = node();
    if n.is_local(target) {
        n.unwatch(target, r);
    } else {
        n.dist.demonitor(target, r);
    }
}

/// [`demonitor`], and remove a `ProcessDied` for `r` already in the mailbox.
pub fn demonitor_flush(r: MonitorRef) {
    demonitor(r);
    let me = current("demonitor_flush");
    // SAFETY: `me` is the running process.
    unsafe { me.drain() };
    // SAFETY: as above.
    unsafe { me.local() }
        .saved
        .retain(|m| !matches!(m, Mail::Down(d) if d.monitor == r));
}

/// [`demonitor_flush`] for a monitor made after mark `m` (see
/// [`Mark`](crate::Mark)): its `ProcessDied` can only have come after the
/// mark, so only the mail since is looked at (the cost does not grow with
/// what waited in the mailbox before).
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     let m = mark();
///     let p = spawn(|| ());
///     let r = monitor(p);
///     sleep(std::time::Duration::from_millis(20));
///     demonitor_flush_after(r, m);
///     assert!(receive().on(|_: ProcessDied| ()).timeout(std::time::Duration::ZERO).is_none());
/// }).unwrap();
/// ```
pub fn demonitor_flush_after(r: MonitorRef, m: crate::Mark) {
    demonitor(r);
    let me = current("demonitor_flush_after");
    // SAFETY: `me` is the running process.
    unsafe { me.drain() };
    // SAFETY: as above.
    let local = unsafe { me.local() };
    let from = crate::process::receive::start_of(local, m);
    remove_down_from(&mut local.saved, from, r);
}

/// Removes the (one) `ProcessDied` of monitor `r` at index `from` or later.
pub(crate) fn remove_down_from(
    saved: &mut std::collections::VecDeque<Mail>,
    from: usize,
    r: MonitorRef,
) {
    let at = saved
        .range(from..)
        .position(|m| matches!(m, Mail::Down(d) if d.monitor == r));
    if let Some(i) = at {
        saved.remove(from + i);
    }
}

/// Links the caller and `pid`: when either ends abnormally, the other gets an
/// exit signal (see [`trap_exits`]). Linking to a dead or unknown process
/// sends the caller an exit signal with `NoProc`.
pub fn link(pid: Pid) {
    let me = current("link");
    if pid == me.pid {
        return;
    }
    {
        let mut m = me.meta.lock();
        if m.links.contains(&pid) {
            return;
        }
        m.links.push(pid);
    }
    let n = node();
    if !n.is_local(pid) {
        if !n.dist.link(me.pid, pid) {
            let reason = remote_failure(n, pid);
            me.deliver(Mail::Signal {
                from: pid,
                reason,
                link: true,
            });
        }
        return;
    }
    let added = n.with_live_meta(pid, |m| {
        if !m.links.contains(&me.pid) {
            m.links.push(me.pid);
        }
    });
    if !added {
        me.deliver(Mail::Signal {
            from: pid,
            reason: ExitReason::NoProc,
            link: true,
        });
    }
}

/// Removes the link between the caller and `pid`; no exit signal from it is
/// acted on after this returns.
pub fn unlink(pid: Pid) {
    let me = current("unlink");
    me.meta.lock().links.retain(|p| *p != pid);
    let n = node();
    if n.is_local(pid) {
        n.unlink_local(pid, me.pid);
    } else {
        n.dist.unlink(me.pid, pid);
    }
}

/// With `true`, exit signals (except `Kill`) arrive as [`ExitSignal`]
/// messages instead of ending the caller. Returns the previous setting.
///
/// [`ExitSignal`]: crate::ExitSignal
pub fn trap_exits(on: bool) -> bool {
    let me = current("trap_exits");
    std::mem::replace(&mut me.meta.lock().trap_exits, on)
}

/// Sends an exit signal to `pid`. `Kill` ends it unconditionally (its links
/// see `Killed`); other reasons end it unless it traps exits (then it gets an
/// [`ExitSignal`](crate::ExitSignal) message); `Normal` is ignored by a
/// process that does not trap exits.
pub fn exit(pid: Pid, reason: ExitReason) {
    let me = current("exit");
    node().deliver(
        pid,
        Mail::Signal {
            from: me.pid,
            reason,
            link: false,
        },
    );
    if pid == me.pid {
        // SAFETY: `me` is the running process; acts on the signal now.
        unsafe { me.drain() };
    }
}

/// Ends the running process with reason `Normal` (its stack unwinds, `Drop`
/// runs).
pub fn terminate() -> ! {
    let _ = current("terminate");
    exit_now(ExitReason::Normal)
}

/// Ends the running process with `reason`.
pub fn exit_self(reason: ExitReason) -> ! {
    let _ = current("exit_self");
    exit_now(reason)
}

/// Registers `pid` under `name` on this node.
///
/// # Errors
///
/// `NameTaken` if another process holds the name, `AlreadyRegistered` if
/// `pid` has a name, `NoProc` if `pid` is not alive here, `NotInProcess`
/// outside a process.
pub fn register(name: &str, pid: Pid) -> Result<(), Error> {
    let Some(w) = context::worker() else {
        return Err(Error::NotInProcess("register"));
    };
    let n = &w.node;
    if !n.is_local(pid) || pid.creation() != n.creation {
        return Err(Error::NoProc(pid));
    }
    let Some(p) = n.table.get(pid.serial()) else {
        return Err(Error::NoProc(pid));
    };
    n.registry.insert_with(name, pid, || {
        let mut m = p.meta.lock();
        if m.exited {
            return Err(Error::NoProc(pid));
        }
        if let Some(old) = &m.name {
            return Err(Error::AlreadyRegistered(pid, old.clone()));
        }
        m.name = Some(name.to_string());
        Ok(())
    })
}

/// Removes a registered name; returns who had it.
pub fn unregister(name: &str) -> Option<Pid> {
    let w = context::worker()?;
    let pid = w.node.registry.remove(name)?;
    w.node.table.with(pid.serial(), |p| {
        let mut m = p.meta.lock();
        if m.name.as_deref() == Some(name) {
            m.name = None;
        }
    });
    Some(pid)
}

/// The pid registered under `name` on this node.
pub fn whereis(name: &str) -> Option<Pid> {
    context::worker()?.node.registry.lookup(name)
}

/// Every registered name on this node, sorted.
pub fn registered() -> Vec<(String, Pid)> {
    context::worker().map_or_else(Vec::new, |w| w.node.registry.names())
}

/// Lets other processes run; the caller continues later.
pub fn yield_now() {
    let me = current("yield_now");
    if me.has_signal.load(Ordering::Acquire) {
        // SAFETY: `me` is the running process.
        unsafe { me.drain() };
    }
    suspend_current(me, Suspend::Yield);
}

/// Suspends the caller for `d` (other processes run meanwhile). Exit
/// signals still reach it.
pub fn sleep(d: Duration) {
    let me = current("sleep");
    let until = crate::sched::timer::deadline_after(d);
    let t = node().add_timer(until, Action::Wake(me.pid));
    loop {
        if me.has_signal.load(Ordering::Acquire) {
            // SAFETY: `me` is the running process.
            unsafe { me.drain() };
        }
        if Instant::now() >= until {
            break;
        }
        park_current(me);
    }
    node().timers.cancel(t);
}

/// Sends `msg` to `to` after `d`.
///
/// ```
/// use graft::*;
/// use std::time::Duration;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let v = node.run(|| { send_after(Duration::from_millis(5), self_pid(), 9u8); expect::<u8>() }).unwrap();
/// assert_eq!(v, 9);
/// ```
pub fn send_after<M: Message>(d: Duration, to: Pid, msg: M) -> TimerRef {
    let n = node();
    // A local-only message for another node is refused now (logged): the
    // timer then delivers nothing.
    let mail = n.mail_for(to, msg).unwrap_or(Mail::Dropped);
    n.add_timer(
        crate::sched::timer::deadline_after(d),
        Action::Deliver(to, mail),
    )
}

/// Cancels a [`send_after`]; `false` if it already fired.
pub fn cancel_timer(t: TimerRef) -> bool {
    node().timers.cancel(t)
}

/// Runs `f` on the node's blocking pool while the caller is parked, so a
/// blocking call (file I/O, a sleeping C library) does not stall a worker.
/// A panic in `f` is re-raised in the caller.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let n = node.run(|| blocking(|| std::fs::read_dir(".").map(|d| d.count()).unwrap_or(0))).unwrap();
/// assert!(n > 0);
/// ```
pub fn blocking<R, F>(f: F) -> R
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    let me = current("blocking");
    let n = node();
    let Some(arc) = n.table.get(me.pid.serial()) else {
        return f();
    };
    let slot: std::sync::Arc<parking_lot::Mutex<Option<std::thread::Result<R>>>> =
        Default::default();
    let out = slot.clone();
    let waker = std::sync::Arc::downgrade(&arc);
    drop(arc);
    let node_ptr = NodePtr(n);
    n.blocking.submit(Box::new(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        *out.lock() = Some(r);
        if let Some(p) = waker.upgrade() {
            let node_ptr = node_ptr;
            // SAFETY: the node outlives its blocking pool (joined at shutdown
            // before the node is dropped).
            unsafe { &*node_ptr.0 }.wake(&p);
        }
    }));
    loop {
        if me.has_signal.load(Ordering::Acquire) {
            // SAFETY: `me` is the running process.
            unsafe { me.drain() };
        }
        if let Some(r) = slot.lock().take() {
            return match r {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            };
        }
        park_current(me);
    }
}

struct NodePtr(*const NodeShared);
// SAFETY: `NodeShared` is `Sync`; the pointer is only dereferenced while the
// node is alive (see `blocking`).
unsafe impl Send for NodePtr {}

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

/// Every live process on this node, sorted.
pub fn processes() -> Vec<Pid> {
    context::worker().map_or_else(Vec::new, |w| w.node.table.pids())
}

/// Process-local storage: values keyed by type that move with the process
/// between workers (use this instead of `thread_local!`).
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let v = node.run(|| {
///     local::set(5u32);
///     yield_now(); // may resume on another worker: the value moves along
///     local::with(|n: &mut u32| *n += 1);
///     local::get::<u32>()
/// }).unwrap();
/// assert_eq!(v, Some(6));
/// ```
pub mod local {
    use super::*;

    /// Stores `v` (replacing any earlier value of its type).
    pub fn set<T: Send + 'static>(v: T) {
        let me = current("local::set");
        // SAFETY: `me` is the running process.
        unsafe { me.local() }
            .storage
            .get_or_insert_with(Default::default)
            .insert(TypeId::of::<T>(), Box::new(v));
    }

    /// A copy of the stored `T`.
    pub fn get<T: Clone + Send + 'static>() -> Option<T> {
        let me = current("local::get");
        // SAFETY: `me` is the running process.
        unsafe { me.local() }
            .storage
            .as_ref()?
            .get(&TypeId::of::<T>())
            .and_then(|b| b.downcast_ref::<T>())
            .cloned()
    }

    /// Removes and returns the stored `T`.
    pub fn take<T: Send + 'static>() -> Option<T> {
        let me = current("local::take");
        // SAFETY: `me` is the running process.
        let b: Box<dyn Any + Send> = unsafe { me.local() }
            .storage
            .as_mut()?
            .remove(&TypeId::of::<T>())?;
        b.downcast::<T>().ok().map(|b| *b)
    }

    /// Runs `f` on the stored `T` (a default one if none). `f` may make any
    /// runtime call, yielding included.
    pub fn with<T: Default + Send + 'static, R>(f: impl FnOnce(&mut T) -> R) -> R {
        let mut v = take::<T>().unwrap_or_default();
        let r = f(&mut v);
        set(v);
        r
    }
}

/// Reports the node's live-process count (for tests and operators).
pub fn process_count() -> usize {
    context::worker().map_or(0, |w| w.node.live())
}

/// Whether `pid` is alive on this node.
pub fn is_alive(pid: Pid) -> bool {
    context::worker().is_some_and(|w| w.node.local_process(pid).is_some())
}

/// Connects this node to the node listening at `addr` (and, through it, to
/// every node that one knows: the mesh is full). The caller is parked while
/// the connection and handshake run on the blocking pool.
///
/// # Errors
///
/// `Error::Remote` with the reason (refused, wrong cookie, timeout);
/// `Error::NotInProcess` outside a process (use
/// [`Node::connect`](crate::Node::connect)).
pub fn connect(addr: std::net::SocketAddr) -> Result<NodeId, Error> {
    let Some(w) = context::worker() else {
        return Err(Error::NotInProcess("connect"));
    };
    let node = std::sync::Arc::clone(&w.node);
    blocking(move || crate::node::connect_transport(&node, addr))
}

/// Closes the connection to `node`, as `erlang:disconnect_node/1` does;
/// `false` if it was not connected (or outside a process). See
/// [`Node::disconnect`](crate::Node::disconnect) for what follows.
///
/// ```
/// use graft::{Node, NodeConfig, NodeId};
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let other = NodeId::from_name("nowhere@127.0.0.1");
/// assert!(!node.run(move || graft::disconnect(other)).unwrap());
/// # node.shutdown();
/// ```
pub fn disconnect(node: NodeId) -> bool {
    context::worker().is_some_and(|w| w.node.dist.disconnect(node))
}

/// The nodes this node is connected to now.
pub fn nodes() -> Vec<NodeId> {
    context::worker().map_or_else(Vec::new, |w| w.node.dist.nodes())
}

/// The name of a connected node (or of this one).
pub fn node_name(id: NodeId) -> Option<String> {
    let w = context::worker()?;
    if id == w.node.id {
        return Some(w.node.name.clone());
    }
    w.node.dist.peer_info(id).map(|(name, _)| name)
}

/// How long a remote request (spawn, whereis) waits for its answer at most.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends a request to `node` and waits for its `DistReply`.
fn remote_request(node: NodeId, make: impl FnOnce(u64, Pid) -> Ctl) -> Result<Option<Pid>, Error> {
    let me = current("remote request");
    let n = self::node();
    let req = n.dist.next_req();
    n.dist.request(node, me.pid, req, &make(req, me.pid))?;
    receive()
        .when(move |r: &DistReply| r.req == req, |r: DistReply| r.result)
        .timeout(REMOTE_TIMEOUT)
        .unwrap_or(Err(Error::Timeout))
}

fn spawn_remote<E, F>(node: NodeId, env: E, body: F, link: bool) -> Result<Pid, Error>
where
    E: Mobile,
    F: FnOnce(E) + Copy + Send + Sync + 'static,
{
    // Refused at build time for a fn pointer or a capturing closure, even
    // when `node` is this one.
    graph::code_assert_body::<F>();
    let n = self::node();
    if node == n.id {
        let f = move || body(env);
        return if link {
            SpawnOpts::default().link().spawn(f)
        } else {
            n.spawn(SpawnSpec::default(), f)
        };
    }
    spawn_encoded(node, graph::encode(&MobileFnOnce::new(env, body)), link)
}

/// Sends `body` to `node` as the body of a spawn request, unchecked: the
/// bytes a forged or corrupted request would carry (for tests of what the
/// receiving node does with them). `body` is meant to be an encoded
/// `MobileFnOnce<()>`.
///
/// # Errors
///
/// As [`spawn_on`].
///
/// ```
/// use graft::*;
/// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b_addr = b.addr();
/// let r = a.run(move || spawn_encoded_on(connect(b_addr).unwrap(), vec![1, 2, 3])).unwrap();
/// assert!(matches!(r, Err(Error::Remote(_))));
/// ```
#[doc(hidden)]
pub fn spawn_encoded_on(node: NodeId, body: Vec<u8>) -> Result<Pid, Error> {
    spawn_encoded(node, body, false)
}

fn spawn_encoded(node: NodeId, bytes: Vec<u8>, link: bool) -> Result<Pid, Error> {
    let pid = remote_request(node, |req, me| Ctl::Spawn {
        req,
        reply_to: me,
        body: bytes,
        link,
    })?
    .ok_or_else(|| Error::Remote("spawn answered without a pid".into()))?;
    // With `link`, both halves are in place already: the remote node linked
    // the child at spawn, and our half was recorded as the reply was read
    // (see `dist.rs`), before any exit signal of the child could arrive.
    Ok(pid)
}

/// Spawns `body(env)` as a process on `node` (this node included). The
/// body is a non-capturing closure or a fn item; what it needs travels
/// explicitly in `env` (the compiler checks the capture list: a closure
/// that captures anything, or a fn pointer, does not build). On another
/// node the body is named by its code id (see
/// [`MobileFn::code_id`](crate::graph::MobileFn::code_id)): a node whose
/// executable lacks that function refuses the spawn.
///
/// # Errors
///
/// `Error::NoConnection` when `node` is not connected (or is lost before
/// answering), `Error::Remote` when it refuses (its executable has no
/// mobile function with this body's code id, a resource limit),
/// `Error::Timeout`.
///
/// ```
/// use graft::*;
/// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b_addr = b.addr();
/// let got = a.run(move || {
///     let b = connect(b_addr).unwrap();
///     let (me, greeting) = (self_pid(), String::from("hello from"));
///     spawn_on(b, (me, greeting), |(to, g)| send(to, format!("{g} {}", this_node()))).unwrap();
///     expect::<String>()
/// }).unwrap();
/// assert!(got.starts_with("hello from"));
/// ```
pub fn spawn_on<E, F>(node: NodeId, env: E, body: F) -> Result<Pid, Error>
where
    E: Mobile,
    F: FnOnce(E) + Copy + Send + Sync + 'static,
{
    spawn_remote(node, env, body, false)
}

/// [`spawn_on`], linked to the caller.
///
/// # Errors
///
/// As [`spawn_on`].
pub fn spawn_link_on<E, F>(node: NodeId, env: E, body: F) -> Result<Pid, Error>
where
    E: Mobile,
    F: FnOnce(E) + Copy + Send + Sync + 'static,
{
    spawn_remote(node, env, body, true)
}

/// The answer of a [`call_on`] body, tagged with its request: the encoded
/// value, or why the body ended without one.
#[derive(Debug, graft_derive::Mobile)]
struct CallAnswer {
    req: u64,
    value: Result<Encoded, ExitReason>,
}

/// Runs `body(env)` on `node` and returns its value (the paper's `call`).
///
/// # Errors
///
/// As [`spawn_on`]; `Error::Exited(reason)` if the body panics, is killed,
/// or its node is lost; `Error::Decode` if the answer does not decode.
///
/// ```
/// use graft::*;
/// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b_addr = b.addr();
/// let n = a.run(move || {
///     let b = connect(b_addr).unwrap();
///     call_on(b, 20u64, |k| (1..=k).sum::<u64>()).unwrap()
/// }).unwrap();
/// assert_eq!(n, 210);
/// ```
pub fn call_on<E, R, F>(node: NodeId, env: E, body: F) -> Result<R, Error>
where
    E: Mobile,
    R: Mobile,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
{
    let me = current("call_on");
    let req = self::node().dist.next_req();
    let f = MobileFnOnce::returning(env, body);
    let pid = spawn_on(node, (me.pid, req, f), |(caller, req, f)| {
        // The answer (or the reason there is none) is sent before the
        // process ends, so it arrives before any `ProcessDied` for it.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.call())) {
            Ok(value) => send(
                caller,
                CallAnswer {
                    req,
                    value: Ok(value),
                },
            ),
            Err(payload) => {
                let reason = crate::node::exit_reason_of(&*payload);
                send(
                    caller,
                    CallAnswer {
                        req,
                        value: Err(reason),
                    },
                );
                std::panic::resume_unwind(payload);
            }
        }
    })?;
    // Only for a lost node or a kill: the body reports everything else.
    let m = monitor(pid);
    let r = receive()
        .when(move |a: &CallAnswer| a.req == req, |a: CallAnswer| a.value)
        .when(
            move |d: &ProcessDied| d.monitor == m,
            |d: ProcessDied| Err(d.reason),
        )
        .wait();
    demonitor_flush(m);
    match r {
        Ok(v) => v.decode::<R>().map_err(Error::Decode),
        Err(reason) => Err(Error::Exited(reason)),
    }
}

/// The pid registered under `name` on `node` (this node included).
///
/// # Errors
///
/// `Error::NoConnection`, `Error::Timeout`.
pub fn whereis_on(name: &str, node: NodeId) -> Result<Option<Pid>, Error> {
    if node == self::node().id {
        return Ok(whereis(name));
    }
    let name = name.to_string();
    remote_request(node, |req, _| Ctl::Whereis { req, name })
}
