//! gen_server: calls, casts, replies, names, stop, terminate (after OTP's
//! `gen_server_SUITE`: call/cast, reply later, start/stop, named servers).

mod common;

use common::{mailbox_now, HANG};
use graft_otp::prelude::*;

/// A counter that reports `terminate` to `report`.
struct Counter {
    n: i64,
    report: Option<Pid>,
    /// Set by `StopWith`: `terminate` takes its time, so that a reply sent
    /// before it would reach the caller first.
    slow_terminate: bool,
}

#[derive(Debug, graft::Mobile)]
enum Req {
    Get,
    Add(i64),
    /// Answer later: keep the `ReplyTo` until the next `Flush` cast.
    Later,
    /// Stop with this reason, replying the count.
    StopWith(ExitReason),
    /// Reply twice (through a clone), then go on.
    Twice,
}

#[derive(Debug, graft::Mobile)]
enum Note {
    Add(i64),
    Flush,
}

/// What a test server tells the test process.
#[derive(Debug, Clone, PartialEq, graft::Mobile)]
enum Said {
    Terminated(ExitReason),
    Info(String),
    Replied(bool),
}

#[derive(Default)]
struct Pending(Vec<ReplyTo<i64>>);

impl GenServer for Counter {
    type Call = Req;
    type Cast = Note;
    type Reply = i64;

    fn handle_call(&mut self, req: Req, from: &ReplyTo<i64>) -> CallResult<i64> {
        match req {
            Req::Get => CallResult::Reply(self.n),
            Req::Add(k) => {
                self.n += k;
                CallResult::Reply(self.n)
            }
            Req::Later => {
                graft::local::with(|p: &mut Pending| p.0.push(from.clone()));
                if let Some(r) = self.report {
                    send(r, Said::Info("held".into()));
                }
                CallResult::NoReply
            }
            Req::StopWith(r) => {
                self.slow_terminate = true;
                CallResult::Stop(r, Some(self.n))
            }
            Req::Twice => {
                from.clone().reply(self.n);
                CallResult::Reply(self.n + 1)
            }
        }
    }

    fn handle_cast(&mut self, note: Note) -> Flow {
        match note {
            Note::Add(k) => self.n += k,
            Note::Flush => {
                let pending = graft::local::take::<Pending>().unwrap_or_default();
                for from in pending.0 {
                    let delivered = from.reply(self.n);
                    if let Some(r) = self.report {
                        send(r, Said::Replied(delivered));
                    }
                }
            }
        }
        Flow::Continue
    }

    fn handle_info(&mut self, msg: Unknown) -> Flow {
        if let Some(r) = self.report {
            let text = match msg.downcast::<String>() {
                Ok(s) => s,
                Err(u) => format!("{u:?}"),
            };
            send(r, Said::Info(text));
        }
        Flow::Continue
    }

    fn terminate(&mut self, reason: &ExitReason) {
        if self.slow_terminate {
            sleep(std::time::Duration::from_millis(20));
        }
        if let Some(r) = self.report {
            send(r, Said::Terminated(reason.clone()));
        }
    }
}

fn counter(report: Option<Pid>) -> Counter {
    Counter {
        n: 0,
        report,
        slow_terminate: false,
    }
}

fn said() -> Said {
    expect_timeout::<Said>(HANG).expect("the server reports")
}

