//! The heap work stack of the derive's explicit-stack decode.
//!
//! A type whose fields hold itself (`Box<Self>`, `Option<Box<Self>>`) is
//! decoded by `#[derive(Mobile)]` as a loop, not a recursion: when the
//! decode of a node reaches such a field it pushes the node's fields read so
//! far (a *partial*, e.g. the `u64` of a `Cons(u64, Box<List>)`: 16 bytes)
//! onto a [`DeepStack`] and starts on the child; a finished child pops its
//! parent's partial and completes it. One level of nesting costs one
//! partial on the heap instead of a ~200-byte stack frame, and no stack
//! segment thread is started for it.
//!
//! The stack is a list of chunks, not one `Vec`: a chunk that empties is
//! freed at once (one spare is kept, so a walk up and down a chunk boundary
//! does not allocate), so while a deep value is completed its nodes reuse
//! the memory its partials give back, and the peak is the larger of the
//! two, not their sum. The first few partials live in the stack value
//! itself (in the decode's frame), so a shallow value allocates nothing;
//! heap chunks start small (8 partials).

/// Partials per chunk, at most.
const CHUNK: usize = 4096;
/// Capacity of the first chunk.
const FIRST: usize = 8;
/// Partials held in the stack value itself.
const INLINE: usize = 4;

/// A stack of partly decoded values, freed as it shrinks (see the module
/// docs). Used by the code `#[derive(Mobile)]` generates; not meant to be
/// named by hand.
///
/// ```
/// use graft::graph::DeepStack;
///
/// let mut s = DeepStack::new();
/// for i in 0..10_000u64 {
///     s.push(i);
/// }
/// assert_eq!(s.max_depth(), 10_000);
/// assert_eq!(s.pop(), Some(9_999));
/// while s.pop().is_some() {}
/// assert_eq!(s.pop(), None);
/// ```
#[doc(hidden)]
#[derive(Debug)]
pub struct DeepStack<T> {
    /// The first `INLINE` partials.
    inline: [Option<T>; INLINE],
    /// Full chunks below the top one.
    below: Vec<Vec<T>>,
    /// The top chunk.
    top: Vec<T>,
    /// An emptied chunk kept for the next growth.
    spare: Option<Vec<T>>,
    len: usize,
    max: usize,
}

impl<T> Default for DeepStack<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> DeepStack<T> {
    /// An empty stack (allocates nothing).
    #[inline]
    pub const fn new() -> Self {
        DeepStack {
            inline: [const { None }; INLINE],
            below: Vec::new(),
            top: Vec::new(),
            spare: None,
            len: 0,
            max: 0,
        }
    }

    /// Pushes a partial.
    #[inline]
    pub fn push(&mut self, v: T) {
        if self.len < INLINE {
            self.inline[self.len] = Some(v);
        } else {
            if self.top.len() == self.top.capacity() {
                self.grow();
            }
            self.top.push(v);
        }
        self.len += 1;
        if self.len > self.max {
            self.max = self.len;
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        if self.top.capacity() == 0 {
            self.top = Vec::with_capacity(FIRST);
            return;
        }
        let next = match self.spare.take() {
            Some(c) => c,
            None => Vec::with_capacity((self.len).clamp(FIRST, CHUNK)),
        };
        let full = std::mem::replace(&mut self.top, next);
        self.below.push(full);
    }

    /// Pops the last partial.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.len <= INLINE {
            if self.len == 0 {
                return None;
            }
            self.len -= 1;
            return self.inline[self.len].take();
        }
        match self.top.pop() {
            Some(v) => {
                self.len -= 1;
                Some(v)
            }
            None => self.pop_chunk(),
        }
    }

    #[cold]
    #[inline(never)]
    fn pop_chunk(&mut self) -> Option<T> {
        let below = self.below.pop()?;
        // Keep the emptied top as the spare (dropping the older spare), so
        // the memory given back is at most one chunk behind.
        let empty = std::mem::replace(&mut self.top, below);
        self.spare = Some(empty);
        let v = self.top.pop();
        if v.is_some() {
            self.len -= 1;
        }
        v
    }

    /// Partials on the stack now.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no partial is on the stack.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most partials it has held: a bound on the depth of any value
    /// the decode built with it (used to drop a failed decode's pieces on a
    /// deep enough stack).
    #[inline]
    pub fn max_depth(&self) -> usize {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::DeepStack;

    #[test]
    fn pushes_and_pops_in_order_across_chunks() {
        let mut s = DeepStack::new();
        for round in 0..3u64 {
            for i in 0..20_000u64 {
                s.push(i + round);
            }
            // Up and down a chunk boundary.
            for _ in 0..5000 {
                s.pop();
            }
            for i in 15_000..20_000u64 {
                s.push(i + round);
            }
            for i in (0..20_000u64).rev() {
                assert_eq!(s.pop(), Some(i + round));
            }
            assert!(s.is_empty());
            assert_eq!(s.pop(), None);
        }
        assert_eq!(s.max_depth(), 20_000);
    }
}
