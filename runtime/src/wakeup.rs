//! Park the caller until woken: the one blocking primitive under channels and
//! futures.
//!
//! Inside a process, [`park`] suspends the process's green thread (its
//! worker runs other processes meanwhile) and an [`Unparker`] schedules it
//! again from any thread, through the process state word
//! (`ProcState::wake`) and the scheduler. Outside a process, [`park`] blocks
//! the OS thread on a parking_lot condition variable.
//!
//! # Protocol (no lost wake-up)
//!
//! * The waiting side registers an [`Unparker`] where wakers will find it
//!   (under the lock that also guards the condition), then calls [`park`],
//!   and re-checks its condition after every return: wake-ups may be
//!   spurious (a stale `Unparker` from an earlier wait, a timer, a message).
//! * The waking side first makes the condition visible (under that lock),
//!   then calls [`Unparker::unpark`], preferably after releasing the lock.
//! * An unpark that lands before the park is not lost: a running process
//!   keeps it in its state word (`RUNNING|NOTIFY`, so the next park returns
//!   at once), a thread keeps it as a token in its parker.
//!
//! A parked process still reacts to exit signals: [`park`] handles pending
//! signals before it suspends and after it resumes, so a killed process
//! unwinds out of the wait (its `Drop`s run) instead of hanging.

use crate::context;
use crate::loom::{thread_local, Condvar, Mutex, Ordering};
use crate::node::NodeShared;
use crate::process::Process;
use crate::sched::timer::Action;
use std::sync::Arc;
use std::time::Instant;

/// Wakes one parked process or thread, from any thread.
///
/// Get one with [`Unparker::current`] before parking, store it where the
/// waking side will find it, then [`park`]. Cloning is cheap (reference
/// counts).
///
/// # Examples
///
/// ```
/// use graft::*;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
///
/// let flag = Arc::new(AtomicBool::new(false));
/// let unparker = Unparker::current(); // this (OS) thread
/// let f = flag.clone();
/// let t = std::thread::spawn(move || {
///     f.store(true, Ordering::Release); // make the condition visible...
///     unparker.unpark();                // ...then wake
/// });
/// while !flag.load(Ordering::Acquire) {
///     park(); // re-check after every return
/// }
/// t.join().unwrap();
/// ```
#[derive(Clone)]
pub struct Unparker {
    target: Target,
}

#[derive(Clone)]
enum Target {
    /// A process: its state word decides whether to schedule it.
    Process {
        proc: Arc<Process>,
        node: Arc<NodeShared>,
    },
    /// An OS thread blocked in [`ThreadParker::park`].
    Thread(Arc<ThreadParker>),
}

impl std::fmt::Debug for Unparker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Target::Process { proc, .. } => write!(f, "Unparker({})", proc.pid),
            Target::Thread(_) => f.write_str("Unparker(thread)"),
        }
    }
}

impl Unparker {
    /// An unparker for the caller: the running process, or else this OS
    /// thread.
    #[inline]
    pub fn current() -> Unparker {
        if let (Some(p), Some(w)) = (context::process(), context::worker()) {
            return Unparker {
                target: Target::Process {
                    proc: arc_of(p),
                    node: w.node.clone(),
                },
            };
        }
        Unparker {
            target: Target::Thread(PARKER.with(|p| p.clone())),
        }
    }

    /// Wakes the target if it is parked (or makes its next [`park`] return
    /// at once if it is not). Make the condition visible first.
    #[inline]
    pub fn unpark(&self) {
        match &self.target {
            Target::Process { proc, node } => node.wake(proc),
            Target::Thread(t) => t.unpark(),
        }
    }

    /// Whether both wake the same process or thread.
    pub fn same_target(&self, other: &Unparker) -> bool {
        match (&self.target, &other.target) {
            (Target::Process { proc: a, .. }, Target::Process { proc: b, .. }) => Arc::ptr_eq(a, b),
            (Target::Thread(a), Target::Thread(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// The `Arc` that owns the running process.
#[inline]
fn arc_of(p: &'static Process) -> Arc<Process> {
    let raw: *const Process = p;
    // SAFETY: every `Process` is created by `Arc::new` in `NodeShared::spawn`
    // and `context::process()` points at the running one, which the process
    // table holds an `Arc` to until it finishes (the strong count is at
    // least 1 now), so `raw` came from `Arc::into_raw`-compatible storage;
    // we add one count for the new `Arc`.
    unsafe {
        Arc::increment_strong_count(raw);
        Arc::from_raw(raw)
    }
}

/// Parks the caller until an [`Unparker`] for it is used (or spuriously).
///
/// Inside a process this suspends its green thread, not the worker; outside,
/// it blocks the OS thread. Always re-check the condition after it returns.
///
/// Inside a process, an exit signal that ends the process while it waits
/// unwinds it out of `park` (its `Drop`s run), as in any other runtime call.
#[inline]
pub fn park() {
    match context::process() {
        Some(me) => park_process(me, None),
        None => PARKER.with(|p| p.clone()).park(None),
    }
}

/// Like [`park`], returning by `deadline` at the latest.
pub fn park_until(deadline: Instant) {
    match context::process() {
        Some(me) => park_process(me, Some(deadline)),
        None => PARKER.with(|p| p.clone()).park(Some(deadline)),
    }
}

/// Handles pending exit signals (which may unwind the process).
#[inline]
fn check_signals(me: &Process) {
    if me.has_signal.load(Ordering::Acquire) {
        // SAFETY: `me` is the running process.
        unsafe { me.drain() };
    }
}

fn park_process(me: &Process, deadline: Option<Instant>) {
    check_signals(me);
    match deadline {
        None => crate::context::park_current(me),
        Some(d) => {
            if Instant::now() >= d {
                return;
            }
            let node = crate::context::node();
            let t = node.add_timer(d, Action::Wake(me.pid));
            crate::context::park_current(me);
            // Re-read the node: the process may run on another worker now.
            crate::context::node().timers.cancel(t);
        }
    }
    check_signals(me);
}

thread_local! {
    /// This OS thread's parker (shared by every wait on the thread).
    static PARKER: Arc<ThreadParker> = Arc::new(ThreadParker::default());
}

/// Blocks an OS thread; `notified` is the wake-up token.
#[derive(Debug, Default)]
struct ThreadParker {
    /// Set by `unpark`, cleared by `park`; under the mutex.
    notified: Mutex<bool>,
    cv: Condvar,
}

impl ThreadParker {
    fn park(&self, deadline: Option<Instant>) {
        let mut n = self.notified.lock();
        if !*n {
            match deadline {
                None => n = self.cv.wait(n),
                Some(d) => {
                    let now = Instant::now();
                    if now < d {
                        n = self.cv.wait_timeout(n, d - now);
                    }
                }
            }
        }
        *n = false;
    }

    fn unpark(&self) {
        let mut n = self.notified.lock();
        *n = true;
        drop(n);
        self.cv.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpark_before_park_is_kept() {
        let u = Unparker::current();
        u.unpark();
        park(); // returns at once: the token was kept
    }

    #[test]
    fn park_until_times_out() {
        park_until(Instant::now() + std::time::Duration::from_millis(5));
    }
}
