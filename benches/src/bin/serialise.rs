//! Bench `serialise`: graft's graph serialiser on flat data, words, a DAG
//! with sharing and a one-million-node cycle (issue 3 lists the workloads and
//! what bincode, rkyv and Erlang do on them).
//!
//! Each figure is the median of several runs; MB = 10^6 encoded bytes.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use graft::graph::{self, Cell};
use graft::Mobile;
use graft_benches::report;

const RUNS: usize = 7;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median time of `f` over the runs; each run's result is dropped outside
/// the timed region.
fn time<R>(mut f: impl FnMut() -> R, mut after: impl FnMut(R)) -> Duration {
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        let r = black_box(f());
        times.push(t.elapsed());
        after(r);
    }
    median(times)
}

fn mb_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// Reports `metric` as the rate of the workloads' 1 M nodes in `d`.
fn report_mnodes(metric: &str, d: Duration) {
    report(
        "serialise",
        metric,
        "Mnodes/s",
        NODES as f64 / 1e6 / d.as_secs_f64(),
    );
}

/// Checks that `v` round-trips, then reports the encode and decode rates as
/// `{name}_encode_mb_s` and `{name}_decode_mb_s`.
fn throughput<T: Mobile + PartialEq + std::fmt::Debug>(name: &str, v: &T) {
    let bytes = graph::encode(v);
    assert_eq!(&graph::decode::<T>(&bytes).unwrap(), v);
    let enc = time(|| graph::encode(v), drop);
    let dec = time(|| graph::decode::<T>(&bytes).unwrap(), drop);
    for (pass, d) in [("encode", enc), ("decode", dec)] {
        report(
            "serialise",
            &format!("{name}_{pass}_mb_s"),
            "MB/s",
            mb_s(bytes.len(), d),
        );
    }
}

fn flat() {
    let mut rng = Rng(0x1234_5678);
    let v: Vec<u64> = (0..1_000_000).map(|_| rng.next()).collect();
    throughput("flat", &v);
}

fn words() {
    let mut rng = Rng(0x9e37_79b9);
    let v: Vec<String> = (0..100_000)
        .map(|_| {
            let n = 5 + (rng.next() % 8) as usize;
            (0..n)
                .map(|_| (b'a' + (rng.next() % 26) as u8) as char)
                .collect()
        })
        .collect();
    throughput("words", &v);
}

#[derive(Mobile)]
struct Node {
    value: u64,
    children: Vec<Arc<Node>>,
}

const NODES: usize = 1_000_000;

/// The DAG: node i ≥ 1 has children [nodes[i/100], nodes[i/1000]].
fn build_dag() -> Vec<Arc<Node>> {
    let mut nodes: Vec<Arc<Node>> = Vec::with_capacity(NODES);
    for i in 0..NODES {
        let children = if i == 0 {
            vec![]
        } else {
            vec![nodes[i / 100].clone(), nodes[i / 1000].clone()]
        };
        nodes.push(Arc::new(Node {
            value: i as u64,
            children,
        }));
    }
    nodes
}

fn dag() {
    let nodes = build_dag();
    let bytes = graph::encode(&nodes);
    let heap = {
        let before = allocated_bytes();
        let back: Vec<Arc<Node>> = graph::decode(&bytes).unwrap();
        let heap = allocated_bytes().saturating_sub(before);
        assert_eq!(back.len(), NODES);
        for (i, n) in back.iter().enumerate().skip(1) {
            assert_eq!(n.value, i as u64);
            assert!(Arc::ptr_eq(&n.children[0], &back[i / 100]));
            assert!(Arc::ptr_eq(&n.children[1], &back[i / 1000]));
        }
        heap
    };
    let enc = time(|| graph::encode(&nodes), drop);
    let dec = time(|| graph::decode::<Vec<Arc<Node>>>(&bytes).unwrap(), drop);
    // Reference, not a serialiser figure: the same DAG built directly
    // (`Arc::new`, `vec!`), timed like the decode, so a ceiling for it.
    // Dropping a graph this big lets glibc trim the freed heap back to the
    // OS (nothing allocated later pins it), so every run, built or decoded,
    // page-faults its memory (`dag_heap_mb`) afresh; `dag_warm` measures
    // the runs with the heap kept instead.
    let build = time(build_dag, drop);
    report_mnodes("dag_encode_mnodes_s", enc);
    report_mnodes("dag_decode_mnodes_s", dec);
    report_mnodes("dag_build_mnodes_s", build);
    report(
        "serialise",
        "dag_bytes_per_node",
        "bytes",
        bytes.len() as f64 / NODES as f64,
    );
    fault_reference(heap);
}

