//! sysmon: how fast a node recovers when processes hold its workers, and
//! what a stack overflow costs.
//! Figures:
//! * `ms_to_recover`: on 2 workers, two CPU hogs (no runtime calls) take
//!   both; from then until a process woken from outside runs (median of 15
//!   rounds; goal: at most 2 × long_schedule, 20 ms by default).
//! * `us_per_overflow`: a supervised child overflows its stack, exits with
//!   `stack_overflow` and is restarted (mean of 300 rounds).

use graft::*;
use graft_benches::report;
use graft_otp::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROUNDS: usize = 15;
const OVERFLOWS: usize = 300;

#[derive(Debug, Clone, Mobile)]
struct Go;

fn recover_ms(node: &Node) -> f64 {
    let mut samples = Vec::new();
    for _ in 0..ROUNDS {
        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::new(AtomicUsize::new(0));
        let times: Arc<Mutex<(Option<Instant>, Option<Instant>)>> = Arc::default();
        let t = times.clone();
        let waiter = node
            .spawn(move || {
                let _: Go = expect();
                t.lock().unwrap().1 = Some(Instant::now());
            })
            .unwrap();
        // The second hog, once running, wakes the waiter: from then on
        // both workers are held, and only a spare can run it.
        for (k, wake) in [None, Some(waiter)].into_iter().enumerate() {
            let (stop, up, t) = (stop.clone(), running.clone(), times.clone());
            node.spawn(move || {
                up.fetch_add(1, Ordering::SeqCst);
                if let Some(w) = wake {
                    t.lock().unwrap().0 = Some(Instant::now());
                    send(w, Go);
                }
                let t = Instant::now();
                while !stop.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(5) {
                    std::hint::spin_loop();
                }
                up.fetch_sub(1, Ordering::SeqCst);
            })
            .unwrap();
            while running.load(Ordering::SeqCst) <= k {
                std::thread::yield_now();
            }
        }
        let (t0, t1) = loop {
            if let (Some(a), Some(b)) = *times.lock().unwrap() {
                break (a, b);
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        stop.store(true, Ordering::Relaxed);
        while running.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        samples.push((t1 - t0).as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(100)); // the spares retire
    }
    if std::env::var_os("SYSMON_SAMPLES").is_some() {
        eprintln!("samples (ms): {samples:.1?}");
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn deep(n: u64, limit: u64) -> u64 {
    let pad = std::hint::black_box([n; 64]);
    if n == limit {
        return pad[0];
    }
    deep(n + 1, limit) + pad[1]
}

fn overflow_us(node: &Node) -> f64 {
    node.run(|| {
        let sup = Supervisor::new(Strategy::OneForOne)
            .intensity(1_000_000, Duration::from_secs(1))
            .child(ChildSpec::new("deep", || {
                Ok(spawn_link(|| {
                    let _: Go = expect();
                    deep(0, std::hint::black_box(u64::MAX));
                }))
            }))
            .start()
            .expect("supervisor");
        let t0 = Instant::now();
        for _ in 0..OVERFLOWS {
            let child = supervisor::get_child(sup, "deep").expect("child");
            let r = monitor(child);
            send(child, Go);
            let d = receive()
                .when(move |d: &ProcessDied| d.monitor == r, |d: ProcessDied| d)
                .wait();
            assert_eq!(d.reason, ExitReason::StackOverflow);
            while supervisor::get_child(sup, "deep").is_none_or(|p| p == child) {
                yield_now();
            }
        }
        t0.elapsed().as_secs_f64() * 1e6 / OVERFLOWS as f64
    })
    .expect("bench")
}

fn main() {
    // Each overflow is logged at error level: keep them off the bench's
    // output unless asked for.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("off")).init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).expect("node");
    report("sysmon", "ms_to_recover", "ms", recover_ms(&node));
    report("sysmon", "us_per_overflow", "us", overflow_us(&node));
    node.shutdown();
}
