//! Mobile functions: [`MobileFn`], [`MobileFnOnce`] and [`Encoded`].
//!
//! A mobile function is a body plus an environment `E: Mobile` passed beside
//! it. The body is a non-capturing closure (or a fn item), of a zero-sized
//! type `F: Fn(&E, A) -> R` (or `FnOnce(E) -> R`), so the compiler checks
//! the capture list: a body that touches anything not in `E` does not
//! compile. On the wire it is a code id (see `code.rs`) plus the environment's
//! graph; sharing between the environment and the rest of the message is
//! kept.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use super::code;
use super::wire::{Binary, Format, Kind, Source, Text, Walk};
use super::{DecodeError, Decoder, Describer, Encoder, Mobile};

/// The environment side of a type-erased closure.
pub(crate) trait EnvEncode: Send + Sync {
    fn env_walk(&self, e: &mut Encoder<'_, Walk>);
    fn env_binary(&self, e: &mut Encoder<'_, Binary>);
    fn env_text(&self, e: &mut Encoder<'_, Text>);
    /// Address of the entry (see `code.rs`) for the text or binary source.
    fn code(&self, text: bool) -> usize;
}

trait ErasedFn<A, R>: EnvEncode {
    fn call(&self, a: A) -> R;
    fn env(&self) -> &dyn EnvEncode;
}

trait ErasedOnce<R>: EnvEncode {
    fn call(self: Box<Self>) -> R;
    fn env(&self) -> &dyn EnvEncode;
}

/// The body `F` is zero-sized: the closure is its environment.
struct FnClosure<E, A, R, F> {
    env: E,
    body: F,
    _sig: PhantomData<fn(A) -> R>,
}

struct OnceClosure<E, R, F> {
    env: E,
    body: F,
    _sig: PhantomData<fn() -> R>,
}

struct ReturningClosure<E, R, F> {
    env: E,
    body: F,
    _sig: PhantomData<fn() -> R>,
}

macro_rules! env_encode {
    ($ty:ty, [$($g:tt)*], $code:ident <$($ga:ident),*>) => {
        impl<$($g)*> EnvEncode for $ty {
            fn env_walk(&self, e: &mut Encoder<'_, Walk>) {
                self.env.encode(e);
            }
            fn env_binary(&self, e: &mut Encoder<'_, Binary>) {
                self.env.encode(e);
            }
            fn env_text(&self, e: &mut Encoder<'_, Text>) {
                self.env.encode(e);
            }
            fn code(&self, text: bool) -> usize {
                code::code_of::<code::$code<$($ga,)* Binary>, code::$code<$($ga,)* Text>>(text)
            }
        }
    };
}

env_encode!(
    FnClosure<E, A, R, F>,
    [E: Mobile, A: 'static, R: 'static, F: Fn(&E, A) -> R + Copy + Send + Sync + 'static],
    FnCode<E, A, R, F>
);
env_encode!(
    OnceClosure<E, R, F>,
    [E: Mobile, R: 'static, F: FnOnce(E) -> R + Copy + Send + Sync + 'static],
    OnceCode<E, R, F>
);
env_encode!(
    ReturningClosure<E, R, F>,
    [E: Mobile, R: Mobile, F: FnOnce(E) -> R + Copy + Send + Sync + 'static],
    ReturningCode<E, R, F>
);

impl<E, A, R, F> ErasedFn<A, R> for FnClosure<E, A, R, F>
where
    E: Mobile,
    A: 'static,
    R: 'static,
    F: Fn(&E, A) -> R + Copy + Send + Sync + 'static,
{
    fn call(&self, a: A) -> R {
        (self.body)(&self.env, a)
    }
    fn env(&self) -> &dyn EnvEncode {
        self
    }
}

impl<E, R, F> ErasedOnce<R> for OnceClosure<E, R, F>
where
    E: Mobile,
    R: 'static,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
{
    fn call(self: Box<Self>) -> R {
        (self.body)(self.env)
    }
    fn env(&self) -> &dyn EnvEncode {
        self
    }
}

impl<E, R, F> ErasedOnce<Encoded> for ReturningClosure<E, R, F>
where
    E: Mobile,
    R: Mobile,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
{
    fn call(self: Box<Self>) -> Encoded {
        Encoded(super::encode(&(self.body)(self.env)))
    }
    fn env(&self) -> &dyn EnvEncode {
        self
    }
}

/// A function that can be called many times and sent to another node: a
/// code reference plus a mobile environment.
///
/// Build it from an environment `E: Mobile` and a non-capturing closure
/// taking `&E`, or with [`mobile_fn!`](crate::mobile_fn). It is `Clone`
/// (cheap: the environment is shared), `Send + Sync`, and [`Mobile`]: it can
/// travel inside messages, to any node whose executable has the same
/// function (the same code id, see [`code_id`](Self::code_id)).
///
/// # Examples
///
/// ```
/// use graft::graph::{self, MobileFn};
///
/// let offset = 10i64;
/// let add = MobileFn::new(offset, |offset: &i64, x: i64| x + offset);
/// assert_eq!(add.call(5), 15);
///
/// let back: MobileFn<i64, i64> = graph::decode(&graph::encode(&add)).unwrap();
/// assert_eq!(back.call(1), 11);
///
/// // The same with the macro: captures listed in brackets.
/// let add = graft::mobile_fn!([offset] |x: i64| x + offset);
/// assert_eq!(add.call(2), 12);
/// ```
pub struct MobileFn<A, R> {
    inner: Arc<dyn ErasedFn<A, R>>,
}

impl<A: 'static, R: 'static> MobileFn<A, R> {
    /// A function with environment `env` and code `body`.
    ///
    /// `body` must be a non-capturing closure (or a fn item): what it needs
    /// comes from `env`. Its type then has no size, names its code, and
    /// gets an entry in the table of mobile functions (see
    /// [`mobile_entries`](super::mobile_entries)). A fn pointer or a
    /// capturing closure is refused when the program is built.
    ///
    /// ```compile_fail
    /// let body: fn(&u8, u8) -> u8 = |a, b| a + b;
    /// let f = graft::graph::MobileFn::new(1u8, body); // a fn pointer: refused
    /// ```
    ///
    /// ```compile_fail
    /// let k = 5u8;
    /// // Captures `k` (a `Copy` closure, but not zero-sized): refused.
    /// let f = graft::graph::MobileFn::new((), move |_: &(), x: u8| x + k);
    /// ```
    pub fn new<E, F>(env: E, body: F) -> Self
    where
        E: Mobile,
        F: Fn(&E, A) -> R + Copy + Send + Sync + 'static,
    {
        code::assert_body::<F>();
        MobileFn {
            inner: Arc::new(FnClosure {
                env,
                body,
                _sig: PhantomData,
            }),
        }
    }

    /// The id of this function's code on the wire (0 if this executable
    /// has no table of mobile functions). Two functions made from the same
    /// body (and types) have the same id.
    ///
    /// ```
    /// use graft::graph::MobileFn;
    /// let a = MobileFn::new(1u8, |k: &u8, x: u8| x + k);
    /// let b = MobileFn::new(2u8, |k: &u8, x: u8| x * k);
    /// assert_ne!(a.code_id(), b.code_id());
    /// ```
    pub fn code_id(&self) -> u64 {
        code::id_of(self.inner.code(false))
    }

    /// Calls the function.
    pub fn call(&self, a: A) -> R {
        self.inner.call(a)
    }
}

impl<A, R> Clone for MobileFn<A, R> {
    fn clone(&self) -> Self {
        MobileFn {
            inner: self.inner.clone(),
        }
    }
}

impl<A, R> fmt::Debug for MobileFn<A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MobileFn({} #{:016x})",
            std::any::type_name::<fn(A) -> R>(),
            code::id_of(self.inner.code(false))
        )
    }
}

impl<A: 'static, R: 'static> Mobile for MobileFn<A, R> {
    const WIRE_MIN: usize = 8;
    fn describe(d: &mut Describer) {
        // Functions only cross between identical builds, so compiler type
        // names are stable enough here.
        d.write("MobileFn<");
        d.write(std::any::type_name::<A>());
        d.write(",");
        d.write(std::any::type_name::<R>());
        d.write(">");
    }
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        write_function(e, "fn", self.inner.env());
    }
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self, DecodeError> {
        d.begin("fn")?;
        let f = code::read_fn::<A, R, S>(d)?;
        d.end()?;
        Ok(f)
    }
}

/// A function that is called once, such as a spawn body, and can be sent to
/// another node: a code reference plus a mobile environment.
///
/// # Examples
///
/// ```
/// use graft::graph::{self, Encoded, MobileFnOnce};
///
/// let job = MobileFnOnce::new(vec![1u64, 2, 3], |v: Vec<u64>| v.iter().sum::<u64>());
/// let job: MobileFnOnce<u64> = graph::decode(&graph::encode(&job)).unwrap();
/// assert_eq!(job.call(), 6);
///
/// // For `call_on`: the receiver runs it without knowing `R`, and gets the
/// // encoded result back.
/// let job = MobileFnOnce::<Encoded>::returning(7u32, |x| x * 6);
/// let job: MobileFnOnce<Encoded> = graph::decode(&graph::encode(&job)).unwrap();
/// let result = job.call();
/// assert_eq!(result.decode::<u32>().unwrap(), 42);
/// ```
pub struct MobileFnOnce<R> {
    inner: Box<dyn ErasedOnce<R>>,
}

impl<R: 'static> MobileFnOnce<R> {
    /// A function with environment `env` and code `body`, a non-capturing
    /// closure or a fn item (as for [`MobileFn::new`]).
    pub fn new<E, F>(env: E, body: F) -> Self
    where
        E: Mobile,
        F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
    {
        code::assert_body::<F>();
        MobileFnOnce {
            inner: Box::new(OnceClosure {
                env,
                body,
                _sig: PhantomData,
            }),
        }
    }

    /// The id of this function's code on the wire (see
    /// [`MobileFn::code_id`]).
    pub fn code_id(&self) -> u64 {
        code::id_of(self.inner.code(false))
    }

    /// Calls the function.
    pub fn call(self) -> R {
        self.inner.call()
    }
}

impl MobileFnOnce<Encoded> {
    /// A function that runs `body` on `env` and returns its result encoded
    /// (with [`graph::encode`](fn@super::encode): header, descriptor and all).
    /// The node that runs it needs not know `R`; the node that asked decodes
    /// the [`Encoded`] as an `R`.
    pub fn returning<E, R, F>(env: E, body: F) -> Self
    where
        E: Mobile,
        R: Mobile,
        F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
    {
        code::assert_body::<F>();
        MobileFnOnce {
            inner: Box::new(ReturningClosure {
                env,
                body,
                _sig: PhantomData,
            }),
        }
    }
}

impl<R> fmt::Debug for MobileFnOnce<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MobileFnOnce({} #{:016x})",
            std::any::type_name::<fn() -> R>(),
            code::id_of(self.inner.code(false))
        )
    }
}

