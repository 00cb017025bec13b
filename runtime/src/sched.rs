//! The M:N scheduler: `workers` OS threads run processes.
//!
//! Each worker has a local run queue (crossbeam-deque), a LIFO slot (not
//! stealable; see `run_queue.rs`) and a queue for processes pinned to it. A
//! global injector takes work from threads that are not workers (the root
//! process, timers, the blocking pool, the node loop) and yielded processes.
//!
//! The local queue is Cilk-style: the owner pops the newest process, thieves
//! steal the oldest. Fan-out work (skynet, a supervisor starting children)
//! then runs depth-first on each core, so few processes are alive at once and
//! their stacks are reused while still in cache, while thieves take the
//! biggest, oldest pieces of work. (Rejected: a FIFO local queue, which runs
//! such trees breadth-first: skynet kept ~1 M processes alive and ran 4×
//! slower, most of it mapping and faulting fresh stacks.)
//!
//! Where a runnable process goes:
//! * spawned: the spawner's local queue, or the injector from outside;
//! * woken by a message: the waker's LIFO slot, so ping-pong and rings stay on
//!   one core without waking a sleeping thread;
//! * woken, then pushed out of the slot by a later wake: the back of the
//!   injector (FIFO), never the owner-LIFO local queue, where the newest
//!   would run first and the oldest wait until stolen (1,000 callers of one
//!   server: 24 to 7,372 calls each in 2 s, p99 79 ms);
//! * yielded: the injector, behind everything else (a LIFO local queue would
//!   hand it straight back).
//!
//! A worker looks, in order: LIFO slot, pinned queue, local queue, injector
//! (one process at a time, in order: a batch moved to the LIFO local queue
//! would run backwards), other workers' queues; every `GLOBAL_EVERY` rounds
//! it looks at the injector first, so yielded and outside work cannot starve
//! behind a busy local queue. The slot may run `LIFO_BUDGET` processes in a
//! row while other work waits, then the other work comes first; with nothing
//! else waiting (a ping-pong pair, a ring) it runs on, and the check costs a
//! few loads. A process handed on through the slot thus runs within the
//! turn of the one that woke it (as Go's `runnext` inherits the time
//! slice), and a caller of a busy server gets one call per turn, as under
//! Erlang's FIFO run queues. Finding nothing, a worker spins briefly, then
//! sleeps through the protocol in `idle.rs`.

pub(crate) mod blocking;
pub(crate) mod idle;
pub(crate) mod run_queue;
pub(crate) mod spare;
pub(crate) mod timer;
pub(crate) mod worker;

use crate::context;
use crate::loom::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::process::Process;
use crossbeam_deque::{Injector, Stealer};
use crossbeam_utils::CachePadded;
use idle::{Idle, Quiet};
use run_queue::LifoSlot;
pub(crate) use run_queue::Runnable;
use std::collections::VecDeque;
use worker::WorkerCtx;

/// Shared scheduler state of one node.
#[derive(Debug)]
pub(crate) struct Scheduler {
    pub(crate) injector: Injector<Runnable>,
    pub(crate) stealers: Vec<Stealer<Runnable>>,
    /// Each worker's words on a cache line of their own (`CachePadded`):
    /// workers write them at every wake and switch, and packed together they
    /// would bounce one line between the cores.
    pub(crate) lifo: Vec<CachePadded<LifoSlot>>,
    pub(crate) pinned: Vec<Mutex<VecDeque<Runnable>>>,
    /// Length of each pinned queue, read without its lock.
    pub(crate) pinned_len: Vec<AtomicUsize>,
    /// Per worker (spares included): its run word ([`run_word`]: the pid
    /// serial of the process it runs and a count of runs, so the word
    /// changes at every process switch), marked with `IDLE_BIT` while it
    /// waits for work (read by the monitors: `rescue_stuck`, `sysmon.rs`
    /// and the sampler in `stats.rs`). One store per resume.
    pub(crate) ticks: Vec<CachePadded<AtomicU64>>,
    /// Workers made at start; the slots after them are spares.
    pub(crate) primaries: usize,
    pub(crate) idle: Idle,
    /// Whether a worker is awake, for the housekeeping threads (`idle.rs`).
    pub(crate) quiet: Quiet,
    pub(crate) stop: AtomicBool,
}

/// Set in a worker's run word while it waits for work.
pub(crate) const IDLE_BIT: u64 = 1 << 63;

/// Low bits of a run word that count runs; the pid serial sits above them.
/// The count only has to make two consecutive runs of one process differ:
/// a monitor that saw the same word at samples a `long_schedule` apart,
/// while the count wrapped exactly in between at every sample, is out of
/// reach. Serials keep 47 bits (past 2^47 spawns, about four years at a
/// million a second, a report may name a process by a truncated serial).
const RUN_BITS: u32 = 16;

/// The run word of a worker running the process with pid serial `serial`
/// for its worker's `runs`-th run (never has `IDLE_BIT`).
#[inline(always)]
pub(crate) fn run_word(serial: u64, runs: u64) -> u64 {
    ((serial << RUN_BITS) | (runs & ((1 << RUN_BITS) - 1))) & !IDLE_BIT
}

