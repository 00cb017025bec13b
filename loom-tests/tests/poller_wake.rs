//! Loom model of the poller transport's write-side hand-over (graft-net,
//! `io.rs` "Who writes", `conn.rs` `hand_over`/`arm`/`write_pass`):
//! senders append under the outbox lock and, finding the write side theirs
//! (`writer_idle`), either write directly or hand it over by arming
//! writable interest; the I/O thread, woken by an armed interest, writes
//! batches and, under the same lock, parks the write side and disarms.
//!
//! Two pieces of state are kept apart, as in the code: the outbox's mirror
//! of the interest (`Outbox::armed`, read and written under the outbox
//! lock, which decides whether an `epoll_ctl` is made at all) and the
//! kernel's interest itself (`Conn::interest`, which only `epoll_ctl`
//! changes and only `epoll_wait` reads, synchronised by the kernel, not by
//! the outbox lock). The model's epoll is level-triggered: while the
//! kernel's interest says writable, every turn of the I/O thread gets an
//! event. The socket takes nothing on the first write made to it (a full
//! socket), so both the sender's partial direct write (`sealed`) and the
//! I/O thread's leftover (`rest`) are exercised.
//!
//! Checked, whatever the interleaving: every frame queued is written, in
//! order (no lost write readiness: the I/O thread stops only once the
//! senders are done and nothing is armed); never two writers on the
//! socket at once; an armed interest always belongs to the I/O thread.
//!
//! The model is tested itself (mutation tests): two plausible edits of
//! `write_pass`'s park, each breaking the rule "every interest change is
//! under the outbox lock, with the `writer_idle` change it belongs to",
//! must make it fail (`#[should_panic]`):
//!
//! * `Park::DisarmLater`: `writer_idle` set under the lock, the disarm
//!   (mirror and `epoll_ctl`) in a second critical section. A sender's
//!   hand-over in between finds the mirror still armed, makes no
//!   `epoll_ctl`, and the late disarm then removes the interest it relied
//!   on: its frame stays queued with no event to come.
//! * `Park::CtlAfterUnlock`: the mirror cleared under the lock, the
//!   `epoll_ctl` made after it is released. A sender's hand-over in
//!   between arms (mirror and kernel), and the late `epoll_ctl` disarms
//!   the kernel behind the mirror's back, with the same loss.
//!
//! (The first version of this model kept the interest in one flag under
//! the lock and set it unconditionally in the hand-over, so neither edit
//! was expressible; a seeded bug passed it.)
//!
//! A model of the protocol rather than the crate's code: graft-net has no
//! `sync` shim (its sockets and epoll cannot run under loom).
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::sync::{Arc, Mutex, MutexGuard};
use loom::thread;

/// How the I/O thread parks the write side.
#[derive(Clone, Copy, PartialEq)]
enum Park {
    /// As the code: flag, mirror and `epoll_ctl` in one critical section.
    UnderLock,
    /// Planted bug: the disarm in a second critical section.
    DisarmLater,
    /// Planted bug: the `epoll_ctl` after the lock is released.
    CtlAfterUnlock,
}

struct Outbox {
    /// Frames queued (the small lane).
    buf: Vec<u32>,
    /// What a sender's direct write left unsent (sent before `buf`).
    sealed: Vec<u32>,
    /// The write side is the senders'.
    writer_idle: bool,
    /// The mirror of the kernel's interest (`Outbox::armed`).
    armed: bool,
}

struct Conn {
    out: Mutex<Outbox>,
    /// The kernel's writable interest (changed by `epoll_ctl` only).
    interest: AtomicBool,
    /// The socket: what reached the wire.
    wire: Mutex<Vec<u32>>,
    /// The socket takes nothing on the next write (once).
    full: AtomicBool,
    /// Someone is writing to the socket (two at once is a bug).
    writing: AtomicBool,
    /// Senders done (the I/O thread's loop may end once all is written).
    done: AtomicBool,
    park: Park,
}

impl Conn {
    /// One write to the socket: how many frames it took.
    fn sock_write(&self, frames: &[u32]) -> usize {
        assert!(!self.writing.swap(true, SeqCst), "two writers at once");
        let n = if self.full.swap(false, SeqCst) {
            0
        } else {
            self.wire.lock().unwrap().extend_from_slice(frames);
            frames.len()
        };
        self.writing.store(false, SeqCst);
        n
    }

    /// `Conn::arm`: an `epoll_ctl` only when the mirror changes, both under
    /// the outbox lock.
    fn arm(&self, o: &mut Outbox, on: bool) {
        if o.armed != on {
            o.armed = on;
            self.interest.store(on, SeqCst);
        }
    }

    /// `Conn::hand_over`.
    fn hand_over(&self, o: &mut Outbox) {
        o.writer_idle = false;
        self.arm(o, true);
    }

