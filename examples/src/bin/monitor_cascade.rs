//! The paper's monitor/exit example, grown into a chain.
//!
//! Five processes `p0 - p1 - p2 - p3 - p4` are linked in a line (each one
//! spawns the next with `spawn_link`), and a sixth, `guard`, is linked to
//! `p4` but traps exits. The root process monitors all of them. Then it
//! kills `p0`: the exit signal travels down the links (a link is the paper's
//! `Succumb` monitor), each death is seen by the root's monitors (the
//! paper's `TrapExit` monitor) as an ordinary `ProcessDied` message, and the
//! cascade stops at `guard`, which receives the signal as an `ExitSignal`
//! message instead of dying.
//!
//! ```text
//! monitor_cascade [--length N]
//! ```

use graft_otp::prelude::*;
use std::time::Duration;

/// Sent to the root by each member of the chain once it is linked.
#[derive(Debug, Clone, Mobile)]
struct Ready {
    /// Position in the chain.
    index: usize,
    /// Its pid.
    pid: Pid,
}

/// Sent to the root by the guard when the cascade reaches it.
#[derive(Debug, Clone, Mobile)]
struct Caught(ExitSignal);

/// Member `index` of a chain of `len`: reports, spawns the next (linked),
/// then waits forever.
fn member(root: Pid, index: usize, len: usize) {
    send(
        root,
        Ready {
            index,
            pid: self_pid(),
        },
    );
    if index + 1 < len {
        spawn_link(move || member(root, index + 1, len));
    } else {
        // The end of the chain: a guard that traps exits.
        spawn_link(move || {
            trap_exits(true);
            send(
                root,
                Ready {
                    index: len,
                    pid: self_pid(),
                },
            );
            let sig: ExitSignal = expect();
            send(root, Caught(sig));
            // Still alive: it ends when the root says so.
            expect::<Go>();
        });
    }
    loop {
        // Nothing to do but be linked.
        expect::<Go>();
    }
}

/// Ends the guard (a chain member never gets one).
#[derive(Debug, Clone, Mobile)]
struct Go;

fn main() {
    env_logger::init();
    let args = graft_examples::NodeArgs::from_env("monitor_cascade");
    let len: usize = args.num("--length").filter(|&n| n > 0).unwrap_or(5);
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    node.run(move || {
        let root = self_pid();
        spawn(move || member(root, 0, len));
        let mut pids = vec![None; len + 1];
        for _ in 0..=len {
            let r: Ready = expect();
            pids[r.index] = Some(r.pid);
        }
        let pids: Vec<Pid> = pids.into_iter().map(|p| p.expect("all ready")).collect();
        let name = |p: Pid| match pids.iter().position(|&q| q == p) {
            Some(i) if i == len => "guard".to_string(),
            Some(i) => format!("p{i}"),
            None => p.to_string(),
        };
        let chain: Vec<String> = pids.iter().map(|&p| name(p)).collect();
        println!("monitor_cascade: chain {}", chain.join(" - "));
        let refs: Vec<MonitorRef> = pids.iter().map(|&p| monitor(p)).collect();

        println!("monitor_cascade: killing p0");
        exit(pids[0], ExitReason::Kill);
        for k in 0..len {
            let d: ProcessDied = expect();
            assert!(refs.contains(&d.monitor));
            println!(
                "monitor_cascade: death {}: {} ({})",
                k + 1,
                name(d.pid),
                d.reason
            );
        }
        let Caught(sig) = expect();
        println!(
            "monitor_cascade: guard trapped an exit from {} ({}) and lives on: {}",
            name(sig.from),
            sig.reason,
            is_alive(pids[len])
        );
        send(pids[len], Go);
        let d: ProcessDied = expect_timeout(Duration::from_secs(5)).expect("guard ends");
        println!(
            "monitor_cascade: {} ended ({}); cascade of {len} stopped at the guard",
            name(d.pid),
            d.reason
        );
    })
    .expect("the root process finishes");
    node.shutdown();
}
