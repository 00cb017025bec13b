//! The stack pool gives memory back: after 100,000 parked processes exit,
//! the pages of their stacks go back to the kernel (beyond the few kept
//! resident, once idle), so the OS process's RSS falls back near where it
//! started; a trimmed stack serves a new process as a fresh one would, its
//! guard page still a guard.
//!
//! One test in this file: it reads the RSS of the whole test binary.

use graft::*;
use std::time::{Duration, Instant};

const N: usize = 100_000;
const HANG: Duration = Duration::from_secs(60);

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = s
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .expect("a VmRSS line");
    kb * 1024
}

/// Recursion that cannot end (each frame holds half a KiB).
fn deep(n: u64, limit: u64) -> u64 {
    let pad = std::hint::black_box([n; 64]);
    if n == limit {
        return pad[0];
    }
    deep(n + 1, limit) + pad[1]
}

#[test]
fn rss_falls_back_after_many_processes_exit() {
    let node = Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(2)
            .stack_trim(64, Duration::from_millis(100)),
    )
    .expect("node");
    let (rss0, rss1, rss2) = node
        .run(|| {
            let me = self_pid();
            let rss0 = rss_bytes();
            let pids: Vec<Pid> = (0..N)
                .map(|i| {
                    spawn(move || {
                        // A few KiB of stack each, as a real body uses.
                        let junk = std::hint::black_box([i as u8; 2000]);
                        std::hint::black_box(&junk);
                        send(me, ());
                        expect::<()>();
                        send(me, ());
                    })
                })
                .collect();
            for _ in 0..N {
                expect::<()>();
            }
            let rss1 = rss_bytes();
            for &p in &pids {
                send(p, ());
            }
            for _ in 0..N {
                expect::<()>();
            }
            // The trim runs in the background, once the stacks sat idle.
            let deadline = Instant::now() + HANG;
            let target = rss0 + (rss1 - rss0) / 8;
            let mut rss2 = rss_bytes();
            while rss2 > target && Instant::now() < deadline {
                sleep(Duration::from_millis(50));
                rss2 = rss_bytes();
            }
            (rss0, rss1, rss2)
        })
        .expect("run");
    eprintln!("RSS: {rss0} at start, {rss1} with {N} parked, {rss2} after they exit");
    assert!(
        rss1 > rss0 + (N as u64) * 4096,
        "100,000 parked processes hold their stack pages: {rss0} -> {rss1}"
    );
    assert!(
        rss2 <= rss0 + (rss1 - rss0) / 8,
        "RSS falls back after the exits: {rss0} at start, {rss1} with {N} parked, {rss2} after"
    );

    // Trimmed stacks serve again: bodies that use their stack, and one
    // that overflows into its (kept) guard page.
    let ok = node
        .run(|| {
            let me = self_pid();
            for i in 0..2_000u32 {
                spawn(move || {
                    let v = std::hint::black_box([i; 1024]);
                    send(me, v.iter().map(|&x| x as u64).sum::<u64>());
                });
            }
            let mut sum = 0u64;
            for _ in 0..2_000 {
                sum += expect_timeout::<u64>(HANG).expect("a reply");
            }
            let (_, r) = spawn_monitor(|| {
                deep(0, u64::MAX);
            });
            let died = receive()
                .when(
                    move |d: &ProcessDied| d.monitor == r,
                    |d: ProcessDied| d.reason,
                )
                .timeout(HANG)
                .expect("the overflowing process ends");
            (sum, died)
        })
        .expect("run");
    let want: u64 = (0..2_000u64).map(|i| i * 1024).sum();
    assert_eq!(ok, (want, ExitReason::StackOverflow));
    node.shutdown();
}
