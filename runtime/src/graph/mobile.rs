//! The [`Mobile`] trait.

use std::sync::Arc;

use super::wire::{Format, Source};
use super::{DecodeError, Decoder, Describer, Encoder};

/// A value that can cross a node boundary as a graph.
///
/// Implemented for the primitive types, `String`, the std collections,
/// `Option`, `Result`, tuples (up to 12), arrays, `Box`, `Arc` and `Weak`
/// (sharing and cycles kept), [`Cell`](super::Cell), `Duration`, `()`, and
/// graft's [`Pid`](crate::Pid), [`NodeId`](crate::NodeId),
/// [`MonitorRef`](crate::MonitorRef), [`MobileFn`](super::MobileFn) and
/// [`MobileFnOnce`](super::MobileFnOnce). Derive it for your own structs and
/// enums with `#[derive(Mobile)]`; a type that owns a local resource (a file,
/// a socket, a lock guard) simply does not implement it.
///
/// Mobile values are `Send + Sync + 'static`: deep values are encoded and
/// decoded across extra stack-segment threads (see the module docs of
/// [`graph`](super)), and messages cross threads anyway.
///
/// An implementation writes its parts with the [`Encoder`] methods and reads
/// them back with the [`Decoder`] methods of the same names, in the same
/// order; [`describe`](Mobile::describe) states the structure.
///
/// # Examples
///
/// ```
/// use graft::Mobile;
/// use graft::graph::{decode, encode};
///
/// #[derive(Mobile, Debug, PartialEq)]
/// enum Shape {
///     Circle { r: f64 },
///     Rect(f64, f64),
///     Empty,
/// }
///
/// let v = vec![Shape::Circle { r: 1.0 }, Shape::Rect(2.0, 3.0), Shape::Empty];
/// let bytes = encode(&v);
/// assert_eq!(decode::<Vec<Shape>>(&bytes).unwrap(), v);
/// ```
///
/// A hand-written implementation (what the derive generates, in short):
///
/// ```
/// use graft::graph::{self, DecodeError, Decoder, Describer, Encoder, Format, Mobile, Source};
///
/// #[derive(Debug, PartialEq)]
/// struct Celsius(f64);
///
/// impl Mobile for Celsius {
///     fn describe(d: &mut Describer) {
///         if d.enter::<Self>("struct", "Celsius") {
///             d.field("");
///             d.describe::<f64>();
///             d.leave();
///         }
///     }
///     fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
///         e.begin("Celsius");
///         e.scalar(self.0);
///         e.end();
///     }
///     fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self, DecodeError> {
///         d.begin("Celsius")?;
///         let v: f64 = d.scalar()?;
///         d.end()?;
///         if v < -273.15 {
///             return Err(d.invalid("below absolute zero"));
///         }
///         Ok(Celsius(v))
///     }
/// }
///
/// assert_eq!(graph::decode::<Celsius>(&graph::encode(&Celsius(21.5))).unwrap(), Celsius(21.5));
/// assert!(graph::decode::<Celsius>(&graph::encode(&Celsius(-300.0))).is_err());
/// ```
pub trait Mobile: Sized + Send + Sync + 'static {
    /// The fewest bytes one value takes in the binary form (used to bound
    /// allocations when decoding collections; 0 if unknown).
    #[doc(hidden)]
    const WIRE_MIN: usize = 0;

    /// Writes this type's structure (see [`Describer`]).
    fn describe(d: &mut Describer);

    /// Writes the value.
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>);

    /// Reads a value.
    ///
    /// # Errors
    ///
    /// Any [`DecodeError`]; an implementation never panics on bad input.
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self, DecodeError>;

    /// Writes a slice of values (overridden by the numbers: one copy).
    #[doc(hidden)]
    #[inline]
    fn encode_slice<F: Format>(s: &[Self], e: &mut Encoder<'_, F>) {
        for x in s {
            x.encode(e);
        }
    }

    /// Reads `n` values, `n` already checked by [`Decoder::capacity`].
    #[doc(hidden)]
    #[inline]
    fn decode_vec<S: Source>(
        n: u64,
        cap: usize,
        d: &mut Decoder<'_, S>,
    ) -> Result<Vec<Self>, DecodeError> {
        let mut v = Vec::with_capacity(cap);
        for _ in 0..n {
            match Self::decode(d) {
                Ok(x) => v.push(x),
                Err(e) => return Err(d.bury_err(v, e)),
            }
        }
        Ok(v)
    }

    /// Reads the content of an `Arc` node; `shared` nodes are registered so
    /// that later back-references find them (overridden by
    /// [`Cell`](super::Cell)).
    #[doc(hidden)]
    #[inline]
    fn decode_arc<S: Source>(
        d: &mut Decoder<'_, S>,
        shared: bool,
    ) -> Result<Arc<Self>, DecodeError> {
        if shared {
            d.decode_cyclic::<Self>()
        } else {
            Ok(Arc::new(Self::decode(d)?))
        }
    }
}
