//! Graph serialisation: values and functions that cross a node boundary
//! with their sharing and their cycles.
//!
//! A value of a [`Mobile`] type is written as a graph. Only `Arc`
//! allocations are nodes that can be met twice; the encoder makes two passes
//! over the value (mark visited and shared nodes, then write), gives a label
//! only to shared nodes and writes a back-reference on each later meeting.
//! So two `Arc`s that were one allocation are one allocation after decoding,
//! and cycles survive through `Weak` and through [`Cell`].
//!
//! ```
//! use std::sync::Arc;
//! use graft::Mobile;
//! use graft::graph;
//!
//! #[derive(Mobile, Debug, PartialEq)]
//! struct Node {
//!     value: u64,
//!     children: Vec<Arc<Node>>,
//! }
//!
//! let leaf = Arc::new(Node { value: 1, children: vec![] });
//! let root = Node { value: 0, children: vec![leaf.clone(), leaf] };
//!
//! let bytes = graph::encode(&root);
//! let back: Node = graph::decode(&bytes).unwrap();
//! assert_eq!(back, root);
//! assert!(Arc::ptr_eq(&back.children[0], &back.children[1]));
//!
//! // The same graph as text, for debugging.
//! let text = graph::to_text(&root);
//! assert_eq!(graph::from_text::<Node>(&text).unwrap(), root);
//! ```
//!
//! # Binary layout
//!
//! ```text
//! +-----+---------+-------+-----------+------------------+-------------+------+
//! | GRF | version | flags | type hash | type name        | [raw length]| body |
//! | 3 B | 1 B (1) | 1 B   | u64 LE    | LEB128 len, UTF-8| LEB128      |      |
//! +-----+---------+-------+-----------+------------------+-------------+------+
//! ```
//!
//! `flags` bit 0: the body is deflate-compressed ([`EncodeOptions`]); the raw
//! length precedes it. The type hash and name come from the value's
//! [`Descriptor`]; a receiver can read the hash with [`peek_descriptor`]
//! before it decides how to decode. The body's layout is described in the
//! `impls`, `encode` and `code` modules: fixed-width little-endian numbers,
//! LEB128 lengths, one tag byte per `Arc` node.
//!
//! # Text form
//!
//! [`to_text`] writes the same graph as whitespace-separated tokens:
//! `Name { field: value }` for structs, `[n: items]` for sequences, variant
//! names, quoted strings, and `&` (unshared node), `#n=` (shared node `n`,
//! counted per type), `#n` (back-reference), `dead` (dead `Weak`) for nodes.
//! A [`Cell`] shows as `<cell>` where it stands; the cell contents follow the
//! root value, each as `cell: content`, in the order the cells were met.
//!
//! # Mobile functions
//!
//! [`MobileFn`] and [`MobileFnOnce`] carry a code id and a mobile
//! environment; see [`mobile_fn!`](crate::mobile_fn). A code id can only
//! name a function that graft registered as mobile (a body given to
//! `MobileFn::new`, `spawn_on`, `call_on` and the like, found in the
//! executable's symbol table); any other id is refused with
//! [`DecodeError::NotRegistered`]; no address or offset from a peer is ever
//! turned into code. So a peer that passed the handshake can make this node
//! run the program's mobile functions, on environments it chooses, and
//! nothing else.
//!
//! A body is a non-capturing closure or a fn item (its type has no size
//! and names its code); a fn pointer or a capturing closure does not build.
//! Its id (see [`MobileFn::code_id`]) is the compiler's hash of the body's
//! position (crate, enclosing function, closure index), its types, the wire
//! format and the crate that instantiated it:
//!
//! - it stays the same when the program is rebuilt from the same sources,
//!   `Cargo.lock`, toolchain, profile, features and target, and when a
//!   closure's body or unrelated code is edited;
//! - it changes when the closure moves to another function, when a closure
//!   is added before it in the same function, when its types change, or
//!   when a dependency or the toolchain changes.
//!
//! Nodes running different executables exchange the functions both have
//! (the same id): typically those made in a library both link. The table is
//! read from the executable's symbol table: a stripped executable
//! (`strip = "symbols"`) can neither send nor receive functions, and
//! [`mobile_entries`] says why.
//!
//! # Limits
//!
//! Decoding is total: any input gives a value or a [`DecodeError`], never a
//! panic; allocations are bounded by a constant times the input size; deep
//! graphs run on extra stack segments (threads) instead of overflowing.

