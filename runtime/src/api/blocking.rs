//! [`blocking`]: work that would stall a worker runs on the blocking pool.

use crate::context::park_current;
use crate::loom::Ordering;
use crate::node::NodeShared;
use crate::process::Process;
use std::sync::Weak;

/// Runs `f` on the node's blocking pool while the caller is parked, so a
/// blocking call (file I/O, a sleeping C library) does not stall a worker.
/// A panic in `f` is re-raised in the caller.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let n = node.run(|| blocking(|| std::fs::read_dir(".").map(|d| d.count()).unwrap_or(0))).unwrap();
/// assert!(n > 0);
/// ```
pub fn blocking<R, F>(f: F) -> R
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    // Outside a process this says so (a panic naming the call), as before.
    let _ = crate::context::current("blocking");
    let n = crate::context::worker()
        .map(|w| w.node.clone())
        .expect("a running process is on a worker");
    let got = park_until(|done| {
        n.blocking.submit(Box::new(move || {
            done.complete(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        }));
    });
    match got {
        Some(Ok(v)) => v,
        Some(Err(p)) => std::panic::resume_unwind(p),
        None => unreachable!("the blocking pool runs every job it is given"),
    }
}

/// The slot a [`Completion`] fills: `Some(None)` when it was dropped
/// without a result.
type Slot<R> = std::sync::Arc<parking_lot::Mutex<Option<Option<R>>>>;

/// What wakes a process parked in [`park_until`]: given its result once,
/// from any thread. Dropped without one (its operation was abandoned), it
/// wakes the process all the same, with nothing.
pub(crate) struct Completion<R> {
    parts: Option<(Slot<R>, Waiter)>,
}

/// Who waits for a [`Completion`]: a parked process, or (outside one) a
/// parked thread.
enum Waiter {
    Process(Weak<Process>, Weak<NodeShared>),
    Thread(std::thread::Thread),
}

impl<R> Completion<R> {
    /// Hands `r` to the parked process and wakes it.
    pub(crate) fn complete(mut self, r: R) {
        self.give(Some(r));
    }

    fn give(&mut self, r: Option<R>) {
        let Some((slot, waiter)) = self.parts.take() else {
            return;
        };
        *slot.lock() = Some(r);
        match waiter {
            Waiter::Process(process, node) => {
                if let (Some(p), Some(n)) = (process.upgrade(), node.upgrade()) {
                    n.wake(&p);
                }
            }
            Waiter::Thread(t) => t.unpark(),
        }
    }
}

impl<R> Drop for Completion<R> {
    fn drop(&mut self) {
        self.give(None);
    }
}

/// Parks the calling process until the [`Completion`] that `start` is
/// given has its result (`None` if it was dropped without one), so that an
/// operation another thread finishes (a job of the blocking pool, a connect
/// on the transport's poller) holds no thread of ours meanwhile. `start`
/// may complete at once. Outside a process, or for a process no longer in
/// the table, the calling thread waits instead.
pub(crate) fn park_until<R: Send + 'static>(start: impl FnOnce(Completion<R>)) -> Option<R> {
    let slot: Slot<R> = Default::default();
    let me = crate::context::process();
    let process = crate::context::worker().and_then(|w| {
        let p = w.node.table.get(me?.pid.serial())?;
        Some(Waiter::Process(
            std::sync::Arc::downgrade(&p),
            std::sync::Arc::downgrade(&w.node),
        ))
    });
    let parked = process.is_some();
    let waiter = process.unwrap_or_else(|| Waiter::Thread(std::thread::current()));
    start(Completion {
        parts: Some((slot.clone(), waiter)),
    });
    loop {
        if let Some(r) = slot.lock().take() {
            return r;
        }
        match me.filter(|_| parked) {
            Some(me) => {
                if me.has_signal.load(Ordering::Acquire) {
                    // SAFETY: `me` is the running process.
                    unsafe { me.drain() };
                }
                park_current(me);
            }
            None => std::thread::park(),
        }
    }
}
