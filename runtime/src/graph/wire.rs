//! Wire formats: the binary and textual forms, and the scalar types.
//!
//! The encoder and decoder are generic over a *format* marker. The marker is a
//! zero-sized type whose `KIND` constant is matched in the encoder's methods,
//! so each format compiles to straight-line code (the binary format never
//! tests for the textual one at run time).
//!
//! Binary layout of scalars: fixed width, little endian. Lengths, variant
//! indices and labels: unsigned LEB128 (7 bits per byte, low groups first).

use std::fmt::Write as _;

mod sealed {
    pub trait Sealed {}
}

/// What an encoder pass produces.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Pass 1: marks visited and shared nodes, writes nothing.
    Walk,
    /// Pass 2, binary form.
    Binary,
    /// Pass 2, textual form.
    Text,
}

/// An encoder format (pass 1, binary or text). Sealed.
pub trait Format: sealed::Sealed + Send + Sync + Sized + 'static {
    #[doc(hidden)]
    const KIND: Kind;
    /// The decoder source that reads what this format writes.
    #[doc(hidden)]
    type Src: Source;
}

/// A decoder source (binary or text). Sealed.
pub trait Source: sealed::Sealed + Send + Sync + Sized + 'static {
    #[doc(hidden)]
    const TEXT: bool;
}

/// Pass 1 of the encoder: walks the value, writes nothing.
#[derive(Debug)]
pub struct Walk;
/// The compact binary form.
#[derive(Debug)]
pub struct Binary;
/// The textual form.
#[derive(Debug)]
pub struct Text;

impl sealed::Sealed for Walk {}
impl sealed::Sealed for Binary {}
impl sealed::Sealed for Text {}

impl Format for Walk {
    const KIND: Kind = Kind::Walk;
    type Src = Binary;
}
impl Format for Binary {
    const KIND: Kind = Kind::Binary;
    type Src = Binary;
}
impl Format for Text {
    const KIND: Kind = Kind::Text;
    type Src = Text;
}
impl Source for Binary {
    const TEXT: bool = false;
}
impl Source for Text {
    const TEXT: bool = true;
}

/// A fixed-width number: the primitive integers and floats. Sealed.
pub trait Scalar: sealed::Sealed + Copy + Send + Sync + 'static {
    /// Width on the wire, in bytes.
    #[doc(hidden)]
    const SIZE: usize;
    /// Name in type descriptors.
    #[doc(hidden)]
    const NAME: &'static str;
    #[doc(hidden)]
    fn put(self, out: &mut [u8]);
    #[doc(hidden)]
    fn push(self, out: &mut Vec<u8>);
    #[doc(hidden)]
    fn get(bytes: &[u8]) -> Self;
    #[doc(hidden)]
    fn text(self, out: &mut String);
    #[doc(hidden)]
    fn parse(token: &str) -> Option<Self>;
}

macro_rules! int_scalar {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Scalar for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const NAME: &'static str = stringify!($t);
            #[inline(always)]
            fn put(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            #[inline(always)]
            fn push(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            #[inline(always)]
            fn get(bytes: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(bytes);
                <$t>::from_le_bytes(a)
            }
            fn text(self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
            fn parse(token: &str) -> Option<Self> {
                token.parse().ok()
            }
        }
    )*};
}
int_scalar!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

macro_rules! float_scalar {
    ($($t:ty, $bits:ty);*) => {$(
        impl sealed::Sealed for $t {}
        impl Scalar for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const NAME: &'static str = stringify!($t);
            #[inline(always)]
            fn put(self, out: &mut [u8]) {
                self.to_bits().put(out);
            }
            #[inline(always)]
            fn push(self, out: &mut Vec<u8>) {
                self.to_bits().push(out);
            }
            #[inline(always)]
            fn get(bytes: &[u8]) -> Self {
                <$t>::from_bits(<$bits as Scalar>::get(bytes))
            }
            fn text(self, out: &mut String) {
                // Debug prints the shortest form that parses back to the same
                // bits; NaN keeps its payload as hex.
                if self.is_nan() {
                    let _ = write!(out, "NaN_{:x}", self.to_bits());
                } else {
                    let _ = write!(out, "{self:?}");
                }
            }
            fn parse(token: &str) -> Option<Self> {
                match token.strip_prefix("NaN_") {
                    Some(hex) => <$bits>::from_str_radix(hex, 16).ok().map(<$t>::from_bits),
                    None => token.parse().ok(),
                }
            }
        }
    )*};
}
float_scalar!(f32, u32; f64, u64);

/// Appends `v` as unsigned LEB128.
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an unsigned LEB128 at `*pos`; `None` when truncated or over 64 bits.
#[inline]
pub(crate) fn get_varint(input: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *input.get(*pos)?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut pos = 0;
            assert_eq!(get_varint(&out, &mut pos), Some(v));
            assert_eq!(pos, out.len());
        }
        let mut pos = 0;
        assert_eq!(get_varint(&[0xff; 11], &mut pos), None);
    }

    #[test]
    fn float_text_keeps_bits() {
        for v in [
            0.0f64,
            -0.0,
            1.5,
            f64::MIN_POSITIVE,
            f64::INFINITY,
            f64::from_bits(0x7ff8_0000_0000_0001),
        ] {
            let mut s = String::new();
            v.text(&mut s);
            assert_eq!(f64::parse(&s).map(f64::to_bits), Some(v.to_bits()), "{s}");
        }
    }
}
