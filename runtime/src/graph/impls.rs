//! [`Mobile`] for std types and graft's identities.
//!
//! Wire shapes (binary): numbers fixed width little endian (`usize`/`isize`
//! as 64 bits; a value that does not fit the receiver's `usize` is a decode
//! error), `bool` one byte, `char` as `u32`, strings and sequences a LEB128
//! length then the items, maps a length then key, value pairs, `Option` and
//! `Result` a LEB128 variant index then the payload, tuples and arrays their
//! items, `Box` its content, `Arc`/`Weak` a node (see `encode.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::wire::{Format, Source};
use super::{DecodeError, Decoder, Describer, Encoder, Mobile};
use crate::{MonitorRef, NodeId, Pid};

type Result<T> = std::result::Result<T, DecodeError>;

macro_rules! scalar_mobile {
    ($($t:ty),*) => {$(
        impl Mobile for $t {
            const WIRE_MIN: usize = std::mem::size_of::<$t>();
            fn describe(d: &mut Describer) {
                d.write(stringify!($t));
            }
            #[inline(always)]
            fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
                e.scalar(*self);
            }
            #[inline(always)]
            fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
                d.scalar()
            }
            #[inline]
            fn encode_slice<F: Format>(s: &[Self], e: &mut Encoder<'_, F>) {
                e.scalars(s);
            }
            #[inline]
            fn decode_vec<S: Source>(n: u64, _cap: usize, d: &mut Decoder<'_, S>) -> Result<Vec<Self>> {
                // `n` was checked against the input by `capacity`.
                d.scalars(n as usize)
            }
        }
    )*};
}
scalar_mobile!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64);

impl Mobile for usize {
    const WIRE_MIN: usize = 8;
    fn describe(d: &mut Describer) {
        d.write("usize");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.scalar(*self as u64);
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        let v: u64 = d.scalar()?;
        usize::try_from(v)
            .map_err(|_| d.invalid(format!("usize value {v} does not fit this machine")))
    }
}

impl Mobile for isize {
    const WIRE_MIN: usize = 8;
    fn describe(d: &mut Describer) {
        d.write("isize");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.scalar(*self as i64);
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        let v: i64 = d.scalar()?;
        isize::try_from(v)
            .map_err(|_| d.invalid(format!("isize value {v} does not fit this machine")))
    }
}

impl Mobile for bool {
    const WIRE_MIN: usize = 1;
    fn describe(d: &mut Describer) {
        d.write("bool");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.scalar(u8::from(*self));
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        match d.scalar::<u8>()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(d.invalid(format!("bool byte {b}"))),
        }
    }
}

impl Mobile for char {
    const WIRE_MIN: usize = 4;
    fn describe(d: &mut Describer) {
        d.write("char");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.scalar(u32::from(*self));
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        let v: u32 = d.scalar()?;
        char::from_u32(v).ok_or_else(|| d.invalid(format!("{v:#x} is not a char")))
    }
}

impl Mobile for () {
    fn describe(d: &mut Describer) {
        d.write("()");
    }
    #[inline]
    fn encode<F: Format>(&self, _e: &mut Encoder<'_, F>) {}
    #[inline]
    fn decode<S: Source>(_d: &mut Decoder<'_, S>) -> Result<Self> {
        Ok(())
    }
}

impl<T: ?Sized + Send + Sync + 'static> Mobile for PhantomData<T> {
    fn describe(d: &mut Describer) {
        d.write("PhantomData");
    }
    #[inline]
    fn encode<F: Format>(&self, _e: &mut Encoder<'_, F>) {}
    #[inline]
    fn decode<S: Source>(_d: &mut Decoder<'_, S>) -> Result<Self> {
        Ok(PhantomData)
    }
}

impl Mobile for String {
    const WIRE_MIN: usize = 1;
    fn describe(d: &mut Describer) {
        d.write("String");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.str(self);
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        d.str()
    }
}

impl Mobile for Duration {
    const WIRE_MIN: usize = 12;
    fn describe(d: &mut Describer) {
        d.write("Duration");
    }
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.begin("");
        e.scalar(self.as_secs());
        e.scalar(self.subsec_nanos());
        e.end();
    }
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        d.begin("")?;
        let secs: u64 = d.scalar()?;
        let nanos: u32 = d.scalar()?;
        d.end()?;
        if nanos >= 1_000_000_000 {
            return Err(d.invalid(format!("Duration with {nanos} nanoseconds")));
        }
        Ok(Duration::new(secs, nanos))
    }
}

