//! Fault containment under supervision: a child that overflows its stack is
//! one crash among others (issue 13).

mod common;

use common::{down_reason, wait_until, HANG};
use graft_otp::prelude::*;

/// A server that counts, and recurses without end on `Deep`.
struct Deep {
    n: u64,
}

#[derive(Debug, graft::Mobile)]
enum Cmd {
    Deep,
    Bump,
}

fn recurse(n: u64, limit: u64) -> u64 {
    let pad = std::hint::black_box([n; 64]);
    if n == limit {
        return pad[0];
    }
    recurse(n + 1, limit) + pad[1]
}

impl GenServer for Deep {
    type Call = ();
    type Cast = Cmd;
    type Reply = u64;

    fn handle_call(&mut self, _: (), _: &ReplyTo<u64>) -> CallResult<u64> {
        CallResult::Reply(self.n)
    }
    fn handle_cast(&mut self, cmd: Cmd) -> Flow {
        match cmd {
            Cmd::Deep => self.n = recurse(0, std::hint::black_box(u64::MAX)),
            Cmd::Bump => self.n += 1,
        }
        Flow::Continue
    }
}

#[test]
fn a_supervised_child_that_overflows_is_restarted() {
    let node = common::node(2);
    node.run(|| {
        let sup = Supervisor::new(Strategy::OneForOne)
            .child(ChildSpec::server("deep", || Deep { n: 0 }))
            .child(ChildSpec::server("other", || Deep { n: 0 }))
            .start()
            .unwrap();
        let other = Server::<Deep>::from_pid(supervisor::get_child(sup, "other").unwrap());
        other.cast(Cmd::Bump);
        let first = supervisor::get_child(sup, "deep").unwrap();
        let r = monitor(first);
        Server::<Deep>::from_pid(first).cast(Cmd::Deep);
        assert_eq!(down_reason(r), ExitReason::StackOverflow);
        wait_until("the child is restarted", || {
            supervisor::get_child(sup, "deep").is_some_and(|p| p != first)
        });
        let again = Server::<Deep>::from_pid(supervisor::get_child(sup, "deep").unwrap());
        assert_eq!(again.call(()).unwrap(), 0, "a fresh child");
        // The sibling and the supervisor were untouched.
        assert_eq!(other.call(()).unwrap(), 1, "the sibling kept its state");
        assert!(is_alive(sup));
        let _ = HANG;
    })
    .unwrap();
    node.shutdown();
}