/// Writes a mobile function under `tag`: its code id, then its
/// environment.
fn write_function<F: Format>(e: &mut Encoder<'_, F>, tag: &str, f: &dyn EnvEncode) {
    e.begin(tag);
    e.field("id");
    let id = match F::KIND {
        Kind::Walk => 0,
        _ => code::id_of(f.code(<F::Src as Source>::TEXT)),
    };
    e.scalar(id);
    e.field("env");
    e.env(f);
    e.end();
}

impl<R: 'static> Mobile for MobileFnOnce<R> {
    const WIRE_MIN: usize = 8;
    fn describe(d: &mut Describer) {
        d.write("MobileFnOnce<");
        d.write(std::any::type_name::<R>());
        d.write(">");
    }
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        write_function(e, "fn_once", self.inner.env());
    }
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self, DecodeError> {
        d.begin("fn_once")?;
        let f = code::read_once::<R, S>(d)?;
        d.end()?;
        Ok(f)
    }
}

/// An encoded value (the output of [`graph::encode`](fn@super::encode)), as
/// returned by a [`MobileFnOnce::returning`] function.
#[derive(Clone, PartialEq, Eq)]
pub struct Encoded(pub Vec<u8>);

impl Encoded {
    /// Decodes the value.
    ///
    /// # Errors
    ///
    /// As [`graph::decode`](fn@super::decode).
    pub fn decode<T: Mobile>(&self) -> Result<T, DecodeError> {
        super::decode(&self.0)
    }

