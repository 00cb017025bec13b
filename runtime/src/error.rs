//! The runtime's error type.

use crate::exit::ExitReason;
use crate::pid::Pid;
use std::fmt;

/// What can go wrong in a runtime call.
///
/// ```
/// let e = graft::Error::NotInProcess("receive");
/// assert!(e.to_string().contains("outside a graft process"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A process-only call was made from a thread that is not running a
    /// process (name of the call).
    NotInProcess(&'static str),
    /// `register`: the name is taken by another process.
    NameTaken(String),
    /// `register`: this process already has a name.
    AlreadyRegistered(Pid, String),
    /// No process is registered under this name.
    NotRegistered(String),
    /// The process does not exist (or no longer).
    NoProc(Pid),
    /// The root process of [`Node::run`](crate::Node::run), or a remote call,
    /// ended without a value.
    Exited(ExitReason),
    /// The node is shutting down or stopped.
    NodeDown,
    /// A system resource ran out (stacks, threads, sockets): what and why.
    Resource(String),
    /// An I/O error at an OS or socket boundary.
    Io(std::io::Error),
    /// A local-only value ([`Local`](crate::Local)) was sent to another node.
    NotMobile(&'static str),
    /// No connection to that node (never connected, or lost).
    NoConnection(crate::NodeId),
    /// The other node refused or failed the request (reason given).
    Remote(String),
    /// A value from another node did not decode.
    Decode(crate::graph::DecodeError),
    /// A reply did not come in time.
    Timeout,
    /// A message (or spawn body, or request) for another node is larger
    /// than [`NodeConfig::max_message_size`](crate::NodeConfig::max_message_size):
    /// nothing was sent.
    MessageTooLarge {
        /// Its encoded size in bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotInProcess(call) => write!(
                f,
                "graft::{call} called outside a graft process (use Node::run or spawn)"
            ),
            Error::NameTaken(n) => write!(f, "the name {n:?} is already registered"),
            Error::AlreadyRegistered(p, n) => write!(f, "{p} is already registered as {n:?}"),
            Error::NotRegistered(n) => write!(f, "no process is registered as {n:?}"),
            Error::NoProc(p) => write!(f, "no such process: {p}"),
            Error::Exited(r) => write!(f, "the process exited: {r}"),
            Error::NodeDown => f.write_str("the node is shutting down"),
            Error::Resource(s) => write!(f, "out of resources: {s}"),
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::NotMobile(t) => {
                write!(f, "{t} is local-only and cannot be sent to another node")
            }
            Error::NoConnection(n) => write!(f, "no connection to node {n}"),
            Error::Remote(s) => write!(f, "the remote node refused: {s}"),
            Error::Decode(e) => write!(f, "cannot decode a remote value: {e}"),
            Error::Timeout => f.write_str("timed out"),
            Error::MessageTooLarge { size, limit } => write!(
                f,
                "a message of {size} bytes exceeds the maximum message size of {limit} bytes"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Decode(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
