//! erpc across three nodes (real TCP on 127.0.0.1), one of them down.

use graft_otp::erpc::{self, ErpcError};
use graft_otp::prelude::*;
use std::time::{Duration, Instant};

const HANG: Duration = Duration::from_secs(20);

fn node() -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .cookie("erpc")
            .workers(2)
            .heartbeat(Duration::from_millis(200)),
    )
    .unwrap()
}

/// Three connected nodes; the third is shut down (its id stays known).
fn three_one_down() -> (Node, Node, NodeId, NodeId) {
    let (a, b, c) = (node(), node(), node());
    let b_id = a.connect(b.addr()).unwrap();
    let c_id = a.connect(c.addr()).unwrap();
    c.shutdown();
    let t = Instant::now();
    a.run(move || {
        while nodes().contains(&c_id) {
            assert!(t.elapsed() < HANG, "the loss of c is never seen");
            sleep(Duration::from_millis(10));
        }
    })
    .unwrap();
    (a, b, b_id, c_id)
}

#[test]
fn multicall_gives_a_result_per_node_with_one_down() {
    let (a, _b, b_id, c_id) = three_one_down();
    let a_id = a.id();
    let got = a
        .run(move || {
            erpc::multicall(
                &[a_id, b_id, c_id],
                String::from("hello from"),
                |g| format!("{g} {}", this_node()),
                HANG,
            )
        })
        .unwrap();
    assert_eq!(
        got,
        [
            Ok(format!("hello from {a_id}")),
            Ok(format!("hello from {b_id}")),
            Err(ErpcError::NoConnection)
        ]
    );
}

#[test]
fn call_reports_values_exceptions_timeouts_and_noconnection() {
    let (a, _b, b_id, c_id) = three_one_down();
    a.run(move || {
        assert_eq!(
            erpc::call(b_id, vec![1u64, 2, 3], |v| v.iter().sum::<u64>(), HANG),
            Ok(6)
        );
        assert_eq!(
            erpc::call(b_id, 0u8, |_| -> u8 { panic!("remote boom") }, HANG),
            Err(ErpcError::Exception(ExitReason::Other(
                "remote boom".into()
            )))
        );
        assert_eq!(
            erpc::call(c_id, (), |()| 1u8, HANG),
            Err(ErpcError::NoConnection)
        );
        // A slow function: the call times out, and the process on b is
        // killed (it had registered a name; the name goes with it).
        let r = erpc::call(
            b_id,
            (),
            |()| {
                register("erpc_slow", self_pid()).unwrap();
                sleep(Duration::from_secs(60));
                1u8
            },
            Duration::from_millis(300),
        );
        assert_eq!(r, Err(ErpcError::Timeout));
        let t = Instant::now();
        loop {
            match whereis_on("erpc_slow", b_id) {
                Ok(None) => break,
                _ => {
                    assert!(t.elapsed() < HANG, "the timed-out call still runs on b");
                    sleep(Duration::from_millis(10));
                }
            }
        }
        // Nothing of it is left in the mailbox.
        sleep(Duration::from_millis(50));
        assert!(receive()
            .any(|u: Unknown| u)
            .timeout(Duration::ZERO)
            .is_none());
    })
    .unwrap();
}

#[test]
fn multicall_times_out_per_node_and_cast_runs_remotely() {
    let (a, _b, b_id, c_id) = three_one_down();
    let a_id = a.id();
    a.run(move || {
        let got = erpc::multicall(
            &[a_id, b_id, c_id],
            a_id,
            |home| {
                if this_node() != home {
                    sleep(Duration::from_secs(60));
                }
                7u32
            },
            Duration::from_secs(1),
        );
        assert_eq!(
            got,
            [Ok(7), Err(ErpcError::Timeout), Err(ErpcError::NoConnection)]
        );
        erpc::cast(b_id, self_pid(), |to| send(to, this_node()));
        assert_eq!(expect_timeout::<NodeId>(HANG), Some(b_id));
        // A cast to a node that is down is dropped (logged), nothing else.
        erpc::cast(c_id, self_pid(), |to| send(to, this_node()));
        assert_eq!(expect_timeout::<NodeId>(Duration::from_millis(100)), None);
    })
    .unwrap();
}
