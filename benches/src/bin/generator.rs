//! bench `generator`: sum the values of a complete binary tree of depth 25,
//! once by a plain recursive traversal (`ms_iterator`) and once through a
//! `Generator` that yields every value (`ms_generator`); `ratio` is the
//! second over the first (best of three runs each). The shape follows the
//! OCaml 5 effect-handlers generator benchmark (9.30x there).

use graft::{Generator, Yielder};
use std::hint::black_box;
use std::time::Instant;

const DEPTH: u32 = 25;
const RUNS: usize = 3;

enum Tree {
    Leaf,
    Node(Box<Tree>, u64, Box<Tree>),
}

fn build(depth: u32, next: &mut u64) -> Tree {
    if depth == 0 {
        return Tree::Leaf;
    }
    let l = build(depth - 1, next);
    *next += 1;
    let v = *next;
    let r = build(depth - 1, next);
    Tree::Node(Box::new(l), v, Box::new(r))
}

/// The plain recursive iterator: calls `f` on every value, in order.
fn iter(t: &Tree, f: &mut impl FnMut(u64)) {
    if let Tree::Node(l, v, r) = t {
        iter(l, f);
        f(*v);
        iter(r, f);
    }
}

/// The same traversal, yielding every value.
fn walk(t: &Tree, y: Yielder<'_, u64>) {
    if let Tree::Node(l, v, r) = t {
        walk(l, y);
        y.yield_(*v);
        walk(r, y);
    }
}

fn best_ms(mut f: impl FnMut() -> u64, expect: u64) -> f64 {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let sum = black_box(f());
            let ms = start.elapsed().as_secs_f64() * 1e3;
            assert_eq!(sum, expect);
            ms
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let tree: &'static Tree = Box::leak(Box::new(build(DEPTH, &mut 0)));
    let n = (1u64 << DEPTH) - 1;
    let expect = n * (n + 1) / 2;
    let ms_iterator = best_ms(
        || {
            let mut sum = 0u64;
            iter(black_box(tree), &mut |v| sum += v);
            sum
        },
        expect,
    );
    let ms_generator = best_ms(
        || Generator::new(move |y| walk(black_box(tree), y)).sum(),
        expect,
    );
    graft_benches::report("generator", "ms_iterator", "ms", ms_iterator);
    graft_benches::report("generator", "ms_generator", "ms", ms_generator);
    graft_benches::report("generator", "ratio", "x", ms_generator / ms_iterator);
}
