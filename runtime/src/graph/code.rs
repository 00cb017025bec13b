//! Code references: how a function crosses the wire, and why a peer can
//! only name the functions graft registered as mobile.
//!
//! # What a peer may reach
//!
//! A peer that passed the handshake may send spawn bodies and messages that
//! hold functions. On this node it can reach *only mobile-function entries*:
//! code that graft monomorphised for a body given to
//! [`MobileFn::new`], [`MobileFnOnce::new`],
//! [`MobileFnOnce::returning`], `spawn_on`, `spawn_link_on`, `call_on` or
//! the `mobile_fn!` macros somewhere in this program. An entry decodes the
//! function's environment and rebuilds the function around its body;
//! nothing else. No address, offset or pointer from a peer is ever turned
//! into code: the wire carries a 64-bit *id*, and decoding looks it up in a
//! table of this executable's entries, refusing an unknown id with
//! [`DecodeError::NotRegistered`] and an id of another function type with
//! [`DecodeError::BadCode`]. So an authenticated peer can make this node
//! run registered mobile functions on environments it chooses (as in
//! Erlang, where a connected node may call any exported function), and
//! nothing more: not `std::process::abort`, not the middle of a function.
//!
//! # The table, built by the linker
//!
//! A body is a zero-sized closure type `F` (a non-capturing closure or a fn
//! item; a fn pointer or a capturing closure does not compile, see
//! [`assert_body`]). For each body, function type and wire format, graft
//! instantiates one generic function, [`entry`]`::<FnCode<E, A, R, F, S>>`
//! (or `OnceCode`, `ReturningCode`). Its type arguments name both the
//! trampoline (decode `E`, build the function) and the body: a zero-sized
//! `F` needs no bytes to be rebuilt. Every instance has the same signature,
//! `fn() -> &'static dyn Any`; it returns a table of typed trampolines that
//! the caller downcasts (a checked `TypeId` comparison) to the one it
//! expects.
//!
//! Rust cannot collect generic instances into a link-time list
//! (`linkme`-style distributed slices hold only non-generic statics), but
//! the linker already keeps one: the executable's symbol table. At first
//! use, graft reads this executable's `.symtab` (see `symtab.rs`), keeps
//! the function symbols whose mangled name is an instance of
//! `graft::graph::code::entry` (legacy `_ZN5graft5graph4code5entry17h<hash>E`
//! or v0 `_RINvNtNtC…5graft5graph4code5entry…`, any `.llvm.` suffix
//! dropped), relocates them by the load bias measured on [`anchor`], checks
//! that each lies in this executable's code and that a known instance is
//! found where it runs, and maps id → entry and entry → id. The id is the
//! 64-bit hash of the legacy symbol name, or the first 8 bytes of the
//! BLAKE3 hash of a v0 name.
//!
//! Two instances with the same code (LLVM's function merging, a linker's
//! identical-code folding, per-crate copies of one instance) are either the
//! same function or have different ids that lead to equivalent code: a
//! peer still only reaches entries.
//!
//! # Stable ids
//!
//! The id is the compiler's hash of the instance: of the path of the body
//! (the crate, the enclosing function, the closure's index in it), of the
//! environment, argument and result types, of the wire format, and of the
//! crate that instantiated it (its name and cargo's `-C metadata`). So an id
//! does not change when a program is rebuilt from the same sources,
//! `Cargo.lock`, toolchain, profile, features and target, nor when the
//! *body* of a closure or unrelated code elsewhere is edited (the id names a
//! position, like an Erlang `{Module, Function, Arity}`, not a content
//! hash). It changes when the closure moves to another function, when a
//! closure is added before it in the same function, when one of its types
//! changes, or when a dependency or the toolchain changes. Nodes of
//! different builds exchange exactly the functions whose ids both have; a
//! remote spawn of any other is refused with `NotRegistered`. Whatever the
//! id, the environment is decoded by the receiver's own code against its
//! own types, so a mismatch is a decode error, never memory unsafety.
//!
//! # Requirements and failure modes
//!
//! - An executable has the entry of a body only if it contains code that
//!   builds that function (the entry is instantiated where the body is
//!   given to `MobileFn::new`, `spawn_on` and the like, and the linker
//!   drops what nothing references). Within one executable that is always
//!   so; for another executable to accept a function, it must link the
//!   library code that makes it (see `graft_examples::shared_code`, spawned
//!   from a test onto `graft-node`).
//! - The executable must keep its symbol table. `strip`, or
//!   `strip = "symbols"` / `strip = true` in a cargo profile, removes it:
//!   then no function can be sent or received, a warning is logged once,
//!   and decoding refuses every code reference with `NotRegistered` naming
//!   the reason. `strip = "debuginfo"` (cargo's default for release) keeps
//!   it. Only Linux ELF64 little-endian targets are supported.
//! - graft must be linked once into the executable (two copies of this
//!   crate would make the entries ambiguous; the table is then refused).
//!
//! # Wire layout
//!
//! | field | type | content |
//! |-------|------|---------|
//! | `id`  | u64  | the entry's id, 0 when this executable has no table |
//!
//! followed by the environment (`env`).

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::OnceLock;

