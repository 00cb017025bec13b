//! The context switch: a process body on its own stack (corosensei).
//!
//! A [`Coro`] runs one process body. It suspends only from inside runtime
//! calls (`receive`, `yield_now`, `sleep`, ...) through [`suspend`], telling
//! the worker why; the worker decides what happens next (park it, requeue it).

use crate::exit::ExitReason;
use crate::process::value::Value;
use crate::stack::Stack;
use corosensei::trap::CoroutineTrapHandler;
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

/// What the overflow handler (`overflow.rs`) needs to end a process whose
/// stack overflowed: its coroutine's stack bounds. Recorded once, when the
/// coroutine is made, in a slot the handler reads on the same thread.
pub(crate) type TrapHandler = CoroutineTrapHandler<ExitReason>;

/// Where a process keeps its [`TrapHandler`] (see `Process::trap`).
pub(crate) type TrapSlot = std::cell::Cell<Option<TrapHandler>>;

/// The body a process runs, with the yielder it suspends through, until its
/// first run: kept inline when small (a [`Value`]), so a spawn allocates
/// nothing for it.
pub(crate) struct Body {
    closure: Value,
    call: fn(Value, &ProcYielder) -> ExitReason,
}

impl Body {
    /// Wraps `f`.
    pub(crate) fn new<F>(f: F) -> Body
    where
        F: FnOnce(&ProcYielder) -> ExitReason + Send + 'static,
    {
        fn call<F: FnOnce(&ProcYielder) -> ExitReason + 'static>(
            v: Value,
            y: &ProcYielder,
        ) -> ExitReason {
            match v.downcast::<F>() {
                Ok(f) => f(y),
                Err(_) => unreachable!("a body is called with its own closure"),
            }
        }
        Body {
            closure: Value::new(f),
            call: call::<F>,
        }
    }

    fn run(self, y: &ProcYielder) -> ExitReason {
        (self.call)(self.closure, y)
    }
}

/// A process body on its own stack.
///
/// The coroutine is made on the first `resume`, by the worker that runs the
/// process, not by its spawner: making it writes the first frame, which
/// faults a fresh stack's top page in, and a spawn that takes no fault is
/// about twice as cheap (the spawner goes on while the worker that runs the
/// child pays for its page). Until then the process holds its stack (taken
/// at spawn, so a spawn that cannot have one fails there) and its body.
pub(crate) enum Coro {
    Unstarted(Option<(Stack, Body)>),
    Started(Coroutine<(), Suspend, ExitReason, Stack>),
}

impl std::fmt::Debug for Coro {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Coro::Unstarted(_) => f.write_str("Coro(unstarted)"),
            Coro::Started(_) => f.write_str("Coro"),
        }
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
    /// Prepares `body` on `stack`; nothing runs, and the stack is not
    /// touched, until the first `resume`.
    pub(crate) fn new(stack: Stack, body: Body) -> Coro {
        Coro::Unstarted(Some((stack, body)))
    }

    /// Runs the body until it suspends or exits. The body catches its own
    /// panics, so this returns normally. A stack overflow also returns
    /// normally, as `Exited(StackOverflow)` (see `overflow.rs`): the first
    /// resume records the coroutine's trap handler in `trap` for that.
    #[inline]
    pub(crate) fn resume(&mut self, trap: &TrapSlot) -> Step {
        let c = match self {
            Coro::Started(c) => c,
            Coro::Unstarted(_) => self.start(trap),
        };
        match c.resume(()) {
            CoroutineResult::Yield(s) => Step::Suspended(s),
            CoroutineResult::Return(r) => Step::Exited(r),
        }
    }

    /// Makes the coroutine, and records its trap handler in `trap`.
    #[cold]
    fn start(&mut self, trap: &TrapSlot) -> &mut Coroutine<(), Suspend, ExitReason, Stack> {
        if let Coro::Unstarted(parts) = self {
            let (stack, body) = parts.take().expect("an unstarted coroutine has its parts");
            let c = Coroutine::with_stack(stack, move |y: &ProcYielder, ()| body.run(y));
            trap.set(Some(c.trap_handler()));
            *self = Coro::Started(c);
        }
        match self {
            Coro::Started(c) => c,
            Coro::Unstarted(_) => unreachable!("started just above"),
        }
    }

    /// Hands the stack back once the body has returned (or never ran).
    pub(crate) fn into_stack(self) -> Option<Stack> {
        match self {
            Coro::Started(c) => Some(c.into_stack()),
            Coro::Unstarted(parts) => parts.map(|(stack, _)| stack),
        }
    }
}

/// Suspends the running process. `y` must be the yielder of the coroutine
/// running on this thread (the runtime keeps it in the process context).
#[inline]
pub(crate) fn suspend(y: &ProcYielder, why: Suspend) {
    y.suspend(why);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{round_size, StackPool};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_body_runs_on_the_first_resume_and_an_unstarted_one_is_only_dropped() {
        let pool = StackPool::new(0);
        let trap = TrapSlot::default();
        let size = round_size(64 * 1024).unwrap();
        let (ran, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));

        // Dropped before any resume: the body never runs, what it captured
        // is dropped once, and its stack goes back to the pool.
        let (r, held) = (ran.clone(), Counted(dropped.clone()));
        let c = Coro::new(
            pool.get(size).unwrap(),
            Body::new(move |_: &ProcYielder| {
                let _held = held;
                r.fetch_add(1, Ordering::SeqCst);
                ExitReason::Normal
            }),
        );
        let stack = c
            .into_stack()
            .expect("an unstarted coroutine holds its stack");
        let lo = stack.guard().lo;
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop(stack);
        let again = pool.get(size).unwrap();
        assert_eq!(again.guard().lo, lo, "the stack went back to the pool");
        drop(again);

        // Resumed: it runs, suspends, runs to its end.
        let (r, held) = (ran.clone(), Counted(dropped.clone()));
        let mut c = Coro::new(
            pool.get(size).unwrap(),
            Body::new(move |y: &ProcYielder| {
                let _held = held;
                r.fetch_add(1, Ordering::SeqCst);
                suspend(y, Suspend::Park);
                r.fetch_add(1, Ordering::SeqCst);
                ExitReason::Normal
            }),
        );
        assert!(matches!(c.resume(&trap), Step::Suspended(Suspend::Park)));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(matches!(c.resume(&trap), Step::Exited(ExitReason::Normal)));
        assert_eq!(ran.load(Ordering::SeqCst), 2);
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
        drop(c.into_stack());
    }
}