#[derive(Mobile)]
struct Ring {
    value: u64,
    next: Cell<Option<Arc<Ring>>>,
}

/// Breaks the cycle and frees the ring iteratively.
fn free_ring(r: Arc<Ring>) {
    let mut next = r.next.replace(None);
    drop(r);
    while let Some(n) = next {
        next = n.next.replace(None);
    }
}

fn cyclic() {
    let first = Arc::new(Ring {
        value: 0,
        next: Cell::new(None),
    });
    let mut prev = first.clone();
    for i in 1..NODES as u64 {
        let node = Arc::new(Ring {
            value: i,
            next: Cell::new(None),
        });
        prev.next.set(Some(node.clone()));
        prev = node;
    }
    prev.next.set(Some(first.clone()));
    drop(prev);
    let bytes = graph::encode(&first);
    {
        let back: Arc<Ring> = graph::decode(&bytes).unwrap();
        let mut cur = back.clone();
        for i in 0..NODES as u64 {
            assert_eq!(cur.value, i);
            let n = cur.next.get().unwrap();
            cur = n;
        }
        assert!(Arc::ptr_eq(&cur, &back));
        drop(cur);
        free_ring(back);
    }
    let enc = time(|| graph::encode(&first), drop);
    let dec = time(|| graph::decode::<Arc<Ring>>(&bytes).unwrap(), free_ring);
    report_mnodes("cyclic_encode_mnodes_s", enc);
    report_mnodes("cyclic_decode_mnodes_s", dec);
    free_ring(first);
}

fn main() {
    // Optional filter: `serialise dag` runs only the DAG figures.
    let only = std::env::args().nth(1);
    let run = |name: &str| match only.as_deref() {
        None => true,
        Some(o) => o == name,
    };
    if run("flat") {
        flat();
    }
    if run("words") {
        words();
    }
    if run("dag") {
        dag();
    }
    if run("cyclic") {
        cyclic();
    }
    // Last: it changes the allocator's setting for the rest of the run.
    if run("dag") {
        dag_warm();
    }
}

/// Bytes the global allocator hands out (heap and mmapped), from glibc.
fn allocated_bytes() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let m = unsafe { libc::mallinfo2() };
    m.uordblks + m.hblkhd
}

/// Reference, not a serialiser figure: how much memory a decoded DAG takes
/// from the allocator (`dag_heap_mb`), and how long the kernel takes to
/// hand that much fresh memory to this process in 4 KiB pages
/// (`dag_heap_fault_ms`: an anonymous mapping of that size, one write per
/// page). Every cold run, built or decoded, pays at least that; at 20 M
/// nodes/s the whole decode has 50 ms.
fn fault_reference(heap: usize) {
    let page = 4096;
    let len = heap.div_ceil(page) * page;
    let fault = time(
        || {
            // SAFETY: a fresh private anonymous mapping, written only inside
            // its bounds and unmapped below, after the timed region.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED, "mmap of {len} bytes");
                let p = p.cast::<u8>();
                for off in (0..len).step_by(page) {
                    p.add(off).write_volatile(1);
                }
                p
            }
        },
        // SAFETY: the mapping made above, `len` bytes, no longer used.
        |p| unsafe {
            libc::munmap(p.cast(), len);
        },
    );
    report("serialise", "dag_heap_mb", "MB", heap as f64 / 1e6);
    report(
        "serialise",
        "dag_heap_fault_ms",
        "ms",
        fault.as_secs_f64() * 1e3,
    );
}

/// The DAG decode in steady state, as a long-running node sees it: the
/// heap freed by one graph is kept for the next (glibc's trim threshold
/// raised for this process; by default dropping a graph this big hands the
/// memory back to the OS and every run page-faults it afresh). Reported
/// beside the cold figures above, not instead of them, as Erlang's anchors
/// report `spawn` and `spawn_warm`.
fn dag_warm() {
    // SAFETY: mallopt only changes a glibc tuning parameter.
    if unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) } != 1 {
        return; // not glibc, or refused: no warm figure
    }
    let nodes = build_dag();
    let bytes = graph::encode(&nodes);
    drop(nodes);
    let dec = time(|| graph::decode::<Vec<Arc<Node>>>(&bytes).unwrap(), drop);
    let build = time(build_dag, drop);
    report_mnodes("dag_decode_warm_mnodes_s", dec);
    report_mnodes("dag_build_warm_mnodes_s", build);
}
