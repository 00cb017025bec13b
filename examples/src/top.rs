//! `graft-node top`: the busiest processes of a node, refreshing, like
//! Erlang's `etop`.
//!
//! It starts a small node of its own (same cookie), joins the node at
//! `--node ADDR`, and every `--every` ms (default 2000) prints the node's
//! figures and the processes that ran most since the previous screen (run
//! time, then mailbox length). `--count N` stops after N screens (default:
//! run until killed).

use crate::NodeArgs;
use graft::observe::{NodeStats, ProcessSummary};
use graft::*;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

/// One screen: the node's figures and the `rows` busiest processes by run
/// time since `before` (then by mailbox length).
///
/// ```
/// use graft_examples::top::screen;
/// let node = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0")).unwrap();
/// let s = screen(&node.stats(), &node.process_list(), &Default::default(), 10);
/// assert!(s.contains("PID"));
/// node.shutdown();
/// ```
pub fn screen(
    stats: &NodeStats,
    list: &[ProcessSummary],
    before: &HashMap<Pid, u64>,
    rows: usize,
) -> String {
    let mut o = String::new();
    let util: Vec<String> = stats
        .utilisation
        .iter()
        .map(|u| format!("{:.0}%", u * 100.0))
        .collect();
    let _ = writeln!(
        o,
        "{}  up {}s  processes {}  run queues {:?}  utilisation [{}]  mail {}  restarts {}",
        stats.name,
        stats.uptime_ms / 1000,
        stats.processes,
        stats.run_queue,
        util.join(" "),
        stats.mail_queued,
        stats.restarts
    );
    for p in &stats.peers {
        let rtt = p
            .heartbeat_rtt_us
            .map_or_else(|| "-".to_string(), |us| format!("{:.2}ms", us as f64 / 1e3));
        let _ = writeln!(
            o,
            "  peer {}  in {} B  out {} B  queued {} B  heartbeat rtt {rtt}",
            p.name, p.bytes_in, p.bytes_out, p.queued_bytes
        );
    }
    let _ = writeln!(
        o,
        "{:<22} {:<20} {:<44} {:>9} {:>12} {:>8} {:>10}",
        "PID", "NAME", "INITIAL CALL", "STATUS", "RUN TIME(ms)", "MAILBOX", "RUNS"
    );
    let mut busy: Vec<(u64, &ProcessSummary)> = list
        .iter()
        .map(|p| {
            let prev = before.get(&p.pid).copied().unwrap_or(0);
            (p.run_time_ns.saturating_sub(prev), p)
        })
        .collect();
    busy.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.mailbox_len.cmp(&a.1.mailbox_len)));
    for (delta, p) in busy.into_iter().take(rows) {
        let mut call = p.initial_call.clone();
        call.truncate(44);
        let _ = writeln!(
            o,
            "{:<22} {:<20} {:<44} {:>9} {:>12.3} {:>8} {:>10}",
            p.pid.to_string(),
            p.name.as_deref().unwrap_or(""),
            call,
            format!("{:?}", p.status).to_lowercase(),
            delta as f64 / 1e6,
            p.mailbox_len,
            p.runs
        );
    }
    o
}

/// Runs `graft-node top` with `args`; returns the exit code.
pub fn run(args: &NodeArgs) -> i32 {
    let Some(addr) = args.get("--node").and_then(|a| a.parse().ok()) else {
        eprintln!("graft-node top: --node ADDR is required (the node's listen address)");
        return 2;
    };
    let every = Duration::from_millis(args.num("--every").unwrap_or(2000));
    let count: Option<u64> = args.num("--count");
    let rows: usize = args.num("--rows").unwrap_or(20);
    let node = match Node::start(args.config()) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("graft-node top: {e}");
            return 1;
        }
    };
    let peer = match node.connect(addr) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("graft-node top: cannot join {addr}: {e}");
            return 1;
        }
    };
    let r = node.run(move || {
        let mut before: HashMap<Pid, u64> = HashMap::new();
        let mut n = 0u64;
        loop {
            let (stats, list) = match (observe::node_stats_on(peer), observe::process_list_on(peer))
            {
                (Ok(s), Ok(l)) => (s, l),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("graft-node top: {e}");
                    return 1;
                }
            };
            // Clear the screen on a terminal; plain lines otherwise.
            print!("\x1b[2J\x1b[H{}", screen(&stats, &list, &before, rows));
            println!();
            before = list.iter().map(|p| (p.pid, p.run_time_ns)).collect();
            n += 1;
            if count.is_some_and(|c| n >= c) {
                return 0;
            }
            sleep(every);
        }
    });
    node.shutdown();
    r.unwrap_or(1)
}
