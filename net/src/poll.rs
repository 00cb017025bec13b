//! The poller the I/O threads (`io.rs`) wait on: the listener, pending
//! handshakes, and in [`IoMode::Poller`](crate::IoMode) every established
//! connection, whose writable interest senders toggle with
//! [`Poller::interest`]. Sockets registered with a [`Poller`] are owned by
//! a [`Registered`] guard that deregisters them before they are closed
//! (an epoll registration outlives a closed descriptor while a duplicate
//! of it, `try_clone`, is open).
//!
//! On Linux it is epoll itself, level-triggered, with an `eventfd` for
//! [`notify`](Poller::notify): a wait is one `epoll_wait`, and the
//! `eventfd` is read only when it was written. (The `polling` crate, used
//! before, arms a `timerfd` and re-arms its notifier around every wait:
//! four more system calls per wake-up, on every frame's path; see
//! `docs/decisions.md`.) Timeouts are rounded up to the millisecond, so a
//! wait never returns before its deadline. Elsewhere it is the `polling`
//! crate.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Duration;

/// One readiness event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) key: usize,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
}

/// The events of one [`Poller::wait`].
#[derive(Debug)]
pub(crate) struct Events {
    list: Vec<Event>,
    raw: sys::RawEvents,
}

impl Events {
    pub(crate) fn new() -> Events {
        Events {
            list: Vec::with_capacity(sys::CAPACITY),
            raw: sys::RawEvents::new(),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.list.clear();
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.list.iter().copied()
    }
}

/// A shared poller.
#[derive(Debug, Clone)]
pub(crate) struct Poller(Arc<sys::Sys>);

impl Poller {
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller(Arc::new(sys::Sys::new()?)))
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
        // `source` is moved into the returned guard, whose `Drop` and
        // `into_inner` delete it before it can be dropped or handed out.
        self.0.add(source.as_fd().as_raw_fd(), key, writable)?;
        Ok(Registered {
            source: Some(source),
            key,
            poller: self.clone(),
        })
    }

    /// Sets the interest of a registered (level-triggered) `source`:
    /// readable always, writable if `writable`. Callable from any thread;
    /// an error (the source was deregistered meanwhile) is harmless to
    /// ignore.
    pub(crate) fn interest(&self, source: impl AsFd, key: usize, writable: bool) -> io::Result<()> {
        self.0.modify(source.as_fd().as_raw_fd(), key, writable)
    }

    /// Whether sources are level-triggered (the poller transport needs it).
    pub(crate) fn supports_level(&self) -> bool {
        self.0.level()
    }

    /// Waits for events, at most `timeout` (rounded up to a millisecond on
    /// Linux); an interrupted wait is an `Interrupted` error.
    pub(crate) fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        events.list.clear();
        self.0.wait(&mut events.raw, &mut events.list, timeout)?;
        Ok(events.list.len())
    }

    /// The events ready now, without waiting, for a thread that helps the
    /// owner (the one that [`wait`](Poller::wait)s): a
    /// [`notify`](Poller::notify) is left for the owner to see.
    pub(crate) fn peek(&self, events: &mut Events) -> io::Result<usize> {
        events.list.clear();
        self.0.peek(&mut events.raw, &mut events.list)?;
        Ok(events.list.len())
    }

    /// Wakes the thread blocked in [`wait`](Poller::wait), or makes its
    /// next wait return at once.
    pub(crate) fn notify(&self) -> io::Result<()> {
        self.0.notify()
    }
}

/// A source registered with a [`Poller`], deregistered when dropped.
#[derive(Debug)]
pub(crate) struct Registered<S: AsFd> {
    source: Option<S>,
    key: usize,
    poller: Poller,
}

impl<S: AsFd> Registered<S> {
    pub(crate) fn get(&self) -> &S {
        self.source.as_ref().expect("registered source")
    }

    /// Re-arms interest after an event (needed where sources are oneshot).
    pub(crate) fn rearm(&self) -> io::Result<()> {
        self.poller
            .0
            .rearm(self.get().as_fd().as_raw_fd(), self.key)
    }

