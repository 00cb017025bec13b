//! gen_server and supervisor across nodes (real TCP on 127.0.0.1).

use graft_otp::prelude::*;
use std::time::{Duration, Instant};

#[derive(Default, Mobile, Debug)]
struct Acc {
    total: i64,
}

#[derive(Debug, Mobile)]
enum AccCast {
    Add(i64),
    Crash,
    Nap(Duration),
}

impl GenServer for Acc {
    type Call = ();
    type Cast = AccCast;
    type Reply = (i64, NodeId);
    fn handle_call(&mut self, (): (), _: &ReplyTo<(i64, NodeId)>) -> CallResult<(i64, NodeId)> {
        CallResult::Reply((self.total, this_node()))
    }
    fn handle_cast(&mut self, m: AccCast) -> Flow {
        match m {
            AccCast::Add(n) => self.total += n,
            AccCast::Crash => panic!("acc crash"),
            AccCast::Nap(d) => sleep(d),
        }
        Flow::Continue
    }
}

fn node() -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .cookie("otp-remote")
            .workers(2)
            .heartbeat(Duration::from_millis(200)),
    )
    .unwrap()
}

#[test]
fn start_on_call_and_cast_remote() {
    let (a, b) = (node(), node());
    let b_id = a.connect(b.addr()).unwrap();
    a.run(move || {
        let acc = gen_server::start_on(b_id, Acc { total: 1 }).unwrap();
        assert_eq!(acc.pid().node(), b_id);
        acc.cast_remote(AccCast::Add(41));
        assert_eq!(acc.call_remote(()).unwrap(), (42, b_id));
        // A crash on the other node reaches us through the link.
        trap_exits(true);
        acc.cast_remote(AccCast::Crash);
        let sig: ExitSignal = receive()
            .when(move |s: &ExitSignal| s.from == acc.pid(), |s| s)
            .timeout(Duration::from_secs(20))
            .expect("the crash reaches us through the link");
        assert_eq!(sig.reason, ExitReason::Other("acc crash".into()));
        assert!(matches!(acc.call_remote(()), Err(CallError::NoProc)));
    })
    .unwrap();
}

#[test]
fn a_supervised_child_on_another_node_is_restarted_and_node_loss_counts_as_death() {
    let (a, b) = (node(), node());
    let b_id = a.connect(b.addr()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let waiter = std::thread::spawn(move || {
        let r = a.run(move || {
            trap_exits(true);
            let sup = Supervisor::new(Strategy::OneForOne)
                .intensity(2, Duration::from_secs(10))
                .child(ChildSpec::server_on("acc", b_id, Acc::default))
                .start()
                .unwrap();
            let first = supervisor::get_child(sup, "acc").unwrap();
            assert_eq!(first.node(), b_id);
            Server::<Acc>::from_pid(first).cast_remote(AccCast::Crash);
            let t = Instant::now();
            let second = loop {
                match supervisor::get_child(sup, "acc") {
                    Some(p) if p != first => break p,
                    _ => {
                        assert!(t.elapsed() < Duration::from_secs(10), "no restart");
                        sleep(Duration::from_millis(5));
                    }
                }
            };
            assert_eq!(second.node(), b_id, "restarted on the same node");
            // Now the node goes away: the child's death is seen, the restarts
            // fail, and the supervisor gives up (intensity).
            let m = monitor(sup);
            tx.send(()).unwrap();
            let d: ProcessDied = receive()
                .when(move |d: &ProcessDied| d.monitor == m, |d| d)
                .timeout(Duration::from_secs(20))
                .expect("the supervisor ends");
            d.reason
        });
        (a, r)
    });
    rx.recv().unwrap();
    b.shutdown();
    let (_a, r) = waiter.join().unwrap();
    let reason = r.unwrap();
    // Giving up on reaching the restart intensity stops it with `Shutdown`.
    assert_eq!(reason, ExitReason::Shutdown);
}

#[test]
fn plain_call_cast_and_stop_reach_a_server_on_another_node() {
    let (a, b) = (node(), node());
    let b_id = a.connect(b.addr()).unwrap();
    a.run(move || {
        let acc = gen_server::start_on(b_id, Acc { total: 0 }).unwrap();
        for n in 1..=100 {
            acc.cast(AccCast::Add(n));
        }
        // Casts and calls from one process arrive in order.
        assert_eq!(acc.call(()).unwrap(), (5050, b_id));
        assert_eq!(
            acc.call_timeout((), Duration::from_secs(5)).unwrap().0,
            5050
        );
        acc.stop(ExitReason::Normal).unwrap();
        assert_eq!(acc.call(()), Err(CallError::NoProc));
    })
    .unwrap();
}

#[test]
fn a_late_remote_reply_never_strays_into_the_mailbox() {
    let (a, b) = (node(), node());
    let b_id = a.connect(b.addr()).unwrap();
    a.run(move || {
        let acc = gen_server::start_on(b_id, Acc { total: 1 }).unwrap();
        acc.cast(AccCast::Nap(Duration::from_millis(300)));
        assert_eq!(
            acc.call_timeout((), Duration::from_millis(20)),
            Err(CallError::Timeout)
        );
        sleep(Duration::from_millis(500)); // the late reply arrives meanwhile
        acc.cast(AccCast::Add(1));
        assert_eq!(
            acc.call(()).unwrap().0,
            2,
            "the fresh answer, not the late one"
        );
        let stray = receive().any(|_| ()).timeout(Duration::ZERO);
        assert!(stray.is_none(), "nothing left in the mailbox");
    })
    .unwrap();
}
