//! handshake: the cost of one full distribution handshake (TCP connect,
//! cookie proof both ways, the acceptor's verdict), client and server in
//! this process on loopback. A fresh node name per connection, so that every
//! one is a new peer, not a duplicate.
//! Figures: us_per_handshake; with GRAFT_BENCH_TLS=1, us_per_handshake_tls
//! (the TLS 1.3 handshake with both certificates verified, then the cookie
//! handshake inside it; each client is a fresh `Transport`, started
//! outside the timed part; us_per_handshake_transport_plain is the same
//! loop without TLS, for comparison).

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

/// Transport to transport (client threads included), over TLS or, for
/// comparison, plain TCP.
fn transport_bench(tls: Option<graft_net::TlsConfig>) -> f64 {
    const TLS_ROUNDS: usize = 300;
    let any = "127.0.0.1:0".parse().unwrap();
    let with = |c: NetConfig| match tls.clone() {
        Some(t) => c.tls(t),
        None => c,
    };
    let server = Transport::start(
        with(NetConfig::new("server@127.0.0.1", any).cookie("graftbench")),
        Arc::new(Quiet),
    )
    .expect("server");
    let addr = server.local_addr();
    let run = |n: usize, tag: &str| {
        let mut total = 0.0;
        for i in 0..n {
            let cfg = with(
                NetConfig::new(format!("client-{tag}-{i}@127.0.0.1"), any).cookie("graftbench"),
            );
            let client = Transport::start(cfg, Arc::new(Quiet)).expect("client");
            let t0 = Instant::now();
            client.connect(addr).expect("handshake");
            total += t0.elapsed().as_secs_f64();
            client.shutdown();
        }
        total * 1e6 / n as f64
    };
    run(30, "warm");
    let us = run(TLS_ROUNDS, "m");
    server.shutdown();
    us
}

fn tls_bench() {
    let (dir, tls) = graft_benches::make_tls();
    let plain = transport_bench(None);
    let us = transport_bench(Some(tls));
    report("handshake", "us_per_handshake_tls", "us", us);
    report("handshake", "us_per_handshake_transport_plain", "us", plain);
    let _ = std::fs::remove_dir_all(dir);
}

fn main() {
    env_logger::init();
    if std::env::var_os("GRAFT_BENCH_TLS").is_some_and(|v| v == "1") {
        return tls_bench();
    }
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
