//! What a graft program prints when things crash and no logger is
//! installed: a crash report per crashed process, the supervisor's reports,
//! and nodes coming and going (Erlang's default logger does the same).
//!
//! Run with `cargo run -p graft-examples --bin crash_report` and read
//! stderr.
use graft_otp::prelude::*;
use std::time::Duration;

fn main() {
    // No logger installed: the node installs its stderr reporter.
    let node = Node::start(NodeConfig::new("127.0.0.1:0").cookie("crash-demo")).expect("node");
    let other = Node::start(NodeConfig::new("127.0.0.1:0").cookie("crash-demo")).expect("node");
    let other_addr = other.addr();
    node.run(move || {
        // 1. A plain process that panics.
        let (_, m) = spawn_monitor(|| {
            register("worker", self_pid()).expect("name");
            panic!("boom");
        });
        let died = expect::<ProcessDied>();
        assert_eq!(died.monitor, m);
        println!("worker died: {}", died.reason);

        // 2. A supervised worker that crashes until its supervisor gives up
        //    (the supervisor is linked to us: trap its exit).
        trap_exits(true);
        let sup = Supervisor::new(Strategy::OneForOne)
            .intensity(2, Duration::from_secs(10))
            .child(ChildSpec::new("flaky", || {
                Ok(spawn_link(|| {
                    sleep(Duration::from_millis(20));
                    panic!("flaky worker failed");
                }))
            }))
            .start()
            .expect("supervisor");
        let r = monitor(sup);
        let gone = receive()
            .when(
                move |d: &ProcessDied| d.monitor == r,
                |d: ProcessDied| d.reason,
            )
            .wait();
        println!("supervisor stopped: {gone}");

        // 3. A node comes and goes.
        let peer = connect(other_addr).expect("connect");
        disconnect(peer);
        sleep(Duration::from_millis(100));
    })
    .expect("root");
    other.shutdown();
    node.shutdown();
    println!("done");
}
