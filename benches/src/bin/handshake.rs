//! handshake: the cost of one full distribution handshake (TCP connect,
//! cookie proof both ways, the acceptor's verdict), client and server in
//! this process on loopback. A fresh node name per connection, so that every
//! one is a new peer, not a duplicate.
//! Figures: us_per_handshake.

use std::sync::Arc;
use std::time::Instant;

use graft_benches::report;
use graft_net::{Handler, NetConfig, NetError, PeerInfo, RawClient, Transport};

const ROUNDS: usize = 2_000;

struct Quiet;
impl Handler for Quiet {
    fn peer_up(&self, _: &PeerInfo) {}
    fn frame(&self, _: &PeerInfo, _: u8, _: Vec<u8>) {}
    fn peer_down(&self, _: &PeerInfo, _: &NetError) {}
}

fn main() {
    env_logger::init();
    let any = "127.0.0.1:0".parse().unwrap();
    let server = Transport::start(
        NetConfig::new("server", any).cookie("graftbench"),
        Arc::new(Quiet),
    )
    .expect("server");
    let addr = server.local_addr();
    let run = |n: usize, tag: &str| {
        let t0 = Instant::now();
        for i in 0..n {
            let cfg = NetConfig::new(format!("client-{tag}-{i}"), any).cookie("graftbench");
            let (raw, _peer) = RawClient::connect(addr, &cfg).expect("handshake");
            drop(raw);
        }
        t0.elapsed().as_secs_f64() * 1e6 / n as f64
    };
    run(200, "warm");
    let us = run(ROUNDS, "m");
    report("handshake", "us_per_handshake", "us", us);
    server.shutdown();
}
