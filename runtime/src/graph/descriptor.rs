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

    /// Where `found` first differs from this descriptor, in words: the
    /// enclosing type, field or variant, and both sides
    /// (`` KvCall.value: `u64` expected, `i64` found ``); `None` when the
    /// structures are the same.
    ///
    /// ```
    /// use graft::graph::{descriptor_of, Mobile};
    /// mod v1 { #[derive(graft::Mobile)] pub struct Put { pub key: String, pub value: u64 } }
    /// mod v2 { #[derive(graft::Mobile)] pub struct Put { pub key: String, pub value: i64 } }
    /// let why = descriptor_of::<v1::Put>().first_difference(descriptor_of::<v2::Put>()).unwrap();
    /// assert_eq!(why, "Put.value: `u64` expected, `i64` found");
    /// ```
    pub fn first_difference(&self, found: &Descriptor) -> Option<String> {
        Descriptor::first_difference_in(&self.form, &found.form)
    }

    /// [`first_difference`](Self::first_difference) on two readable forms
    /// (as [`readable`](Self::readable) gives them, e.g. one that came from
    /// another node).
    pub fn first_difference_in(expected: &str, found: &str) -> Option<String> {
        let (e, f) = (expected.as_bytes(), found.as_bytes());
        let mut i = e
            .iter()
            .zip(f)
            .position(|(a, b)| a != b)
            .unwrap_or(e.len().min(f.len()));
        // Back to a character boundary (the form may come from another
        // node, and names may be non-ASCII); the bytes before `i` are the
        // same on both sides, so it is a boundary in both.
        while !expected.is_char_boundary(i) {
            i -= 1;
        }
        if i == e.len() && i == f.len() {
            return None;
        }
        let start = expected[..i]
            .rfind(|c: char| "{}(),:<>".contains(c))
            .map_or(0, |p| p + 1);
        let ctx = context_at(&expected[..start]);
        let (pe, pf) = (item(&expected[start..]), item(&found[start..]));
        if pe != pf {
            return Some(format!("{ctx}: `{pe}` expected, `{pf}` found"));
        }
        // The same item on both sides: a member follows on one side only.
        let (re, rf) = (&expected[start + pe.len()..], &found[start + pf.len()..]);
        let next = |rest: &str| item(rest.strip_prefix(',').unwrap_or(rest)).to_string();
        // The member before the extra one is not where they differ.
        let ctx = match ctx.rsplit_once('.') {
            Some((head, last)) if !last.contains([':', ' ']) => head.to_string(),
            _ => ctx,
        };
        Some(if rf.starts_with(',') && !re.starts_with(',') {
            format!("{ctx}: `{}` is only in the found type", next(rf))
        } else if re.starts_with(',') && !rf.starts_with(',') {
            format!("{ctx}: `{}` is missing from the found type", next(re))
        } else {
            format!("{ctx}: `{re}` expected, `{rf}` found")
        })
    }
}

/// The first item of a readable form: up to a `,`, `:`, or closing bracket
/// outside any bracket of its own.
fn item(s: &str) -> &str {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' | '(' | '<' => depth += 1,
            '}' | ')' | '>' if depth == 0 => return &s[..i],
            '}' | ')' | '>' => depth -= 1,
            ',' | ':' if depth == 0 => return &s[..i],
            _ => {}
        }
    }
    s
}

