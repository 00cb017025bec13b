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
//!   of the node's default size stocked; a spawn maps a slab itself only if
//!   it outruns the refill thread, and never faults a stack in: the
//!   coroutine, whose first frame touches the stack, is made when the
//!   process first runs (`coroutine.rs`), so a fresh stack's first page is
//!   faulted in by the worker that runs it. (The refill thread used to touch
//!   each stack's top page ahead of time: in a spawn burst on 2 cores it was
//!   a third busy thread competing with the spawner, whose spawns took
//!   1.8 µs instead of 1.2.)
//! * Guard pages are installed with `MADV_GUARD_INSTALL` (Linux 6.13+), which
//!   marks them in the page tables without splitting the mapping, all of a
//!   slab's in one `process_madvise` call where the kernel has it (6.15+).
//!   Only the lowest guard of a slab is an `mprotect`ed page: it keeps the
//!   kernel from merging neighbouring slabs into one mapping, whose every
//!   growth (a new slab) would lock it against the page faults of processes
//!   starting on their stacks (spawn: 2.2-2.4 µs merged, 1.7-2.1 apart,
//!   same minute). A slab of 64 guarded stacks is then two kernel mappings, so a
//!   million processes use ~32,000 of `vm.max_map_count`. On older kernels each guard is an
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
/// Free stacks each shard keeps resident by default (see [`Trim`]); with
/// the threads of a node on their own shards, as many as the refill
/// thread keeps ready in all.
const TRIM_KEEP: usize = REFILL_HIGH / SHARDS;

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

/// The largest stack a process or a generator may ask for.
pub(crate) const MAX_STACK: usize = 1 << 30;

/// Rounds a requested stack size up to whole pages (at least 16 KiB);
/// `None` above [`MAX_STACK`].
pub(crate) fn round_size(requested: usize) -> Option<usize> {
    if requested > MAX_STACK {
        return None;
    }
    let page = page_size();
    Some(requested.max(16 * 1024).div_ceil(page) * page)
}

/// The error for a stack size over [`MAX_STACK`].
pub(crate) fn too_big(requested: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("a stack of {requested} bytes (at most {MAX_STACK})"),
    )
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
    fn map(size: usize, count: usize) -> io::Result<(Slab, Vec<usize>)> {
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
        let guards: Vec<usize> = (0..count).map(|i| slab.addr + i * stride).collect();
        if guard_regions {
            // The lowest guard is a real PROT_NONE page: it keeps the kernel
            // from merging this slab with the one mapped next to it (see
            // the module docs).
            // SAFETY: the first guard lies inside the mapping made above.
            let rc = unsafe {
                libc::mprotect(
                    slab.addr as *mut libc::c_void,
                    GUARD_PAGES * page,
                    libc::PROT_NONE,
                )
            };
            if rc != 0 {
                return Err(map_limit_error(io::Error::last_os_error()));
            }
            install_guards(&guards[1..])?;
        }
        let mut tops = Vec::with_capacity(count);
        for &guard in &guards {
            let lo = guard + GUARD_PAGES * page;
            if !guard_regions {
                // SAFETY: [lo, lo+size) lies inside the mapping made above.
                let rc = unsafe {
                    libc::mprotect(
                        lo as *mut libc::c_void,
                        size,
                        libc::PROT_READ | libc::PROT_WRITE,
                    )
                };
                if rc != 0 {
                    return Err(map_limit_error(io::Error::last_os_error()));
                }
            }
            tops.push(lo + size);
        }
        Ok((slab, tops))
    }
}

/// `madvise` advice (Linux 6.13+) that turns pages into guard pages in the
/// page tables, without splitting the mapping.
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// `process_madvise`'s name for the calling process (Linux 6.15+).
const PIDFD_SELF: libc::c_int = -10_000;

/// How this kernel lets us advise many ranges at once: `PIDFD_SELF`, a pidfd
/// of our own (kept open for the life of the OS process), or not at all.
fn self_pidfd() -> Option<libc::c_int> {
    static FD: std::sync::OnceLock<Option<libc::c_int>> = std::sync::OnceLock::new();
    *FD.get_or_init(|| {
        if batch_guard_install(PIDFD_SELF, &[]).is_ok() {
            return Some(PIDFD_SELF);
        }
        // SAFETY: pidfd_open of our own pid has no memory-safety preconditions.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
        if fd < 0 {
            return None;
        }
        let fd = fd as libc::c_int;
        if batch_guard_install(fd, &[]).is_ok() {
            Some(fd)
        } else {
            // SAFETY: `fd` was opened just above and is used nowhere else.
            unsafe { libc::close(fd) };
            None
        }
    })
}

