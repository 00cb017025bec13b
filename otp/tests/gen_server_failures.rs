//! gen_server failures: callback panics, call timeouts (and no late reply),
//! calls to dead servers, servers dying mid-call, init failures (after OTP's
//! `gen_server_SUITE`: call_timeout, crash, start failures).

mod common;

use common::{down_reason, mailbox_now, HANG};
use graft_otp::prelude::*;
use std::time::Duration;

/// A server whose requests say how to misbehave; it reports `terminate`.
struct Faulty {
    report: Pid,
}

#[derive(Debug)]
enum Do {
    Echo(u32),
    Panic(&'static str),
    /// Sleep this long, then answer.
    SlowEcho(u32, Duration),
    /// Say "in call" to the reporter, then wait for a `()` message forever
    /// (to be killed mid-call).
    Block,
    /// Exit the process with a reason (no panic).
    ExitWith(ExitReason),
    /// `Server::stop` on itself.
    StopSelf,
}

impl graft::Message for Do {}

#[derive(Debug, Clone, PartialEq, graft::Mobile)]
struct Terminated(ExitReason);

impl GenServer for Faulty {
    type Call = Do;
    type Cast = Do;
    type Reply = u32;

    fn handle_call(&mut self, req: Do, _: &ReplyTo<u32>) -> CallResult<u32> {
        match req {
            Do::Echo(n) => CallResult::Reply(n),
            Do::Panic(msg) => panic!("{msg}"),
            Do::SlowEcho(n, d) => {
                sleep(d);
                CallResult::Reply(n)
            }
            Do::Block => {
                send(self.report, "in call");
                expect::<()>();
                CallResult::Reply(0)
            }
            Do::ExitWith(r) => exit_self(r),
            Do::StopSelf => {
                let _ = Server::<Faulty>::from_pid(self_pid()).stop(ExitReason::Normal);
                CallResult::Reply(0)
            }
        }
    }

    fn handle_cast(&mut self, req: Do) -> Flow {
        if let Do::Panic(msg) = req {
            panic!("{msg}");
        }
        Flow::Continue
    }