impl Mobile for NodeId {
    const WIRE_MIN: usize = 8;
    fn describe(d: &mut Describer) {
        d.write("NodeId");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.scalar(self.0);
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        Ok(NodeId(d.scalar()?))
    }
}

impl Mobile for Pid {
    const WIRE_MIN: usize = 20;
    fn describe(d: &mut Describer) {
        d.write("Pid");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.begin("Pid");
        e.scalar(self.node().0);
        e.scalar(self.creation());
        e.scalar(self.serial());
        e.end();
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        d.begin("Pid")?;
        let node = NodeId(d.scalar()?);
        let creation = d.scalar()?;
        let serial = d.scalar()?;
        d.end()?;
        Ok(Pid::new(node, creation, serial))
    }
}

impl Mobile for MonitorRef {
    const WIRE_MIN: usize = 16;
    fn describe(d: &mut Describer) {
        d.write("MonitorRef");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.begin("Ref");
        e.scalar(self.node().0);
        e.scalar(self.id());
        e.end();
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        d.begin("Ref")?;
        let node = NodeId(d.scalar()?);
        let id = d.scalar()?;
        d.end()?;
        Ok(MonitorRef::new(node, id))
    }
}

impl<T: Mobile> Mobile for Box<T> {
    const WIRE_MIN: usize = T::WIRE_MIN;
    fn describe(d: &mut Describer) {
        d.write("Box<");
        d.describe::<T>();
        d.write(">");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.nest(|e| (**self).encode(e));
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        d.nest(|d| T::decode(d).map(Box::new))
    }
}

impl<T: Mobile> Mobile for Arc<T> {
    const WIRE_MIN: usize = 1;
    fn describe(d: &mut Describer) {
        d.write("Arc<");
        d.describe::<T>();
        d.write(">");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.arc(self);
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        d.arc()
    }
}

impl<T: Mobile> Mobile for Weak<T> {
    const WIRE_MIN: usize = 1;
    fn describe(d: &mut Describer) {
        d.write("Weak<");
        d.describe::<T>();
        d.write(">");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.weak(self);
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        d.weak()
    }
}

impl<T: Mobile> Mobile for Option<T> {
    const WIRE_MIN: usize = 1;
    fn describe(d: &mut Describer) {
        d.write("Option<");
        d.describe::<T>();
        d.write(">");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        match self {
            None => e.variant(0, "None"),
            Some(v) => {
                e.variant(1, "Some");
                v.encode(e);
            }
        }
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        match d.variant(&["None", "Some"])? {
            0 => Ok(None),
            _ => Ok(Some(T::decode(d)?)),
        }
    }
}

impl<T: Mobile, E: Mobile> Mobile for std::result::Result<T, E> {
    const WIRE_MIN: usize = 1;
    fn describe(d: &mut Describer) {
        d.write("Result<");
        d.describe::<T>();
        d.write(",");
        d.describe::<E>();
        d.write(">");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        match self {
            Ok(v) => {
                e.variant(0, "Ok");
                v.encode(e);
            }
            Err(v) => {
                e.variant(1, "Err");
                v.encode(e);
            }
        }
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        match d.variant(&["Ok", "Err"])? {
            0 => Ok(Ok(T::decode(d)?)),
            _ => Ok(Err(E::decode(d)?)),
        }
    }
}

/// Reads a sequence of `T` into a `Vec` (shared by the sequence types).
#[inline]
fn decode_items<T: Mobile, S: Source>(d: &mut Decoder<'_, S>) -> Result<Vec<T>> {
    d.nest(|d| {
        let n = d.seq_begin()?;
        let cap = d.capacity::<T>(n)?;
        let v = T::decode_vec(n, cap, d)?;
        match d.seq_end() {
            Ok(()) => Ok(v),
            Err(e) => Err(d.bury_err(v, e)),
        }
    })
}

