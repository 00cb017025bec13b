//! Distribution over TLS (`NodeConfig::tls`): three nodes with
//! certificates of one CA (made here with rcgen) naming their host, doing
//! remote spawn, calls, monitors and node loss; a node with a certificate
//! of another CA cannot join.

mod common;

use graft::*;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::time::Duration;

struct Ca {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let der = params.self_signed(&key).unwrap().der().to_vec();
    Ca { params, key, der }
}

/// A node certificate of `ca` naming the host 127.0.0.1 (node names are
/// `graft-…@127.0.0.1`), trusting `trust`.
fn tls(ca: &Ca, trust: &Ca) -> TlsConfig {
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params
        .signed_by(&key, &Issuer::from_params(&ca.params, &ca.key))
        .unwrap();
    TlsConfig::new(
        vec![cert.der().to_vec()],
        key.serialize_der(),
        vec![trust.der.clone()],
    )
    .unwrap()
}

fn node(t: TlsConfig) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(2)
            .cookie("sealed")
            .tls(t)
            .heartbeat(Duration::from_millis(200)),
    )
    .expect("node starts")
}

#[test]
fn three_tls_nodes_spawn_call_monitor_and_lose_a_node() {
    let k = ca("cluster CA");
    let a = node(tls(&k, &k));
    let b = node(tls(&k, &k));
    let c = node(tls(&k, &k));
    common::three_nodes_spawn_call_monitor_and_lose_one(a, b, c);
}

#[test]
fn a_node_of_another_ca_cannot_join() {
    let (k, other) = (ca("cluster CA"), ca("another CA"));
    let a = node(tls(&k, &k));
    let x = node(tls(&other, &k));
    let e = x.connect(a.addr()).expect_err("refused");
    assert!(e.to_string().contains("unknown_ca"), "{e}");
    let e = a.connect(x.addr()).expect_err("refused");
    assert!(e.to_string().contains("unknown issuer"), "{e}");
    assert!(a.nodes().is_empty() && x.nodes().is_empty());
}

/// The partial overlay over TLS: its dials (joins, neighbours, probes, the
/// on-demand connections) run TLS on the poller (`connect_then`). Twelve
/// nodes form one cluster, each holding fewer connections than the rest,
/// and a call reaches a node that was found through the overlay.
#[test]
fn a_partial_overlay_forms_over_tls() {
    let _ = env_logger::builder().is_test(true).try_init();
    let k = ca("cluster CA");
    const N: usize = 12;
    let nodes: Vec<Node> = (0..N)
        .map(|_| {
            Node::start(
                NodeConfig::new("127.0.0.1:0")
                    .workers(1)
                    .cookie("sealed")
                    .tls(tls(&k, &k))
                    .heartbeat(Duration::from_millis(500))
                    .max_pending_per_address(64)
                    .topology(Topology::Partial),
            )
            .expect("node starts")
        })
        .collect();
    common::join_tree(&nodes);
    // Hang guard only (a debug build on a loaded machine is slow).
    let t = std::time::Instant::now();
    while !nodes.iter().all(|x| x.nodes().len() == N - 1) {
        assert!(t.elapsed() < Duration::from_secs(120), "no one cluster");
        std::thread::sleep(Duration::from_millis(20));
    }
    for x in &nodes {
        assert!(x.overlay_view().expect("partial").active.len() < N - 1);
    }
    // From the last node to the first: an on-demand connection if the
    // overlay holds none between them.
    let first = nodes[0].id();
    let sq = nodes[N - 1]
        .run(move || call_on(first, 7u64, |x| x * x).unwrap())
        .unwrap();
    assert_eq!(sq, 49);
    for x in nodes {
        x.shutdown();
    }
}