otp_test! {
    fn call_and_cast_keep_state_in_order() {
        let c = gen_server::start(counter(None)).unwrap();
        assert_eq!(c.call(Req::Get), Ok(0));
        c.cast(Note::Add(5));
        c.cast(Note::Add(-2));
        assert_eq!(c.call(Req::Add(10)), Ok(13));
        assert_eq!(c.call_infinity(Req::Get), Ok(13));
        assert_eq!(c.call_timeout(Req::Get, HANG), Ok(13));
        // Handles are Copy and compare by pid.
        let d = Server::<Counter>::from_pid(c.pid());
        assert_eq!(c, d);
        assert_eq!(d.call(Req::Get), Ok(13));
        assert!(mailbox_now().is_empty(), "calls leave nothing behind");
    }

    fn many_callers_at_once() {
        let c = gen_server::start(counter(None)).unwrap();
        let me = self_pid();
        for _ in 0..20 {
            spawn(move || {
                for _ in 0..50 {
                    c.call(Req::Add(1)).unwrap();
                }
                send(me, ());
            });
        }
        for _ in 0..20 {
            expect_timeout::<()>(HANG).expect("caller finishes");
        }
        assert_eq!(c.call(Req::Get), Ok(1000));
    }

    fn reply_later_through_reply_to() {
        let c = gen_server::start(counter(Some(self_pid()))).unwrap();
        let me = self_pid();
        spawn(move || {
            let v = c.call(Req::Later);
            send(me, v);
        });
        // The server holds the call until a Flush cast.
        assert_eq!(said(), Said::Info("held".into()));
        c.cast(Note::Add(7));
        c.cast(Note::Flush);
        assert_eq!(said(), Said::Replied(true));
        assert_eq!(expect_timeout::<Result<i64, CallError>>(HANG), Some(Ok(7)));
    }

    fn a_reply_after_the_caller_gave_up_is_refused() {
        let c = gen_server::start(counter(Some(self_pid()))).unwrap();
        assert_eq!(
            c.call_timeout(Req::Later, std::time::Duration::from_millis(5)),
            Err(CallError::Timeout)
        );
        assert_eq!(said(), Said::Info("held".into()));
        c.cast(Note::Flush);
        assert_eq!(said(), Said::Replied(false));
        assert_eq!(c.call(Req::Get), Ok(0));
        assert!(mailbox_now().is_empty(), "the refused reply never arrives");
    }

    fn a_second_reply_is_dropped() {
        let c = gen_server::start(counter(None)).unwrap();
        assert_eq!(c.call(Req::Twice), Ok(0));
        // The second reply (n + 1) never reaches the mailbox.
        assert_eq!(c.call(Req::Get), Ok(0));
        assert!(mailbox_now().is_empty());
    }

    fn named_server() {
        let c = gen_server::start_named("counter", counter(None)).unwrap();
        assert_eq!(whereis("counter"), Some(c.pid()));
        let by_name = Server::<Counter>::whereis("counter").unwrap();
        assert_eq!(by_name.call(Req::Add(2)), Ok(2));
        assert_eq!(
            gen_server::start_named("counter", counter(None)).map(|s| s.pid()),
            Err(StartError::AlreadyStarted(c.pid()))
        );
        c.stop(ExitReason::Normal).unwrap();
        assert_eq!(whereis("counter"), None);
        assert!(Server::<Counter>::whereis("counter").is_none());
    }

    fn stop_from_call_replies_after_terminate() {
        trap_exits(true);
        let c = gen_server::start(counter(Some(self_pid()))).unwrap();
        c.cast(Note::Add(3));
        let m = monitor(c.pid());
        assert_eq!(c.call(Req::StopWith(ExitReason::Shutdown)), Ok(3));
        // `terminate` ran before the reply was sent: its word is here already.
        assert_eq!(
            expect_timeout::<Said>(std::time::Duration::ZERO),
            Some(Said::Terminated(ExitReason::Shutdown))
        );
        let d: ProcessDied = expect_timeout(HANG).unwrap();
        assert_eq!((d.monitor, d.reason), (m, ExitReason::Shutdown));
        // Linked: the starter (trapping) sees the exit too.
        let sig: ExitSignal = expect_timeout(HANG).unwrap();
        assert_eq!(sig, ExitSignal { from: c.pid(), reason: ExitReason::Shutdown });
    }

    fn stop_runs_terminate_and_waits() {
        let c = gen_server::start(counter(Some(self_pid()))).unwrap();
        assert_eq!(c.stop(ExitReason::Normal), Ok(()));
        assert!(!is_alive(c.pid()));
        assert_eq!(said(), Said::Terminated(ExitReason::Normal));
        assert_eq!(c.stop(ExitReason::Normal), Err(CallError::NoProc));
    }

    fn other_messages_go_to_handle_info() {
        let c = gen_server::start(counter(Some(self_pid()))).unwrap();
        send(c.pid(), "hello".to_string());
        assert_eq!(said(), Said::Info("hello".into()));
        // A cast of the wrong type is just another message.
        send(c.pid(), 5u8);
        assert!(matches!(said(), Said::Info(_)));
        assert_eq!(c.call(Req::Get), Ok(0));
    }

    fn run_in_the_current_process() {
        let me = self_pid();
        let pid = spawn(move || {
            let reason = gen_server::run(counter(Some(me)));
            send(me, reason);
        });
        let c = Server::<Counter>::from_pid(pid);
        assert_eq!(c.call(Req::Add(4)), Ok(4));
        assert_eq!(c.call(Req::StopWith(ExitReason::Normal)), Ok(4));
        assert_eq!(said(), Said::Terminated(ExitReason::Normal));
        assert_eq!(expect_timeout::<ExitReason>(HANG), Some(ExitReason::Normal));
    }

    fn terminate_on_parent_shutdown_when_trapping() {
        /// Traps exits in init, so its parent's Shutdown reaches terminate.
        struct Trapper(Pid);
        impl GenServer for Trapper {
            type Call = ();
            type Cast = ();
            type Reply = ();
            fn init(&mut self) -> Result<(), ExitReason> {
                trap_exits(true);
                Ok(())
            }
            fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
                CallResult::Reply(())
            }
            fn handle_info(&mut self, msg: Unknown) -> Flow {
                send(self.0, Said::Info(format!("{:?}", msg.downcast::<ExitSignal>().map(|s| s.reason))));
                Flow::Continue
            }
            fn terminate(&mut self, reason: &ExitReason) {
                send(self.0, Said::Terminated(reason.clone()));
            }
        }
        let me = self_pid();
        let parent = spawn(move || {
            let s = gen_server::start(Trapper(me)).unwrap();
            send(me, s.pid());
            expect::<()>();
            exit_self(ExitReason::Shutdown);
        });
        let server: Pid = expect_timeout(HANG).unwrap();
        let m = monitor(server);
        // A Shutdown from someone else is just information.
        exit(server, ExitReason::Shutdown);
        assert_eq!(said(), Said::Info("Ok(Shutdown)".into()));
        assert!(is_alive(server));
        // From the parent, it stops the server, through terminate.
        send(parent, ());
        assert_eq!(said(), Said::Terminated(ExitReason::Shutdown));
        let d: ProcessDied = expect_timeout(HANG).unwrap();
        assert_eq!((d.monitor, d.reason), (m, ExitReason::Shutdown));
    }

    fn cast_to_a_dead_server_is_dropped() {
        let c = gen_server::start(counter(None)).unwrap();
        c.stop(ExitReason::Normal).unwrap();
        c.cast(Note::Add(1));
        assert_eq!(c.call(Req::Get), Err(CallError::NoProc));
    }
}

#[test]
fn handles_are_send_sync_and_copy() {
    fn send_sync<T: Send + Sync>() {}
    fn copy<T: Copy>() {}
    send_sync::<Server<Counter>>();
    copy::<Server<Counter>>();
    send_sync::<ReplyTo<i64>>();
    send_sync::<CallError>();
    send_sync::<StartError>();
    send_sync::<ChildSpec>();
    send_sync::<Supervisor>();
}