impl<T: Mobile> Mobile for Vec<T> {
    const WIRE_MIN: usize = 1;
    fn describe(d: &mut Describer) {
        d.write("Vec<");
        d.describe::<T>();
        d.write(">");
    }
    #[inline]
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.nest(|e| {
            e.seq_begin(self.len());
            T::encode_slice(self, e);
            e.seq_end();
        });
    }
    #[inline]
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        decode_items(d)
    }
}

impl<T: Mobile> Mobile for VecDeque<T> {
    const WIRE_MIN: usize = 1;
    fn describe(d: &mut Describer) {
        d.write("VecDeque<");
        d.describe::<T>();
        d.write(">");
    }
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.nest(|e| {
            e.seq_begin(self.len());
            let (a, b) = self.as_slices();
            T::encode_slice(a, e);
            T::encode_slice(b, e);
            e.seq_end();
        });
    }
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        decode_items(d).map(VecDeque::from)
    }
}

impl<T: Mobile, const N: usize> Mobile for [T; N] {
    const WIRE_MIN: usize = T::WIRE_MIN.saturating_mul(N);
    fn describe(d: &mut Describer) {
        d.write("[");
        d.describe::<T>();
        d.write(&format!(";{N}]"));
    }
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.nest(|e| {
            e.begin("");
            T::encode_slice(self, e);
            e.end();
        });
    }
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
        d.nest(|d| {
            d.begin("")?;
            let cap = d.capacity::<T>(N as u64)?;
            let v = T::decode_vec(N as u64, cap, d)?;
            if let Err(e) = d.end() {
                return Err(d.bury_err(v, e));
            }
            match <[T; N]>::try_from(v) {
                Ok(a) => Ok(a),
                Err(v) => Err(d.bury_err(v, DecodeError::Invalid("array length".into()))),
            }
        })
    }
}

macro_rules! set_mobile {
    ($name:literal, $set:ident, [$($bound:tt)*], $($hasher:ident)?) => {
        impl<T: Mobile + $($bound)* $(, $hasher: BuildHasher + Default + Send + Sync + 'static)?> Mobile for $set<T $(, $hasher)?> {
            const WIRE_MIN: usize = 1;
            fn describe(d: &mut Describer) {
                d.write(concat!($name, "<"));
                d.describe::<T>();
                d.write(">");
            }
            fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
                e.nest(|e| {
                    e.seq_begin(self.len());
                    for x in self {
                        x.encode(e);
                    }
                    e.seq_end();
                });
            }
            fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
                d.nest(|d| {
                    let n = d.seq_begin()?;
                    let cap = d.capacity::<T>(n)?;
                    let mut set = set_mobile!(@new $set, cap $(, $hasher)?);
                    for _ in 0..n {
                        match T::decode(d) {
                            Ok(x) => {
                                if !set.insert(x) {
                                    return Err(d.bury_err(set, DecodeError::Invalid(concat!("duplicate item in a ", $name).into())));
                                }
                            }
                            Err(e) => return Err(d.bury_err(set, e)),
                        }
                    }
                    match d.seq_end() {
                        Ok(()) => Ok(set),
                        Err(e) => Err(d.bury_err(set, e)),
                    }
                })
            }
        }
    };
    (@new HashSet, $cap:expr, $h:ident) => { HashSet::with_capacity_and_hasher($cap, $h::default()) };
    (@new BTreeSet, $cap:expr) => {{ let _ = $cap; BTreeSet::new() }};
}
set_mobile!("HashSet", HashSet, [Eq + Hash], H);
set_mobile!("BTreeSet", BTreeSet, [Ord],);

