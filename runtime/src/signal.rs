//! Termination signals (SIGTERM, SIGINT) as events a program's `main` can
//! wait for: what an application runner needs to stop its trees in order
//! (graft-otp's `application::Runner`).
//!
//! A signal handler may only do async-signal-safe work, so the handler
//! writes the signal's number to a pipe (the self-pipe trick) and nothing
//! else; [`TermSignals::wait`] reads it on an ordinary thread. The handler
//! is installed for the whole OS process, so it works whichever thread the
//! kernel picks for delivery (worker threads included), and no signal mask
//! has to be set before threads are started.

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

/// The write end of the pipe, read by the handler (`-1`: none yet).
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);
/// The read end, shared by every [`TermSignals`].
static PIPE_READ: AtomicI32 = AtomicI32::new(-1);
static INSTALL: Mutex<()> = Mutex::new(());

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_WRITE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: `write` is async-signal-safe; `b` lives for the call and
        // the length is 1. A full pipe (signals nobody reads) drops the
        // byte (the fd is non-blocking): one pending byte is enough.
        unsafe {
            libc::write(fd, std::ptr::addr_of!(b).cast(), 1);
        }
    }
}

/// SIGTERM and SIGINT, caught: see the module docs.
///
/// ```no_run
/// let signals = graft::signal::TermSignals::install().unwrap();
/// let sig = signals.wait(); // blocks until SIGTERM or SIGINT
/// assert!(sig == graft::signal::SIGTERM || sig == graft::signal::SIGINT);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TermSignals {
    fd: i32,
}

/// The number of SIGTERM.
pub const SIGTERM: i32 = libc::SIGTERM;
/// The number of SIGINT (Ctrl-C).
pub const SIGINT: i32 = libc::SIGINT;

impl TermSignals {
    /// Installs the handler for SIGTERM and SIGINT (once per OS process;
    /// later calls share it). From now on these signals no longer end the
    /// program by themselves: [`wait`](Self::wait) reports them.
    ///
    /// # Errors
    ///
    /// The OS error when the pipe or the handler cannot be set up.
    pub fn install() -> io::Result<TermSignals> {
        let _g = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        let fd = PIPE_READ.load(Ordering::Acquire);
        if fd >= 0 {
            return Ok(TermSignals { fd });
        }
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // The write end must never block inside the handler.
        // SAFETY: plain fcntl calls on a descriptor we own.
        unsafe {
            let flags = libc::fcntl(fds[1], libc::F_GETFL);
            libc::fcntl(fds[1], libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        PIPE_WRITE.store(fds[1], Ordering::Release);
        PIPE_READ.store(fds[0], Ordering::Release);
        for sig in [libc::SIGTERM, libc::SIGINT] {
            // SAFETY: a zeroed sigaction is a valid "no flags, empty mask"
            // value; the handler only calls async-signal-safe `write`.
            let rc = unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut())
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(TermSignals { fd: fds[0] })
    }

    /// Blocks the calling OS thread until SIGTERM or SIGINT arrives, and
    /// returns its number. Call it from a plain thread, never from a graft
    /// process (it would block that process's worker).
    pub fn wait(&self) -> i32 {
        loop {
            let mut b = 0u8;
            // SAFETY: reads one byte into `b` from the pipe we own.
            let n = unsafe { libc::read(self.fd, std::ptr::addr_of_mut!(b).cast(), 1) };
            if n == 1 {
                return i32::from(b);
            }
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The pipe cannot close (we hold both ends); be safe anyway.
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Delivers `sig` to this OS process as if it came from outside (for
    /// tests and for a program that stops itself the way an operator
    /// would).
    pub fn raise(sig: i32) {
        // SAFETY: `raise` has no memory-safety preconditions.
        unsafe {
            libc::raise(sig);
        }
    }
}
