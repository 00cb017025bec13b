//! Every `CallError` variant from a real situation, and the gen_server
//! parts a user reaches for first: `Protocol` clients, `Server::at`,
//! `handle_continue`, start options.
#![allow(unreachable_pub)]

use graft_otp::prelude::*;
use std::time::Duration;

/// Two builds of the "same" message type: one field's type drifted.
mod v1 {
    #[derive(Debug, Clone, graft_otp::graft::Mobile)]
    pub struct KvCall {
        pub key: String,
        pub value: u64,
    }
}
mod v2 {
    #[derive(Debug, Clone, graft_otp::graft::Mobile)]
    pub struct KvCall {
        pub key: String,
        pub value: i64,
    }
}

/// The server, built against v1.
#[derive(Default, Mobile)]
struct Kv {
    last: u64,
}

impl GenServer for Kv {
    type Call = v1::KvCall;
    type Cast = v1::KvCall;
    type Reply = u64;
    fn handle_call(&mut self, c: v1::KvCall, _: &ReplyTo<u64>) -> CallResult<u64> {
        self.last = c.value;
        CallResult::Reply(c.value)
    }
    fn handle_cast(&mut self, c: v1::KvCall) -> Flow {
        self.last = c.value;
        Flow::Continue
    }
}

/// A client built against v2: names only the protocol.
struct KvV2;
impl Protocol for KvV2 {
    type Call = v2::KvCall;
    type Cast = v2::KvCall;
    type Reply = u64;
}

/// A client with the right types, and no server impl.
struct KvV1;
impl Protocol for KvV1 {
    type Call = v1::KvCall;
    type Cast = v1::KvCall;
    type Reply = u64;
}

/// A client that expects another reply type.
struct KvWrongReply;
impl Protocol for KvWrongReply {
    type Call = v1::KvCall;
    type Cast = ();
    type Reply = String;
}

/// Another server type altogether.
struct Counter;
impl GenServer for Counter {
    type Call = ();
    type Cast = ();
    type Reply = i32;
    fn handle_call(&mut self, _: (), _: &ReplyTo<i32>) -> CallResult<i32> {
        CallResult::Reply(1)
    }
}

fn put(v: u64) -> v1::KvCall {
    v1::KvCall {
        key: "k".into(),
        value: v,
    }
}

fn node() -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .cookie("otp-errors")
            .workers(2)
            .heartbeat(Duration::from_millis(200)),
    )
    .unwrap()
}

/// The long timeout shows a mismatch is reported at once, not timed out.
const LONG: Duration = Duration::from_secs(120);

fn assert_mismatch(r: Result<u64, CallError>, expected: &str, found: &str, detail: &str) {
    match r {
        Err(CallError::TypeMismatch {
            expected: e,
            found: f,
            detail: d,
        }) => {
            assert!(e.ends_with(expected), "expected {e:?}");
            assert!(f.ends_with(found), "found {f:?}");
            assert!(d.contains(detail), "detail {d:?}");
        }
        other => panic!("not a type mismatch: {other:?}"),
    }
}

