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

/// What [`Mailbox::drain_or_take_lone`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Drained<M> {
    /// The one item that waited, unflagged, with `out` empty: handed over.
    Lone(M),
    /// Items moved to the back of `out`: how many, and whether any was
    /// pushed flagged.
    Moved(usize, bool),
}

#[derive(Debug)]
struct Inner<M> {
    /// The oldest item, when it came to an empty mailbox: most mailboxes
    /// hold one item at a time, and a queue's buffer would be allocated by
    /// the sender's thread and freed by the owner's (a fresh process's
    /// first message, then its exit): glibc then takes the sender's arena
    /// lock for the free, and in the `spawn` bench's exits that lock was a
    /// fifth of the samples. Held here, the item moves into the owner's
    /// private queue, whose buffer the owner's thread allocates.
    first: Option<M>,
    /// What came after `first` (empty while `first` is `None`).
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
                first: None,
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
        if inner.len() >= cap {
            return Err((m, true));
        }
        inner.push(m);
        inner.flagged |= flag;
        self.nonempty.store(true, Ordering::Release);
        Ok(inner.len())
    }

    /// Appends the items of `batch`, in order and under one lock, as many
    /// as fit under `cap` (counted as [`Mailbox::push_within`] counts);
    /// what does not fit stays in `batch`. `None`, `batch` untouched, if
    /// the owner has exited. Returns the queue's length after, and how many
    /// were appended.
    pub fn push_many_within(&self, batch: &mut Vec<M>, cap: usize) -> Option<(usize, usize)> {
        let mut inner = self.inner.lock();
        if inner.closed {
            return None;
        }
        let room = cap.saturating_sub(inner.len()).min(batch.len());
        for m in batch.drain(..room) {
            inner.push(m);
        }
        if room > 0 {
            self.nonempty.store(true, Ordering::Release);
        }
        Some((inner.len(), room))
    }

    /// Appends `m`, marking the batch as needing attention if `flag`.
    #[inline(always)]
    pub fn push_flagged(&self, m: M, flag: bool) -> Result<(), M> {
        let mut inner = self.inner.lock();
        if inner.closed {
            return Err(m);
        }
        inner.push(m);
        inner.flagged |= flag;
        self.nonempty.store(true, Ordering::Release);
        Ok(())
    }

    /// Moves every queued item to the back of `out`.
    /// Returns how many moved, and whether any was pushed flagged.
    #[inline]
    pub fn drain_into(&self, out: &mut VecDeque<M>) -> (usize, bool) {
        if !self.fresh.load(Ordering::Relaxed) && !self.nonempty.load(Ordering::Acquire) {
            return (0, false);
        }
        let mut inner = self.inner.lock();
        self.drain_locked(&mut inner, out)
    }

    /// As [`Mailbox::drain_into`], except that when `out` is empty and one
    /// unflagged item waits alone, that item is handed back instead of
    /// queued: a receive can match it where it lies. (A ring hop or a
    /// call's reply then touches no line of the private queue's buffer,
    /// and a process that receives once never allocates one.)
    #[inline]
    pub fn drain_or_take_lone(&self, out: &mut VecDeque<M>) -> Drained<M> {
        if !self.fresh.load(Ordering::Relaxed) && !self.nonempty.load(Ordering::Acquire) {
            return Drained::Moved(0, false);
        }
        let mut inner = self.inner.lock();
        if out.is_empty() && inner.queue.is_empty() && !inner.flagged {
            if let Some(m) = inner.first.take() {
                self.fresh.store(false, Ordering::Relaxed);
                self.nonempty.store(false, Ordering::Relaxed);
                return Drained::Lone(m);
            }
        }
        let (n, flagged) = self.drain_locked(&mut inner, out);
        Drained::Moved(n, flagged)
    }

    /// The body of a drain, under the lock: clears the flags the owner's
    /// lock-free check reads (see `nonempty`), then moves everything.
    #[inline(always)]
    fn drain_locked(&self, inner: &mut Inner<M>, out: &mut VecDeque<M>) -> (usize, bool) {
        self.fresh.store(false, Ordering::Relaxed);
        self.nonempty.store(false, Ordering::Relaxed);
        let n = inner.len();
        // `first` is `None` only when nothing waits (see `Inner::push`).
        if let Some(first) = inner.first.take() {
            if inner.queue.is_empty() {
                out.push_back(first);
            } else if out.is_empty() {
                // A batch: its buffer moves whole (O(1)), as without `first`.
                std::mem::swap(out, &mut inner.queue);
                out.push_front(first);
            } else {
                out.push_back(first);
                out.append(&mut inner.queue);
            }
        }
        (n, std::mem::take(&mut inner.flagged))
    }

    /// Closes the mailbox and returns what was left in it (dropped by the
    /// caller, outside the lock).
    pub fn close(&self) -> VecDeque<M> {
        let mut inner = self.inner.lock();
        inner.closed = true;
        let mut left = std::mem::take(&mut inner.queue);
        if let Some(first) = inner.first.take() {
            left.push_front(first);
        }
        left
    }

    /// Items waiting (not yet moved to the owner's private queue).
    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    /// `true` when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<M> Inner<M> {
    /// `first` if nothing waits, else the queue: so `first` is `None` only
    /// while the queue is empty too, and is always the oldest.
    #[inline(always)]
    fn push(&mut self, m: M) {
        if self.first.is_none() && self.queue.is_empty() {
            self.first = Some(m);
        } else {
            self.queue.push_back(m);
        }
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.queue.len() + usize::from(self.first.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch keeps its order behind what waits, stops at the cap (what
    /// is left stays with the caller), and is refused whole once closed.
    #[test]
    fn a_batch_keeps_order_and_stops_at_the_cap() {
        let m = Mailbox::new();
        let mut out = VecDeque::new();
        m.push(0).unwrap();
        let mut batch = vec![1, 2, 3, 4, 5];
        assert_eq!(m.push_many_within(&mut batch, 4), Some((4, 3)));
        assert_eq!(batch, [4, 5]);
        assert_eq!(m.drain_into(&mut out), (4, false));
        assert_eq!(out, [0, 1, 2, 3]);
        assert_eq!(m.push_many_within(&mut batch, usize::MAX), Some((2, 2)));
        assert!(batch.is_empty());
        assert_eq!(m.push_many_within(&mut batch, usize::MAX), Some((2, 0)));
        assert_eq!(m.close(), [4, 5]);
        let mut late = vec![6];
        assert_eq!(m.push_many_within(&mut late, usize::MAX), None);
        assert_eq!(late, [6]);
    }

    /// A lone unflagged item is handed over only while the private queue
    /// is empty; otherwise, or with more waiting, or flagged, the drain
    /// moves everything as `drain_into` does.
    #[test]
    fn a_lone_item_is_handed_over_only_into_an_empty_private_queue() {
        let m = Mailbox::new();
        let mut out = VecDeque::new();
        assert_eq!(m.drain_or_take_lone(&mut out), Drained::Moved(0, false));
        m.push(1).unwrap();
        assert_eq!(m.drain_or_take_lone(&mut out), Drained::Lone(1));
        assert!(out.is_empty() && m.is_empty());
        // Two waiting: both move, in order.
        m.push(2).unwrap();
        m.push(3).unwrap();
        assert_eq!(m.drain_or_take_lone(&mut out), Drained::Moved(2, false));
        assert_eq!(out, [2, 3]);
        // One waiting, but the private queue holds older mail: it queues
        // behind it.
        m.push(4).unwrap();
        assert_eq!(m.drain_or_take_lone(&mut out), Drained::Moved(1, false));
        assert_eq!(out, [2, 3, 4]);
        // A flagged one needs the owner's attention: it is moved.
        out.clear();
        m.push_flagged(5, true).unwrap();
        assert_eq!(m.drain_or_take_lone(&mut out), Drained::Moved(1, true));
        assert_eq!(out, [5]);
        // Nothing came since: the lock-free check answers.
        out.clear();
        assert_eq!(m.drain_or_take_lone(&mut out), Drained::Moved(0, false));
    }

    /// Order holds across the inline first item, the queue behind it, a
    /// private queue that already holds items, and close; the cap counts
    /// the first item.
    #[test]
    fn first_item_then_queue_keep_order_and_count() {
        let m = Mailbox::new();
        let mut out = VecDeque::new();
        m.push(1).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m.drain_into(&mut out), (1, false));
        assert_eq!(out, [1]);
        // A batch behind the first item, into a private queue with one.
        for i in 2..=5 {
            m.push(i).unwrap();
        }
        assert_eq!(m.drain_into(&mut out), (4, false));
        assert_eq!(out, [1, 2, 3, 4, 5]);
        // A batch into an empty private queue (the buffer moves whole).
        out.clear();
        for i in 6..=8 {
            m.push(i).unwrap();
        }
        assert_eq!(m.drain_into(&mut out), (3, false));
        assert_eq!(out, [6, 7, 8]);
        // The cap counts the first item.
        m.push_within(9, false, 2).unwrap();
        assert_eq!(m.push_within(10, false, 2), Ok(2));
        assert_eq!(m.push_within(11, false, 2), Err((11, true)));
        assert_eq!(m.close(), [9, 10]);
        assert_eq!(m.push(12), Err(12));
        assert_eq!(m.drain_into(&mut out), (0, false));
    }
}
