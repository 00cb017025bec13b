//! growth_dist: the distribution part of the growth study, as
//! `../shared/anchors/erlang/growth.erl`'s `dist/1` measures it, against a
//! node in another OS process:
//!
//! * `growth_dist_throughput.msgs_per_s_s{1,4,16}`: 1,000,000 small
//!   messages in all from S local senders to S receivers on the peer;
//! * `growth_dist_rtt.*_idle`: ping round trips (5,000 or 3 s, after 1,000
//!   warm-up), p50/p99 in µs, the sample count, this process's RSS;
//! * `growth_dist_rtt.*_bulk`: the same while one local process streams
//!   small messages to the peer in batches of 1,000 (from 200 ms before
//!   the pings until after them): the bulk rate and this process's RSS.

use graft::*;
use graft_benches::{report, rss_bytes, with_peer};
use std::time::{Duration, Instant};

const TOTAL: u64 = 1_000_000;

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)] as f64
}

fn rtts(pong: Pid, n: usize, window: Duration) -> Vec<u64> {
    let me = self_pid();
    let end = Instant::now() + window;
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let t = Instant::now();
        if t >= end {
            break;
        }
        send(pong, me);
        let _: u8 = expect();
        v.push(t.elapsed().as_nanos() as u64);
    }
    v
}

fn main() {
    env_logger::init();
    with_peer(|node, peer| {
        node.run(move || {
            let me = self_pid();
            for s in [1u64, 4, 16] {
                let per = TOTAL / s;
                let rcvs: Vec<Pid> = (0..s)
                    .map(|_| {
                        spawn_on(peer, (me, per), |(me, per): (Pid, u64)| {
                            for _ in 0..per {
                                let _tick: u64 = expect();
                            }
                            send(me, String::from("rdone"));
                        })
                        .expect("remote spawn")
                    })
                    .collect();
                let senders: Vec<Pid> = rcvs
                    .iter()
                    .map(|&r| {
                        spawn(move || {
                            let _go: u8 = expect();
                            for i in 0..per {
                                send(r, i);
                            }
                        })
                    })
                    .collect();
                sleep(Duration::from_millis(50));
                let t0 = Instant::now();
                for p in &senders {
                    send(*p, 1u8);
                }
                for _ in 0..s {
                    let _: String = expect();
                }
                report(
                    "growth_dist_throughput",
                    &format!("msgs_per_s_s{s}"),
                    "msg_per_s",
                    (s * per) as f64 / t0.elapsed().as_secs_f64(),
                );
            }
            let pong = spawn_on(peer, (), |()| loop {
                let from: Pid = expect();
                send(from, 1u8);
            })
            .expect("remote spawn");
            rtts(pong, 1000, Duration::from_secs(3));
            let mut idle = rtts(pong, 5000, Duration::from_secs(3));
            idle.sort_unstable();
            let rss_before = rss_bytes();
            let emit =
                |metric: &str, unit: &str, v: f64| report("growth_dist_rtt", metric, unit, v);
            emit("p50_us_idle", "us", pct(&idle, 0.5) / 1e3);
            emit("p99_us_idle", "us", pct(&idle, 0.99) / 1e3);
            emit("samples_idle", "count", idle.len() as f64);
            emit("sender_rss_mb_idle", "MB", rss_before as f64 / 1e6);
            let bulk_rcv = spawn_on(peer, me, |me: Pid| {
                let mut n = 0u64;
                loop {
                    let stop = receive().on(|_: u64| false).on(|_: String| true).wait();
                    if stop {
                        break;
                    }
                    n += 1;
                }
                send(me, n);
            })
            .expect("remote spawn");
            let bulk = spawn(move || {
                let mut i = 0u64;
                loop {
                    for _ in 0..1000 {
                        send(bulk_rcv, i);
                        i += 1;
                    }
                    if expect_timeout::<u8>(Duration::ZERO).is_some() {
                        send(bulk_rcv, String::from("bulk_stop"));
                        return;
                    }
                }
            });
            let tb = Instant::now();
            sleep(Duration::from_millis(200));
            let raw = rtts(pong, 5000, Duration::from_secs(3));
            let rss = rss_bytes();
            send(bulk, 1u8);
            let cnt: u64 = expect();
            let bel = tb.elapsed().as_secs_f64();
            let mut loaded = raw.clone();
            loaded.sort_unstable();
            emit("p50_us_bulk", "us", pct(&loaded, 0.5) / 1e3);
            emit("p99_us_bulk", "us", pct(&loaded, 0.99) / 1e3);
            emit("samples_bulk", "count", loaded.len() as f64);
            emit("bulk_msgs_per_s_bulk", "msg_per_s", cnt as f64 / bel);
            emit("sender_rss_mb_bulk", "MB", rss as f64 / 1e6);
            emit(
                "first_rtt_us_bulk",
                "us",
                raw.first().copied().unwrap_or(0) as f64 / 1e3,
            );
            emit(
                "last_rtt_us_bulk",
                "us",
                raw.last().copied().unwrap_or(0) as f64 / 1e3,
            );
        })
        .expect("bench");
        // Which lanes the traffic took (GRAFT_BENCH_LANES): the ping and
        // the bulk streamer are different processes, on their pids' lanes.
        if graft_benches::lanes_wanted() > 1 {
            for p in node.stats().peers {
                eprintln!("frames per lane to {}: {:?}", p.name, p.lane_frames_out);
            }
        }
    });
}
