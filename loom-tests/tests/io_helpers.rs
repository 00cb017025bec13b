//! Loom model of the poller transport's helpers (graft-net, `io.rs`
//! "Helpers", `Transport::poll_ready`): a scheduler worker that spins for
//! work serves an I/O thread's connections for a moment, so that a frame
//! reaches its process without waking the I/O thread first.
//!
//! The pieces, as in the code:
//!
//! * the kernel: a socket (records the peer wrote, each holding two
//!   frames), the poller's `eventfd` (`notified`), and level-triggered
//!   readiness: an `epoll_wait` sleeps while the socket is empty and no
//!   notify is pending; a wake-up that finds neither sleeps again;
//! * the I/O thread's connections under one lock (`IoThread::shared`): the
//!   record layer's buffer (frames read from the socket and not delivered)
//!   and `again` (a connection with more to read, to visit without
//!   waiting);
//! * serving (`IoConn::serve`, scaled down): read one record from the socket
//!   if there is one, deliver one frame, and report "more" when frames are
//!   left in the buffer, where no readiness reports them;
//! * the I/O thread: looks at its inbox (under its lock) and at `again` as
//!   it left it at its last turn, waits unless either had work, drains the
//!   `eventfd`, takes the lock, registers what its inbox holds (a new connection, whose frame only it
//!   delivers) and serves;
//! * a helper: `try_lock`, a zero-timeout peek, serve what is ready, and a
//!   notify when it set `again` (what was there before, the I/O thread's
//!   last turn saw, or the helper that set it notified).
//!
//! Checked, whatever the interleaving: every frame is delivered once, a
//! connection's frames in order, and the I/O thread never sleeps with work
//! left. The sleep is a `yield_now` loop: a sleep that finds every other
//! thread done and nothing ready would last for ever (in the code, until
//! the next scan, a quarter tick later), and the model reports it.
//!
//! Mutation tests (`#[should_panic]`), one per rule of "Helpers":
//!
//! * `Helper::DrainsNotify`: the helper's peek resets the `eventfd` as the
//!   owner's wait does. A new connection's notify is then consumed by a
//!   thread that does not look at the inbox, and the I/O thread sleeps
//!   with the connection unregistered.
//! * `Helper::NoNotify`: the helper leaves `again` set without a notify.
//!   The I/O thread, asleep since before the frame arrived, is woken by the
//!   readiness the helper then drained, finds nothing and sleeps again with
//!   a frame in the record layer.
//!
//! A model of the protocol rather than the crate's code: graft-net has no
//! `sync` shim (its sockets and epoll cannot run under loom).
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::{Arc, Mutex};
use loom::thread;

#[derive(Clone, Copy, PartialEq)]
enum Helper {
    /// As the code.
    AsCode,
    /// Planted bug: the peek drains the `eventfd`.
    DrainsNotify,
    /// Planted bug: no notify after leaving `again` set.
    NoNotify,
}

struct Kernel {
    /// Records on the socket, not read yet.
    socket: Vec<[u32; 2]>,
    /// The poller's `eventfd` was written.
    notified: bool,
}

struct Shared {
    /// The record layer: frames read from the socket, not delivered.
    buffered: Vec<u32>,
    again: bool,
    delivered: Vec<u32>,
}

struct Io {
    kernel: Mutex<Kernel>,
    /// Threads other than the I/O thread that have finished.
    done: AtomicUsize,
    shared: Mutex<Shared>,
    /// A new connection handed to the I/O thread (`IoThread::inbox`): the
    /// frame it brings is delivered once the I/O thread registers it.
    inbox: Mutex<Option<u32>>,
}

impl Io {
    fn notify(&self) {
        self.kernel.lock().unwrap().notified = true;
    }

    /// `IoConn::serve`: one record in, one frame out; `true`: more left.
    fn serve(&self, sh: &mut Shared) -> bool {
        let record = {
            let mut k = self.kernel.lock().unwrap();
            if k.socket.is_empty() {
                None
            } else {
                Some(k.socket.remove(0))
            }
        };
        if let Some(r) = record {
            sh.buffered.extend(r);
        }
        if !sh.buffered.is_empty() {
            let f = sh.buffered.remove(0);
            sh.delivered.push(f);
        }
        !sh.buffered.is_empty()
    }
}

