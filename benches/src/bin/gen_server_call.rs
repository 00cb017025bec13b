//! 1,000,000 `call`s to a local gen_server (Erlang anchor: `gen_server:call`
//! with its default 5 s timeout, `+S 2`). Prints `ns_per_call`, the median of
//! three rounds; then `us_per_remote_call`: 10,000 calls to a server on a
//! node in another OS process (127.0.0.1). `GSC_CALLS` sets the calls per
//! round and skips the remote part (for instruction counts under callgrind).
use graft_otp::prelude::*;
use std::time::Instant;

const CALLS: u32 = 1_000_000;
const ROUNDS: usize = 3;

/// The anchor's server: answers `ping` with `pong`, counting calls.
#[derive(Mobile)]
struct Pong(u64);

impl GenServer for Pong {
    type Call = ();
    type Cast = ();
    type Reply = u8;
    fn handle_call(&mut self, _: (), _: &ReplyTo<u8>) -> CallResult<u8> {
        self.0 += 1;
        CallResult::Reply(1)
    }
}

const REMOTE_CALLS: u32 = 10_000;

fn main() {
    env_logger::init();
    let local_only: Option<u32> = std::env::var("GSC_CALLS").ok().and_then(|v| v.parse().ok());
    let calls = local_only.unwrap_or(CALLS);
    let remote = if local_only.is_some() {
        0.0
    } else {
        remote_us_per_call()
    };
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    let mut rounds: Vec<f64> = node
        .run(move || {
            let server = gen_server::start(Pong(0)).expect("server starts");
            for _ in 0..10_000 {
                server.call(()).expect("warm-up call");
            }
            let rounds = (0..ROUNDS)
                .map(|_| {
                    let t0 = Instant::now();
                    for _ in 0..calls {
                        let r = server.call(()).expect("call");
                        debug_assert_eq!(r, 1);
                    }
                    t0.elapsed().as_nanos() as f64 / f64::from(calls)
                })
                .collect();
            server.stop(ExitReason::Normal).expect("server stops");
            rounds
        })
        .expect("bench runs");
    node.shutdown();
    rounds.sort_by(f64::total_cmp);
    graft_benches::report("gen_server_call", "ns_per_call", "ns", rounds[ROUNDS / 2]);
    if local_only.is_none() {
        graft_benches::report("gen_server_call", "us_per_remote_call", "us", remote);
    }
}

fn remote_us_per_call() -> f64 {
    graft_benches::with_peer(|node, peer| {
        node.run(move || {
            let server = gen_server::start_on(peer, Pong(0)).expect("remote server starts");
            for _ in 0..100 {
                server.call_remote(()).expect("warm-up call");
            }
            let t0 = Instant::now();
            for _ in 0..REMOTE_CALLS {
                server.call_remote(()).expect("remote call");
            }
            t0.elapsed().as_secs_f64() * 1e6 / f64::from(REMOTE_CALLS)
        })
        .expect("remote bench runs")
    })
}
