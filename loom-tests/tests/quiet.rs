//! Loom model of `Quiet` (`sched/idle.rs`): a housekeeping thread that
//! waits while every worker sleeps is always woken when a worker wakes (no
//! lost wake-up), and by the node's stop.
#![cfg(loom)]

use graft::__loom::Quiet;
use loom::sync::Arc;
use loom::thread;

/// A worker parks and wakes while the housekeeper goes to wait: the wait
/// ends (loom reports a deadlock otherwise).
#[test]
fn a_waking_worker_ends_the_housekeeper_s_wait() {
    loom::model(|| {
        let q = Arc::new(Quiet::new(1));
        let w = {
            let q = q.clone();
            thread::spawn(move || {
                q.sleeping();
                q.woke();
            })
        };
        // Returns only once the worker is awake (at the start or after).
        let mut live = q.wait_awake(None);
        while live && !q.any_awake() {
            live = q.wait_awake(None);
        }
        assert!(live);
        w.join().unwrap();
    });
}

/// Every worker asleep: the node's stop ends the wait.
#[test]
fn stop_ends_the_wait() {
    loom::model(|| {
        let q = Arc::new(Quiet::new(1));
        q.sleeping();
        let s = {
            let q = q.clone();
            thread::spawn(move || q.stop())
        };
        assert!(!q.wait_awake(None));
        s.join().unwrap();
    });
}
