//! Task, as Elixir's: await, crashes, timeouts, async_stream's order and
//! concurrency limit, and the task supervisor.

mod common;

use common::{down_reason, mailbox_now, wait_until, HANG};
use graft_otp::prelude::*;
use graft_otp::task::{self, TaskError, TaskSupervisor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

otp_test! {
    fn await_returns_the_value_and_leaves_nothing_behind() {
        let t = task::spawn(|| String::from("done"));
        assert_eq!(t.await_timeout(HANG), Ok("done".to_string()));
        let t = task::spawn_unlinked(|| 5u8);
        assert_eq!(t.await_infinity(), Ok(5));
        sleep(ms(10));
        assert!(mailbox_now().is_empty(), "no reply or monitor left over");
    }

    fn a_crash_is_reported_to_a_trapping_owner_of_a_linked_task() {
        trap_exits(true);
        let t = task::spawn(|| -> u8 { panic!("task crash") });
        let pid = t.pid();
        assert_eq!(
            t.await_timeout(HANG),
            Err(TaskError::Exited(ExitReason::Other("task crash".into())))
        );
        // The link delivered the exit signal too (as Elixir's Task.async).
        let sig = receive()
            .when(move |s: &ExitSignal| s.from == pid, |s: ExitSignal| s.reason)
            .timeout(HANG);
        assert_eq!(sig, Some(ExitReason::Other("task crash".into())));
    }

    fn a_linked_task_crash_takes_a_non_trapping_owner_down() {
        let me = self_pid();
        let (owner, m) = spawn_monitor(move || {
            let t = task::spawn(|| -> u8 { panic!("linked crash") });
            let _ = t.await_timeout(HANG);
            send(me, "survived");
        });
        let _ = owner;
        assert_eq!(down_reason(m), ExitReason::Other("linked crash".into()));
        assert!(mailbox_now().is_empty());
    }

    fn a_timeout_kills_the_task_but_not_the_owner() {
        let t = task::spawn(|| sleep(Duration::from_secs(60)));
        let pid = t.pid();
        let watch = monitor(pid);
        assert_eq!(t.await_timeout(ms(10)), Err(TaskError::Timeout));
        assert_eq!(down_reason(watch), ExitReason::Killed);
        // yield does not kill.
        let mut t = task::spawn(|| {
            sleep(ms(50));
            1u8
        });
        assert_eq!(t.yield_timeout(ms(1)), None);
        assert_eq!(t.yield_timeout(HANG), Some(Ok(1)));
        // shutdown of a running task.
        let t = task::spawn(|| sleep(Duration::from_secs(60)));
        let watch = monitor(t.pid());
        assert_eq!(t.shutdown(), None);
        assert_eq!(down_reason(watch), ExitReason::Killed);
    }

    fn async_stream_keeps_order_and_the_concurrency_limit() {
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (r, p) = (running.clone(), peak.clone());
        let out: Vec<u64> = task::async_stream(0..40u64, 4, HANG, move |n| {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            // Later items finish first: order comes from the stream.
            sleep(ms(40 - n));
            r.fetch_sub(1, Ordering::SeqCst);
            n * 10
        })
        .map(|r| r.unwrap())
        .collect();
        assert_eq!(out, (0..40u64).map(|n| n * 10).collect::<Vec<_>>());
        let peak = peak.load(Ordering::SeqCst);
        assert!((1..=4).contains(&peak), "at most 4 at a time, saw {peak}");
    }

    fn async_stream_reports_crashes_and_timeouts_per_item() {
        let out: Vec<Result<u32, TaskError>> =
            task::async_stream(vec![1u32, 2, 3, 4], 2, ms(1000), |n| match n {
                2 => panic!("two"),
                3 => {
                    sleep(Duration::from_secs(60));
                    n
                }
                n => n,
            })
            .collect();
        assert_eq!(
            out,
            [
                Ok(1),
                Err(TaskError::Exited(ExitReason::Other("two".into()))),
                Err(TaskError::Timeout),
                Ok(4)
            ]
        );
    }

    fn dropping_a_stream_kills_its_running_tasks() {
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let mut stream = task::async_stream(0..10u32, 3, HANG, move |n| {
            s.fetch_add(1, Ordering::SeqCst);
            if n > 0 {
                sleep(Duration::from_secs(60));
            }
            n
        });
        assert_eq!(stream.next(), Some(Ok(0)));
        wait_until("three tasks are running", || started.load(Ordering::SeqCst) >= 4);
        let before = graft::process_count();
        drop(stream);
        wait_until("the tasks are gone", || graft::process_count() + 3 <= before);
    }

    fn await_many_collects_in_order() {
        let tasks: Vec<_> = (0..5u64)
            .map(|i| task::spawn(move || {
                sleep(ms(5 * (5 - i)));
                i
            }))
            .collect();
        let got = task::await_many(tasks, HANG);
        assert_eq!(got, (0..5).map(Ok).collect::<Vec<_>>());
    }

    fn the_task_supervisor_runs_and_lists_its_tasks() {
        let sup = TaskSupervisor::start().unwrap();
        let t = sup.async_task(|| 2 + 2).unwrap();
        assert_eq!(t.await_timeout(HANG), Ok(4));
        // A crash at once still reports its own reason (the go message).
        let t = sup.async_nolink(|| -> u8 { panic!("sup crash") }).unwrap();
        assert_eq!(
            t.await_timeout(HANG),
            Err(TaskError::Exited(ExitReason::Other("sup crash".into())))
        );
        // Fire and forget, listed while it runs.
        let me = self_pid();
        let child = sup
            .start_child(move || {
                send(me, "started");
                sleep(Duration::from_secs(60));
            })
            .unwrap();
        assert_eq!(expect_timeout::<&'static str>(HANG), Some("started"));
        assert_eq!(sup.children().unwrap(), [child]);
        // The supervisor's children go down with it.
        let m = monitor(child);
        graft::unlink(sup.pid());
        supervisor::stop(sup.pid(), ExitReason::Shutdown).unwrap();
        assert_eq!(down_reason(m), ExitReason::Shutdown);
        // Temporary: a crashed task is not restarted.
        let sup = TaskSupervisor::start().unwrap();
        let t = sup.async_nolink(|| -> u8 { panic!("once") }).unwrap();
        let _ = t.await_timeout(HANG);
        wait_until("the crashed task is forgotten", || sup.children().unwrap().is_empty());
    }
}