use super::descriptor::first_u64;
use super::func::{Encoded, MobileFn, MobileFnOnce};
use super::symtab;
use super::wire::Source;
use super::{DecodeError, Decoder, Mobile};

// ---- entries ---------------------------------------------------------------

/// The one signature every entry has.
pub(crate) type Entry = fn() -> &'static dyn Any;

/// A kind of entry: the table of typed trampolines it hands out.
pub(crate) trait Trampoline: 'static {
    /// What [`entry`] returns, downcast by the decoder.
    type Table: Any;
    /// The table, a constant.
    const TABLE: &'static Self::Table;
}

/// The entry of mobile function kind `T`. Its instances are the only code a
/// peer can reach; they are found by their symbol names, so this function's
/// path (`graft::graph::code::entry`) and signature are part of the
/// protocol.
#[inline(never)]
pub(crate) fn entry<T: Trampoline>() -> &'static dyn Any {
    T::TABLE
}

/// The address of `entry::<T>`, as found in the symbol table.
fn entry_addr<T: Trampoline>() -> usize {
    entry::<T> as Entry as usize
}

/// Fails to compile (when monomorphised) unless `F` is zero-sized: a
/// non-capturing closure or a fn item. A fn pointer or a closure with
/// captures has a size, and cannot be rebuilt from its type alone.
pub(crate) fn assert_body<F>() {
    const {
        assert!(
            std::mem::size_of::<F>() == 0,
            "the body of a mobile function must be a non-capturing closure or a fn item \
             (not a fn pointer, not a capturing closure); pass what it needs in the environment"
        )
    }
}

/// A value of the zero-sized body type `F`.
fn conjure<F: Copy + 'static>() -> F {
    assert_body::<F>();
    // SAFETY: `F` is zero-sized (checked at compile time just above), so
    // reading one from a dangling, well-aligned pointer reads no memory. It
    // is a closure or fn item type (the only zero-sized types that
    // implement the `Fn*` traits on stable Rust) whose entry exists
    // because this program made a value of it, and it is `Copy`: its values
    // are freely duplicated, and a zero-sized type has only one value.
    unsafe { std::ptr::NonNull::<F>::dangling().as_ptr().read() }
}

/// A trampoline: decodes an environment and builds a `T` around it.
type Tramp<T, S> = for<'a, 'b> fn(&'b mut Decoder<'a, S>) -> Result<T, DecodeError>;

/// The trampolines of a `MobileFn<A, R>` read from source `S`.
pub(crate) struct FnTable<A, R, S: Source> {
    decode: Tramp<MobileFn<A, R>, S>,
}

/// The trampolines of a `MobileFnOnce<R>` read from source `S`.
pub(crate) struct OnceTable<R, S: Source> {
    decode: Tramp<MobileFnOnce<R>, S>,
}

/// A type-level marker of its parameters (never built).
type Marker<T> = PhantomData<fn() -> T>;

