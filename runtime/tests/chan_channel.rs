//! Typed channels: ordering, back-pressure, rendezvous, select fairness,
//! disconnection, ports in messages, OS-thread interop.

mod common;

use graft::*;
use std::time::Duration;

use common::until_parked;

rt_test! {
    fn unbounded_keeps_order_per_sender() {
        let (tx, rx) = channel::<(u32, u32)>();
        for s in 0..4u32 {
            let tx = tx.clone();
            spawn(move || {
                for i in 0..1000u32 {
                    tx.send((s, i)).unwrap();
                }
            });
        }
        drop(tx);
        let mut next = [0u32; 4];
        let mut n = 0;
        for (s, i) in rx.iter() {
            assert_eq!(next[s as usize], i, "sender {s} out of order");
            next[s as usize] += 1;
            n += 1;
        }
        assert_eq!(n, 4000);
    }

    fn bounded_sender_parks_when_full() {
        let (tx, rx) = bounded::<u32>(2);
        let parent = self_pid();
        let sender = spawn(move || {
            for i in 0..3u32 {
                tx.send(i).unwrap();
                send(parent, i);
            }
        });
        assert_eq!(expect::<u32>(), 0);
        assert_eq!(expect::<u32>(), 1);
        // The third send is the only place the sender can park.
        until_parked(sender);
        assert_eq!(rx.len(), 2);
        assert_eq!(receive().on(|n: u32| n).timeout(Duration::ZERO), None);
        assert_eq!(rx.recv(), Ok(0));
        assert_eq!(expect::<u32>(), 2, "the send went through once there was room");
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(rx.recv(), Ok(2));
        assert_eq!(rx.recv(), Err(RecvError));
    }

    fn rendezvous_sender_waits_for_the_receiver() {
        let (tx, rx) = bounded::<&'static str>(0);
        let parent = self_pid();
        let sender = spawn(move || {
            tx.send("hello").unwrap();
            send(parent, "returned");
        });
        until_parked(sender);
        assert_eq!(receive().on(|s: &'static str| s).timeout(Duration::ZERO), None,
            "a rendezvous send returned before anyone received");
        assert_eq!(rx.recv(), Ok("hello"));
        assert_eq!(expect::<&'static str>(), "returned");
    }

    fn rendezvous_receiver_waits_for_the_sender() {
        let (tx, rx) = bounded::<u64>(0);
        let parent = self_pid();
        let receiver = spawn(move || {
            let v = rx.recv().unwrap();
            send(parent, v);
        });
        until_parked(receiver);
        tx.send(7).unwrap();
        assert_eq!(expect::<u64>(), 7);
    }

    fn rendezvous_many_hops() {
        let (tx1, rx1) = bounded::<u32>(0);
        let (tx2, rx2) = bounded::<u32>(0);
        spawn(move || {
            for v in rx1.iter() {
                tx2.send(v + 1).unwrap();
            }
        });
        let mut v = 0;
        for _ in 0..10_000 {
            tx1.send(v).unwrap();
            v = rx2.recv().unwrap();
        }
        assert_eq!(v, 10_000);
    }

    fn several_rendezvous_senders_all_meet() {
        let (tx, rx) = bounded::<u32>(0);
        for s in 0..4u32 {
            let tx = tx.clone();
            spawn(move || {
                for i in 0..100 {
                    tx.send(s * 1000 + i).unwrap();
                }
            });
        }
        drop(tx);
        let mut got: Vec<u32> = rx.iter().collect();
        got.sort_unstable();
        let mut want: Vec<u32> = (0..4).flat_map(|s| (0..100).map(move |i| s * 1000 + i)).collect();
        want.sort_unstable();
        assert_eq!(got, want);
    }

    fn disconnection_errors() {
        let (tx, rx) = channel::<String>();
        drop(rx);
        let e = tx.send("lost".to_string()).unwrap_err();
        assert_eq!(e.0, "lost", "the message is handed back");
        assert!(e.to_string().contains("gone"));
        assert!(tx.is_disconnected());

        let (tx, rx) = bounded::<u8>(1);
        tx.send(1).unwrap();
        assert_eq!(tx.try_send(2), Err(TrySendError::Full(2)));
        drop(tx);
        assert_eq!(rx.recv(), Ok(1), "queued messages outlive the senders");
        assert_eq!(rx.recv(), Err(RecvError));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Err(RecvTimeoutError::Disconnected));
    }

    fn parked_sender_sees_receiver_leave() {
        let (tx, rx) = bounded::<u32>(0);
        let parent = self_pid();
        let sender = spawn(move || {
            let r = tx.send(5);
            send(parent, r.map_err(|e| e.into_inner()));
        });
        until_parked(sender);
        drop(rx);
        assert_eq!(expect::<Result<(), u32>>(), Err(5));
    }

    fn parked_receiver_sees_senders_leave() {
        let (tx, rx) = channel::<u32>();
        let parent = self_pid();
        let receiver = spawn(move || send(parent, rx.recv()));
        until_parked(receiver);
        drop(tx);
        assert_eq!(expect::<Result<u32, RecvError>>(), Err(RecvError));
    }

    fn recv_timeout_times_out() {
        let (_tx, rx) = channel::<u32>();
        assert_eq!(rx.recv_timeout(Duration::from_millis(5)), Err(RecvTimeoutError::Timeout));
        let (tx, _rx) = bounded::<u32>(0);
        assert_eq!(tx.send_timeout(1, Duration::from_millis(5)), Err(SendTimeoutError::Timeout(1)));
        assert!(tx.is_empty(), "a timed-out rendezvous send takes its message back");
    }

    fn killed_while_parked_on_a_port() {
        let (tx, rx) = channel::<u32>();
        let child = spawn(move || {
            let _ = rx.recv();
        });
        let r = monitor(child);
        until_parked(child);
        exit(child, ExitReason::Kill);
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, r);
        assert_eq!(d.reason, ExitReason::Killed);
        assert!(tx.is_disconnected(), "the dead process's port was dropped");
    }

    fn ports_travel_in_messages() {
        // Cloud Haskell style: send a reply port to a server. A port is a
        // message itself, and inside a local-only message type.
        struct Double(u32, SendPort<u32>);
        impl Message for Double {}
        let server = spawn(|| loop {
            let Double(n, reply) = expect();
            reply.send(n * 2).unwrap();
        });
        let (tx, rx) = channel::<u32>();
        for i in 0..10u32 {
            send(server, Double(i, tx.clone()));
        }
        // A bare port and a receive port travel too.
        let (tx2, rx2) = channel::<u8>();
        let parent = self_pid();
        let relay = spawn(move || {
            let out: SendPort<u8> = expect();
            let inp: ReceivePort<u8> = expect();
            for v in inp.iter() {
                out.send(v).unwrap();
            }
            send(parent, "relay done");
        });
        let (to_relay, from_parent) = channel::<u8>();
        send(relay, tx2);
        send(relay, from_parent);
        to_relay.send(5).unwrap();
        assert_eq!(rx2.recv(), Ok(5));
        drop(to_relay);
        assert_eq!(expect::<&'static str>(), "relay done");
        let got: Vec<u32> = rx.iter().take(10).collect();
        assert_eq!(got, (0..10).map(|i| i * 2).collect::<Vec<_>>());
        exit(server, ExitReason::Kill);
    }

    fn select_takes_from_whichever_port_has_mail() {
        let (ta, ra) = channel::<u32>();
        let (tb, rb) = channel::<u32>();
        let parent = self_pid();
        let selector = spawn(move || {
            let r = select(&[&ra, &rb]);
            send(parent, r);
        });
        until_parked(selector);
        tb.send(9).unwrap();
        assert_eq!(expect::<Result<(usize, u32), RecvError>>(), Ok((1, 9)));
        drop(ta);
    }

    fn select_ends_when_all_ports_disconnect() {
        let (ta, ra) = channel::<u32>();
        let (tb, rb) = channel::<u32>();
        ta.send(1).unwrap();
        drop((ta, tb));
        assert_eq!(select(&[&ra, &rb]), Ok((0, 1)));
        assert_eq!(select(&[&ra, &rb]), Err(RecvError));
        assert_eq!(select_timeout(&[&ra, &rb], Duration::from_millis(1)), Err(RecvTimeoutError::Disconnected));
        let (_tc, rc) = channel::<u32>();
        assert_eq!(select_timeout(&[&rc], Duration::from_millis(1)), Err(RecvTimeoutError::Timeout));
    }

    fn select_waits_past_a_disconnected_port() {
        let (ta, ra) = channel::<u32>();
        let (tb, rb) = channel::<u32>();
        drop(tb);
        let parent = self_pid();
        let selector = spawn(move || send(parent, select(&[&ra, &rb])));
        // Parks (does not spin) although port b is disconnected.
        until_parked(selector);
        ta.send(4).unwrap();
        assert_eq!(expect::<Result<(usize, u32), RecvError>>(), Ok((0, 4)));
    }

    fn select_is_fair() {
        let (ta, ra) = channel::<u8>();
        let (tb, rb) = channel::<u8>();
        for _ in 0..1000 {
            ta.send(0).unwrap();
            tb.send(1).unwrap();
        }
        let mut counts = [0usize; 2];
        for _ in 0..400 {
            let (i, v) = select(&[&ra, &rb]).unwrap();
            assert_eq!(i, v as usize);
            counts[i] += 1;
        }
        assert!(counts[0] >= 100 && counts[1] >= 100, "a port starved: {counts:?}");
    }

    fn merged_ports_are_round_robin() {
        let mut txs = Vec::new();
        let mut rxs = Vec::new();
        for _ in 0..3 {
            let (t, r) = channel::<usize>();
            txs.push(t);
            rxs.push(r);
        }
        // Port 0 is flooded; the others get a few messages each.
        for _ in 0..1000 {
            txs[0].send(0).unwrap();
        }
        for _ in 0..5 {
            txs[1].send(1).unwrap();
            txs[2].send(2).unwrap();
        }
        let merged = merge_ports(rxs);
        let first: Vec<usize> = (0..15).map(|_| merged.recv().unwrap()).collect();
        assert_eq!(first, [0, 1, 2].repeat(5), "no port starves");
        drop(txs);
        assert_eq!(merged.iter().count(), 995);
    }

    fn merged_ports_wake_on_any() {
        let (ta, ra) = channel::<u32>();
        let (tb, rb) = bounded::<u32>(0);
        let parent = self_pid();
        let receiver = spawn(move || {
            let m = merge_ports(vec![ra, rb]);
            let got: Vec<u32> = m.iter().collect();
            send(parent, got);
        });
        until_parked(receiver);
        tb.send(1).unwrap();
        ta.send(2).unwrap();
        drop((ta, tb));
        let mut got = expect::<Vec<u32>>();
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
    }

    fn ports_in_receive_clauses_beside_mail() {
        let (ta, ra) = channel::<u32>();
        let (tb, rb) = channel::<u32>();
        let a = ra.into_mailbox();
        let b = rb.into_mailbox();
        assert_ne!(a, b);
        let me = self_pid();
        ta.send(1).unwrap();
        send(me, "mail");
        tb.send(2).unwrap();
        ta.send(3).unwrap();
        // Selective receive: port b first, then whatever is oldest.
        let from_b = receive().when(move |m: &PortMessage<u32>| m.port() == b, |m| m.into_inner()).wait();
        assert_eq!(from_b, 2);
        #[derive(Debug, PartialEq)]
        enum Got { A(u32), Mail(&'static str) }
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(receive()
                .when(move |m: &PortMessage<u32>| m.port() == a, |m| Got::A(m.into_inner()))
                .on(|s: &'static str| Got::Mail(s))
                .wait());
        }
        assert_eq!(got, [Got::A(1), Got::Mail("mail"), Got::A(3)]);
        drop(ta);
        assert_eq!(expect::<PortClosed>(), PortClosed(a));
        drop(tb);
        assert_eq!(expect::<PortClosed>(), PortClosed(b));
    }

    fn routed_bounded_port_keeps_back_pressure() {
        let (tx, rx) = bounded::<u32>(1);
        tx.send(0).unwrap(); // queued before routing: moves to the mailbox
        let port = rx.into_mailbox();
        let parent = self_pid();
        let sender = spawn(move || {
            tx.send(1).unwrap();
            send(parent, "sent");
        });
        until_parked(sender);
        assert_eq!(receive().on(|s: &'static str| s).timeout(Duration::ZERO), None);
        let m: PortMessage<u32> = expect();
        assert_eq!(m.port(), port);
        assert_eq!(*m.get(), 0);
        drop(m); // consuming frees the place
        assert_eq!(expect::<&'static str>(), "sent");
        assert_eq!(expect::<PortMessage<u32>>().into_inner(), 1);
        assert_eq!(expect::<PortClosed>(), PortClosed(port));
    }

    fn os_threads_and_processes_share_ports() {
        let (to_proc, from_thread) = bounded::<u32>(1);
        let (to_thread, from_proc) = channel::<u32>();
        let t = std::thread::spawn(move || {
            for i in 0..100 {
                to_proc.send(i).unwrap();
                assert_eq!(from_proc.recv().unwrap(), i + 1);
            }
        });
        for v in from_thread.iter() {
            to_thread.send(v + 1).unwrap();
        }
        // The sender thread is done once its port disconnected.
        blocking(move || t.join().unwrap());
    }
}

#[test]
fn a_green_thread_parked_on_a_port_leaves_its_worker_free() {
    // One worker: if recv blocked the worker, the sender could never run.
    let node = common::node(1);
    let v = node
        .run(|| {
            let (tx, rx) = bounded::<u32>(0);
            spawn(move || tx.send(41).unwrap());
            rx.recv().unwrap() + 1
        })
        .unwrap();
    assert_eq!(v, 42);
    node.shutdown();
}

#[test]
fn plain_threads_only() {
    let (tx, rx) = bounded::<u32>(3);
    let producers: Vec<_> = (0..3)
        .map(|p| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..500 {
                    tx.send(p * 10_000 + i).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let mut last = [None::<u32>; 3];
    let mut n = 0;
    for v in rx.iter() {
        let p = (v / 10_000) as usize;
        if let Some(l) = last[p] {
            assert!(l < v, "producer {p} out of order");
        }
        last[p] = Some(v);
        n += 1;
    }
    assert_eq!(n, 1500);
    for p in producers {
        p.join().unwrap();
    }
}
