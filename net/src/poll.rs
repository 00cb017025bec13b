//! A small, safe layer over the `polling` crate: sockets registered with a
//! [`Poller`] are owned by a [`Registered`] guard that deregisters them
//! before they are closed, which is the one condition `polling`'s `add`
//! leaves to its caller. Level-triggered where the platform supports it.
//!
//! Used by the I/O threads (`io.rs`): the listener, pending handshakes,
//! and in [`IoMode::Poller`](crate::IoMode) every established connection,
//! whose writable interest senders toggle with [`Poller::interest`].

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Duration;

pub(crate) use polling::{Event, Events};

/// A shared poller.
#[derive(Debug, Clone)]
pub(crate) struct Poller(Arc<polling::Poller>);

impl Poller {
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller(Arc::new(polling::Poller::new()?)))
    }

    /// Registers `source` for readability under `key`; it stays registered
    /// until the guard is dropped or [`into_inner`](Registered::into_inner).
    pub(crate) fn register<S: AsFd>(&self, source: S, key: usize) -> io::Result<Registered<S>> {
        self.register_with(source, key, false)
    }

    /// As [`register`](Poller::register), also for writability if
    /// `writable`.
    pub(crate) fn register_with<S: AsFd>(
        &self,
        source: S,
        key: usize,
        writable: bool,
    ) -> io::Result<Registered<S>> {
        let mode = if self.0.supports_level() {
            polling::PollMode::Level
        } else {
            polling::PollMode::Oneshot
        };
        // SAFETY: `polling` requires that a registered source be deleted
        // from the poller before it is closed. `source` is moved into the
        // returned guard, whose `Drop` and `into_inner` delete it before
        // the source itself can be dropped or handed out.
        #[allow(unsafe_code)]
        unsafe {
            self.0.add_with_mode(
                source.as_fd().as_raw_fd(),
                Event::new(key, true, writable),
                mode,
            )?
        };
        Ok(Registered {
            source: Some(source),
            key,
            mode,
            poller: self.clone(),
        })
    }

    /// Sets the interest of a registered (level-triggered) `source`:
    /// readable always, writable if `writable`. Callable from any thread;
    /// an error (the source was deregistered meanwhile) is harmless to
    /// ignore.
    pub(crate) fn interest(&self, source: impl AsFd, key: usize, writable: bool) -> io::Result<()> {
        self.0.modify_with_mode(
            source,
            Event::new(key, true, writable),
            polling::PollMode::Level,
        )
    }

    /// Whether sources are level-triggered (the poller transport needs it).
    pub(crate) fn supports_level(&self) -> bool {
        self.0.supports_level()
    }

    /// Waits for events, at most `timeout`.
    pub(crate) fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        self.0.wait(events, timeout)
    }

    /// Wakes a thread blocked in [`wait`](Poller::wait).
    pub(crate) fn notify(&self) -> io::Result<()> {
        self.0.notify()
    }
}

/// A source registered with a [`Poller`], deregistered when dropped.
#[derive(Debug)]
pub(crate) struct Registered<S: AsFd> {
    source: Option<S>,
    key: usize,
    mode: polling::PollMode,
    poller: Poller,
}

impl<S: AsFd> Registered<S> {
    pub(crate) fn get(&self) -> &S {
        self.source.as_ref().expect("registered source")
    }

    /// Re-arms interest after an event (needed in oneshot mode only).
    pub(crate) fn rearm(&self) -> io::Result<()> {
        if self.mode == polling::PollMode::Oneshot {
            self.poller
                .0
                .modify_with_mode(self.get(), Event::readable(self.key), self.mode)?;
        }
        Ok(())
    }

    /// Deregisters the source and hands it back.
    pub(crate) fn into_inner(mut self) -> S {
        let s = self.source.take().expect("registered source");
        let _ = self.poller.0.delete(&s);
        s
    }
}

impl<S: AsFd> Drop for Registered<S> {
    fn drop(&mut self) {
        if let Some(s) = self.source.take() {
            let _ = self.poller.0.delete(&s);
        }
    }
}
