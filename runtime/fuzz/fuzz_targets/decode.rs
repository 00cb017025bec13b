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

fn both<T: Mobile>(data: &[u8]) {
    // Values with cycles leak when dropped; forgetting keeps the fuzzer's
    // leak detector quiet about them.
    if let Ok(v) = graph::decode::<T>(data) {
        std::mem::forget(v);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(v) = graph::from_text::<T>(s) {
            std::mem::forget(v);
        }
    }
    let _ = graph::peek_descriptor(data);
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => both::<Tree>(rest),
        1 => both::<Arc<Ring>>(rest),
        2 => both::<Mixed>(rest),
        3 => both::<Vec<String>>(rest),
        _ => both::<(u8, Vec<u64>, Option<Box<Tree>>)>(rest),
    }
});
