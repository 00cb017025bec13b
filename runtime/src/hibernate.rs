//! `hibernate`: give back the memory of the unused part of the running
//! process's stack while it waits (Erlang's `erlang:hibernate/3`, for the
//! stack half of it).
//!
//! A process stack is a private anonymous mapping (see `stack.rs`); once a
//! deep call has returned, the pages it touched stay resident although
//! nothing lives in them. [`hibernate`] hands every whole page between the
//! stack's bottom (above its guard page) and a margin below the caller's
//! frame back to the kernel with `madvise(MADV_DONTNEED)`: they read as zero
//! when touched again, which is all an unused stack region may hold.
//!
//! ```text
//!   top (base) ┌──────────────────────┐
//!              │ the caller's frames  │  kept
//!   sp ─────── ├──────────────────────┤
//!              │ KEEP_BELOW (16 KiB)  │  kept: the frames hibernate calls
//!              ├──────────────────────┤  (page aligned down)
//!              │ dead frames          │  MADV_DONTNEED
//!   bottom ─── ├──────────────────────┤
//!              │ guard page           │  untouched
//!              └──────────────────────┘
//! ```
//!
//! Unlike Erlang's, `hibernate` returns: Rust cannot discard the caller's
//! frames. A behaviour calls it just before its blocking receive (graft-otp's
//! gen_statem does on `Action::Hibernate`; a gen_server's `hibernate_after`
//! calls it when a receive timed out idle, then receives again); the
//! receive's own frames take back a page or two. A `hibernate_after`
//! option in a behaviour's loop is:
//!
//! ```text
//! let msg = match receive()/* clauses */.timeout(hibernate_after) {
//!     Some(msg) => msg,
//!     None => {
//!         graft::hibernate();            // idle: give the dead stack back
//!         receive()/* clauses */.wait()  // and wait as before
//!     }
//! };
//! ```

use crate::context::current;

/// Bytes kept below the caller's frame, for the frames `hibernate` itself
/// calls (the `madvise` wrapper needs far less).
const KEEP_BELOW: usize = 16 * 1024;

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// Gives the pages of the running process's stack below the caller's frame
/// back to the OS, and returns how many bytes that range spans (0 when there
/// was nothing to give back, or when called on another stack, such as a
/// [`Generator`](crate::Generator)'s body).
///
/// # Panics
///
/// Outside a process.
///
/// ```
/// use graft::*;
///
/// fn deep(n: u32) -> u64 {
///     let buf = std::hint::black_box([n as u8; 1024]);
///     if n == 0 { buf[0] as u64 } else { deep(n - 1) + buf[1] as u64 }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let freed = node.run(|| {
///     let me = self_pid();
///     let pid = spawn_opts().stack_size(2 * 1024 * 1024).spawn(move || {
///         deep(100); // at least 100 KiB of stack touched, then returned from
///         let freed = hibernate();
///         let n: u32 = expect(); // still works
///         send(me, (freed, deep(n)));
///     }).unwrap();
///     send(pid, 3u32);
///     expect::<(usize, u64)>()
/// }).unwrap();
/// assert!(freed.0 >= 64 * 1024);
/// assert_eq!(freed.1, 6);
/// node.shutdown();
/// ```
#[inline(never)]
pub fn hibernate() -> usize {
    let me = current("hibernate");
    let guard = me.guard;
    let bottom = guard.lo + guard.len as usize;
    let top = bottom + guard.size as usize;
    let marker = 0u8;
    let sp = std::hint::black_box(&marker) as *const u8 as usize;
    if !(bottom..top).contains(&sp) {
        return 0;
    }
    let end = sp.saturating_sub(KEEP_BELOW) & !(page_size() - 1);
    if end <= bottom {
        return 0;
    }
    let len = end - bottom;
    // SAFETY: `[bottom, end)` lies inside this process's own stack mapping
    // (between its guard page and the running frame, checked above), at
    // least KEEP_BELOW bytes below the running frame, so no live frame or
    // value is there: the stack grows down, every caller's frame is above
    // `sp`, and the calls made from here stay within the margin. The mapping
    // is private and anonymous, so the pages read as zero when touched again.
    let r = unsafe { libc::madvise(bottom as *mut libc::c_void, len, libc::MADV_DONTNEED) };
    if r != 0 {
        log::debug!(
            "graft: hibernate: madvise failed: {}",
            std::io::Error::last_os_error()
        );
        return 0;
    }
    len
}
