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
//!   free list when their process exits; spawn never maps on its hot path
//!   once the pool is warm.
//! * Each guard page splits a kernel mapping: a stack costs two entries of
//!   `vm.max_map_count` (default 65,530). [`ensure_map_count`] raises the
//!   limit when permitted (and logs it), and a failed slab mapping is
//!   reported as an error naming the limit, never a silent cap.
//!
//! This module and `coroutine.rs` hold all the unsafe code about stacks.

use crate::loom::Mutex;
use std::io;
use std::sync::Arc;

/// Pages that mark the bottom of every stack (no access).
const GUARD_PAGES: usize = 1;
/// Stacks mapped at once when the pool runs dry.
const STACKS_PER_SLAB: usize = 64;

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p <= 0 {
        4096
    } else {
        p as usize
    }
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
    fn map(size: usize, count: usize) -> io::Result<(Arc<Slab>, Vec<usize>)> {
        let page = page_size();
        let stride = size + GUARD_PAGES * page;
        let len = stride * count;
        // SAFETY: an anonymous private mapping at a kernel-chosen address has
        // no preconditions; MAP_NORESERVE keeps a million reserved-but-untouched
        // stacks from counting against overcommit.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let slab = Arc::new(Slab {
            addr: addr as usize,
            len,
        });
        let mut tops = Vec::with_capacity(count);
        for i in 0..count {
            let lo = slab.addr + i * stride + GUARD_PAGES * page;
            // SAFETY: [lo, lo+size) lies inside the mapping made above.
            let rc = unsafe {
                libc::mprotect(
                    lo as *mut libc::c_void,
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if rc != 0 {
                let err = io::Error::last_os_error();
                log::error!(
                    "graft: cannot map process stacks ({err}); each stack uses 2 of \
                     vm.max_map_count ({}): raise it (see graft::ensure_map_count)",
                    max_map_count().unwrap_or(0)
                );
                return Err(err);
            }
            tops.push(lo + size);
        }
        Ok((slab, tops))
    }
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

/// Free stacks by size, shared by all workers of one node.
#[derive(Debug, Default)]
pub(crate) struct StackPool {
    /// (size, free stacks of that size); a node uses one or two sizes, so a
    /// short vector beats a map.
    free: Mutex<Vec<(usize, Vec<(usize, Arc<Slab>)>)>>,
}

impl StackPool {
    pub(crate) fn new() -> Arc<StackPool> {
        Arc::new(StackPool::default())
    }

    /// A stack of at least `size` bytes (already rounded by [`round_size`]).
    pub(crate) fn get(self: &Arc<Self>, size: usize) -> io::Result<Stack> {
        {
            let mut free = self.free.lock();
            if let Some((_, list)) = free.iter_mut().find(|(s, _)| *s == size) {
                if let Some((top, slab)) = list.pop() {
                    return Ok(Stack {
                        top,
                        size,
                        slab,
                        pool: self.clone(),
                    });
                }
            }
        }
        let count = (4 * 1024 * 1024 / size).clamp(1, STACKS_PER_SLAB);
        let (slab, mut tops) = Slab::map(size, count)?;
        let top = tops.pop().expect("a slab holds at least one stack");
        let mut free = self.free.lock();
        let list = match free.iter_mut().position(|(s, _)| *s == size) {
            Some(i) => &mut free[i].1,
            None => {
                free.push((size, Vec::new()));
                &mut free.last_mut().expect("just pushed").1
            }
        };
        list.extend(tops.into_iter().map(|t| (t, slab.clone())));
        drop(free);
        Ok(Stack {
            top,
            size,
            slab,
            pool: self.clone(),
        })
    }

    fn give_back(&self, top: usize, size: usize, slab: Arc<Slab>) {
        let mut free = self.free.lock();
        if let Some((_, list)) = free.iter_mut().find(|(s, _)| *s == size) {
            list.push((top, slab));
        }
    }

    /// Drops every pooled stack (mappings go when their last stack does).
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
/// // Ten thousand processes fit in the default limit: nothing to do.
/// graft::ensure_map_count(10_000).unwrap();
/// ```
pub fn ensure_map_count(processes: usize) -> io::Result<()> {
    let needed = processes.saturating_mul(2) + 65_536;
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
        let pool = StackPool::new();
        let size = round_size(64 * 1024);
        let s = pool.get(size).unwrap();
        let top = s.top;
        // SAFETY: the byte just below `top` is inside the read/write region.
        unsafe { *((top - 1) as *mut u8) = 7 };
        drop(s);
        let again = pool.get(size).unwrap();
        assert_eq!(again.top, top, "a freed stack is handed out again");
    }
}
