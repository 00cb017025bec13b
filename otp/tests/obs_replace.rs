//! `sys::replace_state_with`: a mobile function replaces the state of a
//! gen_server on this node or another; typed errors for a state of another
//! type, a function the server's executable lacks, and a panic (issue 14).

use graft_otp::prelude::*;
use graft_otp::sys::ReplaceError;

#[derive(Debug, Default, Mobile)]
struct Counter {
    n: u64,
    log: Vec<String>,
}

impl GenServer for Counter {
    type Call = ();
    type Cast = ();
    type Reply = u64;
    fn handle_call(&mut self, _: (), _: &ReplyTo<u64>) -> CallResult<u64> {
        CallResult::Reply(self.n)
    }
    fn format_status(&self) -> Option<String> {
        sys::debug(self)
    }
}

/// Another server type with a mobile state.
#[derive(Debug, Default, Mobile)]
struct Other {
    s: String,
}

impl GenServer for Other {
    type Call = ();
    type Cast = ();
    type Reply = String;
    fn handle_call(&mut self, _: (), _: &ReplyTo<String>) -> CallResult<String> {
        CallResult::Reply(self.s.clone())
    }
}

fn node() -> Node {
    Node::start(NodeConfig::new("127.0.0.1:0").workers(2).cookie("rep")).unwrap()
}

fn set(n: u64) -> MobileFn<Counter, Counter> {
    MobileFn::new(
        (n, "set".to_string()),
        |(n, why): &(u64, String), mut s: Counter| {
            s.n = *n;
            s.log.push(why.clone());
            s
        },
    )
}

/// Every case against `c` (a Counter at 7) and `o` (an Other), wherever
/// they run.
fn check(c: Server<Counter>, o: Pid, remote: bool) {
    let text = sys::replace_state_with(c, set(42)).unwrap();
    assert!(text.contains("n: 42") && text.contains("\"set\""), "{text}");
    let got = if remote {
        c.call_remote(()).unwrap()
    } else {
        c.call(()).unwrap()
    };
    assert_eq!(got, 42);
    // A panic leaves the state as it was; the server goes on.
    let boom = MobileFn::new((), |(): &(), mut s: Counter| {
        s.n = 0;
        panic!("no {}", s.n)
    });
    match sys::replace_state_with(c, boom) {
        Err(ReplaceError::Panicked(why)) => assert!(why.contains("no 0"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(sys::get_state(c.pid()).unwrap().contains("n: 42"));
    // A server of another type: told, and untouched.
    match sys::replace_state_with(Server::<Counter>::from_pid(o), set(1)) {
        Err(ReplaceError::TypeMismatch { expected, found }) => {
            assert!(expected.contains("Counter"), "{expected}");
            assert!(found.contains("Other"), "{found}");
        }
        other => panic!("{other:?}"),
    }
    // A function the server's executable does not have (a forged id).
    let (mut bytes, id) = sys::encode_replacement(set(5));
    assert_ne!(
        id, 0,
        "this test executable has a table of mobile functions"
    );
    let at = [id.to_le_bytes(), id.to_be_bytes()]
        .iter()
        .find_map(|b| bytes.windows(8).position(|w| w == b))
        .expect("the code id is in the request");
    bytes[at..at + 8].copy_from_slice(&(id ^ 0x5a5a_5a5a).to_le_bytes());
    match sys::replace_state_encoded(c.pid(), bytes) {
        Err(ReplaceError::NotRegistered(why)) => assert!(!why.is_empty()),
        other => panic!("{other:?}"),
    }
    // Junk instead of a function: refused, nothing runs.
    match sys::replace_state_encoded(c.pid(), vec![0xff; 40]) {
        Err(ReplaceError::Call(Error::Remote(why))) => assert!(why.contains("decode"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(sys::get_state(c.pid()).unwrap().contains("n: 42"));
    // Not a behaviour: the sys call times out (typed as the call's error).
    let plain = spawn(|| {
        let _ = receive()
            .on(|_: u8| ())
            .timeout(std::time::Duration::from_secs(30));
    });
    match sys::replace_state_with(Server::<Counter>::from_pid(plain), set(3)) {
        Err(ReplaceError::Call(Error::Timeout)) => {}
        other => panic!("{other:?}"),
    }
    send(plain, 0u8);
}

#[test]
fn replace_state_with_on_a_local_gen_server() {
    let a = node();
    a.run(|| {
        let c = gen_server::start(Counter { n: 7, log: vec![] }).unwrap();
        let o = gen_server::start(Other::default()).unwrap();
        check(c, o.pid(), false);
    })
    .unwrap();
    a.shutdown();
}

#[test]
fn replace_state_with_on_a_remote_gen_server() {
    let (a, b) = (node(), node());
    let b_addr = b.addr();
    a.run(move || {
        let bn = connect(b_addr).unwrap();
        let c = gen_server::start_on(bn, Counter { n: 7, log: vec![] }).unwrap();
        assert_eq!(c.pid().node(), bn);
        let o = gen_server::start_on(bn, Other::default()).unwrap();
        check(c, o.pid(), true);
        // The closure form says clearly that it cannot travel.
        match sys::replace_state(c, |s: &mut Counter| s.n = 0) {
            Err(Error::Remote(why)) => assert!(why.contains("replace_state_with"), "{why}"),
            other => panic!("{other:?}"),
        }
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}
