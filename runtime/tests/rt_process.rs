//! Processes, exits, monitors, links and signals (Erlang semantics).

mod common;

use graft::*;
use std::time::Duration;

rt_test! {
    fn panic_becomes_exit_reason_and_monitors_fire() {
        let child = spawn(|| {
            expect::<()>();
            panic!("deliberate failure");
        });
        let r = monitor(child);
        send(child, ());
        let d: ProcessDied = expect();
        assert_eq!(d.pid, child);
        assert_eq!(d.monitor, r);
        assert_eq!(d.reason, ExitReason::Other("deliberate failure".into()));
        // The node carries on.
        let me = self_pid();
        spawn(move || send(me, 1u8));
        assert_eq!(expect::<u8>(), 1);
    }

    // Many monitors on one process (past the watchers' index threshold),
    // every other one withdrawn: its exit tells exactly the rest, once.
    fn a_much_watched_process_tells_exactly_the_monitors_left() {
        let target = spawn(|| {
            expect::<()>();
        });
        let refs: Vec<MonitorRef> = (0..300).map(|_| monitor(target)).collect();
        for r in refs.iter().step_by(2) {
            demonitor(*r);
        }
        send(target, ());
        let mut got: Vec<MonitorRef> = (0..150)
            .map(|_| {
                let d: ProcessDied = expect();
                assert_eq!(d.pid, target);
                d.monitor
            })
            .collect();
        got.sort();
        let mut want: Vec<MonitorRef> = refs.iter().skip(1).step_by(2).copied().collect();
        want.sort();
        assert_eq!(got, want);
        let extra = receive().on(|d: ProcessDied| d.monitor).timeout(Duration::from_millis(50));
        assert_eq!(extra, None, "one notice per monitor left");
    }

    // A process's monitors end with it: a long-lived server watched by
    // 1,000 short-lived processes (half of them killed) is left with no
    // watcher entry once they are gone (no growth until the server ends).
    fn monitors_end_with_the_process_that_holds_them() {
        let server = spawn(|| {
            expect::<()>();
        });
        let me = self_pid();
        let watchers: Vec<Pid> = (0..1000)
            .map(|i| {
                spawn(move || {
                    monitor(server);
                    send(me, ());
                    if i % 2 == 0 {
                        expect::<()>();
                    }
                })
            })
            .collect();
        for _ in 0..1000 {
            expect::<()>();
        }
        for w in watchers.iter().step_by(2) {
            exit(*w, ExitReason::Kill);
        }
        // A watcher is dead a moment before its exit has removed its monitor
        // from the server (as in Erlang, the removal is a signal), so both
        // are waited for, under one hang guard.
        let t = std::time::Instant::now();
        loop {
            let left = process_info(server).unwrap().monitored_by.len();
            if left == 0 && !watchers.iter().any(|w| is_alive(*w)) {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "{left} left");
            sleep(Duration::from_millis(5));
        }
        // Its own monitor still works.
        let r = monitor(server);
        send(server, ());
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, r);
    }

    fn kill_ends_a_process_parked_in_receive() {
        let child = spawn(|| {
            expect::<u64>();
        });
        let r = monitor(child);
        common::until_parked(child);
        exit(child, ExitReason::Kill);
        let d: ProcessDied = expect();
        assert_eq!((d.pid, d.monitor), (child, r));
        assert_eq!(d.reason, ExitReason::Killed);
        assert!(!is_alive(child));
    }

    fn shutdown_signal_is_a_message_when_trapping() {
        let me = self_pid();
        let child = spawn(move || {
            trap_exits(true);
            send(me, "ready");
            let sig: ExitSignal = expect();
            send(me, sig);
        });
        assert_eq!(expect::<&str>(), "ready");
        exit(child, ExitReason::Shutdown);
        let sig: ExitSignal = expect();
        assert_eq!(sig.from, me);
        assert_eq!(sig.reason, ExitReason::Shutdown);
    }

    fn kill_cannot_be_trapped() {
        let me = self_pid();
        let child = spawn(move || {
            trap_exits(true);
            send(me, "ready");
            loop {
                let _sig: ExitSignal = expect();
            }
        });
        let r = monitor(child);
        assert_eq!(expect::<&str>(), "ready");
        exit(child, ExitReason::Kill);
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, r);
        assert_eq!(d.reason, ExitReason::Killed);
    }

    fn links_propagate_abnormal_exits() {
        // parent (not trapping) <-> child; child crashes; parent dies too.
        let watcher = self_pid();
        let parent = spawn(move || {
            let child = spawn_link(|| {
                expect::<()>();
                panic!("child crash");
            });
            send(watcher, child);
            expect::<u32>(); // never arrives
        });
        let pm = monitor(parent);
        let child: Pid = expect();
        send(child, ());
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, pm);
        assert_eq!(d.reason, ExitReason::Other("child crash".into()));
    }

    fn links_respect_trapping_and_normal_exits() {
        trap_exits(true);
        let a = spawn_link(expect::<()>);
        let b = spawn_link(|| {
            expect::<()>();
            panic!("b fails");
        });
        send(a, ());
        send(b, ());
        let mut got = [expect::<ExitSignal>(), expect::<ExitSignal>()];
        got.sort_by_key(|s| s.from);
        assert_eq!(got[0], ExitSignal { from: a, reason: ExitReason::Normal });
        assert_eq!(got[1], ExitSignal { from: b, reason: ExitReason::Other("b fails".into()) });
        // A non-trapping process ignores a linked process's normal exit.
        let me = self_pid();
        let survivor = spawn(move || {
            let c = spawn_link(|| {});
            let m = monitor(c);
            let _: ProcessDied = receive().when(move |d: &ProcessDied| d.monitor == m, |d| d).wait();
            send(me, "still alive");
        });
        let _ = survivor;
        assert_eq!(expect::<&str>(), "still alive");
    }

    fn killed_propagates_to_links_as_killed() {
        trap_exits(true);
        let child = spawn_link(expect::<()>);
        exit(child, ExitReason::Kill);
        let sig: ExitSignal = expect();
        assert_eq!(sig, ExitSignal { from: child, reason: ExitReason::Killed });
    }

    fn monitoring_dead_or_unknown_pid_is_noproc_at_once() {
        let child = spawn(|| {});
        let m0 = monitor(child);
        let _: ProcessDied = expect(); // normal exit or noproc, depending on timing
        let r = monitor(child);
        let d = expect_timeout::<ProcessDied>(Duration::from_secs(5)).expect("at once");
        assert_eq!((d.monitor, d.reason), (r, ExitReason::NoProc));
        let ghost = Pid::new(this_node(), 12345, 999_999_999);
        let r2 = monitor(ghost);
        let d = expect_timeout::<ProcessDied>(Duration::from_secs(5)).expect("at once");
        assert_eq!((d.pid, d.monitor, d.reason), (ghost, r2, ExitReason::NoProc));
        let _ = m0;
    }

    fn demonitor_suppresses_the_notification() {
        let child = spawn(expect::<()>);
        let r = monitor(child);
        demonitor(r);
        send(child, ());
        let r2 = monitor(spawn(|| {}));
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, r2, "only the live monitor reports");
        assert_eq!(expect_timeout::<ProcessDied>(Duration::from_millis(50)), None);
    }

    fn unlink_stops_propagation() {
        let child = spawn_link(|| {
            expect::<()>();
            panic!("after unlink");
        });
        unlink(child);
        let r = monitor(child);
        send(child, ());
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, r);
        // We are still alive to see it.
    }

    fn terminate_ends_with_normal_and_runs_drop() {
        struct Flag(Pid);
        impl Drop for Flag {
            fn drop(&mut self) {
                send(self.0, "dropped");
            }
        }
        let me = self_pid();
        let (_, r) = spawn_monitor(move || {
            let _f = Flag(me);
            terminate();
        });
        let mut seen = Vec::new();
        seen.push(receive().on(|s: &str| s.to_string()).on(|d: ProcessDied| format!("{:?}", d.reason)).wait());
        seen.push(receive().on(|s: &str| s.to_string()).on(|d: ProcessDied| format!("{:?}", d.reason)).wait());
        let _ = r;
        // The process's locals are dropped before it is reported dead.
        assert_eq!(seen, ["dropped", "Normal"]);
    }

    fn process_info_reports_state() {
        register("info_me", self_pid()).unwrap();
        let child = spawn_link(expect::<()>);
        sleep(Duration::from_millis(5));
        let info = process_info(child).unwrap();
        assert_eq!(info.links, vec![self_pid()]);
        assert_eq!(info.status, Status::Waiting);
        let mine = process_info(self_pid()).unwrap();
        assert_eq!(mine.registered_name.as_deref(), Some("info_me"));
        assert!(processes().contains(&child));
        // The same serial in an earlier incarnation of this node is dead.
        let old = Pid::new(child.node(), child.creation().wrapping_add(1), child.serial());
        assert!(process_info(old).is_none());
        unlink(old);
        assert_eq!(process_info(child).unwrap().links, vec![self_pid()]);
        send(child, ());
    }
}

