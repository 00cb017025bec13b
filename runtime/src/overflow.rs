//! A stack overflow ends the process that overflowed, not the node.
//!
//! Every process stack has a guard page below it, so an overflow faults
//! instead of corrupting memory. The handler here (installed once, for
//! SIGSEGV and SIGBUS, on the alternate signal stack std gives every thread)
//! checks whether the faulting address lies in the guard page of the process
//! running on this thread, with the stack pointer inside that process's
//! stack. If so, it uses corosensei's trap support (the mechanism wasm
//! runtimes use for the same purpose): the interrupted coroutine's registers
//! are pointed at a fresh frame at the top of its own stack, the handler
//! returns (so the kernel restores the signal mask as usual), and that frame
//! logs the overflow and returns `ExitReason::StackOverflow` to the worker,
//! as if the body had returned. The worker then finishes the process like
//! any other: links, monitors and supervisors see `stack_overflow`, and the
//! stack goes back to the pool.
//!
//! What is lost: the frames that were on the stack are abandoned, not
//! unwound. Their destructors do not run, so heap memory they owned leaks
//! and a lock held at the moment of the overflow stays held (a process that
//! overflows inside the allocator, holding its lock, would leave that lock
//! held too). That is why the log line names the process, its initial call
//! and its stack size: the fix is a larger stack or less recursion.
//!
//! Any other fault (not in a process's guard page, or an overflow of an OS
//! thread's own stack: the node loop, a worker between processes) goes to
//! the handler that was there before (std's, which reports overflows of OS
//! thread stacks). Where the registers cannot be redirected (an architecture
//! without support here), a process overflow is reported and the OS process
//! aborts, as before.

use crate::context;
use crate::exit::ExitReason;
use crate::process::Process;
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
        // SAFETY: `ctx` is the interrupted context the kernel passed to this
        // SA_SIGINFO handler, and `p` runs on this thread.
        if g.contains(addr) && unsafe { abandon(p, ctx) } {
            return; // the process now returns `StackOverflow` (module docs)
        }
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

/// Points the interrupted context of `p`'s coroutine at a frame that ends it
/// with `StackOverflow`; `false` if it cannot (no coroutine trap handler, the
/// stack pointer is not on the process's stack, or no register support for
/// this architecture). Async-signal-safe: it writes only to the process's
/// own stack and to `ctx`.
///
/// # Safety
///
/// `ctx` is the `ucontext_t` of the fault being handled on this thread, and
/// `p` is the process running on this thread.
unsafe fn abandon(p: &Process, ctx: *mut libc::c_void) -> bool {
    // SAFETY: the slot is written only by the worker that runs `p`, before
    // the coroutine first runs, on the thread now interrupted in it: no
    // write can overlap this read.
    let Some(trap) = (unsafe { &*p.trap.as_ptr() }) else {
        return false;
    };
    let uc = ctx.cast::<libc::ucontext_t>();
    // SAFETY: `uc` is the interrupted context (our precondition).
    let Some(sp) = (unsafe { regs::sp(uc) }) else {
        return false;
    };
    if !trap.stack_ptr_in_bounds(sp) {
        return false;
    }
    let me = ProcPtr(p);
    // SAFETY: the stack pointer of the interrupted context is inside the
    // coroutine (checked just above), and the registers are updated below as
    // `setup_trap_handler` asks. Its other requirement (the coroutine writes
    // nothing outside itself but through volatile operations) cannot hold
    // for arbitrary user code: what it had half-written stays so. That is
    // the documented cost of abandoning the frames (module docs).
    let to = unsafe { trap.setup_trap_handler(move || overflowed(me)) };
    // SAFETY: as above.
    unsafe { regs::redirect(uc, to) };
    true
}

/// The process whose stack overflowed, carried into [`overflowed`].
#[derive(Clone, Copy)]
struct ProcPtr(*const Process);

