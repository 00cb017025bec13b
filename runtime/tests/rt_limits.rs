//! Mailbox limits (opt-in) and the long-message-queue events of the system
//! monitor. System signals are never dropped nor counted.

mod common;

use graft::*;
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

#[derive(Debug, Clone, PartialEq, Mobile)]
struct Report(Pid);

#[derive(Debug, Clone, PartialEq, Mobile)]
struct Go;

rt_test! {
    fn drop_newest_keeps_the_first_n_and_still_gets_signals() {
        let me = self_pid();
        let victim = spawn(|| {
            let _: Go = expect();
        });
        let (full, r) = spawn_opts()
            .max_mailbox(3, Overflow::DropNewest)
            .spawn_monitor(move || {
                let m = monitor(victim);
                send(me, Go);
                // Only the monitor notification, while the mailbox is full.
                let d = receive()
                    .when(move |d: &ProcessDied| d.monitor == m, |d: ProcessDied| d)
                    .timeout(HANG)
                    .expect("the notification was not dropped");
                send(me, Report(d.pid));
                let kept: Vec<u32> = (0..3).map(|_| expect::<u32>()).collect();
                assert_eq!(kept, vec![0, 1, 2], "the first three were kept");
                assert!(receive().on(|n: u32| n).timeout(Duration::ZERO).is_none());
                send(me, Go);
                // An exit signal still reaches it, full or not.
                let _: Go = expect();
            })
            .unwrap();
        let _: Go = expect();
        for i in 0..10u32 {
            send(full, i);
        }
        assert_eq!(dropped_messages(full), Some(7));
        send(victim, Go);
        assert_eq!(expect::<Report>(), Report(victim));
        let _: Go = expect();
        for i in 0..10u32 {
            send(full, i);
        }
        exit(full, ExitReason::Shutdown);
        assert_eq!(down(r), ExitReason::Shutdown);
    }

    fn kill_ends_the_receiver_with_mailbox_overflow_even_when_trapping() {
        let was = trap_exits(true);
        let (full, r) = spawn_opts()
            .max_mailbox(5, Overflow::Kill)
            .trap_exits()
            .link()
            .spawn_monitor(|| loop {
                let _: Go = expect();
            })
            .unwrap();
        for i in 0..20u32 {
            send(full, i);
        }
        assert_eq!(down(r), ExitReason::MailboxOverflow);
        assert_eq!(ExitReason::MailboxOverflow.to_string(), "mailbox_overflow");
        let s = receive()
            .when(move |s: &ExitSignal| s.from == full, |s: ExitSignal| s)
            .timeout(HANG)
            .expect("the link fires");
        assert_eq!(s.reason, ExitReason::MailboxOverflow);
        trap_exits(was);

        // Under the limit nothing happens.
        let me = self_pid();
        let (ok, r) = spawn_opts()
            .max_mailbox(5, Overflow::Kill)
            .spawn_monitor(move || {
                for _ in 0..20 {
                    let _: u32 = expect();
                    send(me, Go);
                }
            })
            .unwrap();
        for i in 0..20u32 {
            send(ok, i);
            let _: Go = expect();
        }
        assert_eq!(down(r), ExitReason::Normal);
    }

    fn a_subscriber_hears_of_a_long_message_queue_and_its_end() {
        let me = self_pid();
        let previous = system_monitor(
            me,
            SysMonConfig {
                long_message_queue: Some((5, 1)),
                ..SysMonConfig::default()
            },
        );
        assert!(previous.is_none());
        let slow = spawn(move || {
            let _: Go = expect();
            for _ in 0..10 {
                let _: u32 = expect();
            }
            send(me, Go);
        });
        for i in 0..10u32 {
            send(slow, i);
        }
        let on = receive().on(|e: SysMonEvent| e).timeout(HANG).unwrap();
        assert!(
            matches!(on, SysMonEvent::LongMessageQueue { pid, len, long: true } if pid == slow && len >= 5),
            "{on:?}"
        );
        send(slow, Go);
        let off = receive().on(|e: SysMonEvent| e).timeout(HANG).unwrap();
        assert!(
            matches!(off, SysMonEvent::LongMessageQueue { pid, long: false, .. } if pid == slow),
            "{off:?}"
        );
        let _: Go = expect();
        system_monitor_off();
    }
}
