//! Supervisors: start and stop order, the three strategies, restart types,
//! intensity, nested trees, shutdown policies, child management (after
//! OTP's `supervisor_SUITE`).

mod common;

use common::{down_reason, mailbox_now, wait_until, HANG};
use graft_otp::prelude::*;
use graft_otp::supervisor::{ChildCount, SupervisorError};
use std::time::Duration;

/// What the probes tell the test process, in the order it happens.
#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Started(&'static str),
    Stopped(&'static str, ExitReason),
}

impl graft::Message for Ev {}

/// A gen_server child that reports its start (from `init`, which runs
/// inside the supervisor's start call, so reports come in start order) and
/// its `terminate` (it traps exits, so a supervisor's Shutdown reaches it).
struct Probe {
    id: &'static str,
    report: Pid,
}

#[derive(Debug, graft::Mobile)]
enum Cmd {
    Crash,
    Exit(ExitReason),
}

impl GenServer for Probe {
    type Call = ();
    type Cast = Cmd;
    type Reply = &'static str;

    fn init(&mut self) -> Result<(), ExitReason> {
        trap_exits(true);
        send(self.report, Ev::Started(self.id));
        Ok(())
    }
    fn handle_call(&mut self, _: (), _: &ReplyTo<&'static str>) -> CallResult<&'static str> {
        CallResult::Reply(self.id)
    }
    fn handle_cast(&mut self, cmd: Cmd) -> Flow {
        match cmd {
            Cmd::Crash => panic!("{} crashed", self.id),
            Cmd::Exit(r) => Flow::Stop(r),
        }
    }
    fn terminate(&mut self, reason: &ExitReason) {
        send(self.report, Ev::Stopped(self.id, reason.clone()));
    }
}

fn probe(id: &'static str) -> ChildSpec {
    let report = self_pid();
    ChildSpec::server(id, move || Probe { id, report })
}

fn crash_reason(id: &str) -> ExitReason {
    ExitReason::Other(format!("{id} crashed"))
}

fn ev() -> Ev {
    expect_timeout::<Ev>(HANG).expect("an event")
}

fn evs(n: usize) -> Vec<Ev> {
    (0..n).map(|_| ev()).collect()
}

fn child(sup: Pid, id: &str) -> Server<Probe> {
    Server::from_pid(supervisor::get_child(sup, id).expect("child runs"))
}

fn crash(sup: Pid, id: &str) {
    child(sup, id).cast(Cmd::Crash);
}

/// Stops a supervisor as its parent would (the test traps exits).
fn shut_down(sup: Pid) -> ExitReason {
    let m = monitor(sup);
    exit(sup, ExitReason::Shutdown);
    down_reason(m)
}

fn three(strategy: Strategy) -> Pid {
    let sup = Supervisor::new(strategy)
        .intensity(10, Duration::from_secs(60))
        .child(probe("a"))
        .child(probe("b"))
        .child(probe("c"))
        .start()
        .unwrap();
    assert_eq!(
        evs(3),
        [Ev::Started("a"), Ev::Started("b"), Ev::Started("c")]
    );
    sup
}

use Ev::{Started, Stopped};
const SHUT: ExitReason = ExitReason::Shutdown;

otp_test! {
    fn children_start_in_order_and_stop_in_reverse() {
        trap_exits(true);
        let sup = three(Strategy::OneForOne);
        let ids: Vec<String> = supervisor::which_children(sup).unwrap().into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(shut_down(sup), ExitReason::Shutdown);
        assert_eq!(evs(3), [Stopped("c", SHUT), Stopped("b", SHUT), Stopped("a", SHUT)]);
    }

    fn one_for_one_restarts_only_the_dead_child() {
        trap_exits(true);
        let sup = three(Strategy::OneForOne);
        let (a, b, c) = (child(sup, "a"), child(sup, "b"), child(sup, "c"));
        crash(sup, "b");
        assert_eq!(evs(2), [Stopped("b", crash_reason("b")), Started("b")]);
        assert_eq!(child(sup, "a"), a);
        assert_eq!(child(sup, "c"), c);
        assert_ne!(child(sup, "b"), b);
        assert_eq!(child(sup, "b").call(()), Ok("b"));
        shut_down(sup);
        assert_eq!(evs(3), [Stopped("c", SHUT), Stopped("b", SHUT), Stopped("a", SHUT)]);
    }

    fn one_for_all_restarts_everyone() {
        trap_exits(true);
        let sup = three(Strategy::OneForAll);
        let a = child(sup, "a");
        crash(sup, "b");
        assert_eq!(
            evs(6),
            [
                Stopped("b", crash_reason("b")),
                Stopped("c", SHUT),
                Stopped("a", SHUT),
                Started("a"),
                Started("b"),
                Started("c"),
            ]
        );
        assert_ne!(child(sup, "a"), a);
        shut_down(sup);
    }

    fn rest_for_one_restarts_the_child_and_later_ones() {
        trap_exits(true);
        let sup = three(Strategy::RestForOne);
        let a = child(sup, "a");
        crash(sup, "b");
        assert_eq!(
            evs(4),
            [Stopped("b", crash_reason("b")), Stopped("c", SHUT), Started("b"), Started("c")]
        );
        assert_eq!(child(sup, "a"), a);
        // The last child alone.
        crash(sup, "c");
        assert_eq!(evs(2), [Stopped("c", crash_reason("c")), Started("c")]);
        shut_down(sup);
    }

    fn restart_types() {
        trap_exits(true);
        let sup = Supervisor::new(Strategy::OneForOne)
            .intensity(10, Duration::from_secs(60))
            .child(probe("perm"))
            .child(probe("trans").restart(Restart::Transient))
            .child(probe("temp").restart(Restart::Temporary))
            .start()
            .unwrap();
        assert_eq!(evs(3), [Started("perm"), Started("trans"), Started("temp")]);
        // Permanent: restarted even after a normal exit.
        child(sup, "perm").cast(Cmd::Exit(ExitReason::Normal));
        assert_eq!(evs(2), [Stopped("perm", ExitReason::Normal), Started("perm")]);
        // Transient: restarted after a crash, not after a normal or shutdown exit.
        crash(sup, "trans");
        assert_eq!(evs(2), [Stopped("trans", crash_reason("trans")), Started("trans")]);
        child(sup, "trans").cast(Cmd::Exit(ExitReason::Shutdown));
        assert_eq!(ev(), Stopped("trans", SHUT));
        wait_until("trans is marked stopped", || supervisor::get_child(sup, "trans").is_none());
        let trans = supervisor::which_children(sup).unwrap().into_iter().find(|c| c.id == "trans").unwrap();
        assert_eq!((trans.pid, trans.restart), (None, Restart::Transient));
        // Temporary: never restarted, and forgotten.
        crash(sup, "temp");
        assert_eq!(ev(), Stopped("temp", crash_reason("temp")));
        wait_until("temp is forgotten", || {
            supervisor::which_children(sup).unwrap().iter().all(|c| c.id != "temp")
        });
        assert_eq!(
            supervisor::count_children(sup).unwrap(),
            ChildCount { specs: 2, active: 1, supervisors: 0, workers: 2 }
        );
        assert!(expect_timeout::<Ev>(Duration::from_millis(20)).is_none(), "nothing else restarted");
        shut_down(sup);
        assert_eq!(ev(), Stopped("perm", SHUT));
    }

    fn intensity_limit_stops_the_supervisor() {
        trap_exits(true);
        let sup = Supervisor::new(Strategy::OneForOne)
            .intensity(2, Duration::from_secs(60))
            .child(probe("a"))
            .child(probe("b"))
            .start()
            .unwrap();
        assert_eq!(evs(2), [Started("a"), Started("b")]);
        let m = monitor(sup);
        for _ in 0..2 {
            crash(sup, "a");
            assert_eq!(evs(2), [Stopped("a", crash_reason("a")), Started("a")]);
        }
        // The third restart within the period is one too many.
        crash(sup, "a");
        assert_eq!(evs(2), [Stopped("a", crash_reason("a")), Stopped("b", SHUT)]);
        let d: ProcessDied = expect_timeout(HANG).unwrap();
        assert_eq!((d.monitor, d.reason), (m, ExitReason::Shutdown));
        // The starter is linked: it hears it too.
        let sig: ExitSignal = expect_timeout(HANG).unwrap();
        assert_eq!(sig, ExitSignal { from: sup, reason: ExitReason::Shutdown });
    }

    fn zero_intensity_gives_up_at_the_first_crash() {
        trap_exits(true);
        let sup = Supervisor::new(Strategy::OneForOne)
            .intensity(0, Duration::from_secs(60))
            .child(probe("a"))
            .start()
            .unwrap();
        assert_eq!(ev(), Started("a"));
        let m = monitor(sup);
        crash(sup, "a");
        assert_eq!(ev(), Stopped("a", crash_reason("a")));
        let d: ProcessDied = expect_timeout(HANG).unwrap();
        assert_eq!((d.monitor, d.reason), (m, ExitReason::Shutdown));
    }

    fn restarts_outside_the_period_do_not_add_up() {
        trap_exits(true);
        let sup = Supervisor::new(Strategy::OneForOne)
            .intensity(1, Duration::from_millis(20))
            .child(probe("a"))
            .start()
            .unwrap();
        assert_eq!(ev(), Started("a"));
        for _ in 0..3 {
            crash(sup, "a");
            assert_eq!(evs(2), [Stopped("a", crash_reason("a")), Started("a")]);
            sleep(Duration::from_millis(40));
        }
        assert!(is_alive(sup));
        shut_down(sup);
    }

    fn nested_trees_escalate() {
        trap_exits(true);
        let report = self_pid();
        let inner = move || {
            Supervisor::new(Strategy::OneForOne)
                .intensity(1, Duration::from_secs(60))
                .child(ChildSpec::server("x", move || Probe { id: "x", report }))
        };
        let root = Supervisor::new(Strategy::OneForOne)
            .intensity(1, Duration::from_secs(60))
            .child(probe("w"))
            .child(ChildSpec::supervisor("inner", inner))
            .start()
            .unwrap();
        assert_eq!(evs(2), [Started("w"), Started("x")]);
        let kinds: Vec<ChildKind> = supervisor::which_children(root).unwrap().iter().map(|c| c.kind).collect();
        assert_eq!(kinds, [ChildKind::Worker, ChildKind::Supervisor]);
        let inner1 = supervisor::get_child(root, "inner").unwrap();
        // One crash: the inner supervisor restarts x.
        crash(inner1, "x");
        assert_eq!(evs(2), [Stopped("x", crash_reason("x")), Started("x")]);
        // A second: the inner supervisor gives up; the root restarts it (and x).
        crash(inner1, "x");
        assert_eq!(evs(2), [Stopped("x", crash_reason("x")), Started("x")]);
        let inner2 = supervisor::get_child(root, "inner").unwrap();
        assert_ne!(inner1, inner2);
        assert!(!is_alive(inner1));
        // Two more: the new inner gives up again, which is the root's second
        // restart: the root gives up too, stopping w; the failure reaches us.
        crash(inner2, "x");
        assert_eq!(evs(2), [Stopped("x", crash_reason("x")), Started("x")]);
        crash(inner2, "x");
        assert_eq!(evs(2), [Stopped("x", crash_reason("x")), Stopped("w", SHUT)]);
        let sig: ExitSignal = expect_timeout(HANG).unwrap();
        assert_eq!(sig, ExitSignal { from: root, reason: ExitReason::Shutdown });
    }

    fn stopping_a_tree_stops_the_leaves_first() {
        trap_exits(true);
        let report = self_pid();
        let inner = move || {
            Supervisor::new(Strategy::OneForAll)
                .child(ChildSpec::server("x", move || Probe { id: "x", report }))
                .child(ChildSpec::server("y", move || Probe { id: "y", report }))
        };
        let root = Supervisor::new(Strategy::OneForOne)
            .child(probe("w"))
            .child(ChildSpec::supervisor("inner", inner))
            .child(probe("z"))
            .start()
            .unwrap();
        assert_eq!(evs(4), [Started("w"), Started("x"), Started("y"), Started("z")]);
        shut_down(root);
        assert_eq!(
            evs(4),
            [Stopped("z", SHUT), Stopped("y", SHUT), Stopped("x", SHUT), Stopped("w", SHUT)]
        );
    }

    fn shutdown_timeout_then_kill_and_brutal_kill() {
        trap_exits(true);
        let me = self_pid();
        // A child that traps exits, tells us of each, and ignores it.
        let stubborn = move || {
            Ok(spawn_link(move || {
                trap_exits(true);
                loop {
                    let s = expect::<ExitSignal>();
                    send(me, (self_pid(), s.reason));
                }
            }))
        };
        let sup = Supervisor::new(Strategy::OneForOne)
            .child(ChildSpec::new("slow", stubborn).shutdown(Shutdown::Timeout(Duration::from_millis(20))))
            .child(ChildSpec::new("brutal", stubborn).shutdown(Shutdown::BrutalKill))
            .start()
            .unwrap();
        let slow = supervisor::get_child(sup, "slow").unwrap();
        let brutal = supervisor::get_child(sup, "brutal").unwrap();
        let (ms, mb) = (monitor(slow), monitor(brutal));
        // Timeout: asked to shut down first, killed when it does not.
        supervisor::terminate_child(sup, "slow").unwrap();
        assert_eq!(
            expect_timeout::<(Pid, ExitReason)>(HANG),
            Some((slow, ExitReason::Shutdown))
        );
        let d: ProcessDied = expect_timeout(HANG).unwrap();
        assert_eq!((d.monitor, d.reason), (ms, ExitReason::Killed));
        // Brutal kill: killed without being asked.
        supervisor::terminate_child(sup, "brutal").unwrap();
        let d: ProcessDied = expect_timeout(HANG).unwrap();
        assert_eq!((d.monitor, d.reason), (mb, ExitReason::Killed));
        assert_eq!(expect_timeout::<(Pid, ExitReason)>(Duration::ZERO), None);
        // Terminated children are not restarted; their specs stay.
        assert_eq!(supervisor::count_children(sup).unwrap().active, 0);
        assert_eq!(supervisor::count_children(sup).unwrap().specs, 2);
        shut_down(sup);
    }

    fn a_failing_restart_is_tried_again_while_the_supervisor_answers() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        trap_exits(true);
        // Starts while `ok` holds, fails while it does not.
        let ok = Arc::new(AtomicBool::new(true));
        let gate = ok.clone();
        let flaky = ChildSpec::new("flaky", move || {
            if gate.load(Ordering::SeqCst) {
                Ok(spawn_link(|| {
                    expect::<()>();
                }))
            } else {
                Err(StartError::Init(ExitReason::Other("not yet".into())))
            }
        });
        let sup = Supervisor::new(Strategy::OneForOne)
            .intensity(u32::MAX, Duration::from_secs(1))
            .child(flaky)
            .start()
            .unwrap();
        let first = supervisor::get_child(sup, "flaky").unwrap();
        ok.store(false, Ordering::SeqCst);
        exit(first, ExitReason::Kill);
        // Its restarts fail again and again; the supervisor still answers.
        wait_until("the child is down", || supervisor::get_child(sup, "flaky").is_none());
        assert_eq!(supervisor::count_children(sup).unwrap().active, 0);
        ok.store(true, Ordering::SeqCst);
        wait_until("the child is back", || supervisor::get_child(sup, "flaky").is_some());
        assert_ne!(supervisor::get_child(sup, "flaky"), Some(first));
        shut_down(sup);
    }

