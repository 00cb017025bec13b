//! Loom model of a busy connection's drain wake-ups (graft-net, `conn.rs`
//! "Busy": `busy_for`, `on_drain`, `take_work`, `still_writing`,
//! `wake_drained`), with the batch the writer holds counted as queued.
//!
//! A sender queues frames; before each it looks, under the outbox lock, at
//! the small lane (the FIFO plus the batch being written) and, past the
//! limit, registers a wake-up and waits for it. The writer (the poller's
//! I/O thread) takes the whole FIFO as one batch; the socket takes it a
//! byte at a time, and after each partial write the writer lowers the
//! count to what is left (`still_writing`) and runs the wake-ups that are
//! due; taking the next batch first zeroes the count and runs them too.
//! The writer parks when nothing is queued; a sender's push wakes it.
//!
//! Checked, whatever the interleaving:
//! - every frame reaches the wire, in order, and no waiter is left
//!   waiting (a lost wake-up deadlocks the model, which loom reports);
//! - an observer that takes the lock at any moment never finds a waiter
//!   registered while the small lane reports itself at or under the
//!   limit: what `queued_bytes` and the system monitor see agrees with who
//!   waits.
//!
//! Mutation test: a writer whose batch does not count (as before session
//! 25: the FIFO emptied into the batch, the count 0 while the socket had
//! not taken it) must fail the second check (`#[should_panic]`). A writer
//! that lowers the count after a partial write without running the
//! wake-ups fails it too (checked by hand, not kept as a test).
//!
//! A model of the protocol rather than the crate's code: graft-net has no
//! `sync` shim (its sockets and epoll cannot run under loom).
#![cfg(loom)]

use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

const LIMIT: usize = 1;
const FRAMES: u32 = 3;

struct Outbox {
    /// Queued frames (one byte each).
    buf: Vec<u32>,
    /// Bytes of the batch the writer holds and the socket has not taken.
    writing: usize,
    /// A registered wake-up (the one sender's).
    waiter: bool,
    woken: bool,
    done: bool,
    writer_idle: bool,
    /// Planted bug: the batch does not count.
    uncounted: bool,
}

impl Outbox {
    fn small(&self) -> usize {
        self.buf.len() + if self.uncounted { 0 } else { self.writing }
    }

    /// `wake_drained`: the wake-up runs once the small lane is at the limit.
    fn wake_drained(&mut self) -> bool {
        if self.waiter && self.small() <= LIMIT {
            self.waiter = false;
            self.woken = true;
            return true;
        }
        false
    }
}

struct Conn {
    out: Mutex<Outbox>,
    /// The sender's wake-up and the writer's hand-over.
    cv: Condvar,
    wire: Mutex<Vec<u32>>,
}

fn model(uncounted: bool) {
    loom::model(move || {
        let c = Arc::new(Conn {
            out: Mutex::new(Outbox {
                buf: Vec::new(),
                writing: 0,
                waiter: false,
                woken: false,
                done: false,
                writer_idle: true,
                uncounted,
            }),
            cv: Condvar::new(),
            wire: Mutex::new(Vec::new()),
        });
        let sender = {
            let c = c.clone();
            thread::spawn(move || {
                for f in 0..FRAMES {
                    let mut o = c.out.lock().unwrap();
                    if o.small() > LIMIT {
                        // `on_drain`, then suspended until woken.
                        o.waiter = true;
                        o.woken = false;
                        while !o.woken {
                            o = c.cv.wait(o).unwrap();
                        }
                    }
                    o.buf.push(f);
                    o.writer_idle = false;
                    drop(o);
                    c.cv.notify_all();
                }
                c.out.lock().unwrap().done = true;
                c.cv.notify_all();
            })
        };
        let observer = {
            let c = c.clone();
            thread::spawn(move || {
                let o = c.out.lock().unwrap();
                assert!(
                    !o.waiter || o.small() > LIMIT,
                    "a waiter waits while the queue reads {} (limit {LIMIT})",
                    o.small()
                );
            })
        };
        // The writer.
        loop {
            let mut batch = {
                let mut o = c.out.lock().unwrap();
                loop {
                    // `take_work`: the last batch is written.
                    o.writing = 0;
                    if o.wake_drained() {
                        c.cv.notify_all();
                    }
                    if !o.buf.is_empty() {
                        break;
                    }
                    if o.done {
                        drop(o);
                        sender.join().unwrap();
                        observer.join().unwrap();
                        assert_eq!(*c.wire.lock().unwrap(), (0..FRAMES).collect::<Vec<_>>());
                        assert!(!c.out.lock().unwrap().waiter, "a waiter left waiting");
                        return;
                    }
                    o.writer_idle = true;
                    o = c.cv.wait(o).unwrap();
                }
                let batch = std::mem::take(&mut o.buf);
                o.writing = batch.len();
                batch
            };
            // The socket takes a byte at a time; after each partial write
            // the rest is what counts (`still_writing`).
            while !batch.is_empty() {
                c.wire.lock().unwrap().push(batch.remove(0));
                if batch.is_empty() {
                    break; // all of it: the next `take_work` zeroes the count
                }
                let mut o = c.out.lock().unwrap();
                o.writing = batch.len();
                if o.wake_drained() {
                    c.cv.notify_all();
                }
            }
        }
    });
}

#[test]
fn a_waiter_waits_only_while_the_queue_is_over_the_limit() {
    model(false);
}

#[test]
#[should_panic(expected = "a waiter waits while the queue reads")]
fn mutation_an_uncounted_batch_hides_the_queue_from_its_waiter() {
    model(true);
}
