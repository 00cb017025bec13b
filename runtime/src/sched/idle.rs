//! Idle workers: how they go to sleep and how work wakes them.
//!
//! Waking a sleeping OS thread costs ~8 µs here, so workers spin briefly
//! before they sleep (in `worker.rs`) and producers wake at most one sleeper
//! per push, only when some worker sleeps.
//!
//! Protocol (no lost wake-up):
//! * producer: push work to a shared queue, then [`Idle::notify_one`]:
//!   `fence(SeqCst)`, read `sleeping`; if non-zero, pop a sleeper and unpark it.
//! * worker: [`Idle::register`] (`sleeping += 1`, SeqCst, then `fence`), then
//!   look at every shared queue once more; only if all are empty
//!   [`Idle::park`]; then [`Idle::unregister`].
//!
//! The two SeqCst fences order "push; read sleeping" against
//! "sleeping += 1; read queues": at least one side sees the other, so either
//! the producer wakes the worker or the worker finds the work (Dekker).
//! A parker is a token: an unpark before the park makes the park return at
//! once, so a wake that races with registration is never lost.

use crate::loom::{fence, AtomicBool, AtomicUsize, Condvar, Mutex, Ordering};

/// How long every worker must have slept before a housekeeping thread stops
/// its periodic looks (so a node that runs a little now and then does not
/// make them sleep and wake at each run).
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_millis(100);

/// Parks and unparks one worker thread (a token, like `std::thread::park`).
#[derive(Debug, Default)]
pub struct Parker {
    notified: Mutex<bool>,
    cv: Condvar,
}

impl Parker {
    /// Blocks until the token is set, then clears it.
    pub fn park(&self) {
        let mut n = self.notified.lock();
        while !*n {
            n = self.cv.wait(n);
        }
        *n = false;
    }

    /// Sets the token and wakes the parked thread, if any.
    pub fn unpark(&self) {
        let mut n = self.notified.lock();
        *n = true;
        drop(n);
        self.cv.notify_one();
    }
}

/// The set of sleeping workers of one scheduler.
#[derive(Debug)]
pub struct Idle {
    /// Indexes of registered sleepers; written under the lock.
    sleepers: Mutex<Vec<usize>>,
    /// `sleepers.len()`, readable without the lock by producers.
    sleeping: AtomicUsize,
    parkers: Vec<Parker>,
}

impl Idle {
    /// For `workers` workers, all awake.
    pub fn new(workers: usize) -> Idle {
        Idle {
            sleepers: Mutex::new(Vec::with_capacity(workers)),
            sleeping: AtomicUsize::new(0),
            parkers: (0..workers).map(|_| Parker::default()).collect(),
        }
    }

    /// After pushing shared work: wake one sleeper, if there is one.
    #[inline]
    pub fn notify_one(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.notify_one_slow();
    }

    #[cold]
    fn notify_one_slow(&self) {
        let woken = {
            let mut s = self.sleepers.lock();
            let w = s.pop();
            if w.is_some() {
                self.sleeping.fetch_sub(1, Ordering::SeqCst);
            }
            w
        };
        if let Some(w) = woken {
            self.parkers[w].unpark();
        }
    }

    /// Wakes worker `i` specifically (work only it may run, or shutdown).
    pub fn notify_worker(&self, i: usize) {
        self.unregister(i);
        self.parkers[i].unpark();
    }

    /// Wakes everyone (shutdown).
    pub fn notify_all(&self) {
        for i in 0..self.parkers.len() {
            self.notify_worker(i);
        }
    }

    /// Worker `i` is about to sleep: after this it must check every shared
    /// queue once more before [`Idle::park`].
    pub fn register(&self, i: usize) {
        let mut s = self.sleepers.lock();
        if !s.contains(&i) {
            s.push(i);
            self.sleeping.fetch_add(1, Ordering::SeqCst);
        }
        drop(s);
        fence(Ordering::SeqCst);
    }