    /// `push` + `write_or_wake`: `direct` when traffic is sparse.
    fn send(&self, v: u32, direct: bool) {
        let mut o = self.out.lock().unwrap();
        let alone = o.buf.is_empty();
        o.buf.push(v);
        if !o.writer_idle {
            return; // the I/O thread's: it finds the frame in its pass
        }
        if direct && alone && o.sealed.is_empty() {
            let b = std::mem::take(&mut o.buf);
            let n = self.sock_write(&b);
            if n == b.len() {
                return;
            }
            o.sealed.extend_from_slice(&b[n..]);
        }
        self.hand_over(&mut o);
    }

    /// One turn of the I/O thread: `epoll_wait` (an event while the
    /// kernel's interest is armed: level-triggered, the socket writable),
    /// then `write_pass`. Whether there was an event.
    fn io_turn(&self, rest: &mut Vec<u32>) -> bool {
        if !self.interest.load(SeqCst) {
            return false;
        }
        self.write_pass(rest);
        true
    }

    /// `Conn::write_pass`.
    fn write_pass(&self, rest: &mut Vec<u32>) {
        loop {
            if !rest.is_empty() {
                let n = self.sock_write(rest);
                rest.drain(..n);
                if !rest.is_empty() {
                    let mut o = self.out.lock().unwrap();
                    if !o.writer_idle {
                        self.arm(&mut o, true);
                    }
                    return;
                }
            }
            let batch = {
                let mut o = self.out.lock().unwrap();
                if o.writer_idle {
                    return; // the senders'
                }
                assert!(o.armed, "the I/O thread's write side is armed");
                if o.buf.is_empty() && o.sealed.is_empty() {
                    o.writer_idle = true;
                    self.park(o);
                    return;
                }
                let mut b = std::mem::take(&mut o.sealed);
                b.append(&mut o.buf);
                b
            };
            // Written outside the lock (no sender writes meanwhile: the
            // write side is the I/O thread's).
            let n = self.sock_write(&batch);
            rest.extend_from_slice(&batch[n..]);
        }
    }

    /// The disarm of a park (`writer_idle` was just set under `o`).
    fn park(&self, mut o: MutexGuard<'_, Outbox>) {
        match self.park {
            Park::UnderLock => self.arm(&mut o, false),
            Park::DisarmLater => {
                drop(o);
                let mut o = self.out.lock().unwrap();
                self.arm(&mut o, false);
            }
            Park::CtlAfterUnlock => {
                let changed = o.armed;
                o.armed = false;
                drop(o);
                if changed {
                    self.interest.store(false, SeqCst);
                }
            }
        }
    }
}

fn run(direct: [bool; 3], park: Park) {
    loom::model(move || {
        let c = Arc::new(Conn {
            out: Mutex::new(Outbox {
                buf: Vec::new(),
                sealed: Vec::new(),
                writer_idle: true,
                armed: false,
            }),
            interest: AtomicBool::new(false),
            wire: Mutex::new(Vec::new()),
            full: AtomicBool::new(true),
            writing: AtomicBool::new(false),
            done: AtomicBool::new(false),
            park,
        });
        let s = {
            let c = c.clone();
            thread::spawn(move || {
                for (i, d) in direct.iter().enumerate() {
                    c.send(i as u32, *d);
                }
                c.done.store(true, SeqCst);
            })
        };
        let io = {
            let c = c.clone();
            thread::spawn(move || {
                let mut rest = Vec::new();
                loop {
                    let done = c.done.load(SeqCst);
                    if !c.io_turn(&mut rest) {
                        if done {
                            return rest;
                        }
                        thread::yield_now();
                    }
                }
            })
        };
        s.join().unwrap();
        let rest = io.join().unwrap();
        // The I/O thread stopped once the senders were done and nothing
        // was armed: a frame handed over but never evented is still here.
        let o = c.out.lock().unwrap();
        assert!(
            o.buf.is_empty() && o.sealed.is_empty() && rest.is_empty(),
            "frames left unwritten: {:?} {:?} {:?}",
            o.sealed,
            o.buf,
            rest
        );
        assert!(!o.armed && !c.interest.load(SeqCst));
        assert_eq!(
            *c.wire.lock().unwrap(),
            vec![0, 1, 2],
            "every frame, in order"
        );
    });
}

#[test]
fn no_write_readiness_is_lost_sparse() {
    run([true, true, true], Park::UnderLock);
}

#[test]
fn no_write_readiness_is_lost_dense() {
    run([false, false, false], Park::UnderLock);
}

#[test]
fn no_write_readiness_is_lost_mixed() {
    run([true, false, true], Park::UnderLock);
}

/// Mutation test: the model must catch a disarm outside the park's
/// critical section.
#[test]
#[should_panic(expected = "frames left unwritten")]
fn the_model_catches_a_disarm_after_the_park() {
    run([false, false, false], Park::DisarmLater);
}

/// Mutation test: the model must catch an `epoll_ctl` made after the lock
/// that changed the mirror is released.
#[test]
#[should_panic(expected = "frames left unwritten")]
fn the_model_catches_an_epoll_ctl_after_the_unlock() {
    run([false, false, false], Park::CtlAfterUnlock);
}
