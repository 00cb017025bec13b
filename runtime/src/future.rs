//! One-shot futures: a [`Promise`] is fulfilled once; every clone of its
//! [`Future`] sees the value, before or after fulfilment, for as long as it
//! lives.
//!
//! Protocol: the value is written once into a `OnceLock`, under the lock that
//! also guards the waiter list; the promise then takes the waiters and
//! unparks them. A waiter checks the value and registers its [`Unparker`]
//! under that lock, then parks and checks again (see `wakeup.rs`). A promise
//! dropped unfulfilled stores "broken" instead, waking waiters with
//! [`PromiseDropped`].

use crate::loom::Mutex;
use crate::wakeup::{park, park_until, Unparker};
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

struct Shared<T> {
    /// Set once: `Ok` by `fulfil`, `Err` by a promise dropped unfulfilled.
    value: OnceLock<Result<T, PromiseDropped>>,
    /// Parked waiters: (ticket, unparker); taken by whoever sets `value`.
    waiters: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    list: Vec<(u64, Unparker)>,
    next: u64,
}

/// The writing end of a one-shot future: fulfil it once, or drop it (its
/// waiters then get [`PromiseDropped`]).
pub struct Promise<T> {
    shared: Arc<Shared<T>>,
}

/// The reading end of a one-shot future. Clone it to wait in several
/// places; every clone sees the same value, for as long as it lives.
pub struct Future<T> {
    shared: Arc<Shared<T>>,
}

/// A new unfulfilled promise and its future.
///
/// # Examples
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let v = node.run(|| {
///     let (p, f) = promise::<u64>();
///     let f2 = f.clone();
///     let waiter = spawn(move || assert_eq!(*f2.wait().unwrap(), 42));
///     monitor(waiter);
///     p.fulfil(42);
///     assert!(matches!(expect::<ProcessDied>().reason, ExitReason::Normal));
///     *f.wait().unwrap() // still there after fulfilment
/// }).unwrap();
/// assert_eq!(v, 42);
/// node.shutdown();
/// ```
pub fn promise<T>() -> (Promise<T>, Future<T>) {
    let shared = Arc::new(Shared {
        value: OnceLock::new(),
        waiters: Mutex::new(Waiters::default()),
    });
    (
        Promise {
            shared: shared.clone(),
        },
        Future { shared },
    )
}

impl<T> Shared<T> {
    /// Stores the outcome (once) and wakes every waiter.
    fn complete(&self, outcome: Result<T, PromiseDropped>) {
        let mut w = self.waiters.lock();
        let _ = self.value.set(outcome);
        let list = std::mem::take(&mut w.list);
        drop(w);
        for (_, u) in list {
            u.unpark();
        }
    }
}

impl<T> Promise<T> {
    /// Fulfils the promise with `value`, waking every waiter.
    pub fn fulfil(self, value: T) {
        self.shared.complete(Ok(value));
        // Drop sees the value set and does nothing.
    }

    /// A future for this promise (one more reader).
    pub fn future(&self) -> Future<T> {
        Future {
            shared: self.shared.clone(),
        }
    }

    /// Whether every [`Future`] is gone (nobody would see a value).
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }
}

impl<T> Drop for Promise<T> {
    fn drop(&mut self) {
        if self.shared.value.get().is_none() {
            self.shared.complete(Err(PromiseDropped));
        }
    }
}

impl<T> Future<T> {
    /// Waits for the value and returns a reference to it (the future keeps
    /// it). Inside a process the wait parks its green thread; outside, it
    /// blocks the thread.
    ///
    /// # Errors
    ///
    /// [`PromiseDropped`] if the promise was dropped unfulfilled.
    pub fn wait(&self) -> Result<&T, PromiseDropped> {
        match self.wait_until(None) {
            Ok(v) => Ok(v),
            Err(_) => Err(PromiseDropped),
        }
    }

    /// Like [`wait`](Future::wait), waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`WaitTimeoutError::Timeout`] or [`WaitTimeoutError::PromiseDropped`].
    pub fn wait_timeout(&self, timeout: Duration) -> Result<&T, WaitTimeoutError> {
        self.wait_until(Some(crate::sched::timer::deadline_after(timeout)))
    }

    /// Like [`wait`](Future::wait), waiting until `deadline` at most.
    ///
    /// # Errors
    ///
    /// [`WaitTimeoutError::Timeout`] or [`WaitTimeoutError::PromiseDropped`].
    pub fn wait_deadline(&self, deadline: Instant) -> Result<&T, WaitTimeoutError> {
        self.wait_until(Some(deadline))
    }

    /// The value if the promise was fulfilled; `Some(Err(_))` if it was
    /// dropped; `None` while pending. Never waits.
    pub fn try_get(&self) -> Option<Result<&T, PromiseDropped>> {
        self.shared.value.get().map(|r| r.as_ref().map_err(|e| *e))
    }

    /// Whether the outcome is known (fulfilled or dropped).
    pub fn is_ready(&self) -> bool {
        self.shared.value.get().is_some()
    }

    /// Waits, then hands out the value (cloned if other futures still hold
    /// it).
    ///
    /// # Errors
    ///
    /// [`PromiseDropped`].
    pub fn into_value(self) -> Result<T, PromiseDropped>
    where
        T: Clone,
    {
        self.wait()?;
        match Arc::try_unwrap(self.shared) {
            Ok(s) => s.value.into_inner().expect("waited above"),
            Err(shared) => shared.value.get().expect("waited above").clone(),
        }
    }

    fn wait_until(&self, deadline: Option<Instant>) -> Result<&T, WaitTimeoutError> {
        let s = &*self.shared;
        let mut ticket = None;
        loop {
            if let Some(r) = s.value.get() {
                if let Some(t) = ticket {
                    s.waiters.lock().list.retain(|(w, _)| *w != t);
                }
                return r.as_ref().map_err(|_| WaitTimeoutError::PromiseDropped);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if let Some(t) = ticket {
                    s.waiters.lock().list.retain(|(w, _)| *w != t);
                }
                return Err(WaitTimeoutError::Timeout);
            }
            {
                let mut w = s.waiters.lock();
                if s.value.get().is_some() {
                    continue;
                }
                let t = *ticket.get_or_insert_with(|| {
                    w.next += 1;
                    w.next
                });
                if !w.list.iter().any(|(x, _)| *x == t) {
                    w.list.push((t, Unparker::current()));
                }
            }
            match deadline {
                None => park(),
                Some(d) => park_until(d),
            }
        }
    }
}

/// A future is a local message: hand it to another process on this node.
/// (It cannot travel to another node.)
impl<T: Send + Sync + 'static> crate::Message for Future<T> {}

/// A promise is a local message: hand it to the process that will fulfil
/// it. (It cannot travel to another node.)
impl<T: Send + Sync + 'static> crate::Message for Promise<T> {}

impl<T> Clone for Future<T> {
    fn clone(&self) -> Self {
        Future {
            shared: self.shared.clone(),
        }
    }
}

impl<T> fmt::Debug for Promise<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Promise").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Future<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.shared.value.get() {
            None => "pending",
            Some(Ok(_)) => "fulfilled",
            Some(Err(_)) => "broken",
        };
        f.debug_struct("Future")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// The [`Promise`] was dropped without being fulfilled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, crate::Mobile)]