mod cell;
mod code;
mod decode;
mod deep;
mod descriptor;
mod encode;
mod error;
mod func;
mod impls;
mod mobile;
mod stack;
mod symtab;
mod wire;

use std::io::{Read, Write};

pub use cell::Cell;
pub(crate) use code::assert_body as code_assert_body;
pub use code::{fingerprint, mobile_entries};
pub use decode::Decoder;
#[doc(hidden)]
pub use deep::DeepStack;
pub use descriptor::{descriptor_of, Describer, Descriptor};
pub use encode::Encoder;
pub use error::{DecodeError, Mismatch};
pub use func::{Encoded, MobileFn, MobileFnOnce};
pub use mobile::Mobile;
pub use wire::{Binary, Format, Scalar, Source, Text, Walk};

use encode::Share;

/// Magic bytes that start every binary graph.
const MAGIC: &[u8; 3] = b"GRF";
/// Format version, bumped on any change of the layout.
const VERSION: u8 = 1;
/// `flags` bit: the body is deflate-compressed.
const FLAG_DEFLATE: u8 = 1;
/// First token of the text form.
const TEXT_MAGIC: &str = "graft/1";
/// Longest type name a header may carry.
const MAX_NAME: usize = 4096;
/// Deflate expands at most ~1032:1; a larger claimed raw length is refused.
const MAX_INFLATE_RATIO: usize = 1032;

/// Options for [`encode_with`].
///
/// ```
/// use graft::graph::{self, EncodeOptions};
/// let v = vec![7u64; 100_000];
/// let small = graph::encode_with(&v, &EncodeOptions::default().compress_above(1024));
/// assert!(small.len() < 10_000);
/// assert_eq!(graph::decode::<Vec<u64>>(&small).unwrap(), v);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeOptions {
    compress_above: Option<usize>,
    level: u32,
}

/// Bodies above this many bytes are compressed by [`EncodeOptions::default`].
pub const DEFAULT_COMPRESS_ABOVE: usize = 64 * 1024;

impl Default for EncodeOptions {
    /// Compress bodies above [`DEFAULT_COMPRESS_ABOVE`] bytes, fast level.
    fn default() -> Self {
        EncodeOptions {
            compress_above: Some(DEFAULT_COMPRESS_ABOVE),
            level: 1,
        }
    }
}

impl EncodeOptions {
    /// No compression (what [`encode`](fn@encode) does).
    pub fn uncompressed() -> Self {
        EncodeOptions {
            compress_above: None,
            level: 1,
        }
    }

    /// Compress bodies longer than `bytes`.
    pub fn compress_above(mut self, bytes: usize) -> Self {
        self.compress_above = Some(bytes);
        self
    }

    /// Deflate level, 0 (store) to 9 (smallest); default 1 (fastest).
    pub fn level(mut self, level: u32) -> Self {
        self.level = level.min(9);
        self
    }
}

/// Runs both passes of the encoder over `v`, appending pass 2's output in
/// format `F` to `out`.
fn encode_body<T: Mobile, F: Format>(v: &T, out: &mut Vec<u8>) {
    let mut share = Share::default();
    {
        let mut none = Vec::new();
        let mut e = Encoder::<Walk>::new(&mut none, &mut share);
        v.encode(&mut e);
        e.flush();
    }
    share.finish_walk();
    let mut e = Encoder::<F>::new(out, &mut share);
    v.encode(&mut e);
    e.flush();
}

/// Encodes `v` in the binary form, uncompressed.
///
/// # Panics
///
/// Only if the value is so deep that it needs an extra stack segment and the
/// OS refuses to start the segment's thread; or if a [`Cell`] in the value is
/// locked by the calling thread (that deadlocks instead).
///
/// ```
/// let bytes = graft::graph::encode(&(1u8, String::from("hi")));
/// assert_eq!(graft::graph::decode::<(u8, String)>(&bytes).unwrap(), (1, "hi".into()));
/// ```
pub fn encode<T: Mobile>(v: &T) -> Vec<u8> {
    encode_with(v, &EncodeOptions::uncompressed())
}

/// Encodes `v` in the binary form with `opts` (compression).
pub fn encode_with<T: Mobile>(v: &T, opts: &EncodeOptions) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    encode_append(v, opts, &mut out);
    out
}

