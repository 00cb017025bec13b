//! Loom models of the channel and future park/wake protocols
//! (`runtime/src/channel.rs`, `future.rs`, `wakeup.rs`).
//!
//! Under loom there are no processes: every wait goes through the OS-thread
//! parker (`ThreadParker`, a loom mutex + condvar), so these models explore
//! the register-then-park / change-then-wake handshake of each operation:
//! no lost wake-up, no message lost or duplicated, disconnection seen.
#![cfg(loom)]

use graft::{bounded, channel, promise, select, ReceivePort, RecvError, SendError, SendPort};
use loom::thread;

/// A thread sends 1 and 2 and drops its port; the receiver gets both, in
/// order, then sees the disconnection.
fn two_sends_then_disconnect((tx, rx): (SendPort<u32>, ReceivePort<u32>)) {
    let t = thread::spawn(move || {
        tx.send(1).unwrap();
        tx.send(2).unwrap();
    });
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(rx.recv(), Ok(2));
    assert_eq!(rx.recv(), Err(RecvError));
    t.join().unwrap();
}

#[test]
fn unbounded_send_wakes_a_parked_receiver() {
    loom::model(|| two_sends_then_disconnect(channel()));
}

#[test]
fn rendezvous_send_returns_after_the_receive() {
    loom::model(|| {
        let (tx, rx) = bounded::<u32>(0);
        let t = thread::spawn(move || tx.send(7));
        assert_eq!(rx.recv(), Ok(7));
        assert_eq!(t.join().unwrap(), Ok(()));
    });
}

#[test]
fn bounded_sender_parks_until_room() {
    loom::model(|| two_sends_then_disconnect(bounded(1)));
}

#[test]
fn receiver_drop_releases_a_parked_rendezvous_sender() {
    loom::model(|| {
        let (tx, rx) = bounded::<u32>(0);
        let t = thread::spawn(move || tx.send(3));
        drop(rx);
        // Nobody received, so the send must fail and hand the value back.
        assert_eq!(t.join().unwrap(), Err(SendError(3)));
    });
}

#[test]
fn select_wakes_on_either_port() {
    loom::model(|| {
        let (ta, ra) = channel::<u32>();
        let (tb, rb) = channel::<u32>();
        let t1 = thread::spawn(move || ta.send(1).unwrap());
        let t2 = thread::spawn(move || drop(tb));
        let (i, v) = select(&[&ra, &rb]).unwrap();
        assert_eq!((i, v), (0, 1));
        assert_eq!(select(&[&ra, &rb]), Err(RecvError));
        t1.join().unwrap();
        t2.join().unwrap();
    });
}

#[test]
fn promise_wakes_a_parked_waiter() {
    loom::model(|| {
        let (p, f) = promise::<u32>();
        let t = thread::spawn(move || p.fulfil(5));
        assert_eq!(f.wait(), Ok(&5));
        t.join().unwrap();
    });
}

#[test]
fn two_rendezvous_senders_both_meet_the_receiver() {
    loom::model(|| {
        let (tx, rx) = bounded::<u32>(0);
        let tx2 = tx.clone();
        let t1 = thread::spawn(move || tx.send(1));
        let t2 = thread::spawn(move || tx2.send(2));
        let mut got = [rx.recv().unwrap(), rx.recv().unwrap()];
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        assert_eq!(t1.join().unwrap(), Ok(()));
        assert_eq!(t2.join().unwrap(), Ok(()));
        assert_eq!(rx.recv(), Err(RecvError));
    });
}

#[test]
fn last_sender_drop_wakes_a_parked_receiver() {
    loom::model(|| {
        let (tx, rx) = channel::<u32>();
        let tx2 = tx.clone();
        let t1 = thread::spawn(move || drop(tx));
        let t2 = thread::spawn(move || drop(tx2));
        assert_eq!(rx.recv(), Err(RecvError));
        t1.join().unwrap();
        t2.join().unwrap();
    });
}
