//! The decoder: the mirror image of [`Encoder`](super::Encoder).
//!
//! Bounds, so that decoding is total on any input:
//!
//! - every read checks the remaining input and fails with
//!   [`DecodeError::Truncated`];
//! - a collection's length is checked against the remaining input before
//!   anything is allocated (each item needs at least `WIRE_MIN` bytes), so
//!   allocations stay proportional to the input; items that take no bytes at
//!   all (`()`) draw on a per-decode budget instead;
//! - depth is bounded by memory, not by the stack (see `stack.rs`); a deep
//!   value that was partly built when an error struck is dropped on a thread
//!   with a stack as deep as the one that built it.
//!
//! Shared nodes live in one table per type (a `Vec` of slots, indexed by the
//! per-type label). A slot is `Building` while its content is decoded, which
//! lets a `Weak` back-reference inside it point at it (`Arc::new_cyclic`);
//! a strong back-reference to a `Building` node is refused. Strong cycles go
//! through [`Cell`](super::Cell): a cell's content is decoded after the root
//! value, when every node it can point to is complete.

use std::any::{Any, TypeId};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::{Arc, Weak};

use super::encode::{TAG_DEAD, TAG_NEW, TAG_REF, TAG_SHARED};
use super::stack;
use super::wire::{get_varint, Scalar, Source};
use super::{DecodeError, Mobile};

type Result<T> = std::result::Result<T, DecodeError>;

/// Items of zero wire size a decode may produce, beyond 64 per input byte.
const ZERO_SIZE_BUDGET: u64 = 1 << 20;
/// Stack bytes allowed per level when a value built by an explicit-stack
/// decode is dropped (a derived type's default `Drop` recurses; its frames
/// are far smaller, even in a debug build).
const DROP_FRAME: usize = 256;
/// Depth from which such a value is dropped on a deep drop thread (a
/// shallower one fits in the caller's first stack budget).
const DEEP_DROP_FROM: usize = stack::FIRST_BUDGET / DROP_FRAME;

pub(crate) enum Slot<T> {
    /// Registered, content not decoded yet, no `Weak` available.
    #[cfg_attr(panic = "unwind", allow(dead_code))]
    Pending,
    /// Content being decoded inside `Arc::new_cyclic`.
    #[cfg_attr(not(panic = "unwind"), allow(dead_code))]
    Building(Weak<T>),
    /// Complete.
    Done(Arc<T>),
}

/// Reads a value written by an [`Encoder`](super::Encoder), in the binary
/// or the text form.
pub struct Decoder<'a, S: Source> {
    input: &'a [u8],
    pos: usize,
    /// Shared-node tables, one per type, searched linearly (few types).
    tables: Vec<(TypeId, Box<dyn Any + Send>)>,
    /// Index of the table used last (checked first).
    last_table: usize,
    /// Partly built values of a failed decode, dropped on a deep stack.
    graveyard: Vec<Box<dyn Any + Send>>,
    /// Lowest stack address this segment may use.
    floor: usize,
    /// Current and deepest segment nesting.
    segments: usize,
    max_segments: usize,
    zero_budget: u64,
    /// Cells waiting for their content, in order.
    pending: VecDeque<Arc<dyn Pending<S>>>,
    /// Filled cells whose content holds a strong back-reference: the only
    /// cells a strong cycle can be closed through (see `finish`).
    closing: Vec<Arc<dyn Pending<S>>>,
    /// Strong back-references decoded so far.
    strong_refs: u64,
    /// Levels built by explicit-stack decodes (see `deep.rs`), summed: a
    /// bound on how deep a value they built is, for dropping it.
    deep_levels: usize,
    _s: PhantomData<S>,
}

/// A cell made by the decoder, waiting for its content (type-erased: one
/// virtual call per cell, no downcast).
pub(crate) trait Pending<S: Source>: Send + Sync {
    /// Decodes the cell's content into it.
    fn fill(&self, d: &mut Decoder<'_, S>) -> Result<()>;
    /// Takes the content out of the cell (to break cycles of a failed
    /// decode).
    fn empty(&self) -> Option<Box<dyn Any + Send>>;
}

impl<S: Source> std::fmt::Debug for Decoder<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("text", &S::TEXT)
            .field("pos", &self.pos)
            .field("len", &self.input.len())
            .finish_non_exhaustive()
    }
}

