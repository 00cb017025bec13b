//! Per-process accounting and node statistics (the data under
//! [`process_info`](crate::process_info), [`observe`](crate::observe) and
//! the web observer).
//!
//! # Cost
//!
//! Nothing on the hot path reads a clock. Around each resume the worker
//! writes which process it runs into a word of its own (two plain stores)
//! and bumps the process's run count (a plain load and store: one writer,
//! the worker holding it). A sampler thread per node looks at those words
//! every [`SAMPLE_EVERY`] while a worker is awake (it sleeps while every
//! worker does: an idle node pays no wake-up for it) and charges the time
//! since its last look to the
//! process each worker is running, and to that worker's busy time: run time
//! and utilisation are sampled, as a profiler's are (a process that runs for
//! less than a period between two looks may be charged nothing, or a whole
//! period).
//!
//! (Rejected: reading the cycle counter around each resume. `rdtsc` costs
//! 25-90 ns on this VM, measured in a loop of nothing else, against a ring
//! hop of ~90 ns; `Instant::now` costs ~190 ns here.)
//!
//! Everything else (ancestors, stack high-water marks, mailbox lengths) is
//! computed when asked, never on a hot path.

use crate::node::NodeShared;
use crate::pid::Pid;
use crate::process::Process;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How often the sampler looks at the workers.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(2);

