//! Shared helpers for graft-otp's integration tests.
#![allow(dead_code, missing_docs, unreachable_pub)]

use graft::{receive, sleep, ExitReason, MonitorRef, Node, NodeConfig, ProcessDied, Unknown};
use std::time::{Duration, Instant};

/// A hang guard for waits that should end quickly (never a speed assertion).
pub const HANG: Duration = Duration::from_secs(10);

/// A node on loopback with `workers` workers.
pub fn node(workers: usize) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(NodeConfig::new("127.0.0.1:0").workers(workers)).expect("node starts")
}

/// A node for the cluster tests: cookie `cookie`, 2 workers, 300 ms
/// heartbeats (node loss is seen within about a second).
pub fn cluster_node(cookie: &str) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .cookie(cookie)
            .workers(2)
            .heartbeat(Duration::from_millis(300)),
    )
    .expect("node")
}

/// Polls `f` from outside the nodes until it holds; panics after 30 s.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(30), "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A process that waits until it is sent `()`.
pub fn idle() -> graft::Pid {
    graft::spawn(|| {
        graft::expect::<()>();
    })
}

/// Polls `cond` (inside a process) until it holds; panics after [`HANG`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        sleep(Duration::from_millis(1));
    }
}

/// The reason in the `ProcessDied` of monitor `m`; panics after [`HANG`].
pub fn down_reason(m: MonitorRef) -> ExitReason {
    receive()
        .when(
            move |d: &ProcessDied| d.monitor == m,
            |d: ProcessDied| d.reason,
        )
        .timeout(HANG)
        .expect("the monitored process ends")
}

/// Whatever is in the caller's mailbox now (without waiting).
pub fn mailbox_now() -> Vec<Unknown> {
    let mut out = Vec::new();
    while let Some(u) = receive().any(|u: Unknown| u).timeout(Duration::ZERO) {
        out.push(u);
    }
    out
}

/// Runs each test body as a root process at 1 worker and at 4 workers.
#[macro_export]
macro_rules! otp_test {
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
