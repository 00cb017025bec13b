//! Loom model of the queue of outbound connects on the poller (graft-net,
//! `outbound.rs` "Protocol", `Inner::connect_then`, `io_loop`): a caller
//! queues a dial under the transport's `state` lock, only while `closed`
//! is unset, and wakes I/O thread 0; the I/O thread, each turn, reads
//! `closed` (stopping if set) and else takes the queue and answers what
//! it took; once stopped it takes the queue one last time and answers all
//! of it with `Shutdown`. Shutdown sets `closed` under the lock and wakes
//! the I/O thread.
//!
//! Checked, whatever the interleaving: every dial is answered exactly once
//! (a caller that finds the transport closed answers its own dial with
//! `Shutdown`, at once).
//!
//! The model is tested itself (mutation test): the planted
//! `Queue::CheckThenPush` reads `closed` under the lock but pushes after
//! releasing it, so a shutdown and the I/O thread's last take can fall in
//! between, and that dial is never answered; it must fail
//! (`#[should_panic]`).
//!
//! A model of the protocol rather than the crate's code: graft-net has no
//! `sync` shim (its sockets and epoll cannot run under loom).
#![cfg(loom)]

use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

#[derive(Clone, Copy, PartialEq)]
enum Queue {
    /// As the code: the push under the `state` lock.
    UnderState,
    /// Planted bug: the check under the lock, the push after it.
    CheckThenPush,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    Up,
    Shutdown,
}

#[derive(Default)]
struct Transport {
    /// `State::closed`.
    closed: Mutex<bool>,
    /// `Inner::dials`.
    dials: Mutex<Vec<u32>>,
    /// The poller's wake-up (`notify` / `wait`).
    woken: Mutex<bool>,
    wake: Condvar,
    /// Every answer given, by dial.
    answers: Mutex<Vec<(u32, Answer)>>,
}

impl Transport {
    fn notify(&self) {
        *self.woken.lock().unwrap() = true;
        self.wake.notify_one();
    }

    fn wait(&self) {
        let mut w = self.woken.lock().unwrap();
        while !*w {
            w = self.wake.wait(w).unwrap();
        }
        *w = false;
    }

    fn answer(&self, id: u32, a: Answer) {
        self.answers.lock().unwrap().push((id, a));
    }

    fn connect_then(&self, id: u32, how: Queue) {
        let st = self.closed.lock().unwrap();
        if *st {
            drop(st);
            return self.answer(id, Answer::Shutdown);
        }
        if how == Queue::CheckThenPush {
            drop(st);
            self.dials.lock().unwrap().push(id);
        } else {
            self.dials.lock().unwrap().push(id);
            drop(st);
        }
        self.notify();
    }

    fn shutdown(&self) {
        *self.closed.lock().unwrap() = true;
        self.notify();
    }

    /// I/O thread 0.
    fn io_loop(&self) {
        loop {
            self.wait();
            if *self.closed.lock().unwrap() {
                break;
            }
            let took = std::mem::take(&mut *self.dials.lock().unwrap());
            for id in took {
                self.answer(id, Answer::Up);
            }
        }
        for id in std::mem::take(&mut *self.dials.lock().unwrap()) {
            self.answer(id, Answer::Shutdown);
        }
    }
}

fn model(how: Queue) {
    loom::model(move || {
        let t = Arc::new(Transport::default());
        let io = {
            let t = t.clone();
            thread::spawn(move || t.io_loop())
        };
        let caller = {
            let t = t.clone();
            thread::spawn(move || {
                t.connect_then(1, how);
                t.connect_then(2, how);
            })
        };
        t.shutdown();
        caller.join().unwrap();
        io.join().unwrap();
        let mut ids: Vec<u32> = t.answers.lock().unwrap().iter().map(|a| a.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![1, 2], "every dial answered exactly once");
    });
}

#[test]
fn every_dial_is_answered_once_whatever_shutdown_does() {
    model(Queue::UnderState);
}

#[test]
#[should_panic(expected = "every dial answered exactly once")]
fn a_push_after_the_lock_loses_a_dial() {
    model(Queue::CheckThenPush);
}
