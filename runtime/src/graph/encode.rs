//! The two-pass encoder.
//!
//! Only `Arc` allocations are *nodes*: they alone can be met twice. An `Arc`
//! whose strong count is 1 and weak count 0 cannot be met again, so it gets
//! no number and costs no hashing; every other `Arc` (or `Weak` target) gets a
//! dense number from a pointer-keyed ahash map in pass 1.
//!
//! Pass 1 ([`Walk`]) walks the value, writes nothing, and for each numbered
//! node sets its bit in `visited` on the first meeting and in `shared` on any
//! later one. It also records the sequence of numbered meetings, so that
//! pass 2 finds each node's number without hashing again.
//!
//! Pass 2 ([`Binary`] or [`Text`]) walks the value in the same order and
//! writes it. Per node it writes one tag:
//!
//! | tag | meaning                       | followed by |
//! |-----|-------------------------------|-------------|
//! | 0   | unshared node                 | the content |
//! | 1   | first meeting of a shared node (label = next label of its type) | the content |
//! | 2   | later meeting of a shared node | label (LEB128) |
//! | 3   | dead `Weak`                    | nothing |
//!
//! Labels count per type: the n-th shared `Arc<T>` written has label n among
//! the `T`s. In pass 2, `visited` is reused as "not yet written": its bit is
//! cleared when the node's content is written.
//!
//! The content of each [`Cell`](super::Cell) is written after the root value
//! (breadth first, in the order the cells were met), not where the cell is:
//! so a strong cycle through a cell is closed after the node it points to is
//! complete, and a long chain of cells is written iteratively.
//!
//! A value mutated (through a [`Cell`](super::Cell)) by another thread between
//! the passes still encodes to a valid graph: each recorded meeting is checked
//! against its pointer and the map is consulted on a mismatch; a node that
//! turns up unnumbered is written unshared.

use std::any::TypeId;
use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::{Arc, Weak};

use bitvec::vec::BitVec;

use super::func::EnvEncode;
use super::stack;
use super::wire::{put_varint, Binary, Format, Kind, Scalar, Text, Walk};
use super::Mobile;

/// Node tags (see the module docs).
pub(crate) const TAG_NEW: u8 = 0;
pub(crate) const TAG_SHARED: u8 = 1;
pub(crate) const TAG_REF: u8 = 2;
pub(crate) const TAG_DEAD: u8 = 3;

/// Entries in [`Share::recent`].
const RECENT: usize = 64;

/// Sharing state, filled by pass 1 and read by pass 2.
pub(crate) struct Share {
    /// Pointer of each numbered node to its dense number.
    ids: HashMap<usize, u32, ahash::RandomState>,
    /// Pass 1: a direct-mapped cache in front of `ids` (pointer, number);
    /// nearby nodes tend to point at the same shared children. Empty until
    /// the first meeting: most messages have no `Arc`, and zeroing 1 KiB
    /// for each was a visible part of a small remote send.
    recent: Vec<(usize, u32)>,
    /// Pointer of each dense number (to check recorded meetings).
    ptrs: Vec<usize>,
    /// Pass 1: met at least once. Pass 2: not yet written.
    visited: BitVec,
    /// Met more than once.
    shared: BitVec,
    /// Dense number of each numbered meeting, in walk order.
    seq: Vec<u32>,
    /// Pass 2: position in `seq`.
    cursor: usize,
    /// Pass 2: label of each written shared node.
    labels: Vec<u32>,
    /// Pass 2: next label per type.
    next_label: Vec<(TypeId, u32)>,
    /// Cell contents to write after the root value, in order.
    deferred: VecDeque<Arc<dyn Deferred>>,
}

