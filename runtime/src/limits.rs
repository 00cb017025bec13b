//! Mailbox limits, opt-in per process
//! ([`SpawnOpts::max_mailbox`](crate::SpawnOpts::max_mailbox)).
//!
//! Erlang's mailboxes are unbounded and so are graft's by default: a
//! process that cannot keep up grows its queue until the node runs out of
//! memory. A limit bounds that one process instead. Counted are the
//! messages waiting for it, in its mailbox and in its private queue (as of
//! its last receive: a message taken since still counts until the next,
//! so the count errs high). System signals (exit signals, monitor
//! notifications) are never counted and never dropped: a process past its
//! limit still learns that a linked process died.
//!
//! Checked by the sender, under the mailbox lock it takes anyway; a process
//! without a limit pays one branch per delivery.

use crate::pid::Pid;

/// What happens to a message that finds its receiver's mailbox full.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let (dropped, reason) = node.run(|| {
///     let (pid, r) = spawn_opts()
///         .max_mailbox(2, Overflow::DropNewest)
///         .spawn_monitor(|| { let _: () = expect(); })
///         .unwrap();
///     for i in 0..5u32 { send(pid, i); }
///     let dropped = dropped_messages(pid);
///     exit(pid, ExitReason::Kill);
///     let d: ProcessDied = expect();
///     (dropped, d.reason)
/// }).unwrap();
/// assert_eq!(dropped, Some(3));
/// assert_eq!(reason, ExitReason::Killed);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// The receiver is killed with reason
    /// [`ExitReason::MailboxOverflow`](crate::ExitReason::MailboxOverflow)
    /// (untrappable; links and monitors see `mailbox_overflow`).
    Kill,
    /// The new message is dropped (and counted, see [`dropped_messages`]).
    DropNewest,
}

/// How many messages a process with a mailbox limit has dropped (or, with
/// [`Overflow::Kill`], refused while it was being killed); `None` for a
/// process that is not alive here.
///
/// # Panics
///
/// Outside a process.
pub fn dropped_messages(pid: Pid) -> Option<u64> {
    let _ = crate::context::current("dropped_messages");
    crate::context::node().local_process(pid).map(|p| {
        p.limit
            .as_ref()
            .map_or(0, |l| l.dropped.load(crate::loom::Ordering::Relaxed))
    })
}
