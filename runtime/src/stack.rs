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
//!   stack's top page ahead of time), so spawn neither maps nor faults on its
//!   path; it maps itself only if it outruns the refill thread.
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

/// One mmap'd region holding several stacks; unmapped when the last stack
/// carved from it is gone (the pool and every live stack hold an `Arc`).
#[derive(Debug)]
struct Slab {
    addr: usize,
    len: usize,
}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` describe a mapping made by `Slab::map` that no
        // stack uses any more (every stack holds an `Arc<Slab>`).
        unsafe {
            libc::munmap(self.addr as *mut libc::c_void, self.len);
        }
    }
}

impl Slab {
    /// Maps `count` stacks of `size` usable bytes, each above a guard page.
    fn map(size: usize, count: usize, prefault: bool) -> io::Result<(Arc<Slab>, Vec<usize>)> {
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
        let slab = Arc::new(Slab {
            addr: addr as usize,
            len,
        });
        let mut tops = Vec::with_capacity(count);
        for i in 0..count {
            let guard = slab.addr + i * stride;
            let lo = guard + GUARD_PAGES * page;
            let rc = if guard_regions {
                // SAFETY: the guard pages lie inside the mapping made above
                // and hold nothing yet.
                unsafe {
                    libc::madvise(
                        guard as *mut libc::c_void,
                        GUARD_PAGES * page,
                        MADV_GUARD_INSTALL,
                    )
                }
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
            if prefault {
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
/// below it.
#[derive(Debug)]
pub(crate) struct Stack {
    top: usize,
    size: usize,
    slab: Arc<Slab>,
    pool: Arc<StackPool>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.pool.give_back(self.top, self.size, self.slab.clone());
    }
}

// SAFETY: `base` is the top of a read/write region of `size` bytes and `limit`
// is its bottom minus the guard page; both are page aligned (hence aligned to
// STACK_ALIGNMENT), the region stays mapped while the `Arc<Slab>` lives, and
// no two live `Stack`s share a region (the pool hands each one out once).
unsafe impl corosensei::stack::Stack for Stack {
    fn base(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.top).expect("stack top is non-zero")
    }
    fn limit(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.top - self.size - GUARD_PAGES * page_size())
            .expect("stack limit is non-zero")
    }
}

/// Free stacks of one size: (top, the slab it lies in).
type FreeList = Vec<(usize, Arc<Slab>)>;

/// Free stacks by size, shared by all workers of one node.
#[derive(Debug, Default)]
pub(crate) struct StackPool {
    /// (size, free stacks of that size); a node uses one or two sizes, so a
    /// short vector beats a map.
    free: Mutex<Vec<(usize, FreeList)>>,
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

    /// A stack of at least `size` bytes (already rounded by [`round_size`]).
    pub(crate) fn get(self: &Arc<Self>, size: usize) -> io::Result<Stack> {
        let popped = {
            let mut free = self.free.lock();
            let list = free.iter_mut().find(|(s, _)| *s == size).map(|(_, l)| l);
            match list {
                Some(list) => {
                    let left = list.len();
                    list.pop().map(|t| (t, left))
                }
                None => None,
            }
        };
        if size == self.default_size && popped.as_ref().is_none_or(|(_, left)| *left < REFILL_LOW) {
            self.want_refill();
        }
        if let Some(((top, slab), _)) = popped {
            return Ok(Stack {
                top,
                size,
                slab,
                pool: self.clone(),
            });
        }
        let count = (4 * 1024 * 1024 / size).clamp(1, STACKS_PER_SLAB);
        let (slab, mut tops) = Slab::map(size, count, false)?;
        let top = tops.pop().expect("a slab holds at least one stack");
        self.add_free(size, slab.clone(), tops);
        Ok(Stack {
            top,
            size,
            slab,
            pool: self.clone(),
        })
    }

    fn add_free(&self, size: usize, slab: Arc<Slab>, tops: Vec<usize>) -> usize {
        let mut free = self.free.lock();
        let list = match free.iter_mut().position(|(s, _)| *s == size) {
            Some(i) => &mut free[i].1,
            None => {
                free.push((size, Vec::new()));
                &mut free.last_mut().expect("just pushed").1
            }
        };
        list.extend(tops.into_iter().map(|t| (t, slab.clone())));
        list.len()
    }

    fn give_back(&self, top: usize, size: usize, slab: Arc<Slab>) {
        let mut free = self.free.lock();
        if let Some((_, list)) = free.iter_mut().find(|(s, _)| *s == size) {
            list.push((top, slab));
        }
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
    /// size whenever asked, until [`StackPool::stop`].
    pub(crate) fn run_refill(&self) {
        let size = self.default_size;
        let count = (4 * 1024 * 1024 / size).clamp(1, STACKS_PER_SLAB);
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
            loop {
                match Slab::map(size, count, true) {
                    Ok((slab, tops)) => {
                        if self.add_free(size, slab, tops) >= REFILL_HIGH {
                            break;
                        }
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

    /// Stops the refill thread and drops every pooled stack (mappings go
    /// when their last stack does).
    pub(crate) fn stop(&self) {
        self.refill.lock().stop = true;
        self.refill_cv.notify_all();
    }

    /// Drops every pooled stack.
    pub(crate) fn clear(&self) {
        self.free.lock().clear();
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
}
