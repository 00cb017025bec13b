//! Dynamic supervisors (OTP's `simple_one_for_one`): many children of one
//! template, started on demand with an argument.

mod common;

use common::{down_reason, wait_until, HANG};
use graft_otp::prelude::*;
use graft_otp::supervisor::{ChildCount, SupervisorError};
use std::time::Duration;

/// A worker that reports `(arg, pid)` when it starts and crashes on `()`.
fn worker(report: Pid) -> impl Fn(u32) -> Result<Pid, StartError> + Send + Sync + 'static {
    move |arg: u32| {
        Ok(spawn_link(move || {
            send(report, (arg, self_pid()));
            expect::<()>();
            panic!("worker {arg} crashed");
        }))
    }
}

fn started() -> (u32, Pid) {
    expect_timeout::<(u32, Pid)>(HANG).expect("a worker starts")
}

otp_test! {
    fn start_many_children_with_arguments() {
        trap_exits(true);
        let pool = DynamicSupervisor::new(worker(self_pid()))
            .intensity(5, Duration::from_secs(60))
            .start()
            .unwrap();
        let mut pids = Vec::new();
        for arg in 0..50 {
            let pid = pool.start_child(arg).unwrap();
            let (got, from) = started();
            assert_eq!((got, from), (arg, pid));
            pids.push(pid);
        }
        let children = supervisor::which_children(pool.pid()).unwrap();
        assert_eq!(children.len(), 50);
        assert!(children.iter().all(|c| c.id.is_empty() && c.pid.is_some()));
        assert_eq!(
            supervisor::count_children(pool.pid()).unwrap(),
            ChildCount { specs: 50, active: 50, supervisors: 0, workers: 50 }
        );
        // Stopping the supervisor stops them all.
        let monitors: Vec<_> = pids.iter().map(|p| monitor(*p)).collect();
        exit(pool.pid(), ExitReason::Shutdown);
        for m in monitors {
            assert_eq!(down_reason(m), ExitReason::Shutdown);
        }
    }

    fn permanent_children_restart_with_their_argument() {
        trap_exits(true);
        let pool = DynamicSupervisor::new(worker(self_pid()))
            .intensity(5, Duration::from_secs(60))
            .start()
            .unwrap();
        let seven = pool.start_child(7).unwrap();
        assert_eq!(started(), (7, seven));
        send(seven, ());
        let (arg, again) = started();
        assert_eq!(arg, 7);
        assert_ne!(again, seven);
        assert_eq!(supervisor::which_children(pool.pid()).unwrap().len(), 1);
        // terminate_child by pid forgets the child.
        pool.terminate_child(again).unwrap();
        assert!(!is_alive(again));
        assert_eq!(supervisor::which_children(pool.pid()).unwrap().len(), 0);
        assert_eq!(pool.terminate_child(again), Err(SupervisorError::NotFound));
    }

    fn temporary_and_transient_children_are_forgotten() {
        trap_exits(true);
        let me = self_pid();
        let temp = DynamicSupervisor::new(worker(me)).restart(Restart::Temporary).start().unwrap();
        let p = temp.start_child(1).unwrap();
        started();
        send(p, ());
        wait_until("the crashed temporary child is gone", || {
            supervisor::count_children(temp.pid()).unwrap().specs == 0
        });
        let trans = DynamicSupervisor::new(move |n: u32| {
            Ok(spawn_link(move || {
                send(me, (n, self_pid()));
            }))
        })
        .restart(Restart::Transient)
        .start()
        .unwrap();
        trans.start_child(2).unwrap();
        started();
        wait_until("the normally exited transient child is gone", || {
            supervisor::count_children(trans.pid()).unwrap().specs == 0
        });
        assert!(expect_timeout::<(u32, Pid)>(Duration::from_millis(20)).is_none(), "no restart");
    }

    fn failing_template_and_intensity() {
        trap_exits(true);
        let pool = DynamicSupervisor::new(move |n: u32| {
            if n == 0 {
                Err(StartError::Init(ExitReason::Other("zero".into())))
            } else {
                Ok(spawn_link(move || {
                    expect::<()>();
                    panic!("crash {n}");
                }))
            }
        })
        .intensity(1, Duration::from_secs(60))
        .start()
        .unwrap();
        assert_eq!(
            pool.start_child(0),
            Err(SupervisorError::Start(StartError::Init(ExitReason::Other("zero".into()))))
        );
        let m = monitor(pool.pid());
        let a = pool.start_child(1).unwrap();
        send(a, ());
        wait_until("a is restarted", || {
            supervisor::which_children(pool.pid()).unwrap().iter().any(|c| c.pid.is_some_and(|p| p != a))
        });
        let a2 = supervisor::which_children(pool.pid()).unwrap()[0].pid.unwrap();
        send(a2, ());
        assert_eq!(down_reason(m), ExitReason::Shutdown);
    }

    fn gen_server_children() {
        struct Echo(u32);
        impl GenServer for Echo {
            type Call = ();
            type Cast = ();
            type Reply = u32;
            fn handle_call(&mut self, _: (), _: &ReplyTo<u32>) -> CallResult<u32> {
                CallResult::Reply(self.0)
            }
        }
        let pool = DynamicSupervisor::new(|n: u32| gen_server::start(Echo(n)).map(|s| s.pid()))
            .name("echoes")
            .start()
            .unwrap();
        assert_eq!(whereis("echoes"), Some(pool.pid()));
        let servers: Vec<Server<Echo>> =
            (0..10).map(|n| Server::from_pid(pool.start_child(n).unwrap())).collect();
        for (n, s) in servers.iter().enumerate() {
            assert_eq!(s.call(()), Ok(n as u32));
        }
    }
}
