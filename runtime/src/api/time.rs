//! Time: yielding, sleeping, and timed messages.

use super::*;
use crate::context::suspend_current;
use crate::context::{current, node, park_current};
use crate::coroutine::Suspend;
use crate::loom::Ordering;
use crate::pid::Pid;
use crate::process::Mail;
use crate::sched::timer::{Action, TimerRef};
use std::time::{Duration, Instant};

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
