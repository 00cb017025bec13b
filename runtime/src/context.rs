//! Which worker and which process this OS thread is running now.
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