    /// Worker `i` is awake again (found work, or was woken).
    pub fn unregister(&self, i: usize) {
        let mut s = self.sleepers.lock();
        if let Some(pos) = s.iter().position(|&w| w == i) {
            s.swap_remove(pos);
            self.sleeping.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Sleeps until notified (returns at once if a notification is pending).
    pub fn park(&self, i: usize) {
        self.parkers[i].park();
    }

    /// How many workers sleep now.
    pub fn sleeping(&self) -> usize {
        self.sleeping.load(Ordering::Relaxed)
    }
}

/// Whether any worker of a node is awake, for the node's housekeeping
/// threads (the stats sampler, the system monitor, the timer's checks):
/// they look at the workers periodically only while one is awake, and
/// sleep until one wakes while every worker sleeps, so an idle node costs
/// no periodic wake-up (issue 17: 1.1 % of a core per idle node was these
/// threads' ticks).
///
/// Protocol (no lost wake-up, the same Dekker pair as [`Idle`]):
/// * worker: [`Quiet::sleeping`] just before it parks, [`Quiet::woke`]
///   when it returns from the park: `awake += 1`, `fence(SeqCst)`, then
///   read `waiters`; if non-zero, take the lock and notify.
/// * housekeeper: [`Quiet::wait_awake`]: under the lock, `waiters += 1`,
///   `fence(SeqCst)`, then read `awake`; it waits only if that is 0, and the lock
///   is held from that read until the wait, so a worker's notify (taken
///   under the same lock) comes after the wait began.
#[derive(Debug)]
pub struct Quiet {
    /// Workers (spares serving included) not parked.
    awake: AtomicUsize,
    /// Housekeepers waiting for a worker to wake.
    waiters: AtomicUsize,
    /// `true` once the node stops.
    stopped: Mutex<bool>,
    cv: Condvar,
    /// Where the threads that tick whatever the workers do nap (`nap`,
    /// `nap_unless`), apart from the housekeepers, so that a
    /// [`poke`](Quiet::poke) does not wake those.
    naps: Condvar,
    /// Where `nap_unless` naps, apart from `nap`, so that a poke wakes only
    /// the thread whose flag it set (the overlay's is poked at news; the
    /// discovery thread's nap of seconds was cut at each).
    pokes: Condvar,
    /// Periodic rounds the housekeepers ran (for tests and figures: a flat
    /// count over an idle second means no periodic wake-up).
    rounds: AtomicUsize,
}

impl Quiet {
    /// For `awake` workers, all awake (each calls [`Quiet::sleeping`]
    /// before its first park).
    pub fn new(awake: usize) -> Quiet {
        Quiet {
            awake: AtomicUsize::new(awake),
            waiters: AtomicUsize::new(0),
            stopped: Mutex::new(false),
            cv: Condvar::new(),
            naps: Condvar::new(),
            pokes: Condvar::new(),
            rounds: AtomicUsize::new(0),
        }
    }

    /// A worker is about to park.
    #[inline]
    pub fn sleeping(&self) {
        self.awake.fetch_sub(1, Ordering::SeqCst);
    }

    /// A worker is awake again (back from a park, or a spare that starts
    /// serving); wakes every housekeeper waiting for one. Returns whether
    /// some waited (the caller then wakes those that wait elsewhere, the
    /// timer thread).
    #[inline]
    pub fn woke(&self) -> bool {
        self.awake.fetch_add(1, Ordering::SeqCst);
        // As `Idle`'s pair: the fences order "awake += 1; read waiters"
        // against "waiters += 1; read awake" (loom models SeqCst fences,
        // not SeqCst accesses alone).
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) == 0 {
            return false;
        }
        self.woke_slow();
        true
    }

    #[cold]
    fn woke_slow(&self) {
        let _g = self.stopped.lock();
        self.cv.notify_all();
    }

    /// Whether a worker is awake now.
    #[inline]
    pub fn any_awake(&self) -> bool {
        self.awake.load(Ordering::SeqCst) != 0
    }

    /// Registers a housekeeper that waits elsewhere (the timer thread, on
    /// its own lock, held from before this call until its wait); returns
    /// whether it may wait: no worker is awake. Undo with
    /// [`Quiet::unregister`] after the wait (or at once if `false`).
    pub fn register(&self) -> bool {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.awake.load(Ordering::SeqCst) == 0
    }

    /// Undoes [`Quiet::register`].
    pub fn unregister(&self) {
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Waits until a worker is awake or the node stops (at most `timeout`,
    /// if given). Returns `false` once the node stops.
    pub fn wait_awake(&self, timeout: Option<std::time::Duration>) -> bool {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let mut g = self.stopped.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        while !*g && self.awake.load(Ordering::SeqCst) == 0 {
            match deadline {
                None => g = self.cv.wait(g),
                Some(d) => {
                    let now = std::time::Instant::now();
                    if now >= d {
                        break;
                    }
                    g = self.cv.wait_timeout(g, d - now);
                }
            }
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        !*g
    }

    /// Sleeps `d`, or less if the node stops; `false` once it stops (for
    /// threads that tick whatever the workers do: discovery, the overlay).
    pub fn nap(&self, d: std::time::Duration) -> bool {
        self.nap_while(d, &self.naps, || true)
    }

    /// As [`nap`](Quiet::nap), also cut short by [`poke`](Quiet::poke)
    /// with the same `flag` (cleared when it ends the nap). The flag is
    /// set and read under the lock, so a poke made after the nap began is
    /// never missed (`loom-tests/tests/quiet.rs`; with the flag set before
    /// the lock, as it was, loom finds an execution that naps on).
    pub fn nap_unless(&self, d: std::time::Duration, flag: &AtomicBool) -> bool {
        self.nap_while(d, &self.pokes, || !flag.swap(false, Ordering::SeqCst))
    }

    /// Sleeps `d` while `go_on` holds (asked under the lock, at the start
    /// and after each wake-up) and the node runs; `false` once it stops.
    fn nap_while(&self, d: std::time::Duration, cv: &Condvar, go_on: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + d;
        let mut g = self.stopped.lock();
        while !*g && go_on() {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            g = cv.wait_timeout(g, deadline - now);
        }
        !*g
    }

    /// Sets `flag` and wakes the threads in [`nap_unless`](Quiet::nap_unless)
    /// (each looks again at its flag); those in [`nap`](Quiet::nap) sleep on.
    pub fn poke(&self, flag: &AtomicBool) {
        let _g = self.stopped.lock();
        flag.store(true, Ordering::SeqCst);
        self.pokes.notify_all();
    }

    /// A housekeeper ran one periodic round.
    #[inline]
    pub(crate) fn round(&self) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
    }

    /// Periodic rounds the housekeepers ran.
    #[cfg(test)]
    pub(crate) fn rounds(&self) -> usize {
        self.rounds.load(Ordering::Relaxed)
    }

    /// The node stops: every waiter returns.
    pub fn stop(&self) {
        *self.stopped.lock() = true;
        self.cv.notify_all();
        self.naps.notify_all();
        self.pokes.notify_all();
    }
}