    fn stop_from_any_process_stops_the_children_in_reverse_order() {
        trap_exits(true);
        let sup = Supervisor::new(Strategy::OneForOne)
            .child(probe("a"))
            .child(probe("b"))
            .start()
            .unwrap();
        assert_eq!(evs(2), [Started("a"), Started("b")]);
        // Not its parent: a process of its own stops it.
        let me = self_pid();
        spawn(move || send(me, supervisor::stop(sup, ExitReason::Shutdown)));
        assert_eq!(expect_timeout::<Result<(), CallError>>(HANG), Some(Ok(())));
        assert_eq!(evs(2), [Stopped("b", SHUT), Stopped("a", SHUT)]);
        assert!(!is_alive(sup));
        assert_eq!(supervisor::stop(sup, ExitReason::Shutdown), Err(CallError::NoProc));
    }

    fn a_forever_shutdown_timeout_waits_for_the_child() {
        trap_exits(true);
        let sup = Supervisor::new(Strategy::OneForOne)
            .child(probe("p").shutdown(Shutdown::Timeout(Duration::MAX)))
            .start()
            .unwrap();
        assert_eq!(ev(), Started("p"));
        supervisor::terminate_child(sup, "p").unwrap();
        assert_eq!(ev(), Stopped("p", SHUT));
        shut_down(sup);
    }

