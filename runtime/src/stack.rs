//! Process stacks: mmap'd, guarded, pooled.
//!
//! ```text
//!   slab (one mmap, `STACKS_PER_SLAB` stacks)
//!   +-------+-----------------+-------+-----------------+----
//!   | guard |  stack 0  <-sp  | guard |  stack 1  <-sp  | ...
//!   +-------+-----------------+-------+-----------------+----
//!   low                                                  high
//! ```
//!
//! * Every stack has a `PROT_NONE` guard page below it, so an overflow faults
//!   instead of corrupting the neighbour.
//! * Mapping a fresh stack costs ~16 µs here, a pooled one ~28 ns, so stacks
//!   are carved from slabs (one `mmap` for many stacks) and returned to a
//!   free list when their process exits. A refill thread keeps the free list
//!   of the node's default size stocked (mapping slabs and touching each
//!   stack's top page ahead of time). A spawn that outruns it maps a slab
//!   itself, but leaves each stack's guard to be installed, and its top page
//!   to be faulted in, when the process first runs ([`Stack::ensure_guard`]),
//!   on whichever worker runs it: the spawner pays one `mmap` per slab.
//! * Guard pages are installed with `MADV_GUARD_INSTALL` (Linux 6.13+), which
//!   marks them in the page tables without splitting the mapping: a slab of
//!   64 guarded stacks is one kernel mapping, so a million processes use
//!   ~16,000 of `vm.max_map_count`. On older kernels each guard is an
//!   `mprotect` that splits the mapping: a stack costs two entries of
//!   `vm.max_map_count` (default 65,530). [`ensure_map_count`] then raises
//!   the limit when permitted (and logs it), and a failed slab mapping is
//!   reported as an error naming the limit, never a silent cap.
//!
//! This module and `coroutine.rs` hold all the unsafe code about stacks.

use crate::loom::{Condvar, Mutex};
use std::io;
use std::sync::Arc;

/// Pages that mark the bottom of every stack (no access).
const GUARD_PAGES: usize = 1;
/// Stacks mapped at once when the pool runs dry.
const STACKS_PER_SLAB: usize = 64;
/// The refill thread keeps this many stacks of the default size ready...
const REFILL_HIGH: usize = 4096;
/// ...and is woken when fewer than this many are left.
const REFILL_LOW: usize = REFILL_HIGH / 2;

/// The page size (asked once: `sysconf` is a libc call on every spawn
/// otherwise).
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p <= 0 {
            4096
        } else {
            p as usize
        }
    })
}

/// Rounds a requested stack size up to whole pages (at least 16 KiB).
pub(crate) fn round_size(requested: usize) -> usize {
    let page = page_size();
    requested.max(16 * 1024).div_ceil(page) * page
}

