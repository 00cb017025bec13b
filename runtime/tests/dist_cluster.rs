//! Distribution: nodes in one OS process talking over real TCP on 127.0.0.1.

use graft::graph::MobileFn;
use graft::*;
use std::time::{Duration, Instant};

fn node(cookie: &str) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(2)
            .cookie(cookie)
            .heartbeat(Duration::from_millis(200)),
    )
    .expect("node starts")
}

/// Two connected nodes; returns them and b's id.
fn pair() -> (Node, Node, NodeId) {
    let a = node("dist-test");
    let b = node("dist-test");
    let id = a.connect(b.addr()).expect("connect");
    assert_eq!(id, b.id());
    (a, b, id)
}

/// Waits (bounded: a hang guard) until `f` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[derive(Mobile, Debug, Clone)]
enum Apply {
    Run(MobileFn<i64, i64>, i64, Pid),
    Result(i64),
}

#[test]
fn remote_spawn_captures_its_environment() {
    let (a, _b, b_id) = pair();
    let got = a
        .run(move || {
            let me = self_pid();
            let (base, label) = (40i64, String::from("answer"));
            let pid = spawn_on(b_id, (me, base, label), |(to, base, label)| {
                send(to, (label, base + 2, this_node()));
            })
            .unwrap();
            assert_eq!(pid.node(), b_id);
            expect::<(String, i64, NodeId)>()
        })
        .unwrap();
    assert_eq!(got, ("answer".to_string(), 42, b_id));
}

#[test]
fn a_message_carries_a_function() {
    let (a, _b, b_id) = pair();
    let r = a
        .run(move || {
            // The paper's Apply worker, on the other node.
            let worker = spawn_on(b_id, (), |()| loop {
                match expect::<Apply>() {
                    Apply::Run(f, x, reply) => send(reply, Apply::Result(f.call(x))),
                    Apply::Result(_) => return,
                }
            })
            .unwrap();
            let offset = 100i64;
            let f = MobileFn::new(offset, |off: &i64, x: i64| x * 2 + off);
            send(worker, Apply::Run(f, 21, self_pid()));
            expect::<Apply>()
        })
        .unwrap();
    assert!(matches!(r, Apply::Result(142)), "{r:?}");
}

#[test]
fn call_on_returns_the_value_and_reports_a_crash() {
    let (a, _b, b_id) = pair();
    a.run(move || {
        let count = call_on(b_id, 1_000_000u64, |n| {
            (1..=n).filter(|x| x % 7 == 0 && x % 11 == 0).count() as u64
        })
        .unwrap();
        assert_eq!(count, 12987);
        let r: Result<u64, Error> = call_on(b_id, (), |()| panic!("remote failure"));
        assert!(
            matches!(r, Err(Error::Exited(ExitReason::Other(ref m))) if m == "remote failure"),
            "{r:?}"
        );
    })
    .unwrap();
}

#[test]
fn remote_monitor_link_and_exit() {
    let (a, _b, b_id) = pair();
    a.run(move || {
        // Monitor: the remote process's exit reason comes back.
        let p = spawn_on(b_id, (), |()| {
            expect::<u8>();
            panic!("remote boom");
        })
        .unwrap();
        let m = monitor(p);
        send(p, 1u8);
        let d: ProcessDied = expect();
        assert_eq!((d.pid, d.monitor), (p, m));
        assert_eq!(d.reason, ExitReason::Other("remote boom".into()));
        // Monitoring a remote process that is gone: NoProc at once.
        let m2 = monitor(p);
        let d: ProcessDied = expect();
        assert_eq!((d.monitor, d.reason), (m2, ExitReason::NoProc));

        // Link, trapping: the remote crash arrives as an exit signal.
        trap_exits(true);
        let q = spawn_link_on(b_id, (), |()| {
            expect::<u8>();
            panic!("linked boom");
        })
        .unwrap();
        send(q, 1u8);
        let sig: ExitSignal = expect();
        assert_eq!(
            sig,
            ExitSignal {
                from: q,
                reason: ExitReason::Other("linked boom".into())
            }
        );

        // Exit: kill a remote process parked in receive.
        let r = spawn_on(b_id, (), |()| {
            expect::<u8>();
        })
        .unwrap();
        let m3 = monitor(r);
        exit(r, ExitReason::Kill);
        let d: ProcessDied = expect();
        assert_eq!((d.monitor, d.reason), (m3, ExitReason::Killed));

        // Our own exit reaches a remote process linked to us.
        let watcher = self_pid();
        let linked = spawn_on(b_id, watcher, |w| {
            trap_exits(true);
            let me = self_pid();
            send(w, me);
            let sig: ExitSignal = expect();
            send(w, sig.reason);
        })
        .unwrap();
        assert_eq!(expect::<Pid>(), linked);
        let child = spawn(move || {
            link(linked);
            send(watcher, "linked");
            expect::<u8>();
            panic!("local boom");
        });
        assert_eq!(expect::<&str>(), "linked");
        send(child, 0u8);
        // Our own link to `child` delivers a signal too; we trap it.
        let got = receive()
            .on(|r: ExitReason| Some(r))
            .on(|_: ExitSignal| None)
            .wait();
        let got = match got {
            Some(r) => r,
            None => expect::<ExitReason>(),
        };
        assert_eq!(got, ExitReason::Other("local boom".into()));
    })
    .unwrap();
}