/// The I/O thread's loop until every frame is delivered; `false`: it fell
/// asleep for ever with frames left.
fn io_thread(io: &Io, total: usize, others: usize) -> bool {
    // `again` as this thread left it at its last turn (the code carries it
    // rather than look again under the lock before each wait).
    let mut more = false;
    loop {
        let revisit = more || io.inbox.lock().unwrap().is_some();
        let ready = {
            let mut k = io.kernel.lock().unwrap();
            if !revisit {
                while k.socket.is_empty() && !k.notified {
                    if io.done.load(SeqCst) == others {
                        return false;
                    }
                    drop(k);
                    thread::yield_now();
                    k = io.kernel.lock().unwrap();
                }
            }
            k.notified = false;
            !k.socket.is_empty()
        };
        let mut sh = io.shared.lock().unwrap();
        if let Some(f) = io.inbox.lock().unwrap().take() {
            sh.delivered.push(f);
        }
        if ready || sh.again {
            let left = io.serve(&mut sh);
            sh.again = left;
        }
        more = sh.again;
        if sh.delivered.len() == total {
            return true;
        }
    }
}

fn helper(io: &Io, mode: Helper) {
    let Ok(mut sh) = io.shared.try_lock() else {
        return;
    };
    let ready = {
        let mut k = io.kernel.lock().unwrap();
        if mode == Helper::DrainsNotify {
            k.notified = false;
        }
        !k.socket.is_empty()
    };
    let before = sh.again;
    if ready {
        let more = io.serve(&mut sh);
        sh.again |= more;
    }
    // Only what this helper left: what was there before, the I/O thread's
    // last turn saw, or the helper that left it notified.
    let added = sh.again && !before;
    drop(sh);
    if added && mode != Helper::NoNotify {
        io.notify();
    }
}

/// One run: the I/O thread, a helper, and a peer writing one record
/// (`peer`) and/or a new connection joining the inbox (`joiner`).
fn model(mode: Helper, peer: bool, joiner: bool) {
    loom::model(move || {
        let io = Arc::new(Io {
            kernel: Mutex::new(Kernel {
                socket: Vec::new(),
                notified: false,
            }),
            done: AtomicUsize::new(0),
            shared: Mutex::new(Shared {
                buffered: Vec::new(),
                again: false,
                delivered: Vec::new(),
            }),
            inbox: Mutex::new(None),
        });
        let total = if peer { 2 } else { 0 } + if joiner { 1 } else { 0 };
        let mut others = Vec::new();
        if peer {
            let io = io.clone();
            others.push(thread::spawn(move || {
                io.kernel.lock().unwrap().socket.push([1, 2]);
                io.done.fetch_add(1, SeqCst);
            }));
        }
        if joiner {
            let io = io.clone();
            others.push(thread::spawn(move || {
                *io.inbox.lock().unwrap() = Some(100);
                io.notify();
                io.done.fetch_add(1, SeqCst);
            }));
        }
        let h = {
            let io = io.clone();
            thread::spawn(move || {
                helper(&io, mode);
                io.done.fetch_add(1, SeqCst);
            })
        };
        let finished = io_thread(&io, total, others.len() + 1);
        h.join().unwrap();
        for t in others {
            t.join().unwrap();
        }
        let sh = io.shared.lock().unwrap();
        assert!(
            finished,
            "the I/O thread sleeps with work left: {:?}",
            sh.buffered
        );
        let mut d = sh.delivered.clone();
        let pos = |f: u32| d.iter().position(|&x| x == f);
        if peer {
            assert!(pos(1) < pos(2), "a connection's frames out of order: {d:?}");
        }
        d.sort_unstable();
        let mut want = Vec::new();
        if peer {
            want.extend([1, 2]);
        }
        if joiner {
            want.push(100);
        }
        assert_eq!(d, want, "every frame delivered once");
        assert!(sh.buffered.is_empty());
    });
}

#[test]
fn a_helper_and_the_io_thread_deliver_a_connections_frames_once_in_order() {
    model(Helper::AsCode, true, false);
}

#[test]
fn a_helper_leaves_a_new_connections_notify_to_the_io_thread() {
    model(Helper::AsCode, false, true);
}

#[test]
#[should_panic]
fn mutation_a_helper_that_drains_the_eventfd_strands_a_new_connection() {
    model(Helper::DrainsNotify, false, true);
}

#[test]
#[should_panic]
fn mutation_a_helper_that_does_not_notify_strands_a_buffered_frame() {
    model(Helper::NoNotify, true, false);
}

#[test]
fn a_helper_a_peer_and_a_new_connection_at_once() {
    model(Helper::AsCode, true, true);
}
