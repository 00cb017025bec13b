//! The README's first command: a three-node graft cluster on loopback, in one
//! OS process, over real TCP.
//!
//! 1. a remote spawn whose body captures local variables (explicitly);
//! 2. the paper's `interesting` count, computed on another node;
//! 3. a message carrying a function (the paper's `Apply`);
//! 4. a supervised counter gen_server on another node, crashed and restarted;
//! 5. a node leaving, seen as `ProcessDied { reason: NoConnection }`;
//! 6. a connection cut (`disconnect`, as `erlang:disconnect_node`) and joined
//!    again, the processes on both sides untouched.
//!
//! `cargo run --release -p graft-examples --bin demo`

use graft::graph::MobileFn;
use graft_otp::prelude::*;
use std::time::{Duration, Instant};

/// The counter of step 4.
#[derive(Default)]
struct Counter {
    count: i64,
}

/// What the counter is asked.
#[derive(Debug, Mobile)]
enum CounterCall {
    Get,
}

/// What the counter is told.
#[derive(Debug, Mobile)]
enum CounterCast {
    Add(i64),
    Crash,
}

impl GenServer for Counter {
    type Call = CounterCall;
    type Cast = CounterCast;
    type Reply = i64;

    fn handle_call(&mut self, _: CounterCall, _: &ReplyTo<i64>) -> CallResult<i64> {
        CallResult::Reply(self.count)
    }

    fn handle_cast(&mut self, msg: CounterCast) -> Flow {
        match msg {
            CounterCast::Add(n) => self.count += n,
            CounterCast::Crash => panic!("counter told to crash"),
        }
        Flow::Continue
    }
}

/// The paper's `Apply` protocol: a function and its argument, or a result.
#[derive(Debug, Mobile)]
enum Apply {
    Run(MobileFn<u64, u64>, u64, Pid),
    Result(u64),
}

fn step(n: u32, what: &str) {
    println!("\n[{n}] {what}");
}

/// The counter on this node: whether it is registered, and its value.
fn counter_state(name: String) -> (Option<Pid>, Option<i64>) {
    let server = Server::<Counter>::whereis(&name);
    let value = server.and_then(|s| s.call(CounterCall::Get).ok());
    (server.map(|s| s.pid()), value)
}

/// Casts to the counter on this node (run on beta through `call_on`).
fn counter_cast(msg: CounterCast) {
    if let Some(s) = Server::<Counter>::whereis("counter") {
        s.cast(msg);
    }
}

