//! Costs as the number of processes grows, as `growth:study(ring)` and
//! `growth:study({spawn, L})` in `../shared/anchors/erlang/growth.erl`
//! measure them:
//!
//! * `growth_ring.{ns_per_hop,setup_ms}_n{1000,10000,100000,1000000}`: a
//!   ring of N processes; 3,000,000 hops in all, timed once every process is
//!   parked (in receive, with an empty mailbox). `setup_ms` is the spawn of
//!   the ring, the wiring and the wait for all to park.
//! * `growth_spawn.{us_per_spawn,us_per_spawn_to_parked,rss_bytes_per_new_proc}_l{0,100000,1000000}`:
//!   100,000 more spawns while L processes are parked; `to_parked` waits
//!   until every new one has parked too.
//!
//! One difference from the Erlang study: the processes of one `spawn` study
//! are stopped before the next (Erlang leaves them alive, so its L = 1 M
//! study runs with 300 k more parked): a million and a third graft processes
//! would hold more memory than this shared machine can spare.
//!
//! `GROWTH_ONLY=ring` or `GROWTH_ONLY=spawn` runs one study;
//! `GROWTH_N=1000000` (a comma-separated list) picks the ring sizes or the
//! values of L (for profiling one of them).
use graft::*;
use graft_benches::{perf_ctl, report, rss_bytes, wait_all_waiting};
use std::time::Instant;

const HOPS: u64 = 3_000_000;
const NEW: usize = 100_000;

/// The ring's last hop tells the main process (Erlang's `ring_done`).
#[derive(Debug)]
struct RingDone;
impl Message for RingDone {}

/// `stop` and `stopped` of the spawn study.
#[derive(Debug)]
struct Stop;
impl Message for Stop {}
#[derive(Debug)]
struct Stopped;
impl Message for Stopped {}

/// Erlang's `wait_procs`: until only `base` processes are left.
fn wait_procs(base: usize) {
    while process_count() > base {
        sleep(std::time::Duration::from_millis(5));
    }
}

fn ring(main: Pid, n: usize) {
    let base = process_count();
    let t0 = Instant::now();
    let pids: Vec<Pid> = (0..n)
        .map(|_| {
            spawn(move || {
                let next: Pid = expect();
                loop {
                    match expect::<u64>() {
                        0 => send(main, RingDone),
                        k => send(next, k - 1),
                    }
                }
            })
        })
        .collect();
    for (i, &p) in pids.iter().enumerate() {
        send(p, pids[(i + 1) % n]);
    }
    wait_all_waiting(&pids);
    perf_ctl("enable");
    let t1 = Instant::now();
    send(pids[0], HOPS);
    expect::<RingDone>();
    let t2 = Instant::now();
    perf_ctl("disable");
    for &p in &pids {
        exit(p, ExitReason::Kill);
    }
    wait_procs(base);
    let b = "growth_ring";
    report(
        b,
        &format!("setup_ms_n{n}"),
        "ms",
        (t1 - t0).as_secs_f64() * 1e3,
    );
    report(
        b,
        &format!("ns_per_hop_n{n}"),
        "ns",
        (t2 - t1).as_secs_f64() * 1e9 / HOPS as f64,
    );
}

fn spawn_study(main: Pid, l: usize) {
    let body = move || {
        expect::<Stop>();
        send(main, Stopped);
    };
    let old: Vec<Pid> = (0..l).map(|_| spawn(body)).collect();
    wait_all_waiting(&old);
    let rss0 = rss_bytes();
    perf_ctl("enable");
    let t0 = Instant::now();
    let new: Vec<Pid> = (0..NEW).map(|_| spawn(body)).collect();
    let t1 = Instant::now();
    perf_ctl("disable");
    wait_all_waiting(&new);
    let t2 = Instant::now();
    let rss1 = rss_bytes();
    let b = "growth_spawn";
    report(
        b,
        &format!("us_per_spawn_l{l}"),
        "us",
        (t1 - t0).as_secs_f64() * 1e6 / NEW as f64,
    );
    report(
        b,
        &format!("us_per_spawn_to_parked_l{l}"),
        "us",
        (t2 - t0).as_secs_f64() * 1e6 / NEW as f64,
    );
    report(
        b,
        &format!("rss_bytes_per_new_proc_l{l}"),
        "bytes",
        (rss1 - rss0) as f64 / NEW as f64,
    );
    // Not in the Erlang study (see the module docs): free them all.
    for &p in old.iter().chain(&new) {
        send(p, Stop);
    }
    for _ in 0..old.len() + new.len() {
        expect::<Stopped>();
    }
}

fn main() {
    env_logger::init();
    let only = std::env::var("GROWTH_ONLY").unwrap_or_default();
    if let Err(e) = ensure_map_count(1_200_000) {
        eprintln!("growth_procs: vm.max_map_count too low ({e})");
        std::process::exit(2);
    }
    let node =
        Node::start(NodeConfig::new("127.0.0.1:0").max_processes(1_300_000)).expect("node starts");
    node.run(move || {
        let main = self_pid();
        let pick = |all: &[usize]| -> Vec<usize> {
            match std::env::var("GROWTH_N") {
                Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
                Err(_) => all.to_vec(),
            }
        };
        if only.is_empty() || only == "ring" {
            for n in pick(&[1_000, 10_000, 100_000, 1_000_000]) {
                ring(main, n);
            }
        }
        if only.is_empty() || only == "spawn" {
            for l in pick(&[0, 100_000, 1_000_000]) {
                spawn_study(main, l);
            }
        }
    })
    .expect("bench");
    node.shutdown();
}