/// Runs on the top of the overflowed process's own (reset) stack, in
/// ordinary context once the signal handler has returned: reports the
/// overflow and ends the process with `StackOverflow`.
fn overflowed(me: ProcPtr) -> ExitReason {
    // SAFETY: the process is running (this is its coroutine), so its table
    // entry keeps it alive until its worker finishes it.
    let p = unsafe { &*me.0 };
    // A panic here would unwind into the worker: never let one out.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        log::error!(
            "graft: process {} ({}) overflowed its stack of {} KiB and exits with \
             stack_overflow; its frames were abandoned without running their destructors \
             (memory they owned leaks, locks they held stay held). Spawn it with a larger \
             graft::spawn_opts().stack_size(..) or NodeConfig::stack_size(..)",
            p.pid,
            (p.initial_call)(),
            p.guard.size / 1024
        );
        if let Some(w) = context::worker() {
            w.node.sysmon.stack_overflow(&w.node, p.pid);
        }
    }));
    ExitReason::StackOverflow
}

/// The registers of an interrupted context, per architecture.
mod regs {
    use corosensei::trap::TrapHandlerRegs;

    /// The stack pointer of the interrupted context.
    ///
    /// # Safety
    ///
    /// `uc` points to a valid `ucontext_t` from a signal handler.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    pub(super) unsafe fn sp(uc: *mut libc::ucontext_t) -> Option<usize> {
        // SAFETY: `uc` is valid (our precondition).
        Some(unsafe { (*uc).uc_mcontext.gregs[libc::REG_RSP as usize] } as usize)
    }

    /// Makes the interrupted context continue as `to` says.
    ///
    /// # Safety
    ///
    /// As for [`sp`]; `to` comes from `setup_trap_handler` for the coroutine
    /// whose context this is.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    pub(super) unsafe fn redirect(uc: *mut libc::ucontext_t, to: TrapHandlerRegs) {
        let TrapHandlerRegs {
            rip,
            rsp,
            rbp,
            rdi,
            rsi,
        } = to;
        // SAFETY: `uc` is valid (our precondition).
        let g = unsafe { &mut (*uc).uc_mcontext.gregs };
        g[libc::REG_RIP as usize] = rip as i64;
        g[libc::REG_RSP as usize] = rsp as i64;
        g[libc::REG_RBP as usize] = rbp as i64;
        g[libc::REG_RDI as usize] = rdi as i64;
        g[libc::REG_RSI as usize] = rsi as i64;
    }

    /// The stack pointer of the interrupted context.
    ///
    /// # Safety
    ///
    /// `uc` points to a valid `ucontext_t` from a signal handler.
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    pub(super) unsafe fn sp(uc: *mut libc::ucontext_t) -> Option<usize> {
        // SAFETY: `uc` is valid (our precondition).
        Some(unsafe { (*uc).uc_mcontext.sp } as usize)
    }

    /// Makes the interrupted context continue as `to` says.
    ///
    /// # Safety
    ///
    /// As for [`sp`]; `to` comes from `setup_trap_handler` for the coroutine
    /// whose context this is.
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    pub(super) unsafe fn redirect(uc: *mut libc::ucontext_t, to: TrapHandlerRegs) {
        let TrapHandlerRegs {
            pc,
            sp,
            x0,
            x1,
            x29,
            lr,
        } = to;
        // SAFETY: `uc` is valid (our precondition).
        let m = unsafe { &mut (*uc).uc_mcontext };
        m.pc = pc;
        m.sp = sp;
        m.regs[0] = x0;
        m.regs[1] = x1;
        m.regs[29] = x29;
        m.regs[30] = lr;
    }

    /// No register support here: overflows are reported and abort.
    ///
    /// # Safety
    ///
    /// None needed; it reads nothing.
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    pub(super) unsafe fn sp(_uc: *mut libc::ucontext_t) -> Option<usize> {
        None
    }

    /// Never called ([`sp`] gives `None`).
    ///
    /// # Safety
    ///
    /// None needed.
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    pub(super) unsafe fn redirect(_uc: *mut libc::ucontext_t, _to: TrapHandlerRegs) {}
}
