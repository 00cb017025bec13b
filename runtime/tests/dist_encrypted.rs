//! Distribution with encryption on (`NodeConfig::encrypt`): a mesh of
//! three nodes, where only some ask for it (a link is encrypted when either
//! side does), doing remote spawn, calls, monitors and node loss.

mod common;

use graft::*;
use std::time::Duration;

fn node(encrypt: bool) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(2)
            .cookie("sealed")
            .encrypt(encrypt)
            .heartbeat(Duration::from_millis(200)),
    )
    .expect("node starts")
}

#[test]
fn three_encrypted_nodes_spawn_call_monitor_and_lose_a_node() {
    let a = node(true);
    let b = node(false);
    let c = node(true);
    common::three_nodes_spawn_call_monitor_and_lose_one(a, b, c);
}
