//! Generators: a body that yields values, consumed as an [`Iterator`], on its
//! own pooled green-thread stack.
//!
//! A [`Generator`] is a corosensei coroutine on a guarded stack from the
//! runtime's stack pool (`stack.rs`). A yield is one stack switch each way:
//! no allocation, no atomics, no lock on the per-value path.
//!
//! Stacks: each OS thread keeps a few free generator stacks (`CACHE_LEN`),
//! backed by one node-independent pool shared by all threads, so creating a
//! generator is a vector pop once warm, and it works inside and outside a
//! process. A finished or dropped generator returns its stack to the cache of
//! the thread that drops it.
//!
//! Unwinding: a panic in the body propagates out of the `next`/`resume` call
//! that ran it. Dropping a generator that has not finished unwinds its body
//! (its `Drop`s run) before the stack is reused.
//!
//! A body may make runtime calls (receive, channel operations, sleep); when
//! one parks, the whole process that drives the generator parks with it.

use crate::stack::{round_size, Stack, StackPool};
use corosensei::{Coroutine, CoroutineResult};
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::sync::{Arc, OnceLock};

/// Default usable stack size of a generator body.
const DEFAULT_STACK: usize = 256 * 1024;
/// Free stacks each thread keeps for the next generators.
const CACHE_LEN: usize = 16;

/// The node-independent pool behind every thread's cache.
fn pool() -> &'static Arc<StackPool> {
    static POOL: OnceLock<Arc<StackPool>> = OnceLock::new();
    POOL.get_or_init(|| StackPool::new(0))
}

thread_local! {
    /// Free generator stacks of this thread: (usable size, stack). Written
    /// only by this thread.
    static CACHE: RefCell<Vec<(usize, Stack)>> = const { RefCell::new(Vec::new()) };
}

fn take_stack(size: usize) -> io::Result<Stack> {
    let cached = CACHE
        .try_with(|c| {
            let mut c = c.borrow_mut();
            let i = c.iter().rposition(|(s, _)| *s == size)?;
            Some(c.swap_remove(i).1)
        })
        .ok()
        .flatten();
    match cached {
        Some(s) => Ok(s),
        None => pool().get(size),
    }
}

fn return_stack(size: usize, stack: Stack) {
    let spare = CACHE.try_with(|c| {
        let mut c = c.borrow_mut();
        if c.len() < CACHE_LEN {
            c.push((size, stack));
            None
        } else {
            Some(stack)
        }
    });
    // A full cache (or a thread being torn down): back to the shared pool.
    drop(spare);
}

/// The handle a generator body yields through.
pub struct Yielder<'a, Y> {
    inner: &'a corosensei::Yielder<(), Y>,
}

impl<Y> Clone for Yielder<'_, Y> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Y> Copy for Yielder<'_, Y> {}

impl<Y> fmt::Debug for Yielder<'_, Y> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Yielder")
    }
}

impl<Y> Yielder<'_, Y> {
    /// Hands `value` to the consumer and suspends the body until the next
    /// value is asked for. If the generator is dropped meanwhile, this call
    /// unwinds (the body's `Drop`s run); do not catch that unwind.
    #[inline]
    pub fn yield_(&self, value: Y) {
        self.inner.suspend(value);
    }
}

/// What one [`Generator::resume`] produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeneratorState<Y, R> {
    /// The body yielded a value and is suspended.
    Yielded(Y),
    /// The body returned.
    Complete(R),
}

/// A body that yields values of type `Y` and returns `R`, run on its own
/// green-thread stack; an [`Iterator`] over the yielded values.
///
/// The body runs only while the consumer asks for a value. A panic in the
/// body reaches the consumer (from `next`/`resume`); dropping the generator
/// early unwinds the body and returns its stack to the pool.
///
/// A generator is not `Send` (its stack may hold anything); create it where
/// it is consumed. It works inside and outside processes.
///
/// ```compile_fail
/// fn is_send<T: Send>() {}
/// is_send::<graft::Generator<u8>>();
/// ```
///
/// # Examples
///
/// ```
/// use graft::*;
///
/// enum Tree { Leaf(u64), Node(Box<Tree>, Box<Tree>) }
/// fn walk(t: &Tree, y: Yielder<'_, u64>) {
///     match t {
///         Tree::Leaf(v) => y.yield_(*v),
///         Tree::Node(l, r) => { walk(l, y); walk(r, y); }
///     }
/// }
/// let tree = Tree::Node(Box::new(Tree::Leaf(1)), Box::new(Tree::Node(
///     Box::new(Tree::Leaf(2)), Box::new(Tree::Leaf(3)))));
/// let leaves: Vec<u64> = Generator::new(move |y| walk(&tree, y)).collect();
/// assert_eq!(leaves, [1, 2, 3]);
/// ```
pub struct Generator<Y: 'static, R: 'static = ()> {
    /// `None` only while dropping.
    coro: Option<Coroutine<(), Y, R, Stack>>,
    size: usize,
    /// The body's return value, kept by `next` until taken.
    ret: Option<R>,
}

