//! The mailbox: the one queue every sender of a process pushes to.
//!
//! Senders push under a short lock and then wake the owner (see
//! `process/state.rs`). The owner moves everything out in one swap when it
//! receives; selective receive then works on the owner's private queue, so
//! senders never wait behind a scan. Once the owner exits the mailbox is
//! closed: later pushes hand the mail back and the sender drops it (a send to
//! a dead process is not an error, as in Erlang).

use crate::loom::{AtomicBool, Mutex, Ordering};
use std::collections::VecDeque;

/// A multi-producer queue drained by one owner. Generic so the loom models can
/// push plain integers through the real code.
#[derive(Debug)]
pub struct Mailbox<M> {
    inner: Mutex<Inner<M>>,
    /// Set (under the lock) by every push, cleared by `drain_into`: lets the
    /// owner skip the lock when nothing came (a process that has just sent
    /// and goes back to receive, most of the time).
    ///
    /// Why a check that reads `false` loses nothing: a pusher wakes the
    /// owner after pushing (`state.rs`), and reads the state word after the
    /// owner's latest locked drain (the lock orders them), so it sees the
    /// owner `RUNNING` and notifies it, and the owner's failed park then
    /// sees the push. That holds only once the owner has drained under the
    /// lock since it was last resumed (its `RUNNING` store is a plain store,
    /// ordered by nothing else): `fresh` forces that first drain.
    nonempty: AtomicBool,
    /// The owner was resumed and has not drained under the lock since (see
    /// `nonempty`). Only the owner's thread touches it.
    fresh: AtomicBool,
}

#[derive(Debug)]
struct Inner<M> {
    queue: VecDeque<M>,
    closed: bool,
    /// Some queued item needs the owner's attention beyond "a message"
    /// (signals, monitor notifications): set by `push_flagged`.
    flagged: bool,
}

impl<M> Default for Mailbox<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M> Mailbox<M> {
    /// An empty, open mailbox.
    pub fn new() -> Mailbox<M> {
        Mailbox {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                closed: false,
                flagged: false,
            }),
            nonempty: AtomicBool::new(false),
            fresh: AtomicBool::new(true),
        }
    }

    /// The owner is being resumed (started, or kept running after a failed
    /// park): its next drain takes the lock (see `nonempty`).
    #[inline]
    pub fn owner_resumed(&self) {
        self.fresh.store(true, Ordering::Relaxed);
    }

    /// Appends `m`; hands it back if the owner has exited.
    #[inline]
    pub fn push(&self, m: M) -> Result<(), M> {
        self.push_flagged(m, false)
    }

    /// Appends `m` unless the owner has exited (`Err((m, false))`) or `cap`
    /// items wait already (`Err((m, true))`); the queue's length after it.
    #[inline(always)]
    pub fn push_within(&self, m: M, flag: bool, cap: usize) -> Result<usize, (M, bool)> {
        let mut inner = self.inner.lock();
        if inner.closed {
            return Err((m, false));
        }
        if inner.queue.len() >= cap {
            return Err((m, true));
        }
        inner.queue.push_back(m);
        inner.flagged |= flag;
        self.nonempty.store(true, Ordering::Release);
        Ok(inner.queue.len())
    }

    /// Appends `m`, marking the batch as needing attention if `flag`.
    #[inline(always)]
    pub fn push_flagged(&self, m: M, flag: bool) -> Result<(), M> {
        let mut inner = self.inner.lock();
        if inner.closed {
            return Err(m);
        }
        inner.queue.push_back(m);
        inner.flagged |= flag;
        self.nonempty.store(true, Ordering::Release);
        Ok(())
    }

    /// Moves every queued item to the back of `out` (O(1) when `out` is empty).
    /// Returns how many moved, and whether any was pushed flagged.
    #[inline]
    pub fn drain_into(&self, out: &mut VecDeque<M>) -> (usize, bool) {
        if !self.fresh.load(Ordering::Relaxed) && !self.nonempty.load(Ordering::Acquire) {
            return (0, false);
        }
        let mut inner = self.inner.lock();
        self.fresh.store(false, Ordering::Relaxed);
        self.nonempty.store(false, Ordering::Relaxed);
        let n = inner.queue.len();
        if out.is_empty() {
            std::mem::swap(out, &mut inner.queue);
        } else {
            out.append(&mut inner.queue);
        }
        (n, std::mem::take(&mut inner.flagged))
    }

    /// Closes the mailbox and returns what was left in it (dropped by the
    /// caller, outside the lock).
    pub fn close(&self) -> VecDeque<M> {
        let mut inner = self.inner.lock();
        inner.closed = true;
        std::mem::take(&mut inner.queue)
    }

    /// Items waiting (not yet moved to the owner's private queue).
    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    /// `true` when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