#[test]
fn registered_names_across_nodes() {
    let (a, b, b_id) = pair();
    b.run(|| {
        let echo = spawn(|| loop {
            let (from, s): (Pid, String) = expect();
            send(from, s.to_uppercase());
        });
        register("echo", echo).unwrap();
    })
    .unwrap();
    let out = a
        .run(move || {
            send_to(("echo", b_id), (self_pid(), String::from("hi"))).unwrap();
            let r = expect::<String>();
            let found = whereis_on("echo", b_id).unwrap();
            assert!(found.is_some());
            assert_eq!(whereis_on("nobody", b_id).unwrap(), None);
            // A local-only message cannot go to another node.
            assert!(matches!(
                send_to(("echo", b_id), "str literal"),
                Err(Error::NotMobile(_))
            ));
            r
        })
        .unwrap();
    assert_eq!(out, "HI");
}

#[test]
fn three_nodes_form_a_full_mesh() {
    let a = node("mesh");
    let b = node("mesh");
    let c = node("mesh");
    a.connect(b.addr()).unwrap();
    c.connect(b.addr()).unwrap();
    // a and c learn of each other through b.
    eventually("a full mesh", || {
        a.nodes().len() == 2 && c.nodes().len() == 2
    });
    let c_id = c.id();
    let v = a.run(move || call_on(c_id, 5u32, |x| x * x)).unwrap();
    assert_eq!(v.unwrap(), 25);
}

/// Inside a process: a monitor on `target` (a process of node `b`), a link
/// to a new process on `b` and a call to `b` that is still waiting; then
/// `cut()`, and what the three complete with (hang guards: a broken loss
/// path fails here, not hangs).
fn across_then_cut(b: NodeId, target: Pid, cut: impl FnOnce()) -> (ExitReason, ExitReason, String) {
    let guard = Duration::from_secs(20);
    let m = monitor(target);
    trap_exits(true);
    let q = spawn_link_on(b, (), |()| {
        expect::<u8>();
    })
    .unwrap();
    let me = self_pid();
    spawn(move || {
        let r = call_on(b, me, |me| {
            send(me, "called".to_string());
            expect::<u8>()
        });
        send(me, format!("{r:?}"));
    });
    assert_eq!(expect_timeout::<String>(guard).unwrap(), "called");
    cut();
    let d = receive()
        .when(move |d: &ProcessDied| d.monitor == m, |d| d.reason)
        .timeout(guard)
        .expect("the monitor fires");
    let s = receive()
        .when(move |s: &ExitSignal| s.from == q, |s| s.reason)
        .timeout(guard)
        .expect("the link breaks");
    let call = expect_timeout::<String>(guard).expect("the call fails");
    (d, s, call)
}

/// All three completed with `NoConnection`.
fn assert_cut((down, exit, call): (ExitReason, ExitReason, String)) {
    assert_eq!(down, ExitReason::NoConnection);
    assert_eq!(exit, ExitReason::NoConnection);
    assert!(
        call.starts_with("Err(") && call.contains("NoConnection"),
        "{call}"
    );
}

#[test]
fn node_loss_fires_monitors_links_and_pending_calls() {
    let (a, b, b_id) = pair();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let waiter = std::thread::spawn(move || {
        let r = a.run(move || {
            let p = spawn_on(b_id, (), |()| {
                expect::<u8>();
            })
            .unwrap();
            across_then_cut(b_id, p, || ready_tx.send(()).unwrap())
        });
        (a, r)
    });
    ready_rx.recv().unwrap();
    b.shutdown();
    let (_a, r) = waiter.join().unwrap();
    // A stopping node leaves the cluster before it kills its processes, so
    // no `Killed` can reach us: what completes these is the node loss.
    assert_cut(r.unwrap());
}

