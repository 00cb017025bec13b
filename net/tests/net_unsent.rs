//! `NetConfig::unsent_limit`: what a peer has not read stays in the
//! outbox (where the busy limit counts it and other frames interleave), not
//! in a kernel send queue grown to megabytes.

mod common;

use common::*;
use graft_net::NetConfig;

/// Bytes the kernel took for a peer that completes the handshake and then
/// never reads: everything sent, minus what the outbox still holds once it
/// stops moving.
fn kernel_held(cfg: NetConfig) -> usize {
    let (hub, _) = start(cfg);
    let (_mute, s, total) = stalled_peer(&hub, "mute");
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
