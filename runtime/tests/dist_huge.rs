//! A 1 GiB message between two OS processes arrives whole.
//!
//! The one test that holds gigabytes (about 3 GiB in the sender and as much
//! in the receiver at the peak): alone in its binary, so that it never runs
//! beside another test of this crate (cargo runs test binaries one at a
//! time). Ignored by default (7 minutes in a debug build on a loaded
//! 2-core machine): run it explicitly, in release.

mod dist_child;

use dist_child::*;
use graft::*;
use std::time::Duration;

/// Hang guard (never a speed assertion): a debug build is slow.
const HANG: Duration = Duration::from_secs(900);

#[test]
fn peer_main() {
    serve_if_peer();
}

#[test]
#[ignore = "1 GiB each side, minutes in a debug build: run alone, \
            `cargo test --release -p graft --test dist_huge -- --ignored`"]
fn a_1_gib_message_arrives_whole_in_another_os_process() {
    let _ = env_logger::builder().is_test(true).try_init();
    let peer = Peer::start();
    let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("dist-child")).expect("node");
    let id = a.connect(peer.addr).unwrap();
    a.run(move || {
        let sink = whereis_on("sink", id).unwrap().expect("sink");
        // Exactly the default maximum, 1 GiB, less the envelope (the
        // sender's pid, a sequence number, the Vec's length).
        let len = (1usize << 30) - 4096;
        let data: Vec<u8> = (0..len)
            .map(|i| (i as u32 ^ (i >> 20) as u32) as u8)
            .collect();
        let sum = checksum(&data);
        send_to(sink, (self_pid(), 7u64, data)).expect("within the limit");
        let (seq, got_len, got_sum): SinkReply = expect_timeout(HANG).expect("the sink's reply");
        assert_eq!((seq, got_len, got_sum), (7, len as u64, sum));
    })
    .unwrap();
    a.shutdown();
    drop(peer);
}
