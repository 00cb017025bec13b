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

fuzz_target!(|data: &[u8]| {
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
