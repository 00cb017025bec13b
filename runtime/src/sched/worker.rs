//! One worker thread: find a runnable process, resume it, repeat.

use crate::context;
use crate::coroutine::{Step, Suspend};
use crate::loom::Ordering;
use crate::node::NodeShared;
use crate::process::Process;
use crate::sched::run_queue::LifoSlot;
use crate::sched::{run_word, Runnable, Scheduler};
use crossbeam_deque::{Steal, Worker};
use std::cell::Cell;
use std::sync::Arc;

/// Consecutive runs from the LIFO slot while other work waits (see
/// `sched.rs`): a process taken from a queue, then up to two handed on
/// through the slot (a caller and the server it calls: one call per turn),
/// then the queue again. With nothing else waiting the slot runs on.
/// (Tokio's `MAX_LIFO_POLLS_PER_TICK` is 3; 1, 2, 4 and 64 were measured:
/// 4 gave a busy server's callers two calls a turn and a longer tail, see
/// `docs/decisions.md`.)
pub(crate) const LIFO_BUDGET: u32 = 2;
/// Every this many scheduling rounds, the injector is looked at first.
const GLOBAL_EVERY: u32 = 61;
/// Rounds of looking for work before going to sleep (each round is a few
/// hundred ns; sleeping and waking costs ~16 µs here).
const SPIN_ROUNDS: u32 = 64;

/// What a worker thread owns; reachable from its processes through
/// `context::worker()`.
pub(crate) struct WorkerCtx {
    pub(crate) index: usize,
    pub(crate) node: Arc<NodeShared>,
    pub(crate) local: Worker<Runnable>,
    /// The process being resumed now (null between processes).
    pub(crate) current: Cell<*const Process>,
    /// Scheduling rounds, for `GLOBAL_EVERY`.
    pub(crate) rounds: Cell<u32>,
    /// Pid serials reserved for spawns on this worker: `[next, end)`.
    pub(crate) serials: Cell<(u64, u64)>,
    /// Connections holding frames that processes run here sent to other
    /// nodes, written after each run (see `dist::queue`).
    pub(crate) held_frames: std::cell::RefCell<Vec<graft_net::PeerSender>>,
    /// The buffer remote sends encode their frame into, reused (taken while
    /// in use: see `dist::take_frame_buf`).
    pub(crate) frame_buf: Cell<Vec<u8>>,
    /// For a spare worker (`spare.rs`): its index among the spares, and the
    /// stuck worker it serves now.
    pub(crate) spare: Option<usize>,
    pub(crate) serving: Cell<Option<usize>>,
    /// Runs on this worker (a local copy of the run word's count, so the
    /// shared word is only stored, never read, by the worker).
    pub(crate) runs: Cell<u64>,
    /// This worker's LIFO slot and run word (`sched.lifo[index]`,
    /// `sched.ticks[index]`), found once: each resume reaches them without
    /// an index and its bounds check.
    lifo: *const LifoSlot,
    tick: *const crate::loom::AtomicU64,
}

impl std::fmt::Debug for WorkerCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCtx")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// Pid serials a worker takes from the node's counter at once (one shared
/// atomic per `SERIAL_BLOCK` spawns instead of per spawn).
const SERIAL_BLOCK: u64 = 1024;

impl WorkerCtx {
    /// A fresh pid serial for a spawn on this worker.
    #[inline]
    pub(crate) fn next_serial(&self, node_counter: &crate::loom::AtomicU64) -> u64 {
        let (mut next, mut end) = self.serials.get();
        if next == end {
            next = node_counter.fetch_add(SERIAL_BLOCK, Ordering::Relaxed);
            end = next + SERIAL_BLOCK;
        }
        self.serials.set((next + 1, end));
        next
    }

    pub(crate) fn sched(&self) -> &Scheduler {
        &self.node.sched
    }

    /// A worker made by `Node::start` (not a spare).
    pub(crate) fn new(index: usize, node: Arc<NodeShared>, local: Worker<Runnable>) -> WorkerCtx {
        let lifo: *const LifoSlot = &*node.sched.lifo[index];
        let tick: *const crate::loom::AtomicU64 = &*node.sched.ticks[index];
        WorkerCtx {
            index,
            node,
            local,
            current: Cell::new(std::ptr::null()),
            rounds: Cell::new(0),
            serials: Cell::new((0, 0)),
            held_frames: Default::default(),
            frame_buf: Cell::new(Vec::new()),
            spare: None,
            serving: Cell::new(None),
            runs: Cell::new(0),
            lifo,
            tick,
        }
    }

