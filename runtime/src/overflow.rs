//! A clear report when a process overflows its stack.
//!
//! Every process stack has a guard page below it, so an overflow faults
//! instead of corrupting memory. Without help that fault is a bare SIGSEGV.
//! This handler (installed once, on the alternate signal stack std gives
//! every thread) checks whether the faulting address lies in the guard page
//! of the process running on this thread; if so it writes one line naming
//! the process and its stack size to stderr and aborts. Any other fault goes
//! to the handler that was there before (std's, which reports overflows of
//! OS thread stacks).

use crate::context;
use std::sync::OnceLock;

/// The handlers that were installed before ours, per signal.
static PREVIOUS: OnceLock<[libc::sigaction; 2]> = OnceLock::new();

/// Installs the handler for SIGSEGV and SIGBUS (once per OS process).
pub(crate) fn install() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: zeroed `sigaction` structs are valid "no handler" values;
        // `sigaction` with a valid signal number and pointers to them has no
        // other precondition; `on_fault` is async-signal-safe (see there).
        unsafe {
            let mut prev: [libc::sigaction; 2] = std::mem::zeroed();
            for (i, sig) in [libc::SIGSEGV, libc::SIGBUS].into_iter().enumerate() {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_fault as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, &mut prev[i]);
            }
            prev
        }
    });
}

/// Writes `parts` to stderr with no allocation (async-signal-safe).
fn write_stderr(parts: &[&[u8]]) {
    for p in parts {
        // SAFETY: writing a valid buffer to fd 2.
        unsafe {
            libc::write(2, p.as_ptr().cast(), p.len());
        }
    }
}

/// Formats `n` in decimal into `buf`, returning the digits.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid `siginfo_t` to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    // Only plain loads: the thread-local worker pointer and the process
    // entry it points to (alive while the process runs on this thread).
    if let Some(p) = context::process() {
        let g = p.guard;
        if g.contains(addr) {
            let (mut a, mut b) = ([0u8; 20], [0u8; 20]);
            write_stderr(&[
                b"graft: process #",
                decimal(p.pid.serial(), &mut a),
                b" overflowed its stack of ",
                decimal(u64::from(g.size / 1024), &mut b),
                b" KiB; spawn it with a larger graft::spawn_opts().stack_size(..) or \
                  NodeConfig::stack_size(..)\n",
            ]);
            // SAFETY: abort has no preconditions.
            unsafe { libc::abort() };
        }
    }
    let Some(prev) = PREVIOUS.get() else { return };
    let prev = &prev[usize::from(sig != libc::SIGSEGV)];
    let handler = prev.sa_sigaction;
    if handler == libc::SIG_IGN {
        return;
    }
    if handler == libc::SIG_DFL {
        // Restore the default action; returning re-runs the faulting
        // instruction, which now kills the process as it would have.
        // SAFETY: resetting a signal's disposition to its default.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
        return;
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it
        // has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a handler installed without SA_SIGINFO takes the signal.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}
