//! Segmented stacks for deep graphs, in safe code.
//!
//! The encoder and decoder are recursive: a field's value is encoded inside
//! the call that encodes its parent. A graph can be far deeper than any stack
//! (a linked list of a million `Box`es), so every indirection (`Box`, `Arc`,
//! collections) checks how much stack the current segment has used. When it
//! passes the segment's budget, the rest of the walk continues on a fresh OS
//! thread with a large stack (a *segment*), and the caller blocks until it
//! returns. Depth is thus bounded by memory, not by the caller's stack.
//!
//! ```text
//!   caller stack          segment 1 (SEGMENT bytes)     segment 2 ...
//!   +-----------+         +--------------------+        +-------------
//!   | encode    |  hop -> | encode ... encode  | hop -> | encode ...
//!   | FIRST_... |  join   | SEGMENT - MARGIN   |  join  |
//!   +-----------+         +--------------------+        +-------------
//! ```
//!
//! Rejected: an explicit stack of type-erased continuations. It needs a heap
//! allocation per node for the decoder's value stack (slower on flat data)
//! and either `unsafe` or `Box<dyn Any>` downcasts for every field.
//!
//! Stacks grow downwards on every target graft supports (x86_64, aarch64).

/// Stack the caller's segment may use before the first hop. Small, because
/// the caller may be a green thread with a small stack.
pub(crate) const FIRST_BUDGET: usize = 24 << 10;
/// Size of each segment thread's stack (virtual; pages are touched lazily).
pub(crate) const SEGMENT: usize = 256 << 20;
/// Room left unused at the end of each segment, for the frames between two
/// checks.
pub(crate) const MARGIN: usize = 2 << 20;

/// The current stack position (the address of a local).
#[inline(always)]
pub(crate) fn position() -> usize {
    let probe = 0u8;
    std::hint::black_box(&probe) as *const u8 as usize
}

/// The lowest stack address the current segment may reach, `budget` bytes
/// below here.
#[inline]
pub(crate) fn floor(budget: usize) -> usize {
    position().saturating_sub(budget)
}

/// Runs `f` on a new segment, passing it that segment's floor. `None` when no
/// thread could be started.
#[cold]
pub(crate) fn on_new_segment<R: Send>(f: impl FnOnce(usize) -> R + Send) -> Option<R> {
    std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name("graft-graph-segment".into())
            .stack_size(SEGMENT)
            .spawn_scoped(s, move || f(floor(SEGMENT - MARGIN)));
        match spawned {
            Ok(handle) => match handle.join() {
                Ok(r) => Some(r),
                Err(panic) => std::panic::resume_unwind(panic),
            },
            Err(e) => {
                log::error!("graph: cannot start a stack segment thread: {e}");
                None
            }
        }
    })
}

/// Drops `v` on a thread whose stack is `segments` segments deep, so that a
/// deep value built across several segments can be dropped without overflow.
#[cold]
pub(crate) fn drop_deep<V: Send>(v: V, segments: usize) {
    let size = SEGMENT.saturating_mul(segments.saturating_add(1));
    std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name("graft-graph-drop".into())
            .stack_size(size)
            .spawn_scoped(s, move || drop(v));
        match spawned {
            Ok(handle) => {
                if let Err(panic) = handle.join() {
                    std::panic::resume_unwind(panic)
                }
            }
            Err(e) => log::error!("graph: cannot start a drop thread: {e}"),
        }
    })
}