    /// This worker's LIFO slot.
    #[inline]
    pub(crate) fn lifo(&self) -> &LifoSlot {
        // SAFETY: it points into `self.node.sched.lifo`, which `self.node`
        // keeps alive and which is never resized after the scheduler is made.
        unsafe { &*self.lifo }
    }

    /// This worker's run word (see `sched::run_word`).
    #[inline]
    fn tick(&self) -> &crate::loom::AtomicU64 {
        // SAFETY: as for `lifo`, in `self.node.sched.ticks`.
        unsafe { &*self.tick }
    }

    /// The worker a process spawned pinned here stays on: this one, or for
    /// a spare, the worker it serves (a spare may retire).
    pub(crate) fn home(&self) -> usize {
        self.serving.get().unwrap_or(self.index)
    }

    /// The worker thread's main loop.
    pub(crate) fn run(self) {
        context::enter_worker(&self, || self.main_loop());
    }

    /// A spare worker thread's loop: serve a stuck worker whenever the
    /// system monitor asks, until the node stops (`spare.rs`).
    pub(crate) fn run_spare(self) {
        let Some(j) = self.spare else {
            return self.run();
        };
        context::enter_worker(&self, || {
            let spare = &self.node.sysmon.spares[j];
            while let Some(i) = spare.wait_active() {
                if self.sched().stop.load(Ordering::Relaxed) {
                    break;
                }
                self.serving.set(Some(i));
                self.woke();
                self.main_loop();
                self.sched().quiet.sleeping();
                self.serving.set(None);
                self.hand_back();
                spare.retired();
            }
            self.hand_back();
        });
    }

    /// A spare that stops serving: what its own queues hold goes to the
    /// injector, for the other workers.
    fn hand_back(&self) {
        let sched = self.sched();
        let mut moved = false;
        if let Some(p) = sched.lifo[self.index].take() {
            sched.injector.push(p);
            moved = true;
        }
        while let Some(p) = self.local.pop() {
            sched.injector.push(p);
            moved = true;
        }
        if moved {
            sched.idle.notify_one();
        }
        sched.mark_idle(self.index, self.runs.get());
    }

    /// `false` once a spare no longer serves its stuck worker.
    #[inline]
    fn on_duty(&self) -> bool {
        match (self.spare, self.serving.get()) {
            (Some(j), Some(i)) => self.node.sysmon.spares[j].serves(i),
            _ => true,
        }
    }

    fn main_loop(&self) {
        let sched = self.sched();
        let mut lifo_budget = LIFO_BUDGET;
        loop {
            if sched.stop.load(Ordering::Relaxed) || !self.on_duty() {
                return;
            }
            if lifo_budget == 0 && !self.others_wait() {
                // Nothing else to be fair to: no find_work, no steal fences.
                lifo_budget = LIFO_BUDGET;
            }
            let next = if lifo_budget > 0 {
                self.lifo().take()
            } else {
                None
            };
            let p = match next {
                Some(p) => {
                    lifo_budget -= 1;
                    p
                }
                None => {
                    lifo_budget = LIFO_BUDGET;
                    match self.find_work().or_else(|| self.wait_for_work()) {
                        Some(p) => p,
                        None => continue, // stop requested, or woken: look again
                    }
                }
            };
            self.run_process(p);
            // What it sent to other nodes leaves now (see `dist::queue`).
            self.flush_held();
        }
    }

    /// Whether work other than the LIFO slot waits on this worker: its
    /// local or pinned queue, or the injector (a few loads, no fence; a
    /// push missed here is seen at the next check).
    #[inline]
    fn others_wait(&self) -> bool {
        let sched = self.sched();
        !self.local.is_empty()
            || !sched.injector.is_empty()
            || sched.pinned_len[self.index].load(Ordering::Relaxed) > 0
    }

    /// Everything but the LIFO slot, then the LIFO slot.
    fn find_work(&self) -> Option<Runnable> {
        let sched = self.sched();
        let i = self.index;
        let round = self.rounds.get().wrapping_add(1);
        self.rounds.set(round);
        if round.is_multiple_of(GLOBAL_EVERY) {
            if let Steal::Success(p) = sched.injector.steal() {
                return Some(p);
            }
        }
        if let Some(stuck) = self.serving.get() {
            // A spare: what the stuck worker's process woke runs here.
            if let Some(p) = sched.lifo[stuck].take() {
                return Some(p);
            }
        }
        if sched.pinned_len[i].load(Ordering::SeqCst) > 0 {
            if let Some(p) = sched.pinned[i].lock().pop_front() {
                sched.pinned_len[i].fetch_sub(1, Ordering::SeqCst);
                return Some(p);
            }
        }
        if let Some(p) = self.local.pop() {
            return Some(p);
        }
        // One at a time: the injector holds woken processes in the order
        // they were woken, and a batch moved to the LIFO local queue would
        // run backwards.
        loop {
            match sched.injector.steal() {
                Steal::Success(p) => return Some(p),
                Steal::Retry => continue,
                Steal::Empty => break,
            }
        }
        let n = sched.stealers.len();
        for k in 1..n {
            let victim = (i + k) % n;
            // A spare's queue is empty unless it serves (it hands its
            // queue back when it retires): skip it without a steal's fence.
            if victim >= sched.primaries && sched.stealers[victim].is_empty() {
                continue;
            }
            loop {
                match sched.stealers[victim].steal_batch_and_pop(&self.local) {
                    Steal::Success(p) => return Some(p),
                    Steal::Retry => continue,
                    Steal::Empty => break,
                }
            }
        }
        sched.lifo[i].take()
    }

