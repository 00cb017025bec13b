//! Extreme arguments get an error or their meaning, never a panic: a
//! `Duration::MAX` timeout means "forever", a stack or a heartbeat past its
//! bounds is refused.

mod common;

use graft::*;
use std::time::Duration;

const FOREVER: Duration = Duration::MAX;

#[test]
fn forever_timeouts_wait_for_what_is_already_there() {
    let node = common::node(1);
    node.run(|| {
        send(self_pid(), 1u8);
        assert_eq!(expect_timeout::<u8>(FOREVER), Some(1));
        send(self_pid(), 2u8);
        assert_eq!(receive().on(|x: u8| x).timeout(FOREVER), Some(2));
        let (tx, rx) = channel::<u8>();
        tx.send(3).unwrap();
        assert_eq!(rx.recv_timeout(FOREVER).unwrap(), 3);
        let (p, f) = promise::<u8>();
        p.fulfil(4);
        assert_eq!(f.wait_timeout(FOREVER).ok(), Some(&4));
        // Never fires; cancelled.
        let t = send_after(FOREVER, self_pid(), 5u8);
        assert!(cancel_timer(t));
        sleep(Duration::from_millis(1));
        assert_eq!(expect_timeout::<u8>(Duration::ZERO), None);
    })
    .unwrap();
    node.shutdown();
}

#[test]
fn stacks_past_the_limit_are_refused() {
    let node = common::node(1);
    node.run(|| {
        let r = spawn_opts().stack_size(usize::MAX).spawn(|| {});
        assert!(
            matches!(&r, Err(Error::Resource(m)) if m.contains("at most")),
            "{r:?}"
        );
        let g = Generator::<u8, ()>::try_with_stack_size(usize::MAX, |_| {});
        assert_eq!(
            g.err().map(|e| e.kind()),
            Some(std::io::ErrorKind::InvalidInput)
        );
    })
    .unwrap();
    node.shutdown();
    let r = Node::start(NodeConfig::new("127.0.0.1:0").stack_size(usize::MAX));
    assert!(matches!(r, Err(Error::Io(_))), "{:?}", r.err());
}

#[test]
fn a_heartbeat_past_its_bounds_is_refused_and_a_forever_shutdown_timeout_works() {
    for tick in [Duration::MAX, Duration::ZERO, Duration::from_micros(100)] {
        let r = Node::start(NodeConfig::new("127.0.0.1:0").heartbeat(tick));
        assert!(
            matches!(&r, Err(e) if e.to_string().contains("heartbeat")),
            "heartbeat {tick:?}: {:?}",
            r.err()
        );
    }
    let node = Node::start(NodeConfig::new("127.0.0.1:0").shutdown_timeout(FOREVER)).unwrap();
    node.spawn(|| {
        expect::<()>();
    })
    .unwrap();
    node.shutdown();
    assert_eq!(node.process_count(), 0);
}