/// Entry kind of a `MobileFn<A, R>` with environment `E` and body `F`.
pub(crate) struct FnCode<E, A, R, F, S>(Marker<(E, A, R, F, S)>);
/// Entry kind of a `MobileFnOnce<R>` made by [`MobileFnOnce::new`].
pub(crate) struct OnceCode<E, R, F, S>(Marker<(E, R, F, S)>);
/// Entry kind of a `MobileFnOnce<Encoded>` made by
/// [`MobileFnOnce::returning`] (body result `R`).
pub(crate) struct ReturningCode<E, R, F, S>(Marker<(E, R, F, S)>);

impl<E, A, R, F, S> Trampoline for FnCode<E, A, R, F, S>
where
    E: Mobile,
    A: 'static,
    R: 'static,
    F: Fn(&E, A) -> R + Copy + Send + Sync + 'static,
    S: Source,
{
    type Table = FnTable<A, R, S>;
    const TABLE: &'static FnTable<A, R, S> = &FnTable {
        decode: decode_fn::<E, A, R, F, S>,
    };
}

impl<E, R, F, S> Trampoline for OnceCode<E, R, F, S>
where
    E: Mobile,
    R: 'static,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
    S: Source,
{
    type Table = OnceTable<R, S>;
    const TABLE: &'static OnceTable<R, S> = &OnceTable {
        decode: decode_once::<E, R, F, S>,
    };
}

impl<E, R, F, S> Trampoline for ReturningCode<E, R, F, S>
where
    E: Mobile,
    R: Mobile,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
    S: Source,
{
    type Table = OnceTable<Encoded, S>;
    const TABLE: &'static OnceTable<Encoded, S> = &OnceTable {
        decode: decode_returning::<E, R, F, S>,
    };
}

