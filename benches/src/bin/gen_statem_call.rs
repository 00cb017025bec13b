//! 1,000,000 `call`s to a local gen_statem that flips between two states on
//! every call, in state-functions mode (Erlang anchor: `statem_bench.erl`,
//! `gen_statem:call` with the default timeout, `+S 2`). Prints
//! `ns_per_call`, the median of three rounds.
use graft_otp::gen_statem::{self, Event, GenStatem, StateFn, Transition};
use graft_otp::prelude::*;
use std::time::Instant;

const CALLS: u32 = 1_000_000;
const ROUNDS: usize = 3;

/// The anchor's machine: `off` and `on`, a count of calls as its data;
/// each `flip` call answers with the state it goes to.
struct Flip(u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    On,
    Off,
}

impl Flip {
    const OFF: StateFn<Flip> = StateFn::new("off", Flip::off);
    const ON: StateFn<Flip> = StateFn::new("on", Flip::on);

    fn off(&mut self, e: Event<Self>) -> Transition<Self> {
        match e {
            Event::Call((), from) => {
                self.0 += 1;
                Transition::next(Self::ON).reply(from, Side::On)
            }
            _ => Transition::keep(),
        }
    }

    fn on(&mut self, e: Event<Self>) -> Transition<Self> {
        match e {
            Event::Call((), from) => {
                self.0 += 1;
                Transition::next(Self::OFF).reply(from, Side::Off)
            }
            _ => Transition::keep(),
        }
    }
}

impl graft::Message for Side {}

impl GenStatem for Flip {
    type State = StateFn<Self>;
    type Call = ();
    type Cast = ();
    type Reply = Side;
    type Internal = ();
    fn init(&mut self) -> Transition<Self> {
        Transition::next(Self::OFF)
    }
    fn handle_event(&mut self, s: &StateFn<Self>, e: Event<Self>) -> Transition<Self> {
        s.call(self, e)
    }
}

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    let mut rounds: Vec<f64> = node
        .run(|| {
            let m = gen_statem::start(Flip(0)).expect("machine starts");
            for _ in 0..10_000 {
                m.call(()).expect("warm-up call");
            }
            let rounds = (0..ROUNDS)
                .map(|_| {
                    let t0 = Instant::now();
                    for _ in 0..CALLS {
                        let r = m.call(()).expect("call");
                        debug_assert!(matches!(r, Side::On | Side::Off));
                    }
                    t0.elapsed().as_nanos() as f64 / f64::from(CALLS)
                })
                .collect();
            m.stop(ExitReason::Normal).expect("machine stops");
            rounds
        })
        .expect("bench runs");
    node.shutdown();
    rounds.sort_by(f64::total_cmp);
    graft_benches::report("gen_statem_call", "ns_per_call", "ns", rounds[ROUNDS / 2]);
}
