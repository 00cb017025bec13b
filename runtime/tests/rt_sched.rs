//! Scheduling: work stealing, blocking calls, pinned processes, outside calls.

mod common;

use graft::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn a_cpu_bound_process_does_not_stop_others() {
    let node = common::node(2);
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    node.run(move || {
        let me = self_pid();
        // Occupies one worker without yielding until told to stop.
        spawn(move || {
            send(me, "spinning");
            while !s2.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        assert_eq!(expect::<&str>(), "spinning");
        // Others still run (on the other worker).
        for i in 0..100u32 {
            spawn(move || send(me, i));
        }
        let mut sum = 0;
        for _ in 0..100 {
            sum += expect_timeout::<u32>(Duration::from_secs(10)).expect("others run");
        }
        assert_eq!(sum, 4950);
        stop.store(true, Ordering::Relaxed);
    })
    .unwrap();
    node.shutdown();
}

#[test]
fn blocking_keeps_workers_free() {
    let node = common::node(1);
    node.run(|| {
        let me = self_pid();
        // The blocker waits in the pool for a release that only another
        // process sends, once the blocker is inside `blocking`. With one
        // worker, that process runs only if `blocking` gave the worker up.
        let entered = Arc::new(AtomicBool::new(false));
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let inside = entered.clone();
        spawn(move || {
            let v = blocking(move || {
                inside.store(true, Ordering::SeqCst);
                wait.recv_timeout(Duration::from_secs(5))
                    .map(|()| 7u32)
                    .unwrap_or(0)
            });
            send(me, v);
        });
        spawn(move || {
            while !entered.load(Ordering::SeqCst) {
                sleep(Duration::from_millis(1));
            }
            go.send(()).unwrap();
        });
        assert_eq!(
            expect_timeout::<u32>(Duration::from_secs(10)),
            Some(7),
            "released while blocked: the worker was free"
        );
        // A panic inside `blocking` reaches the caller.
        let (_, r) = spawn_monitor(|| {
            blocking(|| panic!("in the pool"));
        });
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, r);
        assert_eq!(d.reason, ExitReason::Other("in the pool".into()));
    })
    .unwrap();
    node.shutdown();
}

#[test]
fn pinned_processes_run_and_get_messages() {
    let node = common::node(4);
    let n = node
        .run(|| {
            let me = self_pid();
            let (p, _) = spawn_opts()
                .pinned()
                .spawn_monitor(move || {
                    // Pinned: every resume on the same worker thread.
                    let home = std::thread::current().id();
                    let mut total = 0u64;
                    for _ in 0..1000 {
                        total += expect::<u64>();
                        yield_now();
                        assert_eq!(std::thread::current().id(), home, "migrated");
                    }
                    send(me, total);
                })
                .unwrap();
            for i in 0..1000u64 {
                send(p, i);
            }
            receive()
                .on(|total: u64| Ok(total))
                .on(|d: ProcessDied| Err(d.reason))
                .timeout(Duration::from_secs(20))
        })
        .unwrap();
    assert_eq!(n, Some(Ok(499_500)));
}

#[test]
fn process_only_calls_outside_a_process_are_clear_errors() {
    assert!(matches!(
        register("x", Pid::new(NodeId(1), 1, 1)),
        Err(Error::NotInProcess("register"))
    ));
    assert!(matches!(send_to("x", 1u8), Err(Error::NotInProcess(_))));
    assert_eq!(try_self_pid(), None);
    let err = std::panic::catch_unwind(self_pid).unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("self_pid called outside a graft process"),
        "{msg}"
    );
}

#[test]
fn root_process_panic_is_an_error_not_a_crash() {
    let node = common::node(2);
    let r: Result<(), Error> = node.run(|| panic!("root fails"));
    assert!(matches!(r, Err(Error::Exited(ExitReason::Other(ref m))) if m == "root fails"));
    assert_eq!(node.run(|| 1 + 1).unwrap(), 2);
}

#[test]
fn many_processes_spawn_and_exit() {
    let node = common::node(2);
    let n = node
        .run(|| {
            let me = self_pid();
            for i in 0..20_000u64 {
                spawn(move || send(me, i));
            }
            (0..20_000).map(|_| expect::<u64>()).sum::<u64>()
        })
        .unwrap();
    assert_eq!(n, 20_000 * 19_999 / 2);
    let t = Instant::now();
    while node.process_count() != 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        node.process_count(),
        0,
        "every process finished and was freed"
    );
}

#[test]
fn deep_recursion_fits_a_larger_stack() {
    fn depth(n: u64) -> u64 {
        let pad = [n; 16];
        if n == 0 {
            0
        } else {
            1 + depth(n - 1) + std::hint::black_box(pad)[0] - n
        }
    }
    let node = common::node(1);
    let r = node
        .run(|| {
            let me = self_pid();
            spawn_opts()
                .stack_size(32 << 20)
                .spawn(move || send(me, depth(20_000)))
                .unwrap();
            expect::<u64>()
        })
        .unwrap();
    assert_eq!(r, 20_000);
}

/// A call to the server in `a_thousand_callers_of_one_server_are_all_served`.
struct Ask(Pid);
impl Message for Ask {}
/// The server's answer: `true` while it still serves.
struct Answer(bool);
impl Message for Answer {}
/// Callers start calling on this.
struct Go;
impl Message for Go {}
/// How many calls a caller got answered.
struct Served(u64);
impl Message for Served {}

/// Fairness, not speed: 1,000 processes call one server in a loop (the
/// wake pattern of a busy gen_server) until it has answered 50,000 calls;
/// every caller gets its share, within a factor of four of the mean. With
/// woken processes pushed out of the LIFO slot onto the owner-LIFO local
/// queue, the newest callers ran again and again and the oldest waited to
/// be stolen (24 to 7,372 calls each in the 2 s bench).
#[test]
fn a_thousand_callers_of_one_server_are_all_served() {
    const CALLERS: u64 = 1000;
    const CALLS: u64 = 50 * CALLERS;
    let node = common::node(2);
    let counts = node
        .run(|| {
            let me = self_pid();
            let server = spawn(|| {
                // Each caller asks until it hears `false` once.
                for n in 1..=CALLS + CALLERS {
                    let Ask(from) = expect::<Ask>();
                    send(from, Answer(n <= CALLS));
                }
            });
            let callers: Vec<Pid> = (0..CALLERS)
                .map(|_| {
                    spawn(move || {
                        let Go = expect::<Go>();
                        let mut n = 0u64;
                        loop {
                            send(server, Ask(self_pid()));
                            if !expect::<Answer>().0 {
                                break;
                            }
                            n += 1;
                        }
                        send(me, Served(n));
                    })
                })
                .collect();
            for &c in &callers {
                send(c, Go);
            }
            (0..CALLERS)
                .map(|_| {
                    expect_timeout::<Served>(Duration::from_secs(120))
                        .expect("every caller finishes (hang guard)")
                        .0
                })
                .collect::<Vec<u64>>()
        })
        .unwrap();
    node.shutdown();
    assert_eq!(
        counts.iter().sum::<u64>(),
        CALLS,
        "every call answered once"
    );
    let mean = CALLS / CALLERS;
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(
        *min * 4 >= mean && *max <= mean * 4,
        "calls per caller {min}..{max}, mean {mean}"
    );
}