fn decode_fn<E, A, R, F, S>(d: &mut Decoder<'_, S>) -> Result<MobileFn<A, R>, DecodeError>
where
    E: Mobile,
    A: 'static,
    R: 'static,
    F: Fn(&E, A) -> R + Copy + Send + Sync + 'static,
    S: Source,
{
    let env = d.nest(|d| E::decode(d))?;
    Ok(MobileFn::new(env, conjure::<F>()))
}

fn decode_once<E, R, F, S>(d: &mut Decoder<'_, S>) -> Result<MobileFnOnce<R>, DecodeError>
where
    E: Mobile,
    R: 'static,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
    S: Source,
{
    let env = d.nest(|d| E::decode(d))?;
    Ok(MobileFnOnce::new(env, conjure::<F>()))
}

fn decode_returning<E, R, F, S>(
    d: &mut Decoder<'_, S>,
) -> Result<MobileFnOnce<Encoded>, DecodeError>
where
    E: Mobile,
    R: Mobile,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
    S: Source,
{
    let env = d.nest(|d| E::decode(d))?;
    Ok(MobileFnOnce::<Encoded>::returning(env, conjure::<F>()))
}

/// The entry address of `T` (binary) or `U` (text).
pub(crate) fn code_of<T: Trampoline, U: Trampoline>(text: bool) -> usize {
    if text {
        entry_addr::<U>()
    } else {
        entry_addr::<T>()
    }
}

// ---- the table -------------------------------------------------------------

/// A known instance, used to check that the table matches the running code.
struct Probe;
impl Trampoline for Probe {
    type Table = ();
    const TABLE: &'static () = &();
}

/// The fixed point that the load bias is measured on.
#[inline(never)]
pub(crate) fn anchor() {
    std::hint::black_box(());
}

fn anchor_addr() -> usize {
    anchor as fn() as usize
}

struct Table {
    by_id: HashMap<u64, Entry>,
    by_addr: HashMap<usize, u64>,
    /// Why the table is empty, if it is.
    problem: Option<String>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| match build_table() {
        Ok(t) => {
            log::debug!("graph: {} mobile function entries", t.by_id.len());
            t
        }
        Err(problem) => {
            log::warn!(
                "graph: no mobile function can be sent or received by this executable: {problem}"
            );
            Table {
                by_id: HashMap::new(),
                by_addr: HashMap::new(),
                problem: Some(problem),
            }
        }
    })
}

const LEGACY_ENTRY: &[u8] = b"_ZN5graft5graph4code5entry17h";
const LEGACY_ANCHOR: &[u8] = b"_ZN5graft5graph4code6anchor17h";
const V0_ENTRY: &[u8] = b"5graft5graph4code5entry";
const V0_ANCHOR: &[u8] = b"5graft5graph4code6anchor";

/// A legacy-mangled name `prefix` + `17h` + 16 hex digits + `E`: the hash.
fn legacy_hash(name: &[u8], prefix: &[u8]) -> Option<u64> {
    let rest = name.strip_prefix(prefix)?;
    let (hex, tail) = (rest.get(..16)?, rest.get(16..)?);
    if tail != b"E" {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// For a v0-mangled name `_R` `head` `C[s<base62>_]` `path`…: the crate
/// disambiguator and the rest after `path`.
fn v0_split<'a>(name: &'a [u8], head: &[u8], path: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    let rest = name.strip_prefix(b"_R")?.strip_prefix(head)?;
    let rest = rest.strip_prefix(b"C")?;
    let (dis, rest) = match rest.strip_prefix(b"s") {
        Some(r) => {
            let end = r.iter().position(|&b| b == b'_')?;
            (&r[..end], &r[end + 1..])
        }
        None => (&[][..], rest),
    };
    Some((dis, rest.strip_prefix(path)?))
}

/// A symbol name without a `.llvm.…` (or other `.`) suffix.
fn base_name(name: &[u8]) -> &[u8] {
    match name.iter().position(|&b| b == b'.') {
        Some(i) => &name[..i],
        None => name,
    }
}

enum Found {
    Anchor { v0_crate: Option<Vec<u8>> },
    Entry { id: u64, v0_crate: Option<Vec<u8>> },
}

fn classify(name: &[u8]) -> Option<Found> {
    let name = base_name(name);
    if let Some(id) = legacy_hash(name, LEGACY_ENTRY) {
        return Some(Found::Entry { id, v0_crate: None });
    }
    if legacy_hash(name, LEGACY_ANCHOR).is_some() {
        return Some(Found::Anchor { v0_crate: None });
    }
    if let Some((dis, _)) = v0_split(name, b"INvNtNt", V0_ENTRY) {
        let id = first_u64(blake3::hash(name).as_bytes());
        return Some(Found::Entry {
            id,
            v0_crate: Some(dis.to_vec()),
        });
    }
    if let Some((dis, rest)) = v0_split(name, b"NvNtNt", V0_ANCHOR) {
        if rest.is_empty() {
            return Some(Found::Anchor {
                v0_crate: Some(dis.to_vec()),
            });
        }
    }
    None
}

/// Executable mappings from `/proc/self/maps`: `(lo, hi, path)`.
fn exec_mappings() -> Result<Vec<(usize, usize, String)>, String> {
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| format!("cannot read /proc/self/maps ({e})"))?;
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut parts = line.split_whitespace();
        let (Some(range), Some(perms)) = (parts.next(), parts.next()) else {
            continue;
        };
        let path = parts.nth(3).unwrap_or("").to_owned();
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if perms.contains('x') {
            out.push((lo, hi, path));
        }
    }
    Ok(out)
}

fn build_table() -> Result<Table, String> {
    let maps = exec_mappings()?;
    let a = anchor_addr();
    let own = maps
        .iter()
        .find(|(lo, hi, _)| (*lo..*hi).contains(&a))
        .map(|m| m.2.clone())
        .ok_or("the code segment of graft was not found in /proc/self/maps")?;
    let ranges: Vec<(usize, usize)> = maps
        .iter()
        .filter(|(lo, hi, p)| *p == own && (!own.is_empty() || (*lo..*hi).contains(&a)))
        .map(|&(lo, hi, _)| (lo, hi))
        .collect();
    // The file that holds graft's code: the executable itself, or the
    // shared object named by the mapping.
    let mut tried = Vec::new();
    for path in ["/proc/self/exe", own.as_str()] {
        if path.is_empty() {
            continue;
        }
        match table_from(path, a, &ranges) {
            Ok(t) => return Ok(t),
            Err(e) => tried.push(format!("{path}: {e}")),
        }
    }
    Err(tried.join("; "))
}

