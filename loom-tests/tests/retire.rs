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
//! Heartbeats: a side retiring without `fin` still sends heartbeats after
//! its last frame (the tick thread's pings, the reader's pongs), written
//! as any frame (directly by their pusher, or by the I/O thread), until
//! `fin`. Checked too: the wire holds the user's frames, the last frame
//! and one shutdown as above, with heartbeats among them but never after
//! the shutdown, and never two writers at once, although a second
//! `finish` with `fin` shuts the socket down itself when it finds the
//! writer idle (retiring, it idles only with everything written).
//! Mutation test: a second `finish` that shuts down without looking at
//! the writer must fail it. (The first version of the change shut down
//! on a `finished` flag set when the writer last found nothing to write;
//! loom found a heartbeat handed to the I/O thread after that, written
//! after the shutdown. The flag is gone: an idle writer says the same.)
//!
//! A model of the protocol rather than the crate's code: graft-net has no
//! `sync` shim (its sockets and epoll cannot run under loom).
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::sync::{Arc, Mutex};
use loom::thread;

const LAST: u32 = 100;
const FIN: u32 = 999;
/// A heartbeat (the transport's own frame, key `u64::MAX`).
const HB: u32 = 500;

struct Outbox {
    buf: Vec<u32>,
    writer_idle: bool,
    armed: bool,
    /// `Some(fin)` once retiring.
    finishing: Option<bool>,
}

struct Conn {
    out: Mutex<Outbox>,
    interest: AtomicBool,
    wire: Mutex<Vec<u32>>,
    writing: AtomicBool,
    /// Planted bug: senders do not look at `finishing`.
    senders_ignore_finishing: bool,
    /// Planted bug: a second `finish` with `fin` shuts down without
    /// looking at the writer.
    shuts_regardless: bool,
}

impl Conn {
    /// An idle connection, with the planted bugs asked for.
    fn new(senders_ignore_finishing: bool, shuts_regardless: bool) -> Conn {
        Conn {
            out: Mutex::new(Outbox {
                buf: Vec::new(),
                writer_idle: true,
                armed: false,
                finishing: None,
            }),
            interest: AtomicBool::new(false),
            wire: Mutex::new(Vec::new()),
            writing: AtomicBool::new(false),
            senders_ignore_finishing,
            shuts_regardless,
        }
    }

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

    /// `push` + `write_or_wake`; `false`: refused (retiring; a heartbeat,
    /// the real code's key `u64::MAX`, only once retiring with `fin`).
    fn send(&self, v: u32, direct: bool) -> bool {
        let mut o = self.out.lock().unwrap();
        let refused = if v == HB {
            o.finishing == Some(true)
        } else {
            o.finishing.is_some() && !self.senders_ignore_finishing
        };
        if refused {
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
            if o.writer_idle || self.shuts_regardless {
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
                    if o.finishing == Some(true) {
                        self.sock_write(&[FIN]);
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

/// The I/O thread: turns until `done` and no event is left.
fn io_thread(c: &Arc<Conn>, done: &Arc<AtomicBool>) -> thread::JoinHandle<()> {
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
}

/// Runs the model: a sender of three frames (direct writes as given), a
/// retirer (`first` fin, then, if `then_fin`, a second call with fin).
fn run(direct: [bool; 3], first: bool, then_fin: bool, bug: bool) {
    loom::model(move || {
        let c = Arc::new(Conn::new(bug, false));
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
        let io = io_thread(&c, &done);
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

/// Runs the heartbeat model: one user frame, a retirement without `fin`
/// then with it, and a heartbeat pushed (`direct` as given) at any point.
fn run_heartbeat(direct: bool, bug: bool) {
    loom::model(move || {
        let c = Arc::new(Conn::new(false, bug));
        assert!(c.send(0, false));
        let done = Arc::new(AtomicBool::new(false));
        let r = {
            let (c, done) = (c.clone(), done.clone());
            thread::spawn(move || {
                assert!(c.finish(Some(LAST), false));
                assert!(c.finish(None, true));
                done.store(true, SeqCst);
            })
        };
        let h = {
            let c = c.clone();
            thread::spawn(move || c.send(HB, direct))
        };
        let io = io_thread(&c, &done);
        r.join().unwrap();
        let beat = h.join().unwrap();
        io.join().unwrap();
        let wire = c.wire.lock().unwrap().clone();
        let user: Vec<u32> = wire.iter().copied().filter(|v| *v != HB).collect();
        assert_eq!(
            user,
            vec![0, LAST, FIN],
            "the frames, the last, one shutdown"
        );
        assert_eq!(wire.last(), Some(&FIN), "nothing after the shutdown");
        // An accepted heartbeat is written (before the shutdown).
        assert_eq!(wire.contains(&HB), beat, "{wire:?}");
    });
}

#[test]
fn heartbeats_after_the_last_frame_until_fin_direct() {
    run_heartbeat(true, false);
}

#[test]
fn heartbeats_after_the_last_frame_until_fin_by_the_io_thread() {
    run_heartbeat(false, false);
}

/// Mutation test: a second `finish` that shuts down without looking at
/// the writer does so under a frame the writer is writing.
#[test]
#[should_panic]
fn the_model_catches_a_shutdown_under_the_writer() {
    run_heartbeat(false, true);
}
