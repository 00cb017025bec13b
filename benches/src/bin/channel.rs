//! bench `channel`: a token passed 1,000,000 times between two processes,
//! through a pair of rendezvous ports (`bounded(0)`) and through a pair of
//! unbounded ports. Prints `ns_per_hop_rendezvous` and `ns_per_hop_unbounded`
//! (best of three runs).

use graft::*;
use std::time::Instant;

/// Hops per run (one hop: one send and the matching receive).
const HOPS: u64 = 1_000_000;
const RUNS: usize = 3;

/// Passes a token `HOPS` times between the caller and an echo process over
/// two channels made by `make`; returns ns per hop.
fn ping_pong(make: fn() -> (SendPort<u64>, ReceivePort<u64>)) -> f64 {
    let (to_echo, echo_in) = make();
    let (echo_out, from_echo) = make();
    spawn(move || {
        for v in echo_in.iter() {
            if echo_out.send(v + 1).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut v = 0;
    for _ in 0..HOPS / 2 {
        to_echo.send(v).expect("echo alive");
        v = from_echo.recv().expect("echo alive");
    }
    let ns = start.elapsed().as_nanos() as f64 / HOPS as f64;
    assert_eq!(v, HOPS / 2);
    ns
}

fn main() {
    let _ = env_logger::try_init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    let (rendezvous, unbounded) = node
        .run(|| {
            let best = |make: fn() -> (SendPort<u64>, ReceivePort<u64>)| {
                (0..RUNS).map(|_| ping_pong(make)).fold(f64::MAX, f64::min)
            };
            (best(|| bounded(0)), best(channel))
        })
        .expect("bench runs");
    node.shutdown();
    graft_benches::report("channel", "ns_per_hop_rendezvous", "ns", rendezvous);
    graft_benches::report("channel", "ns_per_hop_unbounded", "ns", unbounded);
}