/// A cell's content, written after the root value (see [`Cell`](super::Cell)).
pub(crate) trait Deferred: Send + Sync {
    fn walk(&self, e: &mut Encoder<'_, Walk>);
    fn binary(&self, e: &mut Encoder<'_, Binary>);
    fn text(&self, e: &mut Encoder<'_, Text>);
}

impl std::fmt::Debug for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Share")
            .field("nodes", &self.ptrs.len())
            .field("meetings", &self.seq.len())
            .field("deferred", &self.deferred.len())
            .finish_non_exhaustive()
    }
}

impl Default for Share {
    fn default() -> Self {
        Share {
            // Fixed seeds: the keys are our own pointers (no flooding to
            // fear), and a fresh random state costs a shared atomic each time.
            ids: HashMap::with_hasher(ahash::RandomState::with_seeds(
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
            )),
            recent: Vec::new(),
            ptrs: Vec::new(),
            visited: BitVec::new(),
            shared: BitVec::new(),
            seq: Vec::new(),
            cursor: 0,
            labels: Vec::new(),
            next_label: Vec::new(),
            deferred: VecDeque::new(),
        }
    }
}

impl Share {
    /// Pass 1 → pass 2.
    pub(crate) fn finish_walk(&mut self) {
        self.cursor = 0;
        self.deferred.clear();
        if !self.ptrs.is_empty() {
            self.labels = vec![0; self.ptrs.len()];
        }
    }

    /// Pass 1: a numbered meeting. True if the content must be walked.
    #[inline]
    fn walk_meet(&mut self, ptr: usize) -> bool {
        if self.recent.is_empty() {
            // Pointer 0 is never an `Arc`'s.
            self.recent.resize(RECENT, (0, 0));
        }
        let slot = (ptr >> 4) % RECENT;
        let (p, id) = self.recent[slot];
        if p == ptr {
            self.shared.set(id as usize, true);
            self.seq.push(id);
            return false;
        }
        let next = self.ptrs.len() as u32;
        match self.ids.entry(ptr) {
            std::collections::hash_map::Entry::Occupied(o) => {
                let id = *o.get();
                self.recent[slot] = (ptr, id);
                self.shared.set(id as usize, true);
                self.seq.push(id);
                false
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(next);
                self.recent[slot] = (ptr, next);
                self.ptrs.push(ptr);
                self.visited.push(true);
                self.shared.push(false);
                self.seq.push(next);
                true
            }
        }
    }

    /// Pass 2: the dense number of a numbered meeting.
    #[inline]
    fn write_meet(&mut self, ptr: usize) -> Option<u32> {
        if let Some(&id) = self.seq.get(self.cursor) {
            if self.ptrs[id as usize] == ptr {
                self.cursor += 1;
                return Some(id);
            }
        }
        self.ids.get(&ptr).copied()
    }

    fn new_label(&mut self, ty: TypeId) -> u32 {
        for (t, n) in self.next_label.iter_mut() {
            if *t == ty {
                *n += 1;
                return *n - 1;
            }
        }
        self.next_label.push((ty, 1));
        0
    }
}

/// Writes a value: pass 1 ([`Walk`]), or pass 2 in the binary or text form.
///
/// [`Mobile::encode`] implementations call its methods in the same order as
/// the matching [`Decoder`](super::Decoder) methods in [`Mobile::decode`].
pub struct Encoder<'e, F: Format> {
    out: &'e mut Vec<u8>,
    share: &'e mut Share,
    /// Lowest stack address this segment may use before hopping.
    floor: usize,
    /// Text: pending separator state.
    text: String,
    _f: PhantomData<F>,
}

impl<F: Format> std::fmt::Debug for Encoder<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("kind", &F::KIND)
            .field("len", &self.out.len())
            .finish_non_exhaustive()
    }
}

impl<'e, F: Format> Encoder<'e, F> {
    pub(crate) fn new(out: &'e mut Vec<u8>, share: &'e mut Share) -> Self {
        Encoder {
            out,
            share,
            floor: stack::floor(stack::FIRST_BUDGET),
            text: String::new(),
            _f: PhantomData,
        }
    }

    /// Text form: appends a token, space separated.
    #[inline]
    fn tok(&mut self, s: &str) {
        if !self.out.is_empty() && !matches!(self.out.last(), Some(b' ' | b'\n')) {
            self.out.push(b' ');
        }
        self.out.extend_from_slice(s.as_bytes());
    }

