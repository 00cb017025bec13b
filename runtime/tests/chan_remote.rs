//! Send ports that travel to another node (two nodes in one OS process,
//! talking over real TCP on 127.0.0.1).

use graft::*;
use std::time::Duration;

/// Hang guard only (never a speed assertion).
const GUARD: Duration = Duration::from_secs(20);

fn node() -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(2)
            .cookie("chan-remote")
            .heartbeat(Duration::from_millis(200)),
    )
    .expect("node starts")
}

fn pair() -> (Node, Node, NodeId) {
    let a = node();
    let b = node();
    let id = a.connect(b.addr()).expect("connect");
    (a, b, id)
}

#[test]
fn a_port_used_from_another_node_keeps_order() {
    let (a, b, b_id) = pair();
    a.run(move || {
        let (tx, rx) = channel::<u64>();
        spawn_on(b_id, tx, |tx: SendPort<u64>| {
            for i in 0..200 {
                tx.send(i).unwrap();
            }
        })
        .unwrap();
        for i in 0..200 {
            assert_eq!(
                rx.recv_timeout(GUARD),
                Ok(i),
                "remote sends arrive in order"
            );
        }
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_bounded_port_and_several_remote_senders() {
    let (a, b, b_id) = pair();
    a.run(move || {
        let (tx, rx) = bounded::<(u32, u32)>(2);
        for s in 0..3u32 {
            spawn_on(
                b_id,
                (s, tx.clone()),
                |(s, tx): (u32, SendPort<(u32, u32)>)| {
                    for i in 0..50 {
                        tx.send((s, i)).unwrap();
                    }
                },
            )
            .unwrap();
        }
        let mut next = [0u32; 3];
        for _ in 0..150 {
            let (s, i) = rx.recv_timeout(GUARD).expect("a message");
            assert_eq!(next[s as usize], i, "per-sender order");
            next[s as usize] += 1;
        }
        assert_eq!(next, [50; 3]);
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_port_passed_on_and_back_still_reaches_its_channel() {
    let (a, b, b_id) = pair();
    a.run(move || {
        let (tx, rx) = channel::<String>();
        let me = self_pid();
        // B gets the port and hands it back to us in a message.
        spawn_on(b_id, (me, tx), |(back, tx): (Pid, SendPort<String>)| {
            tx.send("from b".to_string()).unwrap();
            send(back, tx);
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(GUARD).as_deref(), Ok("from b"));
        let again: SendPort<String> = expect();
        again.send("round trip".to_string()).unwrap();
        assert_eq!(rx.recv_timeout(GUARD).as_deref(), Ok("round trip"));
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}
