//! [`Cell`]: the mutable cell through which strong cycles are built.

use std::fmt;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use std::any::Any;

use super::decode::Pending;
use super::encode::Deferred;
use super::wire::{Binary, Format, Source, Text, Walk};
use super::{DecodeError, Decoder, Describer, Encoder, Mobile};

/// A mutable, thread-safe cell: how a mobile graph closes a strong cycle.
///
/// Put a `Cell` in a node (`Arc<Node>` with a `Cell<Option<Arc<Node>>>`
/// field, or `Arc<Cell<T>>`): build the nodes first, then close the cycle
/// with [`set`](Cell::set). After decoding, the same cycle exists on the
/// receiver (`Arc::ptr_eq` holds wherever it held before). On the wire a
/// cell's content comes after the rest of the value, so the decoder fills it
/// when every node it may point to is complete; a long chain of cells is
/// encoded and decoded iteratively. Cycles of `Weak`s need no cell (they
/// decode through `Arc::new_cyclic`).
///
/// A strong cycle keeps its nodes alive: break it (for instance by setting a
/// link to `None`) when you are done, as with any `Arc` cycle.
///
/// The cell is a mutex: do not call its methods from inside [`with`](Cell::with)
/// on the same cell. Encoding locks each cell while its content is written;
/// another thread mutating a cell during encoding gives one of the states it
/// went through, never a torn one.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use graft::Mobile;
/// use graft::graph::{self, Cell};
///
/// #[derive(Mobile)]
/// struct Ring {
///     value: u64,
///     next: Cell<Option<Arc<Ring>>>,
/// }
///
/// let a = Arc::new(Ring { value: 1, next: Cell::new(None) });
/// let b = Arc::new(Ring { value: 2, next: Cell::new(Some(a.clone())) });
/// a.next.set(Some(b.clone())); // a -> b -> a
///
/// let back: Arc<Ring> = graph::decode(&graph::encode(&a)).unwrap();
/// let next = back.next.get().unwrap();
/// assert_eq!(next.value, 2);
/// assert!(Arc::ptr_eq(&next.next.get().unwrap(), &back));
///
/// // Break the cycles so the nodes are freed.
/// for r in [&a, &back] {
///     r.next.set(None);
/// }
/// ```
pub struct Cell<T> {
    /// Behind an `Arc` so that the decoder can fill the cell after the value
    /// holding it has moved. `None` only while the decoder has not filled it.
    slot: Arc<Mutex<Option<T>>>,
}

impl<T> Cell<T> {
    /// A cell holding `v`.
    pub fn new(v: T) -> Self {
        Cell {
            slot: Arc::new(Mutex::new(Some(v))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<T>> {
        // No poisoning: a panic in `with` cannot leave the value
        // half-written by us.
        self.slot.lock()
    }

    /// Replaces the value.
    pub fn set(&self, v: T) {
        drop(self.replace(v));
    }

    /// Replaces the value and returns the old one.
    pub fn replace(&self, v: T) -> T {
        match self.lock().replace(v) {
            Some(old) => old,
            None => unreachable!("graph::Cell read while being decoded"),
        }
    }

    /// Runs `f` on the value, under the cell's lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        match self.lock().as_mut() {
            Some(v) => f(v),
            None => unreachable!("graph::Cell read while being decoded"),
        }
    }

    /// A copy of the value.
    pub fn get(&self) -> T
    where
        T: Clone,
    {
        self.with(|v| v.clone())
    }

    /// The value.
    pub fn into_inner(self) -> T {
        let taken = self.lock().take();
        match taken {
            Some(v) => v,
            None => unreachable!("graph::Cell read while being decoded"),
        }
    }
}

impl<T: Default> Default for Cell<T> {
    fn default() -> Self {
        Cell::new(T::default())
    }
}

impl<T: fmt::Debug> fmt::Debug for Cell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `try_lock`: a Debug of a cyclic graph must not deadlock.
        match self.slot.try_lock() {
            Some(g) => match &*g {
                Some(v) => f.debug_tuple("Cell").field(v).finish(),
                None => f.write_str("Cell(<decoding>)"),
            },
            None => f.write_str("Cell(<locked>)"),
        }
    }
}

impl<T: Mobile> Deferred for Mutex<Option<T>> {
    fn walk(&self, e: &mut Encoder<'_, Walk>) {
        write_content(self, e);
    }
    fn binary(&self, e: &mut Encoder<'_, Binary>) {
        write_content(self, e);
    }
    fn text(&self, e: &mut Encoder<'_, Text>) {
        write_content(self, e);
    }
}

fn write_content<T: Mobile, F: Format>(slot: &Mutex<Option<T>>, e: &mut Encoder<'_, F>) {
    let g = slot.lock();
    match &*g {
        Some(v) => v.encode(e),
        None => unreachable!("graph::Cell encoded while being decoded"),
    }
}

impl<T: Mobile, S: Source> Pending<S> for Mutex<Option<T>> {
    fn fill(&self, d: &mut Decoder<'_, S>) -> Result<(), DecodeError> {
        let v = T::decode(d)?;
        *self.lock() = Some(v);
        Ok(())
    }

    fn empty(&self) -> Option<Box<dyn Any + Send>> {
        let v = self.lock().take()?;
        Some(Box::new(v))
    }
}

impl<T: Mobile> Mobile for Cell<T> {
    fn describe(d: &mut Describer) {
        d.write("Cell<");
        d.describe::<T>();
        d.write(">");
    }
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.defer(self.slot.clone());
    }
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self, DecodeError> {
        let slot = Arc::new(Mutex::new(None));
        d.defer(slot.clone())?;
        Ok(Cell { slot })
    }
}
