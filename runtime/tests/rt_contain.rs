//! Fault containment: exit signals are not exceptions, and a message's
//! panicking `Drop` stays with the message (issue 13).

mod common;

use graft::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

const HANG: Duration = Duration::from_secs(20);

fn down(r: MonitorRef) -> ExitReason {
    receive()
        .when(
            move |d: &ProcessDied| d.monitor == r,
            |d: ProcessDied| d.reason,
        )
        .timeout(HANG)
        .expect("the monitored process ends")
}

/// Nothing of type `T` arrives within a short while.
fn none_of<T: Message>() -> bool {
    receive()
        .on(|_: T| ())
        .timeout(Duration::from_millis(50))
        .is_none()
}

#[derive(Debug, Clone, PartialEq, Mobile)]
struct Survived(u32);

rt_test! {
    fn a_caught_exit_signal_is_acted_on_at_the_next_runtime_call() {
        let me = self_pid();
        let (victim, r) = spawn_monitor(move || {
            let caught = catch_unwind(AssertUnwindSafe(|| loop {
                let _ = receive().on(|_: u8| ()).timeout(Duration::from_millis(5));
            }));
            assert!(caught.is_err(), "the exit signal unwound the loop");
            // Swallowed: the next runtime call ends the process anyway.
            yield_now();
            send(me, Survived(1));
        });
        std::thread::sleep(Duration::from_millis(1));
        exit(victim, ExitReason::Shutdown);
        assert_eq!(down(r), ExitReason::Shutdown);
        assert!(none_of::<Survived>());
    }

    fn a_caught_exit_signal_decides_the_reason_when_the_body_returns() {
        let (victim, r) = spawn_monitor(|| {
            let _ = catch_unwind(AssertUnwindSafe(|| loop {
                let _ = receive().on(|_: u8| ()).timeout(Duration::from_millis(5));
            }));
            // Returns "normally" without another runtime call.
        });
        exit(victim, ExitReason::Other("stop".into()));
        assert_eq!(down(r), ExitReason::Other("stop".into()));

        // The same for a signal the process sent itself, and a send after it.
        let me = self_pid();
        let (_, r) = spawn_monitor(move || {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                exit(self_pid(), ExitReason::Other("own".into()))
            }));
            send(me, Survived(2));
        });
        assert_eq!(down(r), ExitReason::Other("own".into()));
        assert!(none_of::<Survived>());
    }

    fn an_own_normal_exit_signal_ends_the_caller() {
        let me = self_pid();
        let (_, r) = spawn_monitor(move || {
            exit(self_pid(), ExitReason::Normal);
            send(me, Survived(3));
        });
        assert_eq!(down(r), ExitReason::Normal);
        assert!(none_of::<Survived>());

        // Trapping exits, it arrives as a message instead.
        let (_, r) = spawn_monitor(move || {
            trap_exits(true);
            exit(self_pid(), ExitReason::Normal);
            let s: ExitSignal = expect();
            assert_eq!(s, ExitSignal { from: self_pid(), reason: ExitReason::Normal });
            send(me, Survived(4));
        });
        assert_eq!(down(r), ExitReason::Normal);
        assert_eq!(expect::<Survived>(), Survived(4));

        // Another process's normal exit signal is still ignored.
        let (victim, r) = spawn_monitor(move || {
            let _: u8 = expect();
            send(me, Survived(5));
        });
        exit(victim, ExitReason::Normal);
        send(victim, 0u8);
        assert_eq!(expect::<Survived>(), Survived(5));
        assert_eq!(down(r), ExitReason::Normal);
    }

    fn an_own_exit_with_kill_reaches_links_as_a_trappable_kill() {
        let was = trap_exits(true);
        let child = spawn_link(|| exit_self(ExitReason::Kill));
        let s = receive()
            .when(move |s: &ExitSignal| s.from == child, |s: ExitSignal| s)
            .timeout(HANG)
            .unwrap();
        assert_eq!(s.reason, ExitReason::Kill, "an ordinary kill, not killed");

        // Killed by a kill signal: its links see `killed`.
        let child = spawn_link(|| loop {
            let _: u8 = expect();
        });
        exit(child, ExitReason::Kill);
        let s = receive()
            .when(move |s: &ExitSignal| s.from == child, |s: ExitSignal| s)
            .timeout(HANG)
            .unwrap();
        assert_eq!(s.reason, ExitReason::Killed);
        trap_exits(was);

        // A non-trapping process linked to one that ends itself with `kill`
        // dies with `kill` (trappable, so not `killed`), and a trapping one
        // between them would have caught it: the kill does not cascade
        // untrappably.
        let (_, r) = spawn_monitor(|| {
            let _ = spawn_link(|| exit_self(ExitReason::Kill));
            loop {
                let _: u8 = expect();
            }
        });
        assert_eq!(down(r), ExitReason::Kill);
    }

    fn a_panicking_drop_of_undelivered_mail_stays_with_the_mail() {
        let (dead, r) = spawn_monitor(|| {});
        assert_eq!(down(r), ExitReason::Normal);
        // Never sent to before.
        send(dead, Bomb);
        // Sent to while alive (the sender caches its target), then dead.
        let (target, r) = spawn_monitor(|| {
            let b: Bomb = expect();
            std::mem::forget(b);
        });
        send(target, Bomb);
        assert_eq!(down(r), ExitReason::Normal);
        send(target, Bomb);
        assert!(send_to(target, Bomb).is_ok());
        // Through a timer too.
        send_after(Duration::from_millis(1), dead, Bomb);
        sleep(Duration::from_millis(20));
        // The sender lives on.
        send(self_pid(), Survived(6));
        assert_eq!(expect::<Survived>(), Survived(6));
    }
}

/// A message whose drop panics.
#[derive(Debug)]
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("boom in drop");
    }
}

impl Message for Bomb {}