/// A message whose drop panics.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("bomb dropped");
    }
}

impl graft::Message for Bomb {}

#[test]
fn values_left_behind_that_panic_when_dropped_do_not_take_node_threads_down() {
    // One worker: if it died, nothing would run any more. A hang guard
    // around the whole check, from a thread of our own.
    let node = std::sync::Arc::new(common::node(1));
    let (tx, rx) = std::sync::mpsc::channel();
    let runner = node.clone();
    std::thread::spawn(move || {
        let r = runner.run(|| {
            // Unread mail: dropped when the process ends.
            let (child, m) = spawn_monitor(|| {
                expect::<u8>();
            });
            send(child, Bomb);
            send(child, 1u8);
            let d: ProcessDied = expect();
            assert_eq!((d.monitor, d.reason), (m, ExitReason::Normal));
            // A timed message for a dead process: dropped by the timer.
            send_after(Duration::from_millis(1), child, Bomb);
            sleep(Duration::from_millis(20));
            // The worker and the timer still run.
            let me = self_pid();
            spawn(move || send(me, 2u8));
            expect_timeout::<u8>(Duration::from_secs(5))
        });
        let _ = tx.send(r);
    });
    let r = rx.recv_timeout(Duration::from_secs(20));
    assert!(matches!(r, Ok(Ok(Some(2)))), "{r:?}");
    node.shutdown();
}