fn table_from(path: &str, anchor_at: usize, ranges: &[(usize, usize)]) -> Result<Table, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut anchors = Vec::new();
    let mut entries = Vec::new();
    symtab::functions(&file, |name, value| match classify(name) {
        Some(Found::Anchor { v0_crate }) => anchors.push((value, v0_crate)),
        Some(Found::Entry { id, v0_crate }) => entries.push((id, value, v0_crate)),
        None => {}
    })?;
    anchors.sort();
    anchors.dedup();
    let (anchor_value, crate_id) = match anchors.as_slice() {
        [one] => one.clone(),
        [] => return Err("graft::graph::code::anchor is not in the symbol table".into()),
        _ => {
            return Err(
                "the symbol table has several graft crates (graft must be linked once)".into(),
            )
        }
    };
    let bias = anchor_at.wrapping_sub(anchor_value as usize);
    let in_code = |addr: usize| ranges.iter().any(|&(lo, hi)| (lo..hi).contains(&addr));
    let mut by_id = HashMap::new();
    let mut by_addr = HashMap::new();
    for (id, value, v0_crate) in entries {
        if v0_crate.is_some() && v0_crate != crate_id {
            continue; // an entry of another crate named `graft`
        }
        let addr = (value as usize).wrapping_add(bias);
        if !in_code(addr) {
            continue;
        }
        // SAFETY: `addr` is the run-time address (the file's symbol value
        // plus the load bias measured on `anchor`, checked to lie in the
        // executable mapping of the file that holds graft's code) of a
        // function symbol of this program whose mangled name is an instance
        // of `graft::graph::code::entry`, every instance of which has the
        // type `Entry` (it takes no argument and returns a `&'static dyn
        // Any`). The probe check below refuses the whole table if the
        // symbols do not match the running code.
        let f = unsafe { std::mem::transmute::<usize, Entry>(addr) };
        by_id.entry(id).or_insert(f);
        by_addr.entry(addr).or_insert(id);
    }
    // The bias and the names are right if a known instance is found where
    // it runs.
    if !by_addr.contains_key(&entry_addr::<Probe>()) {
        return Err("the symbol table does not match the running code".into());
    }
    Ok(Table {
        by_id,
        by_addr,
        problem: None,
    })
}

/// The id of the entry at `addr`, or 0 if this executable has no table.
pub(crate) fn id_of(addr: usize) -> u64 {
    match table().by_addr.get(&addr) {
        Some(&id) => id,
        None => {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                log::error!(
                    "graph: a mobile function has no entry in the symbol table ({}); \
                     it will be refused by its receiver",
                    table().problem.as_deref().unwrap_or("entry not found")
                )
            });
            0
        }
    }
}

/// Looks up entry `id` and downcasts its table to `T`.
fn lookup<T: Any>(id: u64, expected: &str) -> Result<&'static T, DecodeError> {
    let t = table();
    let Some(entry) = t.by_id.get(&id) else {
        return Err(DecodeError::NotRegistered {
            id,
            detail: match &t.problem {
                Some(p) => format!("expected a `{expected}`; this executable has no table: {p}"),
                None => format!("expected a `{expected}`"),
            },
        });
    };
    entry().downcast_ref::<T>().ok_or_else(|| {
        DecodeError::BadCode(format!(
            "code id {id:016x} names a function of another type than `{expected}`"
        ))
    })
}

/// Reads a code reference: the id, then checks it names an entry of table
/// type `T`.
fn read_ref<T: Any, S: Source>(
    d: &mut Decoder<'_, S>,
    expected: &str,
) -> Result<&'static T, DecodeError> {
    d.field("id")?;
    let id: u64 = d.scalar()?;
    let t = lookup::<T>(id, expected)?;
    d.field("env")?;
    Ok(t)
}

/// Reads a `MobileFn<A, R>`: its id, then its environment through its entry.
pub(crate) fn read_fn<A: 'static, R: 'static, S: Source>(
    d: &mut Decoder<'_, S>,
) -> Result<MobileFn<A, R>, DecodeError> {
    let t = read_ref::<FnTable<A, R, S>, S>(d, std::any::type_name::<MobileFn<A, R>>())?;
    (t.decode)(d)
}

