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

use crate::loom::{fence, AtomicUsize, Condvar, Mutex, Ordering};

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
