//! Reuse after exit: the process table (paged by serial) and the stack pool
//! hand out again what exited processes held; an old pid never names a new
//! process, a recycled stack keeps its guard page, and what one process left
//! on its stack means nothing to the next.

mod common;

use graft::*;
use std::time::Duration;

const HANG: Duration = Duration::from_secs(20);

/// Recursion that cannot end (each frame holds half a KiB).
fn deep(n: u64, limit: u64) -> u64 {
    let pad = std::hint::black_box([n; 64]);
    if n == limit {
        return pad[0];
    }
    deep(n + 1, limit) + pad[1]
}

fn down(r: MonitorRef) -> ExitReason {
    receive()
        .when(
            move |d: &ProcessDied| d.monitor == r,
            |d: ProcessDied| d.reason,
        )
        .timeout(HANG)
        .expect("the monitored process ends")
}

/// Spawns `n` processes that each scribble over a few KiB of their stack,
/// and waits for all to end normally: their stacks go back to the pool.
fn churn(n: usize) -> Vec<Pid> {
    let watched: Vec<(Pid, MonitorRef)> = (0..n)
        .map(|i| {
            spawn_monitor(move || {
                let junk = std::hint::black_box([0xA5u8 ^ i as u8; 4096]);
                std::hint::black_box(&junk);
            })
        })
        .collect();
    for &(_, r) in &watched {
        assert_eq!(down(r), ExitReason::Normal);
    }
    watched.into_iter().map(|(p, _)| p).collect()
}

#[test]
fn an_exited_pid_never_reaches_a_later_process() {
    let node = common::node(2);
    node.run(|| {
        // More than a table chunk (64 serials) and a worker's serial block,
        // so that chunks are freed and made again.
        let old = churn(3000);
        let me = self_pid();
        let new: Vec<Pid> = (0..3000)
            .map(|_| {
                spawn(move || {
                    let n: u32 = expect();
                    send(me, (self_pid(), n));
                })
            })
            .collect();
        for &p in &old {
            assert!(!is_alive(p), "{p} exited");
            assert!(process_info(p).is_none());
            assert!(!new.contains(&p), "pids are never reused");
            send(p, 1u32); // dropped: nobody has this pid
        }
        for &p in &new {
            assert!(is_alive(p));
            send(p, 2u32);
        }
        for _ in &new {
            let (from, n) = receive()
                .on(|m: (Pid, u32)| m)
                .timeout(HANG)
                .expect("each new process answers");
            assert!(new.contains(&from));
            assert_eq!(n, 2, "only the message sent to its own pid");
        }
        assert!(receive()
            .on(|m: (Pid, u32)| m)
            .timeout(Duration::from_millis(50))
            .is_none());
    })
    .unwrap();
    node.shutdown();
}

#[test]
fn a_recycled_stack_still_has_its_guard_page_and_no_old_data() {
    let node = common::node(2);
    node.run(|| {
        churn(500);
        // These run on stacks the churn left (the pool is LIFO): each
        // overflows into its guard page and ends alone.
        for _ in 0..20 {
            let (_, r) = spawn_monitor(|| {
                deep(0, std::hint::black_box(u64::MAX));
            });
            assert_eq!(down(r), ExitReason::StackOverflow);
        }
        // And a process on a recycled stack sees its own values only.
        let (_, r) = spawn_monitor(|| {
            let mine = std::hint::black_box([0x5Au8; 4096]);
            assert!(mine.iter().all(|&b| b == 0x5A));
        });
        assert_eq!(down(r), ExitReason::Normal);
    })
    .unwrap();
    node.shutdown();
}
