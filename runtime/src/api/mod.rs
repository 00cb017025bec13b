//! The calls a process makes: identity, spawn, send, monitors and links,
//! exit signals, names, time, blocking work.
//!
//! All of them act on "the process running on this thread". Outside a process
//! they return [`Error::NotInProcess`] where they return a `Result`, and
//! otherwise panic with a message naming the call (except `send`, which logs
//! and drops the message, so that `Drop` code cannot turn an unwind into an
//! abort).
//!
//! One file per concept: `spawn` (spawn and its options),
//! `send` (send, send_to), `signals` (monitors, links, exits), `names`,
//! `time` (yield, sleep, timers), `blocking`, `info` (process_info),
//! [`local`] (process-local storage), `remote` (other nodes). The helpers
//! every runtime call starts from (the running process, its node) are in
//! `context.rs`.

use crate::pid::MonitorRef;

mod blocking;
mod info;
pub mod local;
mod names;
mod remote;
mod send;
mod signals;
mod spawn;
mod time;

use crate::context::node;
pub use crate::context::{self_pid, this_node, try_self_pid};
pub use crate::message::Message;
pub use blocking::*;
pub use info::*;
pub use names::*;
pub use remote::*;
pub use send::*;
pub use signals::*;
pub use spawn::*;
pub use time::*;

/// A new unique reference.
pub fn make_ref() -> MonitorRef {
    node().make_ref()
}
