//! Many callers on one server, as `growth:study(callers)` in
//! `../shared/anchors/erlang/growth.erl`: one gen_server, C callers (1, 10,
//! 100, 1,000) parked until all are waiting, then told to go; each loops
//! `call` until 2 s after the go, timing every call, and sends its samples
//! home. Prints `growth_callers.{calls_per_s,p50_us,p99_us,
//! min_calls_per_caller,max_calls_per_caller}_cC`: calls per second over the
//! time to the last caller's end, the median and 99th percentile of every
//! call's latency, and the fewest and most calls one caller made.
//!
//! `GROWTH_CALLERS=1000` (a comma list) runs only those C; two workers, as
//! the anchor's `+S 2`. First prints `machine.core_to_core_ns`, the cost of
//! a cache line's round trip between the two CPUs the workers run on: the
//! figures at C = 1,000 move with it (see `graft_benches::core_to_core_ns`).
use graft_otp::prelude::*;
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_secs(2);

struct Pong(u64);

impl GenServer for Pong {
    type Call = ();
    type Cast = ();
    type Reply = u8;
    fn handle_call(&mut self, _: (), _: &ReplyTo<u8>) -> CallResult<u8> {
        self.0 += 1;
        CallResult::Reply(1)
    }
}

/// The go signal: the deadline.
struct Go(Instant);
impl Message for Go {}

/// One caller's latencies (ns) and the time it stopped.
struct Samples(Vec<u64>, Instant);
impl Message for Samples {}

/// Erlang's `pct/2`: the element at `trunc(len * p) + 1` (1-based), capped.
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    sorted[i]
}

fn study(c: usize) -> Vec<(String, f64)> {
    let server = gen_server::start(Pong(0)).expect("server starts");
    let main = self_pid();
    let pids: Vec<Pid> = (0..c)
        .map(|_| {
            spawn(move || {
                let Go(deadline) = expect::<Go>();
                let mut lat = Vec::with_capacity(1024);
                loop {
                    let t = Instant::now();
                    if t >= deadline {
                        break;
                    }
                    server.call(()).expect("call");
                    lat.push(t.elapsed().as_nanos() as u64);
                }
                send(main, Samples(lat, Instant::now()));
            })
        })
        .collect();
    graft_benches::wait_all_waiting(&pids);
    let go = Instant::now();
    let deadline = go + WINDOW;
    for &p in &pids {
        send(p, Go(deadline));
    }
    let (mut all, mut per, mut end) = (Vec::new(), Vec::with_capacity(c), go);
    for _ in 0..c {
        let Samples(lat, e) = expect::<Samples>();
        per.push(lat.len() as u64);
        all.extend_from_slice(&lat);
        end = end.max(e);
    }
    server.stop(ExitReason::Normal).expect("server stops");
    all.sort_unstable();
    per.sort_unstable();
    let secs = (end - go).as_secs_f64();
    vec![
        (format!("calls_per_s_c{c}"), all.len() as f64 / secs),
        (format!("p50_us_c{c}"), pct(&all, 0.50) as f64 / 1e3),
        (format!("p99_us_c{c}"), pct(&all, 0.99) as f64 / 1e3),
        (format!("min_calls_per_caller_c{c}"), per[0] as f64),
        (format!("max_calls_per_caller_c{c}"), per[c - 1] as f64),
    ]
}

fn main() {
    env_logger::init();
    if let Some(ns) = graft_benches::core_to_core_ns() {
        graft_benches::report("machine", "core_to_core_ns", "ns", ns);
    }
    let cs: Vec<usize> = std::env::var("GROWTH_CALLERS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 10, 100, 1000]);
    let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).expect("node starts");
    for c in cs {
        let figures = node.run(move || study(c)).expect("bench runs");
        for (metric, v) in figures {
            let unit = if metric.contains("_us_") { "us" } else { "1" };
            graft_benches::report("growth_callers", &metric, unit, v);
        }
    }
    node.shutdown();
}
