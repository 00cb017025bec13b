//! Distribution over TLS (`NodeConfig::tls`): three nodes with
//! certificates of one CA (made here with rcgen) naming their host, doing
//! remote spawn, calls, monitors and node loss; a node with a certificate
//! of another CA cannot join.

use graft::*;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::time::{Duration, Instant};

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
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn three_tls_nodes_spawn_call_monitor_and_lose_a_node() {
    let k = ca("cluster CA");
    let a = node(tls(&k, &k));
    let b = node(tls(&k, &k));
    let c = node(tls(&k, &k));
    a.connect(b.addr()).unwrap();
    c.connect(b.addr()).unwrap();
    eventually("a full mesh", || {
        a.nodes().len() == 2 && c.nodes().len() == 2
    });
    let (b_id, c_id) = (b.id(), c.id());

    // Remote spawn with a captured environment, and a call, to each.
    let got = a
        .run(move || {
            let me = self_pid();
            let label = String::from("sealed answer");
            spawn_on(b_id, (me, label), |(to, label)| {
                send(to, (label, this_node()))
            })
            .unwrap();
            let from_b = expect::<(String, NodeId)>();
            let sq = call_on(c_id, 12u64, |x| x * x).unwrap();
            (from_b, sq)
        })
        .unwrap();
    assert_eq!(got, (("sealed answer".to_string(), b_id), 144));

    // A monitor on a process of c fires with NoConnection when c goes.
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let r = a.run(move || {
            let p = spawn_on(c_id, (), |()| {
                expect::<u8>();
            })
            .unwrap();
            let m = monitor(p);
            tx.send(()).unwrap();
            receive()
                .when(move |d: &ProcessDied| d.monitor == m, |d| d.reason)
                .timeout(Duration::from_secs(20))
                .expect("the monitor fires")
        });
        (a, r)
    });
    rx.recv().unwrap();
    c.shutdown();
    let (a, r) = waiter.join().unwrap();
    assert_eq!(r.unwrap(), ExitReason::NoConnection);
    // The rest of the mesh goes on.
    let v = a.run(move || call_on(b_id, 7u32, |x| x + 1)).unwrap();
    assert_eq!(v.unwrap(), 8);
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