    /// The bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match super::peek_descriptor(&self.0) {
            Ok(h) => write!(f, "Encoded({} bytes, type {h:016x})", self.0.len()),
            Err(_) => write!(f, "Encoded({} bytes)", self.0.len()),
        }
    }
}

impl Mobile for Encoded {
    const WIRE_MIN: usize = 1;
    fn describe(d: &mut Describer) {
        d.write("Encoded");
    }
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        self.0.encode(e);
    }
    fn decode<S: Source>(d: &mut Decoder<'_, S>) -> Result<Self, DecodeError> {
        Vec::decode(d).map(Encoded)
    }
}

/// Builds a [`MobileFn`] from a closure and its
/// capture list: `mobile_fn!([a, b] |x: T| body)` or `mobile_fn!([a] || body)`
/// (argument `()`).
///
/// The captured variables are moved into the environment (a tuple, which
/// must be [`Mobile`]); inside the body each name is a
/// reference to its value. A body that uses a variable not in the list does
/// not compile.
///
/// ```
/// let offset = 10i64;
/// let scale = 2i64;
/// let f = graft::mobile_fn!([offset, scale] |x: i64| x * scale + offset);
/// assert_eq!(f.call(1), 12);
/// ```
///
/// A variable left out of the list is a compile error:
///
/// ```compile_fail
/// let secret = 5i64;
/// let f = graft::mobile_fn!([] |x: i64| x + secret);
/// ```
#[macro_export]
macro_rules! mobile_fn {
    ([$($cap:ident),* $(,)?] |$arg:ident : $ty:ty| $body:expr) => {
        $crate::graph::MobileFn::new(($($cap,)*), |__graft_env, $arg: $ty| {
            let ($($cap,)*) = __graft_env;
            $body
        })
    };
    ([$($cap:ident),* $(,)?] || $body:expr) => {
        $crate::graph::MobileFn::new(($($cap,)*), |__graft_env, (): ()| {
            let ($($cap,)*) = __graft_env;
            $body
        })
    };
}

/// Builds a [`MobileFnOnce`] from a closure and
/// its capture list: `mobile_fn_once!([a, b] || body)`. The captured
/// variables are moved into the environment and moved into the body.
///
/// ```
/// let name = String::from("world");
/// let f = graft::mobile_fn_once!([name] || format!("hello {name}"));
/// assert_eq!(f.call(), "hello world");
/// ```
#[macro_export]
macro_rules! mobile_fn_once {
    ([$($cap:ident),* $(,)?] || $body:expr) => {
        $crate::graph::MobileFnOnce::new(($($cap,)*), |__graft_env| {
            let ($($cap,)*) = __graft_env;
            $body
        })
    };
}
