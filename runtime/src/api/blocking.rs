//! [`blocking`]: work that would stall a worker runs on the blocking pool.

use crate::context::{current, node, park_current};
use crate::loom::Ordering;
use crate::node::NodeShared;

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
    let me = current("blocking");
    let n = node();
    let Some(arc) = n.table.get(me.pid.serial()) else {
        return f();
    };
    let slot: std::sync::Arc<parking_lot::Mutex<Option<std::thread::Result<R>>>> =
        Default::default();
    let out = slot.clone();
    let waker = std::sync::Arc::downgrade(&arc);
    drop(arc);
    let node_ptr = NodePtr(n);
    n.blocking.submit(Box::new(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        *out.lock() = Some(r);
        if let Some(p) = waker.upgrade() {
            let node_ptr = node_ptr;
            // SAFETY: the node outlives its blocking pool (joined at shutdown
            // before the node is dropped).
            unsafe { &*node_ptr.0 }.wake(&p);
        }
    }));
    loop {
        if me.has_signal.load(Ordering::Acquire) {
            // SAFETY: `me` is the running process.
            unsafe { me.drain() };
        }
        if let Some(r) = slot.lock().take() {
            return match r {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            };
        }
        park_current(me);
    }
}

pub(crate) struct NodePtr(*const NodeShared);
// SAFETY: `NodeShared` is `Sync`; the pointer is only dereferenced while the
// node is alive (see `blocking`).
unsafe impl Send for NodePtr {}
