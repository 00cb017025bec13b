//! Shared helpers for the runtime's integration tests.
#![allow(dead_code, missing_docs, unreachable_pub)]

use graft::{process_info, yield_now, Node, NodeConfig, Pid, Status};
use std::time::{Duration, Instant};

/// Waits (yielding, inside a process) until `pid` is parked; fails after
/// 20 s.
pub fn until_parked(pid: Pid) {
    let start = Instant::now();
    while process_info(pid).map(|i| i.status) != Some(Status::Waiting) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{pid} never parked"
        );
        yield_now();
    }
}

/// A node on loopback with `workers` workers.
pub fn node(workers: usize) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(NodeConfig::new("127.0.0.1:0").workers(workers)).expect("node starts")
}

/// Runs each test body at 1 worker and at 4 workers (tokio's `rt_test!`).
#[macro_export]
macro_rules! rt_test {
    ($(fn $name:ident() $body:block)*) => {
        mod one_worker {
            #[allow(unused_imports)]
            use super::*;
            $( #[test] fn $name() { let node = $crate::common::node(1); node.run(move || $body).unwrap(); node.shutdown(); } )*
        }
        mod four_workers {
            #[allow(unused_imports)]
            use super::*;
            $( #[test] fn $name() { let node = $crate::common::node(4); node.run(move || $body).unwrap(); node.shutdown(); } )*
        }
    };
}

/// Polls `f` from outside the nodes until it holds; panics after 20 s.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The three-node tour the secure transports must pass: `a` and `c` join
/// through `b`; a remote spawn with an environment, a call, a monitor on a
/// process of `c` that fires with `NoConnection` when `c` stops, and the
/// rest of the mesh going on.
pub fn three_nodes_spawn_call_monitor_and_lose_one(a: Node, b: Node, c: Node) {
    use graft::*;
    a.connect(b.addr()).unwrap();
    c.connect(b.addr()).unwrap();
    eventually("a full mesh", || {
        a.nodes().len() == 2 && c.nodes().len() == 2
    });
    let (b_id, c_id) = (b.id(), c.id());

    // Remote spawn with a captured environment, and a call, to each.
    let got = a
        .run(move || {
            let me = self_pid();
            let label = String::from("sealed answer");
            spawn_on(b_id, (me, label), |(to, label)| {
                send(to, (label, this_node()))
            })
            .unwrap();
            let from_b = expect::<(String, NodeId)>();
            let sq = call_on(c_id, 12u64, |x| x * x).unwrap();
            (from_b, sq)
        })
        .unwrap();
    assert_eq!(got, (("sealed answer".to_string(), b_id), 144));

    // A monitor on a process of c fires with NoConnection when c goes.
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let r = a.run(move || {
            let p = spawn_on(c_id, (), |()| {
                expect::<u8>();
            })
            .unwrap();
            let m = monitor(p);
            tx.send(()).unwrap();
            receive()
                .when(move |d: &ProcessDied| d.monitor == m, |d| d.reason)
                .timeout(Duration::from_secs(20))
                .expect("the monitor fires")
        });
        (a, r)
    });
    rx.recv().unwrap();
    c.shutdown();
    let (a, r) = waiter.join().unwrap();
    assert_eq!(r.unwrap(), ExitReason::NoConnection);
    // The rest of the mesh goes on.
    let v = a.run(move || call_on(b_id, 7u32, |x| x + 1)).unwrap();
    assert_eq!(v.unwrap(), 8);
}

/// Joins `nodes` into one cluster as a binary tree (node `i` connects to
/// node `(i - 1) / 2`), trying a join again on a loaded machine where a
/// handshake timed out.
pub fn join_tree(nodes: &[Node]) {
    for i in 1..nodes.len() {
        let contact = nodes[(i - 1) / 2].addr();
        let mut tries = 0;
        while let Err(e) = nodes[i].connect(contact) {
            tries += 1;
            assert!(tries < 10, "cannot join: {e}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