    fn terminate(&mut self, reason: &ExitReason) {
        send(self.report, Terminated(reason.clone()));
    }
}

fn faulty() -> Server<Faulty> {
    gen_server::start(Faulty { report: self_pid() }).unwrap()
}

fn terminated() -> ExitReason {
    expect_timeout::<Terminated>(HANG).expect("terminate ran").0
}

/// Drops the exit signal of the (linked) server, which the test traps.
fn take_exit_signal(from: Pid) -> ExitReason {
    receive()
        .when(
            move |s: &ExitSignal| s.from == from,
            |s: ExitSignal| s.reason,
        )
        .timeout(HANG)
        .expect("linked exit signal")
}

otp_test! {
    fn panic_in_handle_call_stops_the_server_with_its_message() {
        trap_exits(true);
        let s = faulty();
        let m = monitor(s.pid());
        let r = s.call(Do::Panic("bad request"));
        assert_eq!(r, Err(CallError::Exited(ExitReason::Other("bad request".into()))));
        assert_eq!(terminated(), ExitReason::Other("bad request".into()));
        assert_eq!(down_reason(m), ExitReason::Other("bad request".into()));
        assert_eq!(take_exit_signal(s.pid()), ExitReason::Other("bad request".into()));
        assert!(mailbox_now().is_empty(), "no stray reply or notification");
    }

    fn panic_in_handle_cast_stops_the_server() {
        trap_exits(true);
        let s = faulty();
        let m = monitor(s.pid());
        s.cast(Do::Panic("bad cast"));
        assert_eq!(terminated(), ExitReason::Other("bad cast".into()));
        assert_eq!(down_reason(m), ExitReason::Other("bad cast".into()));
        assert_eq!(s.call(Do::Echo(1)), Err(CallError::NoProc));
    }

    fn a_crash_takes_down_a_linked_caller_that_does_not_trap() {
        let me = self_pid();
        let middle = spawn(move || {
            let s = faulty();
            send(me, s);
            expect::<()>();
        });
        let m = monitor(middle);
        let s: Server<Faulty> = expect_timeout(HANG).unwrap();
        s.cast(Do::Panic("cascade"));
        assert_eq!(down_reason(m), ExitReason::Other("cascade".into()));
    }

    fn call_timeout_leaves_no_late_reply() {
        let s = faulty();
        let slow = Duration::from_millis(50);
        assert_eq!(
            s.call_timeout(Do::SlowEcho(1, slow), Duration::from_millis(1)),
            Err(CallError::Timeout)
        );
        // The server answers the first call (late) before this one.
        assert_eq!(s.call(Do::Echo(2)), Ok(2));
        assert!(mailbox_now().is_empty(), "the late reply was dropped");
        // The server was fine all along; its death later is not reported to us.
        s.stop(ExitReason::Normal).unwrap();
        assert_eq!(terminated(), ExitReason::Normal);
        assert!(mailbox_now().is_empty(), "no ProcessDied from the old call");
    }

    fn many_timeouts_then_a_good_call() {
        let s = faulty();
        for i in 0..20 {
            let r = s.call_timeout(Do::SlowEcho(i, Duration::from_millis(2)), Duration::ZERO);
            // A zero timeout may still win the race when the reply is fast.
            assert!(r == Err(CallError::Timeout) || r == Ok(i), "{r:?}");
        }
        assert_eq!(s.call(Do::Echo(99)), Ok(99));
        assert!(mailbox_now().is_empty());
    }

    fn call_to_a_dead_server_is_noproc() {
        let s = faulty();
        s.stop(ExitReason::Normal).unwrap();
        assert_eq!(terminated(), ExitReason::Normal);
        assert_eq!(s.call(Do::Echo(1)), Err(CallError::NoProc));
        assert_eq!(s.call_infinity(Do::Echo(1)), Err(CallError::NoProc));
        let never = Server::<Faulty>::from_pid(Pid::new(this_node(), 1, 1 << 40));
        assert_eq!(never.call(Do::Echo(1)), Err(CallError::NoProc));
        assert!(mailbox_now().is_empty());
    }

    fn server_killed_mid_call_is_server_died() {
        trap_exits(true);
        let s = faulty();
        let me = self_pid();
        spawn(move || {
            let r = s.call_infinity(Do::Block);
            send(me, r);
        });
        // Once the server is inside the call, kill it.
        assert_eq!(expect_timeout::<&'static str>(HANG), Some("in call"));
        exit(s.pid(), ExitReason::Kill);
        let r: Result<u32, CallError> = expect_timeout(HANG).unwrap();
        assert_eq!(r, Err(CallError::Exited(ExitReason::Killed)));
        assert_eq!(take_exit_signal(s.pid()), ExitReason::Killed);
    }

    fn a_server_stopping_itself_is_calling_self_not_a_hang() {
        trap_exits(true);
        let s = faulty();
        let r = s.call(Do::StopSelf);
        assert!(
            matches!(&r, Err(CallError::Exited(ExitReason::Other(m))) if m.contains("calling_self")),
            "{r:?}"
        );
        let _ = take_exit_signal(s.pid());
        let _ = terminated();
    }

    fn server_exiting_mid_call_is_server_died() {
        trap_exits(true);
        let s = faulty();
        let r = s.call(Do::ExitWith(ExitReason::Other("gone".into())));
        assert_eq!(r, Err(CallError::Exited(ExitReason::Other("gone".into()))));
        // As OTP's exit/1 inside a callback: terminate runs, with that reason.
        assert_eq!(terminated(), ExitReason::Other("gone".into()));
        assert_eq!(take_exit_signal(s.pid()), ExitReason::Other("gone".into()));
    }

    fn init_failure_and_init_panic_are_start_errors() {
        struct Bad(bool);
        impl GenServer for Bad {
            type Call = ();
            type Cast = ();
            type Reply = ();
            fn init(&mut self) -> Result<(), ExitReason> {
                if self.0 {
                    panic!("init exploded");
                }
                Err(ExitReason::Other("no config".into()))
            }
            fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
                CallResult::Reply(())
            }
        }
        // The caller does not trap exits and survives both.
        assert_eq!(
            gen_server::start(Bad(false)).map(|s| s.pid()),
            Err(StartError::Init(ExitReason::Other("no config".into())))
        );
        assert_eq!(
            gen_server::start(Bad(true)).map(|s| s.pid()),
            Err(StartError::Init(ExitReason::Other("init exploded".into())))
        );
        assert_eq!(
            gen_server::start_named("bad", Bad(false)).map(|s| s.pid()),
            Err(StartError::Init(ExitReason::Other("no config".into())))
        );
        assert_eq!(whereis("bad"), None);
        assert!(mailbox_now().is_empty());
    }

    fn killed_during_init_is_exited() {
        trap_exits(true);
        struct Stuck;
        impl GenServer for Stuck {
            type Call = ();
            type Cast = ();
            type Reply = ();
            fn init(&mut self) -> Result<(), ExitReason> {
                exit(self_pid(), ExitReason::Kill);
                Ok(())
            }
            fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
                CallResult::Reply(())
            }
        }
        let r = gen_server::start(Stuck).map(|s| s.pid());
        assert_eq!(r, Err(StartError::Exited(ExitReason::Killed)));
        let sig: ExitSignal = expect_timeout(HANG).unwrap();
        assert_eq!(sig.reason, ExitReason::Killed);
    }

