//! Structural type descriptors.
//!
//! A descriptor is built from the type's structure: names of structs, enums,
//! fields and variants, and the descriptors of the field types. Its readable
//! form is canonical text such as
//!
//! ```text
//! struct Node{value:u64,children:Vec<Arc<@Node>>}
//! ```
//!
//! where `@Node` refers back to an enclosing type being described (recursive
//! types). The hash is the first 8 bytes (little endian) of the BLAKE3 hash of
//! the readable form: stable across builds, machines and compiler versions.
//! The *name* is the readable form without the bodies of named types
//! (`Vec<Arc<Node>>`): short enough to travel in every header, and it names
//! both sides of a mismatch in [`DecodeError::TypeMismatch`].
//!
//! [`DecodeError::TypeMismatch`]: super::DecodeError::TypeMismatch

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::{OnceLock, RwLock};

use super::wire::Scalar;
use super::Mobile;

/// A type's structural descriptor: a stable 64-bit hash and a readable form.
///
/// ```
/// use graft::graph::descriptor_of;
/// let d = descriptor_of::<Vec<Option<u32>>>();
/// assert_eq!(d.name(), "Vec<Option<u32>>");
/// assert_eq!(d.hash(), descriptor_of::<Vec<Option<u32>>>().hash());
/// assert_ne!(d.hash(), descriptor_of::<Vec<Option<u64>>>().hash());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Descriptor {
    hash: u64,
    name: String,
    form: String,
}

impl Descriptor {
    /// The stable 64-bit hash of the structure.
    pub fn hash(&self) -> u64 {
        self.hash
    }
    /// The short name: the structure with named types' bodies left out.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The full readable structure.
    pub fn readable(&self) -> &str {
        &self.form
    }
}

impl fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{:016x}]", self.form, self.hash)
    }
}

impl fmt::Display for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.form)
    }
}

/// The stable hash of a readable form.
fn hash_form(form: &str) -> u64 {
    first_u64(blake3::hash(form.as_bytes()).as_bytes())
}

/// The first 8 bytes of a BLAKE3 hash, little endian.
pub(crate) fn first_u64(hash: &[u8; 32]) -> u64 {
    <u64 as Scalar>::get(&hash[..8])
}

/// Builds a descriptor; [`Mobile::describe`] writes into it.
#[derive(Debug, Default)]
pub struct Describer {
    form: String,
    name: String,
    /// Named types being described, innermost last, with their names and
    /// whether a field was written yet.
    open: Vec<(TypeId, &'static str)>,
    first: Vec<bool>,
}

impl Describer {
    /// Appends literal text (for container types: `"Vec<"`, `">"`).
    pub fn write(&mut self, s: &str) {
        self.form.push_str(s);
        if self.open.is_empty() {
            self.name.push_str(s);
        }
    }

    /// Appends the descriptor of `T`.
    pub fn describe<T: Mobile>(&mut self) {
        T::describe(self);
    }

    /// Starts a named type (`kind` is `"struct"` or `"enum"`). Returns false,
    /// having written a back-reference, if `T` is already being described
    /// (a recursive type): then the caller writes nothing more.
    pub fn enter<T: 'static>(&mut self, kind: &str, name: &'static str) -> bool {
        let ty = TypeId::of::<T>();
        if self.open.iter().any(|(t, _)| *t == ty) {
            self.write("@");
            self.write(name);
            return false;
        }
        self.form.push_str(kind);
        self.form.push(' ');
        self.write(name);
        self.form.push('{');
        self.open.push((ty, name));
        self.first.push(true);
        true
    }

    /// Starts a field (named, or `""` for tuple fields).
    pub fn field(&mut self, name: &str) {
        self.separator();
        self.form.push_str(name);
        self.form.push(':');
    }

    /// Starts a variant of an enum; its fields follow, then
    /// [`leave_variant`](Self::leave_variant).
    pub fn variant(&mut self, name: &str) {
        self.separator();
        self.form.push_str(name);
        self.form.push('(');
        self.first.push(true);
    }

    /// Ends a variant.
    pub fn leave_variant(&mut self) {
        self.first.pop();
        self.form.push(')');
    }

    /// Ends a named type.
    pub fn leave(&mut self) {
        self.first.pop();
        self.open.pop();
        self.form.push('}');
    }

    fn separator(&mut self) {
        if let Some(first) = self.first.last_mut() {
            if !*first {
                self.form.push(',');
            }
            *first = false;
        }
    }

    fn finish(self) -> Descriptor {
        Descriptor {
            hash: hash_form(&self.form),
            name: self.name,
            form: self.form,
        }
    }
}

type Last = std::cell::Cell<Option<(TypeId, &'static Descriptor)>>;

thread_local! {
    static LAST: Last = const { std::cell::Cell::new(None) };
}

// Not inlined: the caller may be a green thread that moves between threads
// across a yield, so the thread-local's address must be computed afresh at
// each use (see the runtime's `context.rs`).
#[inline(never)]
fn last_descriptor() -> Option<(TypeId, &'static Descriptor)> {
    LAST.with(|l| l.get())
}

#[inline(never)]
fn set_last_descriptor(ty: TypeId, d: &'static Descriptor) {
    LAST.with(|l| l.set(Some((ty, d))));
}

/// The descriptor of `T`, computed once per type and cached for the life of
/// the process.
///
/// A one-entry cache per thread (the last type asked for) lets a stream of
/// messages of one type skip the shared lock (two atomic writes on a line
/// every thread shares).
///
/// ```
/// use graft::graph::descriptor_of;
/// assert_eq!(descriptor_of::<(u8, String)>().readable(), "(u8,String)");
/// ```
pub fn descriptor_of<T: Mobile>() -> &'static Descriptor {
    type Cache = RwLock<HashMap<TypeId, &'static Descriptor, ahash::RandomState>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let ty = TypeId::of::<T>();
    if let Some((t, d)) = last_descriptor() {
        if t == ty {
            return d;
        }
    }
    let cache = CACHE.get_or_init(Default::default);
    let found = cache
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&ty)
        .copied();
    if let Some(d) = found {
        set_last_descriptor(ty, d);
        return d;
    }
    let mut b = Describer::default();
    T::describe(&mut b);
    let d: &'static Descriptor = Box::leak(Box::new(b.finish()));
    let mut w = cache.write().unwrap_or_else(|e| e.into_inner());
    match w.get(&ty) {
        Some(&existing) => existing,
        None => {
            w.insert(ty, d);
            d
        }
    }
}