pub struct PromiseDropped;

impl fmt::Display for PromiseDropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the promise was dropped without a value")
    }
}

impl std::error::Error for PromiseDropped {}

/// [`Future::wait_timeout`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, crate::Mobile)]
pub enum WaitTimeoutError {
    /// No value before the deadline.
    Timeout,
    /// The promise was dropped without a value.
    PromiseDropped,
}

impl From<PromiseDropped> for WaitTimeoutError {
    fn from(_: PromiseDropped) -> Self {
        WaitTimeoutError::PromiseDropped
    }
}

impl fmt::Display for WaitTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitTimeoutError::Timeout => f.write_str("timed out waiting for a future"),
            WaitTimeoutError::PromiseDropped => PromiseDropped.fmt(f),
        }
    }
}

impl std::error::Error for WaitTimeoutError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_wait_before_and_after() {
        let (p, f) = promise::<String>();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let f = f.clone();
                std::thread::spawn(move || f.wait().unwrap().clone())
            })
            .collect();
        p.fulfil("v".into());
        for w in waiters {
            assert_eq!(w.join().unwrap(), "v");
        }
        assert_eq!(f.wait().unwrap(), "v");
        assert_eq!(f.into_value().unwrap(), "v");
    }

    #[test]
    fn dropped_promise_and_timeout() {
        let (p, f) = promise::<u8>();
        assert_eq!(
            f.wait_timeout(Duration::from_millis(5)),
            Err(WaitTimeoutError::Timeout)
        );
        let t = {
            let f = f.clone();
            std::thread::spawn(move || f.wait().copied())
        };
        drop(p);
        assert_eq!(t.join().unwrap(), Err(PromiseDropped));
        assert_eq!(f.try_get(), Some(Err(PromiseDropped)));
    }
}
