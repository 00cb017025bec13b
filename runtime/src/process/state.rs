//! The process state word: who may run a process, and the wake protocol.
//!
//! | value            | meaning                                             |
//! |------------------|-----------------------------------------------------|
//! | `WAITING`        | parked; in no run queue; a waker must schedule it   |
//! | `SCHEDULED`      | in a run queue (exactly once)                       |
//! | `RUNNING`        | a worker is executing it                            |
//! | `RUNNING|NOTIFY` | woken while running: the worker must not park it    |
//! | `DONE`           | exited; wakes are ignored                           |
//!
//! Protocol (no lost wake-up, no double schedule):
//! * A waker first makes its cause visible (pushes mail, sets a flag, under
//!   the mailbox lock or with release ordering), then calls [`ProcState::wake`].
//!   Only the waker that moves `WAITING -> SCHEDULED` pushes the process to a
//!   run queue.
//! * A running process that finds nothing to do suspends; *after* its context
//!   is saved, the worker calls [`ProcState::park`]. If a wake came in between
//!   (`NOTIFY`), `park` fails and the worker resumes it at once, so it
//!   re-checks its mailbox. The move to `WAITING` happens only once the stack
//!   is no longer in use, so a waker on another thread can never resume a
//!   process whose context is still being saved.
//!
//! Orderings: `wake` is AcqRel so the waker's mailbox push happens-before the
//! process's re-check; `park`'s successful CAS is Release so the saved context
//! happens-before the next worker's `start` (Acquire).

use crate::loom::{AtomicU32, Ordering};

const WAITING: u32 = 0;
const SCHEDULED: u32 = 1;
const RUNNING: u32 = 2;
const NOTIFY: u32 = 4;
const DONE: u32 = 8;

/// What a process is doing, as seen from outside (for `process_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, graft_derive::Mobile)]
pub enum Status {
    /// Parked, waiting for a message, timer or signal.
    Waiting,
    /// In a run queue.
    Runnable,
    /// On a worker now.
    Running,
    /// Exited.
    Exited,
}

/// The state word of one process. See the module docs for the protocol.
#[derive(Debug)]
pub struct ProcState(AtomicU32);

impl Default for ProcState {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcState {
    /// A new process is `SCHEDULED`: its spawner pushes it to a run queue.
    pub fn new() -> ProcState {
        ProcState(AtomicU32::new(SCHEDULED))
    }

    /// Makes a parked process runnable. Returns `true` iff the caller must
    /// push it to a run queue (exactly one waker gets `true` per park).
    #[inline]
    pub fn wake(&self) -> bool {
        let mut cur = self.0.load(Ordering::Acquire);
        loop {
            let next = match cur {
                WAITING => SCHEDULED,
                RUNNING => RUNNING | NOTIFY,
                _ => return false, // already scheduled, notified or done
            };
            match self
                .0
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return next == SCHEDULED,
                Err(actual) => cur = actual,
            }
        }
    }

    /// A worker took the process from a run queue and is about to resume it.
    ///
    /// A plain store suffices: in `SCHEDULED` no waker writes the word (they
    /// see "already scheduled" and leave), so only the worker that popped
    /// the process writes here.
    #[inline]
    pub fn start(&self) {
        debug_assert_eq!(
            self.0.load(Ordering::Relaxed),
            SCHEDULED,
            "a process ran without being scheduled"
        );
        self.0.store(RUNNING, Ordering::Relaxed);
    }

    /// After the process suspended to wait: park it. Returns `false` if a wake
    /// arrived while it was running; it is then still `RUNNING` and the worker
    /// must resume it again.
    #[inline]
    pub fn park(&self) -> bool {
        match self
            .0
            .compare_exchange(RUNNING, WAITING, Ordering::Release, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(_) => {
                // RUNNING|NOTIFY: consume the notification and keep running.
                self.0.store(RUNNING, Ordering::Relaxed);
                false
            }
        }
    }

    /// After the process suspended to yield: it goes back to a run queue.
    #[inline]
    pub fn requeue(&self) {
        self.0.store(SCHEDULED, Ordering::Release);
    }

    /// The process exited; later wakes do nothing.
    pub fn finish(&self) {
        self.0.store(DONE, Ordering::Release);
    }

    /// The status, for observers (racy by nature).
    pub fn status(&self) -> Status {
        match self.0.load(Ordering::Relaxed) {
            WAITING => Status::Waiting,
            SCHEDULED => Status::Runnable,
            DONE => Status::Exited,
            _ => Status::Running,
        }
    }
}
