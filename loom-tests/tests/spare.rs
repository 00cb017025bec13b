//! Loom model of the spare-worker hand-off (`sched/spare.rs`): the system
//! monitor activates a spare for a stuck worker and later asks it to
//! retire, while the spare serves, hands its queue back and parks. Checked:
//! no activation or retirement is lost (no deadlock), every process the
//! spare queued while serving reaches the shared queue before it parks, and
//! `stop` always ends the spare thread.
#![cfg(loom)]

use graft::__loom::{Parker, Spare};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

struct World {
    spare: Spare,
    /// The spare's parker in the idle protocol (`Idle::park(j)`), which
    /// `ask_retire` is followed by a wake of (`Idle::notify_worker`).
    idle: Parker,
    /// The spare's own queue.
    local: Mutex<Vec<u32>>,
    /// The injector.
    shared: Mutex<Vec<u32>>,
    /// Activations the spare has begun to serve.
    served: AtomicUsize,
}

/// The spare thread's loop (`WorkerCtx::run_spare`), reduced to the
/// protocol: each time it serves, it queues one process of its own.
fn spare_thread(w: &World) {
    while let Some(i) = w.spare.wait_active() {
        assert_eq!(i, 0);
        let n = w.served.fetch_add(1, Ordering::SeqCst) as u32;
        w.local.lock().unwrap().push(n);
        while w.spare.serves(i) {
            w.idle.park();
        }
        // hand_back
        let mut mine = std::mem::take(&mut *w.local.lock().unwrap());
        w.shared.lock().unwrap().append(&mut mine);
        w.spare.retired();
    }
}

/// The monitor: a stuck worker, then it yields (`ask_retire` + wake).
/// After an activation it waits until the spare serves it: a lost
/// activation would hang here (loom reports it).
fn episode(w: &World, activated: usize) -> bool {
    if !w.spare.activate(0) {
        return false;
    }
    while w.served.load(Ordering::SeqCst) < activated + 1 {
        thread::yield_now();
    }
    if w.spare.ask_retire(0) {
        w.idle.unpark();
    }
    true
}

fn model(episodes: usize) {
    loom::model(move || {
        let w = Arc::new(World {
            spare: Spare::new(),
            idle: Parker::default(),
            local: Mutex::new(Vec::new()),
            shared: Mutex::new(Vec::new()),
            served: AtomicUsize::new(0),
        });
        let s = {
            let w = w.clone();
            thread::spawn(move || spare_thread(&w))
        };
        let mut activated = 0;
        for _ in 0..episodes {
            if episode(&w, activated) {
                activated += 1;
            }
        }
        assert!(
            activated >= 1,
            "the first activation finds the spare retired"
        );
        // Node stop.
        w.spare.stop();
        w.idle.unpark();
        s.join().unwrap();
        assert!(w.local.lock().unwrap().is_empty(), "a queue left behind");
        let shared = w.shared.lock().unwrap();
        assert_eq!(
            shared.len(),
            activated,
            "every activation was served and handed back"
        );
    });
}

#[test]
fn one_episode() {
    model(1);
}

#[test]
fn two_episodes() {
    model(2);
}
