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
//! * `growth_timers.{ready_ms,all_timed_out_ms,last_late_ms,fire_spread_ms,cpu_wait_pct,cpu_wait_s,cpu_fire_s,cpu_total_s}`:
//!   as `growth:study(timers)`, 100,000 processes each tell the main
//!   process they are ready and wait in a receive that nothing matches,
//!   with a 1 s timeout, then tell it they timed out. `ready_ms`: all
//!   ready; `all_timed_out_ms`: all timed out (both from the first spawn);
//!   `last_late_ms`: how far past 1 s after "all ready" the last one came;
//!   `fire_spread_ms`: from the first timeout heard to the last; the CPU
//!   (this OS process's, from `/proc/self/stat` as Erlang's study reads
//!   it) while they wait (`cpu_wait_s`, and in percent of the wait), while
//!   they fire, and in all.
//!
//! `GROWTH_ONLY=ring`, `GROWTH_ONLY=spawn` or `GROWTH_ONLY=timers` runs one study;
//! `GROWTH_N=1000000` (a comma-separated list) picks the ring sizes or the
//! values of L (for profiling one of them).
use graft::*;
use graft_benches::{cpu_seconds, perf_ctl, report, rss_bytes, wait_all_waiting};
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

/// `ready`, `timed_out` and `never` of the timers study.
#[derive(Debug)]
struct Ready;
impl Message for Ready {}
#[derive(Debug)]
struct TimedOut;
impl Message for TimedOut {}
#[derive(Debug)]
struct Never;
impl Message for Never {}

fn timers_study(main: Pid) {
    const N: usize = 100_000;
    let base = process_count();
    let c0 = cpu_seconds();
    let t0 = Instant::now();
    for _ in 0..N {
        spawn(move || {
            send(main, Ready);
            let fired = receive()
                .on(|_: Never| ())
                .timeout(std::time::Duration::from_secs(1))
                .is_none();
            if fired {
                send(main, TimedOut);
            }
        });
    }
    for _ in 0..N {
        expect::<Ready>();
    }
    let (tr, cr) = (Instant::now(), cpu_seconds());
    expect::<TimedOut>();
    let (tf, cf) = (Instant::now(), cpu_seconds());
    for _ in 1..N {
        expect::<TimedOut>();
    }
    let (tl, cl) = (Instant::now(), cpu_seconds());
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    let b = "growth_timers";
    report(b, "ready_ms", "ms", ms(t0, tr));
    report(b, "all_timed_out_ms", "ms", ms(t0, tl));
    report(b, "last_late_ms", "ms", ms(tr, tl) - 1000.0);
    report(b, "fire_spread_ms", "ms", ms(tf, tl));
    report(
        b,
        "cpu_wait_pct",
        "%",
        100.0 * (cf - cr) / (tf - tr).as_secs_f64(),
    );
    report(b, "cpu_wait_s", "s", cf - cr);
    report(b, "cpu_fire_s", "s", cl - cf);
    report(b, "cpu_total_s", "s", cl - c0);
    wait_procs(base);
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
        if only.is_empty() || only == "timers" {
            timers_study(main);
        }
    })
    .expect("bench");
    node.shutdown();
}