/// One `process_madvise(MADV_GUARD_INSTALL)` call over `guards` (an empty
/// list probes whether the kernel takes the call).
fn batch_guard_install(pidfd: libc::c_int, guards: &[usize]) -> io::Result<()> {
    let len = GUARD_PAGES * page_size();
    let iov: Vec<libc::iovec> = guards
        .iter()
        .map(|&g| libc::iovec {
            iov_base: g as *mut libc::c_void,
            iov_len: len,
        })
        .collect();
    // SAFETY: `iov` describes guard pages inside a slab `Slab::map` just
    // mapped (or nothing); the kernel only reads the vector.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            pidfd,
            iov.as_ptr(),
            iov.len(),
            MADV_GUARD_INSTALL,
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if rc as usize != len * guards.len() {
        return Err(io::Error::other(
            "process_madvise advised part of the guards",
        ));
    }
    Ok(())
}

/// Installs the guard pages at each of `guards` (inside a slab just mapped).
///
/// One `process_madvise` call for the whole slab where the kernel has it,
/// instead of one `madvise` per stack: the calls take the address-space
/// lock, which a spawner growing its heap (`mprotect`) waits for, so fewer
/// calls mean fewer waits as well as fewer syscalls.
fn install_guards(guards: &[usize]) -> io::Result<()> {
    if let Some(fd) = self_pidfd() {
        if batch_guard_install(fd, guards).is_ok() {
            return Ok(());
        }
    }
    for &g in guards {
        // SAFETY: the guard pages lie inside a slab just mapped and hold
        // nothing yet.
        let rc = unsafe {
            libc::madvise(
                g as *mut libc::c_void,
                GUARD_PAGES * page_size(),
                MADV_GUARD_INSTALL,
            )
        };
        if rc != 0 {
            return Err(map_limit_error(io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Whether this kernel has guard regions (`MADV_GUARD_INSTALL`). With them a
/// whole slab of guarded stacks is two kernel mappings; without them each
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
    pool: *const StackPool,
}

// SAFETY: a `Stack` is a unique claim on a memory region plus a pointer to
// a `Sync` pool that outlives it (see above); moving it to another thread
// moves the claim.
unsafe impl Send for Stack {}

/// Where a stack's guard pages lie, and the stack's usable size: a fault in
/// `[lo, lo + len)` is that stack overflowing. (Compact: every process
/// entry keeps one.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Guard {
    pub(crate) lo: usize,
    pub(crate) len: u32,
    pub(crate) size: u32,
}

impl Guard {
    /// One past the stack's highest byte (where its first frame begins).
    pub(crate) fn top(&self) -> usize {
        self.lo + self.len as usize + self.size as usize
    }

    /// Whether a fault at `addr` hit these guard pages.
    pub(crate) fn contains(&self, addr: usize) -> bool {
        (self.lo..self.lo + self.len as usize).contains(&addr)
    }
}

impl Stack {
    /// The guard page(s) below the stack: a fault there is this stack
    /// overflowing.
    pub(crate) fn guard(&self) -> Guard {
        let len = GUARD_PAGES * page_size();
        Guard {
            lo: self.top - self.size - len,
            len: len as u32,
            size: u32::try_from(self.size).unwrap_or(u32::MAX),
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the pool outlives its stacks (type docs).
        unsafe { &*self.pool }.give_back(self.top, self.size);
    }
}

// SAFETY: `base` is the top of a read/write region of `size` bytes and `limit`
// is its bottom minus the guard page; both are page aligned (hence aligned to
// STACK_ALIGNMENT), the region stays mapped while its pool lives (which
// outlives the stack), and no two live `Stack`s share a region (the pool
// hands each one out once).
unsafe impl corosensei::stack::Stack for Stack {
    fn base(&self) -> corosensei::stack::StackPointer {
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

/// The free stacks of one size in one shard.
///
/// `hot` is a LIFO of stacks whose pages may still be resident (a spawn
/// after an exit gets the one freed last, its pages still in cache); `cold`
/// holds stacks whose pages were given back to the kernel (see
/// [`StackPool::trim`]), taken only when `hot` is empty. `low` is the
/// least length `hot` had since the last trim: its bottom `low` entries sat
/// unused all that time.
#[derive(Debug, Default)]
struct FreeList {
    size: usize,
    hot: Vec<usize>,
    cold: Vec<usize>,
    low: usize,
}

impl FreeList {
    fn pop(&mut self) -> Option<usize> {
        match self.hot.pop() {
            Some(top) => {
                self.low = self.low.min(self.hot.len());
                Some(top)
            }
            None => self.cold.pop(),
        }
    }
}

/// Free stacks by size, in one shard.
#[derive(Debug, Default)]
struct Shard {
    /// A node uses one or two sizes, so a short vector beats a map.
    free: Vec<FreeList>,
}

impl Shard {
    fn list(&mut self, size: usize) -> &mut FreeList {
        match self.free.iter().position(|l| l.size == size) {
            Some(i) => &mut self.free[i],
            None => {
                self.free.push(FreeList {
                    size,
                    ..FreeList::default()
                });
                self.free.last_mut().expect("just pushed")
            }
        }
    }
}

/// When a pool gives the pages of its free stacks back to the kernel: each
/// shard keeps the `keep` stacks freed last resident, and gives back the
/// pages of the others once they have sat unused for `after` (between one
/// and two periods of `after`). `after` zero: never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trim {
    pub(crate) keep: usize,
    pub(crate) after: std::time::Duration,
}

impl Default for Trim {
    fn default() -> Trim {
        Trim {
            keep: TRIM_KEEP,
            after: std::time::Duration::from_secs(2),
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
    /// When free stacks' pages go back to the kernel (by the refill
    /// thread; a pool without one never trims).
    trim: Trim,
}

#[derive(Debug, Default)]
struct Refill {
    wanted: bool,
    stop: bool,
    /// A shard holds more than `trim.keep` hot stacks: the refill thread
    /// starts its trim ticks.
    trim: bool,
}

impl StackPool {
    /// A pool whose refill thread (see [`StackPool::run_refill`]) stocks
    /// stacks of `default_size` bytes.
    pub(crate) fn new(default_size: usize) -> Arc<StackPool> {
        StackPool::with_trim(default_size, Trim::default())
    }

    /// [`StackPool::new`], giving free stacks' pages back as `trim` says.
    pub(crate) fn with_trim(default_size: usize, trim: Trim) -> Arc<StackPool> {
        Arc::new(StackPool {
            default_size,
            trim,
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

    /// A stack of at least `size` bytes (already rounded by [`round_size`]).
    /// The pool must outlive it (see [`Stack`]).
    pub(crate) fn get(self: &Arc<Self>, size: usize) -> io::Result<Stack> {
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
        if let Some(top) = found {
            self.count(size, -1);
            return Ok(Stack { top, size, pool });
        }
        let count = (4 * 1024 * 1024 / size).clamp(1, STACKS_PER_SLAB);
        let (slab, mut tops) = Slab::map(size, count)?;
        let top = tops.pop().expect("a slab holds at least one stack");
        self.add_free(me, size, slab, tops);
        Ok(Stack { top, size, pool })
    }

    fn add_free(&self, shard: usize, size: usize, slab: Slab, tops: Vec<usize>) {
        self.slabs.lock().push(slab);
        self.count(size, tops.len() as isize);
        // Never touched: nothing resident, so they go behind the hot ones.
        self.shards[shard].lock().list(size).cold.extend(tops);
    }

    fn give_back(&self, top: usize, size: usize) {
        let hot = {
            let mut shard = self.shards[my_shard()].lock();
            let list = shard.list(size);
            list.hot.push(top);
            list.hot.len()
        };
        self.count(size, 1);
        if hot == self.trim.keep + 1 && !self.trim.after.is_zero() {
            self.want_trim();
        }
    }

    /// Starts the refill thread's trim ticks (once past the mark).
    #[cold]
    fn want_trim(&self) {
        self.ask_refill_thread(|r| &mut r.trim);
    }

    /// One trim tick: in every shard, the hot stacks that sat unused since
    /// the last tick beyond the `keep` freed last give their pages back
    /// (`MADV_DONTNEED`; the mapping and the guard pages stay) and become
    /// cold. No lock is held while the kernel works: the stacks are taken
    /// out of their list meanwhile. Returns whether a shard still holds more
    /// than `keep` hot stacks (then the ticks go on).
    pub(crate) fn trim_idle(&self) -> bool {
        let keep = self.trim.keep;
        let (mut more, mut released) = (false, false);
        for shard in &self.shards {
            let taken: Vec<(usize, Vec<usize>)> = {
                let mut g = shard.lock();
                g.free
                    .iter_mut()
                    .map(|l| {
                        let idle = l.low.saturating_sub(keep);
                        let out: Vec<usize> = l.hot.drain(..idle).collect();
                        l.low = l.hot.len();
                        more |= l.hot.len() > keep;
                        (l.size, out)
                    })
                    .collect()
            };
            for (size, mut tops) in taken {
                if tops.is_empty() {
                    continue;
                }
                release(&mut tops, size);
                released = true;
                shard.lock().list(size).cold.extend(tops);
            }
        }
        if released {
            trim_heap();
        }
        more
    }

    fn want_refill(&self) {
        self.ask_refill_thread(|r| &mut r.wanted);
    }

    /// Sets one of the refill thread's flags, waking it if it was clear.
    fn ask_refill_thread(&self, flag: impl FnOnce(&mut Refill) -> &mut bool) {
        let mut r = self.refill.lock();
        let f = flag(&mut r);
        if !*f {
            *f = true;
            drop(r);
            self.refill_cv.notify_one();
        }
    }

    /// The refill thread's loop: stock `REFILL_HIGH` stacks of the default
    /// size whenever asked, until [`StackPool::stop`]. It spreads them over
    /// the shards. Between refills it runs the trim ticks ([`Trim`]) while
    /// some shard holds more hot stacks than it keeps.
    pub(crate) fn run_refill(&self) {
        let size = self.default_size;
        let count = (4 * 1024 * 1024 / size).clamp(1, STACKS_PER_SLAB);
        let mut next_shard = 0;
        let mut next_trim: Option<std::time::Instant> = None;
        loop {
            let refill = {
                let mut r = self.refill.lock();
                loop {
                    if r.stop {
                        return;
                    }
                    if std::mem::take(&mut r.trim) && next_trim.is_none() {
                        next_trim = Some(std::time::Instant::now() + self.trim.after);
                    }
                    if r.wanted {
                        break true;
                    }
                    match next_trim {
                        None => r = self.refill_cv.wait(r),
                        Some(at) => {
                            let now = std::time::Instant::now();
                            if now >= at {
                                break false;
                            }
                            r = self.refill_cv.wait_timeout(r, at - now);
                        }
                    }
                }
            };
            if !refill {
                next_trim = self
                    .trim_idle()
                    .then(|| std::time::Instant::now() + self.trim.after);
                continue;
            }
            while self.free_default.load(std::sync::atomic::Ordering::Relaxed) < REFILL_HIGH {
                match Slab::map(size, count) {
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

    /// Bytes mapped for stacks (guard pages included), and of them resident
    /// (measured with `mincore` when `resident` is asked for).
    pub(crate) fn mapped(&self, resident: bool) -> (usize, usize) {
        let slabs = self.slabs.lock();
        let mapped = slabs.iter().map(|s| s.len).sum();
        let res = if resident {
            slabs
                .iter()
                .map(|s| crate::stats::resident(s.addr, s.len))
                .sum()
        } else {
            0
        };
        (mapped, res)
    }

    /// Stops the refill thread.
    pub(crate) fn stop(&self) {
        self.refill.lock().stop = true;
        self.refill_cv.notify_all();
    }
}

/// Gives the heap's free pages back to the kernel, after an exit wave (a
/// trim that released stacks): the processes that ended freed their
/// entries, mailboxes and messages too, and glibc keeps freed heap memory
/// mapped. After 100,000 processes exited, a test binary held 72 MB more
/// than at its start with the stacks trimmed, 15 MB with this as well; the
/// call took 4.9 ms then, 0.2 ms on the next trim (on this thread; glibc
/// takes each arena's lock while it walks that arena).
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` has no preconditions: it takes the allocator's
    // own locks, and only returns pages that hold no allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Gives the pages of the free stacks at `tops` (of `size` bytes) back to
/// the kernel; their next use faults fresh zeroed pages in. Neighbouring
/// stacks of a slab go in one `madvise` call, guard pages included (a guard
/// stays a guard through `MADV_DONTNEED`: guard regions are kept by zaps,
/// and `PROT_NONE` pages hold nothing to drop).
fn release(tops: &mut [usize], size: usize) {
    let guard = GUARD_PAGES * page_size();
    tops.sort_unstable();
    let mut i = 0;
    while i < tops.len() {
        let lo = tops[i] - size;
        let mut hi = tops[i];
        i += 1;
        while i < tops.len() && tops[i] - size == hi + guard {
            hi = tops[i];
            i += 1;
        }
        // SAFETY: [lo, hi) covers free stacks of this pool (and the guard
        // pages between them): no process runs on them, nobody else holds
        // them while the trim has them out of their lists, and their
        // contents are dead.
        let rc = unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
        if rc != 0 {
            log::debug!(
                "graft: giving back free stack pages: {}",
                io::Error::last_os_error()
            );
        }
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
        let size = round_size(64 * 1024).unwrap();
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
