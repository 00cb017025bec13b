//! Generators: iteration, return values, panics reaching the consumer,
//! early drop (unwinds the body, reuses the stack), inside processes.

mod common;

use graft::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

enum Tree {
    Leaf(u64),
    Node(Box<Tree>, Box<Tree>),
}

fn build(depth: u32, next: &mut u64) -> Tree {
    if depth == 0 {
        *next += 1;
        Tree::Leaf(*next)
    } else {
        Tree::Node(
            Box::new(build(depth - 1, next)),
            Box::new(build(depth - 1, next)),
        )
    }
}

fn walk(t: &Tree, y: Yielder<'_, u64>) {
    match t {
        Tree::Leaf(v) => y.yield_(*v),
        Tree::Node(l, r) => {
            walk(l, y);
            walk(r, y);
        }
    }
}

/// Counts its drops.
struct Canary(Arc<AtomicUsize>);
impl Drop for Canary {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The address of a local on the current stack.
#[inline(never)]
fn stack_addr() -> usize {
    let x = 0u8;
    std::hint::black_box(&x) as *const u8 as usize
}

#[test]
fn tree_traversal_in_order() {
    let tree = build(10, &mut 0);
    let leaves: Vec<u64> = Generator::new(move |y| walk(&tree, y)).collect();
    assert_eq!(leaves, (1..=1024).collect::<Vec<_>>());
}

#[test]
fn return_value_after_iteration() {
    let mut g = Generator::new(|y| {
        y.yield_('a');
        y.yield_('b');
        42u32
    });
    assert_eq!(g.next(), Some('a'));
    assert_eq!(g.next(), Some('b'));
    assert_eq!(g.next(), None);
    assert_eq!(g.take_return(), Some(42));
    assert_eq!(g.next(), None, "fused");
}

#[test]
fn panic_in_the_body_reaches_the_consumer() {
    let mut g = Generator::new(|y| {
        y.yield_(1u8);
        panic!("generator body failed");
    });
    assert_eq!(g.next(), Some(1));
    let err = catch_unwind(AssertUnwindSafe(|| g.next())).unwrap_err();
    assert_eq!(err.downcast_ref::<&str>(), Some(&"generator body failed"));
    assert!(g.is_done());
    assert_eq!(g.next(), None);
}

#[test]
fn early_drop_unwinds_the_body_and_reuses_the_stack() {
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let (tx, rx) = channel::<usize>();
    let mut g = Generator::new(move |y| {
        let _canary = Canary(d);
        tx.send(stack_addr()).unwrap();
        for i in 0.. {
            y.yield_(i);
        }
    });
    assert_eq!(g.next(), Some(0));
    assert_eq!(g.next(), Some(1));
    let first = rx.recv().unwrap();
    drop(g);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the body's Drop ran");
    assert_eq!(
        rx.recv(),
        Err(RecvError),
        "the body's captures were dropped"
    );

    // The next generator on this thread gets the same stack back.
    let (tx, rx) = channel::<usize>();
    let mut g = Generator::new(move |y| {
        tx.send(stack_addr()).unwrap();
        y.yield_(());
    });
    g.next();
    let second = rx.recv().unwrap();
    // Same stack, maybe another frame depth; distinct stacks are >= 256 KiB apart.
    assert!(
        first.abs_diff(second) < 16 * 1024,
        "the stack was reused: {first:#x} vs {second:#x}"
    );
}

#[test]
fn drop_before_start_drops_the_body() {
    let drops = Arc::new(AtomicUsize::new(0));
    let c = Canary(drops.clone());
    let g: Generator<u8> = Generator::new(move |_y| {
        let _c = c;
    });
    drop(g);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn many_generators_reuse_stacks() {
    for round in 0..10_000u64 {
        let mut g = Generator::new(move |y| {
            y.yield_(round);
            y.yield_(round + 1);
        });
        assert_eq!(g.next(), Some(round));
    }
}

rt_test! {
    fn generators_inside_a_process() {
        let tree = build(8, &mut 0);
        let sum: u64 = Generator::new(move |y| walk(&tree, y)).sum();
        assert_eq!(sum, (1..=256).sum::<u64>());
        // Yield to the scheduler between values: the generator moves with us.
        let g = Generator::new(|y| {
            for i in 0..50u32 {
                y.yield_(i);
            }
        });
        let mut n = 0;
        for i in g {
            assert_eq!(i, n);
            n += 1;
            yield_now();
        }
        assert_eq!(n, 50);
    }

    fn generator_body_may_park_on_a_port() {
        let (tx, rx) = channel::<u32>();
        spawn(move || {
            for i in 0..20 {
                tx.send(i).unwrap();
                yield_now();
            }
        });
        let g = Generator::new(move |y| {
            for v in rx.iter() {
                y.yield_(v * 10);
            }
        });
        let got: Vec<u32> = g.collect();
        assert_eq!(got, (0..20).map(|i| i * 10).collect::<Vec<_>>());
    }

    fn killed_while_parked_inside_a_generator_body() {
        let drops = Arc::new(AtomicUsize::new(0));
        let d = drops.clone();
        let (tx, rx) = channel::<u32>();
        let child = spawn(move || {
            let g = Generator::new(move |y| {
                let _canary = Canary(d);
                for v in rx.iter() {
                    y.yield_(v);
                }
            });
            for _ in g {}
        });
        let r = monitor(child);
        common::until_parked(child);
        exit(child, ExitReason::Kill);
        let died: ProcessDied = expect();
        assert_eq!((died.monitor, died.reason), (r, ExitReason::Killed));
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the generator body unwound");
        assert!(tx.is_disconnected());
    }

    fn panic_in_a_generator_inside_a_process() {
        // Monitored from the start: with several workers the child may
        // die before a later `monitor` would reach it.
        let (_, r) = spawn_monitor(|| {
            let mut g = Generator::new(|y| {
                y.yield_(());
                panic!("gen boom");
            });
            g.next();
            g.next();
        });
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, r);
        assert_eq!(d.reason, ExitReason::Other("gen boom".into()));
    }
}
