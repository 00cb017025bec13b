//! One stranger cannot take every handshake slot: at most
//! `max_pending_per_address` of the pending handshakes come from one source
//! address. A stranger on 127.0.0.2 opens many sockets (idle ones, and ones
//! that send a valid preface and stall); it gets its share and no more, the
//! rest are closed at once and counted, and a real peer from 127.0.0.1
//! connects and exchanges frames while the stranger holds its share.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;
use graft_net::{NetConfig, FIRST_USER_KIND};
use socket2::{Domain, Protocol, Socket, Type};

/// A TCP connection to `to` from the address `from` (port chosen by the
/// kernel): the stranger's sockets, bound before connect.
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    s.bind(&local.into()).unwrap();
    s.connect(&to.into()).unwrap();
    TcpStream::from(s)
}

/// The first frame of a real handshake: `HELLO("GRFT", version 3)`.
const PREFACE: [u8; 12] = [0, 0, 0, 6, 1, 0, b'G', b'R', b'F', b'T', 0, 3];

const STRANGER: usize = 40;

#[test]
fn a_stranger_holds_its_share_of_slots_and_a_real_peer_still_connects() {
    init_log();
    let (a, ra) = start(config("a", "c"));
    let per = NetConfig::DEFAULT_MAX_PENDING_PER_ADDRESS;
    assert!(per < NetConfig::DEFAULT_MAX_PENDING_HANDSHAKES);

    let mut flood = Vec::with_capacity(STRANGER);
    for i in 0..STRANGER {
        let mut s = connect_from("127.0.0.2", a.local_addr());
        if i % 2 == 1 {
            s.write_all(&PREFACE).unwrap();
        }
        flood.push(s);
    }
    wait_until("every stranger socket accepted or refused", || {
        let st = a.handshake_stats();
        st.pending + st.refused_per_address == STRANGER as u64
    });
    let st = a.handshake_stats();
    eprintln!("{st:?}");
    assert_eq!(st.pending, per as u64, "{st:?}");
    assert_eq!(st.refused_per_address, (STRANGER - per) as u64, "{st:?}");
    assert_eq!(st.refused_over_limit, 0, "{st:?}");

    // The refused sockets were closed at once.
    let mut closed = 0;
    for s in &mut flood {
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut buf = [0u8; 16];
        match s.read(&mut buf) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert!(closed >= STRANGER - per, "{closed} closed");

    // A real peer from 127.0.0.1, while the stranger holds its share.
    let (b, rb) = start(config("b", "c"));
    let pa = b.connect(a.local_addr()).expect("the real peer connects");
    assert_eq!(pa.name, "a");
    for i in 0..20u32 {
        b.send(pa.id, FIRST_USER_KIND, &i.to_be_bytes()).unwrap();
    }
    ra.wait_for("20 frames from b", |ev| count_frames(ev) == 20);
    assert_eq!(a.handshake_stats().pending, per as u64);
    assert_eq!(a.peer_named("b").map(|p| p.name), Some("b".to_string()));

    // Another stranger address gets its own share (the limit is per
    // address, not a second global limit).
    let mut other: Vec<TcpStream> = (0..per + 3)
        .map(|_| connect_from("127.0.0.3", a.local_addr()))
        .collect();
    wait_until("the second stranger's sockets accepted or refused", || {
        let st = a.handshake_stats();
        st.pending == 2 * per as u64 && st.refused_per_address == (STRANGER - per + 3) as u64
    });

    // When the stranger gives up, its slots are free again.
    drop(flood);
    other.clear();
    wait_until("slots free", || a.handshake_stats().pending == 0);
    let st = a.handshake_stats();
    assert_eq!(st.refused_over_limit, 0, "{st:?}");
    assert!(rb.ups().len() == 1);
    a.shutdown();
    b.shutdown();
}
