//! Receiving from several ports at once, fairly.
//!
//! A select polls its ports starting at a rotating index, so a busy port
//! cannot starve the others. Finding them all empty, it registers one
//! [`Unparker`] as the receive waiter of every port (checking each one again
//! under its lock), parks, and polls again; on the way out it clears its
//! registrations.

use super::{ReceivePort, RecvError, RecvTimeoutError, TryRecvError};
use crate::wakeup::{park, park_until, Unparker};
use std::borrow::Borrow;
use std::cell::Cell;
use std::fmt;
use std::time::{Duration, Instant};

/// Waits for a message on any of `ports`; returns the index of the port it
/// came from and the message.
///
/// Fair: each call starts polling at a different port (rotating), so no
/// port starves. For strict round-robin over a fixed set, use
/// [`merge_ports`].
///
/// # Errors
///
/// [`RecvError`] once every port is empty and disconnected (at once for an
/// empty slice).
///
/// # Examples
///
/// ```
/// use graft::*;
/// let (tx_a, rx_a) = channel::<u8>();
/// let (tx_b, rx_b) = channel::<u8>();
/// tx_b.send(2).unwrap();
/// assert_eq!(select(&[&rx_a, &rx_b]), Ok((1, 2)));
/// drop((tx_a, tx_b));
/// assert!(select(&[&rx_a, &rx_b]).is_err());
/// ```
pub fn select<T>(ports: &[&ReceivePort<T>]) -> Result<(usize, T), RecvError> {
    select_inner(ports, next_start(), None).map_err(|_| RecvError)
}

/// Like [`select`], waiting at most `timeout`.
///
/// # Errors
///
/// [`RecvTimeoutError::Timeout`], or [`RecvTimeoutError::Disconnected`] once
/// every port is empty and disconnected.
pub fn select_timeout<T>(
    ports: &[&ReceivePort<T>],
    timeout: Duration,
) -> Result<(usize, T), RecvTimeoutError> {
    select_inner(
        ports,
        next_start(),
        Some(crate::sched::timer::deadline_after(timeout)),
    )
}

/// A rotating start index per thread (any rotation is fair over time).
fn next_start() -> usize {
    thread_local! {
        static NEXT: Cell<usize> = const { Cell::new(0) };
    }
    NEXT.with(|c| {
        let n = c.get();
        c.set(n.wrapping_add(1));
        n
    })
}

fn select_inner<T, P: Borrow<ReceivePort<T>>>(
    ports: &[P],
    start: usize,
    deadline: Option<Instant>,
) -> Result<(usize, T), RecvTimeoutError> {
    let n = ports.len();
    let mut registered = false;
    let out = loop {
        let mut live = false;
        let mut hit = None;
        for k in 0..n {
            let i = (start + k) % n;
            match ports[i].borrow().chan.try_recv() {
                Ok(v) => {
                    hit = Some((i, v));
                    break;
                }
                Err(TryRecvError::Empty) => live = true,
                Err(TryRecvError::Disconnected) => {}
            }
        }
        if let Some(hit) = hit {
            break Ok(hit);
        }
        if !live {
            break Err(RecvTimeoutError::Disconnected);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break Err(RecvTimeoutError::Timeout);
        }
        // Register everywhere, re-checking each port under its lock.
        let me = Unparker::current();
        let mut ready = false;
        let mut waiting = false;
        for p in ports {
            let mut st = p.borrow().chan.lock();
            if !st.queue.is_empty() {
                ready = true;
                break;
            }
            if st.senders == 0 {
                // Empty and disconnected for good: nothing to wait for here
                // (the poll above already saw a live port).
                continue;
            }
            let stale = st.recv_waiter.replace(me.clone());
            drop(st);
            drop(stale); // outside the lock (see `wake_all`)
            waiting = true;
        }
        registered = true;
        // Not waiting anywhere: every port disconnected meanwhile; poll again.
        if !ready && waiting {
            match deadline {
                None => park(),
                Some(d) => park_until(d),
            }
        }
    };
    if registered {
        for p in ports {
            p.borrow().chan.lock().recv_waiter = None;
        }
    }
    out
}

/// Several ports of one type read as one, in strict round-robin: after a
/// message from port `i`, the next receive looks at port `i + 1` first.
///
/// # Examples
///
/// ```
/// use graft::*;
/// let (a, ra) = channel();
/// let (b, rb) = channel();
/// for i in 0..3 { a.send(("a", i)).unwrap(); b.send(("b", i)).unwrap(); }
/// let merged = merge_ports(vec![ra, rb]);
/// let firsts: Vec<_> = merged.try_iter().take(4).map(|(p, _)| p).collect();
/// assert_eq!(firsts, ["a", "b", "a", "b"]); // neither port starves
/// ```
pub fn merge_ports<T>(ports: Vec<ReceivePort<T>>) -> MergedPorts<T> {
    MergedPorts {
        ports,
        next: Cell::new(0),
    }
}

/// Ports merged by [`merge_ports`].
pub struct MergedPorts<T> {
    ports: Vec<ReceivePort<T>>,
    next: Cell<usize>,
}

impl<T> MergedPorts<T> {
    fn recv_inner(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        let (i, v) = select_inner(&self.ports, self.next.get(), deadline)?;
        self.next.set(i + 1);
        Ok(v)
    }

    /// The next message from any port, waiting for one.
    ///
    /// # Errors
    ///
    /// [`RecvError`] once every port is empty and disconnected.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.recv_inner(None).map_err(|_| RecvError)
    }

    /// Like [`recv`](MergedPorts::recv), waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError`].
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_inner(Some(crate::sched::timer::deadline_after(timeout)))
    }

    /// A message from any port if one is queued.
    ///
    /// # Errors
    ///
    /// [`TryRecvError`].
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let n = self.ports.len();
        let start = self.next.get();
        let mut live = false;
        for k in 0..n {
            let i = (start + k) % n;
            match self.ports[i].try_recv() {
                Ok(v) => {
                    self.next.set(i + 1);
                    return Ok(v);
                }
                Err(TryRecvError::Empty) => live = true,
                Err(TryRecvError::Disconnected) => {}
            }
        }
        Err(if live {
            TryRecvError::Empty
        } else {
            TryRecvError::Disconnected
        })
    }

    /// A blocking iterator; ends when every port is empty and disconnected.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(|| self.recv().ok())
    }

    /// An iterator over the messages queued now.
    pub fn try_iter(&self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(|| self.try_recv().ok())
    }

    /// The ports back.
    pub fn into_ports(self) -> Vec<ReceivePort<T>> {
        self.ports
    }
}

impl<T> fmt::Debug for MergedPorts<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MergedPorts")
            .field("ports", &self.ports.len())
            .finish_non_exhaustive()
    }
}
