//! Channel errors: each hands back the message it could not deliver
//! (crossbeam-channel's shapes). All are `Mobile` (when the message is), so
//! they can be sent as messages, to other nodes too.

use std::fmt;

/// [`SendPort::send`](crate::SendPort::send) failed: the receiving port is
/// gone. The message is handed back.
#[derive(Clone, Copy, PartialEq, Eq, crate::Mobile)]
pub struct SendError<T>(pub T);

/// [`SendPort::try_send`](crate::SendPort::try_send) failed.
#[derive(Clone, Copy, PartialEq, Eq, crate::Mobile)]
pub enum TrySendError<T> {
    /// A bounded port is full (a rendezvous port: no receiver is waiting).
    Full(T),
    /// The receiving port is gone.
    Disconnected(T),
}

/// [`SendPort::send_timeout`](crate::SendPort::send_timeout) failed.
#[derive(Clone, Copy, PartialEq, Eq, crate::Mobile)]
pub enum SendTimeoutError<T> {
    /// The port stayed full (or, for a rendezvous port, no receiver took the
    /// message) until the deadline.
    Timeout(T),
    /// The receiving port is gone.
    Disconnected(T),
}

/// [`ReceivePort::recv`](crate::ReceivePort::recv) failed: the port is empty
/// and every [`SendPort`](crate::SendPort) is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, crate::Mobile)]
pub struct RecvError;

/// [`ReceivePort::try_recv`](crate::ReceivePort::try_recv) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, crate::Mobile)]
pub enum TryRecvError {
    /// Nothing to receive now.
    Empty,
    /// Nothing to receive ever again: empty, and every sender is gone.
    Disconnected,
}

/// [`ReceivePort::recv_timeout`](crate::ReceivePort::recv_timeout) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, crate::Mobile)]
pub enum RecvTimeoutError {
    /// Nothing arrived before the deadline.
    Timeout,
    /// Empty, and every sender is gone.
    Disconnected,
}

impl<T> SendError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> TrySendError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(v) | TrySendError::Disconnected(v) => v,
        }
    }
    /// Whether the port was full.
    pub fn is_full(&self) -> bool {
        matches!(self, TrySendError::Full(_))
    }
    /// Whether the receiving port is gone.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, TrySendError::Disconnected(_))
    }
}

impl<T> SendTimeoutError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            SendTimeoutError::Timeout(v) | SendTimeoutError::Disconnected(v) => v,
        }
    }
    /// Whether the deadline passed.
    pub fn is_timeout(&self) -> bool {
        matches!(self, SendTimeoutError::Timeout(_))
    }
    /// Whether the receiving port is gone.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, SendTimeoutError::Disconnected(_))
    }
}

impl<T> From<SendError<T>> for TrySendError<T> {
    fn from(e: SendError<T>) -> Self {
        TrySendError::Disconnected(e.0)
    }
}

impl<T> From<SendError<T>> for SendTimeoutError<T> {
    fn from(e: SendError<T>) -> Self {
        SendTimeoutError::Disconnected(e.0)
    }
}

impl From<RecvError> for TryRecvError {
    fn from(_: RecvError) -> Self {
        TryRecvError::Disconnected
    }
}

impl From<RecvError> for RecvTimeoutError {
    fn from(_: RecvError) -> Self {
        RecvTimeoutError::Disconnected
    }
}

// Debug without `T: Debug`: the message is not shown (as crossbeam does).
impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendError { .. }")
    }
}
impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}
impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            SendTimeoutError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sending on a port whose receiving end is gone")
    }
}
impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("sending on a full port"),
            TrySendError::Disconnected(_) => {
                f.write_str("sending on a port whose receiving end is gone")
            }
        }
    }
}
impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("timed out sending on a full port"),
            SendTimeoutError::Disconnected(_) => {
                f.write_str("sending on a port whose receiving end is gone")
            }
        }
    }
}
impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("receiving on an empty port whose senders are all gone")
    }
}
impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => f.write_str("receiving on an empty port"),
            TryRecvError::Disconnected => {
                f.write_str("receiving on an empty port whose senders are all gone")
            }
        }
    }
}
impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvTimeoutError::Timeout => f.write_str("timed out receiving on an empty port"),
            RecvTimeoutError::Disconnected => {
                f.write_str("receiving on an empty port whose senders are all gone")
            }
        }
    }
}

impl<T: Send> std::error::Error for SendError<T> {}
impl<T: Send> std::error::Error for TrySendError<T> {}
impl<T: Send> std::error::Error for SendTimeoutError<T> {}
impl std::error::Error for RecvError {}
impl std::error::Error for TryRecvError {}
impl std::error::Error for RecvTimeoutError {}
