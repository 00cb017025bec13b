//! The paper's selective-receive server: `Div` requests and `Shutdown`.
//!
//! The server's receive has two clauses: a *guarded* `Div` clause that only
//! takes division requests with a non-zero divisor, and a `Shutdown` clause.
//! A `Div` by zero matches neither clause, so it stays in the mailbox, in
//! order, untouched. Only when the server is asked to stop does it turn to
//! what is left: it answers each leftover request with an error, then stops.
//!
//! The client queues everything *before* the server looks at its mailbox
//! (the server waits for a `Go`), so the output shows selective receive
//! skipping messages: `Shutdown` arrives before the last good `Div`, but the
//! server keeps serving good requests first — `Shutdown` is taken only when
//! no good `Div` is pending ("stops only after pending work").
//!
//! ```text
//! div_server
//! ```

use graft_otp::prelude::*;
use std::time::Duration;

/// A request: divide `a` by `b`, answer to `from`.
#[derive(Debug, Clone, Mobile)]
struct Div {
    /// Who wants the answer.
    from: Pid,
    /// Dividend.
    a: i64,
    /// Divisor.
    b: i64,
}

/// Asks the server to stop.
#[derive(Debug, Clone, Mobile)]
struct Shutdown;

/// Starts the server once the client has queued its requests.
#[derive(Debug, Clone, Mobile)]
struct Go;

/// The server's answer to one `Div`.
#[derive(Debug, Clone, Mobile)]
struct Quotient {
    /// The request it answers.
    a: i64,
    /// The request it answers.
    b: i64,
    /// `a / b`, or why not.
    result: Result<i64, String>,
}

/// What one pass of the server's receive took.
enum Step {
    Served,
    Stop,
}

/// Answers a good request.
fn divide(d: Div) -> Step {
    println!("div_server: {} / {} = {}", d.a, d.b, d.a / d.b);
    let result = Ok(d.a / d.b);
    send(
        d.from,
        Quotient {
            a: d.a,
            b: d.b,
            result,
        },
    );
    Step::Served
}

fn server() {
    expect::<Go>();
    loop {
        // Good division requests first: a `Div` by zero does not match the
        // guard and stays in the mailbox; `Shutdown` waits while a good
        // request is pending (a zero-timeout receive looks for one first).
        let good = |d: &Div| d.b != 0;
        if receive()
            .when(good, divide)
            .timeout(Duration::ZERO)
            .is_some()
        {
            continue;
        }
        let step = receive()
            .when(good, divide)
            .on(|Shutdown| Step::Stop)
            .wait();
        if let Step::Stop = step {
            break;
        }
    }
    // Pending work: the requests the guard left behind, in arrival order.
    let mut left = 0;
    while let Some(d) = expect_timeout::<Div>(Duration::ZERO) {
        left += 1;
        println!(
            "div_server: {} / {} left in the mailbox: answering with an error",
            d.a, d.b
        );
        send(
            d.from,
            Quotient {
                a: d.a,
                b: d.b,
                result: Err("division by zero".into()),
            },
        );
    }
    println!("div_server: shutting down after {left} leftover request(s)");
}

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    node.run(|| {
        let srv = spawn(server);
        let m = monitor(srv);
        let me = self_pid();
        let requests = [(10, 2), (7, 0), (9, 3), (1, 0), (100, 7)];
        for (i, (a, b)) in requests.into_iter().enumerate() {
            send(srv, Div { from: me, a, b });
            if i == 3 {
                // Shutdown overtakes the last good request in the mailbox.
                send(srv, Shutdown);
            }
        }
        println!(
            "div_server: queued {} requests and a Shutdown (5th of 6 messages)",
            requests.len()
        );
        send(srv, Go);
        for _ in 0..requests.len() {
            let q: Quotient = expect();
            match q.result {
                Ok(v) => println!("client: {} / {} -> {v}", q.a, q.b),
                Err(e) => println!("client: {} / {} -> error: {e}", q.a, q.b),
            }
        }
        let d: ProcessDied = expect();
        assert_eq!(d.monitor, m);
        println!("client: server stopped ({})", d.reason);
    })
    .expect("the root process finishes");
    node.shutdown();
}
