//! Process-local storage: values keyed by type that move with the process
//! between workers (use this instead of `thread_local!`).
//!
//! ```
//! use graft::*;
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! let v = node.run(|| {
//!     local::set(5u32);
//!     yield_now(); // may resume on another worker: the value moves along
//!     local::with(|n: &mut u32| *n += 1);
//!     local::get::<u32>()
//! }).unwrap();
//! assert_eq!(v, Some(6));
//! ```

use crate::context::current;
use std::any::{Any, TypeId};
/// Stores `v` (replacing any earlier value of its type).
pub fn set<T: Send + 'static>(v: T) {
    let me = current("local::set");
    // SAFETY: `me` is the running process.
    unsafe { me.local() }
        .storage
        .get_or_insert_with(Default::default)
        .insert(TypeId::of::<T>(), Box::new(v));
}

/// A copy of the stored `T`.
pub fn get<T: Clone + Send + 'static>() -> Option<T> {
    let me = current("local::get");
    // SAFETY: `me` is the running process.
    unsafe { me.local() }
        .storage
        .as_ref()?
        .get(&TypeId::of::<T>())
        .and_then(|b| b.downcast_ref::<T>())
        .cloned()
}

/// Removes and returns the stored `T`.
pub fn take<T: Send + 'static>() -> Option<T> {
    let me = current("local::take");
    // SAFETY: `me` is the running process.
    let b: Box<dyn Any + Send> = unsafe { me.local() }
        .storage
        .as_mut()?
        .remove(&TypeId::of::<T>())?;
    b.downcast::<T>().ok().map(|b| *b)
}

/// Runs `f` on the stored `T` (a default one if none). `f` may make any
/// runtime call, yielding included.
pub fn with<T: Default + Send + 'static, R>(f: impl FnOnce(&mut T) -> R) -> R {
    let mut v = take::<T>().unwrap_or_default();
    let r = f(&mut v);
    set(v);
    r
}