/// One mmap'd region holding several stacks; unmapped when its pool is
/// dropped (a pool outlives every stack it handed out: see [`Stack`]).
#[derive(Debug)]
struct Slab {
    addr: usize,
    len: usize,
}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` describe a mapping made by `Slab::map`; its
        // pool is being dropped, so no stack from it is in use any more.
        unsafe {
            libc::munmap(self.addr as *mut libc::c_void, self.len);
        }
    }
}

impl Slab {
    /// Maps `count` stacks of `size` usable bytes, each above a guard page.
    /// With `eager` unset and guard regions available, the guard pages are
    /// left for [`Stack::ensure_guard`] (the free-list entries carry
    /// `UNGUARDED`); otherwise they are installed here, and with `eager` each
    /// stack's top page is faulted in too.
    fn map(size: usize, count: usize, eager: bool) -> io::Result<(Slab, Vec<usize>)> {
        let page = page_size();
        let stride = size + GUARD_PAGES * page;
        let len = stride * count;
        let guard_regions = guard_regions_supported();
        let prot = if guard_regions {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_NONE
        };
        // SAFETY: an anonymous private mapping at a kernel-chosen address has
        // no preconditions; MAP_NORESERVE keeps a million reserved-but-untouched
        // stacks from counting against overcommit.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(map_limit_error(io::Error::last_os_error()));
        }
        let slab = Slab {
            addr: addr as usize,
            len,
        };
        let mut tops = Vec::with_capacity(count);
        for i in 0..count {
            let guard = slab.addr + i * stride;
            let lo = guard + GUARD_PAGES * page;
            if guard_regions && !eager {
                tops.push((lo + size) | UNGUARDED);
                continue;
            }
            let rc = if guard_regions {
                install_guard(guard)
            } else {
                // SAFETY: [lo, lo+size) lies inside the mapping made above.
                unsafe {
                    libc::mprotect(
                        lo as *mut libc::c_void,
                        size,
                        libc::PROT_READ | libc::PROT_WRITE,
                    )
                }
            };
            if rc != 0 {
                return Err(map_limit_error(io::Error::last_os_error()));
            }
            if eager {
                // SAFETY: the word below the top lies in the read/write region
                // just made; nothing else uses this stack yet.
                unsafe { std::ptr::write_volatile((lo + size - 8) as *mut u64, 0) };
            }
            tops.push(lo + size);
        }
        Ok((slab, tops))
    }
}

/// `madvise` advice (Linux 6.13+) that turns pages into guard pages in the
/// page tables, without splitting the mapping.
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// Low bit of a free-list entry (a stack top, page aligned): the stack's
/// guard pages are not installed yet.
const UNGUARDED: usize = 1;

/// Installs the guard pages at `guard` (the bottom of a stack's stride, in a
/// slab this module mapped); 0 or -1 as `madvise` returns.
fn install_guard(guard: usize) -> libc::c_int {
    // SAFETY: the guard pages lie inside a slab mapped by `Slab::map` and
    // are never handed out as stack memory.
    unsafe {
        libc::madvise(
            guard as *mut libc::c_void,
            GUARD_PAGES * page_size(),
            MADV_GUARD_INSTALL,
        )
    }
}

/// Whether this kernel has guard regions (`MADV_GUARD_INSTALL`). With them a
/// whole slab of guarded stacks is one kernel mapping; without them each
/// guard page is an `mprotect` that splits the mapping (two entries of
/// `vm.max_map_count` per stack, and a slower spawn when the pool is cold).
pub(crate) fn guard_regions_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let page = page_size();
        // SAFETY: a fresh anonymous mapping of two pages, probed and unmapped
        // here; nothing else knows of it.
        unsafe {
            let a = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if a == libc::MAP_FAILED {
                return false;
            }
            let ok = libc::madvise(a, page, MADV_GUARD_INSTALL) == 0;
            libc::munmap(a, 2 * page);
            if !ok {
                log::info!(
                    "graft: no guard regions in this kernel (MADV_GUARD_INSTALL, Linux 6.13+): \
                     stack guard pages use mprotect, two kernel mappings per process"
                );
            }
            ok
        }
    })
}

/// Explains a failed stack mapping (logged once per OS process).
fn map_limit_error(err: io::Error) -> io::Error {
    static LOGGED: std::sync::Once = std::sync::Once::new();
    let msg = format!(
        "cannot map a process stack ({err}); each stack uses 2 of vm.max_map_count ({}): \
         raise it with NodeConfig::max_processes or graft::ensure_map_count",
        max_map_count().unwrap_or(0)
    );
    LOGGED.call_once(|| log::error!("graft: {msg}"));
    io::Error::new(err.kind(), msg)
}

/// A process stack: `[top - size, top)` is read/write, a guard page lies
/// below it. Dropping it returns it to its pool.
///
/// A stack points to its pool without a reference count (a shared count
/// would be a cache line that every spawn and exit on every core writes):
/// the pool must outlive its stacks. A node's pool lives in the node, which
/// drops every process (and so every stack) before itself; the generator
/// pool is a static.
#[derive(Debug)]
pub(crate) struct Stack {
    top: usize,
    size: usize,
    /// The guard pages are installed (see [`Stack::ensure_guard`]).
    guarded: bool,
    pool: *const StackPool,
}

// SAFETY: a `Stack` is a unique claim on a memory region plus a pointer to
// a `Sync` pool that outlives it (see above); moving it to another thread
// moves the claim.
unsafe impl Send for Stack {}

impl Stack {
    /// The guard page(s) below the stack, `[lo, hi)`, and the usable size:
    /// a fault there is this stack overflowing.
    pub(crate) fn guard(&self) -> (usize, usize, usize) {
        let hi = self.top - self.size;
        (hi - GUARD_PAGES * page_size(), hi, self.size)
    }

    /// Installs the guard pages if the stack came from a slab mapped without
    /// them. Must succeed before the stack runs anything.
    pub(crate) fn ensure_guard(&mut self) -> io::Result<()> {
        if !self.guarded {
            if install_guard(self.guard().0) != 0 {
                return Err(io::Error::last_os_error());
            }
            self.guarded = true;
        }
        Ok(())
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let entry = if self.guarded {
            self.top
        } else {
            self.top | UNGUARDED
        };
        // SAFETY: the pool outlives its stacks (type docs).
        unsafe { &*self.pool }.give_back(entry, self.size);
    }
}

// SAFETY: `base` is the top of a read/write region of `size` bytes and `limit`
// is its bottom minus the guard page; both are page aligned (hence aligned to
// STACK_ALIGNMENT), the region stays mapped while its pool lives (which
// outlives the stack), and no two live `Stack`s share a region (the pool
// hands each one out once).
unsafe impl corosensei::stack::Stack for Stack {
    fn base(&self) -> corosensei::stack::StackPointer {
        debug_assert!(self.guarded, "a stack runs only once guarded");
        corosensei::stack::StackPointer::new(self.top).expect("stack top is non-zero")
    }
    fn limit(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.top - self.size - GUARD_PAGES * page_size())
            .expect("stack limit is non-zero")
    }
}

/// Free-list shards: a thread uses its own shard first, so two cores
/// spawning and exiting at once rarely meet on a lock.
const SHARDS: usize = 8;

/// This thread's shard (threads get shards round-robin).
fn my_shard() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize =
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// Free stacks (tops) by size, in one shard.
#[derive(Debug, Default)]
struct Shard {
    /// (size, free tops); a node uses one or two sizes, so a short vector
    /// beats a map.
    free: Vec<(usize, Vec<usize>)>,
}

impl Shard {
    fn list(&mut self, size: usize) -> &mut Vec<usize> {
        match self.free.iter().position(|(s, _)| *s == size) {
            Some(i) => &mut self.free[i].1,
            None => {
                self.free.push((size, Vec::new()));
                &mut self.free.last_mut().expect("just pushed").1
            }
        }
    }
}

/// Free stacks by size, shared by all workers of one node.
#[derive(Debug, Default)]
pub(crate) struct StackPool {
    shards: [Mutex<Shard>; SHARDS],
    /// Every slab this pool mapped (unmapped when the pool drops).
    slabs: Mutex<Vec<Slab>>,
    /// Stacks of the default size free in all shards (refill trigger).
    free_default: std::sync::atomic::AtomicUsize,
    /// The size the refill thread stocks (0: no refill thread).
    default_size: usize,
    refill: Mutex<Refill>,
    refill_cv: Condvar,
}

#[derive(Debug, Default)]
struct Refill {
    wanted: bool,
    stop: bool,
}

impl StackPool {
    /// A pool whose refill thread (see [`StackPool::run_refill`]) stocks
    /// stacks of `default_size` bytes.
    pub(crate) fn new(default_size: usize) -> Arc<StackPool> {
        Arc::new(StackPool {
            default_size,
            ..StackPool::default()
        })
    }

    fn count(&self, size: usize, delta: isize) {
        if size == self.default_size {
            use std::sync::atomic::Ordering::Relaxed;
            if delta > 0 {
                self.free_default.fetch_add(delta as usize, Relaxed);
            } else {
                self.free_default.fetch_sub((-delta) as usize, Relaxed);
            }
        }
    }

    /// A guarded stack of at least `size` bytes (already rounded by
    /// [`round_size`]). The pool must outlive it (see [`Stack`]).
    pub(crate) fn get(self: &Arc<Self>, size: usize) -> io::Result<Stack> {
        let mut s = self.reserve(size)?;
        s.ensure_guard()?;
        Ok(s)
    }

    /// A stack of at least `size` bytes whose guard may not be installed
    /// yet: [`Stack::ensure_guard`] before running on it.
    pub(crate) fn reserve(self: &Arc<Self>, size: usize) -> io::Result<Stack> {
        let me = my_shard();
        let mut found = None;
        for k in 0..SHARDS {
            let mut shard = self.shards[(me + k) % SHARDS].lock();
            if let Some(top) = shard.list(size).pop() {
                found = Some(top);
                break;
            }
        }
        let pool: *const StackPool = Arc::as_ptr(self);
        if size == self.default_size {
            // Relaxed: the count only decides when to wake the refill thread.
            let left = self.free_default.load(std::sync::atomic::Ordering::Relaxed);
            if found.is_none() || left < REFILL_LOW {
                self.want_refill();
            }
        }
        let entry = match found {
            Some(entry) => {
                self.count(size, -1);
                entry
            }
            None => {
                let count = (4 * 1024 * 1024 / size).clamp(1, STACKS_PER_SLAB);
                let (slab, mut tops) = Slab::map(size, count, false)?;
                let entry = tops.pop().expect("a slab holds at least one stack");
                self.add_free(me, size, slab, tops);
                entry
            }
        };
        Ok(Stack {
            top: entry & !UNGUARDED,
            size,
            guarded: entry & UNGUARDED == 0,
            pool,
        })
    }

    fn add_free(&self, shard: usize, size: usize, slab: Slab, tops: Vec<usize>) {
        self.slabs.lock().push(slab);
        self.count(size, tops.len() as isize);
        self.shards[shard].lock().list(size).extend(tops);
    }

    fn give_back(&self, top: usize, size: usize) {
        self.shards[my_shard()].lock().list(size).push(top);
        self.count(size, 1);
    }

    fn want_refill(&self) {
        let mut r = self.refill.lock();
        if !r.wanted {
            r.wanted = true;
            drop(r);
            self.refill_cv.notify_one();
        }
    }

    /// The refill thread's loop: stock `REFILL_HIGH` stacks of the default
    /// size whenever asked, until [`StackPool::stop`]. It spreads them over
    /// the shards.
    pub(crate) fn run_refill(&self) {
        let size = self.default_size;
        let count = (4 * 1024 * 1024 / size).clamp(1, STACKS_PER_SLAB);
        let mut next_shard = 0;
        loop {
            {
                let mut r = self.refill.lock();
                while !r.wanted && !r.stop {
                    r = self.refill_cv.wait(r);
                }
                if r.stop {
                    return;
                }
            }
            while self.free_default.load(std::sync::atomic::Ordering::Relaxed) < REFILL_HIGH {
                match Slab::map(size, count, true) {
                    Ok((slab, tops)) => {
                        self.add_free(next_shard, size, slab, tops);
                        next_shard = (next_shard + 1) % SHARDS;
                    }
                    Err(_) => break, // logged by map_limit_error; spawn reports it
                }
                if self.refill.lock().stop {
                    return;
                }
            }
            self.refill.lock().wanted = false;
        }
    }

    /// Stops the refill thread.
    pub(crate) fn stop(&self) {
        self.refill.lock().stop = true;
        self.refill_cv.notify_all();
    }
}

/// The kernel's `vm.max_map_count`, if readable.
pub fn max_map_count() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Makes room in `vm.max_map_count` for `processes` live processes (each
/// stack is two kernel mappings: the stack and its guard page).
///
/// Raises the limit when the process may (root), logging what it did; when it
/// may not, logs how to raise it by hand and returns the error. Never lowers
/// the limit.
///
/// # Errors
///
/// The I/O error from writing `/proc/sys/vm/max_map_count`.
///
/// # Examples
///
/// ```
/// // A thousand processes fit in the default limit: nothing to do.
/// graft::ensure_map_count(1_000).unwrap();
/// ```
pub fn ensure_map_count(processes: usize) -> io::Result<()> {
    if guard_regions_supported() {
        return Ok(()); // guard pages do not split mappings: one per slab
    }
    let needed = processes.saturating_mul(2) + 4096;
    let current = max_map_count().unwrap_or(usize::MAX);
    if current >= needed {
        return Ok(());
    }
    match std::fs::write("/proc/sys/vm/max_map_count", needed.to_string()) {
        Ok(()) => {
            log::info!(
                "graft: raised vm.max_map_count from {current} to {needed} for {processes} \
                 processes (two mappings per guarded stack)"
            );
            Ok(())
        }
        Err(e) => {
            log::warn!(
                "graft: vm.max_map_count is {current}, {processes} processes need {needed}; \
                 cannot raise it ({e}): run `sysctl -w vm.max_map_count={needed}` as root"
            );
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_reused_and_writable() {
        let size = round_size(64 * 1024);
        let pool = StackPool::new(0);
        let s = pool.get(size).unwrap();
        let top = s.top;
        // SAFETY: the byte just below `top` is inside the read/write region.
        unsafe { *((top - 1) as *mut u8) = 7 };
        drop(s);
        let again = pool.get(size).unwrap();
        assert_eq!(again.top, top, "a freed stack is handed out again");
    }

    #[test]
    fn a_reserved_stack_is_guarded_before_use() {
        let size = round_size(64 * 1024);
        let pool = StackPool::new(0);
        let mut s = pool.reserve(size).unwrap();
        assert_eq!(
            s.guarded,
            !guard_regions_supported(),
            "a spawner-mapped slab leaves guards for later only with guard regions"
        );
        s.ensure_guard().unwrap();
        assert!(s.guarded);
        let top = s.top;
        drop(s);
        // Handed out again, it remembers it is guarded.
        let again = pool.reserve(size).unwrap();
        assert_eq!(again.top, top);
        assert!(again.guarded);
        // An unguarded one goes back unguarded.
        let other = pool.reserve(size).unwrap();
        let (top2, guarded2) = (other.top, other.guarded);
        drop(other);
        let back = pool.reserve(size).unwrap();
        assert_eq!((back.top, back.guarded), (top2, guarded2));
    }
}
