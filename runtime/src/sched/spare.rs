//! Spare workers: the threads the system monitor (`sysmon.rs`) puts to work
//! while a worker is held by one process for too long.
//!
//! A spare is a worker thread with its own run queue, LIFO slot and idle
//! parker (slots `workers..workers + max_spare_workers` of the scheduler),
//! started on first use. It serves one stuck worker `i` at a time: it takes
//! what waits in `i`'s LIFO slot and steals `i`'s queue (as every worker
//! may), and runs whatever else is runnable, so the node has `workers`
//! threads running processes again. Pinned processes stay with their own
//! worker.
//!
//! Each spare has a state word, written by the monitor and by the spare:
//!
//! | state      | meaning                          | who moves it on       |
//! |------------|----------------------------------|-----------------------|
//! | `RETIRED`  | parked on its own parker, idle   | monitor: `activate(i)` |
//! | `i`        | serving stuck worker `i`         | monitor: `ask_retire(i)` |
//! | `RETIRING` | asked to stop serving            | spare: `retired()`    |
//! | `STOPPED`  | the node stops                   | nobody                |
//!
//! A spare leaves `RETIRING` for `RETIRED` only between processes and after
//! moving what its own queues hold to the injector, so no runnable process
//! stays behind in the queues of a parked thread. `activate` is a
//! compare-and-swap from `RETIRED` followed by an unpark of the spare's
//! token parker, so an activation that races with the spare going to sleep
//! is never lost (the loom model in `loom-tests/tests/spare.rs` checks
//! this, and that `stop` always ends the spare).

use crate::loom::{AtomicUsize, Ordering};
use crate::sched::idle::Parker;

/// Parked and idle.
const RETIRED: usize = usize::MAX;
/// Asked to stop serving; moves to `RETIRED` once its queues are empty.
const RETIRING: usize = usize::MAX - 1;
/// The node stops.
const STOPPED: usize = usize::MAX - 2;

/// One spare worker's state word and parker (see the module docs).
#[derive(Debug)]
pub struct Spare {
    state: AtomicUsize,
    parker: Parker,
}

impl Default for Spare {
    fn default() -> Self {
        Spare::new()
    }
}

impl Spare {
    /// A retired spare.
    pub fn new() -> Spare {
        Spare {
            state: AtomicUsize::new(RETIRED),
            parker: Parker::default(),
        }
    }

    /// Monitor: puts this spare to serve worker `i`; `false` if it was not
    /// retired.
    pub fn activate(&self, i: usize) -> bool {
        // AcqRel: pairs with the Release of `retired`, so the spare's last
        // queue flush happened before it serves again.
        let ok = self
            .state
            .compare_exchange(RETIRED, i, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if ok {
            self.parker.unpark();
        }
        ok
    }

    /// Monitor: asks the spare serving `i` to stop; `false` if it does not
    /// serve `i` (any more).
    pub fn ask_retire(&self, i: usize) -> bool {
        self.state
            .compare_exchange(i, RETIRING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether this spare still serves `i` (checked by the spare between
    /// processes).
    #[inline]
    pub fn serves(&self, i: usize) -> bool {
        self.state.load(Ordering::Acquire) == i
    }

    /// Whether the spare is parked and free to activate.
    pub fn is_retired(&self) -> bool {
        self.state.load(Ordering::Acquire) == RETIRED
    }

    /// The worker this spare serves, if any.
    pub fn serving(&self) -> Option<usize> {
        match self.state.load(Ordering::Acquire) {
            RETIRED | RETIRING | STOPPED => None,
            i => Some(i),
        }
    }

    /// Spare: waits until activated; the worker to serve, or `None` when the
    /// node stops.
    pub fn wait_active(&self) -> Option<usize> {
        loop {
            match self.state.load(Ordering::Acquire) {
                STOPPED => return None,
                RETIRED | RETIRING => self.parker.park(),
                i => return Some(i),
            }
        }
    }

    /// Spare: it stopped serving and its queues are empty. (Stays
    /// `STOPPED` if the node stops meanwhile; a spare asked to retire that
    /// was re-activated in between cannot happen: only `RETIRED` activates.)
    pub fn retired(&self) {
        // Release: the queue flush before this is seen by the next activator.
        let _ = self
            .state
            .compare_exchange(RETIRING, RETIRED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The node stops: the spare ends (woken if parked).
    pub fn stop(&self) {
        // A swap, not a store: a read-modify-write, ordered against the
        // spare's `retired` compare-and-swap, so a retirement racing the
        // stop cannot leave the spare parked as `RETIRED` (the loom model
        // found that with a plain store).
        self.state.swap(STOPPED, Ordering::AcqRel);
        self.parker.unpark();
    }
}