/// A counter with one writer: a plain load and store, no RMW.
#[inline(always)]
fn bump(c: &AtomicU64, by: u64) {
    c.store(
        c.load(std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(by),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// What a process's entry records for operators.
#[derive(Debug)]
pub(crate) struct Acct {
    /// Where it was spawned (`#[track_caller]`).
    pub(crate) spawned_at: &'static Location<'static>,
    /// The process that spawned it (none from outside a process).
    pub(crate) parent: Option<Pid>,
    /// Times it was resumed.
    pub(crate) runs: AtomicU64,
    /// Nanoseconds it was seen running (sampled; the sampler writes it).
    pub(crate) run_ns: AtomicU64,
    /// It ended on an exit signal from another process (no crash report).
    pub(crate) signalled: AtomicBool,
    /// Messages in its private queue (skipped by receives) when it last
    /// suspended.
    pub(crate) saved: AtomicUsize,
    /// Its sends and receives are logged (`observe::trace`).
    pub(crate) traced: AtomicBool,
}

impl Default for Acct {
    #[track_caller]
    fn default() -> Self {
        Acct::new(Location::caller(), None)
    }
}

impl Acct {
    pub(crate) fn new(spawned_at: &'static Location<'static>, parent: Option<Pid>) -> Acct {
        Acct {
            spawned_at,
            parent,
            runs: AtomicU64::new(0),
            run_ns: AtomicU64::new(0),
            signalled: AtomicBool::new(false),
            saved: AtomicUsize::new(0),
            traced: AtomicBool::new(false),
        }
    }

    /// The process is suspending with `n` messages in its private queue.
    #[inline(always)]
    pub(crate) fn note_saved(&self, n: usize) {
        self.saved.store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Messages waiting in the mailbox of `p` and in its private queue.
    pub(crate) fn queued(p: &Process) -> usize {
        p.mailbox.len() + p.acct.saved.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// One resume (called by the worker holding it).
    #[inline(always)]
    pub(crate) fn ran(&self) {
        bump(&self.runs, 1);
    }
}

/// Per-worker and node-wide counters.
#[derive(Debug)]
pub(crate) struct NodeStats {
    pub(crate) started: Instant,
    /// Nanoseconds each worker was seen busy (the sampler writes them).
    busy: Vec<AtomicU64>,
    /// Nanoseconds sampled (the same for every worker).
    sampled: AtomicU64,
    /// While the sampler sleeps because every worker does: when it began
    /// ([`NodeStats::nanos_at`], never 0); else 0.
    dormant_since: AtomicU64,
    /// Supervisor restarts (see [`observe::note_restart`](crate::observe::note_restart)).
    pub(crate) restarts: AtomicU64,
    /// Processes that crashed (reported).
    pub(crate) crashes: AtomicU64,
    /// Where the web observer listens, once it does.
    pub(crate) observer: OnceLock<std::net::SocketAddr>,
    /// Utilisation samples: (time, sampled ns, busy ns per worker), newest
    /// last.
    pub(crate) samples: parking_lot::Mutex<std::collections::VecDeque<(Instant, u64, Vec<u64>)>>,
}

impl NodeStats {
    pub(crate) fn new(workers: usize) -> NodeStats {
        NodeStats {
            started: Instant::now(),
            busy: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            sampled: AtomicU64::new(0),
            dormant_since: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            crashes: AtomicU64::new(0),
            observer: OnceLock::new(),
            samples: parking_lot::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// `at` as nanoseconds since the node started, plus one (never 0).
    fn nanos_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.started).as_nanos() as u64 + 1
    }

    /// Busy nanoseconds of every worker, and the nanoseconds sampled (the
    /// time the sampler sleeps through while every worker sleeps included,
    /// as idle time).
    pub(crate) fn busy_ns(&self) -> (Vec<u64>, u64) {
        let r = std::sync::atomic::Ordering::Relaxed;
        let since = self.dormant_since.load(r);
        let asleep = match since {
            0 => 0,
            s => self.nanos_at(Instant::now()).saturating_sub(s),
        };
        (
            self.busy.iter().map(|c| c.load(r)).collect(),
            self.sampled.load(r) + asleep,
        )
    }

    /// Records a utilisation sample (the observer's clock and every
    /// statistics ask call this); keeps `keep` samples, at least half a
    /// second apart.
    pub(crate) fn sample(&self, keep: usize) {
        let (busy, sampled) = self.busy_ns();
        let now = (Instant::now(), sampled, busy);
        let mut s = self.samples.lock();
        if s.back()
            .is_some_and(|b| now.0.duration_since(b.0) < Duration::from_millis(500))
        {
            return;
        }
        s.push_back(now);
        while s.len() > keep {
            s.pop_front();
        }
    }

    /// Busy fraction per worker between two readings (sampled ns, busy).
    pub(crate) fn utilisation(a: (u64, &[u64]), b: (u64, &[u64])) -> Vec<f64> {
        let wall = b.0.saturating_sub(a.0).max(1) as f64;
        a.1.iter()
            .zip(b.1)
            .map(|(x, y)| (y.saturating_sub(*x) as f64 / wall).clamp(0.0, 1.0))
            .collect()
    }
}

/// The sampler thread of one node: every [`SAMPLE_EVERY`], charge the time
/// since the last look to what each worker runs. While every worker sleeps
/// (for [`LINGER`](crate::sched::idle::LINGER) and more) there is nothing to
/// charge: it sleeps until one wakes (`sched/idle.rs`, `Quiet`), and the
/// time it slept counts as sampled, idle time (readers see it grow
/// meanwhile: [`NodeStats::busy_ns`]). Ends with the node.
pub(crate) fn run_sampler(node: std::sync::Weak<NodeShared>) {
    let mut last = Instant::now();
    let mut quiet_since: Option<Instant> = None;
    loop {
        std::thread::sleep(SAMPLE_EVERY);
        let Some(n) = node.upgrade() else { return };
        if n.stopping.load(crate::loom::Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        // A late wake-up (a loaded machine) is charged at most 10 periods.
        let dt = (now - last).min(SAMPLE_EVERY * 10).as_nanos() as u64;
        last = now;
        let st = &n.stats;
        // What each worker runs: the system monitor's run word (sched.rs,
        // `run_word`), which the worker writes once a run and which names
        // the pid it runs. A worker is busy from a run's start until it
        // waits for work (`IDLE_BIT`).
        let sched = &n.sched;
        for w in 0..sched.workers() {
            let v = sched.ticks[w].load(std::sync::atomic::Ordering::Relaxed);
            if v & crate::sched::IDLE_BIT != 0 {
                continue;
            }
            if let Some(b) = st.busy.get(w) {
                bump(b, dt);
            }
            let serial = crate::sched::run_serial(v);
            n.table.with(serial, |p| bump(&p.acct.run_ns, dt));
        }
        bump(&st.sampled, dt);
        let quiet = &n.sched.quiet;
        quiet.round();
        if quiet.any_awake() {
            quiet_since = None;
            continue;
        }
        if now - *quiet_since.get_or_insert(now) < crate::sched::idle::LINGER {
            continue;
        }
        st.dormant_since
            .store(st.nanos_at(now), std::sync::atomic::Ordering::Relaxed);
        let live = quiet.wait_awake(None);
        let woke = Instant::now();
        // Cleared before the time is added: a reader between the two sees
        // a little less, never the slept time twice.
        st.dormant_since
            .store(0, std::sync::atomic::Ordering::Relaxed);
        bump(&st.sampled, (woke - now).as_nanos() as u64);
        last = woke;
        quiet_since = None;
        if !live {
            return;
        }
    }
}

/// Bytes of the stack `[top - size, top)` whose pages are resident, counted
/// from the deepest resident page up to the top: how deep the stack was ever
/// used (since it was mapped: a pooled stack reused from an earlier process
/// shows that one's depth too, so this is an upper bound).
pub(crate) fn stack_high_water(guard: crate::stack::Guard) -> usize {
    let lo = guard.lo + guard.len as usize;
    let size = guard.size as usize;
    let page = page_size();
    let pages = size / page;
    if pages == 0 {
        return 0;
    }
    let mut vec = vec![0u8; pages];
    // SAFETY: `[lo, lo + size)` is the stack's read/write mapping, page
    // aligned (stack.rs), and `vec` has one byte per page of it, as mincore
    // requires. mincore only reads the page tables.
    let rc = unsafe { libc::mincore(lo as *mut libc::c_void, size, vec.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    match vec.iter().position(|b| b & 1 == 1) {
        Some(first) => (pages - first) * page,
        None => 0,
    }
}

/// Resident bytes of a mapping `[addr, addr + len)` (page aligned).
pub(crate) fn resident(addr: usize, len: usize) -> usize {
    let page = page_size();
    let pages = len / page;
    if pages == 0 {
        return 0;
    }
    let mut vec = vec![0u8; pages];
    // SAFETY: the caller passes a live, page-aligned mapping; `vec` has one
    // byte per page; mincore only reads the page tables.
    let rc = unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    vec.iter().filter(|b| *b & 1 == 1).count() * page
}

fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize)
}

/// The stack bytes in use by `p` now: from its top to where its stack
/// pointer was when it last suspended (0 if it never ran).
pub(crate) fn stack_in_use(p: &Process) -> usize {
    let top = p.guard.top();
    let sp = p.parked_sp();
    if sp == 0 || sp > top {
        return 0;
    }
    top - sp
}

/// The stack in use of the running process (its own frame's address).
pub(crate) fn own_stack_in_use(p: &Process) -> usize {
    let here = 0u8;
    let sp = std::ptr::addr_of!(here) as usize;
    let top = p.guard.top();
    top.saturating_sub(sp).min(p.guard.size as usize)
}

/// The ancestors of `p` (parent first), as far as the chain is known: a
/// dead ancestor ends it (its own parent is not recorded anywhere).
pub(crate) fn ancestors(n: &NodeShared, p: &Process) -> Vec<Pid> {
    let mut v = Vec::new();
    let mut next = p.acct.parent;
    while let Some(pid) = next {
        if v.len() >= 64 || v.contains(&pid) {
            break;
        }
        v.push(pid);
        next = if n.is_ours(pid) {
            n.table.with(pid.serial(), |q| q.acct.parent).flatten()
        } else {
            None
        };
    }
    v
}

/// Relaxed load helper for the process counters.
pub(crate) fn load(c: &AtomicU64) -> u64 {
    c.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use crate::*;
    use std::time::Duration;

    /// An idle node's housekeeping threads (sampler, system monitor, the
    /// timer's checks) do not wake periodically: their rounds stay flat
    /// over an idle second (before: ~500 sampler rounds, ~100 timer checks
    /// and ~200 monitor samples a second), start again when a process
    /// runs, and the sampled time keeps counting the idle time.
    #[test]
    fn an_idle_node_s_housekeeping_sleeps_until_a_process_runs() {
        let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).unwrap();
        let s = node.shared().clone();
        let burst = || {
            node.run(|| {
                let me = self_pid();
                for i in 0..1_000u64 {
                    spawn(move || send(me, i));
                }
                for _ in 0..1_000 {
                    expect::<u64>();
                }
            })
            .unwrap();
        };
        burst();
        // A hang guard: settle, then count over one idle second (a little
        // slack for a loaded machine: a round is counted as it ends).
        std::thread::sleep(Duration::from_millis(400));
        let (r0, (_, sampled0)) = (s.sched.quiet.rounds(), s.stats.busy_ns());
        std::thread::sleep(Duration::from_secs(1));
        let (r1, (_, sampled1)) = (s.sched.quiet.rounds(), s.stats.busy_ns());
        assert!(
            r1 - r0 <= 5,
            "{} housekeeping rounds in an idle second",
            r1 - r0
        );
        // The sampler slept, yet the idle time is sampled time.
        assert!(
            sampled1 - sampled0 >= 900_000_000,
            "sampled {} ns over an idle second",
            sampled1 - sampled0
        );
        // A process that runs wakes them.
        let r2 = s.sched.quiet.rounds();
        node.run(|| {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(50) {
                yield_now();
            }
        })
        .unwrap();
        assert!(
            s.sched.quiet.rounds() - r2 >= 5,
            "the housekeepers did not look while a process ran"
        );
        burst();
        node.shutdown();
    }
}
