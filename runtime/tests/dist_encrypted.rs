//! Distribution with encryption on (`NodeConfig::encrypt`): a mesh of
//! three nodes, where only some ask for it (a link is encrypted when either
//! side does), doing remote spawn, calls, monitors and node loss.

use graft::*;
use std::time::{Duration, Instant};

fn node(encrypt: bool) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(2)
            .cookie("sealed")
            .encrypt(encrypt)
            .heartbeat(Duration::from_millis(200)),
    )
    .expect("node starts")
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn three_encrypted_nodes_spawn_call_monitor_and_lose_a_node() {
    let a = node(true);
    let b = node(false);
    let c = node(true);
    a.connect(b.addr()).unwrap();
    c.connect(b.addr()).unwrap();
    eventually("a full mesh", || {
        a.nodes().len() == 2 && c.nodes().len() == 2
    });
    let (b_id, c_id) = (b.id(), c.id());

    // Remote spawn with a captured environment, and a call, to each.
    let got = a
        .run(move || {
            let me = self_pid();
            let label = String::from("sealed answer");
            spawn_on(b_id, (me, label), |(to, label)| {
                send(to, (label, this_node()))
            })
            .unwrap();
            let from_b = expect::<(String, NodeId)>();
            let sq = call_on(c_id, 12u64, |x| x * x).unwrap();
            (from_b, sq)
        })
        .unwrap();
    assert_eq!(got, (("sealed answer".to_string(), b_id), 144));

    // A monitor on a process of c fires with NoConnection when c goes.
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let r = a.run(move || {
            let p = spawn_on(c_id, (), |()| {
                expect::<u8>();
            })
            .unwrap();
            let m = monitor(p);
            tx.send(()).unwrap();
            receive()
                .when(move |d: &ProcessDied| d.monitor == m, |d| d.reason)
                .timeout(Duration::from_secs(20))
                .expect("the monitor fires")
        });
        (a, r)
    });
    rx.recv().unwrap();
    c.shutdown();
    let (a, r) = waiter.join().unwrap();
    assert_eq!(r.unwrap(), ExitReason::NoConnection);
    // The rest of the mesh goes on.
    let v = a.run(move || call_on(b_id, 7u32, |x| x + 1)).unwrap();
    assert_eq!(v.unwrap(), 8);
}