impl<Y: 'static, R: 'static> Generator<Y, R> {
    /// A generator running `body` on a pooled stack of the default size
    /// (256 KiB, virtual).
    ///
    /// # Panics
    ///
    /// If no stack can be mapped (see [`Generator::try_with_stack_size`]).
    pub fn new<F>(body: F) -> Generator<Y, R>
    where
        F: FnOnce(Yielder<'_, Y>) -> R + 'static,
    {
        Self::try_with_stack_size(DEFAULT_STACK, body)
            .unwrap_or_else(|e| panic!("graft: cannot map a generator stack: {e}"))
    }

    /// A generator whose stack has at least `bytes` usable bytes (rounded up
    /// to pages, at least 16 KiB).
    ///
    /// # Errors
    ///
    /// The I/O error from mapping a stack (see
    /// [`ensure_map_count`](crate::ensure_map_count)).
    pub fn try_with_stack_size<F>(bytes: usize, body: F) -> io::Result<Generator<Y, R>>
    where
        F: FnOnce(Yielder<'_, Y>) -> R + 'static,
    {
        let size = round_size(bytes).ok_or_else(|| crate::stack::too_big(bytes))?;
        let stack = take_stack(size)?;
        let coro = Coroutine::with_stack(stack, move |y: &corosensei::Yielder<(), Y>, ()| {
            body(Yielder { inner: y })
        });
        Ok(Generator {
            coro: Some(coro),
            size,
            ret: None,
        })
    }

    /// Runs the body until it yields or returns.
    ///
    /// # Panics
    ///
    /// Re-raises a panic of the body. Panics if the body already returned.
    #[inline]
    pub fn resume(&mut self) -> GeneratorState<Y, R> {
        let coro = self.coro.as_mut().expect("graft: generator in use");
        assert!(!coro.done(), "graft: resumed a finished generator");
        match coro.resume(()) {
            CoroutineResult::Yield(y) => GeneratorState::Yielded(y),
            CoroutineResult::Return(r) => GeneratorState::Complete(r),
        }
    }

    /// Whether the body has returned (or panicked).
    pub fn is_done(&self) -> bool {
        match &self.coro {
            Some(c) => c.done(),
            None => true,
        }
    }

    /// The body's return value, once iteration has ended (taken once).
    pub fn take_return(&mut self) -> Option<R> {
        self.ret.take()
    }
}

impl<Y: 'static, R: 'static> Iterator for Generator<Y, R> {
    type Item = Y;

    #[inline]
    fn next(&mut self) -> Option<Y> {
        let coro = self.coro.as_mut()?;
        if coro.done() {
            return None;
        }
        match coro.resume(()) {
            CoroutineResult::Yield(y) => Some(y),
            CoroutineResult::Return(r) => {
                self.ret = Some(r);
                None
            }
        }
    }
}

impl<Y: 'static, R: 'static> std::iter::FusedIterator for Generator<Y, R> {}

impl<Y: 'static, R: 'static> Drop for Generator<Y, R> {
    fn drop(&mut self) {
        if let Some(mut c) = self.coro.take() {
            // Unwind a suspended body (its Drops run), then reuse the stack.
            c.force_unwind();
            return_stack(self.size, c.into_stack());
        }
    }
}

impl<Y: 'static, R: 'static> fmt::Debug for Generator<Y, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generator")
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yields_and_returns() {
        let mut g = Generator::new(|y| {
            for i in 0..3u32 {
                y.yield_(i);
            }
            "done"
        });
        assert_eq!(g.by_ref().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(g.take_return(), Some("done"));
        assert!(g.is_done());
        assert_eq!(g.next(), None);
    }

    #[test]
    fn resume_states() {
        let mut g = Generator::new(|y| {
            y.yield_(1u8);
            2u16
        });
        assert_eq!(g.resume(), GeneratorState::Yielded(1));
        assert_eq!(g.resume(), GeneratorState::Complete(2));
    }
}