/// [`encode_with`], appending to `out` (a remote send encodes after a
/// frame header, into a buffer its worker reuses); returns the descriptor
/// hash.
pub(crate) fn encode_append<T: Mobile>(v: &T, opts: &EncodeOptions, out: &mut Vec<u8>) -> u64 {
    let desc = descriptor_of::<T>();
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    let flags_at = out.len();
    out.push(0);
    out.extend_from_slice(&desc.hash().to_le_bytes());
    let name = desc.name();
    let name = &name[..floor_char_boundary(name, MAX_NAME)];
    wire::put_varint(out, name.len() as u64);
    out.extend_from_slice(name.as_bytes());
    let body_at = out.len();
    encode_body::<T, Binary>(v, out);
    let body_len = out.len() - body_at;
    if let Some(limit) = opts.compress_above {
        if body_len > limit {
            let mut z = flate2::write::DeflateEncoder::new(
                Vec::with_capacity(body_len / 2),
                flate2::Compression::new(opts.level),
            );
            let compressed = z.write_all(&out[body_at..]).and_then(|()| z.finish());
            match compressed {
                Ok(c) if c.len() < body_len => {
                    out.truncate(body_at);
                    out[flags_at] |= FLAG_DEFLATE;
                    wire::put_varint(out, body_len as u64);
                    out.extend_from_slice(&c);
                }
                Ok(_) => {}
                Err(e) => log::warn!("graph: compression failed ({e}); sending uncompressed"),
            }
        }
    }
    desc.hash()
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    let mut i = s.len().min(max);
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A parsed binary header.
struct Header<'a> {
    flags: u8,
    hash: u64,
    name: &'a str,
    body: &'a [u8],
}

fn header(bytes: &[u8]) -> Result<Header<'_>, DecodeError> {
    if bytes.len() < 5 {
        return Err(if MAGIC.starts_with(&bytes[..bytes.len().min(3)]) {
            DecodeError::Truncated
        } else {
            DecodeError::BadHeader("no magic".into())
        });
    }
    if &bytes[..3] != MAGIC {
        return Err(DecodeError::BadHeader("no magic".into()));
    }
    if bytes[3] != VERSION {
        return Err(DecodeError::BadHeader(format!(
            "unknown version {}",
            bytes[3]
        )));
    }
    let flags = bytes[4];
    if flags & !FLAG_DEFLATE != 0 {
        return Err(DecodeError::BadHeader(format!("unknown flags {flags:#x}")));
    }
    // `let … else`, not `ok_or(DecodeError::Truncated)`: that builds and
    // drops an error for every message that decodes.
    let Some(hash) = bytes.get(5..13).map(<u64 as Scalar>::get) else {
        return Err(DecodeError::Truncated);
    };
    let mut pos = 13;
    let Some(n) = wire::get_varint(bytes, &mut pos) else {
        return Err(DecodeError::Truncated);
    };
    if n > MAX_NAME as u64 {
        return Err(DecodeError::BadHeader("type name too long".into()));
    }
    let end = pos + n as usize;
    let Some(name) = bytes.get(pos..end) else {
        return Err(DecodeError::Truncated);
    };
    let name = std::str::from_utf8(name)
        .map_err(|_| DecodeError::BadHeader("type name is not UTF-8".into()))?;
    Ok(Header {
        flags,
        hash,
        name,
        body: &bytes[end..],
    })
}

/// The descriptor hash of an encoded value (binary or text form), read from
/// its header without decoding it.
///
/// # Errors
///
/// [`DecodeError::BadHeader`] or [`DecodeError::Truncated`].
///
/// ```
/// use graft::graph::{self, descriptor_of};
/// let bytes = graph::encode(&vec![1u8]);
/// assert_eq!(graph::peek_descriptor(&bytes).unwrap(), descriptor_of::<Vec<u8>>().hash());
/// ```
pub fn peek_descriptor(bytes: &[u8]) -> Result<u64, DecodeError> {
    if bytes.starts_with(TEXT_MAGIC.as_bytes()) {
        let mut d = Decoder::<Text>::new(bytes);
        return text_header(&mut d).map(|(h, _)| h);
    }
    header(bytes).map(|h| h.hash)
}

fn mismatch<T: Mobile>(found: &str, found_hash: u64) -> DecodeError {
    let want = descriptor_of::<T>();
    DecodeError::TypeMismatch(Box::new(error::Mismatch {
        found: found.to_owned(),
        found_hash,
        expected: want.name().to_owned(),
        expected_hash: want.hash(),
    }))
}

