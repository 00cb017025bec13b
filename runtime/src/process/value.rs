//! A local message in a mailbox: any `Send + 'static` value, kept inline
//! when it is small.
//!
//! Most messages are a few words (a number, a pid, a small enum, a request
//! with a reply address), and boxing each one cost a `malloc` on send and a
//! `free` on receive: about a sixth of a hop in a ring of processes. A
//! [`Value`] holds a value of up to `INLINE_WORDS` words, word aligned, in
//! place, and boxes anything larger. Its type is known by a static table
//! (type id, drop), so a type check is one comparison, not a virtual call.
//!
//! This module holds all the unsafe code about message storage.

use std::any::TypeId;
use std::mem::{align_of, size_of, ManuallyDrop, MaybeUninit};

/// Words a value may take to be stored inline.
const INLINE_WORDS: usize = 5;

/// What a [`Value`] knows of the type it holds.
struct VTable {
    type_id: TypeId,
    /// Drops the value: in place if inline, with its box otherwise.
    drop: unsafe fn(&mut Data),
    /// Encodes the value for another node, for a value sent as a
    /// [`Message`](crate::Message) (so that a process can forward mail of a
    /// type it does not know, see [`Unknown`](crate::Unknown)).
    encode: Option<EncodeFn>,
}

/// Encodes a value for another node: `(descriptor hash, bytes)`.
type EncodeFn = fn(&Value) -> Result<(u64, Vec<u8>), crate::Error>;

/// The storage: the value itself, or its box.
union Data {
    inline: MaybeUninit<[usize; INLINE_WORDS]>,
    boxed: *mut (),
}

/// Whether a `T` is stored inline.
const fn fits<T>() -> bool {
    size_of::<T>() <= size_of::<[usize; INLINE_WORDS]>() && align_of::<T>() <= align_of::<usize>()
}

/// # Safety
///
/// `data` holds a live `T` as `Value::new::<T>` stored it, never read since.
unsafe fn drop_value<T>(data: &mut Data) {
    if fits::<T>() {
        // SAFETY: an inline `T` lies at the start of `inline` (our precondition).
        unsafe { std::ptr::drop_in_place(data.inline.as_mut_ptr().cast::<T>()) }
    } else {
        // SAFETY: `boxed` came from `Box::<T>::into_raw` (our precondition).
        drop(unsafe { Box::from_raw(data.boxed.cast::<T>()) })
    }
}

fn vtable<T: 'static>() -> &'static VTable {
    const {
        &VTable {
            type_id: TypeId::of::<T>(),
            drop: drop_value::<T>,
            encode: None,
        }
    }
}

/// Encodes a `Value` that holds an `M`.
fn encode_value<M: crate::Message>(v: &Value) -> Result<(u64, Vec<u8>), crate::Error> {
    match v.downcast_ref::<M>() {
        Some(m) => m.encode_remote(),
        None => Err(crate::Error::NotMobile(std::any::type_name::<M>())),
    }
}

fn vtable_message<M: crate::Message>() -> &'static VTable {
    const {
        &VTable {
            type_id: TypeId::of::<M>(),
            drop: drop_value::<M>,
            encode: Some(encode_value::<M>),
        }
    }
}

/// A message value of some `Send + 'static` type.
pub struct Value {
    vt: &'static VTable,
    data: Data,
}

// SAFETY: a `Value` is only made from a `T: Send` (see `Value::new`), and
// moving it moves that `T` (inline or its box).
unsafe impl Send for Value {}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Value(..)")
    }
}

