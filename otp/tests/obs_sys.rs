//! `sys` on local and remote gen_servers and supervisors, and what
//! `process_info` says of a supervised gen_server (issue 14).

use graft_otp::prelude::*;
use std::sync::Mutex;
use std::time::Duration;

static RECORDS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;
impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target() == "graft::trace"
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            RECORDS.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

/// Every test installs the logger first: a node started before it would
/// have installed graft's default logger (see `graft::report`).
fn capture() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        log::set_logger(&Capture).unwrap();
        log::set_max_level(log::LevelFilter::Info);
    });
}

#[derive(Debug, Default, Mobile)]
struct Counter {
    n: u64,
}

impl GenServer for Counter {
    type Call = ();
    type Cast = u64;
    type Reply = u64;
    fn handle_call(&mut self, _: (), _: &ReplyTo<u64>) -> CallResult<u64> {
        CallResult::Reply(self.n)
    }
    fn handle_cast(&mut self, k: u64) -> Flow {
        self.n += k;
        Flow::Continue
    }
    fn format_status(&self) -> Option<String> {
        sys::debug(self)
    }
}

/// A server that shows nothing of itself.
struct Secret;
impl GenServer for Secret {
    type Call = ();
    type Cast = ();
    type Reply = ();
    fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
        CallResult::Reply(())
    }
}

fn node() -> Node {
    Node::start(NodeConfig::new("127.0.0.1:0").workers(2).cookie("sys")).unwrap()
}

#[test]
fn sys_on_a_local_gen_server() {
    capture();
    let n = node();
    n.run(|| {
        let c = gen_server::start(Counter::default()).unwrap();
        c.cast(5);
        let state = sys::get_state(c.pid()).unwrap();
        assert!(state.contains("n: 5"), "{state}");
        let after = sys::replace_state(c, |s: &mut Counter| s.n = 42).unwrap();
        assert!(after.contains("n: 42"), "{after}");
        assert_eq!(c.call(()).unwrap(), 42);
        // A state of another type is refused, and the server goes on.
        let wrong = sys::replace_state(Server::<Secret>::from_pid(c.pid()), |_| ());
        assert!(matches!(wrong, Err(Error::Remote(_))), "{wrong:?}");
        assert_eq!(c.call(()).unwrap(), 42);
        // Opting out shows the type's name only.
        let s = gen_server::start(Secret).unwrap();
        let shown = sys::get_state(s.pid()).unwrap();
        assert!(
            shown.contains("Secret") && shown.contains("format_status"),
            "{shown}"
        );
        // Suspended: casts wait, sys requests are answered.
        sys::suspend(c.pid()).unwrap();
        c.cast(1);
        assert!(sys::get_state(c.pid()).unwrap().contains("n: 42"));
        assert_eq!(
            c.call_timeout((), Duration::from_millis(50)),
            Err(CallError::Timeout)
        );
        sys::resume(c.pid()).unwrap();
        assert_eq!(c.call(()).unwrap(), 43);
        // Statistics.
        let st = sys::statistics(c.pid()).unwrap().unwrap();
        assert!(st.runs >= 5, "{st:?}");
        // Trace: what it takes and what it sends.
        assert!(sys::trace(c.pid(), true).unwrap());
        c.cast(1);
        assert_eq!(c.call(()).unwrap(), 44);
        assert!(sys::trace(c.pid(), false).unwrap());
        let me = c.pid().to_string();
        let recs = RECORDS.lock().unwrap().clone();
        let mine: Vec<_> = recs.iter().filter(|r| r.contains(&me)).collect();
        assert!(mine.iter().any(|r| r.contains("received")), "{recs:?}");
        assert!(
            mine.iter()
                .any(|r| r.contains("sent") && r.contains("Reply")),
            "{recs:?}"
        );
        // Not a behaviour: no answer.
        let plain = spawn(|| {
            receive().on(|_: u8| ()).wait();
        });
        assert!(matches!(
            graft::observe::sys_call(
                plain,
                graft::observe::SysOp::GetState,
                Duration::from_millis(50)
            ),
            Err(Error::Timeout)
        ));
        send(plain, 0u8);
    })
    .unwrap();
    n.shutdown();
}

#[test]
fn sys_on_a_remote_gen_server() {
    capture();
    let a = node();
    let b = node();
    let b_addr = b.addr();
    a.run(move || {
        let bn = connect(b_addr).unwrap();
        let c = gen_server::start_on(bn, Counter { n: 7 }).unwrap();
        assert_eq!(c.pid().node(), bn);
        assert!(sys::get_state(c.pid()).unwrap().contains("n: 7"));
        sys::suspend(c.pid()).unwrap();
        sys::resume(c.pid()).unwrap();
        assert!(sys::trace(c.pid(), true).unwrap());
        c.cast_remote(3);
        assert_eq!(c.call_remote(()).unwrap(), 10);
        assert!(sys::trace(c.pid(), false).unwrap());
        let me = c.pid().to_string();
        assert!(RECORDS
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.contains(&me) && r.contains("received")));
        let st = sys::statistics(c.pid()).unwrap().unwrap();
        assert!(st.runs >= 2);
        // replace_state is for this node's servers only.
        assert!(sys::replace_state(c, |s: &mut Counter| s.n = 0).is_err());
        let info = graft::observe::process_info_on(c.pid()).unwrap().unwrap();
        assert!(
            info.initial_call.contains("gen_server") && info.initial_call.contains("Counter"),
            "{info:?}"
        );
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_supervised_gen_server_knows_its_ancestors_and_supervisor() {
    capture();
    let n = node();
    n.run(|| {
        let root = self_pid();
        let sup = Supervisor::new(Strategy::OneForOne)
            .child(ChildSpec::server("counter", Counter::default))
            .start()
            .unwrap();
        let child = supervisor::get_child(sup, "counter").unwrap();
        let info = process_info(child).unwrap();
        assert_eq!(info.parent, Some(sup));
        assert_eq!(info.ancestors, vec![sup, root]);
        assert_eq!(info.supervisor, Some(sup));
        assert!(
            info.initial_call.starts_with("gen_server ") && info.initial_call.ends_with("Counter"),
            "{info:?}"
        );
        assert!(info.links.contains(&sup));
        let s = process_info(sup).unwrap();
        assert!(s.is_supervisor);
        assert_eq!(s.initial_call, "supervisor");
        let state = sys::get_state(sup).unwrap();
        assert!(
            state.contains("OneForOne") && state.contains("child \"counter\""),
            "{state}"
        );
        assert!(state.contains(&child.to_string()), "{state}");
        // A restart is counted.
        let before = graft::observe::node_stats().restarts;
        exit(child, ExitReason::Other("injected".into()));
        let t = std::time::Instant::now();
        while graft::observe::node_stats().restarts == before {
            assert!(t.elapsed() < Duration::from_secs(30), "no restart counted");
            sleep(Duration::from_millis(2));
        }
    })
    .unwrap();
    n.shutdown();
}
