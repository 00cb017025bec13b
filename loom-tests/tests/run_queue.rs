//! Loom model of the idle-worker protocol (`sched/idle.rs`): a worker that
//! goes to sleep while work is being pushed is always woken or finds the
//! work (no lost wake-up), with one and with two workers.
#![cfg(loom)]

use graft::__loom::Idle;
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::collections::VecDeque;

type Queue = Arc<Mutex<VecDeque<u32>>>;

fn pop(q: &Queue) -> Option<u32> {
    q.lock().unwrap().pop_front()
}

/// The worker loop of `sched/worker.rs`, reduced to the protocol.
fn worker(i: usize, q: &Queue, idle: &Idle, want: usize, taken: &Mutex<usize>) {
    loop {
        if *taken.lock().unwrap() >= want {
            return;
        }
        if pop(q).is_some() {
            let mut t = taken.lock().unwrap();
            *t += 1;
            if *t >= want {
                // All work done: stop everyone (the scheduler's `stop`).
                drop(t);
                idle.notify_all();
            }
            continue;
        }
        idle.register(i);
        if !q.lock().unwrap().is_empty() || *taken.lock().unwrap() >= want {
            idle.unregister(i);
            continue;
        }
        idle.park(i);
        idle.unregister(i);
    }
}

#[test]
fn one_worker_one_producer() {
    loom::model(|| {
        let q: Queue = Arc::new(Mutex::new(VecDeque::new()));
        let idle = Arc::new(Idle::new(1));
        let taken = Arc::new(Mutex::new(0));
        let p = {
            let (q, idle) = (q.clone(), idle.clone());
            thread::spawn(move || {
                q.lock().unwrap().push_back(1);
                idle.notify_one();
            })
        };
        worker(0, &q, &idle, 1, &taken);
        p.join().unwrap();
        assert_eq!(*taken.lock().unwrap(), 1);
    });
}

#[test]
fn two_workers_one_item_then_stop() {
    loom::model(|| {
        let q: Queue = Arc::new(Mutex::new(VecDeque::new()));
        let idle = Arc::new(Idle::new(2));
        let taken = Arc::new(Mutex::new(0));
        let w1 = {
            let (q, idle, taken) = (q.clone(), idle.clone(), taken.clone());
            thread::spawn(move || worker(1, &q, &idle, 1, &taken))
        };
        q.lock().unwrap().push_back(7);
        idle.notify_one();
        worker(0, &q, &idle, 1, &taken);
        w1.join().unwrap();
        assert_eq!(*taken.lock().unwrap(), 1);
    });
}