#[test]
fn a_wrong_cookie_is_refused() {
    let a = node("one cookie");
    let b = node("another cookie");
    let r = a.connect(b.addr());
    assert!(r.is_err(), "{r:?}");
    assert!(a.nodes().is_empty() && b.nodes().is_empty());
}

#[test]
fn four_senders_fifo_to_a_remote_receiver() {
    const N: u64 = 100_000;
    let (a, _b, b_id) = pair();
    let r = a
        .run(move || {
            let me = self_pid();
            // The receiver on b reports back when it has all messages in order.
            let receiver = spawn_on(b_id, me, |report| {
                let mut next = [0u64; 4];
                for _ in 0..4 * N {
                    let (s, i): (u64, u64) = expect();
                    assert_eq!(next[s as usize], i, "sender {s} out of order");
                    next[s as usize] += 1;
                }
                send(report, next.to_vec());
            })
            .unwrap();
            for s in 0..4u64 {
                spawn(move || {
                    for i in 0..N {
                        send(receiver, (s, i));
                    }
                });
            }
            expect_timeout::<Vec<u64>>(Duration::from_secs(60)).expect("all arrived")
        })
        .unwrap();
    assert_eq!(r, vec![N; 4]);
}

#[test]
fn a_restarted_node_rejoins_and_its_old_pids_stay_dead() {
    let _ = env_logger::builder().is_test(true).try_init();
    let start = || {
        Node::start(
            NodeConfig::new("127.0.0.1:0")
                .name("phoenix@127.0.0.1")
                .cookie("rejoin")
                .heartbeat(Duration::from_millis(200)),
        )
        .unwrap()
    };
    let a = node("rejoin");
    let b1 = start();
    let b_id = a.connect(b1.addr()).unwrap();
    let old = a
        .run(move || {
            spawn_on(b_id, (), |()| {
                register("svc", self_pid()).unwrap();
                expect::<u8>();
            })
            .unwrap()
        })
        .unwrap();
    b1.shutdown();
    eventually("b1 gone", || a.nodes().is_empty());
    // The same node name, a new incarnation (new creation).
    let b2 = start();
    assert_eq!(a.connect(b2.addr()).unwrap(), b_id);
    a.run(move || {
        let new = spawn_on(b_id, (), |()| {
            expect::<u8>();
        })
        .unwrap();
        assert_eq!(new.node(), old.node());
        assert_ne!(new.creation(), old.creation(), "a new incarnation");
        // The old pid names a dead process: monitoring it says so at once.
        let m = monitor(old);
        let d: ProcessDied = receive()
            .when(move |d: &ProcessDied| d.monitor == m, |d| d)
            .wait();
        assert_eq!(d.reason, ExitReason::NoProc);
        // And a message to it goes nowhere (no error, as in Erlang).
        send(old, 1u8);
        send(new, 1u8);
    })
    .unwrap();
}

#[test]
fn a_large_message_crosses_from_a_small_stack() {
    // Big enough to be compressed on the way; the sender has the default
    // 64 KiB stack (compression runs on the worker's stack).
    let (a, b, _) = pair();
    let sink = b
        .spawn(|| {
            let (from, v): (Pid, Vec<u8>) = expect();
            send(from, v.len() as u64);
        })
        .unwrap();
    let n = a
        .run(move || {
            send(sink, (self_pid(), vec![7u8; 1 << 20]));
            expect::<u64>()
        })
        .unwrap();
    assert_eq!(n, 1 << 20);
}

#[test]
fn sends_from_outside_and_timed_sends_reach_other_nodes() {
    let (a, b, _) = pair();
    let (tx, rx) = std::sync::mpsc::channel::<Pid>();
    let collector = std::thread::spawn(move || {
        b.run(move || {
            tx.send(self_pid()).unwrap();
            let arrive = || expect_timeout::<String>(Duration::from_secs(10)).expect("arrives");
            (arrive(), arrive())
        })
        .unwrap()
    });
    let target = rx.recv().unwrap();
    // From outside any process, to a pid on another node.
    a.send(target, String::from("from outside"));
    // A timer on this node delivering to another node.
    a.run(move || {
        send_after(Duration::from_millis(5), target, String::from("timed"));
        sleep(Duration::from_millis(20));
    })
    .unwrap();
    let (first, second) = collector.join().unwrap();
    assert_eq!((first.as_str(), second.as_str()), ("from outside", "timed"));
}