    /// Deregisters the source and hands it back.
    pub(crate) fn into_inner(mut self) -> S {
        let s = self.source.take().expect("registered source");
        let _ = self.poller.0.delete(s.as_fd().as_raw_fd());
        s
    }
}

impl<S: AsFd> Drop for Registered<S> {
    fn drop(&mut self) {
        if let Some(s) = self.source.take() {
            let _ = self.poller.0.delete(s.as_fd().as_raw_fd());
        }
    }
}

#[cfg(target_os = "linux")]
mod sys {
    //! epoll and an eventfd.

    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::time::Duration;

    use super::Event;

    /// Events taken by one `epoll_wait`.
    pub(super) const CAPACITY: usize = 1024;
    /// The eventfd's key (no socket has it: keys count up from 0).
    const NOTIFY: u64 = u64::MAX;

    const READ: u32 = (libc::EPOLLIN | libc::EPOLLPRI | libc::EPOLLRDHUP) as u32;
    const WRITE: u32 = libc::EPOLLOUT as u32;
    const GONE: u32 = (libc::EPOLLHUP | libc::EPOLLERR) as u32;

    #[derive(Debug)]
    pub(super) struct RawEvents(Vec<libc::epoll_event>);

    impl RawEvents {
        pub(super) fn new() -> RawEvents {
            RawEvents(Vec::with_capacity(CAPACITY))
        }
    }

    #[derive(Debug)]
    pub(super) struct Sys {
        epoll: OwnedFd,
        wake: OwnedFd,
    }

    fn check(r: libc::c_int) -> io::Result<libc::c_int> {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    fn interest(writable: bool) -> u32 {
        if writable {
            READ | WRITE
        } else {
            READ
        }
    }

    impl Sys {
        pub(super) fn new() -> io::Result<Sys> {
            #[allow(unsafe_code)]
            // SAFETY: `epoll_create1` and `eventfd` take no pointers; each
            // returns a new descriptor that nothing else owns, which
            // `OwnedFd` then closes exactly once.
            let (epoll, wake) = unsafe {
                let e = check(libc::epoll_create1(libc::EPOLL_CLOEXEC))?;
                let epoll = OwnedFd::from_raw_fd(e);
                let w = check(libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
                (epoll, OwnedFd::from_raw_fd(w))
            };
            let sys = Sys { epoll, wake };
            sys.ctl(libc::EPOLL_CTL_ADD, sys.wake.as_raw_fd(), NOTIFY, READ)?;
            Ok(sys)
        }

        fn ctl(&self, op: libc::c_int, fd: RawFd, data: u64, events: u32) -> io::Result<()> {
            let mut ev = libc::epoll_event { events, u64: data };
            #[allow(unsafe_code)]
            // SAFETY: `ev` is a valid `epoll_event` for the whole call, and
            // the kernel does not keep the pointer. A descriptor that is not
            // open, or not registered, is an error return, not undefined
            // behaviour.
            check(unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut ev) })?;
            Ok(())
        }

        pub(super) fn add(&self, fd: RawFd, key: usize, writable: bool) -> io::Result<()> {
            self.ctl(libc::EPOLL_CTL_ADD, fd, key as u64, interest(writable))
        }

        pub(super) fn modify(&self, fd: RawFd, key: usize, writable: bool) -> io::Result<()> {
            self.ctl(libc::EPOLL_CTL_MOD, fd, key as u64, interest(writable))
        }

        pub(super) fn delete(&self, fd: RawFd) -> io::Result<()> {
            self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
        }

        /// Level-triggered: nothing to re-arm.
        pub(super) fn rearm(&self, _fd: RawFd, _key: usize) -> io::Result<()> {
            Ok(())
        }

        pub(super) fn level(&self) -> bool {
            true
        }

        pub(super) fn wait(
            &self,
            raw: &mut RawEvents,
            out: &mut Vec<Event>,
            timeout: Option<Duration>,
        ) -> io::Result<()> {
            let ms = match timeout {
                None => -1,
                Some(d) => d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32,
            };
            self.take(raw, out, ms, true)
        }

        /// Level-triggered, so what is reported here is reported again to
        /// the owner's next wait unless it was served meanwhile; the
        /// eventfd is not drained.
        pub(super) fn peek(&self, raw: &mut RawEvents, out: &mut Vec<Event>) -> io::Result<()> {
            self.take(raw, out, 0, false)
        }

        fn take(
            &self,
            raw: &mut RawEvents,
            out: &mut Vec<Event>,
            ms: libc::c_int,
            drain: bool,
        ) -> io::Result<()> {
            let buf = &mut raw.0;
            buf.clear();
            #[allow(unsafe_code)]
            // SAFETY: the buffer has room for `capacity()` events, which is
            // what the kernel is told; it writes at most that many and
            // returns how many, and only those become the vector's length.
            unsafe {
                let cap = buf.capacity().min(i32::MAX as usize) as libc::c_int;
                let n = check(libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    buf.as_mut_ptr(),
                    cap,
                    ms,
                ))?;
                buf.set_len(n as usize);
            }
            for ev in buf.iter() {
                // Copied out: the struct is packed on x86-64.
                let (flags, data) = (ev.events, ev.u64);
                if data == NOTIFY {
                    if drain {
                        self.drain();
                    }
                    continue;
                }
                out.push(Event {
                    key: data as usize,
                    readable: flags & (READ | GONE) != 0,
                    writable: flags & (WRITE | GONE) != 0,
                });
            }
            Ok(())
        }

