//! Decoding is total: truncated, garbage and bit-flipped inputs give an
//! error (or a value), never a panic, a hang or a huge allocation.

mod graph_gen;

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use graft::graph::{self, Cell, EncodeOptions, MobileFn, MobileFnOnce};
use graft::{mobile_fn, Mobile};
use graph_gen::{gen, Rng, Val};

#[derive(Mobile)]
struct Ring {
    value: u64,
    back: Weak<Ring>,
    next: Cell<Option<Arc<Ring>>>,
}

#[derive(Mobile)]
struct Everything {
    vals: Vec<Val>,
    f: MobileFn<u64, u64>,
    once: MobileFnOnce<String>,
    ring: Arc<Ring>,
    shared: Vec<Arc<String>>,
    map: std::collections::HashMap<u32, (String, Option<u8>)>,
    units: Vec<()>,
}

fn sample(r: &mut Rng) -> Everything {
    let a = Arc::new(Ring {
        value: 1,
        back: Weak::new(),
        next: Cell::new(None),
    });
    let b = Arc::new(Ring {
        value: 2,
        back: Arc::downgrade(&a),
        next: Cell::new(Some(a.clone())),
    });
    a.next.set(Some(b));
    let s = Arc::new("shared".to_string());
    let k = r.u64();
    Everything {
        vals: (0..4).map(|_| gen(r, 3)).collect(),
        f: mobile_fn!([k] |x: u64| x ^ k),
        once: MobileFnOnce::new(7u8, |x| x.to_string()),
        ring: a,
        shared: vec![s.clone(), s],
        map: [(1, ("one".into(), Some(1))), (2, ("two".into(), None))].into(),
        units: vec![(); 3],
    }
}

/// Tries one input; it must not panic. Values that decode are dropped (their
/// cycles leak, which is fine here).
/// Decodes, never panicking; whether it decoded.
fn try_binary(bytes: &[u8]) -> bool {
    match graph::decode::<Everything>(bytes) {
        Ok(v) => {
            std::mem::forget(v.ring);
            true
        }
        Err(_) => false,
    }
}

fn try_text(bytes: &[u8]) {
    if let Ok(s) = std::str::from_utf8(bytes) {
        if let Ok(v) = graph::from_text::<Everything>(s) {
            std::mem::forget(v.ring);
        }
    }
}

#[test]
fn hundred_thousand_mutations() {
    let mut r = Rng::new(3);
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    let mut texts: Vec<Vec<u8>> = Vec::new();
    for i in 0..8 {
        let v = sample(&mut r);
        corpus.push(graph::encode(&v));
        if i % 4 == 0 {
            corpus.push(graph::encode_with(
                &v,
                &EncodeOptions::default().compress_above(0),
            ));
        }
        texts.push(graph::to_text(&v).into_bytes());
        // Break the cycle of the sample.
        v.ring.next.set(None);
    }
    for c in &corpus {
        assert!(graph::decode::<Everything>(c).is_ok());
    }

    let start = Instant::now();
    let budget = Duration::from_secs(60);
    let mut n = 0u64;
    // Every truncation of every input, each refused.
    for c in &corpus {
        for len in 0..c.len() {
            assert!(
                !try_binary(&c[..len]),
                "a truncation to {len} bytes decoded"
            );
            n += 1;
        }
    }
    for t in &texts {
        for len in (0..t.len()).step_by(3) {
            try_text(&t[..len]);
            n += 1;
        }
    }
    // Single and multiple bit flips, byte replacements, insertions and
    // deletions, and pure garbage after a valid header.
    while n < 110_000 {
        let src = &corpus[r.below(corpus.len() as u64) as usize];
        let mut m = src.clone();
        match r.below(6) {
            0 => {
                let i = r.below(m.len() as u64) as usize;
                m[i] ^= 1 << r.below(8);
            }
            1 => {
                for _ in 0..1 + r.below(8) {
                    let i = r.below(m.len() as u64) as usize;
                    m[i] ^= 1 << r.below(8);
                }
            }
            2 => {
                let i = r.below(m.len() as u64) as usize;
                m[i] = [0, 0xff, 0x7f, 0x80, 1, 2, 3][r.below(7) as usize];
            }
            3 => {
                let i = r.below(m.len() as u64) as usize;
                m.insert(i, r.u64() as u8);
            }
            4 => {
                let i = r.below(m.len() as u64) as usize;
                m.remove(i);
            }
            _ => {
                let keep = 13 + r.below(20) as usize;
                m.truncate(keep.min(m.len()));
                for _ in 0..r.below(64) {
                    m.push(r.u64() as u8);
                }
            }
        }
        let _ = try_binary(&m);
        n += 1;
        if n & 7 == 0 {
            let t = &texts[r.below(texts.len() as u64) as usize];
            let mut t = t.clone();
            let i = r.below(t.len() as u64) as usize;
            t[i] = b"{}[]: \"#=&0123456789-x"[r.below(21) as usize];
            try_text(&t);
            n += 1;
        }
        assert!(
            start.elapsed() < budget,
            "mutations too slow: {n} in {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn huge_lengths_do_not_allocate() {
    // A header for Vec<u64> followed by a length of 2^60.
    let mut bytes = graph::encode(&Vec::<u64>::new());
    bytes.pop();
    bytes.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10]);
    assert_eq!(
        graph::decode::<Vec<u64>>(&bytes),
        Err(graph::DecodeError::Truncated)
    );
    let mut bytes = graph::encode(&Vec::<()>::new());
    bytes.pop();
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    assert!(
        matches!(
            graph::decode::<Vec<()>>(&bytes),
            Err(graph::DecodeError::LimitExceeded(_))
        ),
        "a zero-size item budget, not an allocation"
    );
    let mut bytes = graph::encode(&String::new());
    bytes.pop();
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert_eq!(
        graph::decode::<String>(&bytes),
        Err(graph::DecodeError::Truncated)
    );
}

#[test]
fn deep_garbage_does_not_overflow() {
    // 200,000 nested `Some(Box(` then an invalid tag: the partial chain is
    // dropped on a deep stack.
    #[derive(Mobile, Debug)]
    struct Deep(Option<Box<Deep>>, u8);
    let mut bytes = graph::encode(&Deep(None, 0));
    bytes.truncate(bytes.len() - 2);
    bytes.resize(bytes.len() + 200_000, 1);
    bytes.push(0);
    bytes.push(7);
    bytes.resize(bytes.len() + 200_000, 7);
    bytes.push(0xff); // trailing byte: the whole chain is built, then refused
    let err = graph::decode::<Deep>(&bytes).unwrap_err();
    assert_eq!(err, graph::DecodeError::TrailingBytes(1));
}