macro_rules! map_mobile {
    ($name:literal, $map:ident, [$($bound:tt)*], $($hasher:ident)?) => {
        impl<K: Mobile + $($bound)*, V: Mobile $(, $hasher: BuildHasher + Default + Send + Sync + 'static)?> Mobile for $map<K, V $(, $hasher)?> {
            const WIRE_MIN: usize = 1;
            fn describe(d: &mut Describer) {
                d.write(concat!($name, "<"));
                d.describe::<K>();
                d.write(",");
                d.describe::<V>();
                d.write(">");
            }
            fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
                e.nest(|e| {
                    e.seq_begin(self.len());
                    for (k, v) in self {
                        e.begin("");
                        k.encode(e);
                        v.encode(e);
                        e.end();
                    }
                    e.seq_end();
                });
            }
            fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
                d.nest(|d| {
                    let n = d.seq_begin()?;
                    let cap = d.capacity_min(n, K::WIRE_MIN.saturating_add(V::WIRE_MIN))?;
                    let mut map = map_mobile!(@new $map, cap $(, $hasher)?);
                    for _ in 0..n {
                        if let Err(e) = d.begin("") {
                            return Err(d.bury_err(map, e));
                        }
                        let k = match K::decode(d) {
                            Ok(k) => k,
                            Err(e) => return Err(d.bury_err(map, e)),
                        };
                        let v = match V::decode(d) {
                            Ok(v) => v,
                            Err(e) => return Err(d.bury_err((map, k), e)),
                        };
                        if let Some(old) = map.insert(k, v) {
                            let e = DecodeError::Invalid(concat!("duplicate key in a ", $name).into());
                            return Err(d.bury_err((map, old), e));
                        }
                        if let Err(e) = d.end() {
                            return Err(d.bury_err(map, e));
                        }
                    }
                    match d.seq_end() {
                        Ok(()) => Ok(map),
                        Err(e) => Err(d.bury_err(map, e)),
                    }
                })
            }
        }
    };
    (@new HashMap, $cap:expr, $h:ident) => { HashMap::with_capacity_and_hasher($cap, $h::default()) };
    (@new BTreeMap, $cap:expr) => {{ let _ = $cap; BTreeMap::new() }};
}
map_mobile!("HashMap", HashMap, [Eq + Hash], H);
map_mobile!("BTreeMap", BTreeMap, [Ord],);

macro_rules! tuple_mobile {
    ($($n:tt $t:ident),+) => {
        impl<$($t: Mobile),+> Mobile for ($($t,)+) {
            const WIRE_MIN: usize = 0 $(+ $t::WIRE_MIN)+;
            fn describe(d: &mut Describer) {
                d.write("(");
                let mut _first = true;
                $(
                    if !_first {
                        d.write(",");
                    }
                    _first = false;
                    d.describe::<$t>();
                )+
                d.write(")");
            }
            #[inline]
            fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
                e.begin("");
                $( self.$n.encode(e); )+
                e.end();
            }
            #[inline]
            fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self> {
                d.begin("")?;
                let mut parts: ($(Option<$t>,)+) = Default::default();
                $(
                    match $t::decode(d) {
                        Ok(v) => parts.$n = Some(v),
                        Err(e) => return Err(d.bury_err(parts, e)),
                    }
                )+
                if let Err(e) = d.end() {
                    return Err(d.bury_err(parts, e));
                }
                Ok(($(parts.$n.unwrap_or_else(|| unreachable!("every part was decoded")),)+))
            }
        }
    };
}
tuple_mobile!(0 A);
tuple_mobile!(0 A, 1 B);
tuple_mobile!(0 A, 1 B, 2 C);
tuple_mobile!(0 A, 1 B, 2 C, 3 D);
tuple_mobile!(0 A, 1 B, 2 C, 3 D, 4 E);
tuple_mobile!(0 A, 1 B, 2 C, 3 D, 4 E, 5 G);
tuple_mobile!(0 A, 1 B, 2 C, 3 D, 4 E, 5 G, 6 H);
tuple_mobile!(0 A, 1 B, 2 C, 3 D, 4 E, 5 G, 6 H, 7 I);
tuple_mobile!(0 A, 1 B, 2 C, 3 D, 4 E, 5 G, 6 H, 7 I, 8 J);
tuple_mobile!(0 A, 1 B, 2 C, 3 D, 4 E, 5 G, 6 H, 7 I, 8 J, 9 K);
tuple_mobile!(0 A, 1 B, 2 C, 3 D, 4 E, 5 G, 6 H, 7 I, 8 J, 9 K, 10 L);
tuple_mobile!(0 A, 1 B, 2 C, 3 D, 4 E, 5 G, 6 H, 7 I, 8 J, 9 K, 10 L, 11 M);