impl<'a, S: Source> Decoder<'a, S> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        Decoder {
            input,
            pos: 0,
            tables: Vec::new(),
            last_table: 0,
            graveyard: Vec::new(),
            floor: stack::floor(stack::FIRST_BUDGET),
            segments: 0,
            max_segments: 0,
            zero_budget: ZERO_SIZE_BUDGET.saturating_add((input.len() as u64).saturating_mul(64)),
            pending: VecDeque::new(),
            closing: Vec::new(),
            strong_refs: 0,
            deep_levels: 0,
            _s: PhantomData,
        }
    }

    /// A decoder whose reading starts at `input[pos..]` (error offsets
    /// still count from the start of `input`).
    pub(crate) fn at(input: &'a [u8], pos: usize) -> Self {
        Decoder {
            pos,
            ..Self::new(input)
        }
    }

    /// Bytes not read yet.
    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    /// Ends the decode: drops the tables (and any partly built values) on a
    /// stack deep enough for them.
    ///
    /// After a failure it first empties the filled cells that may close a
    /// strong cycle, so the partial graph is freed, not leaked. Which cells:
    /// without cells every edge points at a node completed before its
    /// source, so every strong cycle contains a cell. Take the cycle's cell
    /// filled last: its content leads back, through nodes made during that
    /// fill (their own cells are filled later), to a node that existed
    /// before, which takes a strong back-reference read during that fill.
    pub(crate) fn finish(self, failed: bool) {
        if self.tables.is_empty()
            && self.graveyard.is_empty()
            && self.pending.is_empty()
            && self.closing.is_empty()
        {
            // Nothing was shared, deferred or left over (a small message):
            // no cell to empty, nothing deep to drop.
            return;
        }
        let mut contents = Vec::new();
        if failed {
            for cell in &self.closing {
                contents.extend(cell.empty());
            }
        }
        let segments = self.drop_segments();
        let nothing = contents.is_empty()
            && self.tables.is_empty()
            && self.graveyard.is_empty()
            && self.pending.is_empty()
            && self.closing.is_empty();
        let all = (
            contents,
            self.tables,
            self.graveyard,
            self.pending,
            self.closing,
        );
        if segments > 0 && !nothing {
            stack::drop_deep(all, segments);
        } else {
            drop(all);
        }
    }

    /// Queues a cell to be filled after the root value.
    pub(crate) fn defer(&mut self, cell: Arc<dyn Pending<S>>) -> Result<()> {
        if S::TEXT {
            self.expect_word("<cell>")?;
        }
        self.pending.push_back(cell);
        Ok(())
    }

    /// Fills the queued cells (which may queue more).
    pub(crate) fn flush(&mut self) -> Result<()> {
        while let Some(cell) = self.pending.pop_front() {
            if S::TEXT {
                self.expect_word("cell")?;
                self.punct(b':')?;
            }
            let before = self.strong_refs;
            cell.fill(self)?;
            if self.strong_refs != before {
                self.closing.push(cell);
            }
        }
        Ok(())
    }

    /// An [`DecodeError::Invalid`] with this message.
    #[cold]
    pub fn invalid(&self, msg: impl Into<String>) -> DecodeError {
        let msg = msg.into();
        if S::TEXT {
            DecodeError::Invalid(format!("{msg} (at byte {})", self.pos))
        } else {
            DecodeError::Invalid(msg)
        }
    }

    // ---- raw binary reads -------------------------------------------------

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let s = &self.input[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// A LEB128 number; one and two byte numbers (below 16384: most
    /// lengths, labels and variant indices) are read inline.
    #[inline(always)]
    fn varint(&mut self) -> Result<u64> {
        let p = self.pos;
        if let Some(&b) = self.input.get(p) {
            if b < 0x80 {
                self.pos = p + 1;
                return Ok(u64::from(b));
            }
            if let Some(&c) = self.input.get(p + 1) {
                if c < 0x80 {
                    self.pos = p + 2;
                    return Ok(u64::from(b & 0x7f) | u64::from(c) << 7);
                }
            }
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64> {
        match get_varint(self.input, &mut self.pos) {
            Some(v) => Ok(v),
            None if self.pos >= self.input.len() => Err(DecodeError::Truncated),
            None => Err(DecodeError::Invalid("LEB128 number over 64 bits".into())),
        }
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    // ---- text tokens ------------------------------------------------------

    pub(crate) fn skip_ws(&mut self) {
        while self.pos < self.input.len() && self.input[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    /// A run of characters up to whitespace or punctuation.
    pub(crate) fn word(&mut self) -> Result<&'a str> {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.input.len() {
            let c = self.input[self.pos];
            if c.is_ascii_whitespace() || matches!(c, b'{' | b'}' | b'[' | b']' | b':' | b'"') {
                break;
            }
            self.pos += 1;
        }
        if start == self.pos {
            return Err(if self.pos >= self.input.len() {
                DecodeError::Truncated
            } else {
                self.invalid("expected a word")
            });
        }
        std::str::from_utf8(&self.input[start..self.pos]).map_err(|_| self.invalid("bad UTF-8"))
    }

    pub(crate) fn punct(&mut self, c: u8) -> Result<()> {
        self.skip_ws();
        match self.input.get(self.pos) {
            None => Err(DecodeError::Truncated),
            Some(&b) if b == c => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => Err(self.invalid(format!("expected `{}`", c as char))),
        }
    }

    fn expect_word(&mut self, w: &str) -> Result<()> {
        let got = self.word()?;
        if got == w {
            Ok(())
        } else {
            Err(self.invalid(format!("expected `{w}`, found `{got}`")))
        }
    }

    fn text_number<P: Scalar>(&mut self) -> Result<P> {
        let w = self.word()?;
        P::parse(w).ok_or_else(|| self.invalid(format!("`{w}` is not a {}", P::NAME)))
    }

    /// A quoted string with Rust escapes.
    fn text_string(&mut self) -> Result<String> {
        self.punct(b'"')?;
        let mut s = String::new();
        loop {
            let rest = &self.input[self.pos..];
            let stop = rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\')
                .ok_or(DecodeError::Truncated)?;
            s.push_str(std::str::from_utf8(&rest[..stop]).map_err(|_| self.invalid("bad UTF-8"))?);
            self.pos += stop + 1;
            if rest[stop] == b'"' {
                return Ok(s);
            }
            let esc = self.byte()?;
            match esc {
                b'n' => s.push('\n'),
                b'r' => s.push('\r'),
                b't' => s.push('\t'),
                b'0' => s.push('\0'),
                b'\\' => s.push('\\'),
                b'"' => s.push('"'),
                b'\'' => s.push('\''),
                b'u' => {
                    if self.byte()? != b'{' {
                        return Err(self.invalid("bad \\u escape"));
                    }
                    let rest = &self.input[self.pos..];
                    let end = rest
                        .iter()
                        .take(7)
                        .position(|&b| b == b'}')
                        .ok_or_else(|| self.invalid("bad \\u escape"))?;
                    let hex = std::str::from_utf8(&rest[..end])
                        .map_err(|_| self.invalid("bad \\u escape"))?;
                    let c = u32::from_str_radix(hex, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| self.invalid("bad \\u escape"))?;
                    s.push(c);
                    self.pos += end + 1;
                }
                _ => return Err(self.invalid("unknown escape")),
            }
        }
    }

    // ---- the API used by `Mobile::decode` -------------------------------

    /// Reads one number.
    #[inline(always)]
    pub fn scalar<P: Scalar>(&mut self) -> Result<P> {
        if S::TEXT {
            return self.text_number();
        }
        Ok(P::get(self.take(P::SIZE)?))
    }

    /// Reads `n` numbers (the body of a `Vec<u64>`, say).
    #[inline]
    pub fn scalars<P: Scalar>(&mut self, n: usize) -> Result<Vec<P>> {
        if S::TEXT {
            let cap = n.min(self.remaining());
            let mut v = Vec::with_capacity(cap);
            for _ in 0..n {
                v.push(self.text_number()?);
            }
            return Ok(v);
        }
        let bytes = n.checked_mul(P::SIZE).ok_or(DecodeError::Truncated)?;
        let raw = self.take(bytes)?;
        Ok(raw.chunks_exact(P::SIZE).map(P::get).collect())
    }

    /// Reads a count written by [`Encoder::count`](super::Encoder::count).
    #[inline]
    pub fn count(&mut self) -> Result<u64> {
        if S::TEXT {
            return self.text_number();
        }
        self.varint()
    }

    /// Reads a string.
    #[inline]
    pub fn str(&mut self) -> Result<String> {
        if S::TEXT {
            return self.text_string();
        }
        let n = self.varint()?;
        if n > self.remaining() as u64 {
            return Err(DecodeError::Truncated);
        }
        let raw = self.take(n as usize)?;
        if raw.is_ascii() {
            // SAFETY: ASCII is UTF-8. (Checked first: most strings are
            // short and ASCII, and this check is cheaper than `from_utf8`.)
            return Ok(unsafe { std::str::from_utf8_unchecked(raw) }.to_owned());
        }
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(self.invalid("string is not UTF-8")),
        }
    }

    /// Reads the start of a sequence: its length, not yet checked (see
    /// [`capacity`](Self::capacity)).
    #[inline]
    pub fn seq_begin(&mut self) -> Result<u64> {
        if S::TEXT {
            self.punct(b'[')?;
            let n = self.text_number()?;
            self.punct(b':')?;
            return Ok(n);
        }
        self.varint()
    }

    /// Reads the end of a sequence.
    #[inline]
    pub fn seq_end(&mut self) -> Result<()> {
        if S::TEXT {
            return self.punct(b']');
        }
        Ok(())
    }

    /// Checks that `n` items of `T` can be in the rest of the input, and
    /// returns a capacity that is safe to allocate for them.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Truncated`] if they cannot fit, or
    /// [`DecodeError::LimitExceeded`] for too many zero-size items.
    #[inline]
    pub fn capacity<T: Mobile>(&mut self, n: u64) -> Result<usize> {
        self.capacity_min(n, T::WIRE_MIN)
    }

    pub(crate) fn capacity_min(&mut self, n: u64, wire_min: usize) -> Result<usize> {
        let min = if S::TEXT { wire_min.min(1) } else { wire_min } as u64;
        if min == 0 {
            self.zero_budget = self.zero_budget.checked_sub(n).ok_or_else(|| {
                DecodeError::LimitExceeded(format!("{n} items of zero wire size"))
            })?;
            return Ok((n as usize).min(4096));
        }
        if n > self.remaining() as u64 / min {
            return Err(DecodeError::Truncated);
        }
        Ok(n as usize)
    }

    /// Reads which variant follows; `names` are the variants in order.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Invalid`] for an index or name that is not a variant.
    #[inline]
    pub fn variant(&mut self, names: &[&str]) -> Result<u32> {
        if S::TEXT {
            let w = self.word()?;
            return match names.iter().position(|n| *n == w) {
                Some(i) => Ok(i as u32),
                None => {
                    Err(self.invalid(format!("unknown variant `{w}`, expected one of {names:?}")))
                }
            };
        }
        let i = self.varint()?;
        if i < names.len() as u64 {
            Ok(i as u32)
        } else {
            Err(self.bad_variant(i, names))
        }
    }

    /// Out of line: this inlines into every enum's `decode`, whose frame a
    /// deep value has once per level.
    #[cold]
    #[inline(never)]
    fn bad_variant(&self, i: u64, names: &[&str]) -> DecodeError {
        self.invalid(format!(
            "variant index {i} out of range (expected one of {names:?})"
        ))
    }

    /// Reads the start of a struct or variant body.
    #[inline]
    pub fn begin(&mut self, name: &str) -> Result<()> {
        if S::TEXT {
            if !name.is_empty() {
                self.expect_word(name)?;
            }
            return self.punct(b'{');
        }
        Ok(())
    }

    /// Reads a field name (text form only; tuple fields pass `""`).
    #[inline]
    pub fn field(&mut self, name: &str) -> Result<()> {
        if S::TEXT && !name.is_empty() {
            self.expect_word(name)?;
            return self.punct(b':');
        }
        Ok(())
    }

    /// Reads the end of a struct or variant body.
    #[inline]
    pub fn end(&mut self) -> Result<()> {
        if S::TEXT {
            return self.punct(b'}');
        }
        Ok(())
    }

    /// Runs `f` with enough stack: on a new stack segment when this one is
    /// used up.
    ///
    /// # Errors
    ///
    /// Whatever `f` returns, or [`DecodeError::LimitExceeded`] when no
    /// segment thread can be started.
    #[inline]
    pub fn nest<R: Send>(&mut self, f: impl FnOnce(&mut Self) -> Result<R> + Send) -> Result<R> {
        if stack::position() > self.floor {
            return f(self);
        }
        self.hop(f)
    }

    #[cold]
    #[inline(never)]
    fn hop<R: Send>(&mut self, f: impl FnOnce(&mut Self) -> Result<R> + Send) -> Result<R> {
        let saved = self.floor;
        self.segments += 1;
        self.max_segments = self.max_segments.max(self.segments);
        let this = &mut *self;
        let r = stack::on_new_segment(move |floor| {
            this.floor = floor;
            f(this)
        });
        self.segments -= 1;
        self.floor = saved;
        r.unwrap_or_else(|| {
            Err(DecodeError::LimitExceeded(
                "no thread for a stack segment".into(),
            ))
        })
    }

    /// Keeps a partly built value of a failing decode, to drop it on a deep
    /// enough stack. Call this before returning an error with values decoded
    /// so far (the derive does).
    #[inline]
    pub fn bury<V: Send + 'static>(&mut self, v: V) {
        if self.drop_segments() > 0 {
            self.graveyard.push(Box::new(v));
        }
    }

    /// [`bury`](Self::bury) `v` and return `e`.
    #[cold]
    pub fn bury_err<V: Send + 'static>(&mut self, v: V, e: DecodeError) -> DecodeError {
        self.bury(v);
        e
    }

    /// [`bury_err`](Self::bury_err) for the pieces of an explicit-stack
    /// decode (see [`DeepStack`](super::DeepStack)): `v` may hold values up
    /// to `depth` levels deep that were built without stack segments, so it
    /// is dropped on a thread whose stack can hold `depth` drop frames.
    #[doc(hidden)]
    #[cold]
    pub fn bury_deep<V: Send + 'static>(
        &mut self,
        v: V,
        depth: usize,
        e: DecodeError,
    ) -> DecodeError {
        self.deep_levels = self.deep_levels.saturating_add(depth);
        self.bury(v);
        e
    }

    /// Notes that an explicit-stack decode built a value `depth` levels
    /// deep (so that an enclosing failure drops it on a deep stack).
    #[doc(hidden)]
    #[inline]
    pub fn deep_done(&mut self, depth: usize) {
        self.deep_levels = self.deep_levels.saturating_add(depth);
    }

    /// Checks a work stack's depth: every level of a value takes at least a
    /// byte, so a stack deeper than the input is refused (a type that can
    /// nest without reading anything, such as `struct S(Box<S>)`, would
    /// otherwise loop).
    ///
    /// # Errors
    ///
    /// [`DecodeError::LimitExceeded`] past that depth.
    #[doc(hidden)]
    #[inline]
    pub fn deep_check(&self, depth: usize) -> Result<()> {
        if depth <= self.input.len() {
            Ok(())
        } else {
            Err(self.deep_too_deep())
        }
    }

    #[cold]
    #[inline(never)]
    fn deep_too_deep(&self) -> DecodeError {
        DecodeError::LimitExceeded("nesting deeper than the input is long".into())
    }

    /// Stack segments a drop of this decode's pieces needs (0: none).
    fn drop_segments(&self) -> usize {
        let deep = if self.deep_levels > DEEP_DROP_FROM {
            self.deep_levels.saturating_mul(DROP_FRAME) / (stack::SEGMENT - stack::MARGIN) + 1
        } else {
            0
        };
        self.max_segments.max(deep)
    }

    // ---- nodes ------------------------------------------------------------

    #[inline]
    fn table<T: Mobile>(&mut self) -> &mut Vec<Slot<T>> {
        let ty = TypeId::of::<T>();
        let i = match self.tables.get(self.last_table) {
            Some((t, _)) if *t == ty => self.last_table,
            _ => self.find_table::<T>(ty),
        };
        let table: *mut (dyn Any + Send) = &mut *self.tables[i].1;
        // SAFETY: `find_table` is the only place that adds tables, and it
        // keys each with the `TypeId` of the `T` whose `Vec<Slot<T>>` it
        // boxes; the key matched `T` above, so the box holds a
        // `Vec<Slot<T>>` (what `downcast_mut` would check a second time,
        // through the vtable, on every back-reference).
        unsafe { &mut *table.cast::<Vec<Slot<T>>>() }
    }

    #[inline(never)]
    fn find_table<T: Mobile>(&mut self, ty: TypeId) -> usize {
        let i = match self.tables.iter().position(|(t, _)| *t == ty) {
            Some(i) => i,
            None => {
                self.tables.push((ty, Box::new(Vec::<Slot<T>>::new())));
                self.tables.len() - 1
            }
        };
        self.last_table = i;
        i
    }

    /// Reads a node tag and, for back-references, the label.
    fn node_tag<T: Mobile>(&mut self) -> Result<(u8, usize)> {
        if S::TEXT {
            let w = self.word()?;
            return match w {
                "&" => Ok((TAG_NEW, 0)),
                "dead" => Ok((TAG_DEAD, 0)),
                _ => {
                    let body = w
                        .strip_prefix('#')
                        .ok_or_else(|| self.invalid(format!("bad node tag `{w}`")))?;
                    let (num, tag) = match body.strip_suffix('=') {
                        Some(n) => (n, TAG_SHARED),
                        None => (body, TAG_REF),
                    };
                    let label: usize = num
                        .parse()
                        .map_err(|_| self.invalid(format!("bad node label `{w}`")))?;
                    if tag == TAG_SHARED && label != self.table::<T>().len() {
                        return Err(self.invalid(format!("node label #{label} out of order")));
                    }
                    Ok((tag, label))
                }
            };
        }
        let tag = self.byte()?;
        if tag == TAG_REF {
            let l = self.varint()?;
            return Ok((tag, usize::try_from(l).unwrap_or(usize::MAX)));
        }
        Ok((tag, 0))
    }

    /// Reads an `Arc` node.
    ///
    /// # Errors
    ///
    /// Truncated or invalid input, a back-reference to an unknown node, or a
    /// strong reference into a node under construction.
    #[inline]
    pub fn arc<T: Mobile>(&mut self) -> Result<Arc<T>> {
        // Back-references (the common case in a DAG) are read inline; a new
        // node's content is decoded out of line.
        if !S::TEXT && self.input.get(self.pos) == Some(&TAG_REF) {
            self.pos += 1;
            let label = self.varint()?;
            return self.arc_ref(usize::try_from(label).unwrap_or(usize::MAX));
        }
        self.arc_node()
    }

    /// Any other node: a new or shared one, a dead weak, or any node of the
    /// text form.
    #[inline(never)]
    fn arc_node<T: Mobile>(&mut self) -> Result<Arc<T>> {
        let (tag, label) = self.node_tag::<T>()?;
        match tag {
            TAG_NEW => self.nest(|d| T::decode_arc(d, false)),
            TAG_SHARED => self.nest(|d| T::decode_arc(d, true)),
            TAG_REF => self.arc_ref(label),
            TAG_DEAD => Err(self.invalid("dead weak reference where an Arc was expected")),
            t => Err(self.invalid(format!("bad node tag {t}"))),
        }
    }

    /// A strong back-reference to node `label`.
    #[inline]
    fn arc_ref<T: Mobile>(&mut self, label: usize) -> Result<Arc<T>> {
        if let Some(Slot::Done(a)) = self.table::<T>().get(label) {
            let a = a.clone();
            self.strong_refs += 1;
            return Ok(a);
        }
        Err(self.bad_ref::<T>(label))
    }

    #[cold]
    #[inline(never)]
    fn bad_ref<T: Mobile>(&mut self, label: usize) -> DecodeError {
        match self.table::<T>().get(label) {
            Some(_) => self.invalid(
                "strong reference to a node still being decoded (strong cycles must go through graph::Cell)",
            ),
            None => self.invalid(format!("back-reference to unknown node #{label}")),
        }
    }

    /// Reads a `Weak` node.
    ///
    /// # Errors
    ///
    /// As [`arc`](Self::arc).
    pub fn weak<T: Mobile>(&mut self) -> Result<Weak<T>> {
        let (tag, label) = self.node_tag::<T>()?;
        match tag {
            TAG_NEW => {
                // Nothing else holds it: the weak is dead on arrival, as it
                // would be on the sender once its holders outside the
                // graph let go.
                let a = self.nest(|d| T::decode_arc(d, false))?;
                let w = Arc::downgrade(&a);
                self.bury(a);
                Ok(w)
            }
            TAG_SHARED => Ok(Arc::downgrade(&self.nest(|d| T::decode_arc(d, true))?)),
            TAG_REF => match self.table::<T>().get(label) {
                Some(Slot::Done(a)) => Ok(Arc::downgrade(a)),
                Some(Slot::Building(w)) => Ok(w.clone()),
                Some(Slot::Pending) => Err(self.invalid(
                    "weak cycle: this build uses panic=abort, which cannot decode weak cycles",
                )),
                None => Err(self.invalid(format!("back-reference to unknown node #{label}"))),
            },
            TAG_DEAD => Ok(Weak::new()),
            t => Err(self.invalid(format!("bad node tag {t}"))),
        }
    }

    /// Decodes the content of a shared node, which weak back-references
    /// inside it may point to.
    #[cfg(panic = "unwind")]
    pub(crate) fn decode_cyclic<T: Mobile>(&mut self) -> Result<Arc<T>> {
        use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
        /// Unwinds out of `Arc::new_cyclic` when the content fails to decode
        /// (the closure must return a `T`); not a panic: no hook runs.
        struct Unwind;
        let label = self.table::<T>().len();
        let mut failure = None;
        let built = catch_unwind(AssertUnwindSafe(|| {
            Arc::new_cyclic(|w| {
                self.table::<T>().push(Slot::Building(w.clone()));
                match T::decode(self) {
                    Ok(v) => v,
                    Err(e) => {
                        failure = Some(e);
                        resume_unwind(Box::new(Unwind))
                    }
                }
            })
        }));
        match built {
            Ok(a) => {
                self.table::<T>()[label] = Slot::Done(a.clone());
                Ok(a)
            }
            Err(payload) => match failure {
                Some(e) => Err(e),
                None => resume_unwind(payload),
            },
        }
    }

    /// Without unwinding, no `Arc::new_cyclic` escape: weak cycles are
    /// refused (see [`weak`](Self::weak)).
    #[cfg(not(panic = "unwind"))]
    pub(crate) fn decode_cyclic<T: Mobile>(&mut self) -> Result<Arc<T>> {
        let label = self.table::<T>().len();
        self.table::<T>().push(Slot::Pending);
        let a = Arc::new(T::decode(self)?);
        self.table::<T>()[label] = Slot::Done(a.clone());
        Ok(a)
    }
}