    fn child_management_calls() {
        trap_exits(true);
        let sup = Supervisor::new(Strategy::OneForOne).child(probe("a")).start().unwrap();
        assert_eq!(ev(), Started("a"));
        // start_child
        let b = supervisor::start_child(sup, probe("b")).unwrap();
        assert_eq!(ev(), Started("b"));
        assert_eq!(supervisor::get_child(sup, "b"), Some(b));
        assert_eq!(supervisor::start_child(sup, probe("b")), Err(SupervisorError::AlreadyStarted(b)));
        // terminate_child keeps the spec; restart_child starts it again.
        supervisor::terminate_child(sup, "b").unwrap();
        assert_eq!(ev(), Stopped("b", SHUT));
        assert_eq!(supervisor::get_child(sup, "b"), None);
        assert_eq!(supervisor::start_child(sup, probe("b")), Err(SupervisorError::AlreadyPresent("b".into())));
        let b2 = supervisor::restart_child(sup, "b").unwrap();
        assert_eq!(ev(), Started("b"));
        assert_ne!(b, b2);
        assert_eq!(supervisor::restart_child(sup, "b"), Err(SupervisorError::Running));
        assert_eq!(supervisor::delete_child(sup, "b"), Err(SupervisorError::Running));
        // delete_child forgets a stopped child.
        supervisor::terminate_child(sup, "b").unwrap();
        assert_eq!(ev(), Stopped("b", SHUT));
        supervisor::delete_child(sup, "b").unwrap();
        assert_eq!(supervisor::delete_child(sup, "b"), Err(SupervisorError::NotFound));
        assert_eq!(supervisor::terminate_child(sup, "b"), Err(SupervisorError::NotFound));
        assert_eq!(supervisor::restart_child(sup, "zz"), Err(SupervisorError::NotFound));
        let ids: Vec<String> = supervisor::which_children(sup).unwrap().into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["a"]);
        // A child that fails to start is not kept.
        let failing = ChildSpec::new("f", || Err(StartError::Init(ExitReason::Other("nope".into()))));
        assert_eq!(
            supervisor::start_child(sup, failing),
            Err(SupervisorError::Start(StartError::Init(ExitReason::Other("nope".into()))))
        );
        assert_eq!(supervisor::which_children(sup).unwrap().len(), 1);
        shut_down(sup);
        assert_eq!(ev(), Stopped("a", SHUT));
        // A dead supervisor.
        assert_eq!(supervisor::get_child(sup, "a"), None);
        assert_eq!(supervisor::which_children(sup), Err(CallError::NoProc));
        assert_eq!(
            supervisor::start_child(sup, probe("c")),
            Err(SupervisorError::Call(CallError::NoProc))
        );
    }

    fn start_failure_stops_the_started_children() {
        // The starter does not trap exits and survives.
        let bad = ChildSpec::new("b", || Err(StartError::Init(ExitReason::Other("no db".into()))));
        let r = Supervisor::new(Strategy::OneForOne)
            .child(probe("a"))
            .child(bad)
            .child(probe("c"))
            .start();
        match r {
            Err(StartError::Init(ExitReason::Other(why))) => {
                assert!(why.contains("\"b\""), "{why}");
                assert!(why.contains("no db"), "{why}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(evs(2), [Started("a"), Stopped("a", SHUT)]);
        assert!(mailbox_now().is_empty());
        // A panicking start function is a start failure too; so are duplicate ids.
        let boom = ChildSpec::new("p", || panic!("start fn exploded"));
        let r = Supervisor::new(Strategy::OneForOne).child(boom).start();
        assert!(matches!(r, Err(StartError::Init(ExitReason::Other(ref w))) if w.contains("start fn exploded")), "{r:?}");
        let r = Supervisor::new(Strategy::OneForOne).child(probe("d")).child(probe("d")).start();
        assert!(matches!(r, Err(StartError::Init(ExitReason::Other(ref w))) if w.contains("duplicate")), "{r:?}");
    }

    fn named_supervisor() {
        trap_exits(true);
        let sup = Supervisor::new(Strategy::OneForOne).name("top").child(probe("a")).start().unwrap();
        assert_eq!(ev(), Started("a"));
        assert_eq!(whereis("top"), Some(sup));
        assert_eq!(
            Supervisor::new(Strategy::OneForOne).name("top").start(),
            Err(StartError::AlreadyStarted(sup))
        );
        shut_down(sup);
        assert_eq!(ev(), Stopped("a", SHUT));
    }
}