/// The pid serial of the process a run word names.
#[inline]
pub(crate) fn run_serial(word: u64) -> u64 {
    (word & !IDLE_BIT) >> RUN_BITS
}

impl Scheduler {
    /// A scheduler for `primaries` workers; `stealers` has one entry per
    /// worker slot, spares included.
    pub(crate) fn new(stealers: Vec<Stealer<Runnable>>, primaries: usize) -> Scheduler {
        let n = stealers.len();
        Scheduler {
            primaries,
            injector: Injector::new(),
            stealers,
            lifo: (0..n)
                .map(|_| CachePadded::new(LifoSlot::default()))
                .collect(),
            pinned: (0..n).map(|_| Mutex::new(VecDeque::new())).collect(),
            pinned_len: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            ticks: (0..n)
                .map(|_| CachePadded::new(AtomicU64::new(IDLE_BIT)))
                .collect(),
            idle: Idle::new(n),
            quiet: Quiet::new(primaries),
            stop: AtomicBool::new(false),
        }
    }

    /// Worker slots, spares included.
    pub(crate) fn workers(&self) -> usize {
        self.stealers.len()
    }

    /// Whether a spare would find work while worker `i` is held (the
    /// system monitor asks before it starts one): something waits in `i`'s
    /// LIFO slot, its queue or the injector, and no worker sleeps (one that
    /// sleeps is woken for such work anyway). Go's sysmon asks the same
    /// before it hands a P to another thread.
    pub(crate) fn work_waits(&self, i: usize) -> bool {
        self.idle.sleeping() == 0
            && (self.lifo[i].is_occupied()
                || !self.stealers[i].is_empty()
                || !self.injector.is_empty())
    }

    /// Worker `i`, which ran `runs` processes, waits for work.
    #[inline]
    pub(crate) fn mark_idle(&self, i: usize, runs: u64) {
        self.ticks[i].store(runs | IDLE_BIT, Ordering::Relaxed);
    }

    /// This thread's worker, if it is one of ours.
    #[inline]
    fn own_worker(&self) -> Option<&'static WorkerCtx> {
        context::worker().filter(|w| std::ptr::eq(w.sched(), self))
    }

    fn push_pinned(&self, i: usize, p: Runnable) {
        self.pinned[i].lock().push_back(p);
        self.pinned_len[i].fetch_add(1, Ordering::SeqCst);
        self.idle.notify_worker(i);
    }

    /// A parked process was woken (by a message, timer, signal): run it soon,
    /// preferably right after the waker on this worker.
    #[inline]
    pub(crate) fn wake(&self, p: &Process) {
        self.wake_from(self.own_worker(), p);
    }

    /// [`Scheduler::wake`] for a caller that already knows its worker
    /// (`context::worker()`, which need not be this scheduler's).
    #[inline]
    pub(crate) fn wake_from(&self, w: Option<&WorkerCtx>, p: &Process) {
        let (pinned, p) = (p.pinned.map(|i| i as usize), Runnable::new(p));
        if let Some(i) = pinned {
            return self.push_pinned(i, p);
        }
        match w.filter(|w| std::ptr::eq(w.sched(), self)) {
            Some(w) => {
                // It runs next on this core: have its stack ready.
                // SAFETY: `p` was just made from a live `&Process`.
                unsafe { p.process() }.prefetch_stack();
                if let Some(old) = w.lifo().put(p) {
                    // Woken before `p`: it waits behind what waits already.
                    self.injector.push(old);
                    self.idle.notify_one();
                }
            }
            None => {
                self.injector.push(p);
                self.idle.notify_one();
            }
        }
    }

    /// A new (or yielding) process: to a stealable queue.
    #[inline]
    pub(crate) fn push(&self, p: &Process) {
        let (pinned, p) = (p.pinned.map(|i| i as usize), Runnable::new(p));
        if let Some(i) = pinned {
            return self.push_pinned(i, p);
        }
        match self.own_worker() {
            Some(w) => w.local.push(p),
            None => self.injector.push(p),
        }
        self.idle.notify_one();
    }

    /// A process that yielded: to the back of the global queue.
    pub(crate) fn push_yielded(&self, p: &Process) {
        let (pinned, p) = (p.pinned.map(|i| i as usize), Runnable::new(p));
        if let Some(i) = pinned {
            return self.push_pinned(i, p);
        }
        self.injector.push(p);
        self.idle.notify_one();
    }

    /// Asks every worker to stop after its current process.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.idle.notify_all();
        self.quiet.stop();
    }

    /// The monitor's check (every tick): a worker whose tick counter has not
    /// moved has run one process all along; move the process waiting in its
    /// LIFO slot to the injector so that another worker runs it.
    pub(crate) fn rescue_stuck(&self, last: &mut [u64]) {
        for (i, t) in self.ticks.iter().enumerate() {
            let now = t.load(Ordering::Relaxed);
            if now == last[i] && self.lifo[i].is_occupied() {
                if let Some(p) = self.lifo[i].take() {
                    self.injector.push(p);
                    self.idle.notify_one();
                }
            }
            last[i] = now;
        }
    }
}