    /// Writes one number.
    #[inline(always)]
    pub fn scalar<P: Scalar>(&mut self, v: P) {
        match F::KIND {
            Kind::Walk => {}
            Kind::Binary => v.push(self.out),
            Kind::Text => {
                let mut s = std::mem::take(&mut self.text);
                s.clear();
                v.text(&mut s);
                self.tok(&s);
                self.text = s;
            }
        }
    }

    /// Writes a run of numbers (the body of a `Vec<u64>`, say): a copy in the
    /// binary form.
    #[inline]
    pub fn scalars<P: Scalar>(&mut self, v: &[P]) {
        match F::KIND {
            Kind::Walk => {}
            Kind::Binary => {
                let start = self.out.len();
                self.out.resize(start + v.len() * P::SIZE, 0);
                for (chunk, x) in self.out[start..].chunks_exact_mut(P::SIZE).zip(v) {
                    x.put(chunk);
                }
            }
            Kind::Text => {
                for x in v {
                    self.scalar(*x);
                }
            }
        }
    }

    /// Writes a count (length, variant index, label): LEB128 in binary.
    #[inline]
    pub fn count(&mut self, n: u64) {
        match F::KIND {
            Kind::Walk => {}
            Kind::Binary => put_varint(self.out, n),
            Kind::Text => self.tok(&n.to_string()),
        }
    }

    /// Writes a string.
    #[inline]
    pub fn str(&mut self, s: &str) {
        match F::KIND {
            Kind::Walk => {}
            Kind::Binary => {
                put_varint(self.out, s.len() as u64);
                self.out.extend_from_slice(s.as_bytes());
            }
            Kind::Text => {
                let q = format!("{s:?}");
                self.tok(&q);
            }
        }
    }

    /// Starts a sequence of `n` items (a length in binary, `[n:` in text).
    #[inline]
    pub fn seq_begin(&mut self, n: usize) {
        match F::KIND {
            Kind::Walk => {}
            Kind::Binary => put_varint(self.out, n as u64),
            Kind::Text => {
                self.tok("[");
                self.out.extend_from_slice(n.to_string().as_bytes());
                self.out.push(b':');
            }
        }
    }

    /// Ends a sequence (text only).
    #[inline]
    pub fn seq_end(&mut self) {
        if F::KIND == Kind::Text {
            self.tok("]");
        }
    }

    /// Writes which variant of an enum follows (its index in binary, its name
    /// in text).
    #[inline]
    pub fn variant(&mut self, index: u32, name: &str) {
        match F::KIND {
            Kind::Walk => {}
            Kind::Binary => put_varint(self.out, u64::from(index)),
            Kind::Text => self.tok(name),
        }
    }

    /// Starts a struct or variant body (text only: `name {`).
    #[inline]
    pub fn begin(&mut self, name: &str) {
        if F::KIND == Kind::Text {
            if !name.is_empty() {
                self.tok(name);
            }
            self.tok("{");
        }
    }

    /// Names the next field (text only: `name:`; tuple fields pass `""`).
    #[inline]
    pub fn field(&mut self, name: &str) {
        if F::KIND == Kind::Text && !name.is_empty() {
            self.tok(name);
            self.out.push(b':');
        }
    }

    /// Ends a struct or variant body (text only).
    #[inline]
    pub fn end(&mut self) {
        if F::KIND == Kind::Text {
            self.tok("}");
        }
    }

    /// Runs `f` with enough stack: on a new stack segment when this one is
    /// used up. Indirections (`Box`, collections, nodes) call this.
    #[inline]
    pub fn nest<R: Send>(&mut self, f: impl FnOnce(&mut Self) -> R + Send) -> R {
        if stack::position() > self.floor {
            return f(self);
        }
        self.hop(f)
    }

    #[cold]
    #[inline(never)]
    fn hop<R: Send>(&mut self, f: impl FnOnce(&mut Self) -> R + Send) -> R {
        let saved = self.floor;
        let this = &mut *self;
        let r = stack::on_new_segment(move |floor| {
            this.floor = floor;
            f(this)
        });
        self.floor = saved;
        match r {
            Some(r) => r,
            None => panic!("graph encoder: no thread for a stack segment (graph too deep?)"),
        }
    }

