//! `NetConfig::unsent_limit`: what a peer has not read stays in the
//! outbox (where the busy limit counts it and other frames interleave), not
//! in a kernel send queue grown to megabytes.

mod common;

use std::time::Duration;

use common::*;
use graft_net::{NetConfig, RawClient};

/// Bytes the kernel took for a peer that completes the handshake and then
/// never reads: everything sent, minus what the outbox still holds once it
/// stops moving.
fn kernel_held(cfg: NetConfig) -> usize {
    let (hub, _) = start(cfg);
    let (_mute, _) = RawClient::connect(hub.local_addr(), &config("mute", "c")).unwrap();
    wait_until("mute up", || hub.peer_named("mute").is_some());
    let s = hub.sender(hub.peer_named("mute").unwrap().id).unwrap();
    let chunk = vec![7u8; 60 << 10];
    let total = 256 * chunk.len();
    for _ in 0..256 {
        s.send(50, &chunk).unwrap();
    }
    wait_until("the outbox settled", || {
        let q = s.queued_bytes();
        std::thread::sleep(Duration::from_millis(50));
        q > 0 && q == s.queued_bytes()
    });
    let held = total - s.queued_bytes();
    hub.shutdown();
    held
}

#[test]
#[cfg(target_os = "linux")]
fn the_kernel_holds_little_of_what_a_peer_does_not_read() {
    init_log();
    let limited = kernel_held(config("hub", "c"));
    let system = kernel_held(config("hub", "c").unsent_limit(0));
    eprintln!("kernel held {limited} bytes with the default limit, {system} without");
    // The receiver's own buffer (a default-sized one: it never read) and
    // 64 KiB unsent, against a send queue that autotuning grew.
    assert!(limited <= 1 << 20, "{limited} bytes in the kernel");
    assert!(limited < system, "{limited} against {system}");
}
