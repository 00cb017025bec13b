//! The per-worker LIFO slot: where a process woken by a message goes, so it
//! runs next on the waker's worker (its data is hot in this core's cache, and
//! no other thread must be woken: ~8 µs each way here).
//!
//! Only the owning worker puts into and takes from its slot, except the
//! monitor (in `timer.rs`), which takes from the slot of a worker that has run
//! the same process for a whole tick, so a CPU-bound process cannot starve the
//! process it woke. Both take with one atomic swap, so a process is taken once.

use crate::loom::{AtomicPtr, Ordering};
use crate::process::Process;
use std::ptr::{self, NonNull};

/// A runnable process as run queues hold it: a pointer, not an `Arc`.
///
/// No reference count is needed, and none is paid for (two atomic updates
/// per wake, about a tenth of a message hop): a process is queued only by
/// the one caller that moved its state to `SCHEDULED` (`state.rs`), which
/// never happens once it has finished; a process that has not finished is
/// in its node's process table, which holds an `Arc` to it; and it leaves
/// the table only in `NodeShared::finish`, run by the worker that is running
/// it (so not while it is queued), or after every worker has stopped
/// (`Node::shutdown`), when no queue is read any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Runnable(NonNull<Process>);

// SAFETY: a `Runnable` only names a process (which is `Send + Sync`); who may
// dereference it is the invariant above.
unsafe impl Send for Runnable {}

impl Runnable {
    /// Names `p`, which the caller has just moved to `SCHEDULED`.
    #[inline]
    pub(crate) fn new(p: &Process) -> Runnable {
        Runnable(NonNull::from(p))
    }

    /// The process.
    ///
    /// # Safety
    ///
    /// The caller took this `Runnable` from a run queue (or is about to put
    /// it in one) and has not finished the process: see the type docs.
    #[inline]
    pub(crate) unsafe fn process<'a>(self) -> &'a Process {
        // SAFETY: the process is alive (the caller's precondition).
        unsafe { self.0.as_ref() }
    }
}

/// One slot holding at most one runnable process.
#[derive(Debug, Default)]
pub(crate) struct LifoSlot(Slot<Process>);

impl LifoSlot {
    /// Puts `p` in the slot and returns the previous occupant, if any.
    #[inline]
    pub(crate) fn put(&self, p: Runnable) -> Option<Runnable> {
        self.0.put(p.0).map(Runnable)
    }

    /// Takes the occupant, if any.
    #[inline]
    pub(crate) fn take(&self) -> Option<Runnable> {
        self.0.take().map(Runnable)
    }

    /// `true` if a process waits in the slot.
    pub(crate) fn is_occupied(&self) -> bool {
        self.0.is_occupied()
    }
}

/// The slot's protocol, for any pointee (the loom model in
/// `loom-tests/tests/run_queue.rs` drives it with plain values): one
/// pointer, put and taken with one atomic swap each, so a value put is
/// taken exactly once, by the owner or by the monitor, or handed back by
/// the `put` that displaces it.
#[derive(Debug)]
pub struct Slot<T>(AtomicPtr<T>);

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(AtomicPtr::new(ptr::null_mut()))
    }
}

impl<T> Slot<T> {
    /// Puts `p` in the slot and returns the previous occupant, if any.
    #[inline]
    pub fn put(&self, p: NonNull<T>) -> Option<NonNull<T>> {
        NonNull::new(self.0.swap(p.as_ptr(), Ordering::AcqRel))
    }

    /// Takes the occupant, if any.
    #[inline]
    pub fn take(&self) -> Option<NonNull<T>> {
        if self.0.load(Ordering::Relaxed).is_null() {
            return None;
        }
        NonNull::new(self.0.swap(ptr::null_mut(), Ordering::AcqRel))
    }

    /// `true` if something waits in the slot.
    pub fn is_occupied(&self) -> bool {
        !self.0.load(Ordering::Relaxed).is_null()
    }
}
