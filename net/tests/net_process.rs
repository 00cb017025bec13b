//! A peer in another OS process, killed with SIGKILL, goes down.
//!
//! The child is this test binary again, running the ignored `child_node`
//! test with the parent's address in the environment.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use graft_net::NetError;

const PARENT_ADDR: &str = "GRAFT_NET_TEST_PARENT";

#[test]
#[ignore = "run by other_process_killed_goes_down as a child process"]
fn child_node() {
    let Ok(addr) = std::env::var(PARENT_ADDR) else {
        return;
    };
    let (t, _r) = start(config("child", "c"));
    let parent = t.connect(addr.parse().unwrap()).unwrap();
    t.send(parent.id, 90, b"child ready").unwrap();
    // Wait to be killed (bounded, in case the parent is gone).
    std::thread::sleep(GUARD);
}

#[test]
fn other_process_killed_goes_down() {
    init_log();
    let (a, ra) = start(config("parent", "c").heartbeat(Duration::from_millis(200)));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_node", "--ignored", "--nocapture"])
        .env(PARENT_ADDR, a.local_addr().to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    ra.wait_for("child ready", |ev| count_frames(ev) == 1);
    let up = ra.ups();
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].name, "child");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    ra.wait_for("child down", |ev| !downs(ev).is_empty());
    let downs = ra.downs();
    assert_eq!(downs.len(), 1);
    // The kernel closes a killed process's sockets, so this is seen at once
    // as a close (or a reset); a vanished machine would be a heartbeat timeout.
    assert!(
        matches!(
            downs[0].1,
            NetError::Closed | NetError::Io(_) | NetError::HeartbeatTimeout(_)
        ),
        "{:?}",
        downs[0].1
    );
    assert!(a.peers().is_empty());
    a.shutdown();
    assert_lifecycles(&ra.events());
}
