//! Loom model of the idle-worker protocol (`sched/idle.rs`): a worker that
//! goes to sleep while work is being pushed is always woken or finds the
//! work (no lost wake-up), with one and with two workers; and the LIFO
//! slot's fairness rule (module `slot`, below). Bounded to run in well under
//! a minute (`preemption_bound` 3 where three threads race).
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

// The LIFO slot and its fairness rule (`sched.rs`, `sched/worker.rs`): a
// process woken while another waits in the waker's slot pushes that one to
// the back of the shared FIFO queue (the injector), and the monitor may take
// from the slot at any time. Every woken process runs exactly once, the
// displaced ones leave in the order they were woken, and once the owner's
// slot budget is spent it runs what waits in the queue before the slot.
mod slot {
    use super::*;
    use graft::__loom::Slot;
    use std::ptr::NonNull;

    /// Processes, named by number: the slot holds pointers into this.
    static PROCS: [u32; 4] = [0, 1, 2, 3];

    fn name(p: NonNull<u32>) -> u32 {
        // SAFETY: every pointer in the slot points into `PROCS`.
        unsafe { *p.as_ptr() }
    }

    fn ptr(i: usize) -> NonNull<u32> {
        NonNull::from(&PROCS[i])
    }

    struct Shared {
        slot: Slot<u32>,
        queue: Queue,
        idle: Idle,
        /// Every run, in order, by whoever ran it.
        ran: Mutex<Vec<u32>>,
        want: usize,
    }

    impl Shared {
        /// `Scheduler::wake_from` on the owner's worker.
        fn wake(&self, i: usize) {
            if let Some(old) = self.slot.put(ptr(i)) {
                self.queue.lock().unwrap().push_back(name(old));
                self.idle.notify_one();
            }
        }

        fn run(&self, p: u32) {
            let mut ran = self.ran.lock().unwrap();
            ran.push(p);
            if ran.len() >= self.want {
                drop(ran);
                self.idle.notify_all();
            }
        }

        fn done(&self) -> bool {
            self.ran.lock().unwrap().len() >= self.want
        }
    }

    /// A worker's loop reduced to the slot, the queue and the idle
    /// protocol; the owner (worker 0) starts with the budget spent.
    fn worker(i: usize, s: &Shared) {
        let mut budget = 0u32;
        loop {
            if s.done() {
                return;
            }
            if i == 0 {
                // `others_wait`: the budget only binds while work waits.
                if budget == 0 && s.queue.lock().unwrap().is_empty() {
                    budget = 1;
                }
                if budget > 0 {
                    if let Some(p) = s.slot.take() {
                        budget -= 1;
                        s.run(name(p));
                        continue;
                    }
                }
                budget = 1;
            }
            if let Some(p) = pop(&s.queue) {
                s.run(p);
                continue;
            }
            if i == 0 {
                if let Some(p) = s.slot.take() {
                    s.run(name(p));
                    continue;
                }
            }
            s.idle.register(i);
            let more = !s.queue.lock().unwrap().is_empty() || (i == 0 && s.slot.is_occupied());
            if more || s.done() {
                s.idle.unregister(i);
                continue;
            }
            s.idle.park(i);
            s.idle.unregister(i);
        }
    }

    /// The owner wakes 1 then 2 (2 pushes 1 to the queue) while the monitor
    /// may rescue the slot's occupant to the queue, and the owner may go to
    /// sleep meanwhile: 1 and 2 each run exactly once, the owner is woken
    /// for a rescued one, and nothing is left behind.
    #[test]
    fn woken_processes_run_once() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let s = Arc::new(Shared {
                slot: Slot::default(),
                queue: Arc::new(Mutex::new(VecDeque::new())),
                idle: Idle::new(1),
                ran: Mutex::new(Vec::new()),
                want: 2,
            });
            s.wake(1);
            let monitor = {
                let s = s.clone();
                thread::spawn(move || {
                    // `rescue_stuck`: the slot's occupant to the queue.
                    if let Some(p) = s.slot.take() {
                        s.queue.lock().unwrap().push_back(name(p));
                        s.idle.notify_one();
                    }
                })
            };
            s.wake(2);
            worker(0, &s);
            monitor.join().unwrap();
            let mut ran = s.ran.lock().unwrap().clone();
            ran.sort_unstable();
            assert_eq!(ran, vec![1, 2], "each woken process ran exactly once");
            assert!(s.slot.take().is_none() && s.queue.lock().unwrap().is_empty());
        });
    }

    /// With a second worker taking from the queue (and sleeping when it is
    /// empty), the owner wakes 1, 2, 3 (1 and 2 go to the queue): each runs
    /// exactly once and both workers stop.
    #[test]
    fn displaced_processes_run_once_with_a_second_worker() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let s = Arc::new(Shared {
                slot: Slot::default(),
                queue: Arc::new(Mutex::new(VecDeque::new())),
                idle: Idle::new(2),
                ran: Mutex::new(Vec::new()),
                want: 3,
            });
            let thief = {
                let s = s.clone();
                thread::spawn(move || worker(1, &s))
            };
            s.wake(1);
            s.wake(2);
            s.wake(3);
            worker(0, &s);
            thief.join().unwrap();
            let mut ran = s.ran.lock().unwrap().clone();
            ran.sort_unstable();
            assert_eq!(ran, vec![1, 2, 3], "each woken process ran exactly once");
        });
    }

    /// One worker wakes 1, 2, 3 with its budget spent: 1 and 2 wait in the
    /// queue in wake order and 3 in the slot. The queue's oldest runs first
    /// (the spent budget binds while work waits), then the slot (a fresh
    /// budget), then the next in the queue.
    #[test]
    fn a_spent_budget_runs_the_queue_before_the_slot() {
        loom::model(|| {
            let s = Shared {
                slot: Slot::default(),
                queue: Arc::new(Mutex::new(VecDeque::new())),
                idle: Idle::new(1),
                ran: Mutex::new(Vec::new()),
                want: 3,
            };
            s.wake(1);
            s.wake(2);
            s.wake(3);
            worker(0, &s);
            assert_eq!(*s.ran.lock().unwrap(), vec![1, 3, 2]);
        });
    }
}
