//! observer: the web observer's process list of a node with 100,000
//! processes (each parked in receive): ms to collect and render it as the
//! page's JSON (`ms_process_list`, median of 5), and the same for the
//! node's statistics (`ms_node_stats`).

use graft::*;
use graft_benches::report;
use std::time::Instant;

const N: usize = 100_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    env_logger::init();
    if let Err(e) = ensure_map_count(N + 1000) {
        eprintln!("observer: vm.max_map_count too low ({e})");
        std::process::exit(2);
    }
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node");
    let (tx, rx) = std::sync::mpsc::channel();
    node.spawn(move || {
        let pids: Vec<Pid> = (0..N)
            .map(|_| {
                spawn(|| {
                    expect::<()>();
                })
            })
            .collect();
        let _ = tx.send(pids);
        expect::<()>();
    })
    .expect("spawn");
    let pids = rx.recv().expect("pids");
    while node.process_count() < N {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut list = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let t = Instant::now();
        bytes = observer::render_process_list(&node);
        list.push(t.elapsed().as_secs_f64() * 1e3);
    }
    assert!(bytes > N * 100, "rendered {bytes} bytes");
    let mut stats = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let s = node.stats();
        assert!(s.processes as usize >= N);
        stats.push(t.elapsed().as_secs_f64() * 1e3);
    }
    report("observer", "ms_process_list", "ms", median(list));
    report("observer", "ms_node_stats", "ms", median(stats));
    for p in pids {
        node.send(p, ());
    }
    node.shutdown();
}
