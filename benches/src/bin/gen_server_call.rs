//! 1,000,000 `call`s to a local gen_server (Erlang anchor: `gen_server:call`
//! with its default 5 s timeout, `+S 2`). Prints `ns_per_call`, the median of
//! three rounds.
use graft_otp::prelude::*;
use std::time::Instant;

const CALLS: u32 = 1_000_000;
const ROUNDS: usize = 3;

/// The anchor's server: answers `ping` with `pong`, counting calls.
struct Pong(u64);

impl GenServer for Pong {
    type Call = ();
    type Cast = ();
    type Reply = &'static str;
    fn handle_call(&mut self, _: (), _: &ReplyTo<&'static str>) -> CallResult<&'static str> {
        self.0 += 1;
        CallResult::Reply("pong")
    }
}

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    let mut rounds: Vec<f64> = node
        .run(|| {
            let server = gen_server::start(Pong(0)).expect("server starts");
            for _ in 0..10_000 {
                server.call(()).expect("warm-up call");
            }
            let rounds = (0..ROUNDS)
                .map(|_| {
                    let t0 = Instant::now();
                    for _ in 0..CALLS {
                        let r = server.call(()).expect("call");
                        debug_assert_eq!(r, "pong");
                    }
                    t0.elapsed().as_nanos() as f64 / f64::from(CALLS)
                })
                .collect();
            server.stop(ExitReason::Normal).expect("server stops");
            rounds
        })
        .expect("bench runs");
    node.shutdown();
    rounds.sort_by(f64::total_cmp);
    graft_benches::report("gen_server_call", "ns_per_call", "ns", rounds[ROUNDS / 2]);
}
