//! A node in a second OS process for the distribution tests: this test
//! executable started again with `GRAFT_TEST_PEER=1`, running only the
//! `peer_main` test, which serves a `sink` and an `echo` until its standard
//! input closes. Both processes run the same executable, so they share
//! every message type.
#![allow(dead_code, unreachable_pub)]

use graft::*;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

pub const PEER_ENV: &str = "GRAFT_TEST_PEER";

/// What the sink answers for each message: its sequence number, length and
/// a checksum of the bytes.
pub type SinkReply = (u64, u64, u64);

/// A cheap checksum that sees every byte and its position.
pub fn checksum(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for chunk in data.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x1000_0000_01b3);
    }
    h
}

/// The body of `peer_main` in the child: returns at once in the parent.
pub fn serve_if_peer() {
    if std::env::var_os(PEER_ENV).is_none() {
        return;
    }
    let node = Node::start(NodeConfig::new("127.0.0.1:0").cookie("dist-child")).expect("node");
    node.spawn(|| {
        register("sink", self_pid()).unwrap();
        loop {
            let (from, seq, data): (Pid, u64, Vec<u8>) = expect();
            send(from, (seq, data.len() as u64, checksum(&data)));
        }
    })
    .unwrap();
    node.spawn(|| {
        register("echo", self_pid()).unwrap();
        loop {
            let (from, n): (Pid, u64) = expect();
            send(from, n);
        }
    })
    .unwrap();
    // Both names are registered before the address is printed.
    node.run(|| {
        while whereis("sink").is_none() || whereis("echo").is_none() {
            sleep(std::time::Duration::from_millis(1));
        }
    })
    .unwrap();
    println!("listening on {}", node.addr());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    node.shutdown();
    std::process::exit(0);
}

/// The child process, killed when dropped.
pub struct Peer {
    pub child: Child,
    pub addr: SocketAddr,
    _out: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Peer {
    pub fn start() -> Peer {
        let mut child = Command::new(std::env::current_exe().expect("exe"))
            .args(["--exact", "peer_main", "--nocapture", "--test-threads=1"])
            .env(PEER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the peer process");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let addr = loop {
            let line = lines.next().expect("the peer's address").expect("readable");
            // The harness may have written "test peer_main ... " first.
            if let Some(at) = line.find("listening on ") {
                break line[at + 13..].trim().parse().expect("an address");
            }
        };
        Peer {
            child,
            addr,
            _out: lines,
        }
    }

    /// Stops (`SIGSTOP`) or continues (`SIGCONT`) the child.
    pub fn signal(&self, stop: bool) {
        let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.signal(false);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident set size of this process, from `/proc/self/status`.
pub fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A node of this OS process with the peer's cookie.
pub fn node(cfg: NodeConfig) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(cfg.cookie("dist-child")).expect("node")
}
