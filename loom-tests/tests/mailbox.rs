//! Loom model of the mailbox push / park / wake protocol
//! (`process/state.rs`, `process/mailbox.rs`): no lost wake-up, no double
//! schedule, every message received, also when a batch is pushed at once,
//! and when the receiver takes a lone message where it lies
//! (`drain_or_take_lone`).
#![cfg(loom)]

use graft::__loom::{Drained, Mailbox, Parker, ProcState};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::collections::VecDeque;

/// The receiving process, run by its "worker": check the mailbox, suspend,
/// park; when scheduled, run again. Returns how many times it was parked.
/// `lone`: drain as a receive does, taking a lone message where it lies
/// (the private queue `got` is emptied as a receive would have taken it).
fn receive_all(
    st: &ProcState,
    mb: &Mailbox<u32>,
    run_queue: &Parker,
    scheduled: &AtomicUsize,
    want: usize,
    lone: bool,
) -> usize {
    let mut got = VecDeque::new();
    let mut taken = Vec::new();
    let mut parks = 0;
    st.start();
    mb.owner_resumed();
    loop {
        if lone {
            taken.extend(got.drain(..));
            if let Drained::Lone(m) = mb.drain_or_take_lone(&mut got) {
                taken.push(m);
            }
            if taken.len() + got.len() == want {
                got.extend(taken.drain(..));
                break;
            }
        } else {
            mb.drain_into(&mut got);
        }
        if got.len() == want {
            break;
        }
        // The process suspended; its worker now tries to park it.
        if st.park() {
            parks += 1;
            // Parked: only a waker that scheduled it may run it again.
            run_queue.park();
            assert_eq!(
                scheduled.load(Ordering::SeqCst),
                parks,
                "run without a schedule"
            );
            st.start();
        }
        // Resumed: after a start, or at once after a failed park.
        mb.owner_resumed();
    }
    let mut v: Vec<u32> = got.into_iter().collect();
    v.sort();
    assert_eq!(v, (0..want as u32).collect::<Vec<_>>());
    parks
}

fn sender(
    st: Arc<ProcState>,
    mb: Arc<Mailbox<u32>>,
    rq: Arc<Parker>,
    sc: Arc<AtomicUsize>,
    m: u32,
) {
    mb.push(m).expect("mailbox open");
    if st.wake() {
        sc.fetch_add(1, Ordering::SeqCst);
        rq.unpark();
    }
}

/// `senders` threads each push one message and wake the receiver, which
/// takes them all: exactly one schedule per park.
fn senders_and_receiver(senders: u32, lone: bool) {
    let st = Arc::new(ProcState::new());
    let mb = Arc::new(Mailbox::new());
    let rq = Arc::new(Parker::default());
    let sc = Arc::new(AtomicUsize::new(0));
    let ts: Vec<_> = (0..senders)
        .map(|m| {
            let (st, mb, rq, sc) = (st.clone(), mb.clone(), rq.clone(), sc.clone());
            thread::spawn(move || sender(st, mb, rq, sc, m))
        })
        .collect();
    let parks = receive_all(&st, &mb, &rq, &sc, senders as usize, lone);
    for t in ts {
        t.join().unwrap();
    }
    assert_eq!(sc.load(Ordering::SeqCst), parks, "one schedule per park");
}

#[test]
fn one_sender_no_lost_wakeup() {
    loom::model(|| senders_and_receiver(1, false));
}

#[test]
fn two_senders_no_double_schedule() {
    loom::model(|| senders_and_receiver(2, false));
}

/// The receive's drain, which hands a lone message over instead of
/// queuing it, keeps the protocol: its lock-free check and flags are the
/// same as `drain_into`'s.
#[test]
fn lone_message_taken_no_lost_wakeup() {
    loom::model(|| senders_and_receiver(1, true));
}

#[test]
fn lone_message_taken_two_senders() {
    loom::model(|| senders_and_receiver(2, true));
}

#[test]
fn closed_mailbox_refuses_and_wakes_nobody() {
    loom::model(|| {
        let st = Arc::new(ProcState::new());
        let mb: Arc<Mailbox<u32>> = Arc::new(Mailbox::new());
        let t = {
            let (st, mb) = (st.clone(), mb.clone());
            thread::spawn(move || {
                let pushed = mb.push(1).is_ok();
                if pushed {
                    let _ = st.wake();
                }
                pushed
            })
        };
        st.start();
        st.finish();
        let left = mb.close();
        let pushed = t.join().unwrap();
        // Either the message got in before the close (and was handed back to
        // the owner), or the push was refused: never lost, never kept.
        assert_eq!(left, if pushed { vec![1] } else { vec![] });
        assert!(mb.push(2).is_err());
        assert!(!st.wake(), "a finished process is never scheduled");
    });
}

/// A connection's thread pushes the messages of one read together
/// (`push_many_within`, the runtime's `arrivals.rs`) and wakes once, while
/// another sender pushes one: all arrive, one schedule per park.
#[test]
fn a_batch_and_a_single_sender() {
    loom::model(|| {
        let st = Arc::new(ProcState::new());
        let mb = Arc::new(Mailbox::new());
        let rq = Arc::new(Parker::default());
        let sc = Arc::new(AtomicUsize::new(0));
        let batch = {
            let (st, mb, rq, sc) = (st.clone(), mb.clone(), rq.clone(), sc.clone());
            thread::spawn(move || {
                let mut b = vec![0, 1];
                let (_, pushed) = mb.push_many_within(&mut b, usize::MAX).expect("open");
                assert_eq!(pushed, 2);
                if st.wake() {
                    sc.fetch_add(1, Ordering::SeqCst);
                    rq.unpark();
                }
            })
        };
        let single = {
            let (st, mb, rq, sc) = (st.clone(), mb.clone(), rq.clone(), sc.clone());
            thread::spawn(move || sender(st, mb, rq, sc, 2))
        };
        let parks = receive_all(&st, &mb, &rq, &sc, 3, false);
        batch.join().unwrap();
        single.join().unwrap();
        assert_eq!(sc.load(Ordering::SeqCst), parks, "one schedule per park");
    });
}
