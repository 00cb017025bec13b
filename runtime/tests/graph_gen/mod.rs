//! A small random value generator shared by the graph tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use graft::Mobile;

/// xorshift64*: deterministic, seedable.
#[derive(Debug)]
pub(crate) struct Rng(u64);
impl Rng {
    /// A generator from a seed.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    /// 64 random bits.
    pub(crate) fn u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.u64() % n
    }
    /// A short string full of characters that need escaping.
    pub(crate) fn string(&mut self) -> String {
        const ALPHABET: &[char] = &[
            'a', 'Z', '0', ' ', '"', '\\', '\n', '\t', '\0', 'é', '😀', '\u{7f}', '{', '}', '[',
            ':', '#',
        ];
        let n = self.below(12);
        (0..n)
            .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize])
            .collect()
    }
}

/// A value of every shape the derive supports.
#[allow(missing_docs)]
#[derive(Mobile, Debug, PartialEq, Clone)]
pub(crate) enum Val {
    U(u64),
    I(i32),
    F(f64),
    S(String),
    B(bool),
    C(char),
    L(Vec<Val>),
    M(BTreeMap<String, Val>),
    O(Option<Box<Val>>),
    T((u8, i16, Vec<u8>)),
    Unit,
    Rec {
        a: u16,
        b: Vec<Option<String>>,
        c: [i8; 3],
    },
    Shared(Arc<Val>),
}

/// A random value, at most `depth` levels deep.
pub(crate) fn gen(r: &mut Rng, depth: u32) -> Val {
    let leaf = depth == 0 || r.below(3) == 0;
    match r.below(if leaf { 7 } else { 13 }) {
        0 => Val::U(r.u64() >> r.below(64)),
        1 => Val::I(r.u64() as i32),
        2 => {
            let f = f64::from_bits(r.u64());
            Val::F(if f.is_nan() { 0.5 } else { f })
        }
        3 => Val::S(r.string()),
        4 => Val::B(r.below(2) == 1),
        5 => Val::C(char::from_u32(r.below(0x11_0000) as u32).unwrap_or('x')),
        6 => Val::Unit,
        7 => Val::L((0..r.below(5)).map(|_| gen(r, depth - 1)).collect()),
        8 => Val::M(
            (0..r.below(4))
                .map(|_| (r.string(), gen(r, depth - 1)))
                .collect(),
        ),
        9 => Val::O(if r.below(2) == 0 {
            None
        } else {
            Some(Box::new(gen(r, depth - 1)))
        }),
        10 => Val::T((
            r.u64() as u8,
            r.u64() as i16,
            (0..r.below(6)).map(|_| r.u64() as u8).collect(),
        )),
        11 => Val::Rec {
            a: r.u64() as u16,
            b: (0..r.below(3))
                .map(|_| {
                    if r.below(2) == 0 {
                        None
                    } else {
                        Some(r.string())
                    }
                })
                .collect(),
            c: [r.u64() as i8, 0, -1],
        },
        _ => Val::Shared(Arc::new(gen(r, depth - 1))),
    }
}
