//! Which worker and which process this OS thread is running now, and the
//! helpers every runtime call starts from (the running process, its node,
//! suspending it, running on the worker's stack).
//!
//! A process may resume on another worker after any suspend, so process code
//! must re-read the worker after every runtime call that can yield. The
//! accessors are `#[inline(never)]` so the compiler cannot keep a thread-local
//! address computed before a suspend and use it after (the thread may differ).
//! The current *process* pointer is stable across suspends (it is the same
//! process wherever it runs); the *worker* is not.

use crate::process::Process;
use crate::sched::worker::WorkerCtx;
use std::cell::Cell;
use std::ptr;

thread_local! {
    static WORKER: Cell<*const WorkerCtx> = const { Cell::new(ptr::null()) };
}

/// Makes `w` this thread's worker for the duration of `f`.
pub(crate) fn enter_worker<R>(w: &WorkerCtx, f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            WORKER.with(|c| c.set(ptr::null()));
        }
    }
    WORKER.with(|c| c.set(w));
    let _reset = Reset;
    f()
}

/// This thread's worker, if it is one.
#[inline(never)]
pub(crate) fn worker() -> Option<&'static WorkerCtx> {
    let p = WORKER.with(|c| c.get());
    // SAFETY: the pointer is set only by `enter_worker`, whose frame outlives
    // every use on this thread: workers run processes inside it. Callers must
    // not keep the reference across a suspend (module docs).
    unsafe { p.as_ref() }
}

/// The process running on this thread, if any.
#[inline(never)]
pub(crate) fn process() -> Option<&'static Process> {
    let w = worker()?;
    let p = w.current.get();
    // SAFETY: `current` is set by the worker while it resumes the process,
    // which is in the process table (holding an `Arc` to it) until it has
    // finished, so it outlives the running code that asks.
    unsafe { p.as_ref() }
}

// ---------------------------------------------------------------------------
// The running process and its node: what every runtime call starts from
// (moved here from `api.rs`, so that the layers below the API need not
// import it).

use crate::coroutine::{suspend, Suspend};
use crate::error::Error;
use crate::loom::Ordering;
use crate::node::NodeShared;
use crate::pid::{NodeId, Pid};

/// The running process, or a panic naming `call`.
#[inline]
pub(crate) fn current(call: &'static str) -> &'static Process {
    match process() {
        Some(p) => {
            if p.has_signal.load(Ordering::Relaxed) {
                // SAFETY: `p` is the running process.
                unsafe { p.check_doomed() };
            }
            p
        }
        None => not_in_process(call),
    }
}

/// [`current`] without its doom check, for a call whose first step is a
/// drain ([`Process::drain`] makes the same check on the same flag).
#[inline]
pub(crate) fn current_draining(call: &'static str) -> &'static Process {
    match process() {
        Some(p) => p,
        None => not_in_process(call),
    }
}

#[cold]
#[inline(never)]
pub(crate) fn not_in_process(call: &'static str) -> ! {
    panic!("{}", Error::NotInProcess(call))
}

/// The node of the running process.
#[inline]
pub(crate) fn node() -> &'static NodeShared {
    match worker() {
        Some(w) => {
            let n: &NodeShared = &w.node;
            // SAFETY: the worker's `Arc<NodeShared>` lives as long as the
            // worker thread, which outlives every call made on it; callers do
            // not keep the reference past the current runtime call.
            unsafe { &*(n as *const NodeShared) }
        }
        None => not_in_process("node"),
    }
}

/// Suspends the running process until something wakes it.
#[inline]
pub(crate) fn park_current(me: &Process) {
    suspend_current(me, Suspend::Park);
}

#[inline]
pub(crate) fn suspend_current(me: &Process, why: Suspend) {
    // SAFETY: `me` is the running process; the yielder pointer was stored by
    // its own body and points into its own (live) stack.
    let y = unsafe { me.local().yielder.expect("a running process has a yielder") };
    let here = 0u8;
    me.note_parked_sp(std::ptr::addr_of!(here) as usize);
    // For `process_info`'s mailbox length (messages its receives skipped).
    // SAFETY: `me` is the running process.
    me.acct.note_saved(unsafe { me.local() }.saved.len());
    // SAFETY: as above.
    suspend(unsafe { y.as_ref() }, why);
}

/// Runs `f` on the worker thread's own (large) stack when called from a
/// process, so that stack-hungry library code (a compressor's state, a deep
/// recursion) cannot overflow a small process stack; runs it in place
/// elsewhere.
pub(crate) fn on_worker_stack<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let Some(me) = process() else {
        return f();
    };
    // SAFETY: `me` is the running process; its yielder lives on its own
    // stack, which is live while it runs this call.
    match unsafe { me.local().yielder } {
        // SAFETY: as above.
        Some(y) => unsafe { y.as_ref() }.on_parent_stack(f),
        None => f(),
    }
}

/// The pid of the running process.
///
/// # Panics
///
/// Outside a process.
///
/// ```
/// let node = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0")).unwrap();
/// let pid = node.run(graft::self_pid).unwrap();
/// assert_eq!(pid.node(), node.id());
/// ```
pub fn self_pid() -> Pid {
    current("self_pid").pid
}

/// The pid of the running process, or `None` outside one.
pub fn try_self_pid() -> Option<Pid> {
    process().map(|p| p.pid)
}

/// The node the running process lives on.
///
/// # Panics
///
/// Outside a process.
pub fn this_node() -> NodeId {
    node().id
}
