//! Per-process accounting and node statistics (the data under
//! [`process_info`](crate::process_info), [`observe`](crate::observe) and
//! the web observer).
//!
//! # Cost
//!
//! After each resume the worker reads a cycle counter once (`rdtsc` on
//! x86-64, a monotonic clock elsewhere): the ticks since its previous
//! reading (the end of the previous resume, or the end of an idle wait) are
//! the run's time, added to the process's run time and the worker's busy
//! time; the process's run count is bumped. Each counter has one writer
//! (the worker holding the process, or the worker itself), so a plain load
//! and store suffice: no atomic read-modify-write, no shared cache line.
//! Ticks become nanoseconds only when someone asks (the tick rate is
//! measured against `Instant` over the node's life).
//!
//! Everything else (ancestors, stack high-water marks, mailbox lengths) is
//! computed when asked, never on a hot path.

use crate::node::NodeShared;
use crate::pid::Pid;
use crate::process::Process;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::OnceLock;
use std::time::Instant;

/// A cycle-counter reading (see [`ticks_to_ns`]).
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions; every x86-64 CPU has it.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        epoch().1.elapsed().as_nanos() as u64
    }
}

/// The reference point the tick rate is measured from.
fn epoch() -> &'static (u64, Instant) {
    static EPOCH: OnceLock<(u64, Instant)> = OnceLock::new();
    EPOCH.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: as in `ticks`.
            (unsafe { std::arch::x86_64::_rdtsc() }, Instant::now())
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            (0, Instant::now())
        }
    })
}

/// Starts the tick clock (at node start, so that the rate is measured over
/// a long span by the time anyone asks).
pub(crate) fn start_clock() {
    let _ = epoch();
}

/// Nanoseconds per tick, measured since the clock started (at least 5 ms
/// are waited for on the first ask, for a usable figure).
fn ns_per_tick() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        let (t0, i0) = *epoch();
        let mut el = i0.elapsed();
        if el.as_millis() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(5) - el);
            el = i0.elapsed();
        }
        let dt = ticks().saturating_sub(t0).max(1);
        el.as_nanos() as f64 / dt as f64
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        1.0
    }
}

/// Converts a tick count to nanoseconds.
pub(crate) fn ticks_to_ns(t: u64) -> u64 {
    (t as f64 * ns_per_tick()) as u64
}

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
    /// Ticks it ran.
    pub(crate) run_ticks: AtomicU64,
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
            run_ticks: AtomicU64::new(0),
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

    /// One resume that took `t` ticks (called by the worker holding it).
    #[inline(always)]
    pub(crate) fn ran(&self, t: u64) {
        bump(&self.runs, 1);
        bump(&self.run_ticks, t);
    }
}

/// Per-worker and node-wide counters.
#[derive(Debug)]
pub(crate) struct NodeStats {
    pub(crate) started: Instant,
    /// Ticks each worker spent running processes.
    busy: Vec<crossbeam_utils::CachePadded<AtomicU64>>,
    /// Per worker: the tick of its last lap (only that worker writes it).
    last: Vec<crossbeam_utils::CachePadded<AtomicU64>>,
    /// Supervisor restarts (see [`observe::note_restart`](crate::observe::note_restart)).
    pub(crate) restarts: AtomicU64,
    /// Processes that crashed (reported).
    pub(crate) crashes: AtomicU64,
    /// Where the web observer listens, once it does.
    pub(crate) observer: OnceLock<std::net::SocketAddr>,
    /// Utilisation samples: (time, ticks, busy ticks per worker), newest last.
    pub(crate) samples: parking_lot::Mutex<std::collections::VecDeque<(Instant, u64, Vec<u64>)>>,
}

impl NodeStats {
    pub(crate) fn new(workers: usize) -> NodeStats {
        start_clock();
        NodeStats {
            started: Instant::now(),
            busy: (0..workers)
                .map(|_| crossbeam_utils::CachePadded::new(AtomicU64::new(0)))
                .collect(),
            last: (0..workers)
                .map(|_| crossbeam_utils::CachePadded::new(AtomicU64::new(ticks())))
                .collect(),
            restarts: AtomicU64::new(0),
            crashes: AtomicU64::new(0),
            observer: OnceLock::new(),
            samples: parking_lot::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// Worker `w` finished a resume: the ticks since its previous lap (the
    /// end of its previous resume, or the end of its last idle wait) are
    /// busy time, charged to the process just run, which is returned. One
    /// counter read per resume (a second one around the resume measured
    /// about 5 ns more per hop on ring): the scheduler's own work between
    /// two runs is charged to the second.
    #[inline(always)]
    pub(crate) fn lap(&self, w: usize) -> u64 {
        let now = ticks();
        let (Some(busy), Some(last)) = (self.busy.get(w), self.last.get(w)) else {
            return 0;
        };
        let ran = now.wrapping_sub(last.load(std::sync::atomic::Ordering::Relaxed));
        last.store(now, std::sync::atomic::Ordering::Relaxed);
        bump(busy, ran);
        ran
    }

    /// Worker `w` stops waiting for work: idle time is not charged.
    #[inline]
    pub(crate) fn idle_ended(&self, w: usize) {
        if let Some(last) = self.last.get(w) {
            last.store(ticks(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Busy ticks of every worker so far.
    pub(crate) fn busy_ticks(&self) -> Vec<u64> {
        self.busy
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    /// Records a utilisation sample (the observer calls this every second);
    /// keeps `keep` samples.
    pub(crate) fn sample(&self, keep: usize) {
        let now = (Instant::now(), ticks(), self.busy_ticks());
        let mut s = self.samples.lock();
        // Several askers (the observer's clock, remote observers asking
        // for statistics): keep samples at least half a second apart.
        if s.back()
            .is_some_and(|b| now.0.duration_since(b.0) < std::time::Duration::from_millis(500))
        {
            return;
        }
        s.push_back(now);
        while s.len() > keep {
            s.pop_front();
        }
    }

    /// Busy fraction per worker between two readings (wall ticks, busy).
    pub(crate) fn utilisation(a: (u64, &[u64]), b: (u64, &[u64])) -> Vec<f64> {
        let wall = b.0.saturating_sub(a.0).max(1) as f64;
        a.1.iter()
            .zip(b.1)
            .map(|(x, y)| (y.saturating_sub(*x) as f64 / wall).clamp(0.0, 1.0))
            .collect()
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
    let top = p.guard.lo + p.guard.len as usize + p.guard.size as usize;
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
    let top = p.guard.lo + p.guard.len as usize + p.guard.size as usize;
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
