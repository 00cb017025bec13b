//! Sharing and cycles survive the trip; deep graphs do not overflow.

use std::sync::{Arc, Weak};

use graft::graph::{self, Cell};
use graft::Mobile;

#[derive(Mobile, Debug, PartialEq)]
struct Node {
    value: u64,
    children: Vec<Arc<Node>>,
}

#[test]
fn dag_sharing_kept() {
    let leaf = Arc::new(Node {
        value: 1,
        children: vec![],
    });
    let mid = Arc::new(Node {
        value: 2,
        children: vec![leaf.clone(), leaf.clone()],
    });
    let root = vec![mid.clone(), leaf.clone(), mid];
    for back in [
        graph::decode::<Vec<Arc<Node>>>(&graph::encode(&root)).unwrap(),
        graph::from_text::<Vec<Arc<Node>>>(&graph::to_text(&root)).unwrap(),
    ] {
        assert_eq!(back, root);
        assert!(Arc::ptr_eq(&back[0], &back[2]));
        assert!(Arc::ptr_eq(&back[0].children[0], &back[1]));
        assert!(Arc::ptr_eq(&back[0].children[1], &back[1]));
        assert_eq!(Arc::strong_count(&back[1]), 3);
    }
}

#[test]
fn unshared_arcs_stay_unshared() {
    let a = vec![Arc::new(1u8), Arc::new(1u8)];
    let back: Vec<Arc<u8>> = graph::decode(&graph::encode(&a)).unwrap();
    assert!(!Arc::ptr_eq(&back[0], &back[1]));
}

#[derive(Mobile)]
struct Tree {
    name: String,
    parent: Weak<Tree>,
    kids: Cell<Vec<Arc<Tree>>>,
}

#[test]
fn weak_parent_cycle() {
    let root = Arc::new_cyclic(|me: &Weak<Tree>| Tree {
        name: "root".into(),
        parent: Weak::new(),
        kids: Cell::new(vec![Arc::new(Tree {
            name: "kid".into(),
            parent: me.clone(),
            kids: Cell::default(),
        })]),
    });
    for back in [
        graph::decode::<Arc<Tree>>(&graph::encode(&root)).unwrap(),
        graph::from_text::<Arc<Tree>>(&graph::to_text(&root)).unwrap(),
    ] {
        assert_eq!(back.name, "root");
        assert!(back.parent.upgrade().is_none());
        let kids = back.kids.get();
        assert_eq!(kids[0].name, "kid");
        assert!(Arc::ptr_eq(&kids[0].parent.upgrade().unwrap(), &back));
    }
}

#[test]
fn dead_weak_stays_dead() {
    let w: Weak<u8> = {
        let a = Arc::new(3u8);
        Arc::downgrade(&a)
    };
    let back: Weak<u8> = graph::decode(&graph::encode(&w)).unwrap();
    assert!(back.upgrade().is_none());
}

#[derive(Mobile)]
struct Ring {
    value: u64,
    next: Cell<Option<Arc<Ring>>>,
}

fn ring(n: u64) -> Arc<Ring> {
    let first = Arc::new(Ring {
        value: 0,
        next: Cell::new(None),
    });
    let mut prev = first.clone();
    for i in 1..n {
        let node = Arc::new(Ring {
            value: i,
            next: Cell::new(None),
        });
        prev.next.set(Some(node.clone()));
        prev = node;
    }
    prev.next.set(Some(first.clone()));
    first
}

/// Breaks the cycle and frees the ring without deep recursion.
fn free_ring(r: Arc<Ring>) {
    let mut next = r.next.replace(None);
    drop(r);
    while let Some(n) = next {
        next = n.next.replace(None);
    }
}

#[test]
fn strong_cycle_through_cell() {
    let r = ring(5);
    for back in [
        graph::decode::<Arc<Ring>>(&graph::encode(&r)).unwrap(),
        graph::from_text::<Arc<Ring>>(&graph::to_text(&r)).unwrap(),
    ] {
        let mut cur = back.clone();
        for i in 0..5 {
            assert_eq!(cur.value, i);
            let n = cur.next.get().unwrap();
            cur = n;
        }
        assert!(Arc::ptr_eq(&cur, &back));
        free_ring(back);
    }
    free_ring(r);
}

