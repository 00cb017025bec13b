//! A process that overflows its stack is reported by name, not as a bare
//! segfault. (The test runs itself again as a child process, which dies.)

use graft::*;
use std::process::Command;

const CHILD: &str = "GRAFT_OVERFLOW_CHILD";

fn deep(n: u64, limit: u64) -> u64 {
    let pad = std::hint::black_box([n; 64]);
    if n == limit {
        return pad[0];
    }
    deep(n + 1, limit) + pad[1]
}

#[test]
fn a_stack_overflow_is_reported_clearly() {
    if std::env::var_os(CHILD).is_some() {
        let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(1)).unwrap();
        let limit = std::hint::black_box(u64::MAX);
        let _ = node.run(move || deep(0, limit));
        unreachable!("the recursion cannot end");
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_stack_overflow_is_reported_clearly",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .expect("run the child");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child must die: {stderr}");
    assert!(
        stderr.contains("overflowed its stack of 64 KiB"),
        "no overflow report in: {stderr}"
    );
}