    /// Spins a little, then sleeps until notified. `None`: look again.
    #[cold]
    fn wait_for_work(&self) -> Option<Runnable> {
        let sched = self.sched();
        // Not running a process: the system monitor must not count this
        // wait as a long run of the last one.
        sched.mark_idle(self.index, self.runs.get());
        for round in 0..SPIN_ROUNDS {
            if sched.stop.load(Ordering::Relaxed) || !self.on_duty() {
                return None;
            }
            if let Some(p) = self.find_work() {
                return Some(p);
            }
            if self.poll_sockets() {
                continue;
            }
            if round % 8 == 7 {
                std::thread::yield_now();
            } else {
                for _ in 0..32 {
                    crate::loom::spin_loop();
                }
            }
        }
        sched.idle.register(self.index);
        if sched.stop.load(Ordering::SeqCst) || !self.on_duty() {
            sched.idle.unregister(self.index);
            return None;
        }
        if let Some(p) = self.find_work() {
            sched.idle.unregister(self.index);
            return Some(p);
        }
        sched.quiet.sleeping();
        sched.idle.park(self.index);
        self.woke();
        sched.idle.unregister(self.index);
        None
    }

    /// Serves what the node's sockets have ready now (`Transport::
    /// poll_ready`), so that a frame read here wakes its process into this
    /// worker's LIFO slot: no I/O thread between the socket and the
    /// process. Whether it served any.
    fn poll_sockets(&self) -> bool {
        let Some(t) = self.node.dist.transport() else {
            return false;
        };
        let served = t.poll_ready();
        // What the handlers sent (answers to control frames) leaves now.
        self.flush_held();
        served
    }

    /// Writes the frames this worker holds for other nodes, if any.
    #[inline]
    fn flush_held(&self) {
        if !self.held_frames.borrow().is_empty() {
            crate::dist::flush_held(&self.held_frames);
        }
    }

    /// This worker is awake (back from a park, or a spare that starts
    /// serving): the housekeeping threads that sleep while every worker
    /// sleeps look at the workers again (`idle.rs`, `Quiet`).
    #[inline]
    fn woke(&self) {
        if self.sched().quiet.woke() {
            self.node.timers.poke();
        }
    }

    /// Resumes `p` until it parks, yields or exits.
    fn run_process(&self, r: Runnable) {
        // SAFETY: taken from a run queue, and this worker finishes it at the
        // earliest below (after which `p` is not used).
        let p: &Process = unsafe { r.process() };
        let sched = self.sched();
        // What the system monitor and the sampler watch (`sysmon.rs`,
        // `stats.rs`): only this worker writes its run word, which names
        // the process it runs: one plain store per resume.
        let runs = self.runs.get().wrapping_add(1);
        self.runs.set(runs);
        self.tick()
            .store(run_word(p.pid.serial(), runs), Ordering::Relaxed);
        p.state.start();
        self.current.set(p);
        loop {
            p.mailbox.owner_resumed();
            // SAFETY: `state.start()` made this worker the RUNNING owner.
            let coro = unsafe { p.coro_mut() };
            let Some(coro) = coro.as_mut() else {
                self.current.set(std::ptr::null());
                return;
            };
            // Accounting (stats.rs): a plain store, no clock (the sampler
            // reads the run word and pid above).
            p.acct.ran();
            let step = coro.resume(&p.trap);
            match step {
                Step::Suspended(Suspend::Park) => {
                    if p.state.park() {
                        break;
                    }
                    // A wake arrived while it ran: resume it straight away.
                }
                Step::Suspended(Suspend::Yield) => {
                    self.current.set(std::ptr::null());
                    p.state.requeue();
                    sched.push_yielded(p);
                    return;
                }
                Step::Exited(reason) => {
                    self.current.set(std::ptr::null());
                    // `p` may be freed by this call: not used after it.
                    self.node.finish(r, reason);
                    return;
                }
            }
        }
        self.current.set(std::ptr::null());
    }
}
