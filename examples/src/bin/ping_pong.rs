//! The paper's first program: a parent and a child play ping-pong.
//!
//! The parent spawns a child that answers every `Ping` with a `Pong`; the
//! parent sends `N` pings (default 10 000), waits for each pong, then tells
//! the child to stop and prints the count.
//!
//! ```text
//! ping_pong [--rounds N]
//! ```

use graft_otp::prelude::*;
use std::time::Instant;

/// What the two players say to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Mobile)]
enum PingPong {
    /// From the parent, with its pid to answer to.
    Ping(Pid),
    /// From the child.
    Pong,
    /// From the parent: the game is over.
    Stop,
}

fn main() {
    env_logger::init();
    let args = graft_examples::NodeArgs::from_env("ping_pong");
    let rounds: u64 = args.num("--rounds").unwrap_or(10_000);
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    let (count, elapsed) = node
        .run(move || {
            let child = spawn(|| loop {
                match expect::<PingPong>() {
                    PingPong::Ping(from) => send(from, PingPong::Pong),
                    PingPong::Stop => break,
                    PingPong::Pong => {}
                }
            });
            let child_ref = monitor(child);
            let me = self_pid();
            let start = Instant::now();
            let mut count = 0u64;
            for _ in 0..rounds {
                send(child, PingPong::Ping(me));
                let pong = expect::<PingPong>();
                assert_eq!(pong, PingPong::Pong);
                count += 1;
            }
            let elapsed = start.elapsed();
            send(child, PingPong::Stop);
            let died: ProcessDied = expect();
            assert_eq!(died.monitor, child_ref);
            println!("ping_pong: child {child} stopped ({})", died.reason);
            (count, elapsed)
        })
        .expect("the root process finishes");
    println!("ping_pong: {count} round trips");
    println!(
        "ping_pong: {:.0} ns per round trip",
        elapsed.as_nanos() as f64 / count.max(1) as f64
    );
    node.shutdown();
}