#[test]
fn spawn_link_on_a_body_that_dies_at_once_still_signals_the_caller() {
    let (a, _b, b_id) = pair();
    a.run(move || {
        trap_exits(true);
        for _ in 0..20 {
            let child = spawn_link_on(b_id, (), |()| panic!("dies at once")).unwrap();
            let sig = receive()
                .when(move |s: &ExitSignal| s.from == child, |s| s)
                .timeout(Duration::from_secs(10))
                .expect("the link's exit signal arrives");
            assert_eq!(sig.reason, ExitReason::Other("dies at once".into()));
        }
    })
    .unwrap();
}

#[test]
fn a_process_that_sends_and_runs_on_without_stopping_still_gets_its_message_out() {
    // Frames a process sends are held until it stops; one that runs on
    // (here: waits on an OS-level flag the receiver sets) must not hold them
    // for ever: the timer thread flushes them within a tick.
    use std::sync::atomic::{AtomicBool, Ordering};
    static GOT: AtomicBool = AtomicBool::new(false);
    // A long heartbeat, so that the writer's heartbeat does not flush them.
    let slow = || {
        Node::start(
            NodeConfig::new("127.0.0.1:0")
                .workers(2)
                .cookie("dist-test")
                .heartbeat(Duration::from_secs(30)),
        )
        .expect("node starts")
    };
    let (a, b) = (slow(), slow());
    a.connect(b.addr()).expect("connect");
    let (tx, rx) = std::sync::mpsc::channel::<Pid>();
    let receiver = std::thread::spawn(move || {
        b.run(move || {
            tx.send(self_pid()).unwrap();
            let m = expect_timeout::<u64>(Duration::from_secs(10)).expect("arrives");
            GOT.store(true, Ordering::SeqCst);
            m
        })
        .unwrap()
    });
    let target = rx.recv().unwrap();
    a.run(move || {
        send(target, 42u64);
        let t = Instant::now();
        while !GOT.load(Ordering::SeqCst) {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the message stayed held"
            );
            std::hint::spin_loop();
        }
    })
    .unwrap();
    assert_eq!(receiver.join().unwrap(), 42);
}

#[test]
fn disconnect_completes_what_waited_on_both_sides_and_the_nodes_join_again() {
    let (a, b, b_id) = pair();
    let a_id = a.id();
    let guard = Duration::from_secs(20);
    // Processes on both sides that live through the disconnect.
    let sleeper = a
        .spawn(|| {
            expect::<u8>();
        })
        .unwrap();
    let echo = b
        .spawn(|| loop {
            let (from, n): (Pid, u64) = expect();
            send(from, n + 1);
        })
        .unwrap();
    // b's side: a monitor on a process of a.
    let (b_tx, b_rx) = std::sync::mpsc::channel::<Option<ExitReason>>();
    b.spawn(move || {
        let m = monitor(sleeper);
        b_tx.send(None).unwrap();
        let d = receive()
            .when(move |d: &ProcessDied| d.monitor == m, |d| d.reason)
            .timeout(guard);
        b_tx.send(d).unwrap();
    })
    .unwrap();
    assert_eq!(b_rx.recv_timeout(guard).unwrap(), None, "b monitors");
    // a's side: a monitor, a link and a call across the connection; then a
    // process on a cuts it.
    let r = a.run(move || {
        across_then_cut(b_id, echo, || {
            assert!(disconnect(b_id));
            assert!(!nodes().contains(&b_id));
            assert!(!disconnect(b_id), "already disconnected");
        })
    });
    assert_cut(r.unwrap());
    assert_eq!(
        b_rx.recv_timeout(guard).unwrap(),
        Some(ExitReason::NoConnection),
        "b's monitor on a's process fires too"
    );
    // b dropped a's monitor on echo with the connection.
    eventually("b forgets a's monitor", || {
        b.run(move || process_info(echo).unwrap().monitored_by.is_empty())
            .unwrap()
    });
    // Nothing else stopped; the nodes join again and old pids still work.
    assert!(b.run(move || is_alive(echo)).unwrap());
    assert!(a.run(move || is_alive(sleeper)).unwrap());
    assert_eq!(a.connect(b.addr()).unwrap(), b_id);
    eventually("b sees a again", || b.nodes().contains(&a_id));
    let answer = a
        .run(move || {
            send(echo, (self_pid(), 41u64));
            expect_timeout::<u64>(guard)
        })
        .unwrap();
    assert_eq!(answer, Some(42));
}
#[test]
fn a_disconnect_and_an_immediate_reconnect_leave_one_live_connection() {
    let (a, b, b_id) = pair();
    let a_id = a.id();
    let echo = b
        .spawn(|| loop {
            let (from, n): (Pid, u64) = expect();
            send(from, n + 1);
        })
        .unwrap();
    for round in 0..50u64 {
        assert!(a.disconnect(b_id), "round {round}: connected before");
        // b may not have seen the old connection close yet (it answers
        // "duplicate"): a's connect tries again until b has.
        assert_eq!(a.connect(b.addr()).unwrap(), b_id, "round {round}");
        eventually("both see each other", || {
            a.nodes().contains(&b_id) && b.nodes().contains(&a_id)
        });
        let answer = a
            .run(move || {
                send(echo, (self_pid(), round));
                expect_timeout::<u64>(Duration::from_secs(20))
            })
            .unwrap();
        assert_eq!(answer, Some(round + 1), "round {round}");
    }
}

