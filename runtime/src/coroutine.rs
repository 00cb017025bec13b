//! The context switch: a process body on its own stack (corosensei).
//!
//! A [`Coro`] runs one process body. It suspends only from inside runtime
//! calls (`receive`, `yield_now`, `sleep`, ...) through [`suspend`], telling
//! the worker why; the worker decides what happens next (park it, requeue it).

use crate::exit::ExitReason;
use crate::stack::Stack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

/// Why a process gave up its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Suspend {
    /// Nothing to do until woken (a message, a timer, a signal).
    Park,
    /// Still runnable: go to the back of the run queue.
    Yield,
}

/// What one `resume` ended with.
#[derive(Debug)]
pub(crate) enum Step {
    Suspended(Suspend),
    Exited(ExitReason),
}

/// The yielder handle a running process suspends through.
pub(crate) type ProcYielder = Yielder<(), Suspend>;

/// A process body on its own stack.
pub(crate) struct Coro(Coroutine<(), Suspend, ExitReason, Stack>);

impl std::fmt::Debug for Coro {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Coro")
    }
}

// SAFETY: a `Coro` moves between worker threads between two resumes. What lies
// on its stack then is: the `Send + 'static` body, the runtime's own frames
// (which hold only `Send` data across a suspend; the worker-specific context is
// re-read from the thread after every suspend, see `context.rs`), and whatever
// the user's code holds across a runtime call. The crate docs forbid holding a
// `thread_local!` borrow or a `!Send` lock guard across a yielding call, and
// offer process-local storage and `spawn_opts().pinned()` instead; this is the
// same contract every migrating stackful-coroutine runtime states.
unsafe impl Send for Coro {}

impl Coro {
    /// Prepares `body` on `stack`; nothing runs until the first `resume`.
    pub(crate) fn new(
        stack: Stack,
        body: impl FnOnce(&ProcYielder) -> ExitReason + 'static,
    ) -> Coro {
        Coro(Coroutine::with_stack(stack, move |y: &ProcYielder, ()| {
            body(y)
        }))
    }

    /// Runs the body until it suspends or exits. The body catches its own
    /// panics, so this returns normally.
    #[inline]
    pub(crate) fn resume(&mut self) -> Step {
        match self.0.resume(()) {
            CoroutineResult::Yield(s) => Step::Suspended(s),
            CoroutineResult::Return(r) => Step::Exited(r),
        }
    }

    /// Hands the stack back once the body has returned.
    pub(crate) fn into_stack(self) -> Stack {
        self.0.into_stack()
    }
}

/// Suspends the running process. `y` must be the yielder of the coroutine
/// running on this thread (the runtime keeps it in the process context).
#[inline]
pub(crate) fn suspend(y: &ProcYielder, why: Suspend) {
    y.suspend(why);
}
