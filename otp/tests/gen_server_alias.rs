//! gen_server calls on the runtime's aliases and requests (one frame each
//! way across nodes, late replies dropped at the alias) and the ref trick
//! (a call skips what was queued before it).

#[macro_use]
mod common;

use graft::testing;
use graft_otp::prelude::*;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(20);

/// Answers `n * 2` after sleeping `wait_ms`.
#[derive(Default, Mobile, Debug)]
struct Doubler;

impl GenServer for Doubler {
    type Call = (u64, u64);
    type Cast = ();
    type Reply = u64;
    fn handle_call(&mut self, (n, wait_ms): (u64, u64), _: &ReplyTo<u64>) -> CallResult<u64> {
        if wait_ms > 0 {
            sleep(Duration::from_millis(wait_ms));
        }
        CallResult::Reply(n * 2)
    }
    fn handle_cast(&mut self, (): ()) -> Flow {
        Flow::Continue
    }
}

fn node(tag: &str) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .cookie(tag)
            .workers(2)
            .heartbeat(Duration::from_secs(30)),
    )
    .unwrap()
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_remote_call_is_one_frame_each_way_and_a_late_reply_is_dropped() {
    let (a, b) = (node("gsa"), node("gsa"));
    let b_id = a.connect(b.addr()).unwrap();
    let server = a
        .run(move || gen_server::start_on(b_id, Doubler).unwrap())
        .unwrap();
    // Warm up.
    a.run(move || assert_eq!(server.call_remote((1, 0)), Ok(2)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (a0, b0) = (testing::frames_received(&a), testing::frames_received(&b));
    let sum = a
        .run(move || {
            (0..10)
                .map(|n| server.call_remote((n, 0)).unwrap())
                .sum::<u64>()
        })
        .unwrap();
    assert_eq!(sum, 90);
    std::thread::sleep(Duration::from_millis(100));
    let (a1, b1) = (testing::frames_received(&a), testing::frames_received(&b));
    assert_eq!(
        (b1.request - b0.request, b1.total() - b0.total()),
        (10, 10),
        "server side: {b0:?} -> {b1:?}"
    );
    assert_eq!(
        (a1.alias - a0.alias, a1.total() - a0.total()),
        (10, 10),
        "caller side: {a0:?} -> {a1:?}"
    );
    // A late reply after a timeout: dropped at the alias.
    let before = testing::frames_received(&a).alias;
    let a_ref = &a;
    let left = a
        .run(move || {
            let r = server.call_remote_timeout((7, 300), Duration::from_millis(20));
            assert_eq!(r, Err(CallError::Timeout));
            // The next call is answered after the late reply was sent.
            assert_eq!(server.call_remote((8, 0)), Ok(16));
            receive()
                .any(|_u: Unknown| ())
                .timeout(Duration::from_millis(50))
                .is_some()
        })
        .unwrap();
    assert!(!left, "the late reply reached the mailbox");
    eventually("the late reply frame", || {
        testing::frames_received(a_ref).alias >= before + 2
    });
    a.shutdown();
    b.shutdown();
}

#[test]
fn remote_call_errors_keep_their_types() {
    let (a, b) = (node("gse"), node("gse"));
    let b_id = a.connect(b.addr()).unwrap();
    a.run(move || {
        let s = gen_server::start_on(b_id, Doubler).unwrap();
        // A protocol of other types: refused at once with the mismatch.
        let wrong: Server<Wrong> = Server::from_pid(s.pid());
        match wrong.call_remote(String::from("x")) {
            Err(CallError::TypeMismatch { .. }) => {}
            other => panic!("expected a type mismatch, got {other:?}"),
        }
        // A dead server: NoProc.
        unlink(s.pid());
        s.stop(ExitReason::Normal).unwrap();
        assert_eq!(s.call_remote((1, 0)), Err(CallError::NoProc));
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}

/// A protocol the server does not speak.
struct Wrong;
impl Protocol for Wrong {
    type Call = String;
    type Cast = ();
    type Reply = u64;
}

otp_test! {
    fn a_call_from_a_deep_mailbox_gets_its_reply_and_keeps_the_mail_in_order() {
        let s = gen_server::start(Doubler).unwrap();
        let me = self_pid();
        for i in 0..100_000u32 {
            send(me, i);
        }
        for n in 0..100u64 {
            assert_eq!(s.call((n, 0)), Ok(2 * n));
        }
        for i in 0..100_000u32 {
            assert_eq!(receive().on(|x: u32| x).timeout(Duration::ZERO), Some(i));
        }
        assert!(common::mailbox_now().is_empty());
    }

    fn a_receive_after_a_mark_finds_later_mail_and_never_earlier_lookalikes() {
        let me = self_pid();
        let r = make_ref();
        // A "reply" carrying the same reference, queued before the mark
        // (as a reply to an earlier call that timed out would be).
        send(me, (r, 1u32));
        let m = mark();
        assert_eq!(
            receive()
                .after(m)
                .when(move |(t, _): &(MonitorRef, u32)| *t == r, |(_, v)| v)
                .timeout(Duration::from_millis(20)),
            None
        );
        spawn(move || send(me, (r, 2u32)));
        assert_eq!(
            receive()
                .after(m)
                .when(move |(t, _): &(MonitorRef, u32)| *t == r, |(_, v)| v)
                .timeout(common::HANG),
            Some(2)
        );
        // The earlier one is still there, for a receive without the mark.
        assert_eq!(
            receive().on(|(_, v): (MonitorRef, u32)| v).timeout(Duration::ZERO),
            Some(1)
        );
    }

    fn a_mark_still_sees_all_later_mail_when_mail_is_taken_in_between() {
        let me = self_pid();
        send(me, 1u8);
        send(me, 2u8);
        let m = mark();
        let r = make_ref();
        send(me, (r, 3u8));
        // Mail taken between the mark and the receives, before and after it.
        assert_eq!(expect::<u8>(), 1);
        send(me, 9u16);
        assert_eq!(expect::<u16>(), 9);
        send(me, (r, 4u8));
        let tagged = move || {
            receive()
                .after(m)
                .when(move |(t, _): &(MonitorRef, u8)| *t == r, |(_, x)| x)
                .timeout(Duration::ZERO)
        };
        assert_eq!(tagged(), Some(3));
        assert_eq!(tagged(), Some(4));
        assert_eq!(tagged(), None);
        assert_eq!(expect::<u8>(), 2);
    }
}
