//! The timer service: one thread that fires deadlines (receive timeouts,
//! `sleep`, `send_after`) and, every tick while a worker is awake, checks
//! for stuck workers (while every worker sleeps it waits for the next
//! deadline or a worker that wakes, `sched/idle.rs`'s `Quiet`).
//!
//! Timers are cancellable by id. A cancelled timer leaves a stale heap entry
//! that is skipped when it comes up; the heap is compacted when stale entries
//! outnumber live ones, so a million short calls with long timeouts do not
//! grow it without bound. The thread is woken only when a new deadline is
//! earlier than the one it sleeps towards.

use crate::loom::{Condvar, Mutex};
use crate::node::NodeShared;
use crate::pid::Pid;
use crate::process::Mail;
use ahash::AHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the monitor looks for workers stuck on one process.
const MONITOR_TICK: Duration = Duration::from_millis(10);

/// The instant `d` from now. A `d` too long for the clock (`Duration::MAX`
/// meaning "forever") saturates about 136 years out, which is never.
pub(crate) fn deadline_after(d: Duration) -> Instant {
    const FOREVER: Duration = Duration::from_secs(1 << 32);
    Instant::now() + d.min(FOREVER)
}

/// What a timer does when it fires.
pub(crate) enum Action {
    /// Wake a parked process (it re-checks its own deadline).
    Wake(Pid),
    /// Deliver mail (`send_after`).
    Deliver(Pid, Mail),
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Wake(p) => write!(f, "Wake({p:?})"),
            Action::Deliver(p, _) => write!(f, "Deliver({p:?})"),
        }
    }
}

/// Names one pending timer, for [`cancel_timer`](crate::cancel_timer).
///
/// ```no_run
/// use graft::*;
/// let t = send_after(std::time::Duration::from_secs(5), self_pid(), 1u32);
/// assert!(cancel_timer(t));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerRef(pub(crate) u64);

#[derive(Debug, Default)]
struct State {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    live: AHashMap<u64, Action>,
    next_id: u64,
    stop: bool,
}

/// The timer service of one node.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    state: Mutex<State>,
    cv: Condvar,
}

impl Timers {
    /// Schedules `action` at `at`.
    pub(crate) fn add(&self, at: Instant, action: Action) -> TimerRef {
        let mut s = self.state.lock();
        let id = s.next_id;
        s.next_id += 1;
        let earliest = s.heap.peek().map(|Reverse((t, _))| *t);
        s.heap.push(Reverse((at, id)));
        s.live.insert(id, action);
        drop(s);
        if earliest.is_none_or(|e| at < e) {
            self.cv.notify_one();
        }
        TimerRef(id)
    }

    /// Cancels a pending timer; `false` if it already fired or was cancelled.
    pub(crate) fn cancel(&self, t: TimerRef) -> bool {
        let mut s = self.state.lock();
        let found = s.live.remove(&t.0).is_some();
        if s.heap.len() > 2 * s.live.len() + 1024 {
            let State { heap, live, .. } = &mut *s;
            heap.retain(|Reverse((_, id))| live.contains_key(id));
        }
        found
    }

    pub(crate) fn stop(&self) {
        self.state.lock().stop = true;
        self.cv.notify_all();
    }

    /// A worker woke while this thread slept without its checks (every
    /// worker slept): it starts them again.
    pub(crate) fn poke(&self) {
        let _g = self.state.lock();
        self.cv.notify_one();
    }

    /// The timer thread's loop.
    pub(crate) fn run(&self, node: &Arc<NodeShared>) {
        let quiet = &node.sched.quiet;
        let mut last_ticks = vec![0u64; node.sched.workers()];
        let mut next_check = Instant::now() + MONITOR_TICK;
        // Since when every worker sleeps, as seen at the checks.
        let mut quiet_since: Option<Instant> = None;
        let mut due = Vec::new();
        let mut s = self.state.lock();
        loop {
            if s.stop {
                return;
            }
            let now = Instant::now();
            while let Some(Reverse((t, id))) = s.heap.peek().copied() {
                if t > now {
                    break;
                }
                s.heap.pop();
                if let Some(a) = s.live.remove(&id) {
                    due.push(a);
                }
            }
            if !due.is_empty() {
                drop(s);
                for a in due.drain(..) {
                    match a {
                        Action::Wake(pid) => node.wake_pid(pid),
                        // To a dead process, the message is dropped here.
                        Action::Deliver(pid, mail) => crate::node::guarded(
                            || node.deliver(pid, mail),
                            || format!("delivering a timed message to {pid}"),
                        ),
                    }
                }
                s = self.state.lock();
                continue;
            }
            if now >= next_check {
                if quiet.any_awake() {
                    quiet_since = None;
                } else if now - *quiet_since.get_or_insert(now) >= super::idle::LINGER {
                    // Every worker has slept for a while: nothing to rescue
                    // and no held frame (a worker flushes after each run).
                    // Sleep until a deadline, a new earlier timer, or a
                    // worker that wakes (`poke`); the lock is held from the
                    // register to the wait (`Quiet`'s protocol).
                    if quiet.register() {
                        s = match s.heap.peek().map(|Reverse((t, _))| *t) {
                            Some(t) => self
                                .cv
                                .wait_timeout(s, t.saturating_duration_since(Instant::now())),
                            None => self.cv.wait(s),
                        };
                    }
                    quiet.unregister();
                    quiet_since = None;
                    next_check = Instant::now() + MONITOR_TICK;
                    continue;
                }
                quiet.round();
                node.sched.rescue_stuck(&mut last_ticks);
                next_check = now + MONITOR_TICK;
                // Frames a long-running process holds (see `dist::queue`).
                drop(s);
                node.dist.flush_all_held();
                s = self.state.lock();
                continue;
            }
            let until = s
                .heap
                .peek()
                .map_or(next_check, |Reverse((t, _))| (*t).min(next_check));
            s = self
                .cv
                .wait_timeout(s, until.saturating_duration_since(Instant::now()));
        }
    }
}
