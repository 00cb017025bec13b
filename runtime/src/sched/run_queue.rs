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
use std::ptr;
use std::sync::Arc;

/// One slot holding at most one runnable process.
#[derive(Debug)]
pub(crate) struct LifoSlot(AtomicPtr<Process>);

impl Default for LifoSlot {
    fn default() -> Self {
        LifoSlot(AtomicPtr::new(ptr::null_mut()))
    }
}

impl LifoSlot {
    /// Puts `p` in the slot and returns the previous occupant, if any.
    #[inline]
    pub(crate) fn put(&self, p: Arc<Process>) -> Option<Arc<Process>> {
        let new = Arc::into_raw(p) as *mut Process;
        let old = self.0.swap(new, Ordering::AcqRel);
        // SAFETY: a non-null pointer in the slot always came from
        // `Arc::into_raw` and the swap made us its only owner.
        (!old.is_null()).then(|| unsafe { Arc::from_raw(old) })
    }

    /// Takes the occupant, if any.
    #[inline]
    pub(crate) fn take(&self) -> Option<Arc<Process>> {
        if self.0.load(Ordering::Relaxed).is_null() {
            return None;
        }
        let old = self.0.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: as in `put`: the swap transferred the `into_raw` ownership.
        (!old.is_null()).then(|| unsafe { Arc::from_raw(old) })
    }

    /// `true` if a process waits in the slot.
    pub(crate) fn is_occupied(&self) -> bool {
        !self.0.load(Ordering::Relaxed).is_null()
    }
}

impl Drop for LifoSlot {
    fn drop(&mut self) {
        drop(self.take());
    }
}