impl Value {
    /// Wraps `v`, inline if it fits.
    #[inline]
    pub fn new<T: Send + 'static>(v: T) -> Value {
        let data = if fits::<T>() {
            let mut inline = MaybeUninit::<[usize; INLINE_WORDS]>::uninit();
            // SAFETY: `fits` checked size and alignment, so a `T` fits at the
            // start of the (word aligned) buffer.
            unsafe { inline.as_mut_ptr().cast::<T>().write(v) };
            Data { inline }
        } else {
            Data {
                boxed: Box::into_raw(Box::new(v)).cast::<()>(),
            }
        };
        Value {
            vt: vtable::<T>(),
            data,
        }
    }

    /// Wraps a message, keeping how to encode it for another node.
    #[inline]
    pub fn new_message<M: crate::Message>(v: M) -> Value {
        let mut value = Value::new(v);
        value.vt = vtable_message::<M>();
        value
    }

    /// Encodes the value for another node; `None` if it was not stored as a
    /// message (see [`Value::new_message`]).
    pub fn encode(&self) -> Option<Result<(u64, Vec<u8>), crate::Error>> {
        self.vt.encode.map(|f| f(self))
    }

    /// Is it a `T`?
    #[inline]
    pub fn is<T: 'static>(&self) -> bool {
        self.vt.type_id == TypeId::of::<T>()
    }

    /// Takes the value out as a `T`; hands it back if it is not one.
    #[inline]
    pub fn downcast<T: 'static>(self) -> Result<T, Value> {
        if !self.is::<T>() {
            return Err(self);
        }
        let me = ManuallyDrop::new(self);
        if fits::<T>() {
            // SAFETY: it holds an inline `T` (type checked above), which
            // `ManuallyDrop` keeps from being dropped a second time.
            Ok(unsafe { me.data.inline.as_ptr().cast::<T>().read() })
        } else {
            // SAFETY: it holds a boxed `T` (type checked above), taken once.
            Ok(*unsafe { Box::from_raw(me.data.boxed.cast::<T>()) })
        }
    }

    /// The value as a `&T`, if it is one.
    #[inline]
    pub fn downcast_ref<T: 'static>(&self) -> Option<&T> {
        if !self.is::<T>() {
            return None;
        }
        if fits::<T>() {
            // SAFETY: it holds an inline `T` (type checked above).
            Some(unsafe { &*self.data.inline.as_ptr().cast::<T>() })
        } else {
            // SAFETY: it holds a boxed `T` (type checked above).
            Some(unsafe { &*self.data.boxed.cast::<T>() })
        }
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        // SAFETY: `vt` was made for the type `data` holds, which is still
        // there (`downcast` does not run this drop).
        unsafe { (self.vt.drop)(&mut self.data) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn small_and_large_values_round_trip() {
        assert_eq!(Value::new(7u64).downcast::<u64>().unwrap(), 7);
        assert_eq!(Value::new(()).downcast::<()>().unwrap(), ());
        let big = [1u64, 2, 3, 4, 5, 6];
        assert!(!fits::<[u64; 6]>());
        assert_eq!(Value::new(big).downcast::<[u64; 6]>().unwrap(), big);
        let s = Value::new(String::from("hi"));
        assert_eq!(s.downcast_ref::<String>().map(String::as_str), Some("hi"));
        let s = s.downcast::<u64>().unwrap_err();
        assert_eq!(s.downcast::<String>().unwrap(), "hi");
        // Over-aligned types are boxed.
        #[repr(align(16))]
        #[derive(Debug, PartialEq)]
        struct A(u8);
        assert!(!fits::<A>());
        assert_eq!(Value::new(A(3)).downcast::<A>().unwrap(), A(3));
    }

    #[test]
    fn dropped_values_run_their_drop_once() {
        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let n = Arc::new(AtomicUsize::new(0));
        drop(Value::new(Counted(n.clone()))); // inline
        drop(Value::new((Counted(n.clone()), [0u64; 8]))); // boxed
        assert!(fits::<[u64; 5]>() && !fits::<(Counted, [u64; 8])>());
        assert_eq!(n.load(Ordering::SeqCst), 2);
        let taken = Value::new(Counted(n.clone())).downcast::<Counted>().ok();
        assert_eq!(n.load(Ordering::SeqCst), 2, "a taken value is not dropped");
        drop(taken);
        assert_eq!(n.load(Ordering::SeqCst), 3);
    }
}
