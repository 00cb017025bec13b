//! Loom model of retiring a connection (graft-net, `conn.rs` "Retiring":
//! `Conn::finish`, `take_work`'s `Finished`, `write_pass`), on the poller's
//! write-side hand-over (`poller_wake.rs` models that alone).
//!
//! A sender queues frames while another thread retires the connection with
//! a last frame (the runtime's `IdleCloseOk`), with or without `fin`, and
//! in one case asks again with `fin` (both sides asked to close at once).
//! The I/O thread writes what it is handed, and once the outbox is empty
//! and the connection is retiring, shuts the write side down if asked and
//! stops.
//!
//! Checked, whatever the interleaving: the wire holds exactly the frames
//! whose send was accepted, in order, then the last frame, then (with
//! `fin`, asked first or later) one shutdown and nothing after; every send
//! after the retirement is refused; nothing stays queued.
//!
//! Mutation test: a `finish` that does not refuse later senders (they
//! only check `closed`, as before retiring existed) must fail it.
//!
//! A model of the protocol rather than the crate's code: graft-net has no
//! `sync` shim (its sockets and epoll cannot run under loom).
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::sync::{Arc, Mutex};
use loom::thread;

const LAST: u32 = 100;
const FIN: u32 = 999;

struct Outbox {
    buf: Vec<u32>,
    writer_idle: bool,
    armed: bool,
    /// `Some(fin)` once retiring.
    finishing: Option<bool>,
    /// Retiring, and everything was written.
    finished: bool,
}

struct Conn {
    out: Mutex<Outbox>,
    interest: AtomicBool,
    wire: Mutex<Vec<u32>>,
    writing: AtomicBool,
    /// Planted bug: senders do not look at `finishing`.
    senders_ignore_finishing: bool,
}

impl Conn {
    fn sock_write(&self, frames: &[u32]) {
        assert!(!self.writing.swap(true, SeqCst), "two writers at once");
        self.wire.lock().unwrap().extend_from_slice(frames);
        self.writing.store(false, SeqCst);
    }

    fn arm(&self, o: &mut Outbox, on: bool) {
        if o.armed != on {
            o.armed = on;
            self.interest.store(on, SeqCst);
        }
    }

    fn hand_over(&self, o: &mut Outbox) {
        o.writer_idle = false;
        self.arm(o, true);
    }

    /// `push` + `write_or_wake`; `false`: refused (retiring).
    fn send(&self, v: u32, direct: bool) -> bool {
        let mut o = self.out.lock().unwrap();
        if o.finishing.is_some() && !self.senders_ignore_finishing {
            return false;
        }
        let alone = o.buf.is_empty();
        o.buf.push(v);
        if !o.writer_idle {
            return true;
        }
        if direct && alone {
            let b = std::mem::take(&mut o.buf);
            self.sock_write(&b);
            return true;
        }
        self.hand_over(&mut o);
        true
    }

    /// `Conn::finish`.
    fn finish(&self, last: Option<u32>, fin: bool) -> bool {
        let mut o = self.out.lock().unwrap();
        if o.finishing == Some(true) {
            return false;
        }
        if o.finishing == Some(false) {
            if !fin {
                return false;
            }
            o.finishing = Some(true);
            if o.finished {
                self.sock_write(&[FIN]);
            }
            return true;
        }
        if let Some(l) = last {
            o.buf.push(l);
        }
        o.finishing = Some(fin);
        if o.writer_idle {
            self.hand_over(&mut o);
        }
        true
    }

    /// One turn of the I/O thread; whether there was an event.
    fn io_turn(&self) -> bool {
        if !self.interest.load(SeqCst) {
            return false;
        }
        loop {
            let batch = {
                let mut o = self.out.lock().unwrap();
                if o.writer_idle {
                    return true;
                }
                if o.buf.is_empty() {
                    if let Some(fin) = o.finishing {
                        o.finished = true;
                        if fin {
                            self.sock_write(&[FIN]);
                        }
                    }
                    o.writer_idle = true;
                    self.arm(&mut o, false);
                    return true;
                }
                std::mem::take(&mut o.buf)
            };
            self.sock_write(&batch);
        }
    }
}

/// Runs the model: a sender of three frames (direct writes as given), a
/// retirer (`first` fin, then, if `then_fin`, a second call with fin).
fn run(direct: [bool; 3], first: bool, then_fin: bool, bug: bool) {
    loom::model(move || {
        let c = Arc::new(Conn {
            out: Mutex::new(Outbox {
                buf: Vec::new(),
                writer_idle: true,
                armed: false,
                finishing: None,
                finished: false,
            }),
            interest: AtomicBool::new(false),
            wire: Mutex::new(Vec::new()),
            writing: AtomicBool::new(false),
            senders_ignore_finishing: bug,
        });
        let done = Arc::new(AtomicBool::new(false));
        let s = {
            let c = c.clone();
            thread::spawn(move || {
                let mut accepted = Vec::new();
                for (i, d) in direct.iter().enumerate() {
                    if c.send(i as u32, *d) {
                        accepted.push(i as u32);
                    }
                }
                accepted
            })
        };
        let r = {
            let (c, done) = (c.clone(), done.clone());
            thread::spawn(move || {
                assert!(c.finish(Some(LAST), first));
                if then_fin && !first {
                    assert!(c.finish(None, true));
                }
                done.store(true, SeqCst);
            })
        };
        let io = {
            let (c, done) = (c.clone(), done.clone());
            thread::spawn(move || loop {
                let d = done.load(SeqCst);
                if !c.io_turn() {
                    if d {
                        return;
                    }
                    thread::yield_now();
                }
            })
        };
        let accepted = s.join().unwrap();
        r.join().unwrap();
        io.join().unwrap();
        // What the I/O thread may not have been handed yet: a sender that
        // ignored the retirement queued behind the last frame.
        let left = c.out.lock().unwrap().buf.clone();
        let mut want = accepted.clone();
        want.push(LAST);
        if first || then_fin {
            want.push(FIN);
        }
        let wire = c.wire.lock().unwrap().clone();
        assert!(
            left.is_empty(),
            "frames queued after the last frame: {left:?}"
        );
        assert_eq!(wire, want, "accepted frames, the last frame, the shutdown");
    });
}

#[test]
fn a_retired_connection_ends_with_its_last_frame_sparse_fin() {
    run([true, true, true], true, false, false);
}

#[test]
fn a_retired_connection_ends_with_its_last_frame_dense_no_fin() {
    run([false, false, false], false, false, false);
}

#[test]
fn a_retirement_asked_again_with_fin_shuts_once() {
    run([true, false, true], false, true, false);
}

/// Mutation test: senders that ignore the retirement queue frames behind
/// the last one.
#[test]
#[should_panic]
fn the_model_catches_senders_that_ignore_the_retirement() {
    run([false, false, false], true, false, true);
}
