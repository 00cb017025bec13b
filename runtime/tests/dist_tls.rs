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
