//! The system monitor keeps a node live while processes hold its workers
//! (CPU loops, blocking calls outside `blocking`), and reports what it sees.
//! Times here are hang guards only: the tests assert that things happen.

use graft::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HANG: Duration = Duration::from_secs(20);

fn node(workers: usize) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(workers)
            .cookie("sysmon-test"),
    )
    .expect("node starts")
}

/// Set by a hog that gave up waiting for `stop` (the hang guard): whatever
/// happened meanwhile happened only once the hogs let go.
static GAVE_UP: AtomicBool = AtomicBool::new(false);

/// Until `stop`, hold the worker: spin without runtime calls, or sleep the
/// OS thread.
fn hog(stop: Arc<AtomicBool>, blocking_sleep: bool) {
    let t = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if t.elapsed() > HANG {
            GAVE_UP.store(true, Ordering::Relaxed);
            return;
        }
        if blocking_sleep {
            std::thread::sleep(Duration::from_millis(20));
        } else {
            std::hint::spin_loop();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Mobile)]
struct Tick(u32);

/// Two hogs on two workers; a ticker must still tick five times.
fn ticker_survives(blocking_sleep: bool) {
    let node = node(2);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let ticks = node
        .run(move || {
            let me = self_pid();
            let hogs: Vec<Pid> = (0..2)
                .map(|_| {
                    let s = s.clone();
                    spawn(move || hog(s, blocking_sleep))
                })
                .collect();
            // Let the hogs take both workers.
            std::thread::sleep(Duration::from_millis(30));
            let ticker = spawn(move || {
                for i in 0.. {
                    sleep(Duration::from_millis(10));
                    send(me, Tick(i));
                }
            });
            let mut got = 0;
            while got < 5 {
                match receive().on(|t: Tick| t).timeout(HANG) {
                    Some(_) => got += 1,
                    None => break,
                }
            }
            s.store(true, Ordering::Relaxed);
            exit(ticker, ExitReason::Kill);
            for h in hogs {
                let r = monitor(h);
                let _ = receive()
                    .when(move |d: &ProcessDied| d.monitor == r, |_| ())
                    .timeout(HANG);
            }
            got
        })
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(ticks, 5, "the ticker was starved by the hogs");
    assert!(
        !GAVE_UP.load(Ordering::Relaxed),
        "ticks came only after the hogs gave up"
    );
    node.shutdown();
}

#[test]
fn two_cpu_hogs_do_not_stop_a_ticker() {
    ticker_survives(false);
}

#[test]
fn two_blocking_sleeps_do_not_stop_a_ticker() {
    ticker_survives(true);
}

#[test]
fn a_peer_call_is_answered_while_hogs_hold_the_workers() {
    let a = node(2);
    let b = node(2);
    let a_id = b.connect(a.addr()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    a.run(move || {
        let echo = spawn(|| loop {
            let (from, n): (Pid, u32) = expect();
            send(from, n * 2);
        });
        register("echo", echo).unwrap();
        for _ in 0..2 {
            let s = s.clone();
            spawn(move || hog(s, false));
        }
        std::thread::sleep(Duration::from_millis(30));
    })
    .unwrap();
    let answers = b
        .run(move || {
            (0..3u32)
                .map(|i| {
                    send_to(("echo", a_id), (self_pid(), i)).unwrap();
                    receive().on(|n: u32| n).timeout(HANG)
                })
                .collect::<Vec<_>>()
        })
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(answers, vec![Some(0), Some(2), Some(4)]);
    assert!(
        !GAVE_UP.load(Ordering::Relaxed),
        "answers came only after the hogs gave up"
    );
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_subscriber_hears_of_a_long_schedule() {
    let node = node(2);
    node.run(|| {
        system_monitor(
            self_pid(),
            SysMonConfig {
                long_schedule: Some(Duration::from_millis(20)),
                ..SysMonConfig::default()
            },
        );
        let hog = spawn(|| {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(100) {
                std::hint::spin_loop();
            }
        });
        let ev = receive()
            .when(
                |e: &SysMonEvent| matches!(e, SysMonEvent::LongSchedule { .. }),
                |e: SysMonEvent| e,
            )
            .timeout(HANG)
            .expect("a LongSchedule event");
        let SysMonEvent::LongSchedule { pid, ms } = ev else {
            unreachable!()
        };
        assert_eq!(pid, hog);
        assert!(ms >= 20, "reported {ms} ms");
        assert!(system_monitor_off().is_some_and(|(p, _)| p == self_pid()));
    })
    .unwrap();
    node.shutdown();
}

#[test]
fn a_subscriber_hears_of_a_stack_overflow() {
    fn deep(n: u64, limit: u64) -> u64 {
        let pad = std::hint::black_box([n; 64]);
        if n == limit {
            return pad[0];
        }
        deep(n + 1, limit) + pad[1]
    }
    let node = node(1);
    node.run(|| {
        system_monitor(
            self_pid(),
            SysMonConfig {
                stack_overflow: true,
                ..SysMonConfig::default()
            },
        );
        let pid = spawn(|| {
            deep(0, std::hint::black_box(u64::MAX));
        });
        let ev: SysMonEvent = receive().on(|e: SysMonEvent| e).timeout(HANG).unwrap();
        assert_eq!(ev, SysMonEvent::StackOverflow { pid });
    })
    .unwrap();
    node.shutdown();
}
