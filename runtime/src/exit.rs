//! Why processes end, and the messages that say so.

use crate::pid::{MonitorRef, Pid};
use std::fmt;

/// Why a process ended (or the reason carried by an exit signal).
///
/// ```
/// use graft::ExitReason;
/// assert!(ExitReason::Normal.is_normal());
/// assert!(!ExitReason::Other("boom".into()).is_normal());
/// assert_eq!(ExitReason::Other("boom".into()).to_string(), "boom");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, graft_derive::Mobile)]
pub enum ExitReason {
    /// The body returned.
    Normal,
    /// Asked to stop (supervisors use it); trappable.
    Shutdown,
    /// The untrappable kill signal, as sent with [`exit`](crate::exit()).
    Kill,
    /// The reason a process killed by `Kill` dies with, and passes on to its
    /// links (so that a `Kill` does not cascade untrappably).
    Killed,
    /// A panic's message, or a reason given to `exit`.
    Other(String),
    /// The process's node became unreachable.
    NoConnection,
    /// The process did not exist (monitoring or linking a dead or unknown pid).
    NoProc,
    /// The process ran into the guard page below its stack. Its frames were
    /// abandoned, not unwound: their destructors did not run (heap memory
    /// they owned leaks; a lock held at that moment stays held). See
    /// [`spawn_opts().stack_size(..)`](crate::SpawnOpts::stack_size).
    StackOverflow,
    /// The process's mailbox passed its limit
    /// ([`SpawnOpts::max_mailbox`](crate::SpawnOpts::max_mailbox) with
    /// [`Overflow::Kill`](crate::Overflow::Kill)); untrappable, like
    /// Erlang's `max_heap_size` kill.
    MailboxOverflow,
}

impl ExitReason {
    /// `true` for [`ExitReason::Normal`].
    pub fn is_normal(&self) -> bool {
        matches!(self, ExitReason::Normal)
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitReason::Normal => f.write_str("normal"),
            ExitReason::Shutdown => f.write_str("shutdown"),
            ExitReason::Kill => f.write_str("kill"),
            ExitReason::Killed => f.write_str("killed"),
            ExitReason::Other(s) => f.write_str(s),
            ExitReason::NoConnection => f.write_str("noconnection"),
            ExitReason::NoProc => f.write_str("noproc"),
            ExitReason::StackOverflow => f.write_str("stack_overflow"),
            ExitReason::MailboxOverflow => f.write_str("mailbox_overflow"),
        }
    }
}

/// Delivered once to the watcher of a monitor when the watched process ends
/// (Erlang's `'DOWN'`).
///
/// ```no_run
/// use graft::*;
/// # fn body(other: Pid) {
/// let r = monitor(other);
/// let died: ProcessDied = expect();
/// assert_eq!(died.monitor, r);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, graft_derive::Mobile)]
pub struct ProcessDied {
    /// The process that ended.
    pub pid: Pid,
    /// Why it ended.
    pub reason: ExitReason,
    /// The monitor this notification answers.
    pub monitor: MonitorRef,
}

/// An exit signal turned into a message, for a process that traps exits
/// (Erlang's `{'EXIT', From, Reason}`).
///
/// ```no_run
/// use graft::*;
/// trap_exits(true);
/// let child = spawn_link(|| panic!("boom"));
/// let sig: ExitSignal = expect();
/// assert_eq!(sig.from, child);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, graft_derive::Mobile)]
pub struct ExitSignal {
    /// Who sent the signal (the linked process that died, or the caller of
    /// `exit`).
    pub from: Pid,
    /// The reason it carries.
    pub reason: ExitReason,
}
