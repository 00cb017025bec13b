//! gen_server multi_call and abcast over four nodes (real TCP on
//! 127.0.0.1): two with the server, one without, one down.

use graft_otp::gen_server_multi::{abcast, multi_call};
use graft_otp::prelude::*;
use std::time::{Duration, Instant};

const HANG: Duration = Duration::from_secs(20);

#[derive(Default, Debug, Mobile)]
struct Log(Vec<u64>);

#[derive(Debug, Clone, Mobile)]
enum Ask {
    Get,
    /// Sleep this long first, on this node only.
    Slow(NodeId, u64),
}

impl GenServer for Log {
    type Call = Ask;
    type Cast = u64;
    type Reply = (Vec<u64>, NodeId);
    fn handle_call(&mut self, ask: Ask, _: &ReplyTo<Self::Reply>) -> CallResult<Self::Reply> {
        if let Ask::Slow(node, ms) = ask {
            if this_node() == node {
                sleep(Duration::from_millis(ms));
            }
        }
        CallResult::Reply((self.0.clone(), this_node()))
    }
    fn handle_cast(&mut self, n: u64) -> Flow {
        self.0.push(n);
        Flow::Continue
    }
}

fn node() -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .cookie("multi")
            .workers(2)
            .heartbeat(Duration::from_millis(200)),
    )
    .unwrap()
}

/// a and b run "log"; d runs nothing; c is down. Returns a, b, d and the ids.
fn cluster() -> (Node, Node, Node, [NodeId; 4]) {
    let (a, b, c, d) = (node(), node(), node(), node());
    let b_id = a.connect(b.addr()).unwrap();
    let c_id = a.connect(c.addr()).unwrap();
    let d_id = a.connect(d.addr()).unwrap();
    for n in [&a, &b] {
        n.run(|| {
            gen_server::start_named("log", Log::default()).unwrap();
        })
        .unwrap();
    }
    c.shutdown();
    let t = Instant::now();
    a.run(move || {
        while nodes().contains(&c_id) {
            assert!(t.elapsed() < HANG, "the loss of c is never seen");
            sleep(Duration::from_millis(10));
        }
    })
    .unwrap();
    let a_id = a.id();
    (a, b, d, [a_id, b_id, c_id, d_id])
}

#[test]
fn multi_call_returns_the_replies_and_the_bad_nodes() {
    let (a, _b, _d, ids) = cluster();
    let [a_id, b_id, c_id, d_id] = ids;
    a.run(move || {
        let (replies, bad) = multi_call::<Log>(&ids, "log", Ask::Get, HANG);
        assert_eq!(replies, [(a_id, (vec![], a_id)), (b_id, (vec![], b_id))]);
        assert_eq!(bad, [c_id, d_id]);
        // Unknown name everywhere: all bad.
        let (replies, bad) = multi_call::<Log>(&ids, "nobody", Ask::Get, HANG);
        assert!(replies.is_empty());
        assert_eq!(bad, ids);
    })
    .unwrap();
}

#[test]
fn a_slow_node_is_bad_and_its_late_reply_never_arrives() {
    let (a, _b, _d, ids) = cluster();
    let [a_id, b_id, ..] = ids;
    a.run(move || {
        let (replies, bad) = multi_call::<Log>(
            &[a_id, b_id],
            "log",
            Ask::Slow(b_id, 2000),
            Duration::from_secs(1),
        );
        assert_eq!(replies, [(a_id, (vec![], a_id))]);
        assert_eq!(bad, [b_id]);
        // b's server handles calls in order: once this one is answered,
        // the slow one has been answered (and dropped) too.
        let (replies, _) = multi_call::<Log>(&[b_id], "log", Ask::Get, HANG);
        assert_eq!(replies.len(), 1);
        sleep(Duration::from_millis(50));
        assert!(
            receive()
                .any(|u: Unknown| u)
                .timeout(Duration::ZERO)
                .is_none(),
            "a stray reply"
        );
    })
    .unwrap();
}

#[test]
fn abcast_reaches_every_server_in_order_and_skips_the_others() {
    let (a, _b, _d, ids) = cluster();
    let [a_id, b_id, ..] = ids;
    a.run(move || {
        for n in 1..=50u64 {
            abcast::<Log>(&ids, "log", n);
        }
        let want: Vec<u64> = (1..=50).collect();
        let t = Instant::now();
        loop {
            let (replies, _) = multi_call::<Log>(&[a_id, b_id], "log", Ask::Get, HANG);
            if replies.len() == 2 && replies.iter().all(|(_, (v, _))| v.len() == 50) {
                for (_, (v, _)) in replies {
                    assert_eq!(v, want, "in order");
                }
                break;
            }
            assert!(t.elapsed() < HANG, "the abcasts never all arrived");
            sleep(Duration::from_millis(10));
        }
    })
    .unwrap();
}