#[test]
fn drifted_types_on_one_node_are_a_type_mismatch_naming_the_field() {
    let n = node();
    n.run(|| {
        let kv = gen_server::start(Kv::default()).unwrap();
        let old = Server::<KvV2>::from_pid(kv.pid());
        let r = old.call_timeout(
            v2::KvCall {
                key: "k".into(),
                value: -1,
            },
            LONG,
        );
        assert_mismatch(
            r,
            "v1::KvCall",
            "v2::KvCall",
            "KvCall.value: `u64` expected, `i64` found",
        );
        // The server is fine, and a client naming the right protocol works.
        let good = Server::<KvV1>::from_pid(kv.pid());
        assert_eq!(good.call(put(7)).unwrap(), 7);
        // A reply type that differs is caught too (before the call runs).
        let r = Server::<KvWrongReply>::from_pid(kv.pid()).call_timeout(put(8), LONG);
        match r {
            Err(CallError::TypeMismatch {
                expected,
                found,
                detail,
            }) => {
                assert_eq!(
                    (expected.as_str(), found.as_str()),
                    ("u64", "alloc::string::String")
                );
                assert!(detail.contains("reply type"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(good.call(put(9)).unwrap(), 9);
    })
    .unwrap();
    n.shutdown();
}

#[test]
fn a_pid_running_another_server_type_is_a_type_mismatch() {
    let n = node();
    n.run(|| {
        let counter = gen_server::start(Counter).unwrap();
        let wrong = Server::<Kv>::from_pid(counter.pid());
        let r = wrong.call_timeout(put(1), LONG);
        match &r {
            Err(CallError::TypeMismatch { detail, .. }) => {
                assert!(detail.contains("Counter"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        assert!(r.unwrap_err().to_string().contains("type mismatch"));
        assert_eq!(counter.call(()).unwrap(), 1);
    })
    .unwrap();
    n.shutdown();
}

#[test]
fn drifted_types_across_nodes_are_a_type_mismatch_naming_the_field() {
    let (a, b) = (node(), node());
    let b_id = a.connect(b.addr()).unwrap();
    a.run(move || {
        let kv = gen_server::start_on(b_id, Kv::default()).unwrap();
        let r = Server::<KvV2>::from_pid(kv.pid()).call_timeout(
            v2::KvCall {
                key: "k".into(),
                value: 3,
            },
            LONG,
        );
        assert_mismatch(
            r,
            "v1::KvCall",
            "v2::KvCall",
            "KvCall.value: `u64` expected, `i64` found",
        );
        // Another server type on the other node.
        let counter = gen_server::start_on(b_id, Kv::default()).unwrap();
        let r = Server::<Counter>::from_pid(counter.pid()).call_timeout((), LONG);
        assert!(matches!(r, Err(CallError::TypeMismatch { .. })), "{r:?}");
        // A right client is served.
        assert_eq!(Server::<KvV1>::from_pid(kv.pid()).call(put(5)).unwrap(), 5);
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_lost_node_is_no_connection_and_other_failures_have_their_variants() {
    let (a, b) = (node(), node());
    let b_id = a.connect(b.addr()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    b.spawn(move || {
        gen_server::start_named("kv", Kv::default()).unwrap();
        tx.send(()).unwrap();
        expect::<()>();
    })
    .unwrap();
    rx.recv().unwrap();
    let b_addr = b.addr();
    let b = std::sync::Arc::new(b);
    let b2 = b.clone();
    a.run(move || {
        // By name on the other node, typed by the protocol alone.
        let kv = Server::<KvV1>::at(("kv", b_id)).unwrap();
        assert_eq!(kv.call(put(2)).unwrap(), 2);
        assert_eq!(
            Server::<KvV1>::at(("nobody", b_id)).unwrap_err(),
            CallError::NoProc
        );
        // The node goes away: a call fails with NoConnection.
        graft::blocking(move || b2.shutdown());
        let r = kv.call_timeout(put(3), LONG);
        assert_eq!(r, Err(CallError::NoConnection));
        assert_eq!(
            Server::<KvV1>::at(("kv", b_id)).unwrap_err(),
            CallError::NoConnection
        );
        let _ = b_addr;

        // Local: no process, exit during the call, timeout.
        let dead = spawn(|| {});
        let m = monitor(dead);
        receive()
            .when(move |d: &ProcessDied| d.monitor == m, |_| ())
            .wait();
        assert_eq!(
            Server::<Kv>::from_pid(dead).call(put(1)),
            Err(CallError::NoProc)
        );
        struct Crash;
        impl GenServer for Crash {
            type Call = Duration;
            type Cast = ();
            type Reply = ();
            fn handle_call(&mut self, nap: Duration, _: &ReplyTo<()>) -> CallResult<()> {
                if nap.is_zero() {
                    panic!("boom");
                }
                sleep(nap);
                CallResult::Reply(())
            }
        }
        let c = gen_server::start(Crash).unwrap();
        unlink(c.pid());
        assert_eq!(
            c.call_timeout(Duration::from_secs(3600), Duration::from_millis(10)),
            Err(CallError::Timeout)
        );
        let c = gen_server::start(Crash).unwrap();
        unlink(c.pid());
        assert_eq!(
            c.call(Duration::ZERO),
            Err(CallError::Exited(ExitReason::Other("boom".into())))
        );
    })
    .unwrap();
    a.shutdown();
}

#[test]
fn init_continue_runs_before_any_message_and_callbacks_can_continue() {
    #[derive(Default)]
    struct Steps(Vec<String>);
    impl GenServer for Steps {
        type Call = ();
        type Cast = String;
        type Reply = Vec<String>;
        fn init(&mut self) -> Result<(), ExitReason> {
            self.0.push("init".into());
            gen_server::continue_with(1u32);
            Ok(())
        }
        fn handle_continue(&mut self, arg: Continue) -> Flow {
            let n = arg.downcast::<u32>().unwrap();
            self.0.push(format!("continue {n}"));
            if n < 3 {
                gen_server::continue_with(n + 1);
            }
            Flow::Continue
        }
        fn handle_cast(&mut self, s: String) -> Flow {
            self.0.push(s);
            gen_server::continue_with(10u32);
            Flow::Continue
        }
        fn handle_call(&mut self, _: (), _: &ReplyTo<Vec<String>>) -> CallResult<Vec<String>> {
            CallResult::Reply(self.0.clone())
        }
    }
    let n = node();
    let steps = n
        .run(|| {
            // The casts are queued before the continuations run: they still
            // come after every continuation.
            let s = gen_server::start(Steps::default()).unwrap();
            s.cast("cast".into());
            s.call(()).unwrap()
        })
        .unwrap();
    assert_eq!(
        steps,
        [
            "init",
            "continue 1",
            "continue 2",
            "continue 3",
            "cast",
            "continue 10"
        ]
    );
    n.shutdown();
}

#[test]
fn start_options_name_timeout_and_spawn_options() {
    struct Slow(Duration);
    impl GenServer for Slow {
        type Call = ();
        type Cast = ();
        type Reply = ();
        fn init(&mut self) -> Result<(), ExitReason> {
            sleep(self.0);
            Ok(())
        }
        fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
            CallResult::Reply(())
        }
    }
    let n = node();
    n.run(|| {
        let opts = StartOpts::new()
            .name("slow")
            .timeout(Duration::from_millis(20));
        let r = gen_server::start_with(Slow(Duration::from_secs(3600)), opts.clone());
        assert_eq!(r.map(|s| s.pid()), Err(StartError::Timeout));
        // The stuck process was killed: the name is free again.
        assert_eq!(whereis("slow"), None);
        let opts = opts
            .timeout(Duration::from_secs(60))
            .spawn_opts(spawn_opts().stack_size(256 * 1024));
        let s = gen_server::start_with(Slow(Duration::ZERO), opts).unwrap();
        assert_eq!(Server::<Slow>::at("slow").unwrap(), s);
        s.call(()).unwrap();
        // The starter is still alive and linked to nothing stuck.
        assert!(mailbox_is_empty());
    })
    .unwrap();
    n.shutdown();
}

fn mailbox_is_empty() -> bool {
    receive()
        .any(|_: Unknown| ())
        .timeout(Duration::ZERO)
        .is_none()
}

#[test]
#[should_panic(expected = "Server::call called outside a graft process")]
fn a_call_outside_a_process_names_the_call() {
    let pid = graft::Pid::new(NodeId(1), 1, 1);
    let _ = Server::<Counter>::from_pid(pid).call(());
}

/// A crate that reaches graft through a path of its own says so.
#[derive(Debug, PartialEq, graft_otp::graft::Mobile)]
#[mobile(crate = graft_otp::graft)]
struct Reexported {
    n: u32,
}

#[test]
fn the_derive_takes_a_crate_path() {
    let bytes = graft_otp::graph::encode(&Reexported { n: 4 });
    assert_eq!(
        graft_otp::graph::decode::<Reexported>(&bytes).unwrap(),
        Reexported { n: 4 }
    );
}

#[test]
#[should_panic(expected = "supervisor::which_children called outside a graft process")]
fn a_supervisor_call_outside_a_process_names_the_call() {
    let _ = supervisor::which_children(graft::Pid::new(NodeId(1), 1, 1));
}