fn main() {
    env_logger::init();
    let t0 = Instant::now();
    let start = |name: &str| {
        Node::start(
            NodeConfig::new("127.0.0.1:0")
                .name(name)
                .cookie("graft-demo")
                .heartbeat(Duration::from_millis(250)),
        )
        .expect("a node starts")
    };
    let (a, b, c) = (
        start("alpha@127.0.0.1"),
        start("beta@127.0.0.1"),
        start("gamma@127.0.0.1"),
    );
    println!("graft demo: three nodes on loopback");
    for n in [&a, &b, &c] {
        println!("  {} listening on {}", n.name(), n.addr());
    }
    // alpha joins beta, gamma joins beta: the mesh connects alpha and gamma.
    a.connect(b.addr()).expect("alpha joins beta");
    c.connect(b.addr()).expect("gamma joins beta");
    let t = Instant::now();
    while a.nodes().len() < 2 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("  alpha sees {} peers (full mesh)", a.nodes().len());
    let (b_id, c_id) = (b.id(), c.id());
    let b_addr = b.addr();

    a.run(move || {
        step(1, "remote spawn with captured variables");
        let me = self_pid();
        let (greeting, times) = (String::from("hello from beta"), 3u32);
        let pid = spawn_on(b_id, (me, greeting, times), |(to, greeting, times)| {
            for i in 1..=times {
                send(
                    to,
                    format!("{greeting} ({i}/{times}), running as {}", self_pid()),
                );
            }
        })
        .expect("remote spawn");
        println!("  spawned {pid} on beta");
        for _ in 0..3 {
            println!("  alpha got: {}", expect::<String>());
        }

        step(2, "the paper's `interesting` count, computed on beta");
        let t = Instant::now();
        let count = call_on(b_id, 1_000_000u64, |n| {
            (1..=n).filter(|x| x % 7 == 0 && x % 11 == 0).count() as u64
        })
        .expect("call_on");
        println!(
            "  interesting numbers in 1..=1,000,000: {count} ({:?})",
            t.elapsed()
        );
        assert_eq!(count, 12_987);

        step(3, "a message carrying a function (Apply)");
        let worker = spawn_on(c_id, (), |()| loop {
            match expect::<Apply>() {
                Apply::Run(f, x, reply) => send(reply, Apply::Result(f.call(x))),
                Apply::Result(_) => return,
            }
        })
        .expect("remote spawn");
        let (scale, offset) = (3u64, 1u64);
        let f = MobileFn::new((scale, offset), |(s, o): &(u64, u64), x: u64| x * s + o);
        send(worker, Apply::Run(f, 14, self_pid()));
        match expect::<Apply>() {
            Apply::Result(r) => println!("  gamma applied |x| x*{scale}+{offset} to 14: {r}"),
            other => println!("  unexpected {other:?}"),
        }

        step(
            4,
            "a supervised counter gen_server on beta, crashed and restarted",
        );
        spawn_on(b_id, (), |()| {
            let sup = Supervisor::new(Strategy::OneForOne)
                .intensity(3, Duration::from_secs(5))
                .child(ChildSpec::server_named("counter", Counter::default))
                .start()
                .expect("supervisor starts");
            register("counter_sup", sup).expect("name free");
            expect::<()>(); // keep the tree's parent alive
        })
        .expect("remote spawn");
        let wait_counter = |old: Option<Pid>| {
            let t = Instant::now();
            loop {
                let (pid, value) =
                    call_on(b_id, String::from("counter"), counter_state).expect("call_on");
                if let (Some(pid), Some(value)) = (pid, value) {
                    if Some(pid) != old {
                        return (pid, value);
                    }
                }
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "counter never came up"
                );
                sleep(Duration::from_millis(10));
            }
        };
        let (first, _) = wait_counter(None);
        for n in [5i64, 10, 27] {
            call_on(b_id, CounterCast::Add(n), counter_cast).expect("call_on");
        }
        let (_, value) = call_on(b_id, String::from("counter"), counter_state).expect("call_on");
        println!("  counter {first} on beta counts {}", value.unwrap_or(-1));
        let m = monitor(first);
        println!(
            "  crashing it on purpose: the ERROR lines below (on stderr) are beta's crash report, \
             as an OTP node logs one; nothing is wrong"
        );
        call_on(b_id, CounterCast::Crash, counter_cast).expect("call_on");
        let d: ProcessDied = receive()
            .when(move |d: &ProcessDied| d.monitor == m, |d| d)
            .wait();
        println!("  counter {} died: {}", d.pid, d.reason);
        let (second, value) = wait_counter(Some(first));
        println!("  the supervisor restarted it as {second}, counting from {value}");

        step(5, "a node leaving: gamma goes away");
        let watched = spawn_on(c_id, (), |()| {
            expect::<()>();
        })
        .expect("remote spawn");
        let m = monitor(watched);
        println!("  alpha monitors {watched} on gamma; gamma shuts down");
        blocking(move || c.shutdown());
        let d: ProcessDied = receive()
            .when(move |d: &ProcessDied| d.monitor == m, |d| d)
            .timeout(Duration::from_secs(10))
            .expect("the monitor fires");
        println!(
            "  alpha saw ProcessDied {{ pid: {}, reason: {} }}",
            d.pid, d.reason
        );
        let t = Instant::now();
        while nodes().len() > 1 && t.elapsed() < Duration::from_secs(10) {
            sleep(Duration::from_millis(5));
        }
        println!("  alpha now sees {} peer(s)", nodes().len());

        step(
            6,
            "a cut connection: alpha disconnects beta, then joins again",
        );
        let m = monitor(second);
        disconnect(b_id);
        let d: ProcessDied = receive()
            .when(move |d: &ProcessDied| d.monitor == m, |d| d)
            .timeout(Duration::from_secs(10))
            .expect("the monitor fires");
        println!("  alpha's monitor on {} fired: {}", d.pid, d.reason);
        connect(b_addr).expect("alpha joins beta again");
        call_on(b_id, CounterCast::Add(1), counter_cast).expect("call_on");
        let (pid, value) = call_on(b_id, String::from("counter"), counter_state).expect("call_on");
        let same = if pid == Some(second) {
            "the same"
        } else {
            "another"
        };
        println!(
            "  rejoined: {same} counter {second} on beta counts {}",
            value.unwrap_or(-1)
        );
    })
    .expect("alpha runs");
    b.shutdown();
    a.shutdown();
    println!("\ndemo finished in {:?}", t0.elapsed());
}