/// Where the end of `prefix` is, as `Type::Variant.field` (the innermost
/// named types and members open there).
fn context_at(prefix: &str) -> String {
    enum Frame {
        Named {
            name: String,
            is_enum: bool,
            field: String,
        },
        Variant {
            name: String,
            field: String,
        },
        Other,
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut word = String::new();
    let mut kind = String::new();
    for c in prefix.chars() {
        match c {
            ' ' => kind = std::mem::take(&mut word),
            '{' => stack.push(Frame::Named {
                name: std::mem::take(&mut word),
                is_enum: std::mem::take(&mut kind) == "enum",
                field: String::new(),
            }),
            '(' => {
                let w = std::mem::take(&mut word);
                match stack.last() {
                    Some(Frame::Named { is_enum: true, .. }) => stack.push(Frame::Variant {
                        name: w,
                        field: String::new(),
                    }),
                    _ => stack.push(Frame::Other),
                }
            }
            '<' => {
                word.clear();
                stack.push(Frame::Other);
            }
            '}' | ')' | '>' => {
                word.clear();
                stack.pop();
            }
            ':' => {
                let w = std::mem::take(&mut word);
                match stack.last_mut() {
                    Some(Frame::Named {
                        is_enum: false,
                        field,
                        ..
                    })
                    | Some(Frame::Variant { field, .. }) => *field = w,
                    _ => {}
                }
            }
            ',' => {
                word.clear();
                match stack.last_mut() {
                    Some(Frame::Named { field, .. }) | Some(Frame::Variant { field, .. }) => {
                        field.clear()
                    }
                    _ => {}
                }
            }
            c => word.push(c),
        }
    }
    let mut out = String::new();
    for f in &stack {
        match f {
            Frame::Named { name, field, .. } => {
                if !out.is_empty() {
                    out.push_str(" > ");
                }
                out.push_str(name);
                if !field.is_empty() {
                    out.push('.');
                    out.push_str(field);
                }
            }
            Frame::Variant { name, field } => {
                out.push_str("::");
                out.push_str(name);
                if !field.is_empty() {
                    out.push('.');
                    out.push_str(field);
                }
            }
            Frame::Other => {}
        }
    }
    if out.is_empty() {
        out.push_str("the type");
    }
    out
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

#[cfg(test)]
mod difference_tests {
    use super::Descriptor;

    /// A form from another node may be anything: never a panic.
    #[test]
    fn any_input_gives_an_answer() {
        let pieces = [
            "struct ", "enum ", "{", "}", "(", ")", "<", ">", ",", ":", "a", "é", "@", " ",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let mut make = || {
                let n = (next() % 24) as usize;
                (0..n)
                    .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                    .collect::<String>()
            };
            let (a, b) = (make(), make());
            let r = Descriptor::first_difference_in(&a, &b);
            assert_eq!(r.is_none(), a == b, "{a:?} {b:?}");
        }
    }

    fn diff(a: &str, b: &str) -> String {
        Descriptor::first_difference_in(a, b).unwrap()
    }

    #[test]
    fn names_the_field_variant_and_both_sides() {
        assert_eq!(
            diff(
                "struct Kv{key:String,value:u64}",
                "struct Kv{key:String,value:i64}"
            ),
            "Kv.value: `u64` expected, `i64` found"
        );
        assert_eq!(
            diff("struct Kv{key:String}", "struct Kv{key:String,ttl:u32}"),
            "Kv: `ttl` is only in the found type"
        );
        assert_eq!(
            diff("struct Kv{key:String,ttl:u32}", "struct Kv{key:String}"),
            "Kv: `ttl` is missing from the found type"
        );
        assert_eq!(
            diff(
                "enum Op{Get(:String),Put(key:String,v:u8)}",
                "enum Op{Get(:String),Put(key:String,v:u16)}"
            ),
            "Op::Put.v: `u8` expected, `u16` found"
        );
        assert_eq!(
            diff(
                "enum Op{Get(:String),Del(:String)}",
                "enum Op{Get(:String),Remove(:String)}"
            ),
            "Op: `Del(:String)` expected, `Remove(:String)` found"
        );
        assert_eq!(
            diff(
                "struct A{b:Vec<struct B{x:u8}>}",
                "struct A{b:Vec<struct B{x:u16}>}"
            ),
            "A.b > B.x: `u8` expected, `u16` found"
        );
        assert_eq!(Descriptor::first_difference_in("u8", "u8"), None);
        assert_eq!(
            diff("struct Kv{clé:u8}", "struct Kv{clè:u8}"),
            "Kv: `clé` expected, `clè` found"
        );
        assert_eq!(diff("u8", "u16"), "the type: `u8` expected, `u16` found");
    }
}
