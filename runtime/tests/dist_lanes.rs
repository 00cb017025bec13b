//! Parallel lanes between nodes (`NodeConfig::lanes`): many processes'
//! interleaved sequences arrive whole and in order over several
//! connections, a process's exit signal stays behind its own messages on
//! its lane, and a node with one lane talks to one with four.

use graft::*;
use std::collections::HashMap;
use std::time::Duration;

/// Hang guard (never a speed assertion).
const HANG: Duration = Duration::from_secs(60);

fn node(lanes: usize) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(2)
            .cookie("lanes")
            .lanes(lanes),
    )
    .expect("node starts")
}

fn lanes_used(n: &Node) -> Vec<u64> {
    let s = n.stats();
    assert_eq!(s.peers.len(), 1, "{:?}", s.peers);
    s.peers[0].lane_frames_out.clone()
}

#[test]
fn many_senders_keep_their_order_over_four_lanes() {
    let a = node(4);
    let b = node(4);
    a.connect(b.addr()).unwrap();
    const SENDERS: u64 = 16;
    const PER: u64 = 300;
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = b
        .spawn(move || {
            let mut next: HashMap<u64, u64> = HashMap::new();
            let mut done = 0;
            while done < SENDERS {
                let (who, seq, pad): (u64, u64, Vec<u8>) =
                    expect_timeout(HANG).expect("frames keep coming");
                let want = next.entry(who).or_insert(0);
                assert_eq!(seq, *want, "sender {who}: {seq} where {want} was due");
                assert_eq!(pad.len() as u64, if seq % 40 == 3 { 100 << 10 } else { 8 });
                *want += 1;
                if *want == PER {
                    done += 1;
                }
            }
            tx.send(next).unwrap();
        })
        .unwrap();
    for who in 0..SENDERS {
        a.spawn(move || {
            for seq in 0..PER {
                // Now and then a message large enough to go in fragments.
                let pad = vec![who as u8; if seq % 40 == 3 { 100 << 10 } else { 8 }];
                send(sink, (who, seq, pad));
                if seq % 16 == 0 {
                    yield_now();
                }
            }
        })
        .unwrap();
    }
    let next = rx.recv_timeout(HANG).expect("every sequence complete");
    assert_eq!(next.len() as u64, SENDERS);
    let used = lanes_used(&a);
    assert_eq!(used.len(), 4, "{used:?}");
    let busy = used.iter().filter(|n| **n >= PER).count();
    assert!(
        busy >= 3,
        "16 senders over 4 lanes use most of them: {used:?}"
    );
    a.shutdown();
    b.shutdown();
}

#[test]
fn exit_signals_follow_each_senders_messages_on_its_lane() {
    let a = node(4);
    let b = node(4);
    a.connect(b.addr()).unwrap();
    const SENDERS: usize = 12;
    const PER: u64 = 200;
    let (tx, rx) = std::sync::mpsc::channel();
    let collector = b
        .spawn(move || {
            trap_exits(true);
            let mut got: HashMap<Pid, u64> = HashMap::new();
            let mut exits = 0;
            while exits < SENDERS {
                match receive()
                    .on(|m: (Pid, u64)| Ok(m))
                    .on(|e: ExitSignal| Err(e))
                    .timeout(HANG)
                {
                    Some(Ok((from, i))) => {
                        let n = got.entry(from).or_insert(0);
                        assert_eq!(i, *n, "{from}: message {i} out of order");
                        *n += 1;
                    }
                    Some(Err(e)) => {
                        assert_eq!(
                            got.get(&e.from).copied(),
                            Some(PER),
                            "{}'s exit came before all its messages",
                            e.from
                        );
                        exits += 1;
                    }
                    None => panic!("nothing for too long"),
                }
            }
            tx.send(got.len()).unwrap();
        })
        .unwrap();
    for _ in 0..SENDERS {
        a.spawn(move || {
            link(collector);
            let me = self_pid();
            for i in 0..PER {
                send(collector, (me, i));
            }
            panic!("exit after the last message");
        })
        .unwrap();
    }
    assert_eq!(rx.recv_timeout(HANG).expect("every exit"), SENDERS);
    assert!(lanes_used(&a).iter().filter(|n| **n > 0).count() >= 2);
    a.shutdown();
    b.shutdown();
}

#[test]
fn one_lane_and_four_lane_nodes_spawn_and_call_each_other() {
    for (la, lb) in [(1, 4), (4, 1), (4, 4)] {
        let a = node(la);
        let b = node(lb);
        let bid = a.connect(b.addr()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        a.spawn(move || {
            let me = self_pid();
            let mut kids = Vec::new();
            for i in 0..8u64 {
                let kid = spawn_on(bid, (me, i), |(to, i): (Pid, u64)| send(to, i * 2)).unwrap();
                kids.push(kid);
            }
            let mut sum = 0;
            for _ in 0..8 {
                sum += expect_timeout::<u64>(HANG).expect("a reply");
            }
            tx.send(sum).unwrap();
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(HANG).unwrap(), 56, "{la} with {lb}");
        assert_eq!(lanes_used(&a).len(), la.min(lb));
        a.shutdown();
        b.shutdown();
    }
}
