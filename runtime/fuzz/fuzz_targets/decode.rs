//! Fuzzes the graph decoder: any input must decode or fail, never panic,
//! hang, overflow the stack or allocate without bound. Both the binary and
//! the text form are tried, as several types (the first byte picks one).
#![no_main]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use graft::graph::{self, Cell, MobileFn, MobileFnOnce};
use graft::Mobile;
use libfuzzer_sys::fuzz_target;

#[derive(Mobile)]
enum Tree {
    Leaf(u64),
    Node { kids: Vec<Tree>, label: String },
    Shared(Arc<Tree>),
    Back(Weak<Tree>),
    Boxed(Box<Tree>),
}

#[derive(Mobile)]
struct Ring {
    value: u64,
    next: Cell<Option<Arc<Ring>>>,
}

#[derive(Mobile)]
struct Mixed {
    map: HashMap<String, Vec<Option<i32>>>,
    tree: BTreeMap<u8, (char, bool, f64)>,
    units: Vec<()>,
    f: MobileFn<u64, u64>,
    once: MobileFnOnce<String>,
}

/// Decodes as `T` in both forms and hands successes to `done` (which frees
/// them; only `Ring` can hold a strong cycle, and its `done` breaks it, so
/// any leak the sanitizer reports is a bug).
fn both<T: Mobile>(data: &[u8], done: fn(T)) {
    if let Ok(v) = graph::decode::<T>(data) {
        done(v);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(v) = graph::from_text::<T>(s) {
            done(v);
        }
    }
    let _ = graph::peek_descriptor(data);
}

/// Frees a ring: clears each `next` link in turn.
fn free_ring(r: Arc<Ring>) {
    let mut cur = Some(r);
    while let Some(node) = cur {
        cur = node.next.replace(None);
    }
}

/// Writes seed inputs (encodings of each type, binary, compressed and text,
/// behind their selector byte) into the directory named by
/// `GRAFT_FUZZ_SEEDS`, if set. They are written by this executable because
/// mobile functions only decode in the build that encoded them.
fn write_seeds() {
    use graft::graph::EncodeOptions;
    let Some(dir) = std::env::var_os("GRAFT_FUZZ_SEEDS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("seed directory");
    let mut n = 0;
    let mut put = |which: u8, bytes: Vec<u8>| {
        let mut seed = vec![which];
        seed.extend(bytes);
        std::fs::write(dir.join(format!("seed-{n:03}")), seed).expect("seed file");
        n += 1;
    };
    macro_rules! forms {
        ($which:expr, $v:expr) => {{
            let v = &$v;
            put($which, graph::encode(v));
            put($which, graph::encode_with(v, &EncodeOptions::default().compress_above(0)));
            put($which, graph::to_text(v).into_bytes());
        }};
    }
    let shared = Arc::new(Tree::Leaf(7));
    let tree = Tree::Node {
        kids: vec![
            Tree::Shared(shared.clone()),
            Tree::Shared(shared.clone()),
            Tree::Back(Arc::downgrade(&shared)),
            Tree::Boxed(Box::new(Tree::Leaf(1))),
        ],
        label: "root".into(),
    };
    forms!(0, tree);
    let ring = Arc::new(Ring { value: 1, next: Cell::new(None) });
    let second = Arc::new(Ring { value: 2, next: Cell::new(Some(ring.clone())) });
    ring.next.set(Some(second));
    forms!(1, ring);
    free_ring(ring);
    let mixed = Mixed {
        map: HashMap::from([("a".to_string(), vec![Some(1), None, Some(-3)])]),
        tree: BTreeMap::from([(1, ('x', true, 0.5)), (2, ('\u{e9}', false, -1.0))]),
        units: vec![(), ()],
        f: MobileFn::new(3u64, |k, x| x * *k),
        once: MobileFnOnce::new("hi".to_string(), |s| s + "!"),
    };
    forms!(2, mixed);
    forms!(3, vec!["alpha".to_string(), String::new(), "\u{3bb}".to_string()]);
    forms!(4, (9u8, vec![1u64, u64::MAX], Some(Box::new(Tree::Leaf(3)))));
}

fuzz_target!(init: write_seeds(), |data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => both::<Tree>(rest, drop),
        1 => both::<Arc<Ring>>(rest, free_ring),
        2 => both::<Mixed>(rest, drop),
        3 => both::<Vec<String>>(rest, drop),
        _ => both::<(u8, Vec<u64>, Option<Box<Tree>>)>(rest, drop),
    }
});