#[test]
fn self_loop() {
    let r = ring(1);
    let back: Arc<Ring> = graph::decode(&graph::encode(&r)).unwrap();
    assert!(Arc::ptr_eq(&back.next.get().unwrap(), &back));
    free_ring(back);
    free_ring(r);
}

#[test]
fn sharing_across_mobile_fn_env() {
    let shared = Arc::new(5u64);
    let f = graph::MobileFn::new(shared.clone(), |s: &Arc<u64>, x: u64| **s + x);
    let msg = (shared, f);
    let (s, f): (Arc<u64>, graph::MobileFn<u64, u64>) =
        graph::decode(&graph::encode(&msg)).unwrap();
    assert_eq!(f.call(1), 6);
    assert_eq!(Arc::strong_count(&s), 2);
}

#[derive(Mobile)]
enum BoxList {
    Cons(u64, Box<BoxList>),
    Nil,
}

#[derive(Mobile)]
struct ArcList {
    value: u64,
    next: Option<Arc<ArcList>>,
}

const DEEP: u64 = 1_000_000;

#[test]
fn million_box_list() {
    let mut l = BoxList::Nil;
    for i in 0..DEEP {
        l = BoxList::Cons(i, Box::new(l));
    }
    let bytes = graph::encode(&l);
    let back: BoxList = graph::decode(&bytes).unwrap();
    // Walk and free iteratively (the default Drop would recurse).
    let mut n = 0;
    let mut expect = DEEP;
    for mut cur in [l, back] {
        while let BoxList::Cons(v, next) = cur {
            assert_eq!(v, expect - 1);
            expect -= 1;
            n += 1;
            cur = *next;
        }
        expect = DEEP;
    }
    assert_eq!(n, 2 * DEEP);
}

#[test]
fn million_arc_list() {
    let mut l: Option<Arc<ArcList>> = None;
    for i in 0..DEEP {
        l = Some(Arc::new(ArcList { value: i, next: l }));
    }
    let bytes = graph::encode(&l);
    let back: Option<Arc<ArcList>> = graph::decode(&bytes).unwrap();
    let mut n = 0;
    for mut cur in [l, back] {
        let mut expect = DEEP;
        while let Some(node) = cur {
            assert_eq!(node.value, expect - 1);
            expect -= 1;
            n += 1;
            cur = match Arc::try_unwrap(node) {
                Ok(inner) => inner.next,
                Err(_) => panic!("list node shared"),
            };
        }
    }
    assert_eq!(n, 2 * DEEP);
}

static DROPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts its drops.
#[derive(Debug)]
struct Tracked;

impl Drop for Tracked {
    fn drop(&mut self) {
        DROPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Mobile for Tracked {
    fn describe(d: &mut graph::Describer) {
        d.write("Tracked");
    }
    fn encode<F: graph::Format>(&self, _e: &mut graph::Encoder<'_, F>) {}
    fn decode<S: graph::Source>(
        _d: &mut graph::Decoder<'_, S>,
    ) -> Result<Self, graph::DecodeError> {
        Ok(Tracked)
    }
}

#[derive(Mobile)]
struct TrackedRing {
    t: Tracked,
    next: Cell<Option<Arc<TrackedRing>>>,
}

#[test]
fn failed_decode_frees_its_cycles() {
    // Found by cargo fuzz: a cycle closed through a cell, then an error.
    let r = Arc::new(TrackedRing {
        t: Tracked,
        next: Cell::new(None),
    });
    r.next.set(Some(r.clone()));
    let mut bytes = graph::encode(&r);
    r.next.set(None);
    drop(r);
    bytes.push(0); // trailing byte: decoding fails after the cycle is built
    let before = DROPS.load(std::sync::atomic::Ordering::SeqCst);
    assert!(matches!(
        graph::decode::<Arc<TrackedRing>>(&bytes),
        Err(graph::DecodeError::TrailingBytes(1))
    ));
    assert_eq!(DROPS.load(std::sync::atomic::Ordering::SeqCst), before + 1);
}
