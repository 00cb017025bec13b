//! Mailboxes, selective receive, timeouts, ordering, names.

mod common;

use graft::*;
use std::time::{Duration, Instant};

rt_test! {
    fn selective_receive_keeps_unmatched_in_order() {
        let me = self_pid();
        for i in 0..5u32 {
            send(me, i);
            send(me, format!("s{i}"));
        }
        // Take the strings first; the numbers stay, in order.
        let strings: Vec<String> = (0..5).map(|_| expect::<String>()).collect();
        assert_eq!(strings, ["s0", "s1", "s2", "s3", "s4"]);
        let nums: Vec<u32> = (0..5).map(|_| expect::<u32>()).collect();
        assert_eq!(nums, [0, 1, 2, 3, 4]);
    }

    // A message that came alone to an empty private queue is matched where
    // it lies; one no clause takes stays the oldest, in front of mail that
    // a guard's own receive moved meanwhile, and a later one is found.
    fn a_lone_message_not_taken_stays_oldest() {
        let me = self_pid();
        send(me, 5u64);
        let once = std::cell::Cell::new(true);
        let got = receive()
            .when(
                |_: &u64| {
                    // A guard that sends and receives (once): the drain it
                    // causes moves 7 into the private queue behind 5.
                    if once.replace(false) {
                        send(self_pid(), 7u32);
                        send(self_pid(), 8u16);
                        assert_eq!(receive().on(|x: u16| x).timeout(Duration::ZERO), Some(8));
                    }
                    false
                },
                |_| 0,
            )
            .on(|x: u32| x)
            .timeout(Duration::from_secs(1));
        assert_eq!(got, Some(7));
        // 5 is the oldest left.
        let oldest = receive().any(|u: Unknown| u.downcast::<u64>().ok()).timeout(Duration::ZERO);
        assert_eq!(oldest, Some(Some(5)));
        // Alone again, taken at once; then one that only a later message
        // satisfies, the first staying.
        send(me, 1u8);
        assert_eq!(expect::<u8>(), 1);
        send(me, 2u8);
        spawn(move || send(me, 3u32));
        assert_eq!(expect::<u32>(), 3);
        assert_eq!(expect::<u8>(), 2);
    }

    fn guards_pick_and_skip() {
        let me = self_pid();
        for i in 0..10u32 {
            send(me, i);
        }
        let big = receive().when(|n: &u32| *n >= 7, |n| n).wait();
        assert_eq!(big, 7);
        let rest: Vec<u32> = (0..9).map(|_| expect::<u32>()).collect();
        assert_eq!(rest, [0, 1, 2, 3, 4, 5, 6, 8, 9]);
    }

    fn any_clause_takes_the_oldest() {
        let me = self_pid();
        send(me, 1.5f64);
        send(me, 2u8);
        let got = receive().on(|n: u8| format!("u8 {n}")).any(|u: Unknown| {
            u.downcast::<f64>().map(|f| format!("f64 {f}")).unwrap_or_default()
        }).wait();
        assert_eq!(got, "f64 1.5");
    }

    fn receive_timeout_fires() {
        let t = Instant::now();
        let r = receive().on(|n: u8| n).timeout(Duration::from_millis(30));
        assert_eq!(r, None);
        assert!(t.elapsed() >= Duration::from_millis(30));
        // Zero timeout: a poll.
        send(self_pid(), 3u8);
        assert_eq!(receive().on(|n: u8| n).timeout(Duration::ZERO), Some(3));
    }

    fn sleep_and_send_after() {
        let t = Instant::now();
        sleep(Duration::from_millis(20));
        assert!(t.elapsed() >= Duration::from_millis(20));
        let tr = send_after(Duration::from_millis(10), self_pid(), "late");
        assert_eq!(expect::<&str>(), "late");
        assert!(!cancel_timer(tr));
        let tr = send_after(Duration::from_millis(10), self_pid(), "cancelled");
        assert!(cancel_timer(tr));
        assert_eq!(expect_timeout::<&str>(Duration::from_millis(40)), None);
    }

    fn fifo_per_sender_with_8_senders() {
        const SENDERS: u64 = 8;
        const N: u64 = 100_000;
        let me = self_pid();
        for s in 0..SENDERS {
            spawn(move || {
                for i in 0..N {
                    send(me, (s, i));
                    if i % 1000 == 0 {
                        yield_now();
                    }
                }
            });
        }
        let mut next = [0u64; SENDERS as usize];
        for _ in 0..SENDERS * N {
            let (s, i) = expect::<(u64, u64)>();
            assert_eq!(next[s as usize], i, "sender {s} out of order");
            next[s as usize] += 1;
        }
        assert!(next.iter().all(|&n| n == N));
    }

    fn names_register_whereis_and_errors() {
        let me = self_pid();
        assert!(matches!(send_to("nobody", 1u8), Err(Error::NotRegistered(n)) if n == "nobody"));
        register("svc", me).unwrap();
        assert_eq!(whereis("svc"), Some(me));
        let other = spawn(expect::<()>);
        assert!(matches!(register("svc", other), Err(Error::NameTaken(_))));
        assert!(matches!(register("svc2", me), Err(Error::AlreadyRegistered(_, _))));
        send_to("svc", 5u8).unwrap();
        assert_eq!(expect::<u8>(), 5);
        assert_eq!(unregister("svc"), Some(me));
        assert_eq!(whereis("svc"), None);
        // A name is freed when its process exits.
        register("short", other).unwrap();
        let r = monitor(other);
        send(other, ());
        let _: ProcessDied = receive().when(move |d: &ProcessDied| d.monitor == r, |d| d).wait();
        assert_eq!(whereis("short"), None);
    }

    fn process_local_storage_moves_with_the_process() {
        local::set(1u64);
        for _ in 0..100 {
            yield_now();
            local::with(|n: &mut u64| *n += 1);
        }
        assert_eq!(local::get::<u64>(), Some(101));
    }
}
