//! Costs as the work grows. `growth_mailbox.us_per_call_n{0,100,10000,100000}`:
//! a process holds N unmatched messages and makes 10,000 gen_server calls to
//! a local server (after 100 warm-up calls), as `growth:study(mailbox)` in
//! `../shared/anchors/erlang/growth.erl`. Median of three rounds per N; the
//! N messages are checked to be still there, in order, afterwards.
use graft_otp::prelude::*;
use std::time::{Duration, Instant};

const CALLS: u32 = 10_000;
const ROUNDS: usize = 3;

struct Pong;

impl GenServer for Pong {
    type Call = ();
    type Cast = ();
    type Reply = u8;
    fn handle_call(&mut self, _: (), _: &ReplyTo<u8>) -> CallResult<u8> {
        CallResult::Reply(1)
    }
}

/// The junk of the Erlang workload (`{junk, I}`).
#[derive(Debug)]
struct Junk(u64);
impl Message for Junk {}

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).expect("node starts");
    let figures = node
        .run(|| {
            let server = gen_server::start(Pong).expect("server starts");
            let main = self_pid();
            let mut out = Vec::new();
            for n in [0u64, 100, 10_000, 100_000] {
                let mut rounds: Vec<f64> = (0..ROUNDS)
                    .map(|_| {
                        spawn(move || {
                            let me = self_pid();
                            for i in 0..n {
                                send(me, Junk(i));
                            }
                            for _ in 0..100 {
                                server.call(()).expect("warm-up call");
                            }
                            let t0 = Instant::now();
                            for _ in 0..CALLS {
                                server.call(()).expect("call");
                            }
                            let us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(CALLS);
                            for i in 0..n {
                                let j = receive()
                                    .on(|j: Junk| j.0)
                                    .timeout(Duration::ZERO)
                                    .expect("the junk is still there");
                                assert_eq!(j, i, "the junk stays in order");
                            }
                            send(main, us);
                        });
                        expect::<f64>()
                    })
                    .collect();
                rounds.sort_by(f64::total_cmp);
                out.push((n, rounds[ROUNDS / 2]));
            }
            server.stop(ExitReason::Normal).expect("server stops");
            out
        })
        .expect("bench runs");
    node.shutdown();
    for (n, us) in figures {
        graft_benches::report("growth_mailbox", &format!("us_per_call_n{n}"), "us", us);
    }
}
