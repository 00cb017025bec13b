//! The paper's `Apply` worker: a message that carries a function.
//!
//! Two nodes live in this OS process and talk over real TCP on 127.0.0.1.
//! Node `a` spawns a worker on node `b`, then sends it `Apply` messages whose
//! function captures a value of the sender (`offset`, a list of weights).
//! The worker applies each function to the argument and sends the result
//! back. The function crosses the wire as a code reference plus its
//! environment; nothing about it is declared in advance.
//!
//! ```text
//! apply_worker
//! ```

use graft::graph::MobileFn;
use graft_otp::prelude::*;

/// A request to the worker: apply `f` to `x` and send the answer to `reply_to`.
#[derive(Debug, Clone, Mobile)]
enum Request {
    /// The paper's `Apply (Int -> Int) Int Pid`.
    Apply(MobileFn<i64, i64>, i64, Pid),
    /// Stop the worker.
    Stop,
}

/// The worker's answer: the result and the node that computed it.
#[derive(Debug, Clone, Mobile)]
struct Answer {
    /// `f(x)`.
    value: i64,
    /// Where `f` ran.
    node: String,
}

/// The worker loop (runs on node `b`).
fn worker(_: ()) {
    // Until `Stop`.
    while let Request::Apply(f, x, reply_to) = expect::<Request>() {
        let value = f.call(x);
        let node = graft::node_name(this_node()).unwrap_or_default();
        send(reply_to, Answer { value, node });
    }
}

fn main() {
    env_logger::init();
    let config = |name: &str| NodeConfig::new("127.0.0.1:0").name(name).cookie("apply");
    let a = Node::start(config("a@127.0.0.1")).expect("node a starts");
    let b = Node::start(config("b@127.0.0.1")).expect("node b starts");
    let b_addr = b.addr();
    println!("apply_worker: node a at {}, node b at {}", a.addr(), b_addr);
    a.run(move || {
        let b_id = graft::connect(b_addr).expect("a connects to b");
        let w = graft::spawn_on(b_id, (), worker).expect("remote spawn");
        println!(
            "apply_worker: worker {w} runs on {}",
            graft::node_name(w.node()).unwrap_or_default()
        );
        let me = self_pid();

        // The paper's example: a function that captures `offset`.
        let offset = 1i64;
        let add = MobileFn::new(offset, |offset: &i64, x: i64| x + offset);
        send(w, Request::Apply(add, 41, me));
        let Answer { value, node } = expect();
        println!("apply_worker: (\\x -> x + offset) 41 = {value} (computed on {node})");

        // A bigger environment: a polynomial with captured coefficients.
        let coeffs = vec![3i64, 0, 2]; // 3 + 2x^2
        let poly = MobileFn::new(coeffs, |c: &Vec<i64>, x: i64| {
            c.iter().rev().fold(0, |acc, k| acc * x + k)
        });
        for x in [0, 1, 5] {
            send(w, Request::Apply(poly.clone(), x, me));
            let Answer { value, node } = expect();
            println!("apply_worker: (3 + 2x^2) at {x} = {value} (computed on {node})");
        }

        let m = monitor(w);
        send(w, Request::Stop);
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, m);
        println!("apply_worker: worker stopped ({})", d.reason);
    })
    .expect("the root process finishes");
    a.shutdown();
    b.shutdown();
}
