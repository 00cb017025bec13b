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
