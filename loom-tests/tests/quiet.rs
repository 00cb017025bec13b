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

/// The overlay's nap (`nap_unless`): a poke while the thread goes to nap,
/// or naps, ends the nap (no lost poke), though it is signalled apart from
/// plain naps (`Quiet::poke` wakes only these). With the flag set before
/// the poke took the lock, as it was, loom finds an execution in which the
/// napper reads the flag unset after the poke's wake-up and naps on.
#[test]
fn a_poke_after_the_flag_ends_the_nap() {
    loom::model(|| {
        let q = Arc::new(Quiet::new(1));
        let flag = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let p = {
            let (q, flag) = (q.clone(), flag.clone());
            thread::spawn(move || q.poke(&flag))
        };
        // loom has no time: the nap ends only through the flag and poke.
        assert!(q.nap_unless(std::time::Duration::from_secs(3600), &flag));
        p.join().unwrap();
    });
}

/// The node's stop ends both kinds of nap, each on its own condvar: a
/// plain one and one that only a poke would otherwise end.
#[test]
fn stop_ends_both_naps() {
    loom::model(|| {
        let q = Arc::new(Quiet::new(1));
        let hour = std::time::Duration::from_secs(3600);
        let plain = {
            let q = q.clone();
            thread::spawn(move || q.nap(hour))
        };
        let s = {
            let q = q.clone();
            thread::spawn(move || q.stop())
        };
        let flag = loom::sync::atomic::AtomicBool::new(false);
        assert!(!q.nap_unless(hour, &flag));
        assert!(!plain.join().unwrap());
        s.join().unwrap();
    });
}
