//! The paper's counter server, as a gen_server: clients add to it with casts
//! and read it with calls, first on one node, then on another node (the
//! server itself travels there with `gen_server::start_on`).
//!
//! Run with `cargo run -p graft-examples --bin counter`.
use graft_otp::prelude::*;

/// The server's state: the count.
#[derive(Default, Mobile)]
struct Counter {
    count: i64,
}

/// Requests that want an answer.
#[derive(Debug, Mobile)]
enum Query {
    /// The current count.
    Get,
    /// The current count, then zero.
    Reset,
}

impl GenServer for Counter {
    type Call = Query;
    type Cast = i64;
    type Reply = i64;

    fn init(&mut self) -> Result<(), ExitReason> {
        println!("counter: started as {}", self_pid());
        Ok(())
    }

    fn handle_call(&mut self, q: Query, _from: &ReplyTo<i64>) -> CallResult<i64> {
        match q {
            Query::Get => CallResult::Reply(self.count),
            Query::Reset => CallResult::Reply(std::mem::take(&mut self.count)),
        }
    }

    fn handle_cast(&mut self, n: i64) -> Flow {
        self.count += n;
        Flow::Continue
    }

    fn terminate(&mut self, reason: &ExitReason) {
        println!("counter: stopping ({reason}) at {}", self.count);
    }
}

const CLIENTS: i64 = 10;
const INCREMENTS: i64 = 100;

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    node.run(|| {
        let counter = gen_server::start_named("counter", Counter::default()).expect("starts");
        let me = self_pid();
        for _ in 0..CLIENTS {
            spawn(move || {
                // Clients find the server by name.
                let counter = Server::<Counter>::whereis("counter").expect("registered");
                for _ in 0..INCREMENTS {
                    counter.cast(1);
                }
                // A call after our casts: they are all counted by now.
                let seen = counter.call(Query::Get).expect("call");
                send(me, seen);
            });
        }
        let seen: Vec<i64> = (0..CLIENTS).map(|_| expect::<i64>()).collect();
        println!(
            "counter: {CLIENTS} clients added {}; the last one saw {}",
            CLIENTS * INCREMENTS,
            seen.iter().max().copied().unwrap_or(0)
        );
        println!(
            "counter: value = {}",
            counter.call(Query::Get).expect("get")
        );
        println!(
            "counter: reset from {}",
            counter.call(Query::Reset).expect("reset")
        );
        println!(
            "counter: value = {}",
            counter.call(Query::Get).expect("get")
        );
        counter.stop(ExitReason::Normal).expect("stops");
        match counter.call(Query::Get) {
            Err(e) => println!("counter: after stop, a call fails: {e}"),
            Ok(v) => println!("counter: still answering {v}?"),
        }
    })
    .expect("the root process finishes");

    // The same server on another node (over TCP on 127.0.0.1).
    let other = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    let other_id = node.connect(other.addr()).expect("connect");
    node.run(move || {
        let counter =
            gen_server::start_on(other_id, Counter { count: 100 }).expect("starts remotely");
        println!(
            "counter: remote counter runs on the other node: {}",
            counter.pid().node() == other_id
        );
        for n in 1..=10 {
            counter.cast_remote(n);
        }
        println!(
            "counter: remote value = {}",
            counter.call_remote(Query::Get).expect("remote get")
        );
    })
    .expect("the root process finishes");
    other.shutdown();
    node.shutdown();
}
