//! dist_request: `graft::request` round trips (a request with its monitor,
//! the reply through a one-shot alias: one frame each way) to a process on
//! a node in another OS process, beside plain send/receive round trips in
//! the same run. Figures: us_per_request, us_per_roundtrip (the plain
//! ones), request_over_roundtrip.

use graft::*;
use graft_benches::{report, with_peer};
use std::time::{Duration, Instant};

const N: u64 = 50_000;
const BLOCK: u64 = 1_000;

#[derive(Mobile, Debug)]
struct Ask {
    n: u64,
    from: Alias,
}

fn main() {
    env_logger::init();
    with_peer(|node, peer| {
        node.run(move || {
            let server = spawn_on(peer, (), |()| loop {
                let Ask { n, from } = expect();
                reply(from, n);
            })
            .expect("remote spawn");
            let pong = spawn_on(peer, (), |()| loop {
                let from: Pid = expect();
                send(from, ());
            })
            .expect("remote spawn");
            let me = self_pid();
            let timeout = Some(Duration::from_secs(30));
            for _ in 0..2_000 {
                let _: u64 = request(server, |from| Ask { n: 1, from }, timeout).unwrap();
                send(pong, me);
                expect::<()>();
            }
            // Alternating blocks, so that the machine's noise falls on both.
            let (mut req_t, mut rt_t) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..N / BLOCK {
                let t0 = Instant::now();
                for n in 0..BLOCK {
                    let r: u64 = request(server, |from| Ask { n, from }, timeout).unwrap();
                    assert_eq!(r, n);
                }
                let t1 = Instant::now();
                for _ in 0..BLOCK {
                    send(pong, me);
                    expect::<()>();
                }
                let t2 = Instant::now();
                req_t += t1 - t0;
                rt_t += t2 - t1;
            }
            let per = [
                req_t.as_secs_f64() * 1e6 / N as f64,
                rt_t.as_secs_f64() * 1e6 / N as f64,
            ];
            exit(server, ExitReason::Kill);
            exit(pong, ExitReason::Kill);
            report("dist_request", "us_per_request", "us", per[0]);
            report("dist_request", "us_per_roundtrip", "us", per[1]);
            report(
                "dist_request",
                "request_over_roundtrip",
                "ratio",
                per[0] / per[1],
            );
            // The same request to a server on this node.
            let local = spawn(|| loop {
                let Ask { n, from } = expect();
                reply(from, n);
            });
            const LOCAL: u64 = 1_000_000;
            for n in 0..10_000 {
                let _: u64 = request(local, |from| Ask { n, from }, timeout).unwrap();
            }
            let t0 = Instant::now();
            for n in 0..LOCAL {
                let r: u64 = request(local, |from| Ask { n, from }, timeout).unwrap();
                assert_eq!(r, n);
            }
            let ns = t0.elapsed().as_secs_f64() * 1e9 / LOCAL as f64;
            exit(local, ExitReason::Kill);
            report("dist_request", "ns_per_local_request", "ns", ns);
        })
        .expect("bench");
    });
}
