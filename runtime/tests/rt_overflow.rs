//! A process that overflows its stack exits with `StackOverflow`; the node,
//! and every other process, go on. Overflows of OS-thread stacks and faults
//! outside a guard page keep std's behaviour (those tests run themselves
//! again as a child process, which dies).

mod common;

use graft::*;
use std::process::Command;
use std::time::Duration;

const CHILD: &str = "GRAFT_OVERFLOW_CHILD";
const HANG: Duration = Duration::from_secs(20);

/// Recursion that cannot end (each frame holds half a KiB).
fn deep(n: u64, limit: u64) -> u64 {
    let pad = std::hint::black_box([n; 64]);
    if n == limit {
        return pad[0];
    }
    deep(n + 1, limit) + pad[1]
}

fn overflow() {
    let limit = std::hint::black_box(u64::MAX);
    deep(0, limit);
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

#[test]
fn an_overflow_ends_the_process_with_stack_overflow_and_the_node_goes_on() {
    let node = common::node(2);
    node.run(|| {
        // A bystander keeps its state across the overflow.
        let bystander = spawn(|| loop {
            let from: Pid = expect();
            send(from, 7u32);
        });
        let (pid, r) = spawn_monitor(overflow);
        assert_eq!(down(r), ExitReason::StackOverflow);
        assert!(!is_alive(pid));
        assert_eq!(ExitReason::StackOverflow.to_string(), "stack_overflow");
        send(bystander, self_pid());
        assert_eq!(receive().on(|n: u32| n).timeout(HANG), Some(7));

        // A linked process that traps exits sees it as an exit signal.
        trap_exits(true);
        let child = spawn_link(overflow);
        let sig = receive()
            .when(move |s: &ExitSignal| s.from == child, |s: ExitSignal| s)
            .timeout(HANG)
            .expect("the link fires");
        assert_eq!(sig.reason, ExitReason::StackOverflow);

        // A larger stack, on the same node, after all that.
        let (_, r) = spawn_opts()
            .stack_size(1024 * 1024)
            .spawn_monitor(|| {
                deep(0, 100);
            })
            .unwrap();
        assert_eq!(down(r), ExitReason::Normal);
    })
    .unwrap();
    // The root process itself overflowing: `run` reports it.
    assert_eq!(
        node.run(overflow).unwrap_err().to_string(),
        Error::Exited(ExitReason::StackOverflow).to_string()
    );
    assert_eq!(node.run(|| 6 * 7).unwrap(), 42);
    node.shutdown();
}

/// A field of `/proc/self/status`, in KiB.
fn status_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

#[test]
fn a_thousand_overflows_leak_no_stacks() {
    if std::env::var_os(CHILD).is_none() {
        // Alone in a child process: other tests' nodes would move the
        // figures.
        let (ok, stderr) = run_child("a_thousand_overflows_leak_no_stacks");
        let tail: String = stderr
            .lines()
            .filter(|l| !l.contains("overflowed its stack"))
            .collect();
        assert!(ok, "{tail}");
        return;
    }
    let node = common::node(2);
    node.run(|| {
        let round = |n: usize| {
            for _ in 0..n {
                let (_, r) = spawn_monitor(overflow);
                assert_eq!(down(r), ExitReason::StackOverflow);
            }
        };
        // Warm up: the pool's stacks and the heap reach their working size.
        round(100);
        let rss = status_kb("VmRSS:");
        round(1000);
        let rss2 = status_kb("VmRSS:");
        // The abandoned frames own nothing. An overflowed stack is dirty to
        // its last page, so a leaked stack per overflow would be 64 MB more
        // resident. (Not the address space: the pool's refill thread maps
        // stacks ahead, untouched, at its own pace.)
        assert!(
            rss2 < rss + 8 * 1024,
            "RSS grew from {rss} to {rss2} KiB over 1,000 overflows"
        );
    })
    .unwrap();
    node.shutdown();
}

/// Runs the test `name` again in a child process with `CHILD` set; returns
/// its stderr and whether it succeeded.
fn run_child(name: &str) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("run the child");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_os_thread_overflow_keeps_the_std_report() {
    if std::env::var_os(CHILD).is_some() {
        // A node is running (its handler installed) while a plain thread
        // overflows.
        let _node = common::node(1);
        let t = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(overflow)
            .unwrap();
        let _ = t.join();
        unreachable!("the recursion cannot end");
    }
    let (ok, stderr) = run_child("an_os_thread_overflow_keeps_the_std_report");
    assert!(!ok, "the child must die: {stderr}");
    assert!(
        stderr.contains("has overflowed its stack"),
        "no std overflow report in: {stderr}"
    );
}

#[test]
fn a_fault_outside_a_guard_page_still_kills_the_os_process() {
    if std::env::var_os(CHILD).is_some() {
        let node = common::node(1);
        let _ = node.run(|| {
            let p = std::hint::black_box(16usize) as *const u64;
            // SAFETY: none; this reads an unmapped address on purpose.
            unsafe { std::ptr::read_volatile(p) }
        });
        unreachable!("the read faults");
    }
    let (ok, stderr) = run_child("a_fault_outside_a_guard_page_still_kills_the_os_process");
    assert!(!ok, "the child must die: {stderr}");
    assert!(
        !stderr.contains("unreachable"),
        "the fault was swallowed: {stderr}"
    );
}
