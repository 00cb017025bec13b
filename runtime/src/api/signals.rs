//! Monitors, links and exit signals: what a process learns when another
//! ends, and how a process ends itself or another.

use crate::context::{current, node};
use crate::exit::{ExitReason, ProcessDied};
use crate::node::NodeShared;
use crate::pid::{MonitorRef, Pid};
use crate::process::{ExitUnwind, Mail};

/// Ends the running process with `reason` (unwinding its stack).
pub(crate) fn exit_now(reason: ExitReason) -> ! {
    std::panic::resume_unwind(Box::new(ExitUnwind { reason, own: true }))
}

/// The reason a process gave for ending itself ([`exit_self`],
/// [`terminate`], or a failed [`spawn`](crate::spawn)), if `payload` is that unwind;
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
pub(crate) fn remote_failure(n: &NodeShared, pid: Pid) -> ExitReason {
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