/// Reads a `MobileFnOnce<R>`.
pub(crate) fn read_once<R: 'static, S: Source>(
    d: &mut Decoder<'_, S>,
) -> Result<MobileFnOnce<R>, DecodeError> {
    let t = read_ref::<OnceTable<R, S>, S>(d, std::any::type_name::<MobileFnOnce<R>>())?;
    (t.decode)(d)
}

/// How many mobile function entries this executable has (each body has one
/// per wire format it was encoded with), or why it has none.
///
/// ```
/// let f = graft::graph::MobileFn::new(2u32, |k: &u32, x: u32| x * k);
/// assert!(graft::graph::mobile_entries().unwrap() >= 1);
/// # drop(f);
/// ```
///
/// # Errors
///
/// The reason the table could not be built (a stripped executable, say).
pub fn mobile_entries() -> Result<usize, String> {
    let t = table();
    match &t.problem {
        Some(p) => Err(p.clone()),
        None => Ok(t.by_id.len()),
    }
}

/// A hash of the running executable, computed once (BLAKE3 of
/// `/proc/self/exe`, first 8 bytes). It travels in the handshake, for
/// information: whether two nodes may exchange a function depends on its
/// id alone (see the module docs), not on this.
///
/// If the executable cannot be read, the fingerprint is derived from the
/// process id and start time instead.
///
/// ```
/// assert_eq!(graft::graph::fingerprint(), graft::graph::fingerprint());
/// ```
pub fn fingerprint() -> u64 {
    static FP: OnceLock<u64> = OnceLock::new();
    *FP.get_or_init(|| {
        let hashed = std::env::current_exe().and_then(|path| {
            let mut h = blake3::Hasher::new();
            h.update_reader(std::fs::File::open(path)?)?;
            Ok(h.finalize())
        });
        let hash = match hashed {
            Ok(h) => h,
            Err(e) => {
                log::warn!("graph: cannot hash the executable ({e})");
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                blake3::hash(format!("{}:{:?}", std::process::id(), now).as_bytes())
            }
        };
        first_u64(hash.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_classified() {
        assert!(matches!(
            classify(b"_ZN5graft5graph4code5entry17h0123456789abcdefE"),
            Some(Found::Entry {
                id: 0x0123456789abcdef,
                ..
            })
        ));
        assert!(matches!(
            classify(b"_ZN5graft5graph4code5entry17h0123456789abcdefE.llvm.1234"),
            Some(Found::Entry {
                id: 0x0123456789abcdef,
                ..
            })
        ));
        for not in [
            &b"_ZN5graft5graph4code5entry17h0123456789abcdeE"[..],
            b"_ZN5graft5graph4code5entry17h0123456789abcdefEx",
            b"_ZN5graft5graph4code5entry28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE",
            b"_ZN5graft5graph4code6entry217h0123456789abcdefE",
            b"_ZN4core3ptr5write17h0123456789abcdefE",
            b"_RNCINvNtNtCs1234_5graft5graph4code5entry0B4_",
        ] {
            assert!(classify(not).is_none(), "{}", String::from_utf8_lossy(not));
        }
        assert!(matches!(
            classify(b"_RINvNtNtCsabc_5graft5graph4code5entryNtB2_5ProbeEB4_"),
            Some(Found::Entry {
                v0_crate: Some(_),
                ..
            })
        ));
        assert!(matches!(
            classify(b"_RNvNtNtCsabc_5graft5graph4code6anchor"),
            Some(Found::Anchor { v0_crate: Some(_) })
        ));
    }

    #[test]
    fn the_probe_is_in_the_table() {
        let id = id_of(entry_addr::<Probe>());
        assert_ne!(id, 0, "{:?}", table().problem);
        assert!(lookup::<()>(id, "probe").is_ok());
        assert!(matches!(
            lookup::<u8>(id, "u8"),
            Err(DecodeError::BadCode(_))
        ));
    }
}