/// A value whose hand-written decoding panics (user code run by the node
/// that decodes it).
struct Grenade;

impl Mobile for Grenade {
    fn describe(d: &mut graft::graph::Describer) {
        if d.enter::<Self>("struct", "Grenade") {
            d.leave();
        }
    }
    fn encode<F: graft::graph::Format>(&self, _: &mut graft::graph::Encoder<'_, F>) {}
    fn decode<S: graft::graph::Source>(
        _: &mut graft::graph::Decoder<'_, S>,
    ) -> Result<Self, graft::graph::DecodeError> {
        panic!("grenade decoded")
    }
}

#[test]
fn a_spawn_whose_environment_panics_in_decoding_fails_alone() {
    let (a, _b, b_id) = pair();
    let r = a
        .run(move || {
            let bad = spawn_on(b_id, Grenade, |_| {});
            // The connection is still there: the next spawn works.
            let me = self_pid();
            spawn_on(b_id, me, |me| send(me, 7u8)).unwrap();
            (bad, expect_timeout::<u8>(Duration::from_secs(20)))
        })
        .unwrap();
    assert!(
        matches!(&r.0, Err(Error::Remote(m)) if m.contains("panicked")),
        "{:?}",
        r.0
    );
    assert_eq!(r.1, Some(7));
}

/// Open once the test has seen the connection work on while a `Dawdle`
/// was being decoded.
static GATE: (std::sync::Mutex<bool>, std::sync::Condvar) =
    (std::sync::Mutex::new(false), std::sync::Condvar::new());
/// Set when a `Dawdle`'s decoding starts.
static DAWDLING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn open_gate() {
    *GATE.0.lock().unwrap() = true;
    GATE.1.notify_all();
}

/// A value whose hand-written decoding takes long: it waits for the gate
/// (at most the hang guard).
struct Dawdle;

impl Mobile for Dawdle {
    fn describe(d: &mut graft::graph::Describer) {
        if d.enter::<Self>("struct", "Dawdle") {
            d.leave();
        }
    }
    fn encode<F: graft::graph::Format>(&self, _: &mut graft::graph::Encoder<'_, F>) {}
    fn decode<S: graft::graph::Source>(
        _: &mut graft::graph::Decoder<'_, S>,
    ) -> Result<Self, graft::graph::DecodeError> {
        DAWDLING.store(true, std::sync::atomic::Ordering::SeqCst);
        let open = GATE.0.lock().unwrap();
        let _ = GATE
            .1
            .wait_timeout_while(open, Duration::from_secs(30), |open| !*open)
            .unwrap();
        Ok(Dawdle)
    }
}

#[test]
fn a_spawn_whose_environment_decodes_slowly_holds_up_nothing_else() {
    let (a, _b, b_id) = pair();
    let r = a
        .run(move || {
            let me = self_pid();
            spawn(move || {
                let r = spawn_on(b_id, Dawdle, |_| {});
                send(me, r.is_ok());
            });
            let t = Instant::now();
            while !DAWDLING.load(std::sync::atomic::Ordering::SeqCst) {
                assert!(t.elapsed() < Duration::from_secs(20), "no decoding");
                sleep(Duration::from_millis(1));
            }
            // While b decodes the first body, the same connection carries
            // a second spawn and its message. The gate opens either way
            // (after the hang guard at worst), so the first one ends.
            let quick = spawn_on(b_id, me, |me| send(me, 7u8)).is_ok();
            let seven = expect_timeout::<u8>(Duration::from_secs(20));
            open_gate();
            (
                quick,
                seven,
                expect_timeout::<bool>(Duration::from_secs(40)),
            )
        })
        .unwrap();
    assert_eq!(r, (true, Some(7), Some(true)));
}
