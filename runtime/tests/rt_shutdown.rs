//! Shutdown stops every process and joins every thread (its own binary, so
//! the thread count is not disturbed by other tests).

use graft::*;
use std::time::{Duration, Instant};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// The thread count once it has settled back to `want`, or what it is after
/// 2 s (a hang guard): `join` returns when the kernel clears the thread's
/// id, a moment before the kernel takes it out of `/proc/self/task`.
fn threads_settled(want: usize) -> usize {
    let t = std::time::Instant::now();
    while threads() != want && t.elapsed() < std::time::Duration::from_secs(2) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    threads()
}

#[test]
fn shutdown_with_10000_live_processes_is_prompt_and_leaks_no_thread() {
    let before = threads();
    let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).unwrap();
    let ready = node
        .run(|| {
            let me = self_pid();
            for _ in 0..10_000 {
                spawn(move || {
                    let _ = blocking(|| 1); // starts a blocking-pool thread too
                    send(me, ());
                    expect::<()>();
                });
            }
            (0..10_000)
                .take_while(|_| expect_timeout::<()>(Duration::from_secs(20)).is_some())
                .count()
        })
        .unwrap();
    assert_eq!(ready, 10_000);
    // The root goes (just after handing back its value); the 10,000 wait
    // in `expect`.
    let wait = Instant::now();
    while node.process_count() > 10_000 && wait.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(node.process_count(), 10_000);
    assert!(threads() > before);
    let t = Instant::now();
    node.shutdown();
    assert!(t.elapsed() < Duration::from_secs(5), "shutdown hung");
    assert_eq!(node.process_count(), 0);
    assert_eq!(
        threads_settled(before),
        before,
        "every thread the node started was joined"
    );
}