        pub(super) fn notify(&self) -> io::Result<()> {
            let one: u64 = 1;
            #[allow(unsafe_code)]
            // SAFETY: writes the 8 bytes of a live `u64` to our eventfd.
            let r = unsafe {
                libc::write(
                    self.wake.as_raw_fd(),
                    (&one as *const u64).cast::<libc::c_void>(),
                    8,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                // A full counter: a wake-up is pending anyway.
                if e.kind() != io::ErrorKind::WouldBlock {
                    return Err(e);
                }
            }
            Ok(())
        }

        /// Resets the eventfd after it woke a wait.
        fn drain(&self) {
            let mut n: u64 = 0;
            #[allow(unsafe_code)]
            // SAFETY: reads at most 8 bytes into a live `u64`.
            let _ = unsafe {
                libc::read(
                    self.wake.as_raw_fd(),
                    (&mut n as *mut u64).cast::<libc::c_void>(),
                    8,
                )
            };
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    //! The `polling` crate.

    use std::io;
    use std::os::fd::{BorrowedFd, RawFd};
    use std::time::Duration;

    use super::Event;

    pub(super) const CAPACITY: usize = 1024;

    #[derive(Debug)]
    pub(super) struct RawEvents(polling::Events);

    impl RawEvents {
        pub(super) fn new() -> RawEvents {
            RawEvents(polling::Events::new())
        }
    }

    #[derive(Debug)]
    pub(super) struct Sys {
        poller: polling::Poller,
        mode: polling::PollMode,
    }

    fn borrowed(fd: RawFd) -> BorrowedFd<'static> {
        #[allow(unsafe_code)]
        // SAFETY: used only for the length of one `polling` call, made by
        // a `Registered` guard that owns the open source.
        unsafe {
            BorrowedFd::borrow_raw(fd)
        }
    }

    impl Sys {
        pub(super) fn new() -> io::Result<Sys> {
            let poller = polling::Poller::new()?;
            let mode = if poller.supports_level() {
                polling::PollMode::Level
            } else {
                polling::PollMode::Oneshot
            };
            Ok(Sys { poller, mode })
        }

        pub(super) fn add(&self, fd: RawFd, key: usize, writable: bool) -> io::Result<()> {
            #[allow(unsafe_code)]
            // SAFETY: `polling` requires that a registered source be
            // deleted before it is closed; the `Registered` guard that
            // calls this deletes it before its source can go.
            unsafe {
                self.poller
                    .add_with_mode(fd, polling::Event::new(key, true, writable), self.mode)
            }
        }

        pub(super) fn modify(&self, fd: RawFd, key: usize, writable: bool) -> io::Result<()> {
            self.poller.modify_with_mode(
                borrowed(fd),
                polling::Event::new(key, true, writable),
                self.mode,
            )
        }

        pub(super) fn delete(&self, fd: RawFd) -> io::Result<()> {
            self.poller.delete(borrowed(fd))
        }

        pub(super) fn rearm(&self, fd: RawFd, key: usize) -> io::Result<()> {
            if self.mode == polling::PollMode::Oneshot {
                self.modify(fd, key, false)?;
            }
            Ok(())
        }

        pub(super) fn level(&self) -> bool {
            self.mode == polling::PollMode::Level
        }

        pub(super) fn wait(
            &self,
            raw: &mut RawEvents,
            out: &mut Vec<Event>,
            timeout: Option<Duration>,
        ) -> io::Result<()> {
            raw.0.clear();
            self.poller.wait(&mut raw.0, timeout)?;
            out.extend(raw.0.iter().map(|e| Event {
                key: e.key,
                readable: e.readable,
                writable: e.writable,
            }));
            Ok(())
        }

        /// Helpers are a Linux optimisation: elsewhere (where the owner's
        /// wait may be oneshot) they find nothing, and the owner serves all.
        pub(super) fn peek(&self, _raw: &mut RawEvents, _out: &mut Vec<Event>) -> io::Result<()> {
            Ok(())
        }

        pub(super) fn notify(&self) -> io::Result<()> {
            self.poller.notify()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::Instant;

    #[test]
    fn readiness_notify_and_deregistration() {
        let p = Poller::new().unwrap();
        let mut ev = Events::new();
        // Nothing registered: a wait times out, no sooner than asked.
        let t0 = Instant::now();
        p.wait(&mut ev, Some(Duration::from_micros(1500))).unwrap();
        assert!(t0.elapsed() >= Duration::from_micros(1500));
        assert_eq!(ev.iter().count(), 0);
        // A notify made before the wait is not lost, and is not an event.
        p.notify().unwrap();
        p.notify().unwrap();
        p.wait(&mut ev, Some(Duration::from_secs(10))).unwrap();
        assert_eq!(ev.iter().count(), 0);
        // ... and it is consumed: the next wait times out.
        p.wait(&mut ev, Some(Duration::ZERO)).unwrap();
        assert_eq!(ev.iter().count(), 0);

        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let reg = p.register(b, 7).unwrap();
        // Writable interest only when asked for.
        p.wait(&mut ev, Some(Duration::ZERO)).unwrap();
        assert_eq!(ev.iter().count(), 0);
        p.interest(reg.get(), 7, true).unwrap();
        p.wait(&mut ev, Some(Duration::ZERO)).unwrap();
        let e: Vec<Event> = ev.iter().collect();
        assert_eq!(
            e,
            [Event {
                key: 7,
                readable: false,
                writable: true
            }]
        );
        p.interest(reg.get(), 7, false).unwrap();
        // Level-triggered: unread bytes are reported on every wait.
        a.write_all(b"x").unwrap();
        for _ in 0..2 {
            p.wait(&mut ev, Some(Duration::from_secs(10))).unwrap();
            let e: Vec<Event> = ev.iter().collect();
            assert_eq!(
                e,
                [Event {
                    key: 7,
                    readable: true,
                    writable: false
                }]
            );
        }
        // The peer's close is readable too.
        drop(a);
        p.wait(&mut ev, Some(Duration::from_secs(10))).unwrap();
        assert!(ev.iter().all(|e| e.key == 7 && e.readable));
        // Deregistered: no more events, although the socket still is open.
        let b = reg.into_inner();
        p.wait(&mut ev, Some(Duration::ZERO)).unwrap();
        assert_eq!(ev.iter().count(), 0);
        drop(b);
    }
}
