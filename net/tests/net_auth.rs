//! Cookie authentication over real TCP.

mod common;

use common::*;
use graft_net::{NetError, RawClient};

#[test]
fn wrong_cookie_is_refused_on_both_sides() {
    init_log();
    let (a, ra) = start(config("a", "right"));
    let (b, rb) = start(config("b", "wrong"));

    let e = b.connect(a.local_addr()).unwrap_err();
    assert!(matches!(e, NetError::Auth { .. }), "{e:?}");
    // The acceptor tells nothing about itself to a peer that has not
    // proved the cookie, so the error names the address only.
    assert!(
        e.to_string().contains(&a.local_addr().to_string()),
        "error names the peer's address: {e}"
    );
    assert!(!e.to_string().contains("a@"), "{e}");
    let e = a.connect(b.local_addr()).unwrap_err();
    assert!(matches!(e, NetError::Auth { .. }), "{e:?}");
    let e = RawClient::connect(a.local_addr(), &config("probe", "wrong")).unwrap_err();
    assert!(matches!(e, NetError::Auth { .. }), "{e:?}");

    // A node with the right cookie gets in; the refused ones never came up.
    let (c, _rc) = start(config("c", "right"));
    c.connect(a.local_addr()).unwrap();
    ra.wait_for("c up", |ev| !ups(ev).is_empty());
    let names: Vec<String> = ra.ups().into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["c"]);
    assert!(rb.ups().is_empty());
    assert!(b.peers().is_empty());
    wait_until("a lists c", || a.peers().len() == 1);
    a.shutdown();
    b.shutdown();
    c.shutdown();
    assert!(rb.downs().is_empty(), "peer_down only after peer_up");
}

#[test]
fn same_cookie_different_fingerprints_connect() {
    // The transport reports fingerprints; refusing work across builds is the
    // runtime's business.
    init_log();
    let (a, ra) = start(config("a", "k").fingerprint(1).creation(7));
    let (b, rb) = start(config("b", "k").fingerprint(2));
    let pa = b.connect(a.local_addr()).unwrap();
    assert_eq!((pa.fingerprint, pa.creation), (1, 7));
    assert_eq!(pa.listen_addr, a.local_addr());
    assert_eq!(rb.ups(), vec![pa.clone()]);
    assert_eq!(a.creation(), 7);
    assert_eq!(b.peer(pa.id), Some(pa.clone()));
    assert_eq!(b.peer_named("a"), Some(pa));
    assert_eq!(b.peer_named("nobody"), None);
    wait_until("a lists b", || a.peer_named("b").is_some());
    assert_eq!(a.peer_named("b").unwrap().creation, b.creation());
    assert_eq!(a.advertised_addr(), a.local_addr());
    a.shutdown();
    b.shutdown();
    assert_lifecycles(&ra.events());
}

#[test]
fn a_node_does_not_connect_to_itself() {
    init_log();
    let (a, ra) = start(config("a", "k"));
    let e = a.connect(a.local_addr()).unwrap_err();
    assert!(matches!(e, NetError::Handshake(_)), "{e:?}");
    // Another node with the same name is refused too.
    let (twin, _) = start(config("a", "k"));
    assert!(twin.connect(a.local_addr()).is_err());
    assert!(ra.ups().is_empty());
    a.shutdown();
    twin.shutdown();
}
