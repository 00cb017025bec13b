//! dist_large: large messages to a process on a node in another OS process.
//! Figures: mb_per_s_1mib, mb_per_s_64mib, mb_per_s_512mib (payload bytes
//! over the time from the first send to the last acknowledgement), and the
//! ping round trip on the same connection while a 512 MiB message is in
//! flight (ping_p50_us_during_512mib, ping_p99_us_during_512mib,
//! pings_during_512mib).

use graft::*;
use graft_benches::{report, with_peer};
use std::time::{Duration, Instant};

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)] as f64
}

fn main() {
    env_logger::init();
    with_peer(|node, peer| {
        node.run(move || {
            let me = self_pid();
            let sink = spawn_on(peer, me, |report_to| loop {
                let (seq, v): (u64, Vec<u8>) = expect();
                send(report_to, (seq, v.len() as u64));
            })
            .expect("remote spawn");
            for (mib, reps) in [(1usize, 256u64), (64, 8), (512, 2)] {
                let len = mib << 20;
                let mut bytes = 0u64;
                let t0 = Instant::now();
                for seq in 0..reps {
                    // Each message is made fresh (a clone would be as dear).
                    send(sink, (seq, vec![seq as u8; len]));
                    bytes += len as u64;
                }
                for seq in 0..reps {
                    let (s, l): (u64, u64) = expect();
                    assert_eq!((s, l), (seq, len as u64));
                }
                let el = t0.elapsed().as_secs_f64();
                report(
                    "dist_large",
                    &format!("mb_per_s_{mib}mib"),
                    "MB/s",
                    bytes as f64 / 1e6 / el,
                );
            }
            // Ping round trips while a 512 MiB message is in flight.
            let echo = spawn_on(peer, (), |()| loop {
                let from: Pid = expect();
                send(from, 1u8);
            })
            .expect("remote spawn");
            let bulk = spawn(move || {
                send(sink, (99u64, vec![7u8; 512 << 20]));
                let (s, _): (u64, u64) = expect();
                assert_eq!(s, 99);
                send(me, String::from("done"));
            });
            let _ = bulk;
            let mut rtts = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(120);
            while Instant::now() < deadline {
                let t = Instant::now();
                send(echo, me);
                let done = receive()
                    .on(|_: u8| false)
                    .on(|_: String| true)
                    .timeout(Duration::from_secs(120))
                    .expect("pong");
                if done {
                    break;
                }
                rtts.push(t.elapsed().as_nanos() as u64);
            }
            rtts.sort_unstable();
            report(
                "dist_large",
                "ping_p50_us_during_512mib",
                "us",
                pct(&rtts, 0.5) / 1e3,
            );
            report(
                "dist_large",
                "ping_p99_us_during_512mib",
                "us",
                pct(&rtts, 0.99) / 1e3,
            );
            report(
                "dist_large",
                "pings_during_512mib",
                "count",
                rtts.len() as f64,
            );
        })
        .expect("bench");
    });
}