/// Decodes a value of type `T` from the binary form (compressed or not).
///
/// # Errors
///
/// [`DecodeError::TypeMismatch`] if the data holds another type; any other
/// [`DecodeError`] for data that is not a valid encoding. Never panics.
///
/// A very deep value (a list of a million `Box`es) decodes without
/// overflowing the stack, but its default `Drop` is recursive: free such a
/// value iteratively.
///
/// ```
/// use graft::graph::{self, DecodeError};
/// let bytes = graph::encode(&42u32);
/// assert_eq!(graph::decode::<u32>(&bytes).unwrap(), 42);
/// assert!(matches!(graph::decode::<i32>(&bytes), Err(DecodeError::TypeMismatch { .. })));
/// ```
pub fn decode<T: Mobile>(bytes: &[u8]) -> Result<T, DecodeError> {
    let h = header(bytes)?;
    if h.hash != descriptor_of::<T>().hash() {
        return Err(mismatch::<T>(h.name, h.hash));
    }
    if h.flags & FLAG_DEFLATE != 0 {
        let mut pos = 0;
        let raw = wire::get_varint(h.body, &mut pos).ok_or(DecodeError::Truncated)?;
        let packed = &h.body[pos..];
        let bound = packed
            .len()
            .saturating_mul(MAX_INFLATE_RATIO)
            .saturating_add(64);
        if raw > bound as u64 {
            return Err(DecodeError::LimitExceeded(format!(
                "claimed raw length {raw} for {} compressed bytes",
                packed.len()
            )));
        }
        let raw = raw as usize;
        let mut body = Vec::with_capacity(raw);
        let mut z = flate2::read::DeflateDecoder::new(packed).take(raw as u64 + 1);
        z.read_to_end(&mut body)
            .map_err(|e| DecodeError::Invalid(format!("bad deflate stream: {e}")))?;
        if body.len() != raw {
            return Err(DecodeError::Invalid(
                "deflate stream length differs from the header".into(),
            ));
        }
        return decode_body::<T, Binary>(&body, 0);
    }
    decode_body::<T, Binary>(h.body, 0)
}

/// Decodes the body that starts at `input[start..]`, then the deferred cell
/// contents; only whitespace (text form) may follow.
fn decode_body<T: Mobile, S: Source>(input: &[u8], start: usize) -> Result<T, DecodeError> {
    let mut d = Decoder::<S>::at(input, start);
    let r = T::decode(&mut d).and_then(|v| {
        let rest = d.flush().and_then(|()| {
            if S::TEXT {
                d.skip_ws();
            }
            match d.remaining() {
                0 => Ok(()),
                n => Err(DecodeError::TrailingBytes(n)),
            }
        });
        match rest {
            Ok(()) => Ok(v),
            Err(e) => Err(d.bury_err(v, e)),
        }
    });
    d.finish(r.is_err());
    r
}

fn text_header<'a>(d: &mut Decoder<'a, Text>) -> Result<(u64, String), DecodeError> {
    let magic = d.word()?;
    if magic != TEXT_MAGIC {
        return Err(DecodeError::BadHeader(format!(
            "text form must start with `{TEXT_MAGIC}`"
        )));
    }
    let hash = d.word()?;
    let hash = u64::from_str_radix(hash, 16)
        .map_err(|_| DecodeError::BadHeader("bad type hash".into()))?;
    let name: String = Mobile::decode(d)?;
    Ok((hash, name))
}

/// Writes `v` in the text form: the same graph as [`encode`](fn@encode), readable.
///
/// ```
/// let text = graft::graph::to_text(&Some(vec![1u8, 2]));
/// assert!(text.ends_with("Some [2: 1 2 ]"), "{text}");
/// ```
pub fn to_text<T: Mobile>(v: &T) -> String {
    let desc = descriptor_of::<T>();
    let mut out = format!("{TEXT_MAGIC} {:016x} {:?}\n", desc.hash(), desc.name()).into_bytes();
    encode_body::<T, Text>(v, &mut out);
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Reads a value written by [`to_text`].
///
/// # Errors
///
/// As [`decode`](fn@decode); syntax errors are [`DecodeError::Invalid`] with the byte
/// offset.
pub fn from_text<T: Mobile>(text: &str) -> Result<T, DecodeError> {
    let mut d = Decoder::<Text>::new(text.as_bytes());
    let (hash, name) = text_header(&mut d)?;
    if hash != descriptor_of::<T>().hash() {
        return Err(mismatch::<T>(&name, hash));
    }
    let start = text.len() - d.remaining();
    decode_body::<T, Text>(text.as_bytes(), start)
}