    fn a_server_calling_itself_crashes_instead_of_hanging() {
        trap_exits(true);
        struct Narcissus;
        impl GenServer for Narcissus {
            type Call = ();
            type Cast = ();
            type Reply = ();
            fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
                let me = Server::<Narcissus>::from_pid(self_pid());
                let _ = me.call(());
                CallResult::Reply(())
            }
        }
        let s = gen_server::start(Narcissus).unwrap();
        match s.call(()) {
            Err(CallError::Exited(ExitReason::Other(why))) => assert!(why.contains("calling_self"), "{why}"),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn a_delegated_reply_racing_the_servers_death_is_not_stray() {
        trap_exits(true);
        /// Hands the call to a helper that replies, and dies at once.
        struct Delegate;
        impl GenServer for Delegate {
            type Call = u32;
            type Cast = ();
            type Reply = u32;
            fn handle_call(&mut self, n: u32, from: &ReplyTo<u32>) -> CallResult<u32> {
                let from = from.clone();
                spawn(move || {
                    from.reply(n);
                });
                exit_self(ExitReason::Other("gone".into()))
            }
        }
        let baseline = graft::process_count();
        for n in 0..50 {
            let s = gen_server::start(Delegate).unwrap();
            let r = s.call(n);
            assert!(r == Ok(n) || r == Err(CallError::Exited(ExitReason::Other("gone".into()))), "{r:?}");
            assert_eq!(take_exit_signal(s.pid()), ExitReason::Other("gone".into()));
        }
        // Let every helper finish: each reply was taken in its call or refused.
        common::wait_until("the helpers are done", || graft::process_count() <= baseline);
        assert!(mailbox_now().is_empty(), "no reply landed outside a call");
    }

    fn terminate_panicking_changes_the_exit_reason() {
        trap_exits(true);
        struct BadExit;
        impl GenServer for BadExit {
            type Call = ();
            type Cast = ();
            type Reply = ();
            fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
                CallResult::Reply(())
            }
            fn terminate(&mut self, _: &ExitReason) {
                panic!("terminate failed");
            }
        }
        let s = gen_server::start(BadExit).unwrap();
        assert_eq!(
            s.stop(ExitReason::Normal),
            Err(CallError::Exited(ExitReason::Other("terminate failed".into())))
        );
        assert_eq!(take_exit_signal(s.pid()), ExitReason::Other("terminate failed".into()));
    }
}