    fn node_tag(&mut self, tag: u8, label: u32) {
        match F::KIND {
            Kind::Walk => {}
            Kind::Binary => {
                self.out.push(tag);
                if tag == TAG_REF {
                    put_varint(self.out, u64::from(label));
                }
            }
            Kind::Text => match tag {
                TAG_NEW => self.tok("&"),
                TAG_SHARED => self.tok(&format!("#{label}=")),
                TAG_REF => self.tok(&format!("#{label}")),
                _ => self.tok("dead"),
            },
        }
    }

    /// Writes a node: the content of `value`, or a back-reference if this
    /// allocation (`ptr`) was written before. `maybe_shared` is false when
    /// the allocation provably has no other reference.
    fn node<T: Mobile>(&mut self, ptr: usize, maybe_shared: bool, value: &T) {
        if F::KIND == Kind::Walk {
            if !maybe_shared || self.share.walk_meet(ptr) {
                self.nest(|e| value.encode(e));
            }
            return;
        }
        let id = if maybe_shared {
            self.share.write_meet(ptr)
        } else {
            None
        };
        match id {
            Some(id) if self.share.shared[id as usize] => {
                let id = id as usize;
                if self.share.visited[id] {
                    self.share.visited.set(id, false);
                    let label = self.share.new_label(TypeId::of::<T>());
                    self.share.labels[id] = label;
                    self.node_tag(TAG_SHARED, label);
                    self.nest(|e| value.encode(e));
                } else {
                    let label = self.share.labels[id];
                    self.node_tag(TAG_REF, label);
                }
            }
            _ => {
                self.node_tag(TAG_NEW, 0);
                self.nest(|e| value.encode(e));
            }
        }
    }

    /// Writes an `Arc` as a node (sharing and cycles preserved).
    #[inline]
    pub fn arc<T: Mobile>(&mut self, a: &Arc<T>) {
        let maybe_shared = Arc::strong_count(a) > 1 || Arc::weak_count(a) > 0;
        self.node(Arc::as_ptr(a) as usize, maybe_shared, &**a);
    }

    /// Writes a `Weak` as a node, or as dead if its target is gone.
    pub fn weak<T: Mobile>(&mut self, w: &Weak<T>) {
        match w.upgrade() {
            Some(a) => self.node(Arc::as_ptr(&a) as usize, true, &*a),
            None => self.node_tag(TAG_DEAD, 0),
        }
    }

    /// Defers a cell's content to after the root value (text: `<cell>`).
    pub(crate) fn defer(&mut self, content: Arc<dyn Deferred>) {
        if F::KIND == Kind::Text {
            self.tok("<cell>");
        }
        self.share.deferred.push_back(content);
    }

    /// Writes the deferred cell contents (text: `cell: content` each), which
    /// may defer more.
    pub(crate) fn flush(&mut self) {
        while let Some(c) = self.share.deferred.pop_front() {
            match F::KIND {
                Kind::Walk => c.walk(&mut self.reborrow()),
                Kind::Binary => c.binary(&mut self.reborrow()),
                Kind::Text => {
                    self.tok("cell");
                    self.out.push(b':');
                    c.text(&mut self.reborrow());
                }
            }
        }
    }

    /// Writes a mobile function's environment (type-erased).
    pub(crate) fn env(&mut self, env: &dyn EnvEncode) {
        match F::KIND {
            Kind::Walk => env.env_walk(&mut self.reborrow()),
            Kind::Binary => env.env_binary(&mut self.reborrow()),
            Kind::Text => env.env_text(&mut self.reborrow()),
        }
    }

    /// The same encoder under the marker `G` (only called with `G` == `F`):
    /// the marker is phantom and the state is behind references.
    fn reborrow<G: Format>(&mut self) -> Encoder<'_, G> {
        debug_assert_eq!(F::KIND, G::KIND);
        Encoder {
            out: &mut *self.out,
            share: &mut *self.share,
            floor: self.floor,
            text: String::new(),
            _f: PhantomData,
        }
    }
}
