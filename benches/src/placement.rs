//! Where this machine put our CPUs: the cost of moving one cache line
//! between two of them.
//!
//! On the 2-vCPU virtual machines these benches run on, the host places
//! the two vCPUs either close together (a cache-line round trip of about
//! 50-60 ns) or far apart (about 320-330 ns), and the placement changes
//! between runs minutes apart. Every figure that shares data between two
//! workers follows it: `growth_callers` at C = 1,000 gave 1.1-1.2 M
//! calls/s near and 0.38-0.42 M far (docs/decisions.md, "The callers'
//! bimodal tail"). A bench that prints [`core_to_core_ns`] beside its
//! figures says which placement they were measured in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Round trips timed.
const ROUNDS: u64 = 200_000;

/// This thread's CPU mask.
fn mask() -> Option<libc::cpu_set_t> {
    // SAFETY: `cpu_set_t` is plain data, for which all zeroes is the
    // empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable `cpu_set_t` of the size passed;
    // pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    (rc == 0).then_some(set)
}

/// Sets this thread's CPU mask; `false` if the kernel refused.
fn set_mask(set: &libc::cpu_set_t) -> bool {
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed; pid 0 is
    // the calling thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(set), set) == 0 }
}

/// The first two CPUs in `set`, if it holds two.
fn two_cpus(set: &libc::cpu_set_t) -> Option<(usize, usize)> {
    // SAFETY: `CPU_ISSET` only reads `set`, at indices below `CPU_SETSIZE`.
    let mut cpus = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, set) });
    Some((cpus.next()?, cpus.next()?))
}

/// Pins the calling thread to `cpu` (below `CPU_SETSIZE`).
fn pin(cpu: usize) -> bool {
    // SAFETY: as in `mask`: an all-zeroes `cpu_set_t` is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below `CPU_SETSIZE` (it came from `two_cpus`), and
    // `set` is a valid, writable `cpu_set_t`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set_mask(&set)
}

/// Nanoseconds for one cache line to go from one CPU to another and back
/// (two threads, pinned to the first two CPUs this process may use, take
/// turns writing one atomic). `None` with fewer than two CPUs.
///
/// ```no_run
/// if let Some(ns) = graft_benches::core_to_core_ns() {
///     graft_benches::report("machine", "core_to_core_ns", "ns", ns);
/// }
/// ```
pub fn core_to_core_ns() -> Option<f64> {
    let before = mask()?;
    let (a, b) = two_cpus(&before)?;
    let turn = AtomicU64::new(0);
    let ns = std::thread::scope(|s| {
        let echo = s.spawn(|| {
            let pinned = pin(b);
            for i in 0..ROUNDS {
                while turn.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                turn.store(2 * i + 2, Ordering::Release);
            }
            pinned
        });
        let pinned = pin(a);
        let t = Instant::now();
        for i in 0..ROUNDS {
            turn.store(2 * i + 1, Ordering::Release);
            while turn.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / ROUNDS as f64;
        let echoed = echo.join().unwrap_or(false);
        // The calling thread runs where it ran before.
        set_mask(&before);
        (pinned && echoed).then_some(ns)
    });
    ns
}
